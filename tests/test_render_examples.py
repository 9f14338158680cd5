"""End to end with the real CLI: `crossplane render` of every example against the running function,
golden files of what it renders, and `crossplane beta validate` of every rendered resource against
the XRDs and the real provider CRDs in ../shared/crds.

Regenerate the golden files deliberately, then review the diff:  UPDATE_GOLDEN=1 make test
"""

import subprocess
from pathlib import Path

import pytest
import yaml

from tests.builders import example
from tests.conftest import APIS, CROSSPLANE_IMAGE, EXAMPLES, ROOT, crd_files
from tests.golden import GOLDEN, check_golden
from tests.tools import validate
from tests.tools.converged import converged
from tests.tools.render import render_args
from tests.tools.server import function_server
from tests.validation import ACTIVATION_POLICY

SOURCES = ["existing", "gke", "eks", "aks", "nebius", "vultr"]

# Kinds without a CRD anywhere (core Kubernetes); the only schemas validate may miss. None is
# composed yet; the list is here so adding one is a visible decision.
CORE_KINDS_WITHOUT_CRD: set[tuple[str, str]] = {("v1", "Secret"), ("v1", "ConfigMap")}


@pytest.fixture(scope="module")
def target():
    with function_server() as server:
        yield server.target


def render(
    crossplane: str, target: str, example: Path, *extra: str, composition: Path | None = None
) -> list[dict]:
    more = {"composition": composition} if composition else {}
    args = render_args(target, example, "--include-full-xr", *extra, **more)
    args[0] = crossplane
    proc = subprocess.run(args, capture_output=True, text=True, check=False, timeout=120)
    assert proc.returncode == 0, f"crossplane render failed:\n{proc.stderr}"
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def split(docs: list[dict]) -> tuple[dict, dict[str, dict], list[dict]]:
    """(the XR, composed resources by composition-resource-name, function results)."""
    xr = docs[0]
    results = [d for d in docs if d["kind"] == "Result"]
    composed = {
        d["metadata"]["annotations"]["crossplane.io/composition-resource-name"]: d
        for d in docs[1:]
        if d["kind"] != "Result"
    }
    return xr, composed, results


@pytest.fixture(scope="module")
def rendered(crossplane, target, tmp_path_factory) -> dict[str, list[dict]]:
    """Every example rendered once, plus the Existing second pass with its first pass observed."""
    out = {s: render(crossplane, target, EXAMPLES / s) for s in SOURCES}
    _, composed, _ = split(out["existing"])
    observed = tmp_path_factory.mktemp("observed") / "observed.yaml"
    observed.write_text(yaml.safe_dump_all(list(composed.values())))
    out["existing-second-pass"] = render(
        crossplane, target, EXAMPLES / "existing", f"--observed-resources={observed}"
    )
    # The class is gone for a moment: everything observed must still be rendered.
    no_classes = tmp_path_factory.mktemp("none") / "none.yaml"
    no_classes.write_text("")
    args_without_classes = [
        f"--required-resources={no_classes}",
        f"--observed-resources={observed}",
    ]
    out["existing-class-deleted"] = render(
        crossplane, target, EXAMPLES / "existing", *args_without_classes
    )
    return out


def test_existing_renders_provider_configs_and_status(rendered):
    xr, composed, results = split(rendered["existing"])
    assert sorted(composed) == ["provider-config-helm", "provider-config-kubernetes"]
    assert {composed[k]["kind"] for k in composed} == {"ClusterProviderConfig"}
    status = xr["status"]
    assert (
        status["providerConfigRef"]["name"] == composed["provider-config-helm"]["metadata"]["name"]
    )
    assert status["namespace"] == "modelplane-system"
    assert status["cache"] == {"storageClassName": "weka-rwx"}
    assert status["gpuPools"][0]["name"] == "gpu-h100"
    assert status["gpuPools"][0]["nodes"] == 2
    conditions = {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}
    # Nothing is installed on the cluster yet: a first reconcile is never Ready, and the cluster
    # has not answered through its kubeconfig (function/clusters/existing.py).
    assert conditions == {
        "Ready": ("False", "Creating"),
        "ClusterReady": ("False", "Connecting"),
        "BackendReady": ("False", "WaitingForCluster"),
        "GPUsPublished": ("False", "WaitingForDRADriver"),
        "GPUsHealthy": ("False", "WaitingForReport"),
        "ClassesResolved": ("True", "Resolved"),
    }
    assert results == []


