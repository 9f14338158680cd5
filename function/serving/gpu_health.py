"""GPU node health, said on the XR: the GPUsHealthy condition and a Warning per node that turns
unhealthy.

What marks a GPU node broken is a node condition set on the cluster: Ready, and whatever the
cloud's health agent adds (HEALTHY). Reading every GPU Node through provider-kubernetes would
take one Object per node, each holding the whole Node (tens of KB, its images listed), rewritten
at least every five minutes (kubelet's nodeStatusReportFrequency): hundreds of MB a fleet in the
control plane, megabytes in every request (past gRPC's 4 MiB default with a few hundred nodes).
So a reporter on the cluster (a Deployment: a Python program of the standard library in upstream
distroless Python, function/serving/programs/report_gpu_health.py) lists the GPU nodes
(NFD's label, set on every NVIDIA GPU node of every source) every minute and writes one small
ConfigMap when it changes, and every ten minutes regardless (stamped, so a reporter that stopped
is told from a cluster that is well): per node its pool and the watched conditions that are not
as a healthy node has them, with when they became so. One Observe-only Object reads it back, and
this module turns it into the condition. The reporter may read nodes and write that one
ConfigMap, nothing else.
"""

import json
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta

from function import clock, failures, names
from function.inputs import ObservedResource
from function.output import Condition, Result
from function.serving import programs
from function.versions import IMAGES
from function.workload import GPU_NODE_LABEL

NAME = "modelplane-gpu-health"
# The function's own namespace on the cluster, there first (not the GPU probes', which waits for
# the NVIDIA DRA driver): health is reported whatever runs the GPUs (a GPU Operator on an Existing
# cluster, say).
NAMESPACE = names.SYSTEM_NAMESPACE
NAMESPACE_KEY = "gateway-namespace"
REPORTER_KEY = "gpu-health-reporter"
REPORT_KEY = "gpu-health-report"
DATA_KEY = "nodes"
OBSERVED_AT = "modelplane.ai/observed-at"  # when the reporter last wrote the report
PERIOD_SECONDS = 60
REFRESH_SECONDS = 600  # written at least this often, changed or not
# A report older than this: the reporter stopped (its pod gone, its access revoked, OOM).
STALE = timedelta(minutes=30)
# A condition counts once it has held this long: every node that joins or leaves passes through
# Ready False, and agents flag a node for a moment as it boots.
SETTLE = timedelta(minutes=5)
# A node that turns unhealthy is warned about this long (Crossplane's recorder passes 25 events an
# XR, then one every five minutes: client-go tools/record; the condition names it for good).
WARN_FOR = timedelta(minutes=10)
MESSAGE_LIMIT = 200  # characters of a condition's message the reporter keeps
# Past this many unhealthy nodes (a fleet-wide incident), messages are cut to SHORT_MESSAGE so the
# report stays within a ConfigMap's 1 MiB (1100 nodes of four 200-character faults pass it).
MANY = 100
SHORT_MESSAGE = 40
SHOWN = 10  # unhealthy nodes named in the condition

# A watched node condition and the status a healthy node has. Sources:
# - Ready: kubelet.
# - EKS node monitoring agent (docs.aws.amazon.com/eks/latest/userguide/node-health.html;
#   aws/eks-node-monitoring-agent pkg/conditions): AcceleratedHardwareReady (XID, ECC, a GPU off
#   the bus, NVLink), NetworkingReady, KernelReady, StorageReady, ContainerRuntimeReady; False is
#   what node auto repair acts on.
# - AKS Node Problem Detector, on the GPU sizes AKS checks (learn.microsoft.com/azure/aks/
#   gpu-health-monitoring): GPUMissing, NVLinkStatusInactive, IBLinkFlapping, and the XID check,
#   which AKS's docs call XIDErrors and its nodes report as XIDError (Azure/AgentBaker e2e
#   validators and a node dump in #8797): both watched; True is a fault. GPUClockThrottling is
#   left out (a hot GPU is slow, not broken), and so are UnhealthyNvidiaDevicePlugin and
#   UnhealthyNvidiaDCGMServices (Unknown on every pool without AKS's managed GPU profile).
# - Nebius mk8s health checks (docs.nebius.com/kubernetes/maintenance/health-checks; the default
#   auto-repair rules in nebius/nebius-solutions-library soperator k8s_ng_workers_v2.tf):
#   NebiusGPUError (nvidia-smi, dcgmi, dmesg: XID, ECC, InfiniBand, NVLink),
#   NebiusBootDiskIOError, NebiusContainerRuntimeError; True is a fault.
# GKE sets no GPU condition here (its XidCriticalError comes from its own device plugin, which the
# stack turns off for the DRA driver), nor does VKE: there only Ready is seen.
HEALTHY: dict[str, str] = {
    "Ready": "True",
    "AcceleratedHardwareReady": "True",
    "NetworkingReady": "True",
    "KernelReady": "True",
    "StorageReady": "True",
    "ContainerRuntimeReady": "True",
    "GPUMissing": "False",
    "XIDError": "False",
    "XIDErrors": "False",
    "NVLinkStatusInactive": "False",
    "IBLinkFlapping": "False",
    "NebiusGPUError": "False",
    "NebiusBootDiskIOError": "False",
    "NebiusContainerRuntimeError": "False",
}

