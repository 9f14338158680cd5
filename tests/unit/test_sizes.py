"""One rule for every cloud: an autoscaling DRA pool never sits at zero (Cloud.sizes)."""

import pytest

from function.clusters.base import DRA_SCALE_FROM_ZERO
from tests.builders import all_classes, example, provider_configs
from tests.unit import sim

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
    required = all_classes(classes)
    if provider_configs(name):
        required["cloud-provider-config"] = provider_configs(name)
    out = sim.converge(xr, required)
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
        ("aks", "nodepool-", "upgradeSettings", {"maxUnavailable": "1"}),
        (
            "nebius",
            "nodegroup-",
            "strategy",
            {"maxSurge": {"count": 0}, "maxUnavailable": {"count": 1}},
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
