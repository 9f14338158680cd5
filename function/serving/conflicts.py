"""On an Existing cluster, what must not run beside a component the function is to install.

The NVIDIA DRA driver cannot serve GPUs on a node where the standard GPU device plugin runs: both
would hand out the same GPUs (dra-driver-nvidia-gpu 0.4.1 templates/validation.yaml refuses to
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
from function.serving import adoption, looking
from function.serving.adoption import Decision, Detector


@dataclass(frozen=True)
class Conflict:
    """DaemonSets carrying the detector's labels (but for names ending so: other DaemonSets of
    the same release), found scheduled on a node: what they are, why they must not run beside
    the component, and how to turn them off."""

    key: str
    detector: Detector
    what: str
    harm: str
    fix: str
    other_names: tuple[str, ...] = ()


REASON = "ConflictingComponent"
DAEMON_SET = ("apps/v1", "DaemonSet")
BESIDE_DRA = (
    "the DRA driver cannot serve GPUs on the nodes it runs on (both would hand out the same GPUs)"
)
CONFLICTS: dict[str, tuple[Conflict, ...]] = {
    "nvidia-dra-driver": (
        # gpu-operator assets/state-device-plugin/0500_daemonset.yaml (v24.3 to v26.7):
        # nvidia-device-plugin-daemonset, labelled app=nvidia-device-plugin-daemonset.
        Conflict(
            "detect-gpu-operator-device-plugin",
            Detector(*DAEMON_SET, labels=(("app", "nvidia-device-plugin-daemonset"),)),
            "the GPU Operator's device plugin",
            BESIDE_DRA,
            "set its ClusterPolicy's devicePlugin.enabled to false, or label each GPU node "
            "nvidia.com/gpu.deploy.device-plugin=false",
        ),
        # k8s-device-plugin deployments/helm/nvidia-device-plugin (v0.17 to v0.20): the chart's
        # labels, which its gpu-feature-discovery and mps-control-daemon DaemonSets carry too.
        Conflict(
            "detect-nvidia-device-plugin",
            Detector(*DAEMON_SET, labels=(("app.kubernetes.io/name", "nvidia-device-plugin"),)),
            "the nvidia-device-plugin chart's device plugin",
            BESIDE_DRA,
            "uninstall that release, or set its devicePlugin.enabled to false",
            other_names=("-gpu-feature-discovery", "-mps-control-daemon"),
        ),
    )
}


def requirements(
    xr: str, component: str, observed: Mapping[str, ObservedResource]
) -> dict[str, Requirement]:
    """The DaemonSets each of the component's conflict collections found, once composed, while
    the component is not adopted (its detector says so)."""
    if looking.marked_adopted(observed.get(adoption.detector_key(component))):
        return {}
    return {
        looking.found_key(c.key): looking.members_of(xr, c.key)
        for c in CONFLICTS.get(component, ())
        if c.key in observed
    }


def compose(
    xr: str,
    component: str,
    provider_config: str,
    observed: Mapping[str, ObservedResource],
    required: Mapping[str, list[dict]],
    decision: Decision | None,
) -> tuple[dict[str, Desired], Decision | None, list[Result]]:
    """The collections that look for what must not run beside the component, the decision they
    leave (the component's install held while one runs or the answer is not in), and the
    Warnings. They look only once the component is to be installed (None: the function's release
    is there, or the cluster cannot be reached), and stay once composed."""
    resources = looking.kept((c.key for c in CONFLICTS.get(component, ())), observed)
    if decision is None or decision.verdict != "install" or component not in CONFLICTS:
        return resources, decision, []
    refused, waiting = [], []
    for c in CONFLICTS[component]:
        seen = observed.get(c.key)
        found, why = looking.listed(
            seen, required.get(looking.found_key(c.key)), f"looking for {c.what}"
        )
        counted = [(m, _scheduled(m)) for m in found or () if not _other(c, m)]
        running = [(m, n) for m, n in counted if isinstance(n, int) and n > 0]
        uncounted = [_named(m) for m, n in counted if not isinstance(n, int)]
        none = found is not None and not running and not uncounted
        looked = looking.NONE_FOUND if none else ""
        resources[c.key] = looking.detector(xr, c.key, c.detector, provider_config, looked)
        if running:
            refused.append(_refusal(c, running))
        elif found is None:
            waiting.append(why)
        elif uncounted:
            waiting.append(f"looking for {c.what}: {'; '.join(uncounted)}")
        elif not looking.looked_before(seen):
            waiting.append(f"looking again for {c.what}")
    if refused:
        held = Decision("refused", "; ".join(refused))
        return resources, held, [Result("Warning", f"{component}: {held.why}", reason=REASON)]
    if waiting:
        return resources, Decision("waiting", "; ".join(waiting)), []
    return resources, decision, []


def _other(c: Conflict, daemon_set: dict) -> bool:
    """Another DaemonSet of the same release (the chart's feature discovery, MPS daemon)."""
    name = daemon_set["metadata"].get("name")
    return isinstance(name, str) and name.endswith(c.other_names)


def _scheduled(daemon_set: dict) -> int | str:
    """On how many nodes it is scheduled (0: kept off every node, as the GPU Operator's is where
    each node is labelled not to get it), or what stands there instead of a count (no status
    yet, before the DaemonSet controller wrote it, or something else)."""
    status = daemon_set.get("status")
    count = status.get("desiredNumberScheduled") if isinstance(status, dict) else None
    # Required resources come over the wire as protobuf Structs, whose numbers are all doubles.
    if isinstance(count, int | float) and not isinstance(count, bool) and float(count).is_integer():
        return int(count)
    return f"status.desiredNumberScheduled is {count!r}"


def _named(daemon_set: dict) -> str:
    meta = daemon_set["metadata"]
    return f"DaemonSet {meta.get('namespace') or ''}/{meta.get('name')}: " + str(
        _scheduled(daemon_set)
    )


def _refusal(c: Conflict, running: list[tuple[dict, int]]) -> str:
    where = ", ".join(
        sorted(
            f"{m['metadata'].get('namespace') or ''}/{m['metadata'].get('name')} ({n} nodes)"
            for m, n in running
        )
    )
    return (
        f"{c.what} runs beside it (DaemonSet {where}), and {c.harm}: {c.fix}; it is installed "
        "once none is scheduled"
    )
