"""A provider simulator for the real control plane: no provider controllers run, so this loop plays
them for the managed resources Crossplane composes.

Every `interval` seconds it lists, in one namespace, every namespaced managed-resource kind the API
server serves from the v2 providers' `.m.` groups (upjet kinds, provider-kubernetes Objects,
provider-helm Releases: the CRDs in the `managed` category), and for each resource asks the
provider model `tests.sim.providers.observe(body)` what its provider would report. It then does
what a provider does:

- patches the status subresource (conditions with their lastTransitionTime, atProvider);
- sets the `crossplane.io/external-name` annotation when the model names one;
- writes the connection Secret named by `spec.writeConnectionSecretToRef.name` in the resource's
  namespace, controlled by the resource (so the garbage collector removes it with the resource).

It writes only what changed, skips resources being deleted (no provider finalizers exist), and
never raises out of the loop: failures are collected in `errors`. Status fields the model reports
but the kind's CRD does not have are pruned by the API server; its warnings are collected in
`unknown_fields` per kind, which tells whether the model fits the real CRDs.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import hashlib
import json
import threading
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from tests.e2e.kube import ApiError, Kube, Ticker
from tests.sim import providers

EXTERNAL_NAME = "crossplane.io/external-name"
MANAGER = "provider-simulator"
CONNECTION_SECRET_TYPE = "connection.crossplane.io/v1alpha1"  # noqa: S105 - a Secret type


@dataclass(frozen=True, order=True)
class Kind:
    api_version: str
    kind: str

    def __str__(self) -> str:
        return f"{self.api_version}/{self.kind}"


def managed_kinds(crds: Iterable[dict]) -> list[Kind]:
    """The namespaced managed-resource kinds of v2 providers among crds (at their storage
    version): group with a `.m.` label, scope Namespaced, category `managed`."""
    kinds = set()
    for crd in crds:
        spec = crd.get("spec", {})
        group = spec.get("group", "")
        if (
            spec.get("scope") != "Namespaced"
            or ".m." not in group
            or "managed" not in (spec.get("names", {}).get("categories") or [])
        ):
            continue
        storage = [v["name"] for v in spec.get("versions", []) if v.get("storage")]
        if storage:
            kinds.add(Kind(f"{group}/{storage[0]}", spec["names"]["kind"]))
    return sorted(kinds)


def served_managed_kinds(kube: Kube) -> list[Kind]:
    return managed_kinds(kube.list("apiextensions.k8s.io/v1", "CustomResourceDefinition"))


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def desired_status(current: dict, reported: dict, timestamp: str) -> dict:
    """The status a provider writes: the reported one, each condition with a lastTransitionTime
    (kept from the current condition when type and status are unchanged)."""
    previous = {c.get("type"): c for c in current.get("conditions") or []}
    status = dict(reported)
    conditions = []
    for reported_condition in reported.get("conditions") or []:
        c = dict(reported_condition)
        old = previous.get(c.get("type"))
        if "lastTransitionTime" not in c:
            same = old is not None and old.get("status") == c.get("status")
            c["lastTransitionTime"] = old.get("lastTransitionTime") if same else timestamp
        conditions.append(c)
    if "conditions" in reported:
        status["conditions"] = conditions
    return status


def contains(current, wanted) -> bool:
    """Whether current already holds everything in wanted (dicts by key, conditions by type)."""
    if isinstance(wanted, dict):
        return isinstance(current, dict) and all(
            contains(current.get(k), v) for k, v in wanted.items()
        )
    if isinstance(wanted, list) and all(isinstance(w, dict) and "type" in w for w in wanted):
        if not isinstance(current, list):
            return False
        by_type = {c.get("type"): c for c in current if isinstance(c, dict)}
        return all(contains(by_type.get(w["type"]), w) for w in wanted)
    return current == wanted


def fingerprint(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


class Simulator:
    """Plays the providers of the managed resources in one namespace; see the module docstring."""

    def __init__(
        self,
        kube: Kube,
        namespace: str,
        kinds: Iterable[Kind] | None = None,
        *,
        observe: Callable[[dict], providers.Observation] = providers.observe,
        interval: float = 0.5,
        selector: str | None = None,
    ):
        self.kube = kube
        self.namespace = namespace
        # A label selector: only the resources it selects are played (those of some XRs).
        self.selector = selector
        self.kinds = list(kinds) if kinds is not None else None
        self.observe = observe
        self.errors: list[str] = []
        self.unknown_fields: dict[str, set[str]] = defaultdict(set)
        self.writes: Counter[str] = Counter()  # "status", "external-name", "secret"
        self.ticks = 0
        self._written: dict[str, tuple[str, int]] = {}  # uid -> (observation, generation)
        self._secrets: dict[tuple[str, str], str] = {}
        self._ticker = Ticker("provider-simulator", self.tick, interval, self.kube.close)
        self._tick_lock = threading.Lock()

    # --- the loop ---------------------------------------------------------------------------------

    def __enter__(self) -> Simulator:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        if self.kinds is None:
            self.kinds = served_managed_kinds(self.kube)
        self._ticker.start()

    def stop(self) -> None:
        self._ticker.stop()

    def tick(self) -> int:
        """One pass over every managed resource in the namespace; returns how many writes."""
        with self._tick_lock:
            if self.kinds is None:
                self.kinds = served_managed_kinds(self.kube)
            before = sum(self.writes.values())
            for kind in self.kinds:
                try:
                    items = self.kube.list(
                        kind.api_version, kind.kind, self.namespace, self.selector
                    )
                except (ApiError, LookupError, OSError) as e:
                    self._error(f"list {kind}: {e}")
                    continue
                for item in items:
                    if item.get("metadata", {}).get("deletionTimestamp"):
                        continue
                    try:
                        self.play(kind, item)
                    except ApiError as e:
                        if e.status not in (404, 409):  # deleted or changed under us: next tick
                            self._error(f"{kind} {item['metadata'].get('name')}: {e}")
                    except Exception as e:
                        self._error(f"{kind} {item['metadata'].get('name')}: {e!r}")
            self.ticks += 1
            return sum(self.writes.values()) - before

    def _error(self, message: str) -> None:
        if len(self.errors) < 200:
            self.errors.append(message)

    # --- one resource -----------------------------------------------------------------------------

    def play(self, kind: Kind, item: dict) -> None:
        meta = item["metadata"]
        name, namespace = meta["name"], meta.get("namespace", self.namespace)
        observation = self.observe(item)

        status = desired_status(item.get("status") or {}, observation.status, now())
        # Written before for this generation: the API server pruned what the CRD lacks.
        seen = (fingerprint(observation.status), meta.get("generation", 0))
        if (
            not contains(item.get("status") or {}, status)
            and self._written.get(meta["uid"]) != seen
        ):
            updated = self.kube.patch(
                kind.api_version,
                kind.kind,
                name,
                {"status": status},
                namespace=namespace,
                subresource="status",
                manager=MANAGER,
                field_validation="Warn",
            )
            for warning in self.kube.warnings():
                if warning.startswith("unknown field"):
                    self.unknown_fields[str(kind)].add(warning.removeprefix("unknown field "))
            self._written[meta["uid"]] = (seen[0], updated["metadata"].get("generation", 0))
            self.writes["status"] += 1

        external = observation.external_name
        if external and (meta.get("annotations") or {}).get(EXTERNAL_NAME) != external:
            self.kube.patch(
                kind.api_version,
                kind.kind,
                name,
                {"metadata": {"annotations": {EXTERNAL_NAME: external}}},
                namespace=namespace,
                manager=MANAGER,
            )
            self.writes["external-name"] += 1

        ref = (item.get("spec") or {}).get("writeConnectionSecretToRef") or {}
        if ref.get("name"):
            self.write_secret(kind, item, ref["name"], observation.connection)

    def write_secret(self, kind: Kind, item: dict, name: str, data: dict[str, str]) -> None:
        meta = item["metadata"]
        namespace = meta.get("namespace", self.namespace)
        owner = {
            "apiVersion": kind.api_version,
            "kind": kind.kind,
            "name": meta["name"],
            "uid": meta["uid"],
            "controller": True,
            "blockOwnerDeletion": False,
        }
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace, "ownerReferences": [owner]},
            "type": CONNECTION_SECRET_TYPE,
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in sorted(data.items())},
        }
        key = (namespace, name)
        seen = fingerprint(secret)
        if self._secrets.get(key) == seen:
            return
        self.kube.apply(secret, manager=MANAGER)
        self._secrets[key] = seen
        self.writes["secret"] += 1

    # --- for tests --------------------------------------------------------------------------------

    def report(self) -> str:
        lines = [f"simulator: {self.ticks} ticks, writes {dict(self.writes)}"]
        lines += [f"  error: {e}" for e in self.errors[-20:]]
        lines += [f"  {k}: unknown {sorted(v)}" for k, v in sorted(self.unknown_fields.items())]
        return "\n".join(lines)


@contextlib.contextmanager
def simulating(kube: Kube, namespace: str, **kwargs):
    """A running Simulator for the with block."""
    sim = Simulator(kube, namespace, **kwargs)
    sim.start()
    try:
        yield sim
    finally:
        sim.stop()
