"""On an Existing cluster, a component someone else already runs is adopted, never installed
beside it.

Before a component the table marks adoptable is first installed there, a read-only detector looks
for what says it is present:
- cert-manager: its Certificate CRD, by name, through an Observe-only Object; LeaderWorkerSet,
  Grove, the KAI Scheduler and the NVIDIA DRA driver: a cluster-scoped object their charts name
  the same whatever the release, likewise;
- node-feature-discovery, trust-manager and Envoy Gateway: every DaemonSet labelled as NFD's
  worker, every Deployment labelled as trust-manager or as Envoy Gateway's controller, in any
  namespace and under any release name, through an ObservedObjectCollection (looking.py). NFD's
  CRDs cannot say it runs: Helm installs them from crds/, unlabelled, and never removes them.
Present and not ours (its Helm release is not mp-<key>, or it came from no release at all): the
function composes nothing that touches it, and what comes after it waits for that object instead
of the release, so Helm never meets "invalid ownership metadata" and no second controller fights
the first. Present but unable to serve the stack (too old, configured otherwise, or, for Envoy
Gateway, never adoptable): refused, with a Warning saying why, and what comes after it waits.
Absent: the release is installed. What the function installed stays its own: once its release is
observed, the detector's answer no longer matters, and nothing installed by someone else is ever
removed, since the function never composed it.

provider-kubernetes reports an Observe-only Object whose object does not exist as Synced=False,
"cannot observe external resource: external resource does not exist" (crossplane-runtime v2.1
managed reconciler, ShouldOnlyObserve): for a detector that is the answer "absent", not a failure.
"""

from dataclasses import dataclass

from function import failures, kube, names
from function.caches import BODIES
from function.inputs import ObservedResource
from function.output import Desired, Requirement, Result
from function.serving import looking
from function.versions import CHARTS
from function.workload import GPU_NODE_LABEL

HELM_RELEASE = "meta.helm.sh/release-name"
HELM_NAMESPACE = "meta.helm.sh/release-namespace"
VERSION_LABEL = "app.kubernetes.io/version"
CRD = ("apiextensions.k8s.io/v1", "CustomResourceDefinition")
WEBHOOK = ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration")


@dataclass(frozen=True)
class Flag:
    """A command-line flag, `--name=value` or `--name value` (the last one counts, as Go's flag
    parsers take it), and the value the stack needs: default is what the binary takes without it
    (None: no limit), listing a comma-separated list that must name wanted; why says what breaks
    otherwise, fix what to do."""

    name: str
    wanted: str
    default: str | None
    why: str
    fix: str
    listing: bool = False

    def allows(self, value: str | None) -> bool:
        value = self.default if value is None else value
        if self.listing:
            return value is None or self.wanted in value.split(",")
        return value == self.wanted


@dataclass(frozen=True)
class Detector:
    """What says the component runs: one object by name, or (labels) every object of the kind
    carrying them; and what the stack needs of it: paths into the served version's schema that
    must exist (the fields the stack's objects set)."""

    api_version: str
    kind: str
    name: str = ""
    needs: tuple[tuple[str, ...], ...] = ()
    labels: tuple[tuple[str, str], ...] = ()
    # For a name others could use: an API group the object's rules must name to be the
    # component's.
    grants: str = ""
    # What the found workload's containers must run with for the stack to work beside it.
    flags: tuple[Flag, ...] = ()
    # Only one may run: several found (each reconciling the same cluster-scoped objects) are
    # refused.
    single: bool = False
    # Why one already there can never serve the stack, however configured: found and not the
    # function's, it is refused, never adopted.
    refusal: str = ""


