"""What every provisioned cloud shares: the rules its managed resources are composed under.

A `Cloud` collects one reconcile's resources for one cluster and enforces four rules:

- every managed resource is a namespaced `.m.` kind in modelplane-system, authenticated by the
  ProviderConfig `spec.cluster.<cloud>.credentials` names;
- a resource that needs something observed (an id, a ready cluster, a kubeconfig) is composed once
  that is observed, and kept from then on even if the observation regresses: the renderers ask
  `when(key, ...)`, or `keep_or_build(...)` when values from another resource go into its body;
- readiness comes from each resource's own observed Ready condition;
- `facts()` derives ClusterReady and a wait message a human can act on.
"""

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from function import caches, forcenew, kube, names, providerconfigs
from function.clusters.facts import ClusterFacts
from function.failures import failure, words
from function.frozen import Composed
from function.inputs import Inputs, ObservedResource
from function.models import Credentials, InferenceClass, NodePool
from function.output import Desired, Result
from function.providerconfigs import Identity, SecretKey
from function.versions import CLOUD_CHARTS

PROVIDER_CONFIG_KEYS = ("provider-config-kubernetes", "provider-config-helm")
# The requirement under which a cloud's own ProviderConfig is handed over.
CLOUD_PROVIDER_CONFIG = "cloud-provider-config"
# Observe, Create, Update, Delete without LateInitialize: a field the autoscaler owns (a node
# group's size) is seeded once through initProvider and never read back into the spec.
NO_LATE_INIT = ["Observe", "Create", "Update", "Delete"]
OBSERVE_ONLY = ["Observe"]
# Crossplane's own reasons that mean "not there yet", shown as is in wait messages.
_WAIT_MESSAGE_NAMES = 8
_WAIT_MESSAGE_CHARS = 512


@dataclass(frozen=True)
class CloudConfig:
    """The cloud ProviderConfig the credentials name: its spec once found (None: not yet, or not
    there), and how to name it to a human."""

    answered: bool
    spec: dict | None
    describe: str

    def secret_identity(self, type_: str) -> Identity | None:
        """Its credentials Secret, as the identity of the cluster's ProviderConfigs, if any."""
        credentials = (self.spec or {}).get("credentials") or {}
        ref = credentials.get("secretRef") if credentials.get("source") == "Secret" else None
        if not isinstance(ref, dict) or not ref.get("name") or not ref.get("key"):
            return None
        namespace = ref.get("namespace") or names.SYSTEM_NAMESPACE
        return Identity(type_, SecretKey(ref["name"], ref["key"], namespace))


@dataclass(frozen=True)
class Pool:
    """A node pool whose class resolved and carries this cloud's provisioning block."""

    spec: NodePool
    cls: InferenceClass
    shape: Any  # the class's provisioning block for this cloud

    @property
    def name(self) -> str:
        return self.spec.name


def managed_body(
    credentials: Credentials,
    api_version: str,
    kind: str,
    name: str,
    for_provider: dict,
    *,
    init_provider: dict | None = None,
    policies: list[str] | None = None,
    labels: dict | None = None,
    annotations: dict | None = None,
    connection_secret: str | None = None,
) -> dict:
    """A namespaced managed resource in modelplane-system, authenticated by credentials."""
    metadata: dict = {"name": name, "namespace": names.SYSTEM_NAMESPACE}
    if labels:
        metadata["labels"] = labels
    if annotations:
        metadata["annotations"] = annotations
    spec: dict = {
        "providerConfigRef": {"kind": credentials.type, "name": credentials.name},
        "forProvider": for_provider,
    }
    if init_provider:
        spec["initProvider"] = init_provider
    if policies:
        spec["managementPolicies"] = policies
    if connection_secret:
        spec["writeConnectionSecretToRef"] = {"name": connection_secret}
    return {"apiVersion": api_version, "kind": kind, "metadata": metadata, "spec": spec}


