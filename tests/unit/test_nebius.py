"""The Nebius renderer: the ProviderConfig and its project, GPU clusters per fabric, node group
sizing, the shared cache, shapes."""

import copy
import dataclasses
import itertools
from datetime import timedelta

import pytest

from function import clock
from function.clusters import calendars
from function.compose import compose_cluster
from function.inputs import Observed, ObservedResource
from function.names import kubeconfig_secret
from function.output import Output
from tests.builders import all_classes, example, provider_configs
from tests.sim.providers import observe
from tests.unit import sim

IDENTITY = {
    "type": "NebiusServiceAccountCredentials",
    "source": "Secret",
    "secretRef": {
        "namespace": "crossplane-system",
        "name": "nebius-credentials",
        "key": "credentials.json",
    },
}
PROJECT = "project-e00a0b1c2d3e4f5g6h"


def required(classes: list[dict], configs: list[dict] | None = None) -> dict[str, list[dict]]:
    """The classes, and the answer to the cloud-provider-config requirement (None: not yet)."""
    out = all_classes(classes)
    if configs is not None:
        out["cloud-provider-config"] = copy.deepcopy(configs)
    return out


def reported(out: Output, drop_status: tuple[str, ...] = ()) -> Observed:
    resources = {}
    for key, desired in out.resources.items():
        body = copy.deepcopy(desired.body)
        if key not in drop_status:
            body["status"] = observe(body).status
        resources[key] = ObservedResource(body)
    return Observed(resources=resources)


def converge(xr: dict, req: dict, passes: int = 20) -> Output:
    out = compose_cluster(xr, req, Observed())
    for _ in range(passes):
        out = compose_cluster(xr, req, reported(out))
    return out


def nebius(configs: list[dict] | None = None):
    """The example, with its ProviderConfig handed over unless configs says otherwise."""
    xr, classes = example("nebius")
    return (
        xr,
        classes,
        required(classes, provider_configs("nebius") if configs is None else configs),
    )


def cluster_ready(out: Output):
    return next(c for c in out.conditions if c.type == "ClusterReady")


def warnings(out: Output, reason: str | None = None) -> list[str]:
    return [
        r.message
        for r in out.results
        if r.severity == "Warning" and (reason is None or r.reason == reason)
    ]


# --- the ProviderConfig the credentials name ----------------------------------------------------


def test_the_provider_config_is_required_by_the_name_and_kind_the_credentials_give():
    xr, classes = example("nebius")
    out = compose_cluster(xr, required(classes), Observed())
    want = out.requirements["cloud-provider-config"]
    assert (want.api_version, want.kind, want.name, want.namespace) == (
        "nebius.m.upbound.io/v1beta1",
        "ClusterProviderConfig",
        "default",
        None,
    )
    xr["spec"]["cluster"]["nebius"]["credentials"] = {"type": "ProviderConfig", "name": "team"}
    want = compose_cluster(xr, required(classes), Observed()).requirements["cloud-provider-config"]
    assert (want.kind, want.name, want.namespace) == ("ProviderConfig", "team", "modelplane-system")


def test_converged_cluster_names_its_project_and_authenticates_with_the_service_account():
    xr, _, req = nebius()
    out = converge(xr, req)
    ready = cluster_ready(out)
    assert (ready.status, ready.reason) == (True, "Available")
    assert ready.message.startswith(f"Nebius project {PROJECT}: ")
    # provider-kubernetes v1.3.1 and provider-helm v1.4.0 both take the Nebius identity.
    for provider in ("helm", "kubernetes"):
        assert out.resources[f"provider-config-{provider}"].body["spec"]["identity"] == IDENTITY
    assert warnings(out) == []
    assert out.status["cache"] == {"storageClassName": "modelplane-rwx-fs"}


def test_until_the_provider_config_answers_everything_is_composed_and_nothing_warned():
    xr, _, req = nebius()
    del req["cloud-provider-config"]
    out = compose_cluster(xr, req, Observed())
    assert {"network", "subnet", "cluster", "filesystem", "system-nodegroup"} <= set(out.resources)
    assert {"nodegroup-gpu-h100", "nodegroup-gpu-l40s", "gpu-cluster-fabric-2"} <= set(
        out.resources
    )
    assert warnings(out) == []
    assert "ClusterProviderConfig 'default' (nebius.m.upbound.io)" in cluster_ready(out).message


