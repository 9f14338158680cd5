"""The InferenceCluster status: what consumers (ModelReplica, ModelCache, the scheduler) read.

Fields only move forward: a value this reconcile cannot derive (a class deleted for a moment) keeps
its observed value instead of vanishing.
"""

from function import names
from function.clusters.facts import ClusterFacts
from function.inputs import Inputs
from function.models import Device, InferenceClass, NodePool
from function.serving import StackFacts, gateway


def device(d: Device) -> dict:
    """The class's device as consumers match it: defaults spelled out, empty maps left out."""
    dumped = d.model_dump(by_alias=True, exclude_none=True)
    return {k: v for k, v in dumped.items() if v != {}}


def gpu_pool(pool: NodePool, cls: InferenceClass, extra: tuple[dict, ...] = ()) -> dict:
    return {
        "name": pool.name,
        "nodes": pool.nodes,
        "devices": [device(d) for d in cls.spec.devices] + [dict(d) for d in extra],
    }


def render(inputs: Inputs, cluster: ClusterFacts, stack: StackFacts) -> dict:
    observed = inputs.observed.status
    status: dict = {"namespace": names.SYSTEM_NAMESPACE}
    published = gateway_status(inputs, stack, observed.get("gateway") or {})
    if published:
        status["gateway"] = published

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
            pools.append(gpu_pool(pool, cls, cluster.pool_devices.get(pool.name, ())))
        elif pool.name in previous:
            pools.append(previous[pool.name])
    if pools:
        status["gpuPools"] = pools
    return status


def gateway_status(inputs: Inputs, stack: StackFacts, kept: dict) -> dict:
    """Address and CA as observed, else as last published; the hostname once clients can
    authenticate to an addressed gateway whose CA they can check, and the gateway demands their
    certificates (its ClientTrafficPolicy is Accepted): never before the gateway admits only its
    fleet. Once published it stays."""
    out = {}
    address = stack.address or _string(kept.get("address"))
    ca = stack.ca_certificate
    if ca is None and gateway.is_public_certificate(kept.get("caCertificate")):
        ca = kept["caCertificate"]
    if address:
        out["address"] = address
    if ca:
        out["caCertificate"] = ca
    clients = stack.client_cas
    was = bool(kept.get("hostname"))
    if (
        address
        and ca
        and ((clients and (stack.clients_enforced or was)) or (clients is None and was))
    ):
        out["hostname"] = gateway.hostname(inputs.xr.name)
    return out


def _string(value: object) -> str | None:
    return value if isinstance(value, str) and value else None
