"""Source Existing: a cluster someone else runs, reached through the kubeconfig they gave us.

Nothing is provisioned. The ProviderConfigs are composed at once from the kubeconfig Secret in
modelplane-system (and the optional cloud identity), and the cache StorageClass is whatever the
admin named.
"""

from function import names, providerconfigs
from function.clusters.facts import ClusterFacts
from function.inputs import Inputs
from function.models import Existing
from function.providerconfigs import Identity, SecretKey


def render(inputs: Inputs) -> ClusterFacts:
    existing = inputs.xr.spec.cluster.settings
    assert isinstance(existing, Existing)
    identity = None
    if existing.identity_secret_ref is not None:
        ref = existing.identity_secret_ref
        identity = Identity(type=ref.type, secret=SecretKey(ref.name, ref.key))
    name = names.provider_config_name(inputs.xr.name)
    resources = providerconfigs.render(
        name, SecretKey(existing.secret_ref.name, existing.secret_ref.key), identity
    )
    return ClusterFacts(
        resources=resources,
        ready=True,
        reason="Available",
        message="existing cluster reached through its kubeconfig",
        provider_config=name,
        storage_class=existing.cache.storage_class_name if existing.cache else None,
    )
