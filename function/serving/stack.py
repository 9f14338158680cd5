"""The serving stack on every workload cluster, rendered from the component table by one engine.

Rules the engine applies to every component (function/serving/components.py):
- nothing goes on the cluster before both of its ProviderConfigs are observed;
- a component is first composed once every component it comes `after` or `watches` is Ready
  (their CRDs and objects exist), and is never dropped afterwards; a watcher of a component
  withheld for now is withheld with it;
- a builder that has nothing to say this time (no client CA yet) keeps what exists as it is;
- readiness is each resource's own observed Ready condition (provider-kubernetes derives it from
  the component's readiness query).
"""

import functools
import marshal
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from function import kube, names, wire
from function.caches import BODIES, crd_job_name
from function.clusters.base import (
    PROVIDER_CONFIG_KEYS,
    as_desired,
    describe_waiting,
    release,
    unready_reasons,
)
from function.clusters.facts import ClusterFacts
from function.inputs import Inputs, ObservedResource
from function.models import InferenceCluster
from function.output import Condition, Desired, Requirement, Result
from function.serving import (
    adoption,
    conflicts,
    crd_job,
    dra_driver_age,
    gateway,
    gateway_api,
    gpu_health,
    gpu_metrics,
    gpus,
    looking,
    modelexpress,
)
from function.serving.components import (
    CHART_OF_CRD,
    COMPONENTS,
    EXISTING,
    NO_DELETE,
    RESOURCE_KEYS,
    Component,
    Context,
    chart_mark,
    crd_job_key,
    crd_job_spec,
)
from function.versions import CHARTS
from function.workload import GPU_NODE_LABEL

GATEWAY_KIND = Requirement(names.API_VERSION, "InferenceGateway")
# Whether the InferenceGateway kind is installed at all (a required schema comes back empty when
# it is not; listing an unknown kind would fail the whole reconcile).
GATEWAY_SCHEMA = "inference-gateway-kind"
GATEWAYS = "inference-gateways"
DRA_DRIVER = "nvidia-dra-driver"


@dataclass
class StackFacts:
    resources: dict[str, Desired] = field(default_factory=dict)
    ready: bool = False
    reason: str = "WaitingForCluster"
    message: str = "waiting for the cluster's ProviderConfigs"
    # The gateway as observed this time (None: not observed); status.py keeps older values.
    address: str | None = None
    ca_certificate: str | None = None
    client_cas: int | None = None
    # The ClientTrafficPolicy that makes the gateway demand client certificates is Accepted.
    clients_enforced: bool = False
    results: list[Result] = field(default_factory=list)
    # Whether a model can claim GPUs on every node of every GPU pool (function/serving/gpus.py).
    gpus: Condition = field(
        default_factory=lambda: Condition(
            "GPUsPublished", False, "WaitingForCluster", "waiting for the cluster"
        )
    )
    # Whether every GPU node is healthy, from the reporter's ConfigMap (serving/gpu_health.py).
    health: Condition = field(
        default_factory=lambda: Condition(
            "GPUsHealthy", False, "WaitingForCluster", "waiting for the cluster"
        )
    )
    # (of, by) resource keys: within the stack, of outlives by.
    outlives: list[tuple[str, str]] = field(default_factory=list)