class Part:
    """What Cloud.made_once hands a part's maker: the cluster's names and its managed resources'
    bodies, and nothing observed."""

    def __init__(self, xr: str, credentials: Credentials) -> None:
        self.xr = xr
        self.credentials = credentials
        self.bodies: dict[str, dict] = {}

    def name(self, *parts: str, limit: int = 63) -> str:
        return names.cloud_name(self.xr, *parts, limit=limit)

    def managed(self, key: str, *args: Any, **kw: Any) -> dict:
        body = self.bodies[key] = managed_body(self.credentials, *args, **kw)
        return body


@dataclass
class Cloud:
    inputs: Inputs
    credentials: Credentials
    resources: dict[str, Desired] = field(default_factory=dict)
    # Resources not composed yet, and what each waits for.
    pending: dict[str, str] = field(default_factory=dict)
    # Why a composed resource that is not ready waits, where the cloud's rules know better than
    # its Ready condition (an EKS Capacity Block that has not started).
    why: dict[str, str] = field(default_factory=dict)
    results: list[Result] = field(default_factory=list)
    invalid_pools: dict[str, str] = field(default_factory=dict)
    waiting_pools: list[str] = field(default_factory=list)
    # The resource whose kubeconfig the stack installs through: it outlives the stack
    # (usages.Anchor).
    anchors: tuple[str | tuple[str, str], ...] = ("cluster",)
    # (of, by): within the cluster, of outlives by.
    outlives: list[tuple[str, str]] = field(default_factory=list)

    @property
    def xr(self) -> str:
        return self.inputs.xr.name

    def name(self, *parts: str, limit: int = 63) -> str:
        """A cloud-safe name of one of this cluster's resources."""
        return names.cloud_name(self.xr, *parts, limit=limit)

    def observed(self, key: str) -> ObservedResource | None:
        return self.inputs.observed.resources.get(key)

    def cloud_provider_config(self, api_group: str) -> CloudConfig:
        """The cloud's own ProviderConfig or ClusterProviderConfig that the credentials name, as
        Crossplane handed it over (compose.requirements asks for it)."""
        creds = self.credentials
        where = f"{creds.type} {creds.name!r} ({api_group})"
        if CLOUD_PROVIDER_CONFIG not in self.inputs.required:
            return CloudConfig(False, None, where)
        items = self.inputs.required[CLOUD_PROVIDER_CONFIG]
        body = items[0] if items else None
        if body is None:
            return CloudConfig(True, None, where)
        group = str(body.get("apiVersion", "")).split("/")[0]
        if body.get("kind") != creds.type or group != api_group:
            kind = f"{body.get('kind')} of {group}"
            return CloudConfig(True, None, f"{where}, but Crossplane returned a {kind}")
        spec = body.get("spec")
        return CloudConfig(True, spec if isinstance(spec, dict) else {}, where)

    def remembered_identity(self) -> Identity | None:
        """The identity the observed helm ProviderConfig carries (helm takes every type), kept
        while the cloud ProviderConfig it came from cannot be read."""
        seen = self.observed("provider-config-helm")
        identity = seen.get("spec", "identity") if seen else None
        if not isinstance(identity, dict):
            return None
        if identity.get("source") == "InjectedIdentity":
            return Identity(identity.get("type", ""), None)
        if not isinstance(identity.get("secretRef"), dict):
            return None
        ref = identity["secretRef"]
        return Identity(
            identity.get("type", ""),
            SecretKey(ref.get("name", ""), ref.get("key", ""), ref.get("namespace", "")),
        )

    def is_ready(self, key: str) -> bool:
        seen = self.observed(key)
        return seen is not None and seen.ready

    # --- composing ------------------------------------------------------------------------------

    def add(self, key: str, body: dict, *, ready: bool | None = None) -> None:
        """Compose body under key; ready by its own observed Ready condition unless told."""
        self.resources[key] = Desired(
            body=body, ready=self.is_ready(key) if ready is None else ready
        )

    def managed(self, key: str, *args: Any, **kw: Any) -> dict:
        """A namespaced managed resource in modelplane-system, authenticated by the credentials
        (managed_body)."""
        body = managed_body(self.credentials, *args, **kw)
        self.add(key, body)
        return body

    def made_once(self, part: str, make: Callable[..., None], *args: Any) -> None:
        """Compose the managed resources make(Part, *args) makes. make is handed no Cloud: what
        it makes comes of the cluster's name, its credentials and args alone, so it is made once
        and shared while they stay the same (caches.part), and each resource is ready by its own
        Ready condition."""
        creds = self.credentials
        made = caches.part(
            self.xr, part, (creds.type, creds.name, *args), lambda kept: self._made(make, *kept)
        )
        for key, (body, frozen) in made.items():
            self.resources[key] = Desired(body, self.is_ready(key), shared=True, frozen=frozen)

    def _made(
        self, make: Callable[..., None], type_: str, name: str, *args: Any
    ) -> dict[str, tuple[dict, Composed | None]]:
        part = Part(self.xr, Credentials(type=type_, name=name))
        make(part, *args)
        return {key: (body, forcenew.composed(body)) for key, body in part.bodies.items()}

    def when(self, key: str, ready_to_compose: bool, waits_for: str) -> bool:
        """Whether key is composed this time: once what it needs is there, and forever after."""
        if ready_to_compose or self.observed(key) is not None:
            return True
        self.pending[key] = waits_for
        return False

    def keep_or_build(
        self, key: str, needs: dict[str, Any], build: Callable[..., None], waits_for: str
    ) -> None:
        """Build key from observed values; while one is missing keep what is observed of it.

        needs maps argument names of build to values read from other resources (None = not
        observed). A resource already composed is re-emitted as observed, so a lost status on
        another resource never changes or drops it.
        """
        if all(v is not None for v in needs.values()):
            build(**needs)
            return
        seen = self.observed(key)
        if seen is None:
            self.pending[key] = waits_for
            return
        self.add(key, as_desired(seen.body))

    # --- the cluster's access ------------------------------------------------------------------

    def provider_configs(
        self, kubeconfig_ready: bool, identity: Identity | None = None
    ) -> str | None:
        """The kubernetes and helm ClusterProviderConfigs, once the kubeconfig Secret is written."""
        # Both or neither: one already observed brings its partner along.
        start = kubeconfig_ready or any(self.observed(k) for k in PROVIDER_CONFIG_KEYS)
        if not all([self.when(k, start, "kubeconfig") for k in PROVIDER_CONFIG_KEYS]):
            return None
        name = names.provider_config_name(self.xr)
        secret = SecretKey(names.kubeconfig_secret(self.xr), "kubeconfig")
        self.resources.update(providerconfigs.render(name, secret, identity))
        return name

    @property
    def reachable(self) -> bool:
        """Both ProviderConfigs are observed: the provider will find them."""
        return all(self.observed(k) is not None for k in PROVIDER_CONFIG_KEYS)

    def on_cluster(self, key: str, after: tuple[str, ...] = ()) -> bool:
        """Whether an in-cluster resource (release, Object) is composed this time: once the
        cluster is reachable and the resources after names (their CRDs, namespaces) are Ready."""
        if not self.reachable:
            return self.when(key, False, "ProviderConfigs")
        waiting = [k for k in after if not self.is_ready(k)]
        return self.when(key, not waiting, ", ".join(waiting))

    def install(
        self, name: str, provider_config: str | None, values: dict, after: tuple[str, ...] = ()
    ) -> None:
        """A chart the cloud installs with its cluster (CLOUD_CHARTS[name]) once it is reachable
        (and what it comes after is Ready). Orphaned on deletion: it dies with the cluster."""
        key = f"release-{name}"
        if provider_config is None or not self.on_cluster(key, after):
            return
        chart = CLOUD_CHARTS[name]
        body = kube.release(self.xr, name, chart, provider_config, values, policies=kube.ORPHAN)
        self.add(key, body)

    def put(self, key: str, provider_config: str, manifest: dict, **kw) -> None:
        """One manifest on the cluster, as a provider-kubernetes Object (orphaned unless told)."""
        policies = kw.pop("policies", kube.ORPHAN)
        body = kube.manifest_object(
            self.xr, key, manifest, provider_config, policies=policies, **kw
        )
        self.add(key, body)

    # --- pools ----------------------------------------------------------------------------------

    def pools(self, provider: str, block: str) -> list[Pool]:
        """The pools this cloud can build; the others are reported and their resources kept."""
        classes = self.inputs.classes
        out = []
        for i, pool in enumerate(self.inputs.xr.spec.node_pools):
            cls = classes.resolved.get(pool.class_name)
            if cls is None:
                if pool.class_name in classes.invalid:
                    self._invalid(i, pool, f"InferenceClass {pool.class_name!r} is invalid")
                else:
                    self.waiting_pools.append(pool.name)
                continue
            prov = cls.spec.provisioning
            if prov is None:
                self._invalid(
                    i, pool, f"InferenceClass {cls.name!r} has no provisioning.{block} block"
                )
            elif prov.provider != provider:
                self._invalid(
                    i,
                    pool,
                    f"InferenceClass {cls.name!r} provisions on {prov.provider}, not {provider}",
                )
            else:
                out.append(Pool(pool, cls, getattr(prov, block)))
        return out

    def _invalid(self, index: int, pool: NodePool, why: str) -> None:
        message = (
            f"spec.nodePools[{index}] {pool.name!r}: {why}; "
            "its resources are kept as they are until the class is fixed"
        )
        self.invalid_pools[pool.name] = message
        self.results.append(Result("Warning", message, reason="InvalidNodePool"))

    def sizes(self, pool: "Pool", cloud: str, floor: int = 0) -> "Scaling":
        """The pool's sizes (scaling), keeping one node where an autoscaling pool whose class
        claims devices through DRA would sit at zero: its autoscaler cannot scale it up from
        zero for those claims (DRA_SCALE_FROM_ZERO), and its pods would wait for ever."""
        size = scaling(pool.spec, floor=floor)
        if cloud in DRA_SCALE_FROM_ZERO:
            return size
        if not (size.autoscaling and size.minimum == 0 and size.maximum >= 1):
            return size
        if not any(d.claim == "DRA" for d in pool.cls.spec.devices):
            return size
        self.warn(
            f"pool {pool.name!r}: minNodeCount 0 is raised to 1; its pods claim devices through "
            f"DRA, and {cloud}'s cluster autoscaler documents no scale-up from zero for DRA "
            "claims (it would need ResourceSlice templates for an empty pool, "
            "cluster-autoscaler docs/dra_support.md); one GPU node stays, billed while idle",
            reason="ScaleFromZeroUnsupported",
        )
        return Scaling(1, size.maximum, max(size.initial, 1), autoscaling=True)

    def warn(self, message: str, reason: str = "ShapeMismatch") -> None:
        self.results.append(Result("Warning", message, reason=reason))

    # --- what the rest of the composition learns -------------------------------------------------

    def credentials_missing(self, unready: Iterable[str]) -> str | None:
        """What to do when a managed resource's provider reports that the ProviderConfig the
        credentials name does not exist (a Warning too): the field and the name, then the
        provider's words. Every source, so a wrong name is named whether or not the renderer
        reads that ProviderConfig (GKE and Nebius say it first, from the required resource)."""
        creds = self.credentials
        if any(r.reason == "ProviderConfigNotFound" for r in self.results):
            return None
        for key in unready:
            seen = self.observed(key)
            synced = (seen.condition("Synced") or {}) if seen else {}
            said = synced.get("message")
            if synced.get("status") != "False" or not isinstance(said, str):
                continue
            if not missing_provider_config(said, creds.name):
                continue
            field = f"spec.cluster.{self.inputs.xr.spec.cluster.source.lower()}.credentials"
            message = (
                f"{field} names {creds.type} {creds.name!r}, which {key}'s provider cannot find: "
                f"create it, or name one that exists ({words(said)})"
            )
            self.warn(message, reason="ProviderConfigNotFound")
            return message
        return None

    def facts(self, provider_config: str | None, storage_class: str | None) -> ClusterFacts:
        complete = not (self.invalid_pools or self.waiting_pools)
        unready = [k for k, d in self.resources.items() if not d.ready]
        credentials = self.credentials_missing(unready)
        waiting, failing = unready_reasons(unready, self.observed, self.why)
        # What the cloud's rules know of a resource not composed yet comes first too.
        pending = {
            k: "; ".join(w for w in (self.why.get(k), v) if w) for k, v in self.pending.items()
        }
        waiting = {**pending, **waiting}
        if self.waiting_pools:
            reason = "WaitingForClasses"
            message = "waiting for the InferenceClasses of pools " + ", ".join(self.waiting_pools)
        elif self.invalid_pools:
            reason, message = "InvalidNodePool", "; ".join(self.invalid_pools.values())
        elif waiting:
            total = len(self.resources) + len(self.pending)
            reason, message = "Provisioning", describe_waiting(waiting, total, failing=failing)
            if credentials:
                message = f"{credentials}; {message}"[:_WAIT_MESSAGE_CHARS]
        else:
            reason, message = "Available", "control plane, node pools and kubeconfig are ready"
        return ClusterFacts(
            resources=self.resources,
            results=self.results,
            ready=reason == "Available",
            reason=reason,
            message=message,
            provider_config=provider_config,
            storage_class=storage_class,
            complete=complete,
            anchors=self.anchors,
            outlives=tuple(self.outlives),
        )


