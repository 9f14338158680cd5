"""The one table of what the function installs: Helm charts and the provider versions it targets.

Bump a version here and nowhere else; the golden files show what the bump changes. Each version is
the exact string the chart's repository publishes (provider-helm compares it with the installed
chart's), and tests/test_charts.py renders every chart from ../shared/charts at that version.
"""

from dataclasses import dataclass
from datetime import date, timedelta


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

# Charts whose crds/ a Job on the workload cluster applies before the release moves
# (function/serving/crd_job.py), by release key: each file of crds/ by its path inside the chart
# archive, the sha256 of its bytes as published (tests/unit/test_crd_job.py reads them in
# ../shared/charts) and the CRDs it holds. Bump with the chart: a new version's files, sums, names.
GATEWAY_API_CRDS_FILE = "gateway-helm/charts/crds/crds/gatewayapi-crds.yaml"
CHART_CRD_FILES: dict[str, tuple[tuple[str, str, tuple[str, ...]], ...]] = {
    # gateway-helm v1.8.3: Gateway API v1.5.1 (experimental channel) and Envoy Gateway's own, in
    # the local subchart charts/crds (its templates/ hold the safe-upgrade policy, not CRDs).
    "envoy-gateway": (
        (
            GATEWAY_API_CRDS_FILE,
            "0626709ca94028462d7e4d727f50d73dc2ba9b24d53f17a45938d9f4eb727ff1",
            (
                *(
                    f"{plural}.gateway.networking.k8s.io"
                    for plural in (
                        "backendtlspolicies",
                        "gatewayclasses",
                        "gateways",
                        "grpcroutes",
                        "httproutes",
                        "listenersets",
                        "referencegrants",
                        "tcproutes",
                        "tlsroutes",
                        "udproutes",
                    )
                ),
                "xbackendtrafficpolicies.gateway.networking.x-k8s.io",
                "xmeshes.gateway.networking.x-k8s.io",
            ),
        ),
        *(
            (
                f"gateway-helm/charts/crds/crds/generated/gateway.envoyproxy.io_{plural}.yaml",
                sha256,
                (f"{plural}.gateway.envoyproxy.io",),
            )
            for plural, sha256 in (
                ("backends", "456cbad5d7efd20e4e1bcbe00caea177f711b66c28e96dd75f8507c53ab3eea6"),
                (
                    "backendtrafficpolicies",
                    "3b285efcb7d8f9c292f386528d83a61bd719d992a67f9c48a848353f10655e66",
                ),
                (
                    "clienttrafficpolicies",
                    "5322c533fd33282cce6eba9405331477872a06fafebaac20026bb6d08ff4a291",
                ),
                (
                    "envoyextensionpolicies",
                    "8370ddaf25e0cdcf248aba4672c3aaad071322bc55d0f543a4f0c6dd7a6e5254",
                ),
                (
                    "envoypatchpolicies",
                    "8e9110c32b414ea5c43a85e272dc2dee8917ed0bfa36a9a2b72fde1f3fba6083",
                ),
                (
                    "envoyproxies",
                    "a1efb63b00659fe8dae385236deb20a29619b5537a9552b60940dc6425924a2e",
                ),
                (
                    "httproutefilters",
                    "ebba11783da910e78829941deeb3c6701ba95b4cddb9f595382c71793546efca",
                ),
                (
                    "securitypolicies",
                    "f156487aeb871a5f946d10153de0676b1e69a2b42be7a1259e2619a75adc4951",
                ),
            )
        ),
    ),
    "leader-worker-set": (
        (
            "lws/crds/leaderworkerset.x-k8s.io_leaderworkersets.yaml",
            "988424a32228c3b494c1a11bb2856c6425c435fc1dbf47d95dc940d2eada15f8",
            ("leaderworkersets.leaderworkerset.x-k8s.io",),
        ),
    ),
    # Compute domains are off (components.dra_driver_values), but the chart's CRDs still move
    # with it: a live cluster's are 25.12.0's until the Job applies 0.4.1's.
    "nvidia-dra-driver": (
        (
            "dra-driver-nvidia-gpu/crds/resource.nvidia.com_computedomaincliques.yaml",
            "bc822436bb7f516c51a6adb8ef503a8fda8b7e151aff723897a0fb3072a20c1f",
            ("computedomaincliques.resource.nvidia.com",),
        ),
        (
            "dra-driver-nvidia-gpu/crds/resource.nvidia.com_computedomains.yaml",
            "653b477ad084f6cfed479ecdcc1149f3c14499bcac2ae1d2acbb82ccf7419f89",
            ("computedomains.resource.nvidia.com",),
        ),
    ),
}