# The reporter's program (its docstring says what it does; programs/ why Python, not kubectl).
REPORTER = programs.source("report_gpu_health")
NODE_SELECTOR = f"{GPU_NODE_LABEL}=true"


def _meta(namespace: str | None = NAMESPACE) -> dict:
    meta = {"name": NAME, "labels": {"app.kubernetes.io/name": NAME}}
    if namespace:
        meta["namespace"] = namespace
    return meta


RBAC_GROUP = "rbac.authorization.k8s.io"
RBAC = f"{RBAC_GROUP}/v1"
SUBJECTS = [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}]


# The reporter's identity and what it may do, by component key (components.table).
SERVICE_ACCOUNT_KEY = "gpu-health-serviceaccount"
ACCESS: dict[str, dict] = {
    SERVICE_ACCOUNT_KEY: {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": _meta(),
    },
    "gpu-health-node-reader": {
        "apiVersion": RBAC,
        "kind": "ClusterRole",
        "metadata": _meta(namespace=None),
        "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]}],
    },
    "gpu-health-node-reader-binding": {
        "apiVersion": RBAC,
        "kind": "ClusterRoleBinding",
        "metadata": _meta(namespace=None),
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": NAME},
        "subjects": SUBJECTS,
    },
    # Server-side apply creates or patches; the API server authorises a create by apply with the
    # object's name, so both are bound to the report's (the SRE review tried it on a real one).
    "gpu-health-report-writer": {
        "apiVersion": RBAC,
        "kind": "Role",
        "metadata": _meta(),
        "rules": [
            {
                "apiGroups": [""],
                "resources": ["configmaps"],
                "resourceNames": [NAME],
                "verbs": ["create", "patch"],
            }
        ],
    },
    "gpu-health-report-writer-binding": {
        "apiVersion": RBAC,
        "kind": "RoleBinding",
        "metadata": _meta(),
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": "Role", "name": NAME},
        "subjects": SUBJECTS,
    },
}


def report() -> dict:
    """The ConfigMap the reporter writes, as the Object that reads it back names it."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": NAME, "namespace": NAMESPACE},
    }


def deployment() -> dict:
    labels = {"app.kubernetes.io/name": NAME}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(),
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},  # one writer at a time
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": NAME,
                    "enableServiceLinks": False,
                    "terminationGracePeriodSeconds": 5,
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": 65534,
                        "runAsGroup": 65534,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [
                        {
                            "name": "reporter",
                            "image": IMAGES["gpu-health-reporter"],
                            "command": ["/usr/bin/python3", "-c", REPORTER],
                            "env": [{"name": k, "value": v} for k, v in reporter_env().items()],
                            "resources": {
                                "requests": {"cpu": "10m", "memory": "32Mi"},
                                "limits": {"memory": "384Mi"},
                            },
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "readOnlyRootFilesystem": True,
                                "capabilities": {"drop": ["ALL"]},
                            },
                        }
                    ],
                },
            },
        },
    }


def reporter_env() -> dict[str, str]:
    """What the reporter's program reads (programs/report_gpu_health.py)."""
    return {
        "HEALTHY": healthy_json(),
        "NODE_SELECTOR": NODE_SELECTOR,
        "POOL_LABEL": names.POOL_LABEL,
        "NAME": NAME,
        "NAMESPACE": NAMESPACE,
        "DATA_KEY": DATA_KEY,
        "OBSERVED_AT": OBSERVED_AT,
        "MESSAGE_LIMIT": str(MESSAGE_LIMIT),
        "MANY": str(MANY),
        "SHORT_MESSAGE": str(SHORT_MESSAGE),
        "PERIOD": str(PERIOD_SECONDS),
        "REFRESH": str(REFRESH_SECONDS),
    }