def unready_reasons(
    keys: Iterable[str],
    observed: Callable[[str], ObservedResource | None],
    why: Mapping[str, str] | None = None,
) -> tuple[dict[str, str | None], frozenset[str]]:
    """Why each resource not ready yet waits (what the function knows, then what its provider
    reports failing, else its Ready reason), and which of them its provider reports failing."""
    waiting: dict[str, str | None] = {}
    failing = set()
    for key in keys:
        seen = observed(key)
        failed = failure(seen)
        if failed:
            failing.add(key)
        told = "; ".join(w for w in ((why or {}).get(key), failed) if w)
        waiting[key] = told or observed_reason(seen)
    return waiting, frozenset(failing)


def missing_provider_config(message: str, name: str) -> bool:
    """Whether a provider's message says the ProviderConfig or ClusterProviderConfig called name
    does not exist. The upjet providers resolve it before anything else and wrap the API
    client's NotFound, `<Kind or resource>.<group> "<name>" not found`, in "cannot get referenced
    ProviderConfig" (provider-upjet-aws v2.6.0 internal/clients/pc_resolver.go, provider-upjet-
    nebius v1.0.1 internal/clients/nebius.go: upjet's provider template). Only the name is
    matched, so another provider's prefix still counts."""
    pattern = rf'(?i)\b(?:cluster)?providerconfigs?(?:\.[a-z0-9-]+)+ "{re.escape(name)}" not found'
    return re.search(pattern, message) is not None


