"""GPU metrics: the DCGM exporter's values per source, its ServiceMonitor only where the CRD
exists, and what the real chart renders with them (function/serving/gpu_metrics.py)."""

import copy

import pytest

from function import kube, shapes
from function.clusters import eks_dcgm
from function.compose import compose_cluster
from function.inputs import ObservedResource
from function.serving import gpu_metrics
from function.serving.components import COMPONENTS, RESOURCE_KEYS
from function.versions import CHARTS
from function.workload import GPU_NODE_LABEL, GPU_TOLERATION
from tests import charts
from tests.builders import all_classes, example
from tests.sim.providers import World
from tests.sim.workload import inference_gateway, object_ready
from tests.unit import sim

SOURCES = ("EKS", "GKE", "AKS", "Nebius", "Vultr", "Existing")
GKE_ROOT = "/home/kubernetes/bin/nvidia"
SCHEMAS = {"inference-gateway-kind": True}
HELM_ANNOTATIONS = {
    "meta.helm.sh/release-name": "mp-dcgm-exporter",
    "meta.helm.sh/release-namespace": "modelplane-gpu-metrics",
}
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
    # Only where dcgm-server runs (the chart's own affinity), never without a host engine.
    (term,) = terms(values)
    assert term[0] == {"key": GPU_NODE_LABEL, "operator": "In", "values": ["true"]}
    assert list(eks_dcgm.LISTED) == term[1:]
    arch = next(e for e in eks_dcgm.LISTED if e["key"] == "kubernetes.io/arch")
    assert arch["values"] == ["amd64"]
    assert "p5.48xlarge" in eks_dcgm.EKS_DCGM_INSTANCE_TYPES
    assert len(eks_dcgm.EKS_DCGM_INSTANCE_TYPES) == 77
    # No profiling of its own: no SYS_ADMIN.
    assert values["securityContext"]["capabilities"] == {"add": [], "drop": ["ALL"]}


def _admits(affinity: dict, labels: dict[str, str]) -> bool:
    """Whether a node with these labels meets a required node affinity (the scheduler's rule:
    any term, each of its expressions; NotIn holds where the label is absent)."""

    def meets(e: dict) -> bool:
        if e["operator"] == "In":
            return labels.get(e["key"]) in e["values"]
        if e["operator"] == "NotIn":
            return labels.get(e["key"]) not in e["values"]
        raise AssertionError(e)

    required = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    return any(all(meets(e) for e in t["matchExpressions"]) for t in required["nodeSelectorTerms"])


def _chart_placement() -> dict:
    """dcgm-server's placement by the agent's own chart (v1.7.0's dcgmAgent.affinity, as
    eks_dcgm.LISTED transcribes it)."""
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": list(eks_dcgm.LISTED)}]
            }
        }
    }


EKS_TYPES = sorted({*eks_dcgm.EKS_DCGM_INSTANCE_TYPES, *shapes.EC2, "g99.xlarge"})


@pytest.mark.parametrize("owned", [False, True])
@pytest.mark.parametrize("arch", ["amd64", "arm64"])
@pytest.mark.parametrize("instance_type", EKS_TYPES)
def test_on_eks_every_gpu_node_gets_one_exporter_and_one_host_engine(instance_type, arch, owned):
    """Wherever the agent's dcgm-server runs (the chart's placement, or the function's where the
    add-on takes it), the release that reads it; on every other GPU node the one with its own
    host engine; never both, never none; none on a node without a GPU or of a compute type the
    agent keeps off. Where the function places it, every amd64 GPU node has one (a node without
    reports DCGMError and is repaired)."""
    agent = eks_dcgm.OWNED_AFFINITY if owned else _chart_placement()
    remote = gpu_metrics.values("EKS", False, "/", owned)["affinity"]
    embedded = gpu_metrics.EMBEDDED_VALUES[owned]["affinity"]
    node = {GPU_NODE_LABEL: "true", "node.kubernetes.io/instance-type": instance_type}
    node["kubernetes.io/arch"] = arch
    engine = _admits(agent, node)
    assert _admits(remote, node) is engine
    assert _admits(embedded, node) is not engine
    if owned:
        assert engine is (arch == "amd64")
    for other in (
        {**node, GPU_NODE_LABEL: "false"},
        {**node, "eks.amazonaws.com/compute-type": "auto"},
    ):
        assert not _admits(remote, other) and not _admits(embedded, other)


