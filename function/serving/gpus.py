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
model, and the NVIDIA DRA driver (from v25.12.0; dra-driver-nvidia-gpu v0.4.1 alike) prepares them
without reserving the devices (cmd/gpu-kubelet-plugin/device_state.go:
validateNoOverlappingPreparedDevices skips admin-access results). The pod and its command are
the driver's quickstart (demo/specs/quickstart/v1/gpu-test1.yaml at v25.12.0): an Ubuntu image,
`nvidia-smi -L`, then sleep.
"""

import hashlib
import json
import marshal
from dataclasses import dataclass

from function import kube, names
from function.caches import BODIES
from function.clusters.base import as_desired
from function.inputs import Inputs, ObservedResource
from function.models import InferenceClass, NodePool
from function.output import Condition, Desired
from function.versions import IMAGES

NVIDIA_DRIVER = "gpu.nvidia.com"
NAMESPACE = "modelplane-gpu-probe"
ADMIN_ACCESS_LABEL = "resource.kubernetes.io/admin-access"
NAMESPACE_KEY = "gpu-probes-namespace"  # no pool's keys can be it
APP = "modelplane-gpu-probe"
CLAIM = "gpus"
# Ready once the driver has listed the claimed GPUs, asked again every 5 minutes: a GPU that stops
# answering (or a hung driver, after 60 s) ends the container, and the pod is not Ready again until
# the driver answers.
PROBE = (
    "set -e; trap 'exit 0' TERM; "
    "while true; do timeout 60 nvidia-smi -L; touch /run/gpus-listed; sleep 300 & wait $!; done"
)
LISTED = {"exec": {"command": ["test", "-f", "/run/gpus-listed"]}, "periodSeconds": 10}
# Every node of the pool runs a ready probe of the DaemonSet's current spec.
ALL_READY = (
    "has(object.status) && has(object.status.observedGeneration)"
    " && object.status.observedGeneration >= object.metadata.generation"
    " && object.status.numberReady == object.status.desiredNumberScheduled"
    " && (has(object.status.updatedNumberScheduled) ? object.status.updatedNumberScheduled : 0)"
    " == object.status.desiredNumberScheduled"
)
# The API server kept adminAccess on every request: with the DRAAdminAccess feature gate off it
# drops the field (the claim template strategy's dropDisabledDRAAdminAccessFields), and the probe
# would then take the GPUs from models. The DaemonSet waits for this.
ADMIN_ACCESS_KEPT = (
    "has(object.spec) && object.spec.spec.devices.requests.all(r, has(r.exactly)"
    " && has(r.exactly.adminAccess) && r.exactly.adminAccess == true)"
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


def daemon_set(name: str, pool: str, template: str) -> dict:
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
                    "resourceClaims": [{"name": CLAIM, "resourceClaimTemplateName": template}],
                    "containers": [
                        {
                            "name": "nvidia-smi",
                            "image": IMAGES["gpu-probe"],
                            "command": ["bash", "-c", PROBE],
                            "readinessProbe": LISTED,
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


# What a pool's probe says, besides (ready nodes, nodes): not observed yet, or why none runs.
UNOBSERVED, AUTOSCALED, ADMIN_ACCESS_OFF = "not observed yet", "autoscaled", "admin access off"
# Nothing can be proved without admin access: the backend does not wait for what cannot come.
ADMIN_ACCESS_OFF_REASON = "AdminAccessOff"
State = tuple[int, int] | str


def autoscaled(pool: NodePool) -> bool:
    """A pool an autoscaler may resize. cluster-autoscaler 1.34 counts admin-access allocations
    as used devices and copies a DaemonSet's claims onto the node it simulates, and 1.35.0 still
    counts them when it consolidates (kubernetes/autoscaler#8063;
    simulator/dynamicresources/snapshot/snapshot_claim_tracker.go): a probe holding a claim would
    keep such a pool from scaling down, or up. So none runs there."""
    return pool.max_node_count is not None and pool.max_node_count > (pool.min_node_count or 0)


def render(inputs: Inputs, provider_config: str | None, namespace_ready: bool) -> Probes:
    """Each fixed GPU pool's claim template, once the probe namespace is Ready (the DRA driver's
    DeviceClasses come before it), then its DaemonSet, once the template kept admin access. A
    pool whose class cannot be read now keeps what it has. Without the cluster's ProviderConfig
    nothing is composed (the caller keeps what runs)."""
    observed = inputs.observed.resources
    resources: dict[str, Desired] = {}
    states: dict[str, State] = {}
    per_node: dict[str, int] = {}
    for pool in inputs.xr.spec.node_pools:
        template_key, probe = claim_key(pool.name), probe_key(pool.name)
        cls = inputs.classes.resolved.get(pool.class_name)
        requests = gpu_requests(cls) if cls is not None else []
        if requests:
            per_node[pool.name] = sum(r["exactly"]["count"] for r in requests)
        if cls is None:  # kept as it is while the class cannot be read
            for key in (template_key, probe):
                if key in observed:
                    resources[key] = Desired(as_desired(observed[key].body), _ready(observed[key]))
            if probe in resources:
                states[pool.name] = _state(observed.get(probe))
            continue
        if not requests:
            continue  # no NVIDIA GPUs declared: nothing to claim
        if autoscaled(pool):
            states[pool.name] = AUTOSCALED
            continue
        states[pool.name] = UNOBSERVED
        if provider_config is None or not (namespace_ready or template_key in observed):
            continue
        template, made = _bodies(inputs.xr.name, pool.name, requests, provider_config)
        resources[template_key] = Desired(template, _ready(observed.get(template_key)), shared=True)
        if not resources[template_key].ready and probe not in observed:
            if template_key in observed and observed[template_key].get("status"):
                states[pool.name] = ADMIN_ACCESS_OFF
            continue
        resources[probe] = Desired(made, _ready(observed.get(probe)), shared=True)
        states[pool.name] = _state(observed.get(probe))
    outlives = [(NAMESPACE_KEY, k) for k in resources]
    daemon_sets = {probe_key(p) for p in states} & resources.keys()
    return Probes(resources, outlives, condition(states, per_node, bool(resources)), daemon_sets)


def _bodies(xr: str, pool: str, requests: list[dict], provider_config: str) -> tuple[dict, dict]:
    """The pool's claim template and DaemonSet Objects, made once for what they are made of and
    kept with the cluster's other bodies (caches.BODIES)."""
    made_of = ("gpu-probe", pool, provider_config, marshal.dumps(requests))
    return BODIES.item(xr, made_of, lambda: _make_bodies(xr, pool, requests, provider_config))