def describe_waiting(
    waiting: dict[str, str | None],
    total: int,
    what: str = "resources",
    failing: frozenset[str] = frozenset(),
) -> str:
    """`waiting for 3 of 41 resources: a (Creating), b, c`: what its provider reports failing
    first, in the provider's words, then the rest; sorted, bounded, deterministic."""
    order = sorted(waiting.items(), key=lambda kv: (kv[0] not in failing, kv[0]))
    shown = [f"{key} ({why})" if why else key for key, why in order[:_WAIT_MESSAGE_NAMES]]
    more = len(waiting) - len(shown)
    text = f"waiting for {len(waiting)} of {total} {what}: " + ", ".join(shown)
    if more:
        text += f", and {more} more"
    return text[:_WAIT_MESSAGE_CHARS]


def observed_reason(seen: ObservedResource | None) -> str | None:
    """Why an observed resource is not ready, if its Ready condition says."""
    ready = seen.condition("Ready") if seen else None
    reason = ready.get("reason") if ready else None
    return reason if reason and reason != "Available" else None


# Metadata Crossplane or the API server own; carrying them forward would fight them.
_OWNED_ANNOTATIONS = ("kubectl.kubernetes.io/last-applied-configuration",)


def as_desired(body: dict) -> dict:
    """An observed body as a desired one: identity, labels, annotations and content (a spec, or
    a core kind's data), never status or what the API server owns."""
    meta = body.get("metadata", {})
    keep: dict = {"name": meta.get("name")}
    if meta.get("namespace"):
        keep["namespace"] = meta["namespace"]
    if meta.get("labels"):
        keep["labels"] = meta["labels"]
    annotations = {
        k: v for k, v in meta.get("annotations", {}).items() if k not in _OWNED_ANNOTATIONS
    }
    if annotations:
        keep["annotations"] = annotations
    out = {"apiVersion": body.get("apiVersion"), "kind": body.get("kind"), "metadata": keep}
    out |= {k: v for k, v in body.items() if k not in ("apiVersion", "kind", "metadata", "status")}
    return out


