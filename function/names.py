"""Names, namespaces and API versions shared by every renderer."""

import hashlib
import re

from crossplane.function import resource

from function import caches

SYSTEM_NAMESPACE = "modelplane-system"

GROUP = "modelplane.ai"
API_VERSION = f"{GROUP}/v1alpha1"
INFERENCE_CLASS = "InferenceClass"
INFERENCE_CLUSTER = "InferenceCluster"
POOL_LABEL = f"{GROUP}/pool"
GPU_LABEL = f"{GROUP}/gpu"

KUBERNETES_PROVIDER_CONFIG_API = "kubernetes.m.crossplane.io/v1alpha1"
HELM_PROVIDER_CONFIG_API = "helm.m.crossplane.io/v1beta1"
HELM_RELEASE_API = "helm.m.crossplane.io/v1beta1"
OBJECT_API = "kubernetes.m.crossplane.io/v1alpha1"
CLUSTER_PROVIDER_CONFIG = "ClusterProviderConfig"
EXTERNAL_NAME = "crossplane.io/external-name"


def release_name(key: str) -> str:
    """The Helm release of a component on the workload cluster: mp-<key>, short, stable and
    collision-free (charts label their pods app.kubernetes.io/instance with it)."""
    return f"mp-{key}"


# The Composition may hand over every InferenceClass up front (bootstrap requirement); when it does
# not, the function asks for each class by name.
ALL_CLASSES_REQUIREMENT = "inference-classes"

_NOT_DNS = re.compile(r"[^a-z0-9-]+")
_HASH_LEN = 5


def child_name(cluster: str, *parts: str) -> str:
    """The SDK's child_name of cluster's parts (a hash of them on every call), kept: a reconcile
    names the same children again (caches.NAMES)."""
    return caches.name(cluster, ("child", cluster, *parts), _child_name)


def _child_name(_: str, *parts: str) -> str:
    return resource.child_name(*parts)


def class_requirement(class_name: str) -> str:
    return f"class-{class_name}"


def provider_config_name(cluster: str) -> str:
    """The name the kubernetes and helm ClusterProviderConfigs of a workload cluster share."""
    return child_name(cluster, "cluster")


def kubeconfig_secret(cluster: str) -> str:
    """The Secret in modelplane-system a provisioned cluster's kubeconfig is written to."""
    return child_name(cluster, "kubeconfig")


def cloud_name(
    *parts: str, limit: int = 63, letter_first: bool = False, cluster: str | None = None
) -> str:
    """A deterministic name any cloud accepts: lowercase letters, digits and dashes, at most limit.

    Like the SDK's child_name it always ends in a hash of the parts as given, so two parts that
    sanitise alike (H100_Pool, h100-pool) still get distinct names, and renaming is never needed
    when other pools come and go. Kept by its parts, with the names of the cluster it is of (the
    first part unless told, caches.NAMES).
    """
    owner = cluster if cluster is not None else parts[0]
    return caches.name(owner, (limit, letter_first, *parts), _cloud_name)


def _cloud_name(limit: int, letter_first: bool, *parts: str) -> str:
    raw = "-".join(parts)
    digest = hashlib.sha256(raw.encode()).hexdigest()[:_HASH_LEN]
    prefix = _NOT_DNS.sub("-", raw.lower()).strip("-")
    prefix = re.sub("-{2,}", "-", prefix)
    if letter_first and not prefix[:1].isalpha():
        prefix = f"mp-{prefix}".rstrip("-")
    prefix = prefix[: limit - _HASH_LEN - 1].rstrip("-")
    return f"{prefix}-{digest}" if prefix else f"mp-{digest}"
