"""GPU metrics: NVIDIA's DCGM exporter on every GPU node, each metric naming the pod whose DRA
claim holds the GPU.

dcgm-exporter 4.8.3 (chart and image 4.6.0-4.8.3) reads resource.k8s.io/v1 ResourceSlices and
falls back to v1beta1 (internal/pkg/transformation/dra.go, PR #654; 4.8.2 read v1beta1 only, which
Kubernetes 1.34+ serves only when enabled): with kubernetesDRA on, it maps each GPU's device in the
kubelet's pod-resources answer to the NVIDIA DRA driver's slice, and labels the GPU's metrics with
the pod, namespace and container holding it. The chart's ClusterRole then reads pods and
resourceslices (templates/clusterrole.yaml), the pod mounts /var/lib/kubelet/pod-resources
(templates/daemonset.yaml) and runs as root with SYS_ADMIN (profiling counters): host paths and
capabilities beyond baseline, so its namespace is Pod Security privileged.

One DCGM host engine a node. The exporter embeds its own by default; two on a node contend for the
GPUs' profiling counters. On EKS the node monitoring agent already runs one (its dcgm-server
DaemonSet: nv-hostengine -n -b ALL, hostPort 5555, on amd64 NVIDIA instance types;
aws/eks-node-monitoring-agent charts/ templates/dcgm-daemonset.yaml and values.yaml
dcgmAgent.affinity, v1.7.0), so there the exporter connects to it on its node's address
(DCGM_REMOTE_HOSTENGINE_INFO, pkg/cmd/app.go) and runs only where the agent places it
(function/clusters/eks_dcgm.py: the chart's list, or every amd64 NVIDIA node where the function
places it): with a remote host engine that does not answer it exits
(internal/pkg/dcgmprovider/dcgm.go). On EKS's other GPU nodes (arm64, as p6e-gb200, which every
agent version leaves without dcgm-server; types off the list while the chart places it) a second
release of the chart runs it with its own host engine, in a namespace of its own (the chart names
its metrics ConfigMap and Role the same in every release).

How it sees the GPUs without claiming them: the image sets NVIDIA_VISIBLE_DEVICES=all
(docker/Dockerfile), and the NVIDIA container runtime gives such a container every GPU and the
driver's libraries. It is the default runtime on EKS's NVIDIA AMIs (the agent's dcgm-server relies
on it the same way), and taken to be so on AKS's and Nebius's GPU images and on Existing clusters
(not read in their sources). VKE's GPU Operator names it in a RuntimeClass (`nvidia`). GKE's COS
nodes have none: the exporter mounts the driver the function's installer put on the host and runs
privileged for the device nodes. Even against a remote host engine the exporter loads NVML (in
Kubernetes mode, for MIG device names: pkg/cmd/app.go), so it needs the driver's libraries there
too.

The ServiceMonitor is not the release's: a release that holds one cannot be upgraded, nor rolled
back, once its CRD is removed from the cluster (Helm v4.2.3 and v3.21.1 pkg/action/upgrade.go
build the stored manifest first: "unable to build kubernetes objects from current release
manifest", helm/helm#6813), so every later chart bump would fail. The release renders none
(`serviceMonitor.enabled: false`); a provider-kubernetes Object makes the one the chart 4.8.3
renders (templates/service-monitor.yaml), where an Observe-only Object finds its CRD.
"""

from collections.abc import Mapping
from dataclasses import dataclass

from function import failures, kube, names
from function.caches import BODIES
from function.clusters import eks_dcgm
from function.clusters.base import as_desired
from function.inputs import ObservedResource
from function.output import Desired
from function.serving import looking
from function.versions import CHARTS, IMAGES
from function.workload import GPU_NODE_LABEL, GPU_TOLERATION