# The OCI manifest digest of each chart CHART_CRD_FILES names, at its version: the Job fetches
# the chart by it when pinned. None: not verifiable from where this was written (the published
# archives' bytes cannot be rebuilt: ../shared/charts/SOURCES.md), so the Job fetches by tag and
# checks every file it applies against its sha256 above; `make release-pins` (before a release is
# tagged) fails while any is None.
CHART_DIGESTS: dict[str, str | None] = {
    "envoy-gateway": None,
    "leader-worker-set": None,
    "nvidia-dra-driver": None,
}

# Upstream distroless Python, for the programs the function runs on a workload cluster
# (function/serving/programs: the CRD Job's apply step, the GPU health reporter), standard library
# only. Not registry.k8s.io/kubectl: it is built on distroless static (kubernetes build/common.sh,
# KUBECTL_BASE_IMAGE defaults to KUBE_GORUNNER_IMAGE gcr.io/distroless/static-debian13), so it has
# no shell and no jq to script with (kyverno#13899; openstudio-server-helm#97 on v1.34.9).
# GoogleContainerTools/distroless python3: Python 3.13 on Debian 13, `/usr/bin/python3`, no shell
# (python3/testdata/python3.yaml), `nonroot` (uid 65532; the pods run as 65534 anyway).
PYTHON = "gcr.io/distroless/python3-debian13:nonroot"

# Images the function runs itself (not through a chart), and a chart's image it pins.
IMAGES: dict[str, str] = {
    "modelexpress-server": "nvcr.io/nvidia/ai-dynamo/modelexpress-server:0.5.0",
    # AKS InfiniBand: loads nvidia-peermem (Azure/aks-rdma-infiniband, nvidia-peermem-reloader).
    "nvidia-peermem-reloader": "mcr.microsoft.com/mirror/docker/library/ubuntu:24.04",
    # Every GPU pool's probe (function/serving/gpus.py): nvidia-smi comes from the driver through
    # the DRA claim (CDI), so any image with bash will do; MCR's mirror has no pull rate limit.
    "gpu-probe": "mcr.microsoft.com/mirror/docker/library/ubuntu:24.04",
    # The GPU health reporter (function/serving/gpu_health.py): PYTHON above.
    "gpu-health-reporter": PYTHON,
    # The DCGM exporter (CHARTS["dcgm-exporter"]): the chart's own image, pinned here by tag (the
    # chart takes image.digest too; the digest was not read: nvcr.io was not reachable).
    "dcgm-exporter": "nvcr.io/nvidia/k8s/dcgm-exporter:4.6.0-4.8.3-distroless",
    # The CRD Job (function/serving/crd_job.py): oras fetches the chart (alpine-based: oras
    # Dockerfile at v1.2.3, alpine 3.21.3; runs as any user), Python (PYTHON above) applies it.
    "oras": "ghcr.io/oras-project/oras:v1.2.3",
    "python": PYTHON,
}

# Each image's digest, appended to IMAGES' reference when pinned; None: not verifiable from where
# this was written, to be filled (`crane digest <image>`) before a release: `make release-pins`
# fails while any is None.
IMAGE_DIGESTS: dict[str, str | None] = {"oras": None, "python": None}


def image(key: str) -> str:
    """IMAGES[key], by digest when pinned."""
    digest = IMAGE_DIGESTS.get(key)
    return f"{IMAGES[key]}@{digest}" if digest else IMAGES[key]


