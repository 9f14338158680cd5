"""Every cloud example converges through the real CLI, and stays safe while it runs.

For each example: `crossplane render` pass after pass with the providers simulated
(tests/converge.py) until nothing changes; then the final set, ClusterReady, readiness and status
are checked, and three hostile passes are replayed from the converged state: the classes gone,
every observed status lost, a pool dropped from the spec. Every resource rendered at every pass,
and every manifest inside an Object, is validated against the real schemas at the end.
"""

from dataclasses import replace

import pytest

from function.serving import gpus
from tests.builders import example, provider_configs
from tests.converge import SCHEMAS, Pass, Renderer, converge, next_xr, observed_as_provider_reports
from tests.golden import check_golden
from tests.sim.providers import World
from tests.sim.workload import healthy_gpu_nodes, inference_gateway
from tests.tools.server import function_server
from tests.validation import validate_everything

# The fleet's InferenceGateway: its client CA opens every cluster's gateway.
FLEET = [inference_gateway("fleet-a")]
CAPACITY_BLOCKS = World(
    capacity_reservations={
        "cr-0123456789abcdef0": {
            "availabilityZone": "us-east-2b",
            "instanceType": "p5en.48xlarge",
            "instanceCount": 2,
            "endDate": "2099-12-14T11:30:00Z",
        }
    },
    inference_gateways=FLEET,
)
# Example -> the world its providers see. "<example>/H100_Pool" is the example with its first
# pool renamed to a label value no cloud takes as a resource name. Where the world has no
# InferenceGateways, the gateway stays closed and the hostname withheld.
EXAMPLES: dict[str, World] = {
    "existing": World(inference_gateways=FLEET),
    "existing-dynamo": World(inference_gateways=FLEET),
    "eks": CAPACITY_BLOCKS,
    "eks-on-demand": World(inference_gateways=None),
    "eks-on-demand/H100_Pool": World(inference_gateways=[]),
    "gke": World(inference_gateways=FLEET),
    "gke-team": World(inference_gateways=FLEET),
    "gke/H100_Pool": World(inference_gateways=FLEET),
    "aks": World(inference_gateways=FLEET),
    "aks-a10": World(inference_gateways=FLEET),
    "nebius": World(inference_gateways=FLEET),
    "nebius/H100_Pool": World(inference_gateways=FLEET),
    "vultr": World(inference_gateways=FLEET),
    "vultr/H100_Pool": World(inference_gateways=FLEET),
}
RENAMED_POOL = "H100_Pool"


def load(name: str) -> tuple[dict, list[dict]]:
    base, _, pool_name = name.partition("/")
    xr, classes = example(base)
    if pool_name:
        xr["spec"]["nodePools"][0]["name"] = pool_name
    return xr, classes


def node_role_usages(group: str) -> set[str]:
    """The Usage by which the node group outlives the cluster's kubeconfig writer (and so the
    stack). The node and vpc-cni roles outlive it through the cluster, whose Usages stay."""
    return {f"usage-{group}-by-cluster-auth"}


# Example -> (pool to drop, the composed keys that are that pool's own).
def gpu_probe(name: str, pool: str) -> set[str]:
    """A fixed GPU pool's probe (function/serving/gpus.py) and the Usages keeping its namespace;
    an autoscaled pool has none."""
    xr, _ = load(name)
    spec = next(p for p in xr["spec"]["nodePools"] if p["name"] == pool)
    if spec.get("maxNodeCount", 0) > spec.get("minNodeCount", 0):
        return set()
    keys = {gpus.claim_key(pool), gpus.probe_key(pool)}
    return keys | {f"usage-{gpus.NAMESPACE_KEY}-by-{k}" for k in keys}