# cert-manager: the stack's Certificates and trust-manager's set privateKey.rotationPolicy and
# revisionHistoryLimit (function/serving/gateway.py; trust-manager v0.24.0's
# templates/certificate.yaml): an older cert-manager's CRD lacks them, and its API server would
# prune or refuse them.
DETECTORS: dict[str, Detector] = {
    "cert-manager": Detector(
        *CRD,
        "certificates.cert-manager.io",
        needs=(
            ("spec", "privateKey", "rotationPolicy"),
            ("spec", "revisionHistoryLimit"),
        ),
    ),
    # LeaderWorkerSet 0.8.0 and Grove v0.1.0-alpha.11 install admission webhooks of fixed names
    # from their templates (lws templates/webhook/webhook.yaml, grove
    # templates/pcs-defaulting-webhook-config.yaml): a second release meets Helm's "invalid
    # ownership metadata" on them, and a second controller would serve the same kinds. Their CRDs
    # come from crds/, unlabelled, so the webhook says whether one runs and whose it is.
    "leader-worker-set": Detector(*WEBHOOK, "lws-mutating-webhook-configuration"),
    "grove": Detector(*WEBHOOK, "podcliqueset-defaulting-webhook"),
    # The KAI Scheduler installs its scheduler's ClusterRole under a fixed name in every chart
    # from v0.4.0 to v0.16.8 (templates/rbac/scheduler.yaml; the operator's, kai-operator, only
    # from v0.8.5): a second release meets "invalid ownership metadata" there. Its rules name
    # KAI's API group, which tells it from another project's role of that name.
    "kai-scheduler": Detector(
        "rbac.authorization.k8s.io/v1", "ClusterRole", "kai-scheduler", grants="scheduling.run.ai"
    ),
    # Both lines of the driver (nvidia-dra-driver-gpu to 25.12.0, dra-driver-nvidia-gpu from
    # 0.4.0) install the DeviceClass GPUs are claimed by under a fixed name when GPUs are enabled
    # (templates/deviceclass-gpu.yaml): the class the GPU probes and the models' claims name, and
    # where a second release would collide. Which driver it is: dra_driver_age.py.
    "nvidia-dra-driver": Detector("resource.k8s.io/v1", "DeviceClass", "gpu.nvidia.com"),
    # trust-manager v0.24.0 installs its Bundle CRD, ClusterRole and ValidatingWebhookConfiguration
    # under fixed names (templates/crd-trust.cert-manager.io_bundles.yaml, clusterrole.yaml,
    # webhook.yaml), where a second release meets "invalid ownership metadata"; two would both
    # reconcile every Bundle, which is cluster-scoped. Its Deployment carries
    # app.kubernetes.io/name whatever the release, and in its args (templates/deployment.yaml) the
    # one namespace it reads Bundle sources in (the binary's default: cert-manager, from v0.5.0 to
    # v0.24.0) and, from v0.20, the namespaces it may write targets to: the gateway's CA Secret and
    # its ConfigMap are in the function's namespace.
    "trust-manager": Detector(
        "apps/v1",
        "Deployment",
        labels=(("app.kubernetes.io/name", "trust-manager"),),
        flags=(
            Flag(
                "--trust-namespace",
                names.SYSTEM_NAMESPACE,
                "cert-manager",
                "it reads Bundle sources only there, so it would never publish the gateway's CA "
                f"(its Secret is in {names.SYSTEM_NAMESPACE})",
                f"the function cannot install its own beside it (two would reconcile the same "
                f"Bundles); if no Bundle of yours reads that namespace, run it with "
                f"--trust-namespace={names.SYSTEM_NAMESPACE} (app.trust.namespace)",
            ),
            Flag(
                "--target-namespaces",
                names.SYSTEM_NAMESPACE,
                None,
                "it writes Bundle targets only there, so it would never publish the gateway's CA "
                f"into {names.SYSTEM_NAMESPACE}",
                f"add {names.SYSTEM_NAMESPACE} to its app.targetNamespaces",
                listing=True,
            ),
        ),
        single=True,
    ),
    # gateway-helm v1.0.0 to v1.8.3 templates/envoy-gateway-deployment.yaml: the controller's
    # Deployment, labelled control-plane=envoy-gateway whatever the release (install.yaml and
    # egctl install are the chart rendered; Tetrate's TEG takes it as a subchart). It cannot be
    # adopted: the gateway's routes to models need Envoy Gateway's own configuration to name the
    # function's Envoy AI Gateway as its extension manager (extensionManager exists only there,
    # api/v1alpha1/envoygateway_types.go), so adopting it would mean adopting its AI Gateway too,
    # whose fixed-name controller the function's would collide with. Nor can the function's run
    # beside it: in the upstream default namespace, envoy-gateway-system, the chart's fixed-name
    # Deployment, ServiceAccount and Service envoy-gateway and ConfigMap envoy-gateway-config meet
    # "invalid ownership metadata"; elsewhere both controllers would program every GatewayClass of
    # the default controllerName (internal/provider/kubernetes/controller.go).
    "envoy-gateway": Detector(
        "apps/v1",
        "Deployment",
        labels=(("control-plane", "envoy-gateway"),),
        refusal=(
            "the function can neither adopt it (the gateway's routes need it configured with the "
            "function's Envoy AI Gateway as its extension manager) nor run its own beside it "
            "(they would collide on its objects or both program the same GatewayClasses): the "
            "gateway waits while it runs; uninstalling it takes its Gateways down and leaves its "
            "CRDs at their version (docs/clouds/existing.md)"
        ),
    ),
    # node-feature-discovery 0.18.3 templates/worker.yaml: the worker DaemonSet carries
    # app.kubernetes.io/name (the chart's name, also as the GPU and network operators' subchart)
    # and role=worker, whatever the release is called.
    "node-feature-discovery": Detector(
        "apps/v1",
        "DaemonSet",
        labels=(("app.kubernetes.io/name", "node-feature-discovery"), ("role", "worker")),
    ),
}


