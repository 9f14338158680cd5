"""Cluster renderers, one module per source, each turning Inputs into the cluster and its access.

A renderer returns ClusterFacts: the composed resources plus what the serving stack and the status
need to know (is the cluster reachable, through which ProviderConfig, with which RWX StorageClass).
"""

from collections.abc import Callable
from typing import Any

from function import names
from function.clusters import aks, eks, existing, gke, nebius, vultr
from function.clusters.base import CLOUD_PROVIDER_CONFIG, Cloud
from function.clusters.facts import ClusterFacts
from function.inputs import Inputs
from function.models import InferenceCluster
from function.output import Requirement, Result

Renderer = Callable[[Inputs], ClusterFacts]


def cloud(cluster: Callable[[Cloud, Any], Any]) -> Renderer:
    """A cloud's renderer: its cluster class over the shared Cloud of the XR's credentials."""

    def render(inputs: Inputs) -> ClusterFacts:
        settings = inputs.xr.spec.cluster.settings
        return cluster(Cloud(inputs, settings.credentials), settings).render()

    return render


RENDERERS: dict[str, Renderer] = {
    "Existing": existing.render,
    "EKS": cloud(eks.EKSCluster),
    "GKE": cloud(gke.GKECluster),
    "AKS": cloud(aks.AKSCluster),
    "Nebius": cloud(nebius.NebiusCluster),
    "Vultr": cloud(vultr.VultrCluster),
}


def _not_built(inputs: Inputs) -> ClusterFacts:
    source = inputs.xr.spec.cluster.source
    message = (
        f"spec.cluster.source {source} is not built by this function version yet; "
        "nothing is provisioned for it"
    )
    return ClusterFacts(
        results=[Result("Warning", message, reason="SourceNotBuilt")],
        reason="SourceNotBuilt",
        message=message,
        complete=False,
    )


# Sources whose renderer reads the cloud ProviderConfig the credentials name (GKE: the project
# for Workload Identity; Nebius: the project and its service-account Secret), by API group.
READS_PROVIDER_CONFIG = {"GKE": "gcp.m.upbound.io", "Nebius": "nebius.m.upbound.io"}


def requirements(xr: InferenceCluster) -> dict[str, Requirement]:
    """What a source's renderer needs Crossplane to hand over."""
    group = READS_PROVIDER_CONFIG.get(xr.spec.cluster.source)
    if group is None:
        return {}
    creds = xr.spec.cluster.settings.credentials
    namespace = names.SYSTEM_NAMESPACE if creds.type == "ProviderConfig" else None
    return {
        CLOUD_PROVIDER_CONFIG: Requirement(f"{group}/v1beta1", creds.type, creds.name, namespace)
    }


def render(inputs: Inputs) -> ClusterFacts:
    return RENDERERS.get(inputs.xr.spec.cluster.source, _not_built)(inputs)
