"""Looking at an Existing cluster, read only, through provider-kubernetes.

One object by name is read by an Observe-only Object; every object of a kind carrying some labels,
in any namespace, by an ObservedObjectCollection: provider-kubernetes makes one Observe-only
Object per match, labelled with the collection's name (v1.3.1 internal/controller/namespaced/
observedobjectcollection), and Crossplane hands those over as a required resource.

Crossplane hands over required resources from its informer cache (v2.2 core.go,
NewExistingRequiredResourcesFetcher), and the collection turns Ready just after making its
members: a reconcile woken by that may not see them yet. So "none" counts only when a second
reconcile, after the detector was marked with the first answer (LOOKED), finds none again. Once
something was adopted, the detector is marked so too: a passing error or a listing not read yet
then keeps the adoption instead of making the stack wait again.
"""

from collections.abc import Iterable, Mapping
from typing import Protocol

from function import failures, kube, names
from function.caches import BODIES
from function.clusters.base import as_desired
from function.inputs import ObservedResource
from function.output import Desired, Requirement

LOOKED = "modelplane.ai/looked"
NONE_FOUND = "none-found"
ADOPTED = "adopted"
COLLECTION_KIND = "ObservedObjectCollection"
# The label provider-kubernetes v1.3.1 puts on each Object of a collection, valued its name.
MEMBER_LABEL = "kubernetes.crossplane.io/owned-by-collection"


class Sought(Protocol):
    """What to look for: the object of a kind by name, or (labels) every one carrying them."""

    api_version: str
    kind: str
    name: str
    labels: tuple[tuple[str, str], ...]


def detector(
    xr: str, key: str, sought: Sought, provider_config: str, looked: str, namespace: str = ""
) -> Desired:
    """The detector under the resource key, marked with what it found (LOOKED); a collection
    looks in namespace only, when given. Ready whatever it finds: it is asked, not waited for.
    Made once per cluster and answer (caches.BODIES), as every reconcile of an Existing cluster
    composes it."""
    made_of = ("detector", key, looked, provider_config, namespace)
    body = BODIES.item(
        xr, made_of, lambda: _make(xr, key, sought, provider_config, looked, namespace)
    )
    return Desired(body, ready=True, shared=True)


def _make(
    xr: str, key: str, sought: Sought, provider_config: str, looked: str, namespace: str
) -> dict:
    if sought.labels:
        body = collection(xr, key, sought, provider_config, namespace)
    else:
        manifest = {
            "apiVersion": sought.api_version,
            "kind": sought.kind,
            "metadata": {"name": sought.name},
        }
        body = kube.manifest_object(xr, key, manifest, provider_config, policies=["Observe"])
    if looked:
        body["metadata"]["annotations"] = {
            **body["metadata"].get("annotations", {}),
            LOOKED: looked,
        }
    return body


def collection(
    xr: str, key: str, sought: Sought, provider_config: str, namespace: str = ""
) -> dict:
    """An ObservedObjectCollection of every object of the kind carrying the labels, cluster-wide
    or in namespace."""
    where = {"namespace": namespace} if namespace else {}
    return {
        "apiVersion": names.OBJECT_API,
        "kind": COLLECTION_KIND,
        "metadata": {"name": names.child_name(xr, key), "namespace": names.SYSTEM_NAMESPACE},
        "spec": {
            "providerConfigRef": {"kind": names.CLUSTER_PROVIDER_CONFIG, "name": provider_config},
            "observeObjects": {
                "apiVersion": sought.api_version,
                "kind": sought.kind,
                **where,
                "selector": {"matchLabels": dict(sought.labels)},
            },
        },
    }


def found_key(key: str) -> str:
    """Where Crossplane hands over the members of the collection composed under key."""
    return f"{key}-found"


def members_of(xr: str, key: str) -> Requirement:
    """The Objects the collection composed under key made, one per object found."""
    return Requirement(
        names.OBJECT_API,
        "Object",
        namespace=names.SYSTEM_NAMESPACE,
        labels={MEMBER_LABEL: names.child_name(xr, key)},
    )


def listed(
    seen: ObservedResource | None, members: list[dict] | None, looking: str
) -> tuple[list[dict] | None, str]:
    """What a collection found, each object as the API server has it, once it has listed and
    each member been read; else None and why not yet (looking, and the provider's words)."""
    if seen is None or members is None:
        return None, looking
    synced = seen.condition("Synced") or {}
    if synced.get("status") == "False":
        return None, f"{looking}: {failures.words(synced.get('message'))}"
    if not seen.ready:  # not listed yet
        return None, looking
    found = []
    for member in members:
        observed = ObservedResource(member)
        manifest = observed.at_provider("manifest")
        if isinstance(manifest, dict) and isinstance(manifest.get("metadata"), dict):
            found.append(manifest)
            continue
        if not failures.does_not_exist(observed):
            return None, looking  # not read yet (one gone is dropped at the next listing)
    return found, ""


def marked_adopted(seen: ObservedResource | None) -> bool:
    """Whether the detector found one to adopt at an earlier reconcile (LOOKED)."""
    return seen is not None and seen.get("metadata", "annotations", LOOKED) == ADOPTED


def looked_before(seen: ObservedResource | None) -> bool:
    """Whether the collection found none at the reconcile before (LOOKED)."""
    return (seen.get("metadata", "annotations", LOOKED) if seen else None) == NONE_FOUND


def kept(keys: Iterable[str], observed: Mapping[str, ObservedResource]) -> dict[str, Desired]:
    """The detectors composed under these keys that are observed, kept exactly as they are."""
    return {k: Desired(as_desired(observed[k].body), ready=True) for k in keys if k in observed}