def unpinned() -> list[str]:
    """What must be pinned by digest before a release (CHART_DIGESTS, IMAGE_DIGESTS)."""
    return [f"chart {k}" for k, d in CHART_DIGESTS.items() if d is None] + [
        f"image {k}" for k, d in IMAGE_DIGESTS.items() if d is None
    ]


# Support windows: how long upstream fixes each pin of CHARTS and IMAGES, keyed as unpinned()
# names them ("chart <key>", "image <key>"). tests/unit/test_support_windows.py fails BUMP_NOTICE
# before a pin's end of life, when its version is not the one an entry was read for (a bump reads
# the window again), and when a pin has no entry. docs/stack.md, "Support windows", lists them.
BUMP_NOTICE = timedelta(days=60)
# The longest an Overdue may run from the day it was written.
OVERDUE_AT_MOST = timedelta(days=120)


@dataclass(frozen=True)
class Overdue:
    """A pin kept although it is past, or within BUMP_NOTICE of, its end of life: why, written
    when, and the date from which the test counts instead of the end of life (it fails
    BUMP_NOTICE before it), at most OVERDUE_AT_MOST after `on`."""

    reason: str
    on: date
    until: date


@dataclass(frozen=True)
class Support:
    """A pin's version as read, the end-of-life date its project publishes for it (None: none
    published), where it is published (or where we looked), and an Overdue when it is kept past."""

    version: str
    eol: date | None
    source: str
    overdue: Overdue | None = None


_NO_BUMP_MATERIAL = "the bump needs the new chart in ../shared/charts, which does not hold it yet"