KEY = "dcgm-exporter"
RELEASE_KEY = f"release-{KEY}"
NAMESPACE_KEY = "dcgm-exporter-namespace"
QUOTA_KEY = "dcgm-exporter-critical-pods-quota"
NAMESPACE = CHARTS[KEY].namespace
# EKS: the release with its own host engine where the node monitoring agent runs none, its
# namespace and that namespace's critical-pods quota.
EMBEDDED_KEY = "dcgm-exporter-embedded"
EMBEDDED_NAMESPACE = f"{NAMESPACE}-embedded"
EMBEDDED_NAMESPACE_KEY = f"{EMBEDDED_KEY}-namespace"
EMBEDDED_QUOTA_KEY = f"{EMBEDDED_KEY}-critical-pods-quota"
# The Observe-only Object that says whether the cluster has the ServiceMonitor CRD.
SERVICE_MONITORS_KEY = "detect-servicemonitors"
SERVICE_MONITOR_CRD = "servicemonitors.monitoring.coreos.com"
# The Object of the exporter's ServiceMonitor.
SERVICE_MONITOR_KEY = "dcgm-exporter-service-monitor"

# The cost on each GPU node, the function's choice: 100m CPU and 256 MiB requested, 1 GiB at most
# and no CPU limit. Not the chart's defaults (128 MiB, 512 MiB and 200m): on 8-GPU nodes the
# exporter with its embedded host engine is killed at 512 MiB (pytorch/ci-infra#1011: half the
# pods, none on 1- or 4-GPU nodes; #799 raised theirs to 1 GiB; NVIDIA/dcgm-exporter#609 reports
# 400-500 MiB on one A10G), and a CPU limit throttles a scrape past its 25 s timeout.
RESOURCES = {
    "requests": {"cpu": "100m", "memory": "256Mi"},
    "limits": {"memory": "1Gi"},
}
# The chart rolls one node at a time; each new pod is Ready after 45 s at the earliest
# (readinessProbe.initialDelaySeconds): hours on a large fleet. A tenth at a time: a metrics gap
# on those nodes for a minute, nothing else.
ROLLOUT = {"maxUnavailable": "10%", "maxSurge": 0}

# The labels the NVIDIA DRA driver places its kubelet plugin by (dra-driver-nvidia-gpu 0.4.1
# values.yaml kubeletPlugin.affinity: NFD's vendor label, its class-and-vendor labels, and the GPU
# Operator's), so the exporter runs where GPUs are claimed through DRA. Not the Tegra CPU term:
# a Grace node may have no GPU for DCGM to find.
GPU_NODE_LABELS = (
    GPU_NODE_LABEL,
    "feature.node.kubernetes.io/pci-0302_10de.present",
    "feature.node.kubernetes.io/pci-0300_10de.present",
    "nvidia.com/gpu.present",
)

