"""Deletion order and the deletion guard, as Crossplane v2 Usages.

- Within the stack, whatever a component comes `after` outlives it: the Gateway goes before its
  GatewayClass before the Envoy Gateway release, Certificates and Issuers before cert-manager,
  Queues before the KAI Scheduler. A component outlives what it `watches`: the Gateway goes
  before the watch on its Service, which waits for the cloud's load balancer to be gone.
- The cluster outlives the stack: its kubeconfig's writer (the anchor) is used by the two
  ClusterProviderConfigs every stack resource authenticates through, and each ProviderConfig is
  kept by its provider until every managed resource using it is gone (crossplane-runtime's
  providerconfig.Reconciler: "Blocking deletion while usages still exist", counting the
  ProviderConfigUsages each Object and Release records in Connect, before it ever holds a
  finalizer or creates anything). So the stack uninstalls (and its load balancer goes) while the
  API server is still there, with two Usages instead of one per stack component that comes after
  nothing. Without both ProviderConfigs composed, the anchor is used by those components
  directly, as before.
- While ModelReplicas, ModelRoutes or ModelCaches labelled modelplane.ai/cluster=<name> exist,
  a ClusterUsage keeps the InferenceCluster itself from being deleted, naming what still runs.

Every Usage names resources this same reconcile composes; replayDeletion resumes a blocked
deletion as soon as its user is gone.
"""

from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

from function import names
from function.caches import USAGES
from function.clusters.base import PROVIDER_CONFIG_KEYS, as_desired
from function.inputs import Inputs, ObservedResource
from function.output import Desired, Requirement
from function.serving.components import RESOURCE_KEYS, Component

USAGE_API = "protection.crossplane.io/v1beta1"
CLUSTER_LABEL = f"{names.GROUP}/cluster"
# Kinds that run on a cluster, by the requirement that asks for them.
CONSUMERS = {
    "model-replicas": "ModelReplica",
    "model-routes": "ModelRoute",
    "model-caches": "ModelCache",
}
GUARD = "deletion-guard"
_REASON_NAMES = 5


class Edge(NamedTuple):
    """of outlives by (resource keys); the Usage goes by named instead of of when given. A tuple:
    a composition makes one for each Usage, and a frozen dataclass cost twice as much to make."""

    of: str
    by: str
    named: str = ""


# A resource key, or (resource key, the key its Usages go by): an anchor that changes (GKE's
# access key, rotated) keeps its Usages, which then move to the new resource in place. A composed
# Usage that goes waits until its user is gone (crossplane v2.2.1
# internal/controller/protection/usage/reconciler.go), so one whose user lives on never goes.
Anchor = str | tuple[str, str]


def edges(
    components: Sequence[Component], desired: dict[str, Desired], anchors: tuple[Anchor, ...]
) -> list[Edge]:
    """The deletion order between composed resources, as of/by pairs of resource keys."""
    out = []
    roots = [(a, "") if isinstance(a, str) else a for a in anchors]
    # Every stack resource uses the ProviderConfigs, which their providers keep while it exists:
    # the anchor that outlives them outlives the whole stack.
    held = all(k in desired for k in PROVIDER_CONFIG_KEYS)
    if held:
        out += [
            Edge(of, config, named)
            for of, named in roots
            if of in desired
            for config in PROVIDER_CONFIG_KEYS
        ]
    for c in components:
        if c.resource_key not in desired:
            continue
        # A component that comes after nothing is kept by the ProviderConfigs it uses.
        ofs = [(RESOURCE_KEYS[d], "") for d in c.after] or ([] if held else roots)
        out += [Edge(of, c.resource_key, named) for of, named in ofs if of in desired]
        watched = [RESOURCE_KEYS[w] for w in c.watches]
        out += [Edge(c.resource_key, by) for by in watched if by in desired]
    return out


