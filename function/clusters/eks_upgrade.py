"""EKS upgrades: the control plane one minor at a time, then the node groups, then the add-ons.

Raising `kubernetesVersion` moves only what names a version. EKS upgrades a control plane one
minor at a time (EKS User Guide, update-cluster.md), and nothing follows by itself: a node group
keeps the version it was created with (provider-upjet-aws v2.6.0 never late-initialises NodeGroup
`version`, config/namespaced/eks/config.go) and an add-on the version the provider
late-initialised into its spec. So the function moves them in the order the guide gives: the
control plane; once it reports the new minor, the node groups one at a time (the system group
first, then the GPU pools by name, each once the one before reports the minor); once every node
group reports it, the add-ons whose version follows Kubernetes; and only then the next minor.

EKS also moves a control plane itself: a cluster on standard support (the function sets
`upgradePolicy.supportType: STANDARD`) is upgraded to the next minor at the end of its minor's
standard support (EKS User Guide, "Understand the Kubernetes version lifecycle on EKS"), and its
node groups stay where they were. The function never sets a Cluster's version below the minor it
runs, so a Cluster that reports a minor above its spec's was moved by someone else. The function
marks it (MOVED_BY_CLOUD: the next reconcile finds the spec at the running minor and could not
tell), says so on the XR, and the node groups follow one at a time, the system group first and
the GPU pools after it, each with the safeguards of a step the spec asks for (a Capacity Block
group drained to 0 first: EKSCluster.block_upgrade).
"""

from dataclasses import dataclass, field

from function.clusters.base import Cloud, Minor, minor, release, text
from function.versions import EKS_ADDON_VERSIONS

# On the Cluster: the minor EKS moved the control plane to, beyond the spec's, while the node
# groups follow it and the spec asks for less (the Cluster's own spec then no longer tells).
MOVED_BY_CLOUD = "modelplane.ai/upgraded-by-eks"
SYSTEM_GROUP = "system-nodegroup"


@dataclass
class Plan:
    control_plane: str
    # Every node group's version: the control plane's, once it reports one.
    nodes: str | None
    # add-on -> the addonVersion to set (absent: the add-on's own, as EKS installed it).
    addons: dict[str, str] = field(default_factory=dict)
    # The minor EKS moved the control plane to by itself (the Cluster's MOVED_BY_CLOUD), if so.
    moved_by_cloud: str | None = None
    # Node groups that wait for their turn while they follow the control plane's minor (a step
    # the spec asks for, or EKS's move): key -> the version their spec keeps (None: none set).
    held: dict[str, str | None] = field(default_factory=dict)


def plan(cloud: Cloud, asked: str, node_groups: list[str]) -> Plan:
    """What each versioned resource is set to this reconcile, from what they report."""
    cluster = cloud.observed("cluster")
    running = minor(cluster.at_provider("version")) if cluster else None
    previous = cluster.get("spec", "forProvider", "version") if cluster else None
    previous = previous if isinstance(previous, str) else None
    if running is None:
        # Not created yet, or its status lost for a moment: what was asked before stands.
        kept = cluster.get("metadata", "annotations", MOVED_BY_CLOUD) if cluster else None
        moved = kept if isinstance(kept, str) else None
        return Plan(previous or asked, None, _kept_addons(cloud), moved)
    nodes_there = all(_reports(cloud, key, running) for key in node_groups)
    moved = _moved_by_cloud(cloud, asked, previous, running, nodes_there)
    # A step the spec asks for and a move of EKS's alike: the node groups follow one at a time.
    held = {} if nodes_there else _one_at_a_time(cloud, node_groups, running)
    addons = _addons(cloud, running, nodes_there)
    settled = nodes_there and all(
        _observed_addon(cloud, addon, "status", "atProvider") == version
        for addon, version in addons.items()
    )
    if moved and minor(asked) is not None and minor(asked) < running:
        done = sum(1 for key in node_groups if _reports(cloud, key, running))
        cloud.warn(
            f"EKS moved the control plane to {moved}, beyond the {asked!r} "
            "spec.cluster.eks.kubernetesVersion asks: a cluster on standard support is upgraded "
            "by EKS at the end of its minor's standard support (EKS User Guide, \"Understand the "
            'Kubernetes version lifecycle on EKS"), or someone moved it outside the function. '
            f"The node groups follow one at a time, the system group first ({done} of "
            f"{len(node_groups)} run {moved}); set kubernetesVersion to {moved}",
            "ClusterUpgradedByCloud",
        )
        return Plan(at_running(previous, running), text(running), addons, moved, held)
    version = _control_plane(cloud, asked, previous, running, settled)
    return Plan(version, text(running), addons, moved, held)


def at_running(previous: str | None, running: Minor) -> str:
    """The running minor, as the spec spells it if it names that minor."""
    return previous if previous and minor(previous) == running else text(running)


