"""The one table of what the function installs: Helm charts and the provider versions it targets.

Bump a version here and nowhere else; the golden files show what the bump changes. Each version is
the exact string the chart's repository publishes (provider-helm compares it with the installed
chart's), and tests/test_charts.py renders every chart from ../shared/charts at that version.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Chart:
    name: str
    repository: str
    version: str
    namespace: str


# The serving stack, installed on every cluster, by release key (release mp-<key>).
CHARTS: dict[str, Chart] = {
    "cert-manager": Chart(
        name="cert-manager",
        repository="https://charts.jetstack.io",
        version="v1.20.2",
        namespace="cert-manager",
    ),
    # v0.24.0: the Bundle CRD the gateway's CA is published through is validated at that version.
    "trust-manager": Chart(
        name="trust-manager",
        repository="https://charts.jetstack.io",
        version="v0.24.0",
        namespace="cert-manager",
    ),
    # v1.8 or newer: InferencePool backends through the AI Gateway extension.
    "envoy-gateway": Chart(
        name="gateway-helm",
        repository="oci://docker.io/envoyproxy",
        version="v1.8.3",
        namespace="envoy-gateway-system",
    ),
    "ai-gateway-crds": Chart(
        name="ai-gateway-crds-helm",
        repository="oci://docker.io/envoyproxy",
        version="v1.1.0",
        namespace="envoy-ai-gateway-system",
    ),
    "ai-gateway": Chart(
        name="ai-gateway-helm",
        repository="oci://docker.io/envoyproxy",
        version="v1.1.0",
        namespace="envoy-ai-gateway-system",
    ),
    "node-feature-discovery": Chart(
        name="node-feature-discovery",
        repository="https://kubernetes-sigs.github.io/node-feature-discovery/charts",
        version="0.18.3",
        namespace="node-feature-discovery",
    ),
    # The DRA driver's maintained line (kubernetes-sigs/dra-driver-nvidia-gpu, moved from NVIDIA's
    # nvidia-dra-driver-gpu, whose last release is 25.12.0). The release key and its name stay:
    # live clusters' release is upgraded to it in place (components.dra_driver_values).
    "nvidia-dra-driver": Chart(
        name="dra-driver-nvidia-gpu",
        repository="oci://registry.k8s.io/dra-driver-nvidia/charts",
        version="0.4.1",
        namespace="nvidia-dra-driver",
    ),
    # Standard stack: multi-node engines as LeaderWorkerSets. The chart is published as v0.8.0
    # (hack/push-chart.sh at v0.8.0); provider-helm compares this string with the installed chart's
    # version, so "0.8.0" would upgrade the release on every reconcile.
    "leader-worker-set": Chart(
        name="lws",
        repository="oci://registry.k8s.io/lws/charts",
        version="v0.8.0",
        namespace="lws-system",
    ),
    # Dynamo stack: Grove gang-schedules engines through the KAI Scheduler.
    "grove": Chart(
        name="grove-charts",
        repository="oci://ghcr.io/ai-dynamo/grove",
        version="v0.1.0-alpha.11",
        namespace="grove-system",
    ),
    "kai-scheduler": Chart(
        name="kai-scheduler",
        repository="oci://ghcr.io/kai-scheduler/kai-scheduler",
        version="v0.16.8",
        namespace="kai-scheduler",
    ),
    # GPU metrics (function/serving/gpu_metrics.py): 4.8.3 is the first to read
    # resource.k8s.io/v1 ResourceSlices, which kubernetesDRA needs on Kubernetes 1.34+. Its own
    # namespace: the chart names its counters ConfigMap and Role the same in every release.
    "dcgm-exporter": Chart(
        name="dcgm-exporter",
        repository="https://nvidia.github.io/dcgm-exporter/helm-charts",
        version="4.8.3",
        namespace="modelplane-gpu-metrics",
    ),
}

# Workload CRDs the function applies itself, by Go module: fetched at build time
# (hack/crds/fetch.sh, pinned with its checksum in hack/crds/go.mod and go.sum). The ModelExpress
# CRDs are the project's own (function/serving/modelexpress_crds.py), at
# IMAGES["modelexpress-server"]'s version.
WORKLOAD_CRDS: dict[str, str] = {
    "sigs.k8s.io/gateway-api-inference-extension": "v1.0.1",
    # The chart's tag (CHARTS["node-feature-discovery"]): its crds/, which CHART_CRDS applies.
    "sigs.k8s.io/node-feature-discovery": "v0.18.3",
}

# Charts whose crds/ the function applies itself, by release key: the file fetch.sh writes from
# the chart's own module (WORKLOAD_CRDS, at the chart's version). Helm installs crds/ once and never
# upgrades them; these move with each bump of the chart.
CHART_CRDS: dict[str, str] = {
    "node-feature-discovery": "nfd-api-crds.yaml",
}

# Images the function runs itself (not through a chart), and a chart's image it pins.
IMAGES: dict[str, str] = {
    "modelexpress-server": "nvcr.io/nvidia/ai-dynamo/modelexpress-server:0.5.0",
    # AKS InfiniBand: loads nvidia-peermem (Azure/aks-rdma-infiniband, nvidia-peermem-reloader).
    "nvidia-peermem-reloader": "mcr.microsoft.com/mirror/docker/library/ubuntu:24.04",
    # Every GPU pool's probe (function/serving/gpus.py): nvidia-smi comes from the driver through
    # the DRA claim (CDI), so any image with bash will do; MCR's mirror has no pull rate limit.
    "gpu-probe": "mcr.microsoft.com/mirror/docker/library/ubuntu:24.04",
    # The GPU health reporter (function/serving/gpu_health.py): upstream kubectl, with bash and jq
    # (kubernetes build/server-image/kubectl/Dockerfile, debian-base).
    "gpu-health-reporter": "registry.k8s.io/kubectl:v1.34.1",
    # The DCGM exporter (CHARTS["dcgm-exporter"]): the chart's own image, pinned here by tag (the
    # chart takes image.digest too; the digest was not read: nvcr.io was not reachable).
    "dcgm-exporter": "nvcr.io/nvidia/k8s/dcgm-exporter:4.6.0-4.8.3-distroless",
}


@dataclass(frozen=True)
class Image:
    repository: str
    image: str
    version: str


# What the AKS NicClusterPolicy runs, at the versions network-operator 26.4.0 (CLOUD_CHARTS) ships
# and was tested with (hack/release.yaml at v26.4.0: Mofed, RdmaSharedDevicePlugin).
NIC_CLUSTER_POLICY_IMAGES: dict[str, Image] = {
    "ofedDriver": Image("nvcr.io/nvidia/mellanox", "doca-driver", "doca3.4.0-26.04-0.8.6.0-0"),
    "rdmaSharedDevicePlugin": Image(
        "nvcr.io/nvidia/mellanox", "k8s-rdma-shared-dev-plugin", "network-operator-v26.4.0"
    ),
}

# What a cloud installs with its cluster (the cloud half), by release key.
CLOUD_CHARTS: dict[str, Chart] = {
    "cluster-autoscaler": Chart(
        name="cluster-autoscaler",
        repository="https://kubernetes.github.io/autoscaler",
        version="9.57.0",
        namespace="kube-system",
    ),
    # InfiniBand on AKS: the operator that runs the NicClusterPolicy (DOCA-OFED, RDMA plugin).
    "network-operator": Chart(
        name="network-operator",
        repository="https://helm.ngc.nvidia.com/nvidia",
        version="26.4.0",
        namespace="nvidia-network-operator",
    ),
    # The EFA DRA driver (DRANET): DeviceClass efa.networking.k8s.aws.
    "efa-dra-driver": Chart(
        name="aws-dranet",
        repository="https://aws.github.io/eks-charts",
        version="1.0.0",
        namespace="kube-system",
    ),
    # Nebius: RWX volumes served from directories on the shared file system every node mounts.
    "csi-mounted-fs-path": Chart(
        name="csi-mounted-fs-path",
        repository="oci://cr.eu-north1.nebius.cloud/mk8s/helm",
        version="0.1.6",
        namespace="kube-system",
    ),
}

# EKS node images and the managed add-ons every EKS cluster gets (versions: EKS's default for the
# cluster's Kubernetes version).
# The Gateway API bundle gateway-helm carries in charts/crds/crds/gatewayapi-crds.yaml (each CRD's
# gateway.networking.k8s.io/bundle-version and channel annotations; tests/test_charts.py reads
# them from the chart): on an Existing cluster, the only Gateway API CRDs someone else owns that
# Envoy Gateway's release may meet (function/serving/gateway_api.py). Moves with the chart.
GATEWAY_API_BUNDLE = ("v1.5.1", "experimental")

EKS_GPU_AMI = {"x86_64": "AL2023_x86_64_NVIDIA", "arm64": "AL2023_ARM_64_NVIDIA"}
EKS_SYSTEM_AMI = "AL2023_x86_64_STANDARD"
EKS_SYSTEM_INSTANCE_TYPE = "m6i.xlarge"
AKS_SYSTEM_VM_SIZE = "Standard_D4s_v5"
NEBIUS_SYSTEM_PLATFORM, NEBIUS_SYSTEM_PRESET = "cpu-d3", "4vcpu-16gb"
VULTR_SYSTEM_PLAN = "vc2-6c-16gb"
EKS_ADDONS = (
    "vpc-cni",
    "kube-proxy",
    "coredns",
    "eks-pod-identity-agent",
    "aws-efs-csi-driver",
    "eks-node-monitoring-agent",
)
# EKS add-ons whose version follows the cluster's Kubernetes minor, by minor: the "latest version
# for each Kubernetes version" tables of the EKS User Guide ("Manage kube-proxy",
# managing-kube-proxy, and "Manage CoreDNS", managing-coredns; read 2026-12-01 in the guide's
# docs.aws.amazon.com Markdown rendering, the newest copy with 1.36 rows). The function never moves
# an add-on back (CoreDNS's 1.33 row is lower than what earlier tables listed). vpc-cni (one
# recommended version for every minor), eks-pod-identity-agent and aws-efs-csi-driver (no table:
# the guide sends readers to describe-addon-versions) are not bound to a minor and keep the
# version EKS gave them. A minor missing here keeps the add-on's version, with a Warning.
EKS_ADDON_VERSIONS: dict[str, dict[str, str]] = {
    "kube-proxy": {
        "1.33": "v1.33.10-eksbuild.13",
        "1.34": "v1.34.6-eksbuild.13",
        "1.35": "v1.35.3-eksbuild.13",
        "1.36": "v1.36.0-eksbuild.14",
    },
    "coredns": {
        "1.33": "v1.12.4-eksbuild.18",
        "1.34": "v1.13.2-eksbuild.11",
        "1.35": "v1.14.3-eksbuild.3",
        "1.36": "v1.14.3-eksbuild.3",
    },
}