def render(edges_: list[Edge], desired: dict[str, Desired], xr: str) -> dict[str, Desired]:
    """A Usage for each edge, each kept in the cluster's group of USAGES by what it names (edge,
    both ends' apiVersion, kind and name) with its key: the same from one reconcile to the next,
    made once and shared."""
    group = USAGES.group(xr)
    out = {}
    for edge in edges_:
        of, by = desired[edge.of].body, desired[edge.by].body
        label = edge.named or edge.of
        named = (label, edge.of, edge.by, *_named(of), *_named(by))
        kept = group.items.get(named)
        if kept is None:
            body = _usage(xr, label, edge.by, _ref(of), _ref(by))
            kept = (f"usage-{label}-by-{edge.by}", Desired(body, ready=True, shared=True))
            group.add(named, kept)
        out[kept[0]] = kept[1]
    return out


def _named(body: dict) -> tuple[str, str, str]:
    return body["apiVersion"], body["kind"], body["metadata"]["name"]


def _usage(xr: str, label: str, user: str, of: dict, by: dict) -> dict:
    return {
        "apiVersion": USAGE_API,
        "kind": "Usage",
        "metadata": {
            "name": names.cloud_name(xr, "usage", label, user),
            "namespace": names.SYSTEM_NAMESPACE,
        },
        "spec": {
            "of": of,
            "by": by,
            "replayDeletion": True,
        },
    }


def _ref(body: dict) -> dict:
    api_version, kind, name = _named(body)
    return {"apiVersion": api_version, "kind": kind, "resourceRef": {"name": name}}


# --- the deletion guard ---------------------------------------------------------------------------


def consumer_schemas() -> dict[str, Requirement]:
    """Whether each consumer kind is installed (unknown kinds cannot be listed)."""
    return {f"{key}-kind": Requirement(names.API_VERSION, kind) for key, kind in CONSUMERS.items()}


def requirements(xr: str, schemas: Mapping[str, bool]) -> dict[str, Requirement]:
    """Every installed consumer kind carrying this cluster's label, in any namespace."""
    return {
        key: Requirement(names.API_VERSION, kind, labels={CLUSTER_LABEL: xr})
        for key, kind in CONSUMERS.items()
        if schemas.get(f"{key}-kind")
    }


def consumers(inputs: Inputs) -> dict[str, list[str]] | None:
    """kind -> namespace/name of what runs on this cluster; None until every answer is in."""
    found: dict[str, list[str]] = {}
    for key, kind in CONSUMERS.items():
        installed = inputs.schemas.get(f"{key}-kind")
        if installed is None or (installed and key not in inputs.required):
            return None
        if installed:
            found[kind] = sorted(_namespaced_name(i) for i in inputs.required[key])
    return found


def _namespaced_name(body: dict) -> str:
    meta = body.get("metadata") or {}
    return "/".join(p for p in (meta.get("namespace"), meta.get("name")) if p)


def guard(xr: str, running: dict[str, list[str]]) -> dict | None:
    """A reason-only ClusterUsage on the InferenceCluster while anything runs on it."""
    if not any(running.values()):
        return None
    parts = []
    for kind, items in sorted(running.items()):
        if not items:
            continue
        shown = ", ".join(items[:_REASON_NAMES])
        more = f" and {len(items) - _REASON_NAMES} more" if len(items) > _REASON_NAMES else ""
        parts.append(f"{len(items)} {kind}{'s' if len(items) > 1 else ''} ({shown}{more})")
    return {
        "apiVersion": USAGE_API,
        "kind": "ClusterUsage",
        "metadata": {"name": names.cloud_name(xr, "in-use")},
        "spec": {
            "of": {
                "apiVersion": names.API_VERSION,
                "kind": names.INFERENCE_CLUSTER,
                "resourceRef": {"name": xr},
            },
            "reason": "; ".join(parts) + " still run on this InferenceCluster; delete them first",
            "replayDeletion": True,
        },
    }