def healthy_json() -> str:
    return json.dumps(HEALTHY, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class Fault:
    """A GPU node whose watched conditions are not healthy, and since when (the earliest)."""

    node: str
    pool: str
    why: str  # each such condition, with its reason and message
    since: datetime | None


@dataclass(frozen=True)
class Health:
    """What the report says: GPU nodes per pool, the faulty ones, and when it was written."""

    nodes: dict[str, int]
    faults: tuple[Fault, ...]
    written: datetime | None


def read(seen: ObservedResource | None) -> Health | None:
    """The report as the reporter wrote it, or None while there is none (or it cannot be read)."""
    if seen is None:
        return None
    return seen.derived("gpu-health", _read)


def _read(seen: ObservedResource) -> Health | None:
    data = seen.at_provider("manifest", "data", DATA_KEY)
    if not isinstance(data, str):
        return None
    try:
        entries = json.loads(data)
    except ValueError:
        return None
    if not isinstance(entries, list):
        return None
    nodes: dict[str, int] = {}
    faults = []
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            continue
        pool = entry.get("pool") if isinstance(entry.get("pool"), str) else ""
        nodes[pool] = nodes.get(pool, 0) + 1
        bad = [b for b in entry.get("bad") or [] if isinstance(b, dict)]
        if bad:
            times = [clock.parse(b.get("since")) for b in bad]
            since = None if None in times else min(times)
            faults.append(Fault(entry["name"], pool, "; ".join(map(_said, bad)), since))
    written = clock.parse(seen.at_provider("manifest", "metadata", "annotations", OBSERVED_AT))
    return Health(dict(sorted(nodes.items())), tuple(faults), written)


def _said(bad: dict) -> str:
    """A condition as the XR says it: type=status (reason): message, scrubbed and bounded."""
    text = f"{bad.get('type')}={bad.get('status')}"
    if bad.get("reason"):
        text += f" ({bad['reason']})"
    message = failures.words(bad.get("message"))
    return f"{text}: {message}" if message else text


def _pool(name: str) -> str:
    return name or "no pool label"


def _counts(fault: Fault) -> bool:
    """Whether a fault has held long enough to count (clock.reached notes the comparison)."""
    return fault.since is None or clock.reached(fault.since + SETTLE)


def condition(health: Health | None, composed: bool, expected: tuple[str, ...] = ()) -> Condition:
    """GPUsHealthy: per pool, how many GPU nodes are healthy, and which are not and why.
    expected: the pools that should have GPU nodes (none found then is not healthy)."""
    if health is None:
        why = "its report" if composed else "the GPU health reporter"
        return Condition("GPUsHealthy", False, "WaitingForReport", f"waiting for {why}")
    if health.written is None or clock.reached(health.written + STALE):
        at = health.written.strftime("%Y-%m-%dT%H:%M:%SZ") if health.written else "unstamped"
        return Condition(
            "GPUsHealthy",
            False,
            "ReportStale",
            f"the GPU health report was last written {at}; the reporter writes it every "
            f"{REFRESH_SECONDS // 60} minutes (kubectl -n {NAMESPACE} logs deploy/{NAME})",
        )
    if not health.nodes:
        if expected:
            return Condition(
                "GPUsHealthy",
                False,
                "NoGPUNodesLabelled",
                f"no node is labelled {GPU_NODE_LABEL}=true, though {', '.join(expected)} "
                "should have GPU nodes: node-feature-discovery labels them",
            )
        return Condition(
            "GPUsHealthy", True, "NoGPUNodesFound", f"no node is labelled {GPU_NODE_LABEL}=true"
        )
    faulty = [f for f in health.faults if _counts(f)]
    broken = Counter(f.pool for f in faulty)
    counts = "; ".join(
        f"{_pool(p)}: {n - broken[p]} of {n} healthy" for p, n in health.nodes.items()
    )
    if not faulty:
        return Condition("GPUsHealthy", True, "Healthy", f"every GPU node is healthy ({counts})")
    named = "; ".join(f"{f.node} ({f.why})" for f in faulty[:SHOWN])
    if len(faulty) > SHOWN:
        named += (
            f"; and {len(faulty) - SHOWN} more (kubectl -n {NAMESPACE} get configmap {NAME} "
            "-o yaml lists each)"
        )
    return Condition("GPUsHealthy", False, "UnhealthyNodes", f"{counts}. Unhealthy: {named}")


def warnings(health: Health | None) -> list[Result]:
    """A Warning for each GPU node that turned unhealthy in the last WARN_FOR (the condition
    names it for as long as it is)."""
    if health is None:
        return []
    return [
        Result(
            "Warning",
            f"GPU node {f.node} (pool {_pool(f.pool)}) is unhealthy: {f.why}",
            reason="UnhealthyGPUNode",
        )
        for f in health.faults
        if _counts(f) and (f.since is None or not clock.reached(f.since + SETTLE + WARN_FOR))
    ]
