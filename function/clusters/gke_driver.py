"""The NVIDIA driver on GKE's GPU nodes under DRA: the COS installer DaemonSet, built here.

GKE's "Prepare GKE infrastructure for DRA workloads" turns automatic driver installation off
(`gpuDriverVersion: INSTALLATION_DISABLED`) and has the operator apply Google's COS installer
DaemonSet (GoogleCloudPlatform/container-engine-accelerators,
`nvidia-driver-installer/cos/daemonset-preloaded.yaml`, the default driver its kustomization names).
The function builds that DaemonSet from the facts Google publishes there; the reference manifest
stays in ../shared/charts/manifests/gke-nvidia-driver-installer-cos/ and a test compares image, host
paths, node affinity, tolerations and priority class with it. Kept equal in meaning and in bytes to
what earlier releases applied, so a new release rolls no installer pod on a live GPU node.
"""

NAME = "nvidia-driver-installer"
NAMESPACE = "kube-system"
# Where the installer puts the driver on the host; the DRA driver's nvidiaDriverRoot.
INSTALL_DIR = "/home/kubernetes/bin/nvidia"
# GKE preloads the installer image on COS GPU nodes (`imagePullPolicy: Never`), so it is always
# the driver build for the node's COS version ("preloaded" in the file's name).
INSTALLER_IMAGE = "cos-nvidia-installer:fixed"
# Partitions GPUs (MIG) as /etc/nvidia asks; a no-op without a partition config.
PARTITION_IMAGE = (
    "gcr.io/gke-release/nvidia-partition-gpu"
    "@sha256:de12f85ebfb4fb6c1893cd30c23aab662a72fa0448f97ef74fccb82d7522ef17"
)
PAUSE_IMAGE = (
    "gke.gcr.io/pause:3.8@sha256:880e63f94b145e46f1b1082bb71b85e21f16b99b180b9996407d61240ceb9830"
)
# The installer skips a node whose driver is already loaded (a restarted pod, a node GKE set up).
INSTALL_SCRIPT = """\
echo "Checking for existing GPU driver modules"
if lsmod | grep nvidia; then
  echo "GPU driver is already installed, the installed version may or may not be the driver version being tried to install, skipping installation"
  exit 0
else
  echo "No GPU driver module detected, installing now"
  /cos-gpu-installer install || exit 1
fi
"""  # noqa: E501 - the log line as operators already search for it

# Host paths by volume name: devices, the install dir and its Vulkan ICDs, the root (kernel
# headers and modules), COS tools and the partition config.
HOST_PATHS = {
    "dev": "/dev",
    "vulkan-icd-mount": f"{INSTALL_DIR}/vulkan/icd.d",
    "nvidia-install-dir-host": INSTALL_DIR,
    "root-mount": "/",
    "cos-tools": "/var/lib/cos-tools",
    "nvidia-config": "/etc/nvidia",
}
# GPU nodes only (GKE labels them with their accelerator), and none GKE already installs a driver
# on (gke-gpu-driver-version) nor confidential nodes (their driver comes another way).
NODE_MATCH = [
    {"key": "cloud.google.com/gke-accelerator", "operator": "Exists"},
    {"key": "cloud.google.com/gke-gpu-driver-version", "operator": "DoesNotExist"},
    {"key": "cloud.google.com/gke-confidential-nodes-instance-type", "operator": "DoesNotExist"},
]
LABEL = {"k8s-app": NAME}
CPU = {"requests": {"cpu": "150m"}}


def _node_match() -> list[dict]:
    return [dict(m) for m in NODE_MATCH]


def _mounts(*pairs: tuple[str, str]) -> list[dict]:
    return [{"name": name, "mountPath": path} for name, path in pairs]


def _env(**values: str) -> list[dict]:
    return [{"name": k, "value": v} for k, v in values.items()]


def installer() -> dict:
    """The init container that installs the driver into INSTALL_DIR."""
    return {
        "image": INSTALLER_IMAGE,
        "imagePullPolicy": "Never",
        "name": NAME,
        "resources": CPU,
        "securityContext": {"privileged": True},
        "env": _env(
            NVIDIA_INSTALL_DIR_HOST=INSTALL_DIR,
            NVIDIA_INSTALL_DIR_CONTAINER="/usr/local/nvidia",
            VULKAN_ICD_DIR_HOST=HOST_PATHS["vulkan-icd-mount"],
            VULKAN_ICD_DIR_CONTAINER="/etc/vulkan/icd.d",
            ROOT_MOUNT_DIR="/root",
            COS_TOOLS_DIR_HOST=HOST_PATHS["cos-tools"],
            COS_TOOLS_DIR_CONTAINER="/build/cos-tools",
        ),
        "volumeMounts": _mounts(
            ("nvidia-install-dir-host", "/usr/local/nvidia"),
            ("vulkan-icd-mount", "/etc/vulkan/icd.d"),
            ("dev", "/dev"),
            ("root-mount", "/root"),
            ("cos-tools", "/build/cos-tools"),
        ),
        "command": ["bash", "-c", INSTALL_SCRIPT],
    }


def partitioner() -> dict:
    """The init container that partitions GPUs once the driver is there."""
    return {
        "image": PARTITION_IMAGE,
        "name": "partition-gpus",
        "env": _env(LD_LIBRARY_PATH="/usr/local/nvidia/lib64"),
        "resources": CPU,
        "securityContext": {"privileged": True},
        "volumeMounts": _mounts(
            ("nvidia-install-dir-host", "/usr/local/nvidia"),
            ("dev", "/dev"),
            ("nvidia-config", "/etc/nvidia"),
        ),
    }


def daemonset() -> dict:
    """The installer DaemonSet: on every GPU node, tolerating every taint (GKE's GPU taint
    included), node-critical so it is never the pod evicted for room."""
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": dict(LABEL)},
        "spec": {
            "selector": {"matchLabels": dict(LABEL)},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {
                "metadata": {"labels": {"name": NAME, **LABEL}},
                "spec": {
                    "priorityClassName": "system-node-critical",
                    "affinity": {
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {
                                "nodeSelectorTerms": [
                                    {"matchExpressions": [dict(m) for m in NODE_MATCH]}
                                ]
                            }
                        }
                    },
                    "tolerations": [{"operator": "Exists"}],
                    "hostNetwork": True,
                    "hostPID": True,
                    "volumes": [
                        {"name": name, "hostPath": {"path": path}}
                        for name, path in HOST_PATHS.items()
                    ],
                    "initContainers": [installer(), partitioner()],
                    "containers": [{"image": PAUSE_IMAGE, "name": "pause"}],
                },
            },
        },
    }
