"""The Vultr renderer: the VKE cluster, node pools with a floor of one, the GPU Operator's driver
root, no RWX storage, shapes."""

import copy

import pytest

from function.compose import compose_cluster
from function.inputs import Observed, ObservedResource
from function.names import kubeconfig_secret
from function.output import Output
from tests.builders import all_classes, example
from tests.sim.providers import observe
from tests.unit import sim


def reported(out: Output, overrides: dict[str, dict] | None = None) -> Observed:
    """Everything out composed as its provider reports it; overrides replace a status."""
    resources = {}
    for key, desired in out.resources.items():
        body = copy.deepcopy(desired.body)
        body["status"] = (overrides or {}).get(key) or observe(body).status
        resources[key] = ObservedResource(body)
    return Observed(resources=resources)


def converge(xr: dict, classes: list[dict], passes: int = 20, overrides=None) -> Output:
    out = compose_cluster(xr, all_classes(classes), Observed())
    for _ in range(passes):
        out = compose_cluster(xr, all_classes(classes), reported(out, overrides))
    return out


def cluster_ready(out: Output):
    return next(c for c in out.conditions if c.type == "ClusterReady")


def pool_spec(out: Output, pool: str = "gpu-l40s") -> dict:
    return out.resources[f"nodepool-{pool}"].body["spec"]


def test_vke_cluster_at_the_exact_version_with_an_ha_control_plane():
    xr, classes = example("vultr")
    out = compose_cluster(xr, all_classes(classes), Observed())
    spec = out.resources["cluster"].body["spec"]
    assert spec["forProvider"]["version"] == "v1.36.1+3"
    assert spec["forProvider"]["region"] == "ewr"
    assert spec["forProvider"]["haControlplanes"] is True
    assert spec["writeConnectionSecretToRef"] == {"name": kubeconfig_secret("vultr-ewr")}
    # VKE reads the inline system pool at creation only; its autoscaler owns the count.
    system = spec["initProvider"]["nodePools"]
    assert "nodePools" not in spec["forProvider"]
    assert (system["plan"], system["minNodes"], system["maxNodes"]) == ("vc2-6c-16gb", 2, 3)
    assert system["labels"] == [{"key": "modelplane.ai/role", "value": "system"}]
    assert "taints" not in system
    assert "LateInitialize" not in spec["managementPolicies"]
    # Vultr needs nothing from its ProviderConfig: none is required.
    assert "cloud-provider-config" not in out.requirements


def test_gpu_pool_labels_taint_and_the_device_plugin_switched_off():
    xr, classes = example("vultr")
    out = compose_cluster(xr, all_classes(classes), Observed())
    spec = pool_spec(out)["forProvider"]
    assert spec["clusterIdRef"] == {"name": out.resources["cluster"].body["metadata"]["name"]}
    assert spec["plan"] == "vcg-l40s-16c-180g-48vram"
    assert spec["labels"] == [
        {"key": "modelplane.ai/pool", "value": "gpu-l40s"},
        {"key": "modelplane.ai/gpu", "value": "nvidia-l40s"},
        {"key": "nvidia.com/gpu.deploy.device-plugin", "value": "false"},
    ]
    assert spec["taints"] == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]


def test_autoscaling_pool_seeds_its_size_once():
    xr, classes = example("vultr")
    xr["spec"]["nodePools"][0].update(nodeCount=2, minNodeCount=1, maxNodeCount=4)
    out = compose_cluster(xr, all_classes(classes), Observed())
    spec = pool_spec(out)
    assert (spec["forProvider"]["autoScaler"], spec["forProvider"]["minNodes"]) == (True, 1)
    assert spec["forProvider"]["maxNodes"] == 4
    assert "nodeQuantity" not in spec["forProvider"]
    assert spec["initProvider"] == {"nodeQuantity": 2}
    assert "LateInitialize" not in spec["managementPolicies"]
    assert out.status["gpuPools"][0]["nodes"] == 4