def _make_bodies(
    xr: str, pool: str, requests: list[dict], provider_config: str
) -> tuple[dict, dict]:
    name = workload_name(xr, pool)
    template = claim_template(f"{name}-{_digest(requests)}", requests)
    probe = daemon_set(name, pool, template["metadata"]["name"])
    return (
        _object(xr, claim_key(pool), template, provider_config, ADMIN_ACCESS_KEPT),
        _object(xr, probe_key(pool), probe, provider_config, ALL_READY),
    )


def _object(xr: str, key: str, manifest: dict, provider_config: str, ready_when: str) -> dict:
    body = kube.manifest_object(xr, key, manifest, provider_config, ready_when=ready_when)
    # The Object's own name, lowercase like every other pool resource's.
    body["metadata"]["name"] = names.cloud_name(xr, key, cluster=xr)
    return body


def _digest(requests: list[dict]) -> str:
    """A claim template cannot be updated: a class that asks for other GPUs gets a new one."""
    return hashlib.sha256(json.dumps(requests, sort_keys=True).encode()).hexdigest()[:5]


def _state(seen: ObservedResource | None) -> State:
    counted = nodes(seen)
    return UNOBSERVED if counted is None else counted


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
    updated = _count(status.get("updatedNumberScheduled", 0))
    desired = _count(status.get("desiredNumberScheduled", 0))
    if (
        generation is None
        or seen_generation is None
        or ready is None
        or updated is None
        or desired is None
        or seen_generation < generation
    ):
        return None
    return min(ready, updated), desired


def _count(value: object) -> int | None:
    """A whole number as JSON brings it (protobuf's Struct makes every number a float)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
        return None
    return int(value)


def condition(states: dict[str, State], per_node: dict[str, int], composed: bool) -> Condition:
    """True once every fixed pool that has nodes can have its GPUs claimed on each of them."""
    if not per_node:
        return Condition(
            "GPUsPublished", True, "NoGPUPools", "no pool's class declares NVIDIA GPUs"
        )
    probed = {p: s for p, s in states.items() if s != AUTOSCALED}
    if probed and not composed:
        return Condition(
            "GPUsPublished",
            False,
            "WaitingForDRADriver",
            "the GPU probes go on the cluster once the NVIDIA DRA driver is installed",
        )
    parts, short = [], []
    for pool, state in states.items():
        if isinstance(state, str):
            parts.append(f"{pool}: {state}")
            if state != AUTOSCALED:
                short.append(pool)
            continue
        ready, total = state
        if total == 0:
            parts.append(f"{pool}: no nodes")
            continue
        gpus_text = f", {ready * per_node[pool]} GPUs" if pool in per_node else ""
        parts.append(f"{pool}: {ready} of {total} nodes{gpus_text}")
        if ready < total:
            short.append(pool)
    listed = "; ".join(parts)
    if ADMIN_ACCESS_OFF in probed.values():
        return Condition(
            "GPUsPublished",
            False,
            ADMIN_ACCESS_OFF_REASON,
            f"the cluster's API server dropped adminAccess from the GPU probes' claims ({listed}): "
            "its DRAAdminAccess feature gate is off, and a probe would take the GPUs from models, "
            "so none runs; turn the gate on (beta and on by default from Kubernetes 1.34)",
        )
    if not short:
        return Condition("GPUsPublished", True, "Claimable", f"GPUs can be claimed on {listed}")
    return Condition(
        "GPUsPublished",
        False,
        "NotClaimable",
        f"GPUs cannot be claimed on every node of {', '.join(short)} ({listed}): "
        "a node counts once the NVIDIA DRA kubelet plugin publishes its GPUs and a pod can claim "
        f"them (kubectl -n {NAMESPACE} get pods -o wide on the cluster)",
    )
