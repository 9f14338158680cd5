"""On an Existing cluster, a component someone else already runs is adopted, never installed
beside it.

Before a component the table marks adoptable is first installed there, an Observe-only Object
reads the object that says it is present (cert-manager: its Certificate CRD). Present and not ours
(the CRD's Helm release is not mp-<key>, or it came from no release at all): the function composes
nothing that touches it, and what comes after it waits for that object instead of the release,
so Helm never meets "invalid ownership metadata" and no second controller fights the first.
Absent: the release is installed. What the function installed stays its own: once its release is
observed, the detector's answer no longer matters, and nothing installed by someone else is ever
removed, since the function never composed it.

provider-kubernetes reports an Observe-only Object whose object does not exist as Synced=False,
"cannot observe external resource: external resource does not exist" (crossplane-runtime v2.1
managed reconciler, ShouldOnlyObserve): for a detector that is the answer "absent", not a failure.
"""

from dataclasses import dataclass

from function import failures, kube
from function.inputs import ObservedResource
from function.output import Desired, Result
from function.versions import CHARTS

DOES_NOT_EXIST = "external resource does not exist"
HELM_RELEASE = "meta.helm.sh/release-name"
HELM_NAMESPACE = "meta.helm.sh/release-namespace"
VERSION_LABEL = "app.kubernetes.io/version"
CRD = ("apiextensions.k8s.io/v1", "CustomResourceDefinition")


@dataclass(frozen=True)
class Detector:
    """The object whose presence says the component runs, and what the stack needs of it: paths
    into the served version's schema that must exist (the fields the stack's objects set)."""

    api_version: str
    kind: str
    name: str
    needs: tuple[tuple[str, ...], ...] = ()


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
}


def detector_key(component: str) -> str:
    return f"detect-{component}"


# A detector's "does not exist" is an answer, not a failure to report.
DETECTOR_KEYS = frozenset(detector_key(c) for c in DETECTORS)


@dataclass(frozen=True)
class Decision:
    """install: compose the release. adopted: compose nothing, and ready tells dependents whether
    to go on. waiting: compose nothing yet (why says what for)."""

    verdict: str  # "install" | "adopted" | "waiting"
    why: str = ""
    ready: bool = False
    owner: str = ""


def detector(xr: str, component: str, provider_config: str) -> Desired:
    """Ready whatever it finds: it is asked, not waited for."""
    d = DETECTORS[component]
    manifest = {"apiVersion": d.api_version, "kind": d.kind, "metadata": {"name": d.name}}
    body = kube.manifest_object(
        xr, detector_key(component), manifest, provider_config, policies=["Observe"]
    )
    return Desired(body, ready=True)


def decide(component: str, seen: ObservedResource | None) -> Decision:
    """What the detector's observation says about installing the component's release mp-<key>."""
    found, why = _found(seen)
    if found is None:
        return Decision("install") if why is None else Decision("waiting", why)
    meta = found["metadata"]
    annotations = meta.get("annotations") or {}
    release = annotations.get(HELM_RELEASE)
    if release == f"mp-{component}":
        return Decision("install")  # ours, from an earlier install: Helm takes it up again
    owner = _owner(release, annotations.get(HELM_NAMESPACE), (meta.get("labels") or {}))
    missing = _missing(found, DETECTORS[component].needs)
    if missing:
        return Decision(
            "waiting",
            f"{owner} is installed but cannot serve the stack: its {DETECTORS[component].name} "
            f"lacks {', '.join(missing)}; upgrade it ({component} {CHARTS[component].version} is "
            "what the function would install)",
            owner=owner,
        )
    return Decision("adopted", ready=_established(found), owner=owner)


def _found(seen: ObservedResource | None) -> tuple[dict | None, str | None]:
    """(the object found, None), (None, None) when it does not exist, or (None, why) while the
    answer is not in."""
    looking = "looking for one already installed"
    if seen is None:
        return None, looking
    synced = seen.condition("Synced") or {}
    if synced.get("status") == "False":
        if DOES_NOT_EXIST in str(synced.get("message", "")):
            return None, None
        return None, f"{looking}: {failures.words(synced.get('message'))}"
    found = seen.at_provider("manifest")
    if not isinstance(found, dict) or not isinstance(found.get("metadata"), dict):
        return None, looking
    return found, None


def results(component: str, decision: Decision) -> list[Result]:
    if decision.verdict == "adopted":
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


def _established(crd: dict) -> bool:
    conditions = (crd.get("status") or {}).get("conditions") or []
    return any(
        isinstance(c, dict) and c.get("type") == "Established" and c.get("status") == "True"
        for c in conditions
    )