def _moved_by_cloud(
    cloud: Cloud, asked: str, previous: str | None, running: Minor, nodes_there: bool
) -> str | None:
    """The minor EKS moved the control plane to by itself, while that still matters.

    The function never sets the Cluster's version below the minor it runs, so a spec below the
    minor reported was left there by EKS's move (or someone's outside the function). The mark
    stays while the spec asks for less or a node group has still to follow, so the next reconcile
    (the Cluster's spec then at the running minor) knows it too."""
    cluster = cloud.observed("cluster")
    kept = cluster.get("metadata", "annotations", MOVED_BY_CLOUD) if cluster else None
    if minor(previous) is not None and minor(previous) < running:
        return text(running)  # seen now: the spec still names the minor EKS moved it from
    if not isinstance(kept, str) or minor(kept) != running:
        return None
    wanted = minor(asked)
    if nodes_there and wanted is not None and wanted >= running:
        return None  # followed, and asked for again: a cluster like any other
    return kept


def _one_at_a_time(cloud: Cloud, node_groups: list[str], running: Minor) -> dict[str, str | None]:
    """Which node groups wait while they follow the control plane: one group moves at a time, the
    system group first (what the others need runs there), then the GPU pools by name. A group
    whose spec names the running minor already is on its way and is never called back; a group
    whose version is not reported (status lost for a moment) waits and is not taken for one
    that moves. Returns key -> the version each waiting group's spec keeps."""
    order = sorted(node_groups, key=lambda key: (key != SYSTEM_GROUP, key))
    held: dict[str, str | None] = {}
    moving = False
    for key in order:
        seen = cloud.observed(key)
        if seen is None:
            continue  # created at the running minor
        reported = minor(seen.at_provider("version"))
        if reported == running:
            continue
        spec = seen.get("spec", "forProvider", "version")
        if minor(spec) == running:
            moving = True  # on its way
            continue
        held[key] = spec if isinstance(spec, str) else None
    if not moving:
        for key in order:
            if key in held and minor(cloud.observed(key).at_provider("version")) is not None:
                del held[key]  # its turn
                break
    return held


def _control_plane(
    cloud: Cloud, asked: str, previous: str | None, running: Minor, settled: bool
) -> str:
    """The next minor once everything runs this one; never back, never two at once."""
    kept = at_running(previous, running)
    wanted = minor(asked)
    where = f"spec.cluster.eks.kubernetesVersion {asked!r}"
    step = (running[0], running[1] + 1)
    if minor(previous) == step:
        # An update EKS has started cannot be called back: it finishes first.
        return asked if wanted == step else previous or text(step)
    if wanted is None or wanted < running:
        why = "is not a Kubernetes minor version like 1.36"
        if wanted is not None:
            why = f"is lower than the {text(running)} the control plane runs; EKS cannot downgrade"
        cloud.warn(f"{where} {why}", "InvalidVersion")
        return kept
    if wanted == running:
        return asked
    if settled:
        return asked if step == wanted else text(step)
    return kept


def _reports(cloud: Cloud, key: str, version: Minor) -> bool:
    """A node group is there once it reports the version; one not created yet does not wait."""
    seen = cloud.observed(key)
    return seen is None or minor(seen.at_provider("version")) == version


def _observed_addon(cloud: Cloud, addon: str, *where: str) -> str | None:
    seen = cloud.observed(f"addon-{addon}")
    value = seen.get(*where, "addonVersion") if seen else None
    return value if isinstance(value, str) else None


def _kept_addons(cloud: Cloud) -> dict[str, str]:
    """The versions their specs carry (set before, or late-initialised): never moved back."""
    out = {}
    for addon in EKS_ADDON_VERSIONS:
        version = _observed_addon(cloud, addon, "spec", "forProvider")
        if version:
            out[addon] = version
    return out


def _addons(cloud: Cloud, running: Minor, nodes_there: bool) -> dict[str, str]:
    out = _kept_addons(cloud)
    if not nodes_there:
        return out
    for addon, by_minor in EKS_ADDON_VERSIONS.items():
        seen = cloud.observed(f"addon-{addon}")
        if seen is None:
            continue  # created with EKS's default for the cluster's version
        current = _observed_addon(cloud, addon, "status", "atProvider") or _observed_addon(
            cloud, addon, "spec", "forProvider"
        )
        known = by_minor.get(text(running))
        if known is None:
            if current:
                cloud.warn(
                    f"add-on {addon} stays at {current}: this function knows no {addon} version "
                    f"for Kubernetes {text(running)} (the EKS User Guide's table, "
                    "function/versions.py EKS_ADDON_VERSIONS); to move it, set "
                    f"spec.forProvider.addonVersion on its Addon to what `aws eks "
                    f"describe-addon-versions --addon-name {addon} --kubernetes-version "
                    f"{text(running)}` gives as default (the function keeps it)",
                    "AddonVersionUnknown",
                )
            continue
        if current is None or release(known) > release(current):
            out[addon] = known
    return out
