"""Names, namespaces and API versions shared by every renderer."""

from crossplane.function.resource import child_name

SYSTEM_NAMESPACE = "modelplane-system"

GROUP = "modelplane.ai"
API_VERSION = f"{GROUP}/v1alpha1"
INFERENCE_CLASS = "InferenceClass"
INFERENCE_CLUSTER = "InferenceCluster"

KUBERNETES_PROVIDER_CONFIG_API = "kubernetes.m.crossplane.io/v1alpha1"
HELM_PROVIDER_CONFIG_API = "helm.m.crossplane.io/v1beta1"
HELM_RELEASE_API = "helm.m.crossplane.io/v1beta1"
CLUSTER_PROVIDER_CONFIG = "ClusterProviderConfig"

# The Composition may hand over every InferenceClass up front (bootstrap requirement); when it does
# not, the function asks for each class by name.
ALL_CLASSES_REQUIREMENT = "inference-classes"


def class_requirement(class_name: str) -> str:
    return f"class-{class_name}"


def provider_config_name(cluster: str) -> str:
    """The name the kubernetes and helm ClusterProviderConfigs of a workload cluster share."""
    return child_name(cluster, "cluster")