def detector_key(component: str) -> str:
    return f"detect-{component}"


@dataclass(frozen=True)
class Decision:
    """install: compose the release. adopted: compose nothing, and ready tells dependents whether
    to go on. waiting: compose nothing yet (why says what for). refused: compose nothing while
    what was found stays as it is (why says what to change)."""

    verdict: str  # "install" | "adopted" | "waiting" | "refused"
    why: str = ""
    ready: bool = False
    owner: str = ""
    # A collection found none this time: its detector is marked so (LOOKED).
    none_found: bool = False

    @property
    def looked(self) -> str:
        """What the detector is marked with (LOOKED), if anything."""
        if self.verdict == "adopted":
            return looking.ADOPTED
        return looking.NONE_FOUND if self.none_found else ""


def detector(xr: str, component: str, provider_config: str, decision: Decision) -> Desired:
    """Ready whatever it finds: it is asked, not waited for. Made once per cluster and answer
    (caches.BODIES), as every reconcile of an Existing cluster composes it."""
    key = detector_key(component)
    return looking.detector(xr, key, DETECTORS[component], provider_config, decision.looked)


# Beside an adopted node-feature-discovery, the function's own NodeFeatureRule gives NVIDIA GPU
# nodes the label the NVIDIA DRA driver places its kubelet plugin by (values.yaml of both lines,
# nvidia-dra-driver-gpu 25.12.0 and dra-driver-nvidia-gpu 0.4.1:
# feature.node.kubernetes.io/pci-10de.present). NFD names PCI labels after the
# worker's deviceLabelFields, by default class and vendor (pci-0302_10de.present), so an NFD
# configured otherwise than the function's never sets it. A rule matches the raw pci.device
# features, which list every device whatever the labelling whitelist (network-operator 26.4.0
# templates/nodefeaturerules.yaml labels NICs the same way). The label is written whole: NFD
# deprecated prefixing unprefixed names in v0.15. PCI classes 0300 and 0302: VGA and 3D
# controllers. NodeFeatureRule came with NFD v0.10.
GPU_RULE_KEY = "gpu-node-feature-rule"
GPU_RULE = {
    "apiVersion": "nfd.k8s-sigs.io/v1alpha1",
    "kind": "NodeFeatureRule",
    "metadata": {"name": "modelplane-nvidia-gpus"},
    "spec": {
        "rules": [
            {
                "name": "NVIDIA GPUs",
                "labels": {GPU_NODE_LABEL: "true"},
                "matchFeatures": [
                    {
                        "feature": "pci.device",
                        "matchExpressions": {
                            "vendor": {"op": "In", "value": ["10de"]},
                            "class": {"op": "In", "value": ["0300", "0302"]},
                        },
                    }
                ],
            }
        ]
    },
}
# What the stack adds beside an adopted component, so the rest works with it as it is configured.
BESIDE = {"node-feature-discovery": (GPU_RULE_KEY, GPU_RULE)}


def beside_keys(component: str) -> tuple[str, ...]:
    """The resource keys of what the function composes beside the component once adopted."""
    return (BESIDE[component][0],) if component in BESIDE else ()


def beside(xr: str, component: str, provider_config: str) -> dict[str, dict]:
    """The Objects the function composes beside an adopted component, by resource key (made
    once per cluster, caches.BODIES)."""
    if component not in BESIDE:
        return {}
    key, manifest = BESIDE[component]
    made_of = ("beside", component, provider_config)
    body = BODIES.item(
        xr, made_of, lambda: kube.manifest_object(xr, key, manifest, provider_config)
    )
    return {key: body}