def test_fixed_pool_holds_its_size():
    xr, classes = example("vultr")
    pool = xr["spec"]["nodePools"][0]
    for k in ("minNodeCount", "maxNodeCount"):
        pool.pop(k)
    pool["nodeCount"] = 3
    spec = pool_spec(compose_cluster(xr, all_classes(classes), Observed()))
    assert spec["forProvider"]["nodeQuantity"] == 3
    assert spec["forProvider"]["autoScaler"] is False
    assert "minNodes" not in spec["forProvider"] and "initProvider" not in spec


@pytest.mark.parametrize(
    ("pool", "min_nodes", "quantity"),
    [
        ({"minNodeCount": 0, "maxNodeCount": 3}, 1, 1),
        ({"nodeCount": 0, "maxNodeCount": 3}, 1, 1),
        ({"maxNodeCount": 3}, 1, 1),
    ],
    ids=["min-zero", "size-zero", "max-only"],
)
def test_a_vultr_pool_never_goes_below_one_node(pool, min_nodes, quantity):
    xr, classes = example("vultr")
    spec = xr["spec"]["nodePools"][0]
    for k in ("nodeCount", "minNodeCount", "maxNodeCount"):
        spec.pop(k, None)
    spec.update(pool)
    out = pool_spec(compose_cluster(xr, all_classes(classes), Observed()))
    assert out["forProvider"]["minNodes"] == min_nodes
    assert out["initProvider"] == {"nodeQuantity": quantity}


def test_a_fixed_pool_of_zero_is_one_node():
    xr, classes = example("vultr")
    pool = xr["spec"]["nodePools"][0]
    for k in ("minNodeCount", "maxNodeCount"):
        pool.pop(k)
    pool["nodeCount"] = 0
    spec = pool_spec(compose_cluster(xr, all_classes(classes), Observed()))
    assert spec["forProvider"]["nodeQuantity"] == 1


# --- GPUs: the GPU Operator's driver, DRA's claims --------------------------------------------


def test_readiness_is_the_gpus_a_model_can_claim_not_the_gpu_operator():
    """VKE's GPU Operator is not watched: GPUsPublished (function/serving/gpus.py) proves more,
    on a fixed pool (an autoscaled one is not probed)."""
    xr, classes = example("vultr")
    pool = xr["spec"]["nodePools"][0]
    for k in ("minNodeCount", "maxNodeCount"):
        pool.pop(k)
    out = converge(xr, classes)
    assert not any("toolkit" in k for k in out.resources)
    assert "gpu-probe-gpu-l40s" in out.resources
    published = next(c for c in out.conditions if c.type == "GPUsPublished")
    assert (published.status, published.reason) == (True, "Claimable")


def test_the_dra_driver_reads_the_driver_where_the_gpu_operator_puts_it():
    xr, classes = example("vultr")
    out = converge(xr, classes)
    values = out.resources["release-nvidia-dra-driver"].body["spec"]["forProvider"]["values"]
    assert values["nvidiaDriverRoot"] == "/run/nvidia/driver"


def test_vke_firewall_at_creation_and_a_warning_for_a_cluster_without_one():
    xr, classes = example("vultr")
    out = converge(xr, classes)
    spec = out.resources["cluster"].body["spec"]
    assert spec["initProvider"]["enableFirewall"] is True
    # ForceNew in the provider: never in forProvider, where it would ask to replace a cluster.
    assert "enableFirewall" not in spec["forProvider"]
    assert not [r for r in out.results if r.reason == "NoFirewall"]
    observed = reported(out)
    old = copy.deepcopy(observed.resources["cluster"].body)
    old["status"]["atProvider"]["firewallGroupId"] = ""
    resources = {**observed.resources, "cluster": ObservedResource(old)}
    again = compose_cluster(xr, all_classes(classes), Observed(resources=resources))
    warned = [r.message for r in again.results if r.reason == "NoFirewall"]
    assert warned and "at creation only" in warned[0]
    assert again.resources["cluster"].body == out.resources["cluster"].body


def test_no_rwx_storage_and_no_cache_status():
    xr, classes = example("vultr")
    out = converge(xr, classes)
    assert "cache" not in out.status
    assert not [k for k in out.resources if "storage" in k]
    assert out.status["providerConfigRef"]["name"]


