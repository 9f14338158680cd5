"""A chart's crds/, moved by a Job on the workload cluster before its release moves.

Helm installs a chart's crds/ once and never upgrades them (helm.sh/docs/chart_best_practices/
custom_resource_definitions), provider-helm offers only skipCRDs, and some charts' CRDs fit
neither a Helm release Secret nor an Object (docs/stack.md, "CRDs that move with their charts").
So, as Envoy Gateway's and LeaderWorkerSet's install guides tell Helm users (and as Flux's
`crds: CreateReplace` and Sveltos's `upgradeCRDs` do), the CRDs are applied by server-side apply
from the very chart the release installs, then waited for until Established; the release is
installed with skipCRDs and moves to a new chart version only once its Job is Complete
(function/serving/stack.py).

Contract (kept stable; the e2e proof runs the same commands as processes):
- `job_resources(spec)`: the four manifests, by role (SERVICE_ACCOUNT, CLUSTER_ROLE, BINDING, JOB),
  a pure function of the ChartCRDs;
- the Job's pod: an init container `fetch` (upstream oras, IMAGES["oras"]) runs
  `fetch_args(spec)`: `oras cp --to-oci-layout <ref> $WORK/chart:<version>`, the chart's OCI
  artifact by manifest digest when one is pinned (else by tag), every blob checked against its
  digest by oras; then the container `apply` (upstream distroless Python, IMAGES["python"]) runs
  `python3 -c APPLY_PROGRAM` (function/serving/programs/apply_crds.py) with `apply_env(spec)`: it
  reads the chart layer, checks each selected file against its pinned sha256 (the bytes of the
  published chart's crds/, which the tests read in ../shared/charts), takes over from Helm's
  field manager the CRDs Helm wrote, applies the files by server-side apply as MANAGER, forcing
  conflicts, and waits until each CRD is Established;
- both share `$WORK` (an emptyDir; oras's HOME too, for its config).

RBAC by CRD name: get and patch, and create, since a server-side apply that creates the object
is authorised as `create` *with the object's name* (kube-apiserver
staging/src/k8s.io/apiserver/pkg/endpoints/handlers/patch.go, createAuthorizerAttributes), so
resourceNames bounds it too. Nothing may delete a CRD.
"""

import hashlib
import json
from dataclasses import dataclass

from function import names
from function.serving import programs
from function.versions import CHART_CRD_FILES, CHART_DIGESTS, CHARTS, GATEWAY_API_CRDS_FILE, image

# The field manager the Job applies as: over CRDs Helm installed, --force-conflicts takes the
# fields whose values differ (server-side apply), the rest are shared with Helm's manager.
MANAGER = "modelplane-crds"
# The managers Helm writes a chart's crds/ as: Helm names its manager after its binary unless told
# otherwise (helm v3 and v4.2.3 pkg/kube/client.go getManagedFieldsManager), so `provider-helm`
# (provider-helm v1.3.0 and v1.4.0 cluster/images/provider-helm/Dockerfile install it so and set
# no ManagedFieldsManager) and `helm` (the CLI). A field one of them owns outlives its removal
# from the chart (server-side apply removes a field only when no manager owns it), so the Job
# takes their fields over once and drops their entries (programs/apply_crds.py).
HELM_MANAGERS = ("provider-helm", "helm")
# Where a Helm chart's content is in its OCI manifest (helm.sh/docs/topics/registries: the chart
# archive is the one layer of this media type).
HELM_LAYER = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
WORK = "/work"
# Long enough for 20 CRDs to be Established on a slow API server; the Job is retried
# BACKOFF_LIMIT times (10 s, 20 s, ... 320 s apart: ten minutes for a registry's rate limit or
# outage to pass), then Failed (holding the release, with the reason in BackendReady). A pod a
# drain evicts counts for nothing (POD_FAILURE_POLICY).
WAIT_TIMEOUT = "300"  # seconds
BACKOFF_LIMIT = 6
POD_FAILURE_POLICY = {
    "rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]
}
DEADLINE_SECONDS = 1800

SERVICE_ACCOUNT, CLUSTER_ROLE, BINDING, JOB = "serviceaccount", "clusterrole", "binding", "job"
RBAC_GROUP = "rbac.authorization.k8s.io"


@dataclass(frozen=True)
class CRDFile:
    """One file of the chart's crds/: its path inside the chart archive (which starts with the
    chart's name), the sha256 of its bytes, and the CRDs it holds."""

    path: str
    sha256: str
    crds: tuple[str, ...]