def render(inputs: Inputs, cluster: ClusterFacts) -> StackFacts:
    facts = StackFacts()
    cas = client_cas(inputs)
    facts.client_cas = None if cas is None else len(cas)
    observed = inputs.observed.resources
    if cluster.provider_config is None:
        return facts
    ctx = Context(
        xr=inputs.xr.name,
        stack=inputs.xr.spec.stack,
        hostname=gateway.hostname(inputs.xr.name),
        nvidia_driver_root=cluster.nvidia_driver_root,
        client_cas=cas,
        load_balancer_annotations=load_balancer_annotations(inputs, cluster),
        source=inputs.xr.spec.cluster.source,
        moved=modelexpress.moves(observed),
        service_monitor=gpu_metrics.release_renders(observed),
        dcgm_owned=cluster.dcgm_owned,
        gateway_api_crds=gateway_api_crds_ours(inputs.xr.spec.cluster.source, observed),
    )
    reachable = all(k in observed for k in PROVIDER_CONFIG_KEYS)
    table = components(ctx.stack, inputs.xr.spec.cluster.source)
    # On an Existing cluster, what is found there decides first: what is made for a release
    # (its namespace) waits for the decision to install it.
    adopting = _Adopting(inputs, cluster.provider_config, facts, reachable)
    decisions = {c.key: decision for c in table if (decision := adopting.decide(c))}
    walk = _Walk(ctx, inputs, cluster, facts, reachable, decisions)
    for component in table:
        walk.compose(component)
    pending, withheld, adopted = walk.pending, walk.withheld, walk.adopted
    if reachable or gpu_metrics.SERVICE_MONITORS_KEY in observed:
        facts.resources[gpu_metrics.SERVICE_MONITORS_KEY] = gpu_metrics.observer(
            inputs.xr.name, cluster.provider_config
        )
    for key, embedded in (
        (gpu_metrics.SERVICE_MONITOR_KEY, False),
        (gpu_metrics.EMBEDDED_SERVICE_MONITOR_KEY, True),
    ):
        monitor = gpu_metrics.service_monitor(
            inputs.xr.name, cluster.provider_config, observed, embedded
        )
        if monitor is not None:
            facts.resources[key] = monitor

    probes = gpus.render(inputs, cluster.provider_config, _ready(observed.get(gpus.NAMESPACE_KEY)))
    facts.resources |= probes.resources
    facts.outlives, facts.gpus = probes.outlives, probes.condition

    report = observed.get(gpu_health.REPORT_KEY)
    health = gpu_health.read(report)
    facts.health = gpu_health.condition(
        health, gpu_health.REPORT_KEY in facts.resources, expected_gpu_pools(inputs)
    )
    facts.results += gpu_health.warnings(health)

    facts.address, facts.ca_certificate = observed_gateway(inputs)
    published = (inputs.observed.status.get("gateway") or {}).get("caCertificate")
    facts.results += gateway.ca_changed(published, facts.ca_certificate)
    enforcing = observed.get(RESOURCE_KEYS["gateway-client-auth"])
    facts.clients_enforced = enforcing is not None and enforcing.ready
    facts.results += unplaced_gpu_plugin(inputs)
    # A probe that is not ready says so in GPUsPublished, the health reporter and its report in
    # GPUsHealthy: none is a component installing (a drained reporter holds no backend back).
    said = probes.daemon_sets | {gpu_health.REPORTER_KEY, gpu_health.REPORT_KEY}
    unready = [k for k, d in facts.resources.items() if not d.ready and k not in said]
    waiting, failing = unready_reasons(unready, observed.get)
    waiting |= pending
    if not reachable and not facts.resources:
        return facts
    backend = verdict(
        describe_waiting(waiting, len(table) - walk.gone, "components", failing=failing)
        if waiting
        else None,
        facts.gpus,
        bool(withheld),
        ctx.stack,
        _adopted_names(table, adopted),
    )
    facts.ready, facts.reason, facts.message = backend.status, backend.reason, backend.message
    return facts