@pytest.mark.parametrize(
    ("answer", "reason", "said"),
    [
        ([], "ProviderConfigNotFound", "'default' (nebius.m.upbound.io) not found"),
        (
            [
                {
                    "apiVersion": "gcp.m.upbound.io/v1beta1",
                    "kind": "ClusterProviderConfig",
                    "metadata": {"name": "default"},
                    "spec": {"projectID": "p"},
                }
            ],
            "ProviderConfigNotFound",
            "but Crossplane returned a ClusterProviderConfig of gcp.m.upbound.io",
        ),
        (
            [
                {
                    "apiVersion": "nebius.m.upbound.io/v1beta1",
                    "kind": "ClusterProviderConfig",
                    "metadata": {"name": "default"},
                    "spec": {
                        "identity": {"type": "ServiceAccount"},
                        "credentials": {"source": "Secret", "secretRef": IDENTITY["secretRef"]},
                    },
                }
            ],
            "ProviderConfigIncomplete",
            "has no spec.projectID",
        ),
    ],
    ids=["missing", "wrong-kind", "no-project"],
)
def test_a_missing_provider_config_is_warned_and_drops_nothing(answer, reason, said):
    xr, _, req = nebius()
    converged = converge(xr, req)
    broken = {**req, "cloud-provider-config": answer}
    first = compose_cluster(xr, broken, Observed())
    # The infrastructure names the ProviderConfig; it is composed all the same.
    assert {"network", "subnet", "cluster", "nodegroup-gpu-h100"} <= set(first.resources)
    assert any(said in w for w in warnings(first, reason)), first.results
    assert said in cluster_ready(first).message
    # Once built, a ProviderConfig gone changes and removes nothing: the ProviderConfigs keep
    # the identity they were composed with.
    again = compose_cluster(xr, broken, reported(converged))
    assert set(again.resources) == set(converged.resources)
    for key, desired in converged.resources.items():
        assert again.resources[key].body == desired.body, key
    assert said in cluster_ready(again).message


def test_provider_configs_wait_for_service_account_credentials():
    token = {
        "apiVersion": "nebius.m.upbound.io/v1beta1",
        "kind": "ClusterProviderConfig",
        "metadata": {"name": "default"},
        "spec": {
            "projectID": PROJECT,
            "identity": {"type": "Token"},
            "credentials": {"source": "Secret", "secretRef": IDENTITY["secretRef"]},
        },
    }
    xr, _, req = nebius([token])
    out = converge(xr, req)
    assert "provider-config-helm" not in out.resources
    message = cluster_ready(out).message
    assert "provider-config-helm (service-account credentials)" in message
    assert any("identity.type ServiceAccount" in w for w in warnings(out, "UnsupportedIdentity"))


def test_provider_configs_wait_for_the_kubeconfig():
    xr, _, req = nebius()
    out = compose_cluster(xr, req, Observed())
    assert "provider-config-helm" not in out.resources
    assert "provider-config-helm (kubeconfig)" in cluster_ready(out).message
    spec = out.resources["cluster"].body["spec"]
    assert spec["writeConnectionSecretToRef"] == {"name": kubeconfig_secret("nebius-eu-north")}
    assert spec["forProvider"]["controlPlane"]["endpoints"] == {"publicEndpoint": {}}
    assert spec["forProvider"]["controlPlane"]["version"] == "1.35"
    assert spec["providerConfigRef"] == {"kind": "ClusterProviderConfig", "name": "default"}


# --- GPU clusters ---------------------------------------------------------------------------------


def fabric_pools(xr: dict, fabrics: dict[str, str]) -> dict:
    """The example with one InfiniBand H100 pool per name, on the fabric given."""
    xr = copy.deepcopy(xr)
    template = xr["spec"]["nodePools"][0]
    xr["spec"]["nodePools"] = [
        {**template, "name": name, "fabric": {"type": "InfiniBand", "infiniband": {"fabric": f}}}
        for name, f in fabrics.items()
    ]
    return xr