def members_key(component: str) -> str:
    return looking.found_key(detector_key(component))


def requirement(xr: str, component: str) -> Requirement:
    """The Objects the component's collection made, one per object found."""
    return looking.members_of(xr, detector_key(component))


def decide(
    component: str,
    seen: ObservedResource | None,
    members: list[dict] | None = None,
    adopted_before: bool = False,
) -> Decision:
    """What the detector's observation says about installing the component's release mp-<key>.
    Adopted before (the detector says so, or what is composed beside the adopted component is
    there): a listing not read yet or a passing provider error does not make the stack wait
    again."""
    adopted_before = adopted_before or looking.marked_adopted(seen)
    labelled = bool(DETECTORS[component].labels)
    others: list[dict] = []
    if labelled:
        theirs, why = _found_among(component, seen, members)
        found, others = (theirs[0], theirs[1:]) if theirs else (None, [])
    else:
        found, why = found_object(seen)
    if found is None and why is not None and adopted_before:
        return Decision("adopted", ready=True)
    if found is None:
        return _absent(labelled, seen) if why is None else Decision("waiting", why)
    if _ours(component, found["metadata"].get("annotations") or {}):
        return Decision("install")  # ours, from an earlier install: Helm takes it up again
    owner = owner_of(found)
    refused = _refused(component, found, owner, others)
    if refused:
        return Decision("refused", refused, owner=owner)
    return Decision("adopted", ready=_serving(found), owner=owner)


def _refused(component: str, found: dict, owner: str, others: list[dict]) -> str | None:
    """Why what was found (and others besides it) cannot be adopted, if it cannot."""
    d = DETECTORS[component]
    if d.refusal:
        return f"{owner} runs already ({_named(found)}), and {d.refusal}"
    if d.single and others:
        where = ", ".join(_named(m) for m in (found, *others))
        return (
            f"{len(others) + 1} run ({where}), and each would reconcile the function's objects: "
            "keep one"
        )
    if d.grants and not _grants(found, d.grants):
        return (
            f"the {d.kind} {d.name} of {owner} is not {component}'s (its rules name no "
            f"{d.grants} resources), and the function's release would collide with it: rename "
            "or remove it"
        )
    for flag in d.flags:
        value = _flag(found, flag.name)
        if not flag.allows(value):
            shown = flag.default if value is None else value
            return f"{owner} runs with {flag.name}={shown}, and {flag.why}: {flag.fix}"
    missing = _missing(found, d.needs)
    if missing:
        return (
            f"{owner} is installed but cannot serve the stack: its {d.name} lacks "
            f"{', '.join(missing)}; upgrade it ({component} {CHARTS[component].version} is what "
            "the function would install)"
        )
    return None


def _absent(labelled: bool, seen: ObservedResource | None) -> Decision:
    """None found: installed, once a collection found none twice running (LOOKED)."""
    if not labelled:
        return Decision("install")
    if not looking.looked_before(seen):
        return Decision("waiting", "looking again for one already installed", none_found=True)
    return Decision("install", none_found=True)


def found_object(seen: ObservedResource | None) -> tuple[dict | None, str | None]:
    """(the object found, None), (None, None) when it does not exist, or (None, why) while the
    answer is not in."""
    looking = "looking for one already installed"
    if seen is None:
        return None, looking
    if failures.does_not_exist(seen):
        return None, None
    synced = seen.condition("Synced") or {}
    if synced.get("status") == "False":
        return None, f"{looking}: {failures.words(synced.get('message'))}"
    found = seen.at_provider("manifest")
    if not isinstance(found, dict) or not isinstance(found.get("metadata"), dict):
        return None, looking
    return found, None


def _found_among(
    component: str, seen: ObservedResource | None, members: list[dict] | None
) -> tuple[list[dict], str | None]:
    """As _found, for a collection: the objects found that are not the function's own (by
    namespace and name), once the collection has listed and each member been read."""
    found, why = looking.listed(seen, members, "looking for one already installed")
    if found is None:
        return [], why
    theirs = [m for m in found if not _ours(component, m["metadata"].get("annotations") or {})]
    return sorted(
        theirs, key=lambda m: (m["metadata"].get("namespace", ""), m["metadata"]["name"])
    ), None


def _named(found: dict) -> str:
    meta = found["metadata"]
    return f"{found.get('kind')} {meta.get('namespace') or ''}/{meta.get('name')}"


