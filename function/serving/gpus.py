"""GPUs a model can claim, proved per pool: the GPUsPublished condition and the probes behind it.

Each pool whose class declares NVIDIA GPUs (driver gpu.nvidia.com) gets a DaemonSet on its nodes
(modelplane.ai/pool=<pool>) whose pod claims the class's GPUs through DRA and lists them with
nvidia-smi. Its status says per pool, in one small object, what the condition reports:
desiredNumberScheduled is the pool's nodes, numberReady the nodes on which the scheduler allocated
the class's GPUs from the ResourceSlices the NVIDIA kubelet plugin published, the plugin prepared
them and the driver answered. Observing the slices themselves would take one Object per slice
(provider-kubernetes' ObservedObjectCollection): megabytes per reconcile on a fleet of hundreds of
GPU nodes, read back through every call.

The claims ask for admin access (KEP-5018; beta and on by default from Kubernetes 1.34, allowed
only in a namespace labelled resource.kubernetes.io/admin-access=true): the scheduler allocates
them even when a model holds the GPUs and does not count them, so a probe never takes a GPU from a
model, and the NVIDIA DRA driver v25.12.0 prepares them without reserving the devices
(cmd/gpu-kubelet-plugin/device_state.go: validateNoOverlappingPreparedDevices skips admin-access
results). The pod and its command are NVIDIA's quickstart (demo/specs/quickstart/v1/gpu-test1.yaml
at v25.12.0): an Ubuntu image, `nvidia-smi -L`, then sleep.
"""

from dataclasses import dataclass

from function import kube, names
from function.clusters.base import as_desired
from function.inputs import Inputs, ObservedResource
from function.models import InferenceClass
from function.output import Condition, Desired
from function.versions import IMAGES

NVIDIA_DRIVER = "gpu.nvidia.com"
NAMESPACE = "modelplane-gpu-probe"
ADMIN_ACCESS_LABEL = "resource.kubernetes.io/admin-access"
NAMESPACE_KEY = "gpu-probes-namespace"  # no pool's keys can be it
APP = "modelplane-gpu-probe"
CLAIM = "gpus"
# Exits (and the pod restarts, unready) unless the driver lists the claimed GPUs.
PROBE = "set -e; nvidia-smi -L; trap 'exit 0' TERM; sleep infinity & wait"
# Every node of the pool runs a ready probe, as of the DaemonSet's current spec.
ALL_READY = (
    "has(object.status) && has(object.status.observedGeneration)"
    " && object.status.observedGeneration >= object.metadata.generation"
    " && object.status.numberReady == object.status.desiredNumberScheduled"
)


def probe_key(pool: str) -> str:
    return f"gpu-probe-{pool}"


def claim_key(pool: str) -> str:
    return f"gpu-claim-{pool}"


def gpu_requests(cls: InferenceClass) -> list[dict]:
    """What a replica of the class asks DRA for (each NVIDIA device, its class and count), with
    admin access."""
    return [
        {
            "name": f"gpu-{i}",
            "exactly": {
                "deviceClassName": d.device_class_name,
                "allocationMode": "ExactCount",
                "count": d.count,
                "adminAccess": True,
            },
        }
        for i, d in enumerate(
            d for d in cls.spec.devices if d.driver == NVIDIA_DRIVER and d.claim == "DRA"
        )
    ]


def workload_name(xr: str, pool: str) -> str:
    """The probe's DaemonSet and claim template: a pool name is a label value (H100_Pool), these
    are DNS names."""
    return names.cloud_name("gpus", pool, cluster=xr)


def claim_template(name: str, requests: list[dict]) -> dict:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"spec": {"devices": {"requests": requests}}},
    }


def daemon_set(name: str, pool: str) -> dict:
    labels = {"app.kubernetes.io/name": APP, "app.kubernetes.io/instance": pool}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {names.POOL_LABEL: pool},
                    # Whatever a pool's nodes are tainted with, the probe runs there.
                    "tolerations": [{"operator": "Exists"}],
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    "terminationGracePeriodSeconds": 5,
                    "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                    "resourceClaims": [{"name": CLAIM, "resourceClaimTemplateName": name}],
                    "containers": [
                        {
                            "name": "nvidia-smi",
                            "image": IMAGES["gpu-probe"],
                            "command": ["bash", "-c", PROBE],
                            "resources": {
                                "requests": {"cpu": "1m", "memory": "16Mi"},
                                "limits": {"memory": "128Mi"},
                                "claims": [{"name": CLAIM}],
                            },
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "capabilities": {"drop": ["ALL"]},
                            },
                        }
                    ],
                },
            },
        },
    }


