"""EKS upgrades: the control plane one minor at a time, then the node groups, then the add-ons.

Raising `kubernetesVersion` moves only what names a version. EKS upgrades a control plane one
minor at a time (EKS User Guide, update-cluster.md), and nothing follows by itself: a node group
keeps the version it was created with (provider-upjet-aws v2.6.0 never late-initialises NodeGroup
`version`, config/namespaced/eks/config.go) and an add-on the version the provider
late-initialised into its spec. So the function moves them in the order the guide gives: the
control plane; once it reports the new minor, every node group; once every node group reports
it, the add-ons whose version follows Kubernetes; and only then the next minor.
"""

from dataclasses import dataclass, field

from function.clusters.base import Cloud, Minor, minor, release, text
from function.versions import EKS_ADDON_VERSIONS


@dataclass
class Plan:
    control_plane: str
    # Every node group's version: the control plane's, once it reports one.
    nodes: str | None
    # add-on -> the addonVersion to set (absent: the add-on's own, as EKS installed it).
    addons: dict[str, str] = field(default_factory=dict)


def plan(cloud: Cloud, asked: str, node_groups: list[str]) -> Plan:
    """What each versioned resource is set to this reconcile, from what they report."""
    cluster = cloud.observed("cluster")
    running = minor(cluster.at_provider("version")) if cluster else None
    previous = cluster.get("spec", "forProvider", "version") if cluster else None
    previous = previous if isinstance(previous, str) else None
    if running is None:
        # Not created yet, or its status lost for a moment: what was asked before stands.
        return Plan(previous or asked, None, _kept_addons(cloud))
    nodes_there = all(_reports(cloud, key, running) for key in node_groups)
    addons = _addons(cloud, running, nodes_there)
    settled = nodes_there and all(
        _observed_addon(cloud, addon, "status", "atProvider") == version
        for addon, version in addons.items()
    )
    version = _control_plane(cloud, asked, previous, running, settled)
    return Plan(version, text(running), addons)


def _control_plane(
    cloud: Cloud, asked: str, previous: str | None, running: Minor, settled: bool
) -> str:
    """The next minor once everything runs this one; never back, never two at once."""
    at_running = previous if previous and minor(previous) == running else text(running)
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
        return at_running
    if wanted == running:
        return asked
    if settled:
        return asked if step == wanted else text(step)
    return at_running


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
