"""Cluster renderers, one module per source, each turning Inputs into the cluster and its access.

A renderer returns ClusterFacts: the composed resources plus what the serving stack and the status
need to know (is the cluster reachable, through which ProviderConfig, with which RWX StorageClass).
"""

from collections.abc import Callable

from function.clusters import aks, eks, existing, gke, nebius, vultr
from function.clusters.facts import ClusterFacts
from function.inputs import Inputs
from function.output import Result

Renderer = Callable[[Inputs], ClusterFacts]

RENDERERS: dict[str, Renderer] = {
    "Existing": existing.render,
    "EKS": eks.render,
    "GKE": gke.render,
    "AKS": aks.render,
    "Nebius": nebius.render,
    "Vultr": vultr.render,
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


def render(inputs: Inputs) -> ClusterFacts:
    return RENDERERS.get(inputs.xr.spec.cluster.source, _not_built)(inputs)