def test_pools_on_one_fabric_share_one_gpu_cluster():
    xr, _, req = nebius()
    xr = fabric_pools(xr, {"a": "fabric-2", "b": "fabric-2", "c": "fabric-3"})
    out = compose_cluster(xr, req, Observed())
    gpu_clusters = {k: v.body for k, v in out.resources.items() if k.startswith("gpu-cluster-")}
    assert set(gpu_clusters) == {"gpu-cluster-fabric-2", "gpu-cluster-fabric-3"}
    two = gpu_clusters["gpu-cluster-fabric-2"]
    assert two["spec"]["forProvider"]["infinibandFabric"] == "fabric-2"
    assert two["metadata"]["labels"] == {"modelplane.ai/fabric": "fabric-2"}

    def joined(pool: str) -> str:
        template = out.resources[f"nodegroup-{pool}"].body["spec"]["forProvider"]["template"]
        return template["gpuCluster"]["idRef"]["name"]

    assert joined("a") == joined("b") == two["metadata"]["name"]
    assert joined("c") == gpu_clusters["gpu-cluster-fabric-3"]["metadata"]["name"]


def test_a_gpu_cluster_goes_with_the_last_pool_on_its_fabric():
    xr, _, req = nebius()
    both = fabric_pools(xr, {"a": "fabric-2", "b": "fabric-2"})
    out = compose_cluster(both, req, Observed())
    one = fabric_pools(xr, {"a": "fabric-2"})
    after = compose_cluster(one, req, reported(out))
    assert "gpu-cluster-fabric-2" in after.resources
    assert (
        after.resources["gpu-cluster-fabric-2"].body == out.resources["gpu-cluster-fabric-2"].body
    )
    xr["spec"]["nodePools"] = [p for p in xr["spec"]["nodePools"] if p["name"] == "gpu-l40s"]
    none = compose_cluster(xr, req, reported(after))
    assert not [k for k in none.resources if k.startswith("gpu-cluster-")]


def test_a_pool_whose_class_is_gone_keeps_its_gpu_cluster():
    xr, classes, req = nebius()
    out = converge(xr, req)
    req = {
        **req,
        "inference-classes": [c for c in classes if c["metadata"]["name"] != "nebius-h100-8x"],
    }
    again = compose_cluster(xr, req, reported(out))
    for key in ("gpu-cluster-fabric-2", "nodegroup-gpu-h100"):
        assert again.resources[key].body == out.resources[key].body, key


# --- node groups ----------------------------------------------------------------------------------


def node_group(out: Output, pool: str) -> dict:
    return out.resources[f"nodegroup-{pool}"].body["spec"]


