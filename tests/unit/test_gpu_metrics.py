"""GPU metrics: the DCGM exporter's values per source, its ServiceMonitor only where the CRD
exists, and what the real chart renders with them (function/serving/gpu_metrics.py)."""

import pytest

from function import kube
from function.inputs import ObservedResource
from function.serving import gpu_metrics
from function.serving.components import COMPONENTS, RESOURCE_KEYS
from function.versions import CHARTS
from function.workload import GPU_NODE_LABEL, GPU_TOLERATION
from tests import charts
from tests.builders import all_classes, example
from tests.sim.providers import World
from tests.sim.workload import inference_gateway
from tests.unit import sim

SOURCES = ("EKS", "GKE", "AKS", "Nebius", "Vultr", "Existing")
GKE_ROOT = "/home/kubernetes/bin/nvidia"
SCHEMAS = {"inference-gateway-kind": True}
CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": gpu_metrics.SERVICE_MONITOR_CRD},
    "status": {"conditions": [{"type": "Established", "status": "True"}]},
}


def env(values: dict) -> dict:
    return {e["name"]: e.get("value") for e in values.get("extraEnv", [])}


def terms(values: dict) -> list[list[dict]]:
    affinity = values["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    return [t["matchExpressions"] for t in affinity["nodeSelectorTerms"]]


@pytest.mark.parametrize("source", SOURCES)
def test_every_source_maps_gpus_to_dra_claims_on_gpu_nodes_only(source):
    values = gpu_metrics.values(source, False, "/")
    assert values["kubernetesDRA"] == {"enabled": True}
    assert values["tolerations"] == [GPU_TOLERATION]
    assert values["resources"]["requests"] == {"cpu": "100m", "memory": "256Mi"}
    assert values["resources"]["limits"] == {"memory": "1Gi"}
    assert values["image"] == {
        "repository": "nvcr.io/nvidia/k8s/dcgm-exporter",
        "tag": "4.6.0-4.8.3-distroless",
    }
    # Each term asks for one GPU label (the DRA kubelet plugin's), none runs elsewhere.
    firsts = [t[0] for t in terms(values)]
    labels = [GPU_NODE_LABEL] if source == "EKS" else list(gpu_metrics.GPU_NODE_LABELS)
    assert [e["key"] for e in firsts] == labels
    assert all(e["operator"] == "In" and e["values"] == ["true"] for e in firsts)


def test_on_eks_it_reads_the_node_monitoring_agent_s_host_engine_instead_of_starting_one():
    values = gpu_metrics.values("EKS", False, "/")
    assert env(values)["DCGM_REMOTE_HOSTENGINE_INFO"] == "$(HOST_IP):5555"
    host_ip = next(e for e in values["extraEnv"] if e["name"] == "HOST_IP")
    assert host_ip["valueFrom"] == {"fieldRef": {"fieldPath": "status.hostIP"}}
    # HOST_IP comes first: Kubernetes expands $(VAR) only from variables defined before it.
    assert [e["name"] for e in values["extraEnv"]] == ["HOST_IP", "DCGM_REMOTE_HOSTENGINE_INFO"]
    # Only where dcgm-server runs (its own affinity), never without a host engine.
    (term,) = terms(values)
    assert term[0] == {"key": GPU_NODE_LABEL, "operator": "In", "values": ["true"]}
    assert list(gpu_metrics.EKS_DCGM_SERVER) == term[1:]
    arch = next(e for e in gpu_metrics.EKS_DCGM_SERVER if e["key"] == "kubernetes.io/arch")
    assert arch["values"] == ["amd64"]
    assert "p5.48xlarge" in gpu_metrics.EKS_DCGM_INSTANCE_TYPES
    assert len(gpu_metrics.EKS_DCGM_INSTANCE_TYPES) == 77
    # No profiling of its own: no SYS_ADMIN.
    assert values["securityContext"]["capabilities"] == {"add": [], "drop": ["ALL"]}


@pytest.mark.parametrize("source", ["GKE", "AKS", "Nebius", "Vultr", "Existing"])
def test_elsewhere_it_embeds_its_own_host_engine(source):
    values = gpu_metrics.values(source, False, GKE_ROOT if source == "GKE" else "/")
    assert "DCGM_REMOTE_HOSTENGINE_INFO" not in env(values)
    assert len(terms(values)) == len(gpu_metrics.GPU_NODE_LABELS)
    assert all(len(t) == 1 for t in terms(values))


def test_on_gke_it_mounts_the_installed_driver_and_keeps_the_chart_s_counters():
    values = gpu_metrics.values("GKE", False, GKE_ROOT)
    assert values["extraHostVolumes"] == [{"name": "nvidia-driver", "hostPath": GKE_ROOT}]
    mounts = {m["name"]: m for m in values["extraVolumeMounts"]}
    assert mounts["nvidia-driver"]["mountPath"] == "/usr/local/nvidia"
    assert mounts["exporter-metrics-volume"]["mountPath"] == (
        "/etc/dcgm-exporter/default-counters.csv"
    )
    assert env(values)["LD_LIBRARY_PATH"] == "/usr/local/nvidia/lib64"
    assert values["securityContext"]["privileged"] is True


def test_on_vultr_it_runs_under_the_gpu_operator_s_runtime_class():
    assert gpu_metrics.values("Vultr", False, "/run/nvidia/driver")["runtimeClassName"] == "nvidia"
    assert "runtimeClassName" not in gpu_metrics.values("AKS", False, "/")


def _observed(crd: dict | None = None, absent: bool = False, live: bool | None = None):
    resources = {}
    if crd is not None or absent:
        synced = {"type": "Synced", "status": "True"}
        if absent:
            synced = {
                "type": "Synced",
                "status": "False",
                "message": "cannot observe external resource: external resource does not exist",
            }
        resources[gpu_metrics.SERVICE_MONITORS_KEY] = ObservedResource(
            {
                "spec": {},
                "status": {"atProvider": {"manifest": crd or {}}, "conditions": [synced]},
            }
        )
    if live is not None:
        values = {"serviceMonitor": {"enabled": live}}
        resources[gpu_metrics.RELEASE_KEY] = ObservedResource(
            {"spec": {"forProvider": {"values": values}}}
        )
    return resources


def test_the_service_monitor_follows_its_crd_and_otherwise_keeps_what_runs():
    assert gpu_metrics.service_monitor(_observed(CRD)) is True
    assert gpu_metrics.service_monitor(_observed(absent=True)) is False
    assert gpu_metrics.service_monitor(_observed(absent=True, live=True)) is False
    assert gpu_metrics.service_monitor(_observed(CRD, live=False)) is True
    # Not answered yet (first reconcile, a passing error): what the release was installed with.
    assert gpu_metrics.service_monitor(_observed(live=True)) is True
    assert gpu_metrics.service_monitor(_observed(live=False)) is False
    assert gpu_metrics.service_monitor(_observed()) is False


def _converged(source_example: str, world: World):
    xr, classes = example(source_example)
    required = {**all_classes(classes), "inference-gateways": [inference_gateway("fleet-a")]}
    return sim.converge(xr, required, world, SCHEMAS)


def _release_values(out) -> dict:
    return out.resources[RESOURCE_KEYS[gpu_metrics.KEY]].body["spec"]["forProvider"]["values"]


def test_a_cluster_without_the_crd_gets_no_service_monitor_and_one_with_it_does():
    without = _converged("existing", World())
    assert _release_values(without)["serviceMonitor"] == {"enabled": False}
    observer = without.resources[gpu_metrics.SERVICE_MONITORS_KEY]
    assert observer.ready  # asked, not waited for
    manifest = observer.body["spec"]["forProvider"]["manifest"]
    assert manifest["metadata"]["name"] == "servicemonitors.monitoring.coreos.com"
    assert observer.body["spec"]["managementPolicies"] == ["Observe"]
    with_crd = _converged("existing", World(detected={gpu_metrics.SERVICE_MONITOR_CRD: CRD}))
    assert _release_values(with_crd)["serviceMonitor"] == {"enabled": True}
    assert with_crd.status == without.status


def _release(values: dict) -> dict:
    return kube.release("x", gpu_metrics.KEY, CHARTS[gpu_metrics.KEY], "pc", values)


def _rendered(source: str, service_monitor: bool, root: str = "/") -> dict[str, dict]:
    made = charts.template(_release(gpu_metrics.values(source, service_monitor, root)))
    return {m["kind"]: m for m in made}


def test_the_real_chart_renders_a_service_monitor_only_when_asked():
    assert "ServiceMonitor" in _rendered("AKS", True)
    assert "ServiceMonitor" not in _rendered("AKS", False)


def test_the_real_chart_grants_dra_reads_and_mounts_the_pod_resources_socket():
    made = _rendered("EKS", False)
    rules = made["ClusterRole"]["rules"]
    assert any("resourceslices" in r["resources"] and "pods" in r["resources"] for r in rules)
    assert all(set(r["verbs"]) == {"get", "list", "watch"} for r in rules)
    pod = made["DaemonSet"]["spec"]["template"]["spec"]
    assert {
        "name": "pod-gpu-resources",
        "hostPath": {"path": "/var/lib/kubelet/pod-resources"},
    } in (pod["volumes"])
    container = pod["containers"][0]
    names = [e["name"] for e in container["env"]]
    assert "KUBERNETES_ENABLE_DRA" in names
    # The chart's NODE_NAME comes before, and HOST_IP before its use.
    assert names.index("HOST_IP") < names.index("DCGM_REMOTE_HOSTENGINE_INFO")
    assert pod["tolerations"] == [GPU_TOLERATION]
    assert container["image"] == "nvcr.io/nvidia/k8s/dcgm-exporter:4.6.0-4.8.3-distroless"
    assert made["DaemonSet"]["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] == "10%"


@pytest.mark.parametrize("source", ["EKS", "GKE", "AKS", "Nebius", "Vultr", "Existing"])
def test_the_real_chart_s_security_context_is_one_the_api_server_admits(source):
    """Helm merges the function's securityContext into the chart's: privileged with the chart's
    allowPrivilegeEscalation false is refused by the API server (GKE's install failed so in the
    workload e2e); against EKS's remote host engine the chart's SYS_ADMIN is not kept."""
    pod = _rendered(source, False, GKE_ROOT)["DaemonSet"]["spec"]["template"]["spec"]
    context = pod["containers"][0]["securityContext"]
    if context.get("privileged"):
        assert context.get("allowPrivilegeEscalation") is not False, context
    if source == "EKS":
        assert not context["capabilities"].get("add"), context
        assert context["capabilities"]["drop"] == ["ALL"]


def test_the_real_chart_on_gke_mounts_the_driver_beside_its_counters():
    pod = _rendered("GKE", False, GKE_ROOT)["DaemonSet"]["spec"]["template"]["spec"]
    mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["nvidia-driver"] == "/usr/local/nvidia"
    assert mounts["exporter-metrics-volume"] == "/etc/dcgm-exporter/default-counters.csv"
    assert {"name": "nvidia-driver", "hostPath": {"path": GKE_ROOT}} in pod["volumes"]


def test_its_namespace_lets_its_pods_mount_the_host_and_holds_their_priority():
    out = _converged("existing", World())
    manifest = out.resources[gpu_metrics.NAMESPACE_KEY].body["spec"]["forProvider"]["manifest"]
    assert manifest["metadata"] == {
        "name": "modelplane-gpu-metrics",
        "labels": {"pod-security.kubernetes.io/enforce": "privileged"},
    }
    quota = out.resources[gpu_metrics.QUOTA_KEY].body["spec"]["forProvider"]["manifest"]
    assert quota["metadata"]["namespace"] == "modelplane-gpu-metrics"
    scope = quota["spec"]["scopeSelector"]["matchExpressions"][0]
    assert "system-node-critical" in scope["values"]
    by_key = {c.key: c for c in COMPONENTS}
    assert by_key[gpu_metrics.KEY].after == (gpu_metrics.QUOTA_KEY,)
    assert by_key[gpu_metrics.QUOTA_KEY].after == (gpu_metrics.NAMESPACE_KEY,)
