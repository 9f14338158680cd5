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

A step EKS refuses before it starts (UpdateClusterVersion's upgrade readiness checks, which only
`force` overrides: InvalidStateException, EKS API reference) is not an update in flight: the
Cluster reports its provider's refusal and is not UPDATING, so the step is said on the XR
(ControlPlaneUpgradeRefused) and a spec lowered again takes it back. A node group whose update
EKS fails (a drain a PodDisruptionBudget blocks, no capacity) is said on the XR, naming its pool
(NodeGroupUpgradeBlocked), since the groups after it wait for it.
"""

import re
from dataclasses import dataclass, field

from function import clock
from function.clusters import calendars
from function.clusters.base import Cloud, Minor, minor, release, text
from function.failures import words
from function.inputs import ObservedResource
from function.versions import EKS_ADDON_VERSIONS

# On the Cluster: the minor EKS moved the control plane to, beyond the spec's, while the node
# groups follow it and the spec asks for less (the Cluster's own spec then no longer tells).
MOVED_BY_CLOUD = "modelplane.ai/upgraded-by-eks"
SYSTEM_GROUP = "system-nodegroup"
# What the Terraform provider under provider-upjet-aws v2.6.0 (terraform-provider-aws 6.34.0,
# internal/service/eks cluster.go resourceClusterUpdate, node_group.go resourceNodeGroupUpdate)
# says when a version update fails; upjet puts it, after its own prefixes, in the Synced message.
# `updating EKS Cluster (<name>) version: <API error>`: UpdateClusterVersion was refused, so no
# update started (`waiting for EKS Cluster (<name>) version update (<id>): ...` is one that
# started). A node group's `updating EKS Node Group (...) version:` (refused) and `waiting for EKS
# Node Group (...) version update (...)` (started, then failed: PodEvictionFailure, capacity)
# come from UpdateNodegroupVersion, which carries version steps and launch template rollouts.
CLUSTER_REFUSED = re.compile(r"\bupdating EKS Cluster \([^)]*\) version: ")
NODE_GROUP_FAILED = re.compile(
    r"\b(?:updating EKS Node Group \([^)]*\) version: "
    r"|waiting for EKS Node Group \([^)]*\) version update )"
)


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
    _blocked_node_groups(cloud, node_groups, held)
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
        refusal = refused(cloud.observed("cluster"))
        if refusal is None:
            # An update EKS has started (or may have: the Cluster says nothing else) cannot be
            # called back: it finishes first.
            return asked if wanted == step else previous or text(step)
        # EKS refused it before it started: nothing to finish. Kept while the spec asks for it
        # (the provider sends it again each sync, so clearing the cause is enough); a spec that
        # asks for less takes it back.
        back = wanted is not None and wanted < step
        then = (
            f"the step is taken back to {text(running)}, as {where} now asks"
            if back
            else (
                "clear the cause EKS names (its upgrade insights: `aws eks list-insights "
                "--cluster-name <cluster>`) and the provider sends the step again, or set "
                f"kubernetesVersion to {text(running)} to take the step back; the function never "
                "sets forceUpdateVersion"
            )
        )
        cloud.warn(
            f"EKS refused the control plane's update to {text(step)} that {where} asks for "
            f"({refusal}); {then}",
            "ControlPlaneUpgradeRefused",
        )
        if not back:
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


def support_type(cloud: Cloud) -> str:
    """The upgrade policy to send: STANDARD (extended support is billed per cluster hour, and a
    STANDARD cluster is upgraded by EKS at the end of standard support instead), except on a
    cluster that reports EXTENDED while the minor it runs is past its end of standard support.
    EKS cannot take such a cluster out of extended support ("you cannot disable extended support
    once your cluster has entered it", EKS User Guide, "Disable EKS extended support"), so
    STANDARD would only be refused (terraform-provider-aws resourceClusterUpdate: `updating EKS
    Cluster (...) upgrade policy`) and hold every change after it; EXTENDED is kept, and said,
    until the cluster runs a minor in standard support."""
    cluster = cloud.observed("cluster")
    if cluster is None:
        return "STANDARD"
    reported = cluster.at_provider("upgradePolicy", "supportType")
    running = minor(cluster.at_provider("version"))
    if reported is None or (reported == "EXTENDED" and running is None):
        # Its status lost for a moment: what the spec sent before stands.
        sent = cluster.get("spec", "forProvider", "upgradePolicy", "supportType")
        return sent if sent in ("STANDARD", "EXTENDED") else "STANDARD"
    if reported != "EXTENDED" or running is None:
        return "STANDARD"
    ends = calendars.EKS.ends
    end = ends.get(running)
    past = running < min(ends) or (end is not None and clock.reached(end))
    if not past:
        return "STANDARD"
    supported = sorted(m for m, e in ends.items() if e is None or not clock.reached(e))
    to = (
        f"raise spec.cluster.eks.kubernetesVersion to {text(supported[0])} or newer"
        if supported
        else "raise spec.cluster.eks.kubernetesVersion"
    )
    since = f" on {end.date().isoformat()}" if end is not None else ""
    cloud.warn(
        f"the control plane runs {text(running)}, past its end of standard support{since}, in "
        "EKS extended support, billed per cluster hour above standard support (EKS pricing); EKS "
        "cannot take it back to standard support on this minor, so upgradePolicy stays EXTENDED "
        f"until it runs a minor in standard support: {to}, one minor at a time",
        "ExtendedSupport",
    )
    return "EXTENDED"


def refused(cluster: ObservedResource | None) -> str | None:
    """The provider's words when EKS refused the Cluster's version update before it started, or
    None: the Synced error is the refusal's shape (CLUSTER_REFUSED) and EKS does not report the
    cluster UPDATING (`status.atProvider.status`; EKS API reference, UpdateClusterVersion:
    "During an update, the cluster status moves to UPDATING"). Any other Synced error, or none,
    may be an update under way (upjet reports Synced=True while its update runs), so it is not
    a refusal."""
    return _failed_update(cluster, CLUSTER_REFUSED)


def _failed_update(seen: ObservedResource | None, shape: re.Pattern) -> str | None:
    """The provider's words when its Synced error has this shape and EKS does not report the
    resource UPDATING (`status.atProvider.status`), or None."""
    if seen is None or seen.at_provider("status") == "UPDATING":
        return None
    synced = seen.condition("Synced") or {}
    message = synced.get("message")
    if synced.get("status") != "False" or not isinstance(message, str):
        return None
    return words(message) if shape.search(message) else None


def _blocked_node_groups(cloud: Cloud, node_groups: list[str], held: dict) -> None:
    """Say, naming the pool, each node group whose version update EKS failed or refused, in the
    provider's words: while it does not report the new version, the groups after it wait, and
    the provider sends the same update again at each sync. Not while EKS reports the group
    UPDATING: a GPU group replaced a node at a time runs past Terraform's 60-minute wait, whose
    timeout has the failure's shape (SRE review, 2026-12-07)."""
    for key in sorted(node_groups, key=lambda k: (k != SYSTEM_GROUP, k)):
        said = _failed_update(cloud.observed(key), NODE_GROUP_FAILED)
        if said is None:
            continue
        pool = "the system node group" if key == SYSTEM_GROUP else f"pool {pool_name(key)!r}"
        waiting = sorted(pool_name(k) for k in held)
        after = f"; waiting after it: {', '.join(waiting)}" if waiting else ""
        cloud.warn(
            f"{pool}: EKS did not update its node group ({said}){after}. A drain "
            "fails when a PodDisruptionBudget allows no eviction for 15 minutes "
            "(PodEvictionFailure): give each budget room for one pod on a node being replaced, "
            "or free the capacity EKS names; the provider sends the update again, and the "
            "function never sets forceUpdateVersion (docs/clouds/eks.md, Upgrades)",
            "NodeGroupUpgradeBlocked",
        )


def pool_name(key: str) -> str:
    return "system" if key == SYSTEM_GROUP else key.removeprefix("nodegroup-")


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