# Where the exporter reads dcgm-server, and where it runs its own host engine, as the add-on places
# dcgm-server (function/clusters/eks_dcgm.py): the chart's list, or any amd64 NVIDIA node where
# the function owns the placement. The two always cover the same nodes, once each.
EKS_REMOTE = {False: (eks_dcgm.LISTED,), True: (eks_dcgm.WIDENED[1:],)}
# Off amd64 the agent never runs dcgm-server, whoever places it.
_OFF_AMD64 = ({"key": eks_dcgm.ARCH, "operator": "NotIn", "values": ["amd64"]}, *eks_dcgm.EKS_NODES)
EKS_EMBEDDED = {
    False: (
        (
            {
                "key": eks_dcgm.INSTANCE_TYPE,
                "operator": "NotIn",
                "values": list(eks_dcgm.EKS_DCGM_INSTANCE_TYPES),
            },
            *eks_dcgm.EKS_NODES,
        ),
        _OFF_AMD64,
    ),
    True: (_OFF_AMD64,),
}
EKS_HOSTENGINE_PORT = 5555  # dcgm-server's hostPort
# The exporter's connection to it, on its own node's address (the hostPort; the pod network
# reaches it through the CNI's portmap, as the agent's own pods on the host network do).
EKS_REMOTE_HOSTENGINE = (
    {"name": "HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}},
    {"name": "DCGM_REMOTE_HOSTENGINE_INFO", "value": f"$(HOST_IP):{EKS_HOSTENGINE_PORT}"},
)
# Against a remote host engine the exporter reads only what it is sent: no profiling of its own,
# so no SYS_ADMIN. Still root: the kubelet's pod-resources socket is root's.
REMOTE_SECURITY_CONTEXT = {
    "runAsNonRoot": False,
    "runAsUser": 0,
    # Helm merges maps: the chart's `add: [SYS_ADMIN]` (values.yaml securityContext) stays unless
    # emptied here.
    "capabilities": {"add": [], "drop": ["ALL"]},
    "allowPrivilegeEscalation": False,
}
# The runtime's default seccomp profile for every exporter pod (the chart sets none, so the
# kubelet's default, Unconfined, stood). It takes nothing the exporter's capabilities grant:
# containerd's default profile allows bpf, perf_event_open, mount and the rest of CAP_SYS_ADMIN's
# syscalls to a container that holds it (contrib/seccomp/seccomp_default.go), and ioctl (the GPUs'
# device nodes) to every container; a privileged container (GKE's) runs without one whatever is
# set (internal/cri/sputil/seccomp_linux.go). Stack SRE review, finding 4.
POD_SECURITY_CONTEXT = {"seccompProfile": {"type": "RuntimeDefault"}}
# GKE: privileged for the GPUs' device nodes. The API server refuses privileged with the chart's
# `allowPrivilegeEscalation: false` ("cannot set `allowPrivilegeEscalation` to false and
# `privileged` to true", apis/core/validation), which Helm's merge would keep: set true.
PRIVILEGED_SECURITY_CONTEXT = {
    "privileged": True,
    "allowPrivilegeEscalation": True,
    "runAsNonRoot": False,
    "runAsUser": 0,
}

# GKE COS: where the function's driver installer puts the driver (clusters/gke_driver.py
# INSTALL_DIR, the DRA driver's nvidiaDriverRoot), mounted where GKE mounts it into GPU containers,
# with its libraries on the loader's path; privileged for the GPUs' device nodes.
GKE_DRIVER_VOLUME = "nvidia-driver"
GKE_DRIVER_MOUNT = "/usr/local/nvidia"
# The chart's own mount of its counters file (values.yaml extraVolumeMounts): a list set here
# replaces the chart's, so it is named again.
COUNTERS_MOUNT = {
    "name": "exporter-metrics-volume",
    "mountPath": "/etc/dcgm-exporter/default-counters.csv",
    "subPath": "default-counters.csv",
}
# VKE's GPU Operator's RuntimeClass (its ClusterPolicy operator.runtimeClass default).
VULTR_RUNTIME_CLASS = "nvidia"


def image() -> dict:
    repository, tag = IMAGES[KEY].rsplit(":", 1)
    return {"repository": repository, "tag": tag}


def gpu_nodes(*extra: tuple[dict, ...]) -> dict:
    """Required node affinity: any GPU label; with extra requirements, NFD's vendor label (which
    the function's own NFD sets on every NVIDIA GPU node of a provisioned cluster) and each
    tuple's requirements, one term a tuple (a node matching any term) rather than one a label."""
    if extra:
        vendor = {"key": GPU_NODE_LABEL, "operator": "In", "values": ["true"]}
        terms = [{"matchExpressions": [vendor, *more]} for more in extra]
    else:
        terms = [
            {"matchExpressions": [{"key": label, "operator": "In", "values": ["true"]}]}
            for label in GPU_NODE_LABELS
        ]
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
        }
    }


def values(source: str, service_monitor: bool, driver_root: str, dcgm_owned: bool = False) -> dict:
    """The chart's values on a cluster of this source (dcgm_owned: on EKS, whether the function
    places the agent's host engine, eks_dcgm.owned)."""
    made: dict = {
        "image": image(),
        "kubernetesDRA": {"enabled": True},
        "tolerations": [GPU_TOLERATION],
        "affinity": gpu_nodes(),
        "resources": RESOURCES,
        "podSecurityContext": POD_SECURITY_CONTEXT,
        "rollingUpdate": ROLLOUT,
        # Only while a live release hands its ServiceMonitor over (release_renders).
        "serviceMonitor": {"enabled": service_monitor},
    }
    if source == "EKS":
        made["affinity"] = gpu_nodes(*EKS_REMOTE[dcgm_owned])
        made["extraEnv"] = list(EKS_REMOTE_HOSTENGINE)
        made["securityContext"] = REMOTE_SECURITY_CONTEXT
    elif source == "GKE":
        made["extraHostVolumes"] = [{"name": GKE_DRIVER_VOLUME, "hostPath": driver_root}]
        made["extraVolumeMounts"] = [
            COUNTERS_MOUNT,
            {"name": GKE_DRIVER_VOLUME, "mountPath": GKE_DRIVER_MOUNT, "readOnly": True},
        ]
        made["extraEnv"] = [{"name": "LD_LIBRARY_PATH", "value": f"{GKE_DRIVER_MOUNT}/lib64"}]
        made["securityContext"] = PRIVILEGED_SECURITY_CONTEXT
    elif source == "Vultr":
        made["runtimeClassName"] = VULTR_RUNTIME_CLASS
    return made