def test_a_lost_cluster_status_keeps_every_dependent():
    xr, classes = example("vultr")
    out = converge(xr, classes)
    observed = reported(out)
    lost = dict(observed.resources)
    body = copy.deepcopy(lost["cluster"].body)
    del body["status"]
    lost["cluster"] = ObservedResource(body)
    again = compose_cluster(xr, all_classes(classes), Observed(resources=lost))
    assert set(again.resources) == set(out.resources)
    for key, desired in out.resources.items():
        assert again.resources[key].body == desired.body, key


def test_pool_names_that_are_label_values_get_valid_cloud_names():
    xr, classes = example("vultr")
    xr["spec"]["nodePools"][0]["name"] = "H100_Pool"
    xr["spec"]["nodePools"].append({**xr["spec"]["nodePools"][0], "name": "h100-pool"})
    out = compose_cluster(xr, all_classes(classes), Observed())
    a = out.resources["nodepool-H100_Pool"].body
    b = out.resources["nodepool-h100-pool"].body
    assert a["metadata"]["name"] != b["metadata"]["name"]
    assert a["spec"]["forProvider"]["label"] != b["spec"]["forProvider"]["label"]
    for body in (a, b):
        for name in (body["metadata"]["name"], body["spec"]["forProvider"]["label"]):
            assert name.islower() and "_" not in name
    assert {"key": "modelplane.ai/pool", "value": "H100_Pool"} in a["spec"]["forProvider"]["labels"]


# --- shapes ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"plan": "vcg-l40s-32c-375g-96vram"}, "accelerator count 1 disagrees with the 2 GPUs"),
        ({"plan": "vcg-a100-1c-6g-4vram"}, "a fractional vGPU (0.05 of a GPU)"),
        ({"plan": "vc2-6c-16gb"}, "not a GPU plan in the shape table"),
        ({"plan": "vcg-b200-248c-2826g-1536vram"}, "accelerator count 1 disagrees with the 8 GPUs"),
    ],
    ids=["count", "fractional", "not-a-gpu-plan", "b200"],
)
def test_shape_warnings(change, expected):
    xr, classes = example("vultr")
    classes = copy.deepcopy(classes)
    classes[0]["spec"]["provisioning"]["vultr"].update(change)
    out = compose_cluster(xr, all_classes(classes), Observed())
    found = [r.message for r in out.results if r.reason == "ShapeMismatch"]
    assert any(expected in w for w in found), found
    assert all("pool 'gpu-l40s'" in w for w in found)


def test_declared_gpu_devices_are_checked_against_the_plan():
    xr, classes = example("vultr")
    classes = copy.deepcopy(classes)
    classes[0]["spec"]["devices"][0]["count"] = 2
    out = compose_cluster(xr, all_classes(classes), Observed())
    assert any("declares 2 GPU devices, but the plan has 1" in r.message for r in out.results)


def test_the_example_has_no_warnings():
    xr, classes = example("vultr")
    out = converge(xr, classes)
    assert [r for r in out.results if r.severity == "Warning"] == []


def test_raising_the_version_upgrades_the_cluster_and_vke_its_pools():
    xr, classes = example("vultr")

    def raise_version(x: dict) -> None:
        x["spec"]["cluster"]["vultr"]["kubernetesVersion"] = "v1.99.0+1"

    converged, *after = sim.upgrade(xr, all_classes(classes), raise_version)
    # One change, the cluster's version: the provider turns it into VKE's cluster upgrade call,
    # and a KubernetesNodePool has no version of its own to follow it with.
    assert len(after) == 1
    changed = {c for c in sim.changes(converged, after[0]) if not c[0].startswith("usage")}
    assert changed == {("cluster", "spec.forProvider.version")}
    assert after[0].resources["cluster"].body["spec"]["forProvider"]["version"] == "v1.99.0+1"