# The taint every GPU node carries, so only workloads that tolerate it (inference engines, GPU
# drivers) land there.
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
# The system nodes run controllers; they are not a Modelplane pool, so they carry no pool label.
SYSTEM_LABELS = {"modelplane.ai/role": "system"}
# Every cloud's system pool, as (minimum, maximum, initial) nodes. Everything without the GPU
# toleration runs there: both gateway replicas (the data plane behind the load balancer), the
# fail-closed webhooks and the schedulers. Their two replicas under a disruption budget
# (function/serving/drains.py) keep serving through a drain or a lost VM only if there is a
# second node to be on: with one, a drain, a repair or a node upgrade that deletes before it
# creates takes them all down at once.
SYSTEM_NODES = (2, 3, 2)


def pool_labels(pool: Pool, accelerator: str | None) -> dict[str, str]:
    """modelplane.ai/pool=<pool> (replicas are pinned by it) and the GPU type when known."""
    labels = {names.POOL_LABEL: pool.name}
    if accelerator:
        labels[names.GPU_LABEL] = accelerator
    return labels


Minor = tuple[int, int]
_MINOR = re.compile(r"^v?(\d+)\.(\d+)(?:\.|-|$)")


def minor(version: object) -> Minor | None:
    """(1, 36) from "1.36", "1.36.2" or "v1.36.2-eksbuild.1"; None for anything else."""
    match = _MINOR.match(version) if isinstance(version, str) else None
    return (int(match[1]), int(match[2])) if match else None