# EKS: the second release's values, the exporter with its own host engine (SYS_ADMIN, the chart's
# default) where dcgm-server does not run, by whether the function places it; it never rendered a
# ServiceMonitor.
EMBEDDED_VALUES = {
    owned: {**values("", False, ""), "affinity": gpu_nodes(*EKS_EMBEDDED[owned])}
    for owned in (False, True)
}


@dataclass(frozen=True)
class _Sought:
    api_version: str = "apiextensions.k8s.io/v1"
    kind: str = "CustomResourceDefinition"
    name: str = SERVICE_MONITOR_CRD
    labels: tuple[tuple[str, str], ...] = ()


def observer(xr: str, provider_config: str) -> Desired:
    """The Observe-only Object of the ServiceMonitor CRD: ready whatever it finds (asked, not
    waited for)."""
    return looking.detector(xr, SERVICE_MONITORS_KEY, _Sought(), provider_config, "")


def crd_found(observed: Mapping[str, ObservedResource]) -> bool | None:
    """Whether the cluster has the ServiceMonitor CRD: True once read, False once the provider
    reports it absent (the API server's NotFound, an answer), None while no answer is in (not
    observed yet, a passing error, not read yet)."""
    seen = observed.get(SERVICE_MONITORS_KEY)
    if seen is None:
        return None
    if failures.does_not_exist(seen):
        return False
    return True if isinstance(seen.at_provider("manifest", "metadata"), dict) else None