POOL_RESOURCES: dict[str, tuple[str, set[str]]] = {
    "eks": (
        "gpu-h200",
        {
            "nodegroup-gpu-h200",
            "launch-template-gpu-h200",
            "capacity-block-gpu-h200",
            # The node role outlives the node group (the IAM teardown order).
            *node_role_usages("nodegroup-gpu-h200"),
            # The EFA driver and group go with the last EFA pool.
            "efa-security-group",
            "efa-security-group-ingress",
            "efa-security-group-egress",
            "release-efa-dra-driver",
        },
    ),
    "eks-on-demand": (
        "gpu-l40s",
        {
            "nodegroup-gpu-l40s",
            "launch-template-gpu-l40s",
            *node_role_usages("nodegroup-gpu-l40s"),
        },
    ),
    "gke": ("gpu-h100", {"nodepool-gpu-h100"}),
    # The network operator, its policy and the peermem reloader go with the last InfiniBand pool.
    "aks": (
        "gpuh100",
        {
            "nodepool-gpuh100",
            "release-network-operator",
            "nic-cluster-policy",
            "nvidia-peermem-reloader",
        },
    ),
    # The fabric's GPU cluster goes with the last pool on the fabric.
    "nebius": (
        "gpu-h100",
        {"nodegroup-gpu-h100", "gpu-cluster-fabric-2"},
    ),
    # The cluster outlives each pool (the deletion order).
    "vultr": ("gpu-l40s", {"nodepool-gpu-l40s", "usage-cluster-by-nodepool-gpu-l40s"}),
}


def content(body: dict) -> dict:
    """What a composed resource asks for: its spec, or a core kind's data (a Secret's)."""
    return {k: v for k, v in body.items() if k not in ("apiVersion", "kind", "metadata", "status")}


@pytest.fixture(scope="module")
def renderer(crossplane, tmp_path_factory):
    with function_server() as server:
        yield Renderer(
            crossplane, server.target, tmp_path_factory.mktemp("renders"), schemas=SCHEMAS
        )


@pytest.fixture(scope="module")
def converged(renderer) -> dict[str, list[Pass]]:
    out = {}
    for name, world in EXAMPLES.items():
        xr, classes = load(name)
        # Each pool's nodes are there, healthy, as the GPU health reporter lists them.
        seen = replace(world, gpu_nodes=healthy_gpu_nodes(xr))
        out[name] = converge(renderer, xr, classes + provider_configs(name.split("/")[0]), seen)
    return out


def replay(renderer: Renderer, name: str, last: Pass, *, xr=None, classes=None, observed=None):
    """One more reconcile from a converged state, with something taken away."""
    base_xr, base_classes = load(name)
    return renderer.render(
        next_xr(xr or base_xr, last),
        (base_classes if classes is None else classes)
        + provider_configs(name.split("/")[0])
        + (EXAMPLES[name].inference_gateways or []),
        observed
        if observed is not None
        else observed_as_provider_reports(last.composed, EXAMPLES[name]),
    )


@pytest.mark.parametrize("name", EXAMPLES)
def test_converges_to_a_ready_cluster(converged, name):
    passes = converged[name]
    first, last = passes[0], passes[-1]
    assert not first.ready, "a first reconcile is never Ready"
    if not name.startswith("existing"):
        assert first.condition("ClusterReady")["reason"] == "Provisioning"
    assert last.ready
    cluster_ready = last.condition("ClusterReady")
    assert (cluster_ready["status"], cluster_ready["reason"]) == ("True", "Available")
    backend = last.condition("BackendReady")
    gateway = last.xr["status"].get("gateway", {})
    if EXAMPLES[name].inference_gateways:
        assert (backend["status"], backend["reason"]) == ("True", "Available")
        assert gateway["address"] == "203.0.113.10"
        assert gateway["hostname"].endswith(".modelplane-system.svc.cluster.local")
        assert gateway["caCertificate"].startswith("-----BEGIN CERTIFICATE-----")
    else:
        assert (backend["status"], backend["reason"]) == ("False", "WaitingForClients")
        assert "hostname" not in gateway and "address" not in gateway
        assert "gateway" not in last.composed
    status = last.xr["status"]
    assert status["namespace"] == "modelplane-system"
    pc = status["providerConfigRef"]["name"]
    assert last.composed["provider-config-kubernetes"]["metadata"]["name"] == pc
    xr, _ = load(name)
    assert [p["name"] for p in status["gpuPools"]] == [p["name"] for p in xr["spec"]["nodePools"]]
    assert last.warnings() == []
    if "/" not in name:
        check_golden(f"{name}-converged", [last.xr, *last.composed.values(), *last.results])