@pytest.mark.parametrize("running", ["v1.36.2+1", "v1.37.0+1"])
def test_a_cluster_running_a_newer_build_than_the_spec_keeps_asking_for_it(running):
    """Upgraded from Vultr's console (or by Vultr): VKE cannot downgrade, and the provider would
    ask it to on every sync (terraform-provider-vultr v2.32.0: Update calls Kubernetes.Upgrade
    whenever the version differs)."""
    xr, classes = example("vultr")
    xr["spec"]["cluster"]["vultr"]["kubernetesVersion"] = "v1.36.1+3"
    out = converge(xr, classes)
    seen = reported(out)
    seen.resources["cluster"].body["status"]["atProvider"]["version"] = running
    again = compose_cluster(xr, all_classes(classes), seen)
    assert again.resources["cluster"].body["spec"]["forProvider"]["version"] == running
    said = [r.message for r in again.results if r.reason == "VersionDowngrade"]
    assert said and f"so it stays at {running}" in said[0]
    # The same build, or an older one running (an upgrade under way), asks for the spec's.
    for same_or_older in ("v1.36.1+3", "v1.35.9+2"):
        seen.resources["cluster"].body["status"]["atProvider"]["version"] = same_or_older
        again = compose_cluster(xr, all_classes(classes), seen)
        assert again.resources["cluster"].body["spec"]["forProvider"]["version"] == "v1.36.1+3"
        assert not [r for r in again.results if r.reason == "VersionDowngrade"]


def test_every_node_pool_is_deleted_before_its_cluster():
    """A pool whose cluster went first would fail every Observe and hold its finalizer."""
    xr, classes = example("vultr")
    out = converge(xr, classes)
    pools = [k for k in out.resources if k.startswith("nodepool-")]
    assert pools
    for key in pools:
        usage = out.resources[f"usage-cluster-by-{key}"].body["spec"]
        assert usage["of"]["kind"] == "Kubernetes" and usage["by"]["kind"] == "KubernetesNodePool"
        assert usage["by"]["resourceRef"]["name"] == out.resources[key].body["metadata"]["name"]


def test_a_live_cluster_with_a_one_node_system_pool_gets_a_second_one_and_keeps_it():
    """VKE reads the inline system pool at creation only: clusters created before v0.3.0 asked
    for one node, and get a managed system pool beside it; new ones ask for two and get none."""
    xr, classes = example("vultr")
    out = converge(xr, classes)
    assert "system-nodepool" not in out.resources
    assert next(c for c in out.conditions if c.type == "ClusterReady").status
    seen = with_one_node_inline_pool(reported(out))
    again = compose_cluster(xr, all_classes(classes), seen)
    pool = again.resources["system-nodepool"].body["spec"]
    assert pool["forProvider"]["labels"] == [{"key": "modelplane.ai/role", "value": "system"}]
    assert "taints" not in pool["forProvider"]
    assert (pool["forProvider"]["minNodes"], pool["forProvider"]["maxNodes"]) == (1, 2)
    assert "usage-cluster-by-system-nodepool" in again.resources
    # Kept once there, whatever the cluster's status says for a moment.
    later = reported(again)
    later.resources["cluster"].body["status"]["atProvider"].pop("nodePools")
    kept = compose_cluster(xr, all_classes(classes), later)
    assert kept.resources["system-nodepool"].body == again.resources["system-nodepool"].body


def test_the_second_system_pool_never_takes_the_name_of_a_spec_pool_named_system():
    xr, classes = example("vultr")
    xr["spec"]["nodePools"][0]["name"] = "system"
    out = converge(xr, classes)
    seen = with_one_node_inline_pool(reported(out))
    again = compose_cluster(xr, all_classes(classes), seen)
    pools = [
        d.body for k, d in again.resources.items() if k in ("system-nodepool", "nodepool-system")
    ]
    assert len(pools) == 2
    assert len({b["metadata"]["name"] for b in pools}) == 2
    assert len({b["spec"]["forProvider"]["label"] for b in pools}) == 2


def with_one_node_inline_pool(seen: Observed) -> Observed:
    """seen, its cluster reporting the inline system pool clusters before v0.3.0 were made with."""
    inline = {"autoScaler": True, "minNodes": 1, "maxNodes": 2, "nodeQuantity": 1}
    seen.resources["cluster"].body["status"]["atProvider"]["nodePools"] = inline
    return seen