@dataclass
class Probes:
    resources: dict[str, Desired]
    # (of, by): the namespace outlives each pool's objects, and the cluster through it.
    outlives: list[tuple[str, str]]
    condition: Condition

    # The DaemonSets' keys: their readiness is the condition's, not a component's.
    daemon_sets: set[str]


def render(inputs: Inputs, provider_config: str | None, namespace_ready: bool) -> Probes:
    """Each GPU pool's claim template and DaemonSet, once the probe namespace is Ready (the DRA
    driver's DeviceClasses come before it); a pool whose class cannot be read now keeps what it
    has. Without the cluster's ProviderConfig nothing is composed (the caller keeps what runs)."""
    xr = inputs.xr.name
    observed = inputs.observed.resources
    resources: dict[str, Desired] = {}
    counts: dict[str, tuple[int, int] | None] = {}  # pool -> (ready nodes, nodes), or unknown
    per_node: dict[str, int] = {}
    for pool in inputs.xr.spec.node_pools:
        keys = (claim_key(pool.name), probe_key(pool.name))
        cls = inputs.classes.resolved.get(pool.class_name)
        requests = gpu_requests(cls) if cls is not None else []
        if provider_config is None:
            pass
        elif requests and (namespace_ready or any(k in observed for k in keys)):
            name = workload_name(xr, pool.name)
            made = (claim_template(name, requests), daemon_set(name, pool.name))
            for key, manifest, ready_when in zip(keys, made, (None, ALL_READY), strict=True):
                body = kube.manifest_object(
                    xr, key, manifest, provider_config, ready_when=ready_when
                )
                # The Object's own name, lowercase like every other pool resource's.
                body["metadata"]["name"] = names.cloud_name(xr, key, cluster=xr)
                resources[key] = Desired(body, ready=_ready(observed.get(key)))
        elif cls is None:  # kept as it is while the class cannot be read
            for key in keys:
                if key in observed:
                    resources[key] = Desired(as_desired(observed[key].body), _ready(observed[key]))
        if requests or keys[1] in resources:
            counts[pool.name] = nodes(observed.get(keys[1]))
        if requests:
            per_node[pool.name] = sum(r["exactly"]["count"] for r in requests)
    outlives = [(NAMESPACE_KEY, k) for k in resources]
    daemon_sets = {probe_key(p) for p in counts} & resources.keys()
    return Probes(resources, outlives, condition(counts, per_node, bool(resources)), daemon_sets)


def _ready(seen: ObservedResource | None) -> bool:
    return seen is not None and seen.ready


def nodes(seen: ObservedResource | None) -> tuple[int, int] | None:
    """(nodes whose GPUs were claimed, nodes in the pool), once the DaemonSet controller has seen
    the current spec."""
    if seen is None:
        return None
    status = seen.at_provider("manifest", "status")
    if not isinstance(status, dict):
        return None
    generation = _count(seen.at_provider("manifest", "metadata", "generation"))
    seen_generation = _count(status.get("observedGeneration"))
    ready = _count(status.get("numberReady", 0))
    desired = _count(status.get("desiredNumberScheduled", 0))
    if None in (generation, seen_generation, ready, desired) or seen_generation < generation:
        return None
    return ready, desired


def _count(value: object) -> int | None:
    """A whole number as JSON brings it (protobuf's Struct makes every number a float)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
        return None
    return int(value)


def condition(
    counts: dict[str, tuple[int, int] | None], per_node: dict[str, int], composed: bool
) -> Condition:
    """True once every pool that has nodes can have its GPUs claimed on each of them."""
    if not counts:
        return Condition(
            "GPUsPublished", True, "NoGPUPools", "no pool's class declares NVIDIA GPUs"
        )
    if not composed:
        return Condition(
            "GPUsPublished",
            False,
            "WaitingForDRADriver",
            "the GPU probes go on the cluster once the NVIDIA DRA driver is installed",
        )
    parts, short = [], []
    for pool, count in counts.items():
        if count is None:
            parts.append(f"{pool}: not observed yet")
            short.append(pool)
            continue
        ready, total = count
        if total == 0:
            parts.append(f"{pool}: no nodes")
            continue
        gpus_text = f", {ready * per_node[pool]} GPUs" if pool in per_node else ""
        parts.append(f"{pool}: {ready} of {total} nodes{gpus_text}")
        if ready < total:
            short.append(pool)
    if not short:
        return Condition(
            "GPUsPublished", True, "Claimable", "GPUs can be claimed on " + "; ".join(parts)
        )
    return Condition(
        "GPUsPublished",
        False,
        "NotClaimable",
        f"GPUs cannot be claimed on every node of {', '.join(short)} (" + "; ".join(parts) + "): "
        "a node counts once the NVIDIA DRA kubelet plugin publishes its GPUs and a pod can claim "
        f"them (kubectl -n {NAMESPACE} get pods -o wide on the cluster)",
    )