def test_gpu_node_group_carries_the_shape_labels_taint_and_drivers():
    xr, _, req = nebius()
    out = compose_cluster(xr, req, Observed())
    spec = node_group(out, "gpu-h100")
    template = spec["forProvider"]["template"]
    assert template["resources"] == {"platform": "gpu-h100-sxm", "preset": "8gpu-128vcpu-1600gb"}
    assert template["bootDisk"] == {"sizeGibibytes": 200, "type": "NETWORK_SSD"}
    assert template["gpuSettings"] == {"driversPreset": "cuda13.0"}
    assert template["metadata"]["labels"] == {
        "modelplane.ai/pool": "gpu-h100",
        "modelplane.ai/gpu": "nvidia-h100",
    }
    assert template["taints"] == [
        {"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}
    ]
    assert spec["forProvider"]["version"] == "1.35"
    assert spec["forProvider"]["parentIdRef"] == {
        "name": out.resources["cluster"].body["metadata"]["name"]
    }
    assert "LateInitialize" not in spec["managementPolicies"]
    # The L40S pool joins no fabric.
    assert "gpuCluster" not in node_group(out, "gpu-l40s")["forProvider"]["template"]


def test_no_node_group_sets_auto_repair_so_mk8s_default_rules_repair_gpu_faults():
    """mk8s's default auto-repair rules act on NebiusGPUError (Nebius "Health checks and
    auto-repair of nodes"); any autoRepair the function set would replace them."""
    xr, _, req = nebius()
    out = converge(xr, req)
    groups = [d.body for d in out.resources.values() if d.body["kind"] == "NodeGroup"]
    assert len(groups) == 1 + len(xr["spec"]["nodePools"])  # the system group and each pool's
    for group in groups:
        spec = group["spec"]
        assert "autoRepair" not in spec["forProvider"], group["metadata"]["name"]
        assert "autoRepair" not in spec.get("initProvider", {}), group["metadata"]["name"]


def test_fixed_pool_has_a_fixed_node_count():
    xr, _, req = nebius()
    out = compose_cluster(xr, req, Observed())
    spec = node_group(out, "gpu-h100")["forProvider"]
    assert spec["fixedNodeCount"] == 2
    assert "autoscaling" not in spec


@pytest.mark.parametrize(
    ("pool", "expected", "normal"),
    [
        ({"minNodeCount": 1, "maxNodeCount": 4}, {"minNodeCount": 1, "maxNodeCount": 4}, False),
        # The class claims its GPUs through DRA: mk8s's autoscaler documents no scale-up from
        # zero for DRA claims, so such a pool keeps one node (Cloud.sizes), with a Warning.
        ({"maxNodeCount": 4}, {"minNodeCount": 1, "maxNodeCount": 4}, False),
        ({"nodeCount": 0, "maxNodeCount": 4}, {"minNodeCount": 1, "maxNodeCount": 4}, False),
        (
            {"nodeCount": 3, "minNodeCount": 1, "maxNodeCount": 4},
            {"minNodeCount": 1, "maxNodeCount": 4},
            True,
        ),
    ],
    ids=["range", "max-only", "from-zero", "size-above-minimum"],
)
def test_autoscaling_pool_scales_between_its_bounds_from_its_minimum(pool, expected, normal):
    xr, _, req = nebius()
    l40s = xr["spec"]["nodePools"][1]
    for k in ("nodeCount", "minNodeCount", "maxNodeCount"):
        l40s.pop(k, None)
    l40s.update(pool)
    out = compose_cluster(xr, req, Observed())
    spec = node_group(out, "gpu-l40s")["forProvider"]
    assert spec["autoscaling"] == expected
    assert "fixedNodeCount" not in spec
    said = [r for r in out.results if r.reason == "AutoscalingFromMinimum"]
    assert bool(said) == normal
    assert all(r.severity == "Normal" for r in said)
    raised = [r for r in out.results if r.reason == "ScaleFromZeroUnsupported"]
    assert bool(raised) == ("minNodeCount" not in pool)
    assert all("pool 'gpu-l40s'" in r.message and "Nebius" in r.message for r in raised)
    assert out.status["gpuPools"][1]["nodes"] == 4


def test_system_node_group_has_no_pool_label_and_no_taint():
    xr, _, req = nebius()
    out = compose_cluster(xr, req, Observed())
    spec = out.resources["system-nodegroup"].body["spec"]["forProvider"]
    assert spec["autoscaling"] == {"minNodeCount": 2, "maxNodeCount": 3}
    # A node is created before one is deleted, and a drain never waits for ever.
    assert spec["strategy"] == {
        "maxSurge": {"count": 1},
        "maxUnavailable": {"count": 0},
        "drainTimeout": "10m",
    }
    assert spec["template"]["metadata"]["labels"] == {"modelplane.ai/role": "system"}
    assert "taints" not in spec["template"]
    assert "gpuSettings" not in spec["template"]


def test_pool_names_that_are_label_values_get_valid_cloud_names():
    xr, _, req = nebius()
    xr["spec"]["nodePools"][0]["name"] = "H100_Pool"
    xr["spec"]["nodePools"][1]["name"] = "h100-pool"
    out = compose_cluster(xr, req, Observed())
    a = out.resources["nodegroup-H100_Pool"].body
    b = out.resources["nodegroup-h100-pool"].body
    assert a["metadata"]["name"] != b["metadata"]["name"]
    for body in (a, b):
        name = body["metadata"]["name"]
        assert name.islower() and "_" not in name
        assert body["spec"]["forProvider"]["name"] == name
    labels = a["spec"]["forProvider"]["template"]["metadata"]["labels"]
    assert labels["modelplane.ai/pool"] == "H100_Pool"


# --- shared cache ---------------------------------------------------------------------------------


def test_every_node_group_attaches_and_mounts_the_cache_file_system():
    xr, _, req = nebius()
    out = compose_cluster(xr, req, Observed())
    fs = out.resources["filesystem"].body
    assert fs["spec"]["forProvider"]["type"] == "NETWORK_SSD"
    assert fs["spec"]["forProvider"]["sizeGibibytes"] == 1024
    secret = out.resources["cloud-init"]
    assert secret.ready  # a Secret has no Ready condition
    assert secret.body["kind"] == "Secret"
    assert secret.body["metadata"]["namespace"] == "modelplane-system"
    user_data = secret.body["stringData"]["userData"]
    assert user_data.startswith("#cloud-config\n")
    assert "mount -t virtiofs modelplane-cache /mnt/data" in user_data
    for key in ("system-nodegroup", "nodegroup-gpu-h100", "nodegroup-gpu-l40s"):
        template = out.resources[key].body["spec"]["forProvider"]["template"]
        assert template["filesystems"] == [
            {
                "attachMode": "READ_WRITE",
                "mountTag": "modelplane-cache",
                "existingFilesystem": {"idRef": {"name": fs["metadata"]["name"]}},
            }
        ], key
        assert template["cloudInitUserDataSecretRef"] == {
            "name": secret.body["metadata"]["name"],
            "key": "userData",
        }


def test_csi_driver_and_storage_class_once_the_cluster_is_reachable():
    xr, _, req = nebius()
    out = compose_cluster(xr, req, Observed())
    assert "release-csi-mounted-fs-path" not in out.resources
    assert "cache" not in out.status
    out = converge(xr, req)
    release = out.resources["release-csi-mounted-fs-path"].body["spec"]
    assert release["forProvider"]["chart"]["name"] == "csi-mounted-fs-path"
    assert release["forProvider"]["values"]["dataDir"] == "/mnt/data/csi-mounted-fs-path-data/"
    assert release["managementPolicies"] == ["Observe", "Create", "Update"]
    storage = out.resources["storage-class-rwx-fs"].body["spec"]
    assert storage["forProvider"]["manifest"]["provisioner"] == "mounted-fs-path.csi.nebius.ai"
    assert storage["managementPolicies"] == ["Observe", "Create", "Update"]


# --- shapes ---------------------------------------------------------------------------------------


def shape_warnings(change: dict) -> list[str]:
    """Warnings about the H100 pool once its class is changed so."""
    xr, classes = example("nebius")
    classes = copy.deepcopy(classes)
    classes[0]["spec"]["provisioning"]["nebius"].update(change)
    out = compose_cluster(xr, required(classes, provider_configs("nebius")), Observed())
    found = warnings(out, "ShapeMismatch")
    assert all("pool 'gpu-h100'" in w for w in found)
    return found


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"preset": "1gpu-16vcpu-200gb"}, "cannot join a GPU cluster (only 8gpu-128vcpu-1600gb"),
        ({"accelerator": {"type": "nvidia-h100", "count": 4}}, "accelerator count 4 disagrees"),
        ({"platform": "gpu-x9000"}, "platform not in the shape table"),
        ({"preset": "3gpu-1vcpu-1gb"}, "has no preset 3gpu-1vcpu-1gb"),
        (
            {"platform": "gpu-l40s-a", "preset": "1gpu-8vcpu-32gb"},
            "gpu-l40s-a 1gpu-8vcpu-32gb cannot join a GPU cluster on any preset",
        ),
    ],
    ids=["small-preset", "accelerator-count", "unknown-platform", "unknown-preset", "no-ib"],
)
def test_shape_warnings(change, expected):
    found = shape_warnings(change)
    assert any(expected in w for w in found), found


