"""Validate rendered resources against the real schemas, and the manifests Objects carry too.

- Composed resources: `crossplane beta validate --error-on-missing-schemas` against the XRDs in
  apis/, the provider and Crossplane CRDs in ../shared/crds, with schema defaults, unknown fields
  and CEL, as the API server would.
- Manifests inside provider-kubernetes Objects go to the workload cluster: those of CRD kinds
  (cert-manager, Gateway API, ...) through the same validate call against ../shared/crds/workload,
  core kinds (StorageClass, Namespace, Deployment, ...) against the Kubernetes OpenAPI schema of
  the `kubernetes-validate` package, strictly (unknown fields are errors). Core kinds composed
  directly (Nebius's cloud-init Secret) are checked that way too.
"""

import functools
import json
import subprocess
from pathlib import Path

import kubernetes_validate
import yaml

from tests.conftest import APIS, CROSSPLANE_IMAGE, crd_files

# The Kubernetes version whose core schemas embedded manifests are checked against (the oldest
# default the API admits: 1.34 on AKS and Nebius; kubernetes-validate ships 1.35 as the closest).
KUBERNETES_VERSION = "1.35"
# Core kinds have no CRD; validate reports them as missing schemas, so they go the other way.
CORE_GROUPS = {
    "",
    "v1",
    "apps",
    "batch",
    "policy",
    "autoscaling",
    "rbac.authorization.k8s.io",
    "storage.k8s.io",
    "admissionregistration.k8s.io",
    "apiregistration.k8s.io",
    "scheduling.k8s.io",
    "networking.k8s.io",
    "resource.k8s.io",
    "coordination.k8s.io",
    "node.k8s.io",
}
CORE_CRD_KIND = ("apiextensions.k8s.io", "CustomResourceDefinition")


def group_of(doc: dict) -> str:
    api = doc.get("apiVersion", "")
    return api.split("/")[0] if "/" in api else ""


def is_core(doc: dict) -> bool:
    return group_of(doc) in CORE_GROUPS or (group_of(doc), doc.get("kind")) == CORE_CRD_KIND


def embedded(docs: list[dict]) -> list[dict]:
    """The manifests provider-kubernetes Objects apply (an Observe-only one only names what it
    reads: provider-kubernetes never sends it to the API server)."""
    return [
        d["spec"]["forProvider"]["manifest"]
        for d in docs
        if d.get("kind") == "Object"
        and d.get("apiVersion", "").startswith("kubernetes.")
        and d["spec"].get("managementPolicies") != ["Observe"]
    ]


def unique(docs: list[dict]) -> list[dict]:
    return list({yaml.safe_dump(d, sort_keys=True): d for d in docs}.values())


def validate_everything(
    crossplane: str, cache: Path, docs: list[dict], workdir: Path
) -> tuple[int, str]:
    """Validate composed docs and their embedded manifests; returns (count, validate's report).

    Fails the calling test on any error.
    """
    composed = [d for d in docs if d.get("kind") != "Result"]
    extensions = [APIS, *crd_files()]
    return validate_manifests(crossplane, cache, composed + embedded(composed), workdir, extensions)


def validate_manifests(
    crossplane: str, cache: Path, docs: list[dict], workdir: Path, extensions: list[Path]
) -> tuple[int, str]:
    """Core kinds against the Kubernetes schema, strictly; every other kind through `crossplane beta
    validate` against the CRDs in extensions (files or folders). Fails the calling test on any
    error; returns (count, validate's report)."""
    core = unique([d for d in docs if is_core(d)])
    for manifest in core:
        # Raises kubernetes_validate.ValidationError naming the field.
        kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)
    checked = unique([d for d in docs if not is_core(d)])
    if not checked:
        return len(core), ""
    path = workdir / "rendered.yaml"
    # JSON documents (JSON is YAML): PyYAML writes strings like y or 1e3 bare, and Go's YAML reads
    # those as a bool and a number.
    path.write_text("\n---\n".join(json.dumps(d) for d in checked) + "\n")
    proc = subprocess.run(
        [
            crossplane,
            "beta",
            "validate",
            f"--cache-dir={cache}",
            f"--crossplane-image={CROSSPLANE_IMAGE}",
            "--error-on-missing-schemas",
            "--skip-success-results",
            ",".join(str(p) for p in extensions),
            str(path),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    report = proc.stdout + proc.stderr
    assert proc.returncode == 0, report
    assert f"Total {len(checked)} resources: 0 missing schemas" in report, report
    assert "0 failure cases" in report, report
    return len(checked) + len(core), report


ACTIVATION_POLICY = (
    Path(__file__).resolve().parent.parent
    / "package"
    / "configuration"
    / ("activation-policy.yaml")
)


@functools.cache
def _plurals() -> dict[tuple[str, str], str]:
    plurals = {}
    for path in crd_files():
        crd = yaml.safe_load(path.read_text())
        if crd.get("kind") == "CustomResourceDefinition":
            spec = crd["spec"]
            plurals[(spec["group"], spec["names"]["kind"])] = spec["names"]["plural"]
    return plurals


def managed_resource_definitions(docs) -> set[str]:
    """The ManagedResourceDefinition names (<plural>.<group>) of the managed resources in docs:
    those with forProvider, and provider-kubernetes' ObservedObjectCollection, which Crossplane
    converts to an MRD too (v2.2.1 internal/converter/custom_to_managed.go: every provider CRD but
    the ProviderConfig kinds)."""
    names = set()
    for doc in docs:
        if (
            "forProvider" in (doc.get("spec") or {})
            or doc.get("kind") == "ObservedObjectCollection"
        ):
            group = group_of(doc)
            names.add(f"{_plurals()[(group, doc['kind'])]}.{group}")
    return names


def activated() -> set[str]:
    """What the Configuration's ManagedResourceActivationPolicy activates."""
    policy = yaml.safe_load(ACTIVATION_POLICY.read_text())
    return set(policy["spec"]["activate"])