def text(version: Minor) -> str:
    return f"{version[0]}.{version[1]}"


def release(version: str) -> tuple[int, ...]:
    """v1.36.1+3 -> (1, 36, 1, 3), v1.35.3-eksbuild.2 -> (1, 35, 3, 2): versions in the order
    their makers release them."""
    return tuple(int(n) for n in re.findall(r"\d+", version))


def runs(running: str | None, target: str) -> bool:
    """Whether a control plane reporting running (1.34.3, 1.34.3-nebius-cp.2) runs target, an
    exact version or a minor alias (1.34)."""
    if not running:
        return False
    return running == target or running.startswith((f"{target}.", f"{target}-"))


def pool_version(target: str, running: str | None, current: str | None) -> str:
    """The version a node pool asks for. Pools follow the control plane and never lead it: the
    spec's version once the control plane runs it (or at creation, before it reports any); until
    then the version the pool already asks for, or for a new pool the control plane's own."""
    if runs(running, target) or (running is None and current is None):
        return target
    return current or running or target


@dataclass(frozen=True)
class Scaling:
    """A pool's size: a fixed count, or an autoscaling range with its initial size inside it."""

    minimum: int
    maximum: int
    initial: int
    autoscaling: bool


# Clouds whose autoscaler documents scaling a pool up from zero for DRA claims. It must build
# ResourceSlice templates for an empty pool to see that a node would take the claim
# (cluster-autoscaler docs/dra_support.md); no GKE, AKS, EKS or Nebius source says theirs does,
# and Vultr keeps a node in every pool anyway. Add a cloud only with its documentation named.
DRA_SCALE_FROM_ZERO: frozenset[str] = frozenset()


def scaling(pool: NodePool, *, floor: int = 0) -> Scaling:
    """minNodeCount..maxNodeCount starting at nodeCount clamped into the range; else fixed.

    floor is the cloud's smallest pool (Vultr pools always have a node).
    """
    if pool.max_node_count is None:
        size = max(pool.node_count, floor)
        return Scaling(size, size, size, autoscaling=False)
    maximum = max(pool.max_node_count, floor)
    minimum = min(max(pool.min_node_count or 0, floor), maximum)
    initial = min(max(pool.node_count, minimum), maximum)
    return Scaling(minimum, maximum, initial, autoscaling=True)