# The chart's names with the function's values (templates/_helpers.tpl): the release's name holds
# the chart's, so fullname is the release's name; the selector labels name the chart and release.
_RELEASE = names.release_name(KEY)
SELECTOR = {
    "app.kubernetes.io/name": CHARTS[KEY].name,
    "app.kubernetes.io/instance": _RELEASE,
    "app.kubernetes.io/component": CHARTS[KEY].name,
}
# Helm deletes what an upgrade no longer renders unless the live object carries this
# (pkg/kube/client.go Update reads it from the live object: Helm v4.2.3 and v3.21.1), so the live
# release's ServiceMonitor is handed to the Object in place. Meaningless to Helm otherwise.
HELM_KEEP = ("helm.sh/resource-policy", "keep")
# What the chart 4.8.3 renders with the function's values (templates/service-monitor.yaml,
# values.yaml serviceMonitor: interval 30s, scrapeTimeout 25s, honorLabels false, no relabelings),
# with its selector labels and not Helm's others (its chart, version and managed-by). Not EKS's
# second release's Service: a selector without the release's label would not reach a live
# ServiceMonitor Helm made, whose selector label stays Helm's under server-side apply (stack SRE
# review), so that one has a ServiceMonitor of its own (EMBEDDED_SERVICE_MONITOR).
SERVICE_MONITOR = {
    "apiVersion": "monitoring.coreos.com/v1",
    "kind": "ServiceMonitor",
    "metadata": {
        "name": _RELEASE,
        "namespace": NAMESPACE,
        "labels": dict(SELECTOR),
        "annotations": dict([HELM_KEEP]),
    },
    "spec": {
        "selector": {"matchLabels": dict(SELECTOR)},
        "namespaceSelector": {"matchNames": [NAMESPACE]},
        "endpoints": [
            {
                "port": "metrics",
                "path": "/metrics",
                "interval": "30s",
                "scrapeTimeout": "25s",
                "honorLabels": False,
                "relabelings": [],
                "metricRelabelings": [],
            }
        ],
    },
}
# EKS's second release's: the same as the chart would render for it, never Helm's (no handover),
# its series' `job` set to the first one's, so a query by job finds every GPU node.
_EMBEDDED_RELEASE = names.release_name(EMBEDDED_KEY)
_EMBEDDED_SELECTOR = {**SELECTOR, "app.kubernetes.io/instance": _EMBEDDED_RELEASE}
EMBEDDED_SERVICE_MONITOR_KEY = f"{EMBEDDED_KEY}-service-monitor"
EMBEDDED_SERVICE_MONITOR = {
    **SERVICE_MONITOR,
    "metadata": {
        "name": _EMBEDDED_RELEASE,
        "namespace": EMBEDDED_NAMESPACE,
        "labels": dict(_EMBEDDED_SELECTOR),
    },
    "spec": {
        **SERVICE_MONITOR["spec"],
        "selector": {"matchLabels": dict(_EMBEDDED_SELECTOR)},
        "namespaceSelector": {"matchNames": [EMBEDDED_NAMESPACE]},
        "endpoints": [
            {
                **SERVICE_MONITOR["spec"]["endpoints"][0],
                "relabelings": [{"targetLabel": "job", "replacement": _RELEASE}],
            }
        ],
    },
}
# Ready once the live ServiceMonitor carries HELM_KEEP: the release may then stop rendering it.
HELD = (
    f"has(object.metadata.annotations) && '{HELM_KEEP[0]}' in object.metadata.annotations"
    f" && object.metadata.annotations['{HELM_KEEP[0]}'] == '{HELM_KEEP[1]}'"
)
# Never deleted through the Object: with its CRD gone provider-kubernetes cannot read the kind,
# so an Object that deletes could never go (crossplane-runtime v2.4.0's managed reconciler
# observes before deleting, and skips that only when the policies hold no Delete). Its
# ServiceMonitor goes with its CRD, or with the function's namespace when the XR is deleted.
POLICIES = ["Observe", "Create", "Update", "LateInitialize"]


def service_monitor(
    xr: str, provider_config: str, observed: Mapping[str, ObservedResource], embedded: bool = False
) -> Desired | None:
    """The exporter's ServiceMonitor Object (embedded: EKS's second release's), or None.
    Composed while the CRD is found, first once its release is there (its namespace is); kept
    while no answer is in; dropped only once the CRD is reported absent (its ServiceMonitors are
    gone with it). Ready whatever it reports: metrics do not hold the stack back (a failed apply
    is a Warning)."""
    key, release = (
        (EMBEDDED_SERVICE_MONITOR_KEY, f"release-{EMBEDDED_KEY}")
        if embedded
        else (SERVICE_MONITOR_KEY, RELEASE_KEY)
    )
    found = crd_found(observed)
    seen = observed.get(key)
    if found is False:
        return None
    if found is None:
        return None if seen is None else Desired(as_desired(seen.body), ready=True)
    if seen is None and release not in observed:
        return None
    body = BODIES.item(
        xr,
        (key, provider_config),
        lambda: kube.manifest_object(
            xr,
            key,
            EMBEDDED_SERVICE_MONITOR if embedded else SERVICE_MONITOR,
            provider_config,
            policies=POLICIES,
            ready_when=None if embedded else HELD,
        ),
    )
    return Desired(body, ready=True, shared=True)


def release_renders(observed: Mapping[str, ObservedResource]) -> bool:
    """Whether the release still renders the chart's ServiceMonitor: only a live one that did,
    until the Object holds it (Ready: marked HELM_KEEP, so the upgrade that stops rendering it
    leaves it in place, no scrape gap). Where the CRD is reported absent, no longer: the upgrade
    then fails in Helm's words until the CRD is back (docs/stack.md, GPU metrics)."""
    live = observed.get(RELEASE_KEY)
    if (
        live is None
        or live.get("spec", "forProvider", "values", "serviceMonitor", "enabled") is not True
    ):
        return False
    held = observed.get(SERVICE_MONITOR_KEY)
    if held is not None and held.ready:
        return False
    return crd_found(observed) is not False
