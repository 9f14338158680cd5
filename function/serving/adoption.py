"""On an Existing cluster, a component someone else already runs is adopted, never installed
beside it.

Before a component the table marks adoptable is first installed there, a read-only detector looks
for what says it is present:
- cert-manager: its Certificate CRD, by name, through an Observe-only Object; LeaderWorkerSet,
  Grove, the KAI Scheduler and the NVIDIA DRA driver: a cluster-scoped object their charts name
  the same whatever the release, likewise;
- node-feature-discovery and trust-manager: every DaemonSet labelled as NFD's worker, every
  Deployment labelled as trust-manager, in any namespace and under any release name, through an
  ObservedObjectCollection; provider-kubernetes makes one Observe-only
  Object per match, labelled with the collection's name (v1.3.1 internal/controller/namespaced/
  observedobjectcollection), and Crossplane hands those over as a required resource. Its CRDs
  cannot say it runs: Helm installs them from crds/, unlabelled, and never removes them.
Present and not ours (its Helm release is not mp-<key>, or it came from no release at all): the
function composes nothing that touches it, and what comes after it waits for that object instead
of the release, so Helm never meets "invalid ownership metadata" and no second controller fights
the first. Absent: the release is installed. What the function installed stays its own: once its
release is observed, the detector's answer no longer matters, and nothing installed by someone
else is ever removed, since the function never composed it.

provider-kubernetes reports an Observe-only Object whose object does not exist as Synced=False,
"cannot observe external resource: external resource does not exist" (crossplane-runtime v2.1
managed reconciler, ShouldOnlyObserve): for a detector that is the answer "absent", not a failure.
"""

from dataclasses import dataclass

from function import failures, kube, names
from function.caches import BODIES
from function.inputs import ObservedResource
from function.output import Desired, Requirement, Result
from function.serving.components import GPU_NODE_LABEL
from function.versions import CHARTS

HELM_RELEASE = "meta.helm.sh/release-name"
HELM_NAMESPACE = "meta.helm.sh/release-namespace"
VERSION_LABEL = "app.kubernetes.io/version"
CRD = ("apiextensions.k8s.io/v1", "CustomResourceDefinition")
WEBHOOK = ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration")
COLLECTION_KIND = "ObservedObjectCollection"
# Crossplane hands over required resources from its informer cache (v2.2 core.go,
# NewExistingRequiredResourcesFetcher), and the collection turns Ready just after making its
# members: a reconcile woken by that may not see them yet. So "none" counts only when a second
# reconcile, after the detector was marked with the first answer, finds none again.
# Once adopted, the detector is marked so too: a passing error or a listing not read yet then keeps
# the adoption instead of making the stack wait again.
LOOKED = "modelplane.ai/looked"
NONE_FOUND = "none-found"
ADOPTED = "adopted"
# The label provider-kubernetes v1.3.1 puts on each Object of a collection, valued its name.
MEMBER_LABEL = "kubernetes.crossplane.io/owned-by-collection"