def test_every_ec2_gpu_type_the_function_knows_is_one_the_agent_places_or_not_by_architecture():
    """A GPU type of the shapes table on amd64 is on dcgm-server's list (read from the agent's
    engine even where its chart places it), and the arm64 ones (p6e-gb200) get the exporter's."""
    for name, shape in shapes.EC2.items():
        if shape.arch == "x86_64":
            assert name in eks_dcgm.EKS_DCGM_INSTANCE_TYPES, name
    node = {GPU_NODE_LABEL: "true", "node.kubernetes.io/instance-type": "p6e-gb200.36xlarge"}
    for owned in (False, True):
        embedded = gpu_metrics.EMBEDDED_VALUES[owned]["affinity"]
        assert _admits(embedded, {**node, "kubernetes.io/arch": "arm64"})


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


def _detector(crd: dict | None = None, absent: bool = False) -> ObservedResource:
    synced = {"type": "Synced", "status": "True"}
    if absent:
        synced = {
            "type": "Synced",
            "status": "False",
            "message": "cannot observe external resource: external resource does not exist",
        }
    return ObservedResource(
        {"spec": {}, "status": {"atProvider": {"manifest": crd or {}}, "conditions": [synced]}}
    )


def _observed(
    crd: dict | None = None,
    absent: bool = False,
    live: bool | None = None,
    held: bool | None = None,
):
    """What is observed: the detector (the CRD found, reported absent, or neither: not
    answered), the live release with its serviceMonitor.enabled, and the ServiceMonitor's
    Object, Ready (held: its live object marked keep) or not."""
    resources = {}
    if crd is not None or absent:
        resources[gpu_metrics.SERVICE_MONITORS_KEY] = _detector(crd, absent)
    if live is not None:
        values = {"serviceMonitor": {"enabled": live}}
        resources[gpu_metrics.RELEASE_KEY] = ObservedResource(
            {"spec": {"forProvider": {"values": values}}}
        )
    if held is not None:
        body = gpu_metrics.service_monitor("x", "pc", {**resources, **_found_release()}).body
        ready = {"type": "Ready", "status": "True" if held else "False"}
        resources[gpu_metrics.SERVICE_MONITOR_KEY] = ObservedResource(
            {**body, "status": {"conditions": [ready]}}
        )
    return resources


def _found_release() -> dict:
    return {
        gpu_metrics.SERVICE_MONITORS_KEY: _detector(CRD),
        gpu_metrics.RELEASE_KEY: ObservedResource({"spec": {}}),
    }


def test_the_release_renders_no_service_monitor_but_hands_a_live_one_over_in_place():
    """Helm cannot upgrade a release whose stored manifest holds a kind the cluster no longer
    has: the release never renders the ServiceMonitor, except a live one that did, until the
    Object holds it (Ready: marked keep, which Helm's upgrade reads on the live object)."""
    # A new release, or one with the CRD or without: never.
    assert gpu_metrics.release_renders(_observed()) is False
    assert gpu_metrics.release_renders(_observed(CRD)) is False
    assert gpu_metrics.release_renders(_observed(CRD, live=False)) is False
    assert gpu_metrics.release_renders(_observed(absent=True, live=False)) is False
    # A live one that renders it: kept until the Object holds it, answer or none.
    assert gpu_metrics.release_renders(_observed(CRD, live=True)) is True
    assert gpu_metrics.release_renders(_observed(CRD, live=True, held=False)) is True
    assert gpu_metrics.release_renders(_observed(live=True)) is True
    assert gpu_metrics.release_renders(_observed(CRD, live=True, held=True)) is False
    assert gpu_metrics.release_renders(_observed(live=True, held=True)) is False
    # Its CRD reported gone before the Object held it: Helm's upgrade fails either way.
    assert gpu_metrics.release_renders(_observed(absent=True, live=True)) is False


def test_the_service_monitor_object_follows_the_crd_and_goes_only_once_it_is_reported_absent():
    xr, pc = "x", "pc"
    # Found, the release there: composed; not before the release (its namespace).
    made = gpu_metrics.service_monitor(xr, pc, _found_release())
    assert made is not None and made.ready
    assert gpu_metrics.service_monitor(xr, pc, _observed(CRD)) is None
    # Not answered: none made, one there kept as it is.
    assert gpu_metrics.service_monitor(xr, pc, _observed(live=False)) is None
    there = _observed(CRD, live=False, held=True)
    unanswered = {k: v for k, v in there.items() if k != gpu_metrics.SERVICE_MONITORS_KEY}
    kept = gpu_metrics.service_monitor(xr, pc, unanswered)
    assert kept is not None
    assert kept.body["spec"] == made.body["spec"]
    passing = {**there, gpu_metrics.SERVICE_MONITORS_KEY: _detector()}  # read, no manifest yet
    assert gpu_metrics.service_monitor(xr, pc, passing) is not None
    # Reported absent (the API server's NotFound): dropped, its ServiceMonitors went with the CRD.
    gone = {**there, gpu_metrics.SERVICE_MONITORS_KEY: _detector(absent=True)}
    assert gpu_metrics.service_monitor(xr, pc, gone) is None


