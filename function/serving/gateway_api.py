"""On an Existing cluster, Gateway API CRDs someone else installed, found before Envoy Gateway is.

gateway-helm v1.8.3 carries the Gateway API bundle GATEWAY_API_BUNDLE (v1.5.1, experimental
channel) in its crds/. Helm 4 (provider-helm v1.4.0) installs crds/ by server-side apply and
forces no conflict (helm v4.2.3 pkg/action/install.go installCRDs; provider-helm v1.4.0
pkg/clients/helm/client.go sets ForceConflicts only from ssaForceConflicts): over the same bundle
the apply changes nothing, over CRDs another manager wrote at any other version or channel the
install fails on their fields, and forced it would overwrite their owner's CRDs under their
controllers. So before the function's Envoy Gateway is first installed there, an Observe-only
Object reads the Gateway CRD:
- absent: installed, CRDs and all;
- the bundle the chart carries: installed (Helm's apply shares the fields, changes none);
- anything else: the gateway waits, with a Warning naming the version, channel and owner found,
  one older than the chart's said too old, and nothing is overwritten.
What the function cannot do yet is install Envoy Gateway beside another owner's different bundle
(without crds/ its own eight CRDs would be missing: docs/stack.md says why they cannot be
applied apart). On every Existing cluster the chart's cluster-wide safe-upgrade
ValidatingAdmissionPolicy is left out (components.py), so it never refuses the owner's next CRD
install.
"""

import re
from collections.abc import Mapping

from function.inputs import ObservedResource
from function.output import Desired, Result
from function.serving import adoption, looking
from function.serving.adoption import CRD, Decision, Detector
from function.versions import CHARTS, GATEWAY_API_BUNDLE

KEY = "detect-gateway-api"
COMPONENT = "envoy-gateway"
REASON = "GatewayAPIOwned"
BUNDLE_VERSION = "gateway.networking.k8s.io/bundle-version"
CHANNEL = "gateway.networking.k8s.io/channel"
# The smallest CRD every Gateway API bundle since v0.1 has (17 KB as JSON in v1.5.1; Gateway's is
# 123 KB): the observed object comes back in every request.
SOUGHT = Detector(*CRD, "gatewayclasses.gateway.networking.k8s.io")


def compose(
    xr: str,
    component: str,
    provider_config: str,
    observed: Mapping[str, ObservedResource],
    decision: Decision | None,
) -> tuple[dict[str, Desired], Decision | None, list[Result]]:
    """The detector, and the decision it leaves for Envoy Gateway's first install (held while
    another owner's different bundle is there, or the answer is not in). It looks only once the
    release is to be installed, and stays once composed."""
    resources = looking.kept((KEY,), observed)
    if component != COMPONENT or decision is None or decision.verdict != "install":
        return resources, decision, []
    resources[KEY] = looking.detector(xr, KEY, SOUGHT, provider_config, "")
    found, why = adoption.found_object(observed.get(KEY))
    if found is None:
        held = None if why is None else Decision("waiting", f"Gateway API CRDs: {why}")
        return resources, held or decision, []
    refused = refusal(found)
    if refused is None:
        return resources, decision, []
    held = Decision("refused", refused)
    return resources, held, [Result("Warning", f"{COMPONENT}: {refused}", reason=REASON)]


def absent(seen: ObservedResource | None) -> bool:
    """Whether the detector found no Gateway API CRDs (so the function's own go there)."""
    found, why = adoption.found_object(seen)
    return found is None and why is None


def refusal(crd: dict) -> str | None:
    """Why Envoy Gateway's release cannot be installed over the Gateway CRD found, if not."""
    annotations = crd["metadata"].get("annotations") or {}
    version, channel = annotations.get(BUNDLE_VERSION), annotations.get(CHANNEL)
    if (version, channel) == GATEWAY_API_BUNDLE:
        return None
    wanted, wanted_channel = GATEWAY_API_BUNDLE
    chart = CHARTS[COMPONENT]
    found = f"{version or 'of no bundle version'}, {channel or 'no'} channel"
    old = _older(version, wanted)
    too_old = (
        f", older than the {_minor(wanted)} Envoy Gateway {chart.version} is built for"
        if old
        else ""
    )
    return (
        f"the cluster's Gateway API CRDs are {found}{too_old} (CustomResourceDefinition "
        f"{SOUGHT.name}, {adoption.owner_of(crd)}); Envoy Gateway {chart.version} brings "
        f"{wanted}, {wanted_channel} channel, and its install would apply them over their "
        "owner's (nothing is overwritten: the gateway waits): move them to "
        f"{wanted} ({wanted_channel} channel), or remove them so the function installs its own"
    )


VERSION = re.compile(r"v(\d+)\.(\d+)\.(\d+)")


def _parts(version: str | None) -> tuple[int, ...] | None:
    matched = VERSION.fullmatch(version or "")
    return tuple(int(p) for p in matched.groups()) if matched else None


def _older(version: str | None, than: str) -> bool:
    """Older than the minor line of `than` (a version that cannot be read counts as older)."""
    found, wanted = _parts(version), _parts(than)
    return found is None or (wanted is not None and found[:2] < wanted[:2])


def _minor(version: str) -> str:
    parts = _parts(version)
    return f"v{parts[0]}.{parts[1]}" if parts else version
