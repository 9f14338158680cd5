"""The InferenceCluster status: what consumers (ModelReplica, ModelCache, the scheduler) read.

Fields only move forward: a value this reconcile cannot derive (a class deleted for a moment) keeps
its observed value instead of vanishing.
"""

from function import names
from function.clusters.facts import ClusterFacts
from function.inputs import Inputs
from function.models import Device, InferenceClass, NodePool


def device(d: Device) -> dict:
    """The class's device as consumers match it: defaults spelled out, empty maps left out."""
    dumped = d.model_dump(by_alias=True, exclude_none=True)
    return {k: v for k, v in dumped.items() if v != {}}


def gpu_pool(pool: NodePool, cls: InferenceClass) -> dict:
    return {
        "name": pool.name,
        "nodes": pool.nodes,
        "devices": [device(d) for d in cls.spec.devices],
    }


def render(inputs: Inputs, cluster: ClusterFacts) -> dict:
    observed = inputs.observed.status
    status: dict = {"namespace": names.SYSTEM_NAMESPACE}

    provider_config, storage_class = cluster.provider_config, cluster.storage_class
    if not cluster.complete:
        provider_config = provider_config or observed.get("providerConfigRef", {}).get("name")
        storage_class = storage_class or observed.get("cache", {}).get("storageClassName")
    if provider_config:
        status["providerConfigRef"] = {"name": provider_config}
    if storage_class:
        status["cache"] = {"storageClassName": storage_class}

    previous = {p.get("name"): p for p in observed.get("gpuPools", [])}
    pools = []
    for pool in inputs.xr.spec.node_pools:
        cls = inputs.classes.resolved.get(pool.class_name)
        if cls is not None:
            pools.append(gpu_pool(pool, cls))
        elif pool.name in previous:
            pools.append(previous[pool.name])
    if pools:
        status["gpuPools"] = pools
    return status
