"""On an Existing cluster, what must not run beside a component the function is to install.

The NVIDIA DRA driver cannot serve GPUs on a node where the standard GPU device plugin runs: both
would hand out the same GPUs (nvidia-dra-driver-gpu 25.12.0 templates/validation.yaml refuses to
render unless gpuResourcesEnabledOverride says no device plugin runs; the function sets it, as
the clusters it provisions run none). So before installing the driver, the function lists the
device plugin's DaemonSets as its two usual installers label them, through
ObservedObjectCollections as for node-feature-discovery's workers (adoption.py), and one scheduled
on any node holds the install with a Warning saying what to change. A device plugin installed
otherwise (the static manifest, which labels its DaemonSet with nothing; one built into the node
image) is not seen (docs/clouds/existing.md).
"""

from collections.abc import Mapping
from dataclasses import dataclass

from function.inputs import ObservedResource
from function.output import Desired, Requirement, Result
from function.serving import adoption
from function.serving.adoption import Decision, Detector


@dataclass(frozen=True)
class Conflict:
    """DaemonSets carrying the detector's labels (but for names ending so: other DaemonSets of
    the same release), found running: what they are and how to turn them off."""

    key: str
    detector: Detector
    what: str
    fix: str
    other_names: tuple[str, ...] = ()


DAEMON_SET = ("apps/v1", "DaemonSet")
CONFLICTS: dict[str, tuple[Conflict, ...]] = {
    "nvidia-dra-driver": (
        # gpu-operator assets/state-device-plugin/0500_daemonset.yaml (v24.3 to v26.7):
        # nvidia-device-plugin-daemonset, labelled app=nvidia-device-plugin-daemonset.
        Conflict(
            "detect-gpu-operator-device-plugin",
            Detector(*DAEMON_SET, labels=(("app", "nvidia-device-plugin-daemonset"),)),
            "the GPU Operator's device plugin",
            "set its ClusterPolicy's devicePlugin.enabled to false, or label each GPU node "
            "nvidia.com/gpu.deploy.device-plugin=false",
        ),
        # k8s-device-plugin deployments/helm/nvidia-device-plugin (v0.17 to v0.20): the chart's
        # labels, which its gpu-feature-discovery and mps-control-daemon DaemonSets carry too.
        Conflict(
            "detect-nvidia-device-plugin",
            Detector(*DAEMON_SET, labels=(("app.kubernetes.io/name", "nvidia-device-plugin"),)),
            "the nvidia-device-plugin chart's device plugin",
            "uninstall that release, or set its devicePlugin.enabled to false",
            other_names=("-gpu-feature-discovery", "-mps-control-daemon"),
        ),
    )
}


def keys(component: str) -> tuple[str, ...]:
    return tuple(c.key for c in CONFLICTS.get(component, ()))


def requirements(xr: str, component: str) -> dict[str, Requirement]:
    """The DaemonSets each of the component's conflict collections found."""
    return {
        adoption.found_key(c.key): adoption.members_of(xr, c.key)
        for c in CONFLICTS.get(component, ())
    }


def check(
    xr: str,
    component: str,
    provider_config: str,
    observed: Mapping[str, ObservedResource],
    required: Mapping[str, list[dict]],
) -> tuple[dict[str, Desired], Decision]:
    """The collections that look for what must not run beside the component, and whether the
    function may install it: once every collection found none twice running, as for NFD."""
    resources: dict[str, Desired] = {}
    refused: list[str] = []
    waiting: list[str] = []
    for c in CONFLICTS.get(component, ()):
        seen = observed.get(c.key)
        found, why = adoption.listed(
            seen, required.get(adoption.found_key(c.key)), f"looking for {c.what}"
        )
        running = [m for m in found or () if _running(c, m)]
        none = found is not None and not running
        looked = adoption.NONE_FOUND if none else ""
        resources[c.key] = adoption.looking(xr, c.key, c.detector, provider_config, looked)
        if running:
            refused.append(_refusal(c, running))
        elif found is None:
            waiting.append(why)
        elif not adoption.looked_before(seen):
            waiting.append(f"looking again for {c.what}")
    if refused:
        return resources, Decision("waiting", "; ".join(refused), owner="a GPU device plugin")
    if waiting:
        return resources, Decision("waiting", "; ".join(waiting))
    return resources, Decision("install")


def results(component: str, decision: Decision) -> list[Result]:
    if decision.verdict != "waiting" or not decision.owner:
        return []
    return [Result("Warning", f"{component}: {decision.why}", reason="ConflictingComponent")]


def _running(c: Conflict, daemon_set: dict) -> bool:
    """Scheduled on at least one node: one kept off every node (the GPU Operator's where each
    node is labelled not to get it) counts 0."""
    name = daemon_set["metadata"].get("name", "")
    if any(name.endswith(suffix) for suffix in c.other_names):
        return False
    scheduled = (daemon_set.get("status") or {}).get("desiredNumberScheduled")
    return isinstance(scheduled, int) and scheduled > 0


def _refusal(c: Conflict, running: list[dict]) -> str:
    where = ", ".join(
        f"{m['metadata'].get('namespace', '')}/{m['metadata']['name']} "
        f"({m['status']['desiredNumberScheduled']} nodes)"
        for m in sorted(
            running, key=lambda m: (m["metadata"].get("namespace", ""), m["metadata"]["name"])
        )
    )
    return (
        f"{c.what} runs beside it (DaemonSet {where}), and the DRA driver cannot serve GPUs on the "
        f"nodes it runs on (both would hand out the same GPUs): {c.fix}; the DRA driver is "
        "installed once none is scheduled"
    )