def test_declared_gpu_devices_are_checked_against_the_preset():
    xr, classes = example("nebius")
    classes = copy.deepcopy(classes)
    classes[0]["spec"]["devices"][0]["count"] = 4
    out = compose_cluster(xr, required(classes, provider_configs("nebius")), Observed())
    assert any(
        "declares 4 GPU devices, but preset 8gpu-128vcpu-1600gb has 8" in w for w in warnings(out)
    )


def test_the_example_has_no_shape_warnings():
    xr, _, req = nebius()
    assert warnings(compose_cluster(xr, req, Observed())) == []


def node_group_keys(out) -> list[str]:
    return sorted(k for k in out.resources if k.endswith("nodegroup") or "nodegroup-" in k)


def test_raising_the_version_steps_the_control_plane_a_minor_then_the_node_groups_one_at_a_time():
    """A spec two minors up: mk8s takes `<major>.<minor>` and the control plane moves a minor at
    a time (UpgradingStepwise), the system group, then each GPU group, following each step, each
    once the one before runs it with no outdated node; the next step waits for the last group."""
    xr, classes = example("nebius")
    start = xr["spec"]["cluster"]["nebius"]["kubernetesVersion"]
    major, minor_ = start.split(".")
    step, target = f"{major}.{int(minor_) + 1}", f"{major}.{int(minor_) + 2}"

    def raise_version(x: dict) -> None:
        x["spec"]["cluster"]["nebius"]["kubernetesVersion"] = target

    req = required(classes, provider_configs("nebius"))
    passes = sim.upgrade(xr, req, raise_version)
    steps = [
        {c for c in sim.changes(a, b) if not c[0].startswith("usage")}
        for a, b in itertools.pairwise(passes)
    ]
    # First the control plane: a node group may not run newer than its cluster. Once mk8s
    # reports the step as x.y.z-nebius-cp.N, the system group, then each GPU group.
    groups = node_group_keys(passes[0])
    gpu = [k for k in groups if k != "system-nodegroup"]
    assert gpu
    one_minor = [
        {("cluster", "spec.forProvider.controlPlane.version")},
        *({(k, "spec.forProvider.version")} for k in ["system-nodegroup", *gpu]),
    ]
    assert steps == [*one_minor, *one_minor]
    planes = [p.resources["cluster"].body["spec"]["forProvider"]["controlPlane"] for p in passes]
    assert [p["version"] for p in planes[:2]] == [start, step]
    assert planes[-1]["version"] == target
    said = [r.message for p in passes for r in p.results if r.reason == "UpgradingStepwise"]
    assert said and f"upgrading to {step} first" in said[0] and "nebius" in said[0]
    # The step's groups ask for the step's minor, then the spec's.
    system = [
        p.resources["system-nodegroup"].body["spec"]["forProvider"]["version"] for p in passes
    ]
    assert step in system
    for key in groups:
        assert passes[-1].resources[key].body["spec"]["forProvider"]["version"] == target
    assert not [r for r in passes[-1].results if r.reason == "UpgradingStepwise"]