@dataclass
class _Walk:
    """Walking the table in order for one cluster: why each component not composed waits, which
    wait for clients, and what stands for each adopted one (by resource key), given what was
    decided about each adoptable component (by component key)."""

    ctx: Context
    inputs: Inputs
    cluster: ClusterFacts
    facts: StackFacts
    reachable: bool
    decisions: dict[str, adoption.Decision]
    pending: dict[str, str | None] = field(default_factory=dict)
    withheld: list[str] = field(default_factory=list)
    adopted: dict[str, adoption.Decision] = field(default_factory=dict)
    # Components of an earlier layout not composed: not there, or retired.
    gone: int = 0

    def compose(self, component: Component) -> None:
        """Compose component into facts, or say why not."""
        key = component.resource_key
        if component.retired is not None:
            observed = self.inputs.observed.resources
            if key not in observed or component.retired(observed):
                self.gone += 1
                return  # never first created; once retired, deleted by Crossplane
        decision = self.decisions.get(component.key)
        if decision is not None and decision.verdict == "adopted":
            self.adopted[key] = decision
            return
        if decision is not None and decision.verdict != "install":
            self.pending[key] = decision.why
            return
        seen = self.inputs.observed.resources.get(key)
        release = self.decisions.get(component.inside)
        if seen is None and release is not None and release.verdict != "install":
            return  # made for a release the function does not install (yet)
        self._place(component, seen)

    def _place(self, component: Component, seen: ObservedResource | None) -> None:
        """Compose the function's own release or object, once what it comes after is Ready."""
        key, facts = component.resource_key, self.facts
        built = component.build(self.ctx)
        if built is None:
            if seen is None:
                self.withheld.append(key)
            else:
                facts.resources[key] = Desired(as_desired(seen.body), ready=seen.ready)
            return
        behind = _crds_behind(component, self.inputs.observed.resources) if seen else []
        held, warned = _job_holds(component, seen, self.inputs.observed.resources, self.ctx)
        facts.results += warned
        if behind or held:  # a chart bump: its CRDs move first, the release stays till then
            facts.resources[key] = Desired(as_desired(seen.body), ready=seen.ready)
            self.pending[key] = ", ".join(behind) or held
            return
        if seen is None and any(RESOURCE_KEYS[w] in self.withheld for w in component.watches):
            self.withheld.append(key)
            return
        if seen is None:  # first composed once reachable and what it comes after is Ready
            observed = self.inputs.observed.resources
            blocked = _blocked(component, observed, self.cluster, self.adopted)
            if not self.reachable or blocked:
                self.pending[key] = ", ".join(blocked) if self.reachable else "ProviderConfigs"
                return
        rollback = _rolls_back(component, seen)
        body = _body(component, built, self.ctx, self.cluster.provider_config, rollback)
        facts.resources[key] = Desired(body, ready=seen is not None and seen.ready, shared=True)


def verdict(
    installing: str | None,
    gpus_: Condition,
    withheld: bool,
    stack: str,
    adopted: list[str] | None = None,
) -> Condition:
    """BackendReady: installed, then GPUs a model can claim, then a gateway open to clients;
    once installed, it names what was adopted (per cluster, what the stack runs on that the
    function did not install)."""
    found = verdict_installed(installing, gpus_, withheld, stack)
    if adopted and found.reason in ("Available", "WaitingForClients"):
        return replace(
            found, message=f"{found.message}; adopted, not installed: {', '.join(adopted)}"
        )
    return found


def verdict_installed(
    installing: str | None, gpus_: Condition, withheld: bool, stack: str
) -> Condition:
    if installing:
        return Condition("BackendReady", False, "Installing", installing)
    if not gpus_.status and gpus_.reason != gpus.ADMIN_ACCESS_OFF_REASON:
        return Condition("BackendReady", False, "WaitingForGPUs", gpus_.message)
    if withheld:
        return Condition(
            "BackendReady",
            False,
            "WaitingForClients",
            "the stack is installed; the gateway opens once an InferenceGateway publishes its "
            "client CA",
        )
    return Condition(
        "BackendReady",
        True,
        "Available",
        f"the {stack} stack is installed and the gateway is open to clients",
    )


@functools.cache
def components(stack: str, source: str) -> tuple[Component, ...]:
    """The components of a stack on a cluster of this source, in table order."""
    return tuple(
        c for c in COMPONENTS if stack in c.stacks and (c.sources is None or source in c.sources)
    )


def load_balancer_annotations(inputs: Inputs, cluster: ClusterFacts) -> tuple[tuple[str, str], ...]:
    """The cloud's annotations for the gateway's Service; on a composed EnvoyProxy, those that
    choose the load balancer (gateway.CHOOSES_LOAD_BALANCER) stay as it has them: a live
    Service's load balancer type never changes."""
    seen = inputs.observed.resources.get("gateway-proxy")
    if seen is None:
        return cluster.load_balancer_annotations
    live = gateway.service_annotations(
        seen.get("spec", "forProvider", "manifest", *gateway.SERVICE_ANNOTATIONS)
    )
    chooses = gateway.CHOOSES_LOAD_BALANCER
    return tuple(
        sorted(
            [(k, v) for k, v in live if k in chooses]
            + [(k, v) for k, v in cluster.load_balancer_annotations if k not in chooses]
        )
    )