@dataclass(frozen=True)
class ChartCRDs:
    """What one Job applies: the chart the release installs (reference without oci://, version,
    and its OCI manifest digest when pinned), and the files of its crds/ to apply."""

    key: str
    reference: str
    version: str
    files: tuple[CRDFile, ...]
    digest: str | None = None
    # Tests only: a registry served over plain HTTP.
    plain_http: bool = False

    @property
    def crds(self) -> tuple[str, ...]:
        return tuple(sorted(name for f in self.files for name in f.crds))

    @property
    def source(self) -> str:
        """The artifact oras copies: by digest when pinned (oras checks it), else by tag."""
        return (
            f"{self.reference}@{self.digest}" if self.digest else f"{self.reference}:{self.version}"
        )


def chart_crds(key: str, *, gateway_api: bool = True) -> ChartCRDs:
    """The Job's input for a release key of CHART_CRD_FILES, at the chart's pinned version;
    without gateway_api, gateway-helm's Gateway API CRDs are left out (on an Existing cluster
    whose Gateway API CRDs are someone else's: function/serving/gateway_api.py)."""
    chart = CHARTS[key]
    files = tuple(
        CRDFile(path, sha256, crds)
        for path, sha256, crds in CHART_CRD_FILES[key]
        if gateway_api or path != GATEWAY_API_CRDS_FILE
    )
    return ChartCRDs(
        key=key,
        reference=f"{chart.repository.removeprefix('oci://')}/{chart.name}",
        version=chart.version,
        files=files,
        digest=CHART_DIGESTS.get(key),
    )


def name(spec: ChartCRDs) -> str:
    """The Job's name (and its RBAC's): the chart version and a hash of the whole Job spec, so a
    new version, another selection of files or any change of the pod (an image pinned, the
    script) is a new Job: a Job's pod template is immutable, and provider-kubernetes would fail
    to update it in place."""
    made_of = json.dumps(_job_spec(spec), sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(made_of.encode()).hexdigest()[:8]
    version = spec.version.lower().replace(".", "-").replace("+", "-")
    return f"mp-crds-{spec.key}-{version}"[:54].rstrip("-") + f"-{digest}"


def rbac_name(spec: ChartCRDs) -> str:
    """The ServiceAccount, ClusterRole and binding: one per chart, updated in place as its CRDs
    change (a new version's Job runs as the same account)."""
    return f"mp-crds-{spec.key}"


def fetch_args(spec: ChartCRDs) -> list[str]:
    """oras's arguments: the chart's artifact into an OCI layout under $WORK/chart."""
    args = ["cp", "--to-oci-layout"]
    if spec.plain_http:
        args.append("--from-plain-http")
    return [*args, spec.source, f"{WORK}/chart:{spec.version}"]


# The apply container's program (its docstring says what it does and why not kubectl).
APPLY_PROGRAM = programs.source("apply_crds")


def apply_env(spec: ChartCRDs) -> dict[str, str]:
    """The apply container's environment (WORK is the shared emptyDir)."""
    return {
        "WORK": WORK,
        "HELM_LAYER": HELM_LAYER,
        "MANAGER": MANAGER,
        "HELM_MANAGERS": " ".join(HELM_MANAGERS),
        "WAIT_TIMEOUT": WAIT_TIMEOUT,
        "CHECKSUMS": "\n".join(f"{f.sha256}  {f.path}" for f in spec.files),
        "CRDS": " ".join(spec.crds),
    }


RESTRICTED = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
}


def job_resources(spec: ChartCRDs, namespace: str = names.SYSTEM_NAMESPACE) -> dict[str, dict]:
    """The Job that applies the chart's CRDs, the account it runs as, and what that may do."""
    account = rbac_name(spec)
    meta = {"name": account, "labels": {"app.kubernetes.io/name": "mp-crds"}}
    subjects = [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]
    rule = {
        "apiGroups": ["apiextensions.k8s.io"],
        "resources": ["customresourcedefinitions"],
        "resourceNames": list(spec.crds),
        "verbs": ["get", "create", "patch"],
    }
    return {
        SERVICE_ACCOUNT: {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {**meta, "namespace": namespace},
        },
        CLUSTER_ROLE: {
            "apiVersion": f"{RBAC_GROUP}/v1",
            "kind": "ClusterRole",
            "metadata": meta,
            "rules": [rule],
        },
        BINDING: {
            "apiVersion": f"{RBAC_GROUP}/v1",
            "kind": "ClusterRoleBinding",
            "metadata": meta,
            "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": account},
            "subjects": subjects,
        },
        JOB: job(spec, namespace),
    }