def test_existing_second_pass_installs_the_stack_through_the_provider_configs(rendered):
    xr, composed, _ = split(rendered["existing-second-pass"])
    # What needs no other component goes first; the rest waits for what it needs. cert-manager
    # is first looked for on the cluster (function/serving/adoption.py), not installed yet.
    first = {"detect-cert-manager", "gaie-crd-inferencepools", "gateway-namespace"}
    assert first | {"kube-system-namespace"} <= set(composed)
    assert "release-cert-manager" not in composed
    assert "gateway-selfsigned-issuer" not in composed  # needs cert-manager Ready
    # Envoy Gateway needs the InferencePool CRD and the grant to read them first.
    assert "release-envoy-gateway" not in composed
    detector = composed["detect-cert-manager"]["spec"]
    assert detector["managementPolicies"] == ["Observe"]
    assert detector["forProvider"]["manifest"]["metadata"]["name"] == "certificates.cert-manager.io"
    # The Release is not ready until its observed Ready condition says so.
    ready = next(c for c in xr["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False"


def test_a_deleted_class_drops_nothing(rendered):
    _, before, _ = split(rendered["existing"])
    xr, after, results = split(rendered["existing-class-deleted"])
    assert set(after) >= set(before)
    assert [r["severity"] for r in results] == ["SEVERITY_WARNING"]
    assert 'InferenceClass "h100-8x-byo"' in results[0]["message"]
    classes = next(c for c in xr["status"]["conditions"] if c["type"] == "ClassesResolved")
    assert (classes["status"], classes["reason"]) == ("False", "ClassNotFound")


def test_classes_fetched_by_name_without_bootstrap_requirements(
    crossplane, target, rendered, tmp_path
):
    """A Composition without the bootstrap requirement: the function asks for each class by name,
    crossplane render answers and calls it again, and the result is the same."""
    composition = yaml.safe_load((ROOT / "compositions" / "inferenceclusters.yaml").read_text())
    del composition["spec"]["pipeline"][0]["requirements"]
    path = tmp_path / "composition.yaml"
    path.write_text(yaml.safe_dump(composition))
    docs = render(crossplane, target, EXAMPLES / "existing", composition=path)
    assert docs == rendered["existing"]


@pytest.mark.parametrize("source", SOURCES)
def test_every_source_composes(rendered, source):
    """Every source is built: no example is answered with SourceNotBuilt."""
    xr, composed, results = split(rendered[source])
    assert composed
    assert not [r for r in results if "is not built by this function version" in r["message"]]
    cluster_ready = next(c for c in xr["status"]["conditions"] if c["type"] == "ClusterReady")
    assert cluster_ready["reason"] != "SourceNotBuilt"


def test_inference_class_renders_accepted(crossplane, target, tmp_path):
    _, classes = example("existing")
    xr = tmp_path / "class.yaml"
    xr.write_text(yaml.safe_dump(classes[0]))
    args = [
        crossplane,
        "render",
        str(xr),
        str(ROOT / "compositions" / "inferenceclasses.yaml"),
        str(EXAMPLES / "functions.yaml"),
        f"--function-annotations=render.crossplane.io/runtime-development-target={target}",
    ]
    proc = subprocess.run(args, capture_output=True, text=True, check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr
    [out] = [d for d in yaml.safe_load_all(proc.stdout) if d]
    conditions = {c["type"]: (c["status"], c["reason"]) for c in out["status"]["conditions"]}
    assert conditions == {"Ready": ("True", "Available"), "Accepted": ("True", "ValidDevices")}


@pytest.mark.parametrize("name", [*SOURCES, "existing-second-pass", "existing-class-deleted"])
def test_golden(rendered, name):
    check_golden(name, rendered[name])


def nulls(value, path: str = "") -> list[str]:
    if value is None:
        return [path]
    if isinstance(value, dict):
        return [n for k, v in value.items() for n in nulls(v, f"{path}.{k}")]
    if isinstance(value, list):
        return [n for i, v in enumerate(value) for n in nulls(v, f"{path}[{i}]")]
    return []


@pytest.mark.parametrize("golden", sorted(GOLDEN.glob("*.yaml")), ids=lambda p: p.stem)
def test_no_composed_resource_asks_for_a_null(golden):
    """The API server drops a null from what it stores, so a composed resource asking for one
    differs from itself after every apply: its provider and the XR hear of each, and Crossplane's
    watch circuit breaker throttles the XR (controller-gen's `creationTimestamp: null` did so)."""
    found = [
        f"{doc['metadata']['name']}: spec{n}"
        for doc in yaml.safe_load_all(golden.read_text())
        if doc and "spec" in doc and doc.get("kind") != "InferenceCluster"
        for n in nulls(doc["spec"])
    ]
    assert not found, found


@pytest.fixture(scope="module")
def converged_eks(target, tmp_path_factory) -> tuple[str, int]:
    """The tool's converged render of `eks`, module-scoped as tests/test_clouds.py's are: on the
    wall clock, as the function server's, so the simulated GPU health report is fresh."""
    return converged(target, "eks", tmp_path_factory.mktemp("converged"))


def test_the_converged_render_shows_the_whole_composition(crossplane, target, converged_eks):
    """`make render EXAMPLE=eks CONVERGED=1` (tests/tools/converged.py): the last reconcile,
    with the cluster, its node groups, add-ons, Pod Identity, the kubeconfig writer and the stack
    the first reconcile leaves out, is exactly what tests/test_clouds.py converges the example to
    (its golden file), its Capacity Block included."""
    first = {d["kind"] for d in render(crossplane, target, EXAMPLES / "eks")[1:]}
    out, passes = converged_eks
    xr, composed, results = split([d for d in yaml.safe_load_all(out) if d])
    later = {"Cluster", "NodeGroup", "Addon", "PodIdentityAssociation", "ClusterAuth", "Release"}
    assert later <= {d["kind"] for d in composed.values()} - first
    assert passes > 2
    ready = next(c for c in xr["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True"
    expected = (GOLDEN / "eks-converged.yaml").read_text()
    assert yaml.safe_dump_all([xr, *composed.values(), *results], sort_keys=True) == expected


def test_make_validate_passes_an_example_and_fails_a_wrong_field(monkeypatch, capsys):
    """`make validate EXAMPLE=existing` (tests/tools/validate.py), offline; the same with the
    rendered XR's node count made a string exits 1 naming the field."""
    assert validate.main(["existing"]) == 0
    assert "existing: " in capsys.readouterr().out
    real = validate.rendered

    def wrong(*args):
        docs = real(*args)
        docs[0]["spec"]["nodePools"][0]["nodeCount"] = "two"
        return docs

    monkeypatch.setattr(validate, "rendered", wrong)
    assert validate.main(["existing"]) == 1
    assert "nodeCount" in capsys.readouterr().err


def test_everything_rendered_validates_against_the_real_schemas(
    crossplane, validate_cache, rendered, tmp_path
):
    docs = [
        d
        for name in sorted(rendered)
        for d in rendered[name]
        if d["kind"] != "Result" and (d["apiVersion"], d["kind"]) not in CORE_KINDS_WITHOUT_CRD
    ]
    # The example manifests themselves, as users apply them, and the Configuration's activation
    # policy (a Crossplane kind).
    for path in [*sorted(EXAMPLES.glob("*/*.yaml")), ACTIVATION_POLICY]:
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    # The same composed resource appears in several passes; validate each distinct body once.
    unique = {yaml.safe_dump(d, sort_keys=True): d for d in docs}
    resources = tmp_path / "rendered.yaml"
    resources.write_text(yaml.safe_dump_all(list(unique.values())))
    extensions = ",".join([str(APIS), *(str(p) for p in crd_files())])
    proc = subprocess.run(
        [
            crossplane,
            "beta",
            "validate",
            f"--cache-dir={validate_cache}",
            f"--crossplane-image={CROSSPLANE_IMAGE}",
            "--error-on-missing-schemas",
            extensions,
            str(resources),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    report = proc.stdout + proc.stderr
    assert proc.returncode == 0, report
    assert f"Total {len(unique)} resources: 0 missing schemas" in report
    assert "0 failure cases" in report
