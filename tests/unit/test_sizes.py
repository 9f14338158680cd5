"""One rule for every cloud: an autoscaling DRA pool never sits at zero (Cloud.sizes)."""

import pytest

from function.clusters.base import DRA_SCALE_FROM_ZERO
from tests.builders import all_classes, example, provider_configs
from tests.unit import sim


def handed(name: str, classes: list[dict]) -> dict[str, list[dict]]:
    """The classes, and the example's cloud ProviderConfig where it has one."""
    required = all_classes(classes)
    if provider_configs(name):
        required["cloud-provider-config"] = provider_configs(name)
    return required


# Where each cloud keeps a pool's smallest size, as a function of (key, body).
MINIMUM = {
    "gke": lambda b: b["spec"]["forProvider"]["autoscaling"]["totalMinNodeCount"],
    "aks": lambda b: b["spec"]["forProvider"]["minCount"],
    "nebius": lambda b: b["spec"]["forProvider"]["autoscaling"]["minNodeCount"],
    "eks-on-demand": lambda b: b["spec"]["initProvider"]["scalingConfig"]["minSize"],
}
PREFIX = {
    "gke": "nodepool-",
    "aks": "nodepool-",
    "nebius": "nodegroup-",
    "eks-on-demand": "nodegroup-",
}


@pytest.mark.parametrize("name", sorted(MINIMUM))
def test_an_autoscaling_dra_pool_keeps_a_node_on_every_cloud(name):
    xr, classes = example(name)
    pool = xr["spec"]["nodePools"][0]
    for key in ("nodeCount", "minNodeCount"):
        pool.pop(key, None)
    pool.update(minNodeCount=0, maxNodeCount=4)
    out = sim.converge(xr, handed(name, classes))
    body = out.resources[PREFIX[name] + pool["name"]].body
    assert MINIMUM[name](body) == 1
    (warning,) = [r for r in out.results if r.reason == "ScaleFromZeroUnsupported"]
    assert f"pool {pool['name']!r}: minNodeCount 0 is raised to 1" in warning.message


def test_no_cloud_claims_dra_scale_up_from_zero_without_a_source():
    assert frozenset() == DRA_SCALE_FROM_ZERO


@pytest.mark.parametrize(
    ("name", "prefix", "field", "expected"),
    [
        (
            "gke",
            "nodepool-",
            "upgradeSettings",
            {"strategy": "SURGE", "maxSurge": 0, "maxUnavailable": 1},
        ),
        (
            "aks",
            "nodepool-",
            "upgradeSettings",
            {"maxUnavailable": "1", "drainTimeoutInMinutes": 30},
        ),
        (
            "nebius",
            "nodegroup-",
            "strategy",
            {"maxSurge": {"count": 0}, "maxUnavailable": {"count": 1}, "drainTimeout": "15m"},
        ),
    ],
)
def test_gpu_pools_upgrade_without_an_extra_gpu_node(name, prefix, field, expected):
    """A surge node is one more GPU machine, which quota or capacity often refuses."""
    xr, classes = example(name)
    required = all_classes(classes)
    if provider_configs(name):
        required["cloud-provider-config"] = provider_configs(name)
    out = sim.converge(xr, required)
    pools = [prefix + p["name"] for p in xr["spec"]["nodePools"]]
    for key in pools:
        assert out.resources[key].body["spec"]["forProvider"][field] == expected
    system = next(k for k in out.resources if k.startswith("system-") or k == "cluster")
    assert field not in out.resources[system].body["spec"]["forProvider"]


# Where each cloud keeps its system pool's smallest size, from the converged composition.
SYSTEM_MINIMUM = {
    "eks": lambda r: r["system-nodegroup"]["spec"]["initProvider"]["scalingConfig"]["minSize"],
    "gke": lambda r: r["system-nodepool"]["spec"]["forProvider"]["autoscaling"][
        "totalMinNodeCount"
    ],
    "aks": lambda r: r["cluster"]["spec"]["forProvider"]["defaultNodePool"]["minCount"],
    "nebius": lambda r: r["system-nodegroup"]["spec"]["forProvider"]["autoscaling"]["minNodeCount"],
    # VKE reads the inline pool at creation only.
    "vultr": lambda r: r["cluster"]["spec"]["initProvider"]["nodePools"]["minNodes"],
}


@pytest.mark.parametrize("name", sorted(SYSTEM_MINIMUM))
def test_the_system_pool_keeps_two_nodes_so_a_drain_never_takes_the_gateway_down(name):
    """Both gateway replicas, the fail-closed webhooks and the schedulers run on the system
    pool, two replicas each under a disruption budget: a second node is what lets them move."""
    xr, classes = example(name)
    out = sim.converge(xr, handed(name, classes))
    bodies = {k: d.body for k, d in out.resources.items()}
    assert SYSTEM_MINIMUM[name](bodies) >= 2