def compose(
    inputs: Inputs,
    anchors: tuple[Anchor, ...],
    outlives: tuple[tuple[str, str], ...],
    components: Sequence[Component],
    desired: dict[str, Desired],
) -> dict[str, Desired]:
    """Every Usage of this reconcile, and the deletion guard."""
    order = edges(components, desired, anchors)
    order += [Edge(of, by) for of, by in outlives if of in desired and by in desired]
    out = render(order, desired, inputs.xr.name)
    running = consumers(inputs)
    if running is None:
        # Not every answer is in: keep the guard as it is, whatever it is.
        seen = inputs.observed.resources.get(GUARD)
        if seen is not None:
            out[GUARD] = Desired(as_desired(seen.body), ready=True)
    else:
        body = guard(inputs.xr.name, running)
        if body is not None:
            out[GUARD] = Desired(body, ready=True)
    return out


# Why a Usage that goes is first rewritten without its user (RETIRING), and what it names stays
# until it is gone. Both read in crossplane v2.2.1:
# - A composed Usage that is deleted waits for its user to be deleted first
#   (internal/controller/protection/usage/reconciler.go): one whose user lives on stays, deleting.
# - The Usage webhook refuses to delete what any Usage names, deleting ones included
#   (internal/protection/usage/finder.go FindUsageOf lists them all).
# - A refused deletion of a resource the function no longer returns fails the whole composition
#   before anything is applied (internal/controller/apiextensions/composite/
#   composition_functions.go: GarbageCollectComposedResources, then the apply): the XR would
#   apply nothing again for as long as such a Usage stays.
# A Usage without `by` is deleted at once, so the one that goes is rewritten with a reason instead
# of its user (it still guards what it names meanwhile), and left out once that is observed and
# every Usage that replaces it exists; what it names is returned as it runs until it is gone.
RETIRING = "modelplane.ai: retiring, {kind} {name} no longer needs it"
_USAGE_KINDS = ("Usage", "ClusterUsage")


def retiring(
    observed: Mapping[str, ObservedResource],
    desired: Mapping[str, Desired],
    usage_keys: Iterable[str],
) -> dict[str, Desired]:
    """The Usages that go while their user stays (rewritten without it), and the resources that
    go while a Usage still names them (as they run): neither is deleted before its time."""
    gone = [key for key in observed if key not in desired]
    if not gone:
        return {}
    present = {_named(d.body) for d in desired.values()}
    replaced = all(key in observed for key in usage_keys)
    out: dict[str, Desired] = {}
    guarded: set[tuple] = set()
    for key, res in observed.items():
        if res.get("kind") not in _USAGE_KINDS:
            continue
        of = _end(res, "of")
        if of is not None:
            guarded.add(of)
        if key in desired:
            continue
        by = _end(res, "by")
        if by is None and (replaced or res.get("spec", "reason") is None):
            continue  # without a user: deleted at once
        if by is not None and by not in present:
            continue  # its user goes too: Crossplane deletes the Usage once the user is gone
        out[key] = Desired(_without_user(res, by), ready=True)
    for key in gone:
        res = observed[key]
        kind = res.get("kind")
        if key in out or kind in _USAGE_KINDS:
            continue
        if (res.get("apiVersion"), kind, res.get("metadata", "name")) in guarded:
            out[key] = Desired(as_desired(res.body), ready=res.ready)
    return out


def _end(res: ObservedResource, end: str) -> tuple | None:
    """(apiVersion, kind, name) of what an observed Usage names as of or by."""
    ref = res.get("spec", end)
    if not isinstance(ref, dict):
        return None
    name = (ref.get("resourceRef") or {}).get("name")
    return (ref.get("apiVersion"), ref.get("kind"), name) if name else None


def _without_user(res: ObservedResource, by: tuple | None) -> dict:
    """An observed Usage with a reason instead of its user (as it is, if it has none)."""
    body = as_desired(res.body)
    if by is None:
        return body
    spec = {k: v for k, v in body.get("spec", {}).items() if k != "by"}
    spec["reason"] = RETIRING.format(kind=by[1], name=by[2])
    return {**body, "spec": spec}
