"""The AKS renderer: agent pools, InfiniBand and the network operator, shapes."""

import copy
import ipaddress

import pytest

from function.clusters import aks
from function.compose import compose_cluster
from function.inputs import Observed
from function.output import Output
from tests.builders import all_classes, example
from tests.unit import sim


def converge(xr: dict, classes: list[dict]) -> Output:
    return sim.converge(xr, all_classes(classes))


def test_agent_pool_is_named_after_the_pool_and_autoscales_from_its_initial_size():
    xr, classes = example("aks")
    out = converge(xr, classes)
    body = out.resources["nodepool-gpuh100"].body
    assert body["metadata"]["annotations"]["crossplane.io/external-name"] == "gpuh100"
    spec = body["spec"]
    wanted = {
        "autoScalingEnabled": True,
        "minCount": 2,
        "maxCount": 4,
        "zones": ["2"],
        "gpuDriver": "Install",
        "mode": "User",
        "nodeTaints": ["nvidia.com/gpu=true:NoSchedule"],
    }
    assert {k: spec["forProvider"].get(k) for k in wanted} == wanted
    assert spec["initProvider"] == {"nodeCount": 2}
    assert "LateInitialize" not in spec["managementPolicies"]
    assert spec["forProvider"]["nodeLabels"]["modelplane.ai/pool"] == "gpuh100"


def test_a_fixed_pool_sets_its_size_and_no_zones_when_none_are_given():
    xr, classes = example("aks-a10")
    pool = xr["spec"]["nodePools"][0]
    for k in ("minNodeCount", "maxNodeCount"):
        pool.pop(k)
    pool["nodeCount"] = 2
    out = compose_cluster(xr, all_classes(classes), Observed())
    spec = out.resources["nodepool-gpua10"].body["spec"]
    assert spec["forProvider"]["autoScalingEnabled"] is False
    assert spec["forProvider"]["nodeCount"] == 2
    assert "zones" not in spec["forProvider"]
    assert "initProvider" not in spec


def test_infiniband_installs_the_network_operator_once_the_cluster_is_reachable():
    xr, classes = example("aks")
    first = compose_cluster(xr, all_classes(classes), Observed())
    assert "release-network-operator" not in first.resources
    out = converge(xr, classes)
    values = out.resources["release-network-operator"].body["spec"]["forProvider"]["values"]
    assert values["ofedDriver"] == {"deploy": True}
    assert values["rdmaSharedDevicePlugin"]["deploy"] is True
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in values[
        "daemonsets"
    ]["tolerations"]
    # Without an InfiniBand pool there is no network operator.
    a10, a10_classes = example("aks-a10")
    assert "release-network-operator" not in converge(a10, a10_classes).resources


@pytest.mark.parametrize(
    ("vm_size", "expected"),
    [
        ("Standard_ND96is_H100_v5", "has no InfiniBand (RDMA sizes carry an r"),
        ("Standard_NC24ads_A100_v4", "has no InfiniBand"),
    ],
)
def test_infiniband_on_a_size_without_it_is_warned(vm_size, expected):
    xr, classes = example("aks")
    classes = copy.deepcopy(classes)
    classes[0]["spec"]["provisioning"]["aks"]["vmSize"] = vm_size
    out = compose_cluster(xr, all_classes(classes), Observed())
    assert any(expected in r.message and "pool 'gpuh100'" in r.message for r in out.results)


def test_accelerator_count_disagreeing_with_the_vm_size_is_warned():
    xr, classes = example("aks-a10")
    classes = copy.deepcopy(classes)
    classes[0]["spec"]["provisioning"]["aks"]["accelerator"]["count"] = 2
    out = compose_cluster(xr, all_classes(classes), Observed())
    assert any("accelerator count 2 disagrees with the 1 GPUs" in r.message for r in out.results)


def test_cluster_network_cannot_collide_with_pods_or_services():
    vnet = ipaddress.ip_network(aks.VNET_CIDR)
    for other in (aks.POD_CIDR, aks.SERVICE_CIDR):
        assert not vnet.overlaps(ipaddress.ip_network(other))
    assert ipaddress.ip_network(aks.NODE_SUBNET).subnet_of(vnet)
    assert ipaddress.ip_address(aks.DNS_SERVICE_IP) in ipaddress.ip_network(aks.SERVICE_CIDR)


def test_azure_files_storage_class_once_reachable():
    xr, classes = example("aks-a10")
    out = converge(xr, classes)
    manifest = out.resources["storage-class-rwx-fs"].body["spec"]["forProvider"]["manifest"]
    assert manifest["provisioner"] == "file.csi.azure.com"
    assert manifest["parameters"] == {"skuName": "Premium_LRS"}
    assert out.status["cache"] == {"storageClassName": "modelplane-rwx-fs"}