def unplaced_gpu_plugin(inputs: Inputs) -> list[Result]:
    """A Warning while the DRA kubelet plugin runs on no node: no GPU can be claimed."""
    seen = inputs.observed.resources.get("dra-kubelet-plugin")
    desired = seen.at_provider("manifest", "status", "desiredNumberScheduled") if seen else None
    if desired != 0:
        return []
    return [
        Result(
            "Warning",
            "no node runs the NVIDIA DRA driver's kubelet plugin, so no GPU can be claimed: "
            f"give each GPU node the label {GPU_NODE_LABEL}=true (node-feature-discovery sets it "
            "on nodes with an NVIDIA PCI device it runs on) or nvidia.com/gpu.present=true, and "
            "taint it only with the key nvidia.com/gpu",
            reason="NoGPUNodes",
        )
    ]


def requirements(schemas: Mapping[str, bool]) -> dict[str, Requirement]:
    """The fleet's InferenceGateways, once their kind is known to be installed."""
    return {GATEWAYS: GATEWAY_KIND} if schemas.get(GATEWAY_SCHEMA) else {}


def expected_gpu_pools(inputs: Inputs) -> tuple[str, ...]:
    """The pools whose class declares NVIDIA GPUs and that always have nodes."""
    out = []
    for pool in inputs.xr.spec.node_pools:
        cls = inputs.classes.resolved.get(pool.class_name)
        least = (pool.min_node_count or 0) if gpus.autoscaled(pool) else pool.node_count
        if cls is not None and gpus.gpu_requests(cls) and least > 0:
            out.append(pool.name)
    return tuple(out)


def client_cas(inputs: Inputs) -> tuple[gateway.ClientCA, ...] | None:
    """The InferenceGateways' client CAs: () when the kind is not installed or none published,
    None while Crossplane has not answered."""
    installed = inputs.schemas.get(GATEWAY_SCHEMA)
    if installed is None:
        return None
    if not installed:
        return ()
    if GATEWAYS not in inputs.required:
        return None
    return gateway.client_cas(inputs.required[GATEWAYS])


def observed_gateway(inputs: Inputs) -> tuple[str | None, str | None]:
    """The Gateway's first address and the CA certificate trust-manager published, if seen."""
    observed = inputs.observed.resources
    address = None
    gw = observed.get("gateway")
    addresses = gw.at_provider("manifest", "status", "addresses") if gw else None
    if isinstance(addresses, list) and addresses and isinstance(addresses[0], dict):
        value = addresses[0].get("value")
        address = value if isinstance(value, str) and value else None
    ca = None
    cm = observed.get("gateway-ca-configmap")
    published = cm.at_provider("manifest", "data", gateway.CA_KEY) if cm else None
    if gateway.is_public_certificate(published):
        ca = published
    return address, ca


def _first_install(seen: ObservedResource | None) -> bool:
    """Whether a Release is still on its first install: not observed yet, or observed with the
    retries it was composed with and never deployed (deployed now, or past its first revision).
    Once composed without them, only _rolls_back's line brings them back."""
    if seen is None:
        return True
    if seen.get("spec", "rollbackLimit") is None:
        return False
    revision = seen.at_provider("revision")
    deployed = seen.at_provider("state") == "deployed" or (
        isinstance(revision, int | float) and revision > 1
    )
    return not deployed


def _rolls_back(component: Component, seen: ObservedResource | None) -> bool:
    """Whether the Release is composed with rollbackLimit, so provider-helm retries a failed
    install and rolls a failed or pending upgrade back to the revision before (provider-helm
    v1.3.0/v1.4.0 pkg/controller/namespaced/release/release.go shouldRollBack: without it a
    release left pending-upgrade or failed is never touched again). A chart with a line gets it
    once the release has deployed a version of that line (status.atProvider.version is the last
    revision's chart: observe.go generateObservation) and keeps it while its last revision stays
    on the line, so the revision a rollback returns to is always on it too."""
    line = component.rolls_back_within
    if line is None or seen is None or _first_install(seen):
        return True
    version = seen.at_provider("version")
    if not isinstance(version, str) or not line[0] <= release(version)[:3] < line[1]:
        return False
    return seen.at_provider("state") == "deployed" or seen.get("spec", "rollbackLimit") is not None


def _body(
    component: Component, built: dict, ctx: Context, provider_config: str, rollback: bool
) -> dict:
    # A fixed manifest or chart values by identity (held for good: the table's, or one a builder
    # picks among constants), one built from the context by content.
    made_of = id(built) if wire.is_fixed(built) else marshal.dumps(built)
    return BODIES.item(
        ctx.xr,
        (component.key, provider_config, ctx.source, made_of, rollback),
        lambda: _make_body(component, built, ctx, provider_config, rollback),
    )