SUPPORT: dict[str, Support] = {
    # "All cert-manager releases are supported at least until the release of a second subsequent
    # version": 1.20 (2026-03-10) until 1.22's release, planned "~Nov 2026" (cert-manager.io/docs/
    # releases, "Currently supported releases" and "Upcoming releases"; not a firm date), and not
    # out by 2026-12-05 (docs/development.md): the end of November is taken.
    "chart cert-manager": Support(
        "v1.20.2",
        date(2026, 11, 30),
        "cert-manager.io/docs/releases (End of Life: release of 1.22, planned ~Nov 2026)",
        Overdue(
            "1.22 is due any day and v1.20.3 fixes GHSA-8rvj-mm4h-c258; bump to v1.20.4 now and "
            f"to 1.21 before 1.22 ships: {_NO_BUMP_MATERIAL}",
            on=date(2026, 12, 7),
            until=date(2027, 4, 1),
        ),
    ),
    # None: cert-manager.io/docs/releases covers cert-manager alone, and trust-manager's
    # RELEASE.md says its schedule is ad hoc before 1.0, with no support window.
    "chart trust-manager": Support(
        "v0.24.0", None, "none published (trust-manager RELEASE.md: ad hoc)"
    ),
    # The Compatibility Matrix's End of Life column (envoyproxy/gateway site/content/en/news/
    # releases/matrix.md, read at main 2026-08-21): v1.8 2026/11/08 (Kubernetes 1.32 to 1.35);
    # v1.9 2027/02/14 (1.33 to 1.36).
    "chart envoy-gateway": Support(
        "v1.8.3",
        date(2026, 11, 8),
        "gateway.envoyproxy.io/news/releases/matrix (v1.8: 2026/11/08)",
        Overdue(
            "past its end of life: no more CVE fixes for Envoy Gateway v1.8 or the Envoy it "
            "ships, and 1.36 clusters are outside its matrix; bump to v1.9.x (its CRD files and "
            f"sha256s in CHART_CRD_FILES move with it): {_NO_BUMP_MATERIAL}",
            on=date(2026, 12, 7),
            until=date(2027, 4, 1),
        ),
    ),
    # envoyproxy/ai-gateway RELEASES.md: "The end of life for the version will be 2 releases after
    # the release of the version" (v1.1 until v1.3 is released; v1.1.0 is the newest, 2026-12-05):
    # no date.
    "chart ai-gateway-crds": Support("v1.1.0", None, "envoyproxy/ai-gateway RELEASES.md (no date)"),
    "chart ai-gateway": Support("v1.1.0", None, "envoyproxy/ai-gateway RELEASES.md (no date)"),
    # kubernetes-sigs.github.io/node-feature-discovery reference/versions: the two newest minors
    # are supported, X-1 until X+1 is released (0.18 until 0.20; v0.19.0 is out): no date.
    "chart node-feature-discovery": Support(
        "0.18.3", None, "NFD docs, reference/versions (two newest minors; no date)"
    ),
    # None: kubernetes-sigs/dra-driver-nvidia-gpu's docs (install, upgrade, feature lifecycle)
    # state no support window for a release.
    "chart nvidia-dra-driver": Support("0.4.1", None, "none published (its docs)"),
    # None: kubernetes-sigs/lws states no support window (README, site docs, install guide).
    "chart leader-worker-set": Support("v0.8.0", None, "none published (repository, site docs)"),
    # None: a pre-release; ai-dynamo/grove's README and docs state no support window.
    "chart grove": Support("v0.1.0-alpha.11", None, "none published (pre-release)"),
    # kai-scheduler/KAI-Scheduler SUPPORT.md: even minors are LTS, "supported publicly for 1 Year
    # from their release date"; v0.16 LTS, released Jun 2026, End of Support Jun 2027 (a month
    # only: its first day is taken).
    "chart kai-scheduler": Support(
        "v0.16.8", date(2027, 6, 1), "KAI-Scheduler SUPPORT.md (v0.16 LTS: Jun 2027)"
    ),
    # None: NVIDIA/dcgm-exporter RELEASE.md: "We do not maintain multiple version branches"; no
    # end of support is published for a release (chart or image).
    "chart dcgm-exporter": Support(
        "4.8.3", None, "none published (NVIDIA/dcgm-exporter RELEASE.md)"
    ),
    # None: ai-dynamo/modelexpress (README, docs/COMPATIBILITY.md) states no support window.
    "image modelexpress-server": Support("0.5.0", None, "none published (ai-dynamo/modelexpress)"),
    # Ubuntu 24.04 LTS: End of Standard Support Apr 2029 (ubuntu.com/about/release-cycle; a month
    # only: its first day is taken). MCR mirrors Docker's official image of it.
    "image nvidia-peermem-reloader": Support(
        "24.04", date(2029, 4, 1), "ubuntu.com/about/release-cycle (24.04 LTS: Apr 2029)"
    ),
    "image gpu-probe": Support(
        "24.04", date(2029, 4, 1), "ubuntu.com/about/release-cycle (24.04 LTS: Apr 2029)"
    ),
    # Debian 13 (trixie), released 2025-08-09: security support for about three years
    # (wiki.debian.org/DebianReleases), then LTS; Python 3.13's end of life is 2029-10
    # (devguide.python.org/versions). The earlier taken, a month only: its first day.
    "image gpu-health-reporter": Support(
        "nonroot", date(2028, 8, 1), "wiki.debian.org/DebianReleases (13: about 2028-08)"
    ),
    "image python": Support(
        "nonroot", date(2028, 8, 1), "wiki.debian.org/DebianReleases (13: about 2028-08)"
    ),
    "image dcgm-exporter": Support(
        "4.6.0-4.8.3-distroless", None, "none published (NVIDIA/dcgm-exporter RELEASE.md)"
    ),
    # None: oras-project/oras states no support window (README: release and rolling tags only).
    "image oras": Support("v1.2.3", None, "none published (oras-project/oras README)"),
}


def pinned_version(pin: str) -> str:
    """The version a SUPPORT key pins now: the chart's version, or the image's tag."""
    kind, key = pin.split(" ", 1)
    if kind == "chart":
        return CHARTS[key].version
    return IMAGES[key].rsplit(":", 1)[1]


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
