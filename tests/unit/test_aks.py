"""The AKS renderer: agent pools, InfiniBand and the network operator, shapes."""

import copy
import ipaddress
import itertools
import json
import uuid
from datetime import timedelta

import pytest
import yaml

from function import clock, shapes
from function.clusters import aks, calendars
from function.compose import compose_cluster
from function.inputs import Observed
from function.models import InferenceCluster
from function.output import Output
from function.serving import GATEWAY_SCHEMA, GATEWAYS
from tests import charts, nodes
from tests.builders import all_classes, example
from tests.sim.providers import conditions
from tests.sim.workload import inference_gateway
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


GUIDE = "manifests/aks-rdma-infiniband/configs"


def guide(path: str) -> dict:
    """A manifest of Azure's aks-rdma-infiniband guide (../shared/charts/manifests)."""
    return yaml.safe_load((charts.charts_dir() / GUIDE / path).read_text())


def manifest(out: Output, key: str) -> dict:
    return out.resources[key].body["spec"]["forProvider"]["manifest"]


def test_network_operator_sets_only_values_its_chart_reads_and_leaves_nfd_to_the_stack():
    xr, classes = example("aks")
    out = converge(xr, classes)
    release = out.resources["release-network-operator"].body["spec"]["forProvider"]
    chart = charts.chart_path(release["chart"]["name"], release["chart"]["version"])
    assert chart is not None
    values = release["values"]
    unread = [p for p in charts.leaf_paths(values) if not charts.reads(chart, p)]
    assert not unread, f"values {chart.name} never reads: {unread}"
    # What 26.4.0 no longer reads (the NicClusterPolicy left the chart): the check would catch it.
    for gone in (
        ("deployCR",),
        ("ofedDriver", "deploy"),
        ("rdmaSharedDevicePlugin", "deploy"),
        ("daemonsets", "tolerations"),
    ):
        assert not charts.reads(chart, gone), gone
    # One NFD per cluster, the stack's; the chart's NodeFeatureRule labels the NICs through it.
    assert values["nfd"] == {"enabled": False, "deployNodeFeatureRules": True}
    assert "release-node-feature-discovery" in out.resources


def test_network_operator_waits_for_the_stacks_nfd_and_the_policy_for_the_operator():
    xr, classes = example("aks")
    required = all_classes(classes)
    out = sim.converge(xr, required)
    # The stack's NFD not Ready yet: the operator waits (its NodeFeatureRule needs NFD's CRDs).
    observed = sim.reported(out)
    for key in ("release-network-operator", "nic-cluster-policy", "nvidia-peermem-reloader"):
        del observed.resources[key]
    nfd = observed.resources["release-node-feature-discovery"].body
    nfd["status"]["conditions"] = conditions(ready=False, reason="Creating")
    waiting = compose_cluster(xr, required, observed)
    assert "release-network-operator" not in waiting.resources
    assert "nic-cluster-policy" not in waiting.resources
    cluster_ready = next(c for c in waiting.conditions if c.type == "ClusterReady")
    assert "release-network-operator" in cluster_ready.message
    # NFD Ready: the operator comes, and only once it is Ready its policy and the reloader.
    nfd["status"]["conditions"] = conditions()
    operator = compose_cluster(xr, required, observed)
    assert "release-network-operator" in operator.resources
    assert "nic-cluster-policy" not in operator.resources
    assert "nvidia-peermem-reloader" not in operator.resources
    after = compose_cluster(xr, required, sim.reported(operator))
    assert {"nic-cluster-policy", "nvidia-peermem-reloader"} <= set(after.resources)


