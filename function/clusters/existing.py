"""Source Existing: a cluster someone else runs, reached through the kubeconfig they gave us.

Nothing is provisioned. The ProviderConfigs are composed at once from the kubeconfig Secret in
modelplane-system (and the optional cloud identity), and the cache StorageClass is whatever the
admin named. ClusterReady waits for the cluster to answer through them: an Observe-only Object
reads its kube-system Namespace, which every cluster has. The function never reads the Secret
(its credentials stay out of every request); the provider's words on that Object say whether the
Secret is missing, its kubeconfig cannot be loaded or the API server refuses it. Nothing else
waits for the answer: the stack is composed through the ProviderConfigs as before.
"""

from function import failures, kube, names, providerconfigs
from function.clusters.base import OBSERVE_ONLY, PROVIDER_CONFIG_KEYS
from function.clusters.facts import ClusterFacts
from function.inputs import Inputs, ObservedResource
from function.models import Existing
from function.output import Desired
from function.providerconfigs import Identity, SecretKey

# The Observe-only Object whose answer says the cluster is reached.
ANSWER_KEY = "kube-system-namespace"
ANSWERED = "existing cluster answers through its kubeconfig"
KEPT = "existing cluster reached through its kubeconfig"
# What the provider's words point to (provider-kubernetes pkg/kube/client/client.go: errGetCreds
# wraps a Secret or key it cannot read; "failed to load kubeconfig" and errCreateRestConfig a key
# that holds no usable kubeconfig; the API server's own words a refused one), in that order.
HINTS = (
    (
        ("cannot get credentials",),
        "the Secret or its key is missing: create it, the kubeconfig under that key",
    ),
    (
        ("failed to load kubeconfig", "cannot create new rest config"),
        "the key holds no kubeconfig the provider can load",
    ),
    (
        ("unauthorized", "provide credentials", "forbidden"),
        "the API server refuses its credentials (or they may not read Namespaces)",
    ),
)
UNANSWERED = "check that the API server it names is reachable from the providers' pods"


def render(inputs: Inputs) -> ClusterFacts:
    existing = inputs.xr.spec.cluster.settings
    assert isinstance(existing, Existing)
    identity = None
    if existing.identity_secret_ref is not None:
        ref = existing.identity_secret_ref
        identity = Identity(type=ref.type, secret=SecretKey(ref.name, ref.key))
    name = names.provider_config_name(inputs.xr.name)
    kubeconfig = SecretKey(existing.secret_ref.name, existing.secret_ref.key)
    resources = providerconfigs.render(name, kubeconfig, identity)
    observed = inputs.observed.resources
    seen = observed.get(ANSWER_KEY)
    ready, reason, message = answer(seen, kubeconfig, was_ready(inputs))
    # Once the provider finds the ProviderConfigs, and for good once composed.
    if seen is not None or all(k in observed for k in PROVIDER_CONFIG_KEYS):
        resources[ANSWER_KEY] = Desired(answer_object(inputs.xr.name, name), ready=ready)
    return ClusterFacts(
        resources=resources,
        ready=ready,
        reason=reason,
        message=message,
        provider_config=name,
        storage_class=existing.cache.storage_class_name if existing.cache else None,
    )


def answer_object(xr: str, provider_config: str) -> dict:
    """An Observe-only Object of the kube-system Namespace, through the cluster's ProviderConfig."""
    manifest = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kube-system"}}
    return kube.manifest_object(xr, ANSWER_KEY, manifest, provider_config, policies=OBSERVE_ONLY)


def answer(
    seen: ObservedResource | None, kubeconfig: SecretKey, ready_before: bool
) -> tuple[bool, str, str]:
    """ClusterReady from the Object's answer: ready once the cluster answered (its Namespace
    found, or even said not to exist); while no answer is in, ready only if it answered before
    (a cluster a previous release composed stays ready while the Object is first read)."""
    where = f"Secret {kubeconfig.namespace}/{kubeconfig.name} key {kubeconfig.key}"
    synced = (seen.condition("Synced") or {}) if seen is not None else {}
    if seen is not None and (seen.ready or synced.get("status") == "True"):
        return True, "Available", ANSWERED
    if seen is not None and failures.does_not_exist(seen):
        return True, "Available", ANSWERED
    if synced.get("status") == "False":
        said = failures.words(synced.get("message")) or synced.get("reason") or "not synced"
        lowered = said.lower()
        hint = next((h for keys, h in HINTS if any(k in lowered for k in keys)), UNANSWERED)
        message = f"the cluster does not answer through the kubeconfig in {where}: {hint} ({said})"
        return False, "Unreachable", message
    if ready_before:
        return True, "Available", KEPT
    return (
        False,
        "Connecting",
        f"waiting for the cluster to answer through the kubeconfig in {where}",
    )


def was_ready(inputs: Inputs) -> bool:
    """Whether the cluster answered before: a Helm release installed through its ProviderConfigs
    is Ready (what a cluster a previous release composed has). The XR's own conditions are not
    read (fn.composite_of leaves them out)."""
    observed = inputs.observed.resources
    return any(k.startswith("release-") and observed[k].ready for k in observed)