def job(spec: ChartCRDs, namespace: str) -> dict:
    """The Job: no ttlSecondsAfterFinished (provider-kubernetes would make a deleted Job again
    and run it anew), a few retries, restricted Pod Security, on any node that takes an
    untolerated pod (the system nodes)."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name(spec), "namespace": namespace, "labels": _labels(spec)},
        "spec": _job_spec(spec),
    }


def _labels(spec: ChartCRDs) -> dict[str, str]:
    return {"app.kubernetes.io/name": "mp-crds", "modelplane.ai/chart": spec.key}


def _job_spec(spec: ChartCRDs) -> dict:
    scratch = [{"name": "work", "mountPath": WORK}]
    env = apply_env(spec)
    return {
        "backoffLimit": BACKOFF_LIMIT,
        "podFailurePolicy": POD_FAILURE_POLICY,
        "activeDeadlineSeconds": DEADLINE_SECONDS,
        "template": {
            "metadata": {"labels": _labels(spec)},
            "spec": {
                "serviceAccountName": rbac_name(spec),
                "restartPolicy": "Never",
                "enableServiceLinks": False,
                "securityContext": {
                    "runAsNonRoot": True,
                    "runAsUser": 65534,
                    "runAsGroup": 65534,
                    "seccompProfile": {"type": "RuntimeDefault"},
                },
                "initContainers": [
                    {
                        "name": "fetch",
                        "image": image("oras"),
                        "args": fetch_args(spec),
                        "env": [{"name": "HOME", "value": WORK}],
                        "resources": {
                            "requests": {"cpu": "10m", "memory": "32Mi"},
                            "limits": {"memory": "128Mi"},
                        },
                        "securityContext": RESTRICTED,
                        "volumeMounts": scratch,
                    }
                ],
                "containers": [
                    {
                        "name": "apply",
                        "image": image("python"),
                        "command": ["/usr/bin/python3", "-c", APPLY_PROGRAM],
                        "env": [{"name": k, "value": v} for k, v in env.items()],
                        "resources": {
                            "requests": {"cpu": "50m", "memory": "64Mi"},
                            "limits": {"memory": "512Mi"},
                        },
                        "securityContext": RESTRICTED,
                        "terminationMessagePolicy": "FallbackToLogsOnError",
                        "volumeMounts": scratch,
                    }
                ],
                "volumes": [{"name": "work", "emptyDir": {"sizeLimit": "64Mi"}}],
            },
        },
    }


JOB_COMPLETE = "has(object.status) && has(object.status.conditions) && " + (
    "object.status.conditions.exists(c, c.type == 'Complete' && c.status == 'True')"
)

RUNNING, COMPLETE = "running", "complete"


def state(job: object, expected: str) -> str:
    """The observed Job's state, if it is the expected one: RUNNING (not there yet, another
    version's, or running), COMPLETE, or why it failed, in the Job's words (its Failed
    condition's reason and message: BackoffLimitExceeded, DeadlineExceeded) and what to do."""
    if not isinstance(job, dict) or (job.get("metadata") or {}).get("name") != expected:
        return RUNNING
    conditions = (job.get("status") or {}).get("conditions") or []
    for c in conditions:
        if isinstance(c, dict) and c.get("status") == "True" and c.get("type") == "Complete":
            return COMPLETE
    for c in conditions:
        if isinstance(c, dict) and c.get("status") == "True" and c.get("type") == "Failed":
            said = ": ".join(str(c[k])[:200] for k in ("reason", "message") if c.get(k))
            return (
                f"failed, {said or 'no reason given'}; the log of its pod's apply or fetch "
                "container says why (a wrong digest or checksum, a refused write, the registry "
                "out of reach), its pod's events why it never started (an image that could not "
                "be pulled); delete the Job to run it again"
            )
    return RUNNING


def applies(job: object, crd: str) -> bool:
    """Whether a Job manifest (as composed) applies the named CRD."""
    try:
        (container,) = job["spec"]["template"]["spec"]["containers"]  # type: ignore[index]
        env = {e["name"]: e.get("value", "") for e in container["env"]}
    except (KeyError, TypeError, ValueError):
        return False
    return crd in env.get("CRDS", "").split()
