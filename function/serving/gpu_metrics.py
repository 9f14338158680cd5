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
(DCGM_REMOTE_HOSTENGINE_INFO, pkg/cmd/app.go) and runs only where the agent places it: with a
remote host engine that does not answer it exits (internal/pkg/dcgmprovider/dcgm.go).

How it sees the GPUs without claiming them: the image sets NVIDIA_VISIBLE_DEVICES=all
(docker/Dockerfile), and the NVIDIA container runtime gives such a container every GPU and the
driver's libraries. It is the default runtime on EKS's NVIDIA AMIs (the agent's dcgm-server relies
on it the same way), and taken to be so on AKS's and Nebius's GPU images and on Existing clusters
(not read in their sources). VKE's GPU Operator names it in a RuntimeClass (`nvidia`). GKE's COS
nodes have none: the exporter mounts the driver the function's installer put on the host and runs
privileged for the device nodes. Even against a remote host engine the exporter loads NVML (in
Kubernetes mode, for MIG device names: pkg/cmd/app.go), so it needs the driver's libraries there
too.

The ServiceMonitor is rendered only where its CRD exists on the cluster (the chart renders it by
default, and Helm fails on a kind the API server does not know): an Observe-only Object reads the
CRD; while that answer is not in, the release keeps what it was installed with.
"""

from collections.abc import Mapping
from dataclasses import dataclass

from function import failures
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
# The Observe-only Object that says whether the cluster has the ServiceMonitor CRD.
SERVICE_MONITORS_KEY = "detect-servicemonitors"
SERVICE_MONITOR_CRD = "servicemonitors.monitoring.coreos.com"

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

# Where the EKS node monitoring agent runs its DCGM host engine (dcgm-server): its chart's
# dcgmAgent.affinity at v1.7.0, which the function leaves as it is (it sets only the tolerations,
# clusters/eks.py). EKS installs the agent's default version for the cluster's minor: a GPU
# instance type a later agent adds gets no exporter here until this list has it.
EKS_DCGM_INSTANCE_TYPES = (
    *(f"g3.{s}" for s in ("16xlarge", "4xlarge", "8xlarge")),
    "g3s.xlarge",
    *(f"g4dn.{s}" for s in ("12xlarge", "16xlarge", "2xlarge", "4xlarge", "8xlarge", "metal")),
    "g4dn.xlarge",
    *(f"g5.{s}" for s in ("12xlarge", "16xlarge", "24xlarge", "2xlarge", "48xlarge")),
    *(f"g5.{s}" for s in ("4xlarge", "8xlarge", "xlarge")),
    *(f"g5g.{s}" for s in ("16xlarge", "2xlarge", "4xlarge", "8xlarge", "metal", "xlarge")),
    *(f"g6.{s}" for s in ("12xlarge", "16xlarge", "24xlarge", "2xlarge", "48xlarge")),
    *(f"g6.{s}" for s in ("4xlarge", "8xlarge", "xlarge")),
    *(f"g6e.{s}" for s in ("12xlarge", "16xlarge", "24xlarge", "2xlarge", "48xlarge")),
    *(f"g6e.{s}" for s in ("4xlarge", "8xlarge", "xlarge")),
    *(f"g6f.{s}" for s in ("2xlarge", "4xlarge", "large", "xlarge")),
    *(f"g7.{s}" for s in ("12xlarge", "24xlarge", "2xlarge", "48xlarge", "4xlarge", "8xlarge")),
    *(f"g7e.{s}" for s in ("12xlarge", "24xlarge", "2xlarge", "48xlarge", "4xlarge", "8xlarge")),
    "gr6.4xlarge",
    "gr6.8xlarge",
    "gr6f.4xlarge",
    *(f"p2.{s}" for s in ("16xlarge", "8xlarge", "xlarge")),
    *(f"p3.{s}" for s in ("16xlarge", "2xlarge", "8xlarge")),
    "p3dn.24xlarge",
    "p4d.24xlarge",
    "p4de.24xlarge",
    "p5.48xlarge",
    "p5.4xlarge",
    "p5e.48xlarge",
    "p5en.48xlarge",
    "p6-b200.48xlarge",
    "p6-b300.48xlarge",
    "p6e-gb200.36xlarge",
    "p6e-gb300.36xlarge",
)
EKS_DCGM_SERVER = (
    {
        "key": "node.kubernetes.io/instance-type",
        "operator": "In",
        "values": list(EKS_DCGM_INSTANCE_TYPES),
    },
    {
        "key": "eks.amazonaws.com/compute-type",
        "operator": "NotIn",
        "values": ["fargate", "auto", "hybrid"],
    },
    {"key": "sagemaker.amazonaws.com/compute-type", "operator": "NotIn", "values": ["hyperpod"]},
    {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
)
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


def gpu_nodes(extra: tuple[dict, ...] = ()) -> dict:
    """Required node affinity: any GPU label; with extra requirements, NFD's vendor label (which
    the function's own NFD sets on every NVIDIA GPU node of a provisioned cluster) and each of
    them, in one term rather than one per label."""
    labels = (GPU_NODE_LABEL,) if extra else GPU_NODE_LABELS
    terms = [
        {"matchExpressions": [{"key": label, "operator": "In", "values": ["true"]}, *extra]}
        for label in labels
    ]
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
        }
    }


def values(source: str, service_monitor: bool, driver_root: str) -> dict:
    """The chart's values on a cluster of this source."""
    made: dict = {
        "image": image(),
        "kubernetesDRA": {"enabled": True},
        "tolerations": [GPU_TOLERATION],
        "affinity": gpu_nodes(),
        "resources": RESOURCES,
        "rollingUpdate": ROLLOUT,
        "serviceMonitor": {"enabled": service_monitor},
    }
    if source == "EKS":
        made["affinity"] = gpu_nodes(EKS_DCGM_SERVER)
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


def service_monitor(observed: Mapping[str, ObservedResource]) -> bool:
    """Whether the release renders its ServiceMonitor: yes once the CRD is seen, no once it is
    seen absent; until either, what the live release has (a new one: no)."""
    seen = observed.get(SERVICE_MONITORS_KEY)
    if seen is not None and failures.does_not_exist(seen):
        return False
    if seen is not None and isinstance(seen.at_provider("manifest", "metadata"), dict):
        return True
    live = observed.get(RELEASE_KEY)
    enabled = (
        live.get("spec", "forProvider", "values", "serviceMonitor", "enabled") if live else None
    )
    return enabled is True