def _ours(component: str, annotations: dict) -> bool:
    """Whether Helm annotated it as the function's release mp-<key>, in that release's namespace
    (one of that name elsewhere, from another control plane, is not ours to take up)."""
    return (
        annotations.get(HELM_RELEASE) == names.release_name(component)
        and annotations.get(HELM_NAMESPACE) == CHARTS[component].namespace
    )


def results(component: str, decision: Decision, announced: bool = False) -> list[Result]:
    """A Normal event when something is adopted, until its detector is seen marked so (the
    recorder lets 25 events through per object, then one every five minutes: client-go
    tools/record/events_cache.go; one repeated at each reconcile would starve the Warnings, and
    BackendReady names what was adopted for good); a Warning at each reconcile while an adoption
    is refused."""
    if decision.verdict == "adopted" and decision.owner and not announced:
        return [
            Result(
                "Normal",
                f"{component}: adopted {decision.owner}; the function installs none beside it "
                "and never uninstalls it",
                reason="ComponentAdopted",
            )
        ]
    if decision.verdict == "refused":
        return [Result("Warning", f"{component}: {decision.why}", reason="AdoptionRefused")]
    return []


def helm_release(found: dict | None) -> tuple[str, str] | None:
    """(namespace, name) of the Helm release that installed what was found, from Helm's
    annotations; None outside Helm."""
    annotations = ((found or {}).get("metadata") or {}).get("annotations") or {}
    release, namespace = annotations.get(HELM_RELEASE), annotations.get(HELM_NAMESPACE)
    if isinstance(release, str) and isinstance(namespace, str) and release and namespace:
        return namespace, release
    return None


def owner_of(found: dict) -> str:
    """Who installed what was found, in Helm's annotations and the chart's version label."""
    released = helm_release(found)
    version = (found["metadata"].get("labels") or {}).get(VERSION_LABEL)
    what = f"Helm release {released[0]}/{released[1]}" if released else "an install outside Helm"
    return f"{what} ({version})" if version else what


def _missing(crd: dict, needs: tuple[tuple[str, ...], ...]) -> list[str]:
    """The needed fields the CRD's stored version's schema does not have."""
    versions = (crd.get("spec") or {}).get("versions") or []
    stored = next((v for v in versions if isinstance(v, dict) and v.get("storage")), None)
    schema = ((stored or {}).get("schema") or {}).get("openAPIV3Schema") or {}
    out = []
    for path in needs:
        node = schema
        for part in path:
            node = (node.get("properties") or {}).get(part) if isinstance(node, dict) else None
        if node is None:
            out.append(".".join(path))
    return out


def _grants(role: dict, group: str) -> bool:
    """Whether a ClusterRole's rules name resources of the API group."""
    rules = role.get("rules") or []
    return any(isinstance(r, dict) and group in (r.get("apiGroups") or []) for r in rules)


def _flag(workload: dict, name: str) -> str | None:
    """The value a Deployment's or DaemonSet's containers run the flag with, if any: the last
    one given, as Go's flag parsers keep it."""
    template = ((workload.get("spec") or {}).get("template") or {}).get("spec") or {}
    value = None
    for container in template.get("containers") or []:
        if not isinstance(container, dict):
            continue
        line = [str(a) for a in (container.get("command") or []) + (container.get("args") or [])]
        for i, arg in enumerate(line):
            if arg.startswith(f"{name}="):
                value = arg.split("=", 1)[1]
            elif arg == name and i + 1 < len(line):
                value = line[i + 1]
    return value


def _serving(found: dict) -> bool:
    """Whether what was found serves yet: a CRD once Established, a Deployment once Available
    with a replica available (one scaled to 0 is Available too), anything else (a webhook
    configuration, a DaemonSet) as soon as it is there."""
    wanted = {CRD[1]: "Established", "Deployment": "Available"}.get(found.get("kind"))
    if wanted is None:
        return True
    status = found.get("status") or {}
    if found.get("kind") == "Deployment" and not _positive(status.get("availableReplicas")):
        return False
    return any(
        isinstance(c, dict) and c.get("type") == wanted and c.get("status") == "True"
        for c in status.get("conditions") or []
    )


def _positive(count: object) -> bool:
    """A count above 0 (over the wire, protobuf Struct numbers are all doubles)."""
    return isinstance(count, int | float) and not isinstance(count, bool) and count > 0