def test_nic_cluster_policy_is_the_guides_driver_and_rdma_plugin_on_the_infiniband_pools():
    xr, classes = example("aks")
    out = converge(xr, classes)
    body = out.resources["nic-cluster-policy"].body
    assert body["spec"]["readiness"]["policy"] == "DeriveFromCelQuery"
    policy = manifest(out, "nic-cluster-policy")
    assert policy["metadata"]["name"] == "nic-cluster-policy"
    spec = policy["spec"]
    base = guide("nicclusterpolicy/base/nic.yaml")["spec"]["ofedDriver"]
    rdma = guide("nicclusterpolicy/rdma-shared-device-plugin/rdma.yaml")["spec"]
    # The guide's driver settings, at the network operator's own image version.
    same = ("repository", "image", "env", "forcePrecompiled", "upgradePolicy", "startupProbe")
    assert {k: spec["ofedDriver"][k] for k in same} == {k: base[k] for k in same}
    assert spec["ofedDriver"]["livenessProbe"] == base["livenessProbe"]
    assert spec["ofedDriver"]["readinessProbe"] == base["readinessProbe"]
    assert spec["ofedDriver"]["version"] == "doca3.4.0-26.04-0.8.6.0-0"
    plugin = spec["rdmaSharedDevicePlugin"]
    guide_plugin = rdma["rdmaSharedDevicePlugin"]
    assert json.loads(plugin["config"]) == json.loads(guide_plugin["config"])
    assert (plugin["repository"], plugin["image"]) == (
        guide_plugin["repository"],
        guide_plugin["image"],
    )
    # On the nodes of the InfiniBand pools the network operator sees NICs on, despite the taint
    # they carry.
    terms = spec["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    expressions = terms["nodeSelectorTerms"][0]["matchExpressions"]
    assert {"key": "modelplane.ai/pool", "operator": "In", "values": ["gpuh100"]} in expressions
    assert {
        "key": "feature.node.kubernetes.io/pci-15b3.present",
        "operator": "In",
        "values": ["true"],
    } in expressions
    assert tolerates(spec["tolerations"], out.resources["nodepool-gpuh100"].body)


def tolerates(tolerations: list[dict], pool: dict) -> bool:
    """Every taint of the agent pool (key=value:Effect) is tolerated."""
    for taint in pool["spec"]["forProvider"]["nodeTaints"]:
        key_value, effect = taint.split(":")
        key, value = key_value.split("=")
        if not any(
            t["key"] == key
            and t.get("effect") in (None, effect)
            and (t["operator"] == "Exists" or t.get("value") == value)
            for t in tolerations
        ):
            return False
    return True


def test_peermem_reloader_is_the_guides_on_the_infiniband_gpu_nodes():
    xr, classes = example("aks")
    out = converge(xr, classes)
    ds = manifest(out, "nvidia-peermem-reloader")
    ours = ds["spec"]["template"]["spec"]
    theirs = guide("nvidia-peermem-reloader/ds.yaml")["spec"]["template"]["spec"]
    assert ours["containers"] == theirs["containers"]
    assert ours["volumes"] == theirs["volumes"]
    assert ours["priorityClassName"] == theirs["priorityClassName"]
    # The network operator's namespace, which its release creates; our taint, not the guide's.
    assert ds["metadata"]["namespace"] == "nvidia-network-operator"
    assert tolerates(ours["tolerations"], out.resources["nodepool-gpuh100"].body)
    expressions = ours["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"][0]["matchExpressions"]
    assert {
        "key": "kubernetes.azure.com/accelerator",
        "operator": "In",
        "values": ["nvidia"],
    } in expressions
    assert out.resources["nvidia-peermem-reloader"].body["spec"]["readiness"]["celQuery"]


def test_infiniband_pools_come_from_the_spec_so_a_missing_class_changes_nothing():
    xr, classes = example("aks")
    out = converge(xr, classes)
    gone = compose_cluster(xr, {}, sim.reported(out))
    for key in ("release-network-operator", "nic-cluster-policy", "nvidia-peermem-reloader"):
        assert gone.resources[key].body == out.resources[key].body
    # Without an InfiniBand pool there is no network operator, policy or reloader.
    a10, a10_classes = example("aks-a10")
    plain = converge(a10, a10_classes)
    for key in ("release-network-operator", "nic-cluster-policy", "nvidia-peermem-reloader"):
        assert key not in plain.resources


def test_cluster_identity_gets_network_contributor_on_its_subnet_and_keeps_it():
    xr, classes = example("aks-a10")
    required = all_classes(classes)
    first = compose_cluster(xr, required, Observed())
    assert "subnet-network-contributor" not in first.resources
    out = sim.converge(xr, required)
    role = out.resources["subnet-network-contributor"].body
    assert role["apiVersion"] == "authorization.azure.m.upbound.io/v1beta1"
    observed = sim.reported(out)
    cluster = observed.resources["cluster"].at_provider("identity", "principalId")
    subnet = observed.resources["subnet"].at_provider("id")
    spec = role["spec"]["forProvider"]
    assert (spec["principalId"], spec["scope"]) == (cluster, subnet)
    assert spec["roleDefinitionName"] == "Network Contributor"
    assert spec["principalType"] == "ServicePrincipal"
    assert str(uuid.UUID(spec["name"])) == spec["name"]
    # A lost status on the cluster or subnet keeps the assignment as it is.
    lost = compose_cluster(xr, required, sim.reported(out, drop_status=("cluster", "subnet")))
    assert lost.resources["subnet-network-contributor"].body == role


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


@pytest.mark.parametrize("name", ["aks", "aks-a10"])
def test_nodes_are_reimaged_for_security_patches_only_and_only_in_the_weekly_window(name):
    """AKS's default (NodeImage, no window) reimages every GPU node weekly at any hour. The
    window is what the AKS API takes (provider-upjet-azure v2.7.0 maintenanceWindowNodeOs:
    4 to 24 hours, a day of the week for a weekly one)."""
    xr, classes = example(name)
    spec = converge(xr, classes).resources["cluster"].body["spec"]["forProvider"]
    assert spec["nodeOsUpgradeChannel"] == "SecurityPatch"
    window = spec["maintenanceWindowNodeOs"]
    assert window["frequency"] == "Weekly" and window["interval"] == 1
    assert window["dayOfWeek"] in ("Saturday", "Sunday")
    assert 4 <= window["duration"] <= 24
    assert window["utcOffset"] == "+00:00" and window["startTime"] == "00:00"
    # Set at creation too: a new cluster never starts on the default channel.
    first = compose_cluster(xr, all_classes(classes), Observed())
    assert first.resources["cluster"].body["spec"]["forProvider"]["nodeOsUpgradeChannel"] == (
        "SecurityPatch"
    )


def test_the_control_plane_is_on_the_tier_with_an_uptime_sla():
    """AKS's Free tier has no SLA and fewer API requests (AKS "Free, Standard and Premium
    pricing tiers"); skuTier changes in place (azurerm: not ForceNew)."""
    xr, classes = example("aks")
    spec = converge(xr, classes).resources["cluster"].body["spec"]["forProvider"]
    assert spec["skuTier"] == "Standard"


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


# --- upgrades -------------------------------------------------------------------------------------


def two_minors_up(xr: dict) -> None:
    aks_spec = xr["spec"]["cluster"]["aks"]
    major, minor_ = aks_spec.get("kubernetesVersion", "1.34").split(".")[:2]
    aks_spec["kubernetesVersion"] = f"{major}.{int(minor_) + 2}"


@pytest.mark.parametrize("name", ["aks", "aks-a10"])
def test_raising_the_version_turns_the_channel_off_then_steps_a_minor_and_a_pool_at_a_time(name):
    """AKS refuses a control plane upgrade without its pools while a channel is set ("Cluster
    auto-upgrade limitations"), and azurerm upgrades the control plane alone: the channel goes
    first, then each minor, the system pool and every agent pool one after the other (GPU pools
    last), and the channel comes back once every pool runs the spec's minor."""
    xr, classes = example(name)
    passes = sim.upgrade(xr, all_classes(classes), two_minors_up)
    converged = passes[0]
    start = converged.resources["cluster"].body["spec"]["forProvider"]["kubernetesVersion"]
    major, minor_ = start.split(".")
    step, target = f"{major}.{int(minor_) + 1}", f"{major}.{int(minor_) + 2}"
    user_pools = sorted(k for k in converged.resources if k.startswith("nodepool-"))
    assert user_pools
    channel = {("cluster", "spec.forProvider.automaticUpgradeChannel")}
    control_plane = {("cluster", "spec.forProvider.kubernetesVersion")}
    system = {("cluster", "spec.forProvider.defaultNodePool.orchestratorVersion")}
    pools = [{(k, "spec.forProvider.orchestratorVersion")} for k in user_pools]
    steps = [
        {c for c in sim.changes(a, b) if not c[0].startswith("usage")}
        for a, b in itertools.pairwise(passes)
    ]
    one_minor = [control_plane, system, *pools]
    assert steps == [channel, *one_minor, *one_minor, channel]
    versions = [p.resources["cluster"].body["spec"]["forProvider"] for p in passes]
    assert [v.get("automaticUpgradeChannel") for v in versions] == [
        "patch",
        *[None] * (len(passes) - 2),
        "patch",
    ]
    # Only minors go to AKS, the pools' included: AKS runs the minor's newest patch.
    assert [v["kubernetesVersion"] for v in versions][:3] == [start, start, step]
    assert versions[-1]["kubernetesVersion"] == target
    assert versions[-1]["defaultNodePool"]["orchestratorVersion"] == target
    stepwise = [r.message for p in passes for r in p.results if r.reason == "UpgradingStepwise"]
    assert stepwise and f"upgrading to {step} first" in stepwise[0]
    following = [r.message for p in passes for r in p.results if r.reason == "NodePoolsFollowing"]
    assert any(f"then {user_pools[0]}" in m for m in following)
    for key in user_pools:
        asked = passes[-1].resources[key].body["spec"]["forProvider"]["orchestratorVersion"]
        assert asked == target


def test_kubernetes_patches_come_by_the_patch_channel_inside_their_own_window():
    """`patch` moves the control plane and then each pool to the minor's newest patch, never to
    another minor; Saturday night for Kubernetes, Sunday night for the node OS, each 8 hours
    (AKS asks 4 or more of an auto-upgrade window)."""
    xr, classes = example("aks")
    spec = converge(xr, classes).resources["cluster"].body["spec"]["forProvider"]
    assert spec["automaticUpgradeChannel"] == "patch"
    window, node_os = spec["maintenanceWindowAutoUpgrade"], spec["maintenanceWindowNodeOs"]
    assert window["frequency"] == "Weekly" and window["interval"] == 1
    assert 4 <= window["duration"] <= 24 and window["utcOffset"] == "+00:00"
    assert {window["dayOfWeek"], node_os["dayOfWeek"]} == {"Saturday", "Sunday"}
    # A minor alias, which AKS takes and patches (kubernetesVersion: "minor version aliases such
    # as 1.22 are also supported").
    assert spec["kubernetesVersion"].count(".") == 1
    first = compose_cluster(xr, all_classes(classes), Observed())
    assert first.resources["cluster"].body["spec"]["forProvider"]["automaticUpgradeChannel"] == (
        "patch"
    )


def test_a_patch_aks_applies_changes_nothing_the_cluster_or_its_pools_ask_for():
    """AKS patched the control plane and the pools in its window: the provider reads the new
    versions back, the cluster asks for just that and the pools for the minor's alias, which
    AKS takes as no change (asking the alias again does not upgrade a patch), so nothing is
    undone and no pool asks AKS for the patch before (a downgrade it refuses)."""
    xr, classes = example("aks")
    out = converge(xr, classes)
    seen = sim.reported(out)
    minor_ = out.resources["cluster"].body["spec"]["forProvider"]["kubernetesVersion"]
    patched = f"{minor_}.9"
    for key, res in seen.resources.items():
        at = res.body.get("status", {}).get("atProvider", {})
        if key == "cluster":
            at["currentKubernetesVersion"] = patched
            at["defaultNodePool"]["orchestratorVersion"] = patched
        elif key.startswith("nodepool-"):
            at["orchestratorVersion"] = patched
    again = compose_cluster(xr, all_classes(classes), seen)
    cluster = again.resources["cluster"].body["spec"]["forProvider"]
    assert cluster["kubernetesVersion"] == minor_
    assert cluster["automaticUpgradeChannel"] == "patch"
    assert cluster["defaultNodePool"]["orchestratorVersion"] == minor_
    for key in (k for k in again.resources if k.startswith("nodepool-")):
        assert again.resources[key].body["spec"]["forProvider"]["orchestratorVersion"] == minor_
    assert not [r for r in again.results if r.reason == "NodePoolsFollowing"]


def test_pools_bound_their_drains_and_the_system_pool_cordons_a_node_it_cannot_drain():
    """Every pool gives a drain AKS's 30 minutes explicitly. The system pool surges one node and
    cordons a node it cannot drain (its surge node replaces it); GPU pools, with no surge node,
    keep AKS's Schedule: Cordon would leave the GPU node out of service and the upgrade
    canceled (AKS API UndrainableNodeBehavior)."""
    xr, classes = example("aks")
    out = converge(xr, classes)
    system = out.resources["cluster"].body["spec"]["forProvider"]["defaultNodePool"]
    assert system["upgradeSettings"] == {
        "maxSurge": "1",
        "drainTimeoutInMinutes": 30,
        "undrainableNodeBehavior": "Cordon",
    }
    pools = [k for k in out.resources if k.startswith("nodepool-")]
    assert pools
    for key in pools:
        settings = out.resources[key].body["spec"]["forProvider"]["upgradeSettings"]
        assert settings == {"maxUnavailable": "1", "drainTimeoutInMinutes": 30}


def test_a_live_cluster_takes_the_drain_settings_and_the_minor_alias_in_place():
    """What a cluster composed by the previous release sees: its pools asked for the patch
    they run and had no drain timeout. Now the pools ask for the minor's alias and get their
    upgrade settings, both agent pool updates in place (azurerm v4.80.0: upgrade_settings is not
    among the default pool's cycling properties, and its ForceNew fires only from a value back
    to unset); no version moves and nothing else changes."""
    xr, classes = example("aks")
    out = converge(xr, classes)
    minor_ = out.resources["cluster"].body["spec"]["forProvider"]["kubernetesVersion"]
    running = f"{minor_}.7"
    seen = sim.reported(out)
    for key, res in seen.resources.items():
        if key != "cluster" and not key.startswith("nodepool-"):
            continue
        spec, at = res.body["spec"]["forProvider"], res.body["status"]["atProvider"]
        if key == "cluster":
            spec["defaultNodePool"]["orchestratorVersion"] = running
            spec["defaultNodePool"].pop("upgradeSettings")
            at["defaultNodePool"]["orchestratorVersion"] = running
            at["currentKubernetesVersion"] = running
        elif key.startswith("nodepool-"):
            spec["orchestratorVersion"] = running
            spec["upgradeSettings"] = {"maxUnavailable": "1"}
            at["orchestratorVersion"] = running
    again = compose_cluster(xr, all_classes(classes), seen)
    cluster = again.resources["cluster"].body["spec"]["forProvider"]
    assert cluster["defaultNodePool"]["orchestratorVersion"] == minor_
    assert cluster["defaultNodePool"]["upgradeSettings"] == aks.SYSTEM_UPGRADE
    assert cluster["automaticUpgradeChannel"] == "patch"
    for key in (k for k in again.resources if k.startswith("nodepool-")):
        spec = again.resources[key].body["spec"]["forProvider"]
        assert spec["orchestratorVersion"] == minor_
        assert spec["upgradeSettings"] == aks.GPU_UPGRADE
    assert not [r for r in again.results if r.reason in ("NodePoolsFollowing", "UpgradeStalled")]


def failed_update(body: dict, since: str, message: str) -> None:
    """upjet's report of an async update that failed: LastAsyncOperation and Synced False."""
    body["status"]["conditions"] = [
        {"type": "Ready", "status": "True", "reason": "Available"},
        {
            "type": "Synced",
            "status": "False",
            "reason": "ReconcileError",
            "message": message,
            "lastTransitionTime": since,
        },
        {
            "type": "LastAsyncOperation",
            "status": "False",
            "reason": "ApplyFailure",
            "message": message,
            "lastTransitionTime": since,
        },
    ]


def test_a_stalled_pool_holds_the_pools_after_it_and_is_warned_after_two_hours():
    """A GPU pool's upgrade failed (a drain AKS gave up on): azurerm reads its version as asked
    and upjet keeps it Ready, but its update fails. The pools after it wait, and once it has
    failed for two hours the XR says so, naming the pool, in the provider's words."""
    xr, classes = example("aks-a10")
    extra = copy.deepcopy(xr["spec"]["nodePools"][0])
    extra["name"] = "gpuz"
    xr["spec"]["nodePools"].append(extra)
    out = converge(xr, classes)
    spec = out.resources["cluster"].body["spec"]["forProvider"]["kubernetesVersion"]
    major, minor_ = spec.split(".")[:2]
    upgraded = f"{major}.{int(minor_) + 1}.4"
    alias = f"{major}.{int(minor_) + 1}"
    raised = copy.deepcopy(xr)
    raised["spec"]["cluster"]["aks"]["kubernetesVersion"] = alias
    pools = sorted(k for k in out.resources if k.startswith("nodepool-"))
    assert len(pools) == 2
    seen = aks_moved(out, upgraded, pools=False)
    at = seen.resources["cluster"].body["status"]["atProvider"]
    at["defaultNodePool"]["orchestratorVersion"] = upgraded
    first = seen.resources[pools[0]].body
    first["spec"]["forProvider"]["orchestratorVersion"] = alias
    first["status"]["atProvider"]["orchestratorVersion"] = alias
    said = (
        'async update failed: Code="UpgradeFailed" Message="Drain node aks-gpua10-1 failed '
        'when evicting pod vllm-0 ... PodDisruptionBudget"'
    )
    failed_update(first, "2026-12-07T01:00:00Z", said)
    start = clock.parse("2026-12-07T01:00:00Z")
    with clock.fixed(start + timedelta(hours=1)):
        early = compose_cluster(raised, all_classes(classes), seen)
    second = early.resources[pools[1]].body["spec"]["forProvider"]["orchestratorVersion"]
    assert second == out.resources[pools[1]].body["spec"]["forProvider"]["orchestratorVersion"]
    assert not [r for r in early.results if r.reason == "UpgradeStalled"]
    assert "automaticUpgradeChannel" not in early.resources["cluster"].body["spec"]["forProvider"]
    with clock.fixed(start + timedelta(hours=3)):
        late = compose_cluster(raised, all_classes(classes), seen)
    stalled = [r.message for r in late.results if r.reason == "UpgradeStalled"]
    assert len(stalled) == 1
    name = pools[0].removeprefix("nodepool-")
    assert f"node pool {name!r}" in stalled[0] and "PodDisruptionBudget" in stalled[0]
    assert f"upgrade to {alias}" in stalled[0] and "2026-12-07T01:00:00+00:00" in stalled[0]
    assert late.resources[pools[1]].body == early.resources[pools[1]].body
    # The provider reports it through: the next pool goes, and nothing is said.
    first["status"]["conditions"] = conditions()
    with clock.fixed(start + timedelta(hours=3)):
        through = compose_cluster(raised, all_classes(classes), seen)
    assert through.resources[pools[1]].body["spec"]["forProvider"]["orchestratorVersion"] == alias
    assert not [r for r in through.results if r.reason == "UpgradeStalled"]


def test_a_lower_version_is_refused_with_a_warning():
    xr, classes = example("aks")
    out = converge(xr, classes)
    lower = copy.deepcopy(xr)
    lower["spec"]["cluster"]["aks"]["kubernetesVersion"] = "1.20"
    again = compose_cluster(lower, all_classes(classes), sim.reported(out))
    assert any(r.reason == "VersionDowngrade" for r in again.results)


def aks_moved(out: Output, upgraded: str, pools: bool) -> Observed:
    """What the providers report once AKS upgraded the control plane (and the pools) itself."""
    seen = sim.reported(out)
    for key, res in seen.resources.items():
        at = res.body.get("status", {}).get("atProvider", {})
        if key == "cluster":
            at["currentKubernetesVersion"] = upgraded
            at["kubernetesVersion"] = upgraded
            if pools:
                at["defaultNodePool"]["orchestratorVersion"] = upgraded
        elif key.startswith("nodepool-") and pools:
            at["orchestratorVersion"] = upgraded
    return seen


def test_a_cluster_aks_upgraded_past_the_spec_keeps_asking_for_what_it_runs():
    """AKS upgrades a cluster past its version's end of life itself, pools included
    (learn.microsoft.com/azure/aks/platform-initiated-upgrades), and refuses any downgrade: the
    control plane and every pool then ask for what they run, never the spec's older version,
    which would fail every update of them, and the XR says AKS moved it."""
    xr, classes = example("aks")
    out = converge(xr, classes)
    spec = out.resources["cluster"].body["spec"]["forProvider"]["kubernetesVersion"]
    major, minor_ = spec.split(".")[:2]
    upgraded = f"{major}.{int(minor_) + 1}.4"
    alias = f"{major}.{int(minor_) + 1}"
    again = compose_cluster(xr, all_classes(classes), aks_moved(out, upgraded, pools=True))
    cluster = again.resources["cluster"].body["spec"]["forProvider"]
    assert cluster["kubernetesVersion"] == upgraded
    assert cluster["defaultNodePool"]["orchestratorVersion"] == alias
    pools = [k for k in again.resources if k.startswith("nodepool-")]
    assert pools
    for key in pools:
        assert again.resources[key].body["spec"]["forProvider"]["orchestratorVersion"] == alias
    said = [r.message for r in again.results if r.reason == "VersionDowngrade"]
    assert said and "AKS moved the cluster" in said[0] and f"stays at {upgraded}" in said[0]


@pytest.mark.parametrize("name", ["aks", "aks-a10"])
def test_after_aks_moved_the_control_plane_past_support_the_pools_follow_one_at_a_time(name):
    """The clock past the spec's minor's end of life: AKS upgraded the control plane alone.
    The calendar warning says the version is past support, the XR says AKS moved the cluster,
    the channel stays off, and the pools follow one at a time, the system pool first and the
    GPU pools last, each once the one before reports the minor and is Ready."""
    xr, classes = example(name)
    out = converge(xr, classes)
    spec = out.resources["cluster"].body["spec"]["forProvider"]["kubernetesVersion"]
    major, minor_ = spec.split(".")[:2]
    upgraded = f"{major}.{int(minor_) + 1}.4"
    alias = f"{major}.{int(minor_) + 1}"
    end = calendars.AKS.ends[(int(major), int(minor_))]
    with clock.fixed(end + timedelta(days=40)):
        again = compose_cluster(xr, all_classes(classes), aks_moved(out, upgraded, pools=False))
        reasons = {r.reason for r in again.results}
        assert {"KubernetesVersionUnsupported", "VersionDowngrade"} <= reasons
        cluster = again.resources["cluster"].body["spec"]["forProvider"]
        assert "automaticUpgradeChannel" not in cluster
        assert cluster["defaultNodePool"]["orchestratorVersion"] == alias
        pools = sorted(k for k in again.resources if k.startswith("nodepool-"))
        for key in pools:  # the system pool first
            assert again.resources[key].body == out.resources[key].body
        # The system pool reports the minor: the first GPU pool goes, and only it.
        seen = aks_moved(again, upgraded, pools=False)
        system = seen.resources["cluster"].body["status"]["atProvider"]["defaultNodePool"]
        system["orchestratorVersion"] = upgraded
        third = compose_cluster(xr, all_classes(classes), seen)
        asked = {
            k: third.resources[k].body["spec"]["forProvider"]["orchestratorVersion"] for k in pools
        }
        assert asked[pools[0]] == alias
        assert all(asked[k] != alias for k in pools[1:])
        # Every pool runs it: the channel is back.
        done = aks_moved(third, upgraded, pools=True)
        last = compose_cluster(xr, all_classes(classes), done)
        assert last.resources["cluster"].body["spec"]["forProvider"]["automaticUpgradeChannel"] == (
            "patch"
        )


# A ConnectX-7 InfiniBand HCA as the PCI bus shows it (class 0207: InfiniBand controller).
CONNECTX7 = {"class": "0207", "vendor": "15b3", "device": "1021"}


def test_the_policy_and_reloader_land_on_infiniband_nodes_labelled_by_the_charts_rule():
    xr, classes = example("aks")
    out = converge(xr, classes)
    release = out.resources["release-network-operator"].body
    # The NodeFeatureRule the real chart installs with these values, as the stack's NFD applies it.
    [rule] = [d for d in charts.template(release) if d["kind"] == "NodeFeatureRule"]
    labels = {}
    for r in rule["spec"]["rules"]:
        for feature in r["matchFeatures"]:
            assert feature["feature"] == "pci.device"
            expressions = feature["matchExpressions"]
            if all(CONNECTX7[k] in e["value"] for k, e in expressions.items()):
                labels |= {nodes.NFD_LABEL_PREFIX + k: v for k, v in r["labels"].items()}
    assert labels == {aks.MLNX_NIC_LABEL: "true"}
    [node] = nodes.gpu_nodes(d.body for d in out.resources.values())
    node.labels |= labels
    policy = manifest(out, "nic-cluster-policy")["spec"]
    as_pod = {
        "affinity": {"nodeAffinity": policy["nodeAffinity"]},
        "tolerations": policy["tolerations"],
    }
    assert nodes.why_not(as_pod, node) is None
    reloader = manifest(out, "nvidia-peermem-reloader")["spec"]["template"]["spec"]
    assert nodes.why_not(reloader, node) is None
    # A node of another pool, or one without the NIC label, gets neither.
    other = nodes.Node("other", {**node.labels, "modelplane.ai/pool": "other"}, node.taints)
    assert nodes.why_not(as_pod, other) and nodes.why_not(reloader, other)
    bare = nodes.Node(node.pool, {k: v for k, v in node.labels.items() if k not in labels}, [])
    assert nodes.why_not(as_pod, bare)


def test_the_subnet_role_outlives_the_gateway_and_its_load_balancer():
    xr, classes = example("aks-a10")
    required = {
        **all_classes(classes),
        GATEWAYS: [inference_gateway("fleet-a")],
    }
    out = sim.converge(xr, required, schemas={GATEWAY_SCHEMA: True})
    assert "gateway-load-balancer" in out.resources
    [usage] = [
        d.body
        for k, d in out.resources.items()
        if k.startswith("usage-")
        and d.body["spec"]["by"]["kind"] == "Object"
        and d.body["spec"]["of"]["kind"] == "RoleAssignment"
    ]
    role = out.resources["subnet-network-contributor"].body["metadata"]["name"]
    watch = out.resources["gateway-load-balancer"].body["metadata"]["name"]
    assert usage["spec"]["of"]["resourceRef"]["name"] == role
    assert usage["spec"]["by"]["resourceRef"]["name"] == watch


def test_infiniband_pools_publish_the_rdma_device_their_replicas_ask_for():
    xr, classes = example("aks")
    out = converge(xr, classes)
    pools = {p["name"]: p for p in out.status["gpuPools"]}
    infiniband = [p.name for p in InferenceCluster.model_validate(xr).spec.node_pools if p.fabric]
    assert infiniband, "the example has an InfiniBand pool"
    for name, pool in pools.items():
        published = [d for d in pool["devices"] if d["driver"] == "rdma/shared_ib"]
        if name not in infiniband:
            assert not published
            continue
        assert published == [aks.INFINIBAND_DEVICE]
        # The resource the RDMA shared device plugin advertises: its default prefix "rdma" and
        # the resourceName of the guide's configuration the NicClusterPolicy carries.
        policy = manifest(out, "nic-cluster-policy")["spec"]["rdmaSharedDevicePlugin"]
        (config,) = json.loads(policy["config"])["configList"]
        assert f"rdma/{config['resourceName']}" == published[0]["driver"]
        # The class's own devices come first, as declared.
        assert pool["devices"][0]["driver"] == "gpu.nvidia.com"


def test_a_class_that_declares_the_rdma_device_is_published_as_declared():
    xr, classes = example("aks")
    declared = {"name": "ib", "claim": "Synthetic", "driver": "rdma/shared_ib", "count": 2}
    for cls in classes:
        cls["spec"]["devices"].append(declared)
    out = converge(xr, classes)
    for pool in out.status["gpuPools"]:
        assert [d for d in pool["devices"] if d["driver"] == "rdma/shared_ib"] == [
            declared | {"claim": "Synthetic"}
        ]


def test_a_class_full_of_devices_is_warned_that_the_rdma_device_is_not_published():
    xr, classes = example("aks")
    for cls in classes:
        gpu = cls["spec"]["devices"][0]
        cls["spec"]["devices"] = [gpu | {"name": f"d{i}"} for i in range(16)]
    out = converge(xr, classes)
    warned = [r for r in out.results if r.reason == "InfiniBandDeviceUnpublished"]
    assert warned and "16 devices" in warned[0].message
    for pool in out.status["gpuPools"]:
        assert len(pool["devices"]) == 16


def a10_pool_as(vm_size: str, disk_gb: int) -> tuple[dict, list[dict]]:
    xr, classes = example("aks-a10")
    classes = copy.deepcopy(classes)
    aks_shape = classes[0]["spec"]["provisioning"]["aks"]
    aks_shape |= {"vmSize": vm_size, "diskSizeGb": disk_gb}
    aks_shape["accelerator"]["count"] = shapes.AKS_SIZES[vm_size.lower()]
    return xr, classes


@pytest.mark.parametrize(
    ("vm_size", "disk_gb", "ephemeral"),
    [
        # The largest OS disk on the cache, from the Resource SKUs records (shapes.py).
        ("Standard_NC24ads_A100_v4", 100, True),
        ("Standard_NC24ads_A100_v4", 256, True),
        ("Standard_NC24ads_A100_v4", 257, False),
        ("Standard_NC16as_T4_v3", 144, True),
        ("Standard_NC16as_T4_v3", 200, False),  # fits its 352 GiB temp disk, not its cache
        # Documented as supporting it, but no SKU record known here: managed.
        ("Standard_ND96isr_H100_v5", 100, False),
        ("Standard_NV36ads_A10_v5", 200, False),
    ],
)
def test_gpu_pools_boot_from_an_ephemeral_os_disk_where_the_size_is_known_to_hold_it(
    vm_size, disk_gb, ephemeral
):
    xr, classes = a10_pool_as(vm_size, disk_gb)
    out = compose_cluster(xr, all_classes(classes), Observed())
    for_provider = out.resources["nodepool-gpua10"].body["spec"]["forProvider"]
    assert for_provider["osDiskSizeGb"] == disk_gb
    # Unset is Managed (azurerm's default), as every pool an earlier release made has it.
    assert for_provider.get("osDiskType") == ("Ephemeral" if ephemeral else None)
    # The system pool (Standard_D4s_v5, no cache or temp disk) stays managed.
    default_pool = out.resources["cluster"].body["spec"]["forProvider"]["defaultNodePool"]
    assert "osDiskType" not in default_pool


def live_pool_before_ephemeral(xr: dict, classes: list[dict], edit=None) -> Observed:
    """The cluster as converged, its GPU pool made by a release before ephemeral OS disks (and
    edited by edit(forProvider), when given)."""

    def before(key: str, body: dict) -> None:
        if key == "nodepool-gpua10":
            del body["spec"]["forProvider"]["osDiskType"]
            if edit:
                edit(body["spec"]["forProvider"])

    return sim.observed_from(converge(xr, classes), before)


def test_a_live_pool_keeps_its_managed_os_disk_and_says_so_without_a_warning():
    """An agent pool an earlier release made on a managed disk stays so: azurerm changes
    os_disk_type only by cycling the pool through a temporary one (cycleNodePoolProperties),
    which would be a second set of GPU nodes. The pool runs well as it is, so this is said as
    Normal, not as a Warning at every reconcile."""
    xr, classes = a10_pool_as("Standard_NC24ads_A100_v4", 100)
    live = live_pool_before_ephemeral(xr, classes)
    again = compose_cluster(xr, all_classes(classes), live)
    assert "osDiskType" not in again.resources["nodepool-gpua10"].body["spec"]["forProvider"]
    (said,) = [r for r in again.results if r.reason == "KeptLiveField"]
    assert said.severity == "Normal"
    assert "forProvider.osDiskType stays unset" in said.message
    assert '"Ephemeral"' in said.message
    assert "optional, for faster boots and reimages: delete it" in said.message


def test_a_pool_keeping_a_field_the_spec_changed_is_still_a_warning_with_its_way_to_move():
    xr, classes = a10_pool_as("Standard_NC24ads_A100_v4", 100)
    live = live_pool_before_ephemeral(xr, classes, lambda fp: fp.update(osDiskSizeGb=200))
    again = compose_cluster(xr, all_classes(classes), live)
    pool = again.resources["nodepool-gpua10"].body["spec"]["forProvider"]
    assert pool["osDiskSizeGb"] == 200 and "osDiskType" not in pool
    (said,) = [r for r in again.results if r.reason == "KeptLiveField"]
    assert said.severity == "Warning"
    assert "forProvider.osDiskSizeGb stays 200" in said.message
    assert "forProvider.osDiskType stays unset" in said.message
    assert said.message.endswith(
        "To move to this release's: delete it (its nodes and the pods on them go) and the "
        "function creates it again"
    )


def test_network_policy_is_enforced_by_cilium_on_the_overlay_the_cluster_has():
    """Azure CNI Powered by Cilium enforces NetworkPolicy with no separate engine; azurerm
    v4.80.0 requires the Cilium dataplane for the Cilium policy, and the overlay (azure plugin,
    overlay mode) is what it runs on."""
    xr, classes = example("aks")
    network = (
        converge(xr, classes).resources["cluster"].body["spec"]["forProvider"]["networkProfile"]
    )
    assert network["networkPlugin"] == "azure"
    assert network["networkPluginMode"] == "overlay"
    assert network["networkDataPlane"] == "cilium"
    assert network["networkPolicy"] == "cilium"


def test_infiniband_stays_below_the_ip_stack_cilium_enforces():
    """Cilium was chosen against the InfiniBand path: the RDMA shared device plugin hands pods
    the HCAs themselves, and nothing composes an IPoIB or Multus secondary network whose traffic
    Cilium would have to carry (Azure/aks-rdma-infiniband: RDMA over InfiniBand "operates below
    the TCP/IP stack"). A secondary network added to the policy must be checked against Cilium
    first."""
    xr, classes = example("aks")
    out = converge(xr, classes)
    policy = manifest(out, "nic-cluster-policy")["spec"]
    assert set(policy) == {"nodeAffinity", "tolerations", "ofedDriver", "rdmaSharedDevicePlugin"}
    assert not [
        d
        for d in out.resources.values()
        if d.body["kind"] == "Object"
        and d.body["spec"]["forProvider"]["manifest"]["kind"]
        in {"NetworkAttachmentDefinition", "IPoIBNetwork", "HostDeviceNetwork", "MacvlanNetwork"}
    ]


def test_a_live_cluster_keeps_its_dataplane_and_the_xr_says_once_that_no_policy_is_enforced():
    """A cluster an earlier release created (the azure dataplane, no policy engine) is not moved
    to Cilium: azurerm would do it in place, but AKS re-images every node pool at once to do it,
    GPU pools included and outside the node OS window. It keeps what it has, nothing else
    changes, and one Warning says NetworkPolicy is not enforced there and how to get it."""
    xr, classes = example("aks")
    out = converge(xr, classes)

    def before(key: str, body: dict) -> None:
        if key == "cluster":
            for field in ("networkDataPlane", "networkPolicy"):
                del body["spec"]["forProvider"]["networkProfile"][field]

    again = compose_cluster(xr, all_classes(classes), sim.observed_from(out, before))
    network = again.resources["cluster"].body["spec"]["forProvider"]["networkProfile"]
    assert "networkDataPlane" not in network and "networkPolicy" not in network
    (said,) = [r for r in again.results if r.reason == "KeptLiveField"]
    assert said.severity == "Warning"
    assert 'forProvider.networkProfile.networkDataPlane stays unset (this release: "cilium"' in (
        said.message
    )
    assert 'forProvider.networkProfile.networkPolicy stays unset (this release: "cilium"' in (
        said.message
    )
    assert "no NetworkPolicy is enforced" in said.message
    assert "NetworkPolicy is enforced only on a cluster created with Cilium" in said.message
    others = {k: d.body for k, d in again.resources.items() if k != "cluster"}
    assert others == {k: d.body for k, d in out.resources.items() if k != "cluster"}
    made = copy.deepcopy(out.resources["cluster"].body["spec"]["forProvider"])
    for field in ("networkDataPlane", "networkPolicy"):
        del made["networkProfile"][field]
    assert again.resources["cluster"].body["spec"]["forProvider"] == made