@pytest.mark.parametrize("name", [n for n in EXAMPLES if n.endswith(RENAMED_POOL)])
def test_a_label_value_pool_name_makes_valid_cloud_names(converged, name):
    """Its resources get lowercase, hashed names; its nodes the label as written."""
    last = converged[name][-1]
    pool_resources = [k for k in last.composed if k.endswith(f"-{RENAMED_POOL}")]
    assert pool_resources
    for key in pool_resources:
        metadata_name = last.composed[key]["metadata"]["name"]
        assert metadata_name == metadata_name.lower() and "_" not in metadata_name, key
    labelled = [
        body
        for body in last.composed.values()
        if RENAMED_POOL in str(body.get("spec", {}).get("forProvider", {}).get("labels", {}))
        or RENAMED_POOL in str(body.get("spec", {}).get("forProvider", {}).get("nodeConfig", {}))
        or RENAMED_POOL in str(body.get("spec", {}).get("forProvider", {}).get("template", {}))
    ]
    assert labelled, "no node pool carries the modelplane.ai/pool label"
    assert all("modelplane.ai/pool" in str(body["spec"]["forProvider"]) for body in labelled)


@pytest.mark.parametrize("name", EXAMPLES)
def test_a_deleted_class_keeps_every_resource(renderer, converged, name):
    last = converged[name][-1]
    after = replay(renderer, name, last, classes=[])
    assert set(after.composed) == set(last.composed)
    for key, body in last.composed.items():
        assert content(after.composed[key]) == content(body), key
    assert not after.ready
    assert after.condition("ClassesResolved")["reason"] == "ClassNotFound"
    if not name.startswith("existing"):  # an existing cluster needs no class to be reached
        assert after.condition("ClusterReady")["reason"] == "WaitingForClasses"
    assert after.xr["status"]["gpuPools"] == last.xr["status"]["gpuPools"]


@pytest.mark.parametrize("name", EXAMPLES)
def test_lost_observations_remove_and_change_nothing(renderer, converged, name):
    last = converged[name][-1]
    observed = observed_as_provider_reports(last.composed, EXAMPLES[name])
    for body in observed:
        del body["status"]
    after = replay(renderer, name, last, observed=observed)
    assert set(after.composed) == set(last.composed)
    for key, body in last.composed.items():
        assert content(after.composed[key]) == content(body), key
    assert after.xr["status"]["providerConfigRef"] == last.xr["status"]["providerConfigRef"]
    assert after.xr["status"].get("cache") == last.xr["status"].get("cache")


@pytest.mark.parametrize("name", POOL_RESOURCES)
def test_dropping_a_pool_removes_exactly_its_resources(renderer, converged, name):
    last = converged[name][-1]
    pool, own = POOL_RESOURCES[name]
    xr, _ = load(name)
    xr["spec"]["nodePools"] = [p for p in xr["spec"]["nodePools"] if p["name"] != pool]
    if not xr["spec"]["nodePools"]:
        del xr["spec"]["nodePools"]
    gone = own | gpu_probe(name, pool)
    after = replay(renderer, name, last, xr=xr)
    # What a Usage names stays while that Usage, rewritten without its user, goes first
    # (usages.retiring): then it goes, and nothing else ever does.
    for _ in range(4):
        assert set(last.composed) - set(after.composed) <= gone
        for key in after.composed:
            if key in last.composed and key.startswith("usage-") and key not in gone:
                assert content(after.composed[key]) == content(last.composed[key]), key
        if set(last.composed) - set(after.composed) == gone:
            break
        after = replay(renderer, name, after, xr=xr)
    assert set(last.composed) - set(after.composed) == gone
    for key in after.composed:
        if key in last.composed:
            assert content(after.composed[key]) == content(last.composed[key]), key


def test_everything_rendered_validates(crossplane, validate_cache, converged, tmp_path):
    docs = [d for passes in converged.values() for p in passes for d in [*p.composed.values()]]
    count, _ = validate_everything(crossplane, validate_cache, docs, tmp_path)
    assert count > 100