def test_the_step_holds_while_a_node_group_runs_an_older_minor():
    """The control plane runs the step, a GPU group still the minor before: the Cluster keeps
    asking for the step, never the spec's two minors up."""
    xr, _, req = nebius()
    out = converge(xr, req)
    start = out.resources["cluster"].body["spec"]["forProvider"]["controlPlane"]["version"]
    major, minor_ = start.split(".")
    step = f"{major}.{int(minor_) + 1}"
    raised = copy.deepcopy(xr)
    raised["spec"]["cluster"]["nebius"]["kubernetesVersion"] = f"{major}.{int(minor_) + 3}"
    seen = sim.reported(out)
    plane = seen.resources["cluster"].body["status"]["atProvider"]["status"]["controlPlane"]
    plane["version"] = f"{step}.2-nebius-cp.1"
    gpu = [k for k in node_group_keys(out) if k != "system-nodegroup"]
    seen.resources["system-nodegroup"].body["status"]["atProvider"]["status"]["version"] = (
        f"{step}.1-nebius-node.3"
    )
    again = compose_cluster(raised, req, seen)
    cluster = again.resources["cluster"].body["spec"]["forProvider"]["controlPlane"]
    assert cluster["version"] == step
    assert again.resources[gpu[0]].body["spec"]["forProvider"]["version"] == step
    # Every group there: the next minor.
    for key in gpu:
        seen.resources[key].body["status"]["atProvider"]["status"]["version"] = (
            f"{step}.1-nebius-node.3"
        )
    third = compose_cluster(raised, req, seen)
    plane = third.resources["cluster"].body["spec"]["forProvider"]["controlPlane"]
    assert plane["version"] == f"{major}.{int(minor_) + 2}"
    assert any(r.reason == "UpgradingStepwise" for r in third.results)