def _make_body(
    component: Component, built: dict, ctx: Context, provider_config: str, rollback: bool
) -> dict:
    if component.chart:
        return kube.release(
            ctx.xr,
            component.key,
            component.pinned,
            provider_config,
            built,
            wait=component.wait,
            skip_crds=bool(component.crds or component.crd_job),
            rollback=rollback,
        )
    policies = NO_DELETE if ctx.source in component.left_on else component.policies
    return kube.manifest_object(
        ctx.xr,
        component.key,
        built,
        provider_config,
        policies=list(policies) if policies else None,
        ready_when=component.ready_when,
        watch=component.key.startswith("gateway"),
    )


@dataclass
class _Adopting:
    """On a cluster someone else runs (a provisioned one starts empty), what is found there
    decides, before an adoptable component is first installed; what was composed to look stays."""

    inputs: Inputs
    provider_config: str
    facts: StackFacts
    reachable: bool

    def decide(self, component: Component) -> adoption.Decision | None:
        """Look for the component, and say what was found; None when there is nothing to
        decide. A detector once observed is kept, whatever happens to the component."""
        if component.key not in adoption.DETECTORS:
            return None
        if self.inputs.xr.spec.cluster.source != EXISTING:
            return None
        observed = self.inputs.observed.resources
        guards, decision, warnings = conflicts.compose(
            self.inputs.xr.name,
            component.key,
            self.provider_config,
            observed,
            self.inputs.required,
            self._detect(component),
        )
        crds, decision, held = gateway_api.compose(
            self.inputs.xr.name, component.key, self.provider_config, observed, decision
        )
        daemonsets, outdated = dra_driver_age.compose(
            self.inputs.xr.name,
            component.key,
            self.provider_config,
            observed,
            self.inputs.required,
            decision,
        )
        self.facts.resources |= guards | crds | daemonsets
        self.facts.results += warnings + held + outdated
        return decision

    def _detect(self, component: Component) -> adoption.Decision | None:
        """The detector's decision and what is composed beside an adopted component."""
        observed, facts = self.inputs.observed.resources, self.facts
        key = adoption.detector_key(component.key)
        beside_keys = adoption.beside_keys(component.key)
        seen = observed.get(key)
        if component.resource_key in observed or not self.reachable:
            # Installed by the function: its own for good. What was composed for the decision
            # stays as it is (only a change of spec removes anything).
            facts.resources |= looking.kept((key, *beside_keys), observed)
            if component.resource_key not in observed and looking.marked_adopted(seen):
                return adoption.Decision("adopted", ready=True)  # until it can look again
            return None
        members = self.inputs.required.get(adoption.members_key(component.key))
        adopted_before = bool(beside_keys) and all(k in observed for k in beside_keys)
        decision = adoption.decide(component.key, seen, members, adopted_before)
        xr = self.inputs.xr.name
        facts.resources[key] = adoption.detector(xr, component.key, self.provider_config, decision)
        facts.results += adoption.results(component.key, decision, looking.marked_adopted(seen))
        if decision.verdict == "adopted":
            for wired, body in adoption.beside(xr, component.key, self.provider_config).items():
                facts.resources[wired] = Desired(
                    body, ready=_ready(observed.get(wired)), shared=True
                )
        for wired in (k for k in beside_keys if decision.verdict != "adopted" and k in observed):
            # Composed while it was adopted: kept as it is (only a change of spec removes).
            facts.resources[wired] = Desired(
                as_desired(observed[wired].body), ready=observed[wired].ready
            )
        return decision


def adoption_requirements(
    xr: InferenceCluster, observed: Mapping[str, ObservedResource]
) -> dict[str, Requirement]:
    """The objects each collection detector found, while its answer still decides something:
    observed, and the component not installed by the function yet."""
    if xr.spec.cluster.source != EXISTING:
        return {}
    undecided = [
        c
        for c in components(xr.spec.stack, EXISTING)
        if c.key in adoption.DETECTORS and c.resource_key not in observed
    ]
    wanted = {
        adoption.members_key(c.key): adoption.requirement(xr.name, c.key)
        for c in undecided
        if adoption.DETECTORS[c.key].labels and adoption.detector_key(c.key) in observed
    }
    for c in undecided:
        wanted |= conflicts.requirements(xr.name, c.key, observed)
    return wanted | dra_driver_age.requirements(xr.name, observed)


