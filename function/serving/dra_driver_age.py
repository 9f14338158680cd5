"""On an Existing cluster, how old an adopted NVIDIA DRA driver is, read from its own DaemonSets.

The DeviceClass gpu.nvidia.com says a DRA driver runs (adoption.py), not which one: both lines of
the driver install it the same and unlabelled, and the field 25.12.0 added to it
(spec.extendedResourceName) is dropped by every API server without the DRAExtendedResource
feature gate (a gate to turn on in 1.35: dra-driver-nvidia-gpu 0.4.1 templates/validation.yaml).
The Helm release its annotations name labels the release's DaemonSets with
app.kubernetes.io/instance (the release) and app.kubernetes.io/version (the chart's appVersion),
in both lines (templates/_helpers.tpl, whatever nameOverride says). So once a Helm-installed
driver is adopted, an ObservedObjectCollection lists that release's DaemonSets in its namespace,
and a driver older than the function serves beside gets a Warning at each reconcile: NVIDIA's
line before 25.12.0, whose kubelet plugin predates the admin-access claims every GPU probe makes
(handled from v25.12.0, cmd/gpu-kubelet-plugin/prepared.go). The maintained line's versions start
at 0.4.0; an earlier 0.x is one of NVIDIA's builds from before its 25.3 releases. A driver
installed outside Helm (the GPU Operator's) is not looked at.
"""

import re
from collections.abc import Mapping

from function.inputs import ObservedResource
from function.output import Desired, Requirement, Result
from function.serving import adoption, looking
from function.serving.adoption import Decision, Detector
from function.versions import CHARTS

COMPONENT = "nvidia-dra-driver"
KEY = "detect-nvidia-dra-driver-daemonsets"
REASON = "AdoptedOutdated"
INSTANCE_LABEL = "app.kubernetes.io/instance"
# The first of each line that knows admin-access claims: NVIDIA's (YY.MM.P), the maintained one.
ADMIN_ACCESS_FROM = {"nvidia": (25, 12, 0), "maintained": (0, 4, 0)}
_VERSION = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)")


def compose(
    xr: str,
    component: str,
    provider_config: str,
    observed: Mapping[str, ObservedResource],
    required: Mapping[str, list[dict]],
    decision: Decision | None,
) -> tuple[dict[str, Desired], list[Result]]:
    """The collection of the adopted driver's DaemonSets, and a Warning naming each one too old.
    Composed once the driver is adopted from a Helm release, kept once observed."""
    resources = looking.kept((KEY,), observed)
    if component != COMPONENT or decision is None or decision.verdict != "adopted":
        return resources, []
    found, _ = adoption.found_object(observed.get(adoption.detector_key(COMPONENT)))
    released = adoption.helm_release(found)
    if released is None:
        return resources, []
    namespace, release = released
    sought = Detector("apps/v1", "DaemonSet", labels=((INSTANCE_LABEL, release),))
    resources[KEY] = looking.detector(xr, KEY, sought, provider_config, "", namespace=namespace)
    daemonsets, _ = looking.listed(observed.get(KEY), required.get(looking.found_key(KEY)), "")
    old = sorted(
        f"{d['metadata'].get('name')} ({version})"
        for d in daemonsets or []
        if outdated(version := (d["metadata"].get("labels") or {}).get(adoption.VERSION_LABEL))
    )
    if not old:
        return resources, []
    chart = CHARTS[COMPONENT]
    return resources, [
        Result(
            "Warning",
            f"{COMPONENT}: adopted Helm release {namespace}/{release} runs {', '.join(old)}, "
            "a driver older than 25.12.0 whose kubelet plugin predates the admin-access claims "
            f"the GPU probes make: upgrade it to {chart.name} {chart.version} or later (what "
            "the function would install)",
            reason=REASON,
        )
    ]


def requirements(xr: str, observed: Mapping[str, ObservedResource]) -> dict[str, Requirement]:
    """The DaemonSets the collection found, once it is observed."""
    return {looking.found_key(KEY): looking.members_of(xr, KEY)} if KEY in observed else {}


def outdated(version: object) -> bool:
    """Whether a DRA driver of this appVersion predates admin-access claims; unknown: no."""
    match = _VERSION.match(version) if isinstance(version, str) else None
    if match is None:
        return False
    parsed = tuple(int(part) for part in match.groups())
    line = "nvidia" if parsed[0] >= 25 else "maintained" if parsed[0] == 0 else None
    return line is not None and parsed < ADMIN_ACCESS_FROM[line]