def test_a_live_cluster_mid_rollout_keeps_the_minor_it_already_asked_for():
    """Composed by the previous release, which sent the spec's version at once: the control
    plane runs the step, a group still the minor before, and the Cluster already asks for the
    next minor. That is not taken back (mk8s may be moving to it); nothing further is asked."""
    xr, _, req = nebius()
    out = converge(xr, req)
    start = out.resources["cluster"].body["spec"]["forProvider"]["controlPlane"]["version"]
    major, minor_ = start.split(".")
    step, following = f"{major}.{int(minor_) + 1}", f"{major}.{int(minor_) + 2}"
    raised = copy.deepcopy(xr)
    raised["spec"]["cluster"]["nebius"]["kubernetesVersion"] = f"{major}.{int(minor_) + 3}"
    seen = sim.reported(out)
    cluster = seen.resources["cluster"].body
    cluster["spec"]["forProvider"]["controlPlane"]["version"] = following
    cluster["status"]["atProvider"]["status"]["controlPlane"]["version"] = f"{step}.2-nebius-cp.1"
    again = compose_cluster(raised, req, seen)
    plane = again.resources["cluster"].body["spec"]["forProvider"]["controlPlane"]
    assert plane["version"] == following


def test_a_node_group_added_mid_upgrade_asks_for_the_control_planes_minor():
    xr, classes = example("nebius")
    req = required(classes, provider_configs("nebius"))
    out = converge(xr, req)
    observed = reported(out)
    cluster = copy.deepcopy(observed.resources["cluster"].body)
    old = cluster["spec"]["forProvider"]["controlPlane"]["version"]
    cluster["status"]["atProvider"]["status"]["controlPlane"]["version"] = "1.31.2-nebius-cp.3"
    del observed.resources["nodegroup-gpu-h100"]
    observed.resources["cluster"] = ObservedResource(cluster)
    again = compose_cluster(xr, req, observed)
    assert old != "1.31"
    assert again.resources["nodegroup-gpu-h100"].body["spec"]["forProvider"]["version"] == "1.31"
    # An existing group keeps the version it asks for until the control plane runs the spec's.
    system = again.resources["system-nodegroup"].body["spec"]["forProvider"]["version"]
    assert system == out.resources["system-nodegroup"].body["spec"]["forProvider"]["version"]


def test_node_groups_follow_a_control_plane_mk8s_upgraded_past_the_spec_one_at_a_time():
    """The clock past the spec's minor's end of life: mk8s upgraded the control plane itself and
    keeps the Cluster's `version` lower (nebius/api mk8s/v1/cluster.proto). The Cluster keeps
    asking for the spec's (no diff, no fight), the XR says Nebius moved the cluster, and the node
    groups follow the running minor one at a time, the system group first, the GPU groups last,
    each once the one before runs it with no outdated node."""
    xr, _, req = nebius()
    out = converge(xr, req)
    asked = out.resources["cluster"].body["spec"]["forProvider"]["controlPlane"]["version"]
    major, minor_ = asked.split(".")
    newer = f"{major}.{int(minor_) + 1}"
    end = calendars.NEBIUS.ends[(int(major), int(minor_))]

    def moved(after, groups_at: dict[str, str]):
        seen = sim.reported(after)
        status = seen.resources["cluster"].body["status"]["atProvider"]["status"]
        status["controlPlane"]["version"] = f"{newer}.2-nebius-cp.1"
        for key, version in groups_at.items():
            seen.resources[key].body["status"]["atProvider"]["status"]["version"] = version
        return seen

    groups = node_group_keys(out)
    gpu = [k for k in groups if k != "system-nodegroup"]
    assert gpu
    with clock.fixed(end + timedelta(days=30)):
        again = compose_cluster(xr, req, moved(out, {}))
        reasons = {r.reason for r in again.results}
        assert {"KubernetesVersionUnsupported", "VersionDowngrade"} <= reasons
        said = [r.message for r in again.results if r.reason == "VersionDowngrade"]
        assert "Nebius moved the cluster past it" in said[0] and f"follow {newer}" in said[0]
        cluster = again.resources["cluster"].body["spec"]["forProvider"]["controlPlane"]
        assert cluster["version"] == asked

        def versions(o) -> dict[str, str]:
            return {k: o.resources[k].body["spec"]["forProvider"]["version"] for k in groups}

        assert versions(again) == {k: newer if k == "system-nodegroup" else asked for k in groups}
        # The system group on its way (asked, outdated nodes left): nothing else moves.
        busy = moved(again, {"system-nodegroup": f"{newer}.1-nebius-node.3"})
        state = busy.resources["system-nodegroup"].body["status"]["atProvider"]["status"]
        state["outdatedNodeCount"] = 1
        assert versions(compose_cluster(xr, req, busy)) == versions(again)
        # Settled: the first GPU group goes.
        third = compose_cluster(xr, req, moved(again, {}))
        assert versions(third)[gpu[0]] == newer
        assert [k for k in gpu[1:] if versions(third)[k] == newer] == []
    # At the spec's own minor, nothing is said and nothing moves.
    seen = sim.reported(out)
    plane = seen.resources["cluster"].body["status"]["atProvider"]["status"]["controlPlane"]
    plane["version"] = f"{asked}.7-nebius-cp.2"
    steady = compose_cluster(xr, req, seen)
    assert not [r for r in steady.results if r.reason == "VersionDowngrade"]
    assert set(versions(steady).values()) == {asked}