def _blocked(
    component: Component, observed, cluster: ClusterFacts, adopted: dict[str, adoption.Decision]
) -> list[str]:
    """What a component not composed yet still waits for (an adopted component: what stands
    for it)."""
    needs = (*component.after, *component.watches)
    blocked = [
        d
        for d in needs
        if not _stands(adopted.get(RESOURCE_KEYS[d])) and not _ready(observed.get(RESOURCE_KEYS[d]))
    ]
    if component.crd_job and not _ready(observed.get(component.crd_job)):
        blocked.append(component.crd_job)  # its CRDs first (the Object: Ready once Complete)
    if component.key == DRA_DRIVER:  # the node driver a cloud installs itself comes first
        blocked += [k for k in cluster.nvidia_driver_installers if not _ready(observed.get(k))]
    return blocked


def _crds_behind(component: Component, observed) -> list[str]:
    """The chart's CRDs (applied by the function) the cluster does not hold at its version yet."""
    if not component.crds:
        return []
    mark = chart_mark(component.key)
    return [
        k
        for k in component.crds
        if not _ready(seen := observed.get(RESOURCE_KEYS[k]))
        or seen.at_provider("manifest", "metadata", "annotations", CHART_OF_CRD) != mark
    ]


def _job_holds(
    component: Component, seen: ObservedResource | None, observed, ctx: Context
) -> tuple[str | None, list[Result]]:
    """Why a live release stays at its chart version: its CRD Job for the new version is not
    Complete (running, or Failed: the reason the Job gives, and what to do). A release already
    at the version is not held; a Job of it that failed is a Warning."""
    if not component.crd_job or seen is None:
        return None, []
    spec = crd_job_spec(component.key, ctx)
    job = observed.get(component.crd_job)
    manifest = job.at_provider("manifest") if job is not None else None
    expected = crd_job_name(spec, crd_job.name)
    state = crd_job.state(manifest, expected)
    if state == crd_job.COMPLETE:
        return None, []
    chart = CHARTS[component.key]
    job_name = f"{names.SYSTEM_NAMESPACE}/{expected}"
    what = f"the CRDs of {chart.name} {chart.version} (Job {job_name}"
    why = f"{what}: {state})" if state != crd_job.RUNNING else f"{what}, applying them)"
    installed = (seen.get("spec", "forProvider", "chart", "version"), seen.at_provider("version"))
    if any(isinstance(v, str) and v != chart.version for v in installed):
        return why, []
    if state == crd_job.RUNNING:
        return None, []
    return None, [Result("Warning", f"{component.key}: {why}", reason="CRDJobFailed")]


def gateway_api_crds_ours(source: str, observed) -> bool:
    """Whether gateway-helm's CRD Job applies the Gateway API CRDs too. On a provisioned cluster
    always; on an Existing one only where they are the function's: a Job of it applied them
    before (its last manifest names them), or, before its first Job, the detector found none
    (function/serving/gateway_api.py). A live cluster's whose Envoy Gateway was installed before
    (no detector) keeps them as they are: Helm leaves no mark on crds/ that tells the function's
    own from another's."""
    if source != EXISTING:
        return True
    job = observed.get(crd_job_key(gateway_api.COMPONENT))
    if job is not None:
        return crd_job.applies(job.get("spec", "forProvider", "manifest"), gateway_api.SOUGHT.name)
    return gateway_api.absent(observed.get(gateway_api.KEY))


def _stands(adopted: adoption.Decision | None) -> bool:
    """Whether an adopted component is ready to stand in for the release not installed."""
    return adopted is not None and adopted.ready


def _adopted_names(table, adopted: dict[str, adoption.Decision]) -> list[str]:
    """Each adopted component of the table and whose it is, as BackendReady names them."""
    return [
        f"{c.key} ({adopted[c.resource_key].owner or 'adopted earlier'})"
        for c in table
        if c.resource_key in adopted
    ]


def _ready(seen) -> bool:
    return seen is not None and seen.ready