@dataclass(frozen=True)
class Flag:
    """A command-line flag, `--name=value` or `--name value`, and the value the stack needs;
    default is what the binary takes without it, why what breaks with another."""

    name: str
    wanted: str
    default: str
    why: str


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
    # nvidia-dra-driver-gpu 25.12.0 installs the DeviceClass GPUs are claimed by under a fixed
    # name when GPUs are enabled (templates/deviceclass-gpu.yaml): the class the GPU probes and
    # the models' claims name, and where a second release would collide.
    "nvidia-dra-driver": Detector("resource.k8s.io/v1", "DeviceClass", "gpu.nvidia.com"),
    # trust-manager v0.24.0 names its ClusterRole and ValidatingWebhookConfiguration after the
    # chart (templates/clusterrole.yaml, webhook.yaml: "trust-manager" unless nameOverride), where
    # a second release meets "invalid ownership metadata"; two would both reconcile every Bundle.
    # Its Deployment carries app.kubernetes.io/name whatever the release, and the namespace it reads
    # Bundle sources from in its args (templates/deployment.yaml; the binary's default is
    # cert-manager): the gateway's CA Secret is in the function's namespace.
    "trust-manager": Detector(
        "apps/v1",
        "Deployment",
        labels=(("app.kubernetes.io/name", "trust-manager"),),
        flags=(
            Flag(
                "--trust-namespace",
                names.SYSTEM_NAMESPACE,
                "cert-manager",
                "it reads a Bundle's sources only there, and the gateway's CA is in "
                f"{names.SYSTEM_NAMESPACE}",
            ),
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
    to go on. waiting: compose nothing yet (why says what for)."""

    verdict: str  # "install" | "adopted" | "waiting"
    why: str = ""
    ready: bool = False
    owner: str = ""
    # A collection found none this time: its detector is marked so (LOOKED).
    none_found: bool = False

    @property
    def looked(self) -> str:
        """What the detector is marked with (LOOKED), if anything."""
        if self.verdict == "adopted":
            return ADOPTED
        return NONE_FOUND if self.none_found else ""


def detector(xr: str, component: str, provider_config: str, decision: Decision) -> Desired:
    """Ready whatever it finds: it is asked, not waited for. Made once per cluster and answer
    (caches.BODIES), as every reconcile of an Existing cluster composes it."""
    key = detector_key(component)
    return looking(xr, key, DETECTORS[component], provider_config, decision.looked)


def looking(xr: str, key: str, d: Detector, provider_config: str, looked: str) -> Desired:
    """The detector d under the resource key, marked with what it found (LOOKED)."""
    made_of = ("detector", key, looked, provider_config)
    body = BODIES.item(xr, made_of, lambda: _make_detector(xr, key, d, provider_config, looked))
    return Desired(body, ready=True, shared=True)


def _make_detector(xr: str, key: str, d: Detector, provider_config: str, looked: str) -> dict:
    if d.labels:
        body = collection(xr, key, d, provider_config)
    else:
        manifest = {"apiVersion": d.api_version, "kind": d.kind, "metadata": {"name": d.name}}
        body = kube.manifest_object(xr, key, manifest, provider_config, policies=["Observe"])
    if looked:
        body["metadata"]["annotations"] = {
            **body["metadata"].get("annotations", {}),
            LOOKED: looked,
        }
    return body


def collection(xr: str, key: str, d: Detector, provider_config: str) -> dict:
    """An ObservedObjectCollection of every object of d's kind carrying d's labels, cluster-wide."""
    return {
        "apiVersion": names.OBJECT_API,
        "kind": COLLECTION_KIND,
        "metadata": {"name": names.child_name(xr, key), "namespace": names.SYSTEM_NAMESPACE},
        "spec": {
            "providerConfigRef": {"kind": names.CLUSTER_PROVIDER_CONFIG, "name": provider_config},
            "observeObjects": {
                "apiVersion": d.api_version,
                "kind": d.kind,
                "selector": {"matchLabels": dict(d.labels)},
            },
        },
    }


# Beside an adopted node-feature-discovery, the function's own NodeFeatureRule gives NVIDIA GPU
# nodes the label the NVIDIA DRA driver places its kubelet plugin by (nvidia-dra-driver-gpu 25.12.0
# values.yaml: feature.node.kubernetes.io/pci-10de.present). NFD names PCI labels after the
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
    return found_key(detector_key(component))


def found_key(key: str) -> str:
    """Where Crossplane hands over the members of the collection composed under key."""
    return f"{key}-found"


def requirement(xr: str, component: str) -> Requirement:
    """The Objects the component's collection made, one per object found."""
    return members_of(xr, detector_key(component))


def members_of(xr: str, key: str) -> Requirement:
    """The Objects the collection composed under key made, one per object found."""
    name = names.child_name(xr, key)
    return Requirement(
        names.OBJECT_API,
        "Object",
        namespace=names.SYSTEM_NAMESPACE,
        labels={MEMBER_LABEL: name},
    )


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
    adopted_before = adopted_before or marked_adopted(seen)
    labelled = bool(DETECTORS[component].labels)
    if labelled:
        found, why = _found_among(component, seen, members)
    else:
        found, why = _found(seen)
    if found is None and why is not None and adopted_before:
        return Decision("adopted", ready=True)
    if found is None:
        return _absent(labelled, seen) if why is None else Decision("waiting", why)
    meta = found["metadata"]
    annotations = meta.get("annotations") or {}
    release = annotations.get(HELM_RELEASE)
    if _ours(component, annotations):
        return Decision("install")  # ours, from an earlier install: Helm takes it up again
    owner = _owner(release, annotations.get(HELM_NAMESPACE), (meta.get("labels") or {}))
    refused = _refused(component, found, owner)
    if refused:
        return Decision("waiting", refused, owner=owner)
    return Decision("adopted", ready=_serving(found), owner=owner)


def _refused(component: str, found: dict, owner: str) -> str | None:
    """Why what was found cannot be adopted, if it cannot."""
    d = DETECTORS[component]
    if d.grants and not _grants(found, d.grants):
        return (
            f"the {d.kind} {d.name} of {owner} is not {component}'s (its rules name no "
            f"{d.grants} resources), and the function's release would collide with it: rename "
            "or remove it"
        )
    for flag in d.flags:
        value = _flag(found, flag.name)
        if value is None:
            value = flag.default
        if value != flag.wanted:
            return (
                f"{owner} runs with {flag.name}={value}, and {flag.why}: run it with "
                f"{flag.name}={flag.wanted}, or uninstall it and the function installs its own"
            )
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
    if not looked_before(seen):
        return Decision("waiting", "looking again for one already installed", none_found=True)
    return Decision("install", none_found=True)


def marked_adopted(seen: ObservedResource | None) -> bool:
    """Whether the detector found one to adopt at an earlier reconcile (LOOKED)."""
    return seen is not None and seen.get("metadata", "annotations", LOOKED) == ADOPTED


def looked_before(seen: ObservedResource | None) -> bool:
    """Whether the collection found none at the reconcile before (LOOKED)."""
    return (seen.get("metadata", "annotations", LOOKED) if seen else None) == NONE_FOUND


def _found(seen: ObservedResource | None) -> tuple[dict | None, str | None]:
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
) -> tuple[dict | None, str | None]:
    """As _found, for a collection: the first object found that is not the function's own
    (by namespace and name), once the collection has listed and each member been read."""
    found, why = listed(seen, members, "looking for one already installed")
    if found is None:
        return None, why
    theirs = [m for m in found if not _ours(component, m["metadata"].get("annotations") or {})]
    if not theirs:
        return None, None
    return min(
        theirs, key=lambda m: (m["metadata"].get("namespace", ""), m["metadata"]["name"])
    ), None


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


def _ours(component: str, annotations: dict) -> bool:
    """Whether Helm annotated it as the function's release mp-<key>, in that release's namespace
    (one of that name elsewhere, from another control plane, is not ours to take up)."""
    return (
        annotations.get(HELM_RELEASE) == f"mp-{component}"
        and annotations.get(HELM_NAMESPACE) == CHARTS[component].namespace
    )


def results(component: str, decision: Decision) -> list[Result]:
    if decision.verdict == "adopted" and decision.owner:
        return [
            Result(
                "Normal",
                f"{component}: adopted {decision.owner}; the function installs none beside it "
                "and never uninstalls it",
                reason="ComponentAdopted",
            )
        ]
    if decision.verdict == "waiting" and decision.owner:
        return [Result("Warning", f"{component}: {decision.why}", reason="AdoptionRefused")]
    return []


def _owner(release: str | None, namespace: str | None, labels: dict) -> str:
    version = labels.get(VERSION_LABEL)
    what = f"Helm release {namespace}/{release}" if release else "an install outside Helm"
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
    """The value a Deployment's or DaemonSet's containers run the flag with, if any."""
    template = ((workload.get("spec") or {}).get("template") or {}).get("spec") or {}
    for container in template.get("containers") or []:
        if not isinstance(container, dict):
            continue
        line = [str(a) for a in (container.get("command") or []) + (container.get("args") or [])]
        for i, arg in enumerate(line):
            if arg.startswith(f"{name}="):
                return arg.split("=", 1)[1]
            if arg == name and i + 1 < len(line):
                return line[i + 1]
    return None


def _serving(found: dict) -> bool:
    """Whether what was found serves yet: a CRD once Established, a Deployment once Available,
    anything else (a webhook configuration, a DaemonSet) as soon as it is there."""
    wanted = {CRD[1]: "Established", "Deployment": "Available"}.get(found.get("kind"))
    if wanted is None:
        return True
    conditions = (found.get("status") or {}).get("conditions") or []
    return any(
        isinstance(c, dict) and c.get("type") == wanted and c.get("status") == "True"
        for c in conditions
    )