def test_the_control_plane_writes_its_audit_log():
    """mk8s creates a cluster without an audit log unless controlPlane.auditLogs is given; an
    empty block turns it on (AuditLogsSpec has no fields), as an empty publicEndpoint does."""
    xr, _, req = nebius()
    control_plane = (
        converge(xr, req).resources["cluster"].body["spec"]["forProvider"]["controlPlane"]
    )
    assert control_plane["auditLogs"] == {}
    assert control_plane["endpoints"] == {"publicEndpoint": {}}


def test_a_live_cluster_turns_its_audit_log_on_in_place_and_nothing_else_moves():
    """A cluster an earlier release created without audit logs gets them on its next update:
    the field is not RequiresReplace (terraform-provider-nebius v0.6.22), so nothing is kept as
    live, nothing is warned, and no other resource changes."""
    xr, _, req = nebius()
    out = converge(xr, req)

    def before(key: str, body: dict) -> None:
        if key == "cluster":
            del body["spec"]["forProvider"]["controlPlane"]["auditLogs"]

    again = compose_cluster(xr, req, sim.observed_from(out, before))
    assert again.resources["cluster"].body == out.resources["cluster"].body
    assert not [r for r in again.results if r.reason == "KeptLiveField"]
    assert {k: d.body for k, d in again.resources.items()} == {
        k: d.body for k, d in out.resources.items()
    }


def test_a_drivers_preset_without_an_image_for_a_step_on_the_way_is_warned(monkeypatch):
    """A preset with images for the running minor and the spec's but not for a step between:
    the group would be refused at that step and hold the others, so the step is named."""
    xr, _, req = nebius()
    out = converge(xr, req)
    start = out.resources["cluster"].body["spec"]["forProvider"]["controlPlane"]["version"]
    major, minor_ = (int(p) for p in start.split("."))
    preset = out.resources[next(k for k in node_group_keys(out) if k != "system-nodegroup")].body[
        "spec"
    ]["forProvider"]["template"]["gpuSettings"]["driversPreset"]
    gap, target = (major, minor_ + 1), (major, minor_ + 2)
    offered = {preset: frozenset({(major, minor_), target})}
    monkeypatch.setattr(calendars, "NEBIUS_DRIVERS_PRESETS", offered)
    known = dict.fromkeys(((major, minor_), gap, target))  # no end announced
    monkeypatch.setattr(calendars, "NEBIUS", dataclasses.replace(calendars.NEBIUS, ends=known))
    raised = copy.deepcopy(xr)
    raised["spec"]["cluster"]["nebius"]["kubernetesVersion"] = f"{major}.{minor_ + 2}"
    again = compose_cluster(raised, req, sim.reported(out))
    found = [r.message for r in again.results if r.reason == "DriversPresetUnsupported"]
    assert found, [r.reason for r in again.results]
    assert all(f"no Nebius node image for Kubernetes {major}.{minor_ + 1}" in m for m in found)