def test_the_service_monitor_object_never_deletes_and_is_ready_once_marked_keep():
    """Dropped once its kind is gone, an Object that deletes could never go (provider-kubernetes
    cannot read the kind; crossplane-runtime skips observing only without Delete)."""
    body = gpu_metrics.service_monitor("x", "pc", _found_release()).body
    assert "Delete" not in body["spec"]["managementPolicies"]
    assert "*" not in body["spec"]["managementPolicies"]
    manifest = body["spec"]["forProvider"]["manifest"]
    assert manifest["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    # Helm's, as the live release made it: not Ready until the Object's apply marked it.
    helms = {**manifest, "metadata": {**manifest["metadata"], "annotations": HELM_ANNOTATIONS}}
    assert not object_ready(body, helms)
    marked = copy.deepcopy(helms)
    marked["metadata"]["annotations"]["helm.sh/resource-policy"] = "keep"
    assert object_ready(body, marked)


def _converged(source_example: str, world: World):
    xr, classes = example(source_example)
    required = {**all_classes(classes), "inference-gateways": [inference_gateway("fleet-a")]}
    return sim.converge(xr, required, world, SCHEMAS), xr, required


def _release_values(out) -> dict:
    return out.resources[RESOURCE_KEYS[gpu_metrics.KEY]].body["spec"]["forProvider"]["values"]


def test_a_cluster_without_the_crd_gets_no_service_monitor_and_one_with_it_does():
    without, _, _ = _converged("existing", World())
    assert _release_values(without)["serviceMonitor"] == {"enabled": False}
    assert gpu_metrics.SERVICE_MONITOR_KEY not in without.resources
    observer = without.resources[gpu_metrics.SERVICE_MONITORS_KEY]
    assert observer.ready  # asked, not waited for
    manifest = observer.body["spec"]["forProvider"]["manifest"]
    assert manifest["metadata"]["name"] == "servicemonitors.monitoring.coreos.com"
    assert observer.body["spec"]["managementPolicies"] == ["Observe"]
    world = World(detected={gpu_metrics.SERVICE_MONITOR_CRD: CRD})
    with_crd, xr, required = _converged("existing", world)
    assert _release_values(with_crd)["serviceMonitor"] == {"enabled": False}
    monitor = with_crd.resources[gpu_metrics.SERVICE_MONITOR_KEY]
    assert monitor.body["spec"]["forProvider"]["manifest"] == gpu_metrics.SERVICE_MONITOR
    assert with_crd.status == without.status
    # The CRD removed later: the Object goes, the release is left as it is.
    later = World(detected={gpu_metrics.SERVICE_MONITOR_CRD: None})
    again = compose_cluster(
        xr, sim.answered(required, with_crd, later), sim.reported(with_crd, later), SCHEMAS
    )
    assert gpu_metrics.SERVICE_MONITOR_KEY not in again.resources
    assert _release_values(again) == _release_values(with_crd)


def test_a_live_release_s_service_monitor_is_handed_to_the_object_before_helm_stops_rendering_it():
    """A cluster the previous function release composed: its release renders the ServiceMonitor.
    The Object comes first, over Helm's; the release stops rendering it once the Object holds it
    (so Helm's upgrade leaves it in place), and the two then agree for good."""
    world = World(detected={gpu_metrics.SERVICE_MONITOR_CRD: CRD})
    out, xr, required = _converged("existing", world)

    previous = sim.reported(out, world)  # bodies of their own: edited in place
    release = previous.resources[RESOURCE_KEYS[gpu_metrics.KEY]].body
    release["spec"]["forProvider"]["values"]["serviceMonitor"] = {"enabled": True}
    del previous.resources[gpu_metrics.SERVICE_MONITOR_KEY]
    first = compose_cluster(xr, sim.answered(required, out, world), previous, SCHEMAS)
    assert _release_values(first)["serviceMonitor"] == {"enabled": True}
    assert gpu_metrics.SERVICE_MONITOR_KEY in first.resources
    then = sim.reported(first, world)
    second = compose_cluster(xr, sim.answered(required, first, world), then, SCHEMAS)
    assert then.resources[gpu_metrics.SERVICE_MONITOR_KEY].ready
    assert _release_values(second)["serviceMonitor"] == {"enabled": False}


def _release(values: dict) -> dict:
    return kube.release("x", gpu_metrics.KEY, CHARTS[gpu_metrics.KEY], "pc", values)


def _rendered(source: str, service_monitor: bool, root: str = "/") -> dict[str, dict]:
    made = charts.template(_release(gpu_metrics.values(source, service_monitor, root)))
    return {m["kind"]: m for m in made}


def test_the_real_chart_renders_a_service_monitor_only_when_asked():
    assert "ServiceMonitor" in _rendered("AKS", True)
    assert "ServiceMonitor" not in _rendered("AKS", False)


@pytest.mark.parametrize("helm", ["HELM", "HELM4"])
@pytest.mark.parametrize("source", SOURCES)
def test_the_object_s_service_monitor_is_the_one_the_real_chart_renders(source, helm):
    """The chart 4.8.3 with the function's values and serviceMonitor.enabled, by Helm v3 and v4:
    the same name, namespace, selector, endpoints (interval, timeout, relabelings); of its
    labels, the selector's; of annotations, only Helm's keep."""
    values = gpu_metrics.values(source, True, GKE_ROOT if source == "GKE" else "/")
    binary = charts.helm_bin(helm, "helm4" if helm == "HELM4" else "helm")
    (chart,) = [
        m for m in charts.template(_release(values), binary) if m["kind"] == "ServiceMonitor"
    ]
    ours = gpu_metrics.SERVICE_MONITOR
    assert (ours["apiVersion"], ours["kind"]) == (chart["apiVersion"], chart["kind"])
    for field in ("name", "namespace"):
        assert ours["metadata"][field] == chart["metadata"][field]
    assert ours["spec"] == chart["spec"]
    assert ours["metadata"]["labels"].items() <= chart["metadata"]["labels"].items()
    assert ours["metadata"]["labels"] == chart["spec"]["selector"]["matchLabels"]
    assert ours["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    assert "annotations" not in chart["metadata"]


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
    workload e2e); against EKS's remote host engine the chart's SYS_ADMIN is not kept. Every
    pod runs under the runtime's default seccomp profile (the chart sets none)."""
    pod = _rendered(source, False, GKE_ROOT)["DaemonSet"]["spec"]["template"]["spec"]
    assert pod["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
    context = pod["containers"][0]["securityContext"]
    assert "seccompProfile" not in context  # the pod's holds for every container
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
    out, _, _ = _converged("existing", World())
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


def _embedded() -> list[dict]:
    component = next(c for c in COMPONENTS if c.key == gpu_metrics.EMBEDDED_KEY)
    release = kube.release(
        "x", component.key, component.pinned, "pc", gpu_metrics.EMBEDDED_VALUES[False]
    )
    return charts.template(release)


def test_the_real_chart_s_second_release_on_eks_runs_its_own_host_engine_in_its_own_namespace():
    """Its objects collide with none of the first release's (the chart names its metrics
    ConfigMap and Role the same in every release)."""
    second, first = _embedded(), charts.template(_release(gpu_metrics.values("EKS", False, "/")))
    made = {m["kind"]: m for m in second}
    assert {m["metadata"].get("namespace") for m in second} - {None} == {
        "modelplane-gpu-metrics-embedded"
    }

    def named(ms: list[dict]) -> set:
        return {(m["kind"], m["metadata"].get("namespace"), m["metadata"]["name"]) for m in ms}

    assert not named(first) & named(second)
    assert ("ConfigMap", "modelplane-gpu-metrics-embedded", "exporter-metrics-config-map") in named(
        second
    )
    pod = made["DaemonSet"]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert "DCGM_REMOTE_HOSTENGINE_INFO" not in {e["name"] for e in container["env"]}
    assert "SYS_ADMIN" in container["securityContext"]["capabilities"]["add"]
    assert pod["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
    assert pod["tolerations"] == [GPU_TOLERATION]
    assert made["Service"]["metadata"]["name"] == "mp-dcgm-exporter-embedded"


@pytest.mark.parametrize("source", ["eks", "gke", "existing"])
def test_only_eks_gets_the_second_release_with_its_namespace_and_quota(source):
    out, _, _ = _converged(source, World())
    keys = {
        f"release-{gpu_metrics.EMBEDDED_KEY}",
        gpu_metrics.EMBEDDED_NAMESPACE_KEY,
        gpu_metrics.EMBEDDED_QUOTA_KEY,
    }
    if source != "eks":
        assert not keys & set(out.resources)
        return
    assert keys <= set(out.resources)
    release = out.resources[f"release-{gpu_metrics.EMBEDDED_KEY}"].body["spec"]["forProvider"]
    assert release["namespace"] == "modelplane-gpu-metrics-embedded"
    assert release["chart"]["version"] == CHARTS[gpu_metrics.KEY].version
    # The simulated add-on reports v1.7.0: the function places its host engine.
    assert release["values"] == gpu_metrics.EMBEDDED_VALUES[True]
    quota = out.resources[gpu_metrics.EMBEDDED_QUOTA_KEY].body["spec"]["forProvider"]["manifest"]
    assert quota["metadata"]["namespace"] == "modelplane-gpu-metrics-embedded"


def test_eks_second_release_has_a_service_monitor_of_its_own_where_the_crd_is_found():
    """Converged on EKS with the CRD: both Objects; each selects its own release's Service in the
    real chart's render, and the second's series carry the first's job. Without the CRD, or on
    another source, none of the second."""
    with_crd, _, _ = _converged("eks", World(detected={gpu_metrics.SERVICE_MONITOR_CRD: CRD}))
    monitors = {
        key: with_crd.resources[key].body["spec"]["forProvider"]["manifest"]
        for key in (gpu_metrics.SERVICE_MONITOR_KEY, gpu_metrics.EMBEDDED_SERVICE_MONITOR_KEY)
    }
    embedded = monitors[gpu_metrics.EMBEDDED_SERVICE_MONITOR_KEY]
    assert embedded == gpu_metrics.EMBEDDED_SERVICE_MONITOR
    assert with_crd.resources[gpu_metrics.EMBEDDED_SERVICE_MONITOR_KEY].ready
    services = {
        "mp-dcgm-exporter": {
            m["kind"]: m for m in charts.template(_release(gpu_metrics.values("EKS", False, "/")))
        }["Service"],
        "mp-dcgm-exporter-embedded": {m["kind"]: m for m in _embedded()}["Service"],
    }
    for monitor in monitors.values():
        selected = [
            name
            for name, service in services.items()
            if monitor["spec"]["selector"]["matchLabels"].items()
            <= service["metadata"]["labels"].items()
            and service["metadata"]["namespace"]
            in monitor["spec"]["namespaceSelector"]["matchNames"]
        ]
        assert selected == [monitor["metadata"]["name"]]
    (endpoint,) = embedded["spec"]["endpoints"]
    assert endpoint["relabelings"] == [{"targetLabel": "job", "replacement": "mp-dcgm-exporter"}]
    assert {k: v for k, v in endpoint.items() if k != "relabelings"} == {
        k: v
        for k, v in gpu_metrics.SERVICE_MONITOR["spec"]["endpoints"][0].items()
        if k != "relabelings"
    }
    without, _, _ = _converged("eks", World())
    assert gpu_metrics.EMBEDDED_SERVICE_MONITOR_KEY not in without.resources
    other, _, _ = _converged("existing", World(detected={gpu_metrics.SERVICE_MONITOR_CRD: CRD}))
    assert gpu_metrics.SERVICE_MONITOR_KEY in other.resources
    assert gpu_metrics.EMBEDDED_SERVICE_MONITOR_KEY not in other.resources


def test_eks_second_service_monitor_waits_for_its_release_and_follows_the_crd():
    xr, pc = "x", "pc"
    release = {f"release-{gpu_metrics.EMBEDDED_KEY}": ObservedResource({"spec": {}})}
    found = {gpu_metrics.SERVICE_MONITORS_KEY: _detector(CRD)}
    assert gpu_metrics.service_monitor(xr, pc, found, embedded=True) is None
    made = gpu_metrics.service_monitor(xr, pc, {**found, **release}, embedded=True)
    assert made is not None and made.ready
    assert "Delete" not in made.body["spec"]["managementPolicies"]
    gone = {gpu_metrics.SERVICE_MONITORS_KEY: _detector(absent=True), **release}
    assert gpu_metrics.service_monitor(xr, pc, gone, embedded=True) is None
