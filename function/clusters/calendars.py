"""Which Kubernetes versions each cloud still creates clusters on, from the cloud's own calendar.

A version the cloud no longer supports (or never offered) fails at creation with only the
provider's error to go by, hours into a rollout. The function says it first: a Warning naming the
field, the version, the calendar and what to choose instead, and the same words in ClusterReady
while the cluster is not Ready. It never changes the version: the spec's defaults stay, and a
calendar older than the cloud's newest minor only warns that it cannot tell.

Dates are each minor's end of standard support, the first day the cloud may refuse new clusters on
it; they are compared with the function's one clock (function.clock), so a cached answer is
replayed only while each comparison still holds.
"""

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from function import clock
from function.clusters.base import Cloud, Minor, minor, text


@dataclass(frozen=True)
class Calendar:
    cloud: str
    field: str
    source: str
    # Each minor the cloud has offered, and the first day it no longer supports it (None: no end
    # announced).
    ends: dict[Minor, datetime | None]
    # Where the ends come from when the cloud publishes none: upstream Kubernetes's end of life,
    # which the cloud does not promise to follow. Past one: a Warning that no patches come, never
    # a claim that the cloud refuses the version.
    ends_source: str | None = None
    # What the cloud does past such an end, as far as it says.
    after_end: str = ""
    # What the cloud does past its own end, when it says more than that it creates no cluster on
    # the minor (EKS upgrades a STANDARD-support cluster itself).
    past_end: str = ""


def day(year: int, month: int, dom: int = 1) -> datetime:
    return datetime(year, month, dom, tzinfo=UTC)


def check(cloud: Cloud, calendar: Calendar, version: str) -> None:
    """Warn when version is past its cloud's support or not in its calendar, and say so while
    the cluster waits."""
    wanted = minor(version)
    if wanted is None or not calendar.ends:
        return
    where = f"{calendar.field} {version}"
    newest = max(calendar.ends)
    created = cloud.observed("cluster") is not None
    if wanted not in calendar.ends:
        if cloud.is_ready("cluster"):  # the cloud took it
            return
        if wanted > newest:
            problem = (
                f"is newer than {calendar.cloud}'s calendar knows ({calendar.source}, up to "
                f"{text(newest)}); {calendar.cloud} refuses a minor it does not offer yet"
            )
        else:
            problem = f"is not a minor {calendar.cloud} offers ({calendar.source})"
        reason = "KubernetesVersionUnknown"
    else:
        end = calendar.ends[wanted]
        if end is None or not clock.reached(end):
            return
        supported = sorted(m for m, e in calendar.ends.items() if e is None or not clock.reached(e))
        choose = f"choose {text(supported[0])} or newer" if supported else "choose a newer minor"
        if calendar.ends_source:
            last = (end - timedelta(days=1)).date().isoformat()
            problem = (
                f"is past its end of life on {last} ({calendar.ends_source}; "
                f"{calendar.cloud} publishes no end dates): it gets no more patches, and "
                f"{calendar.after_end}; {choose}"
            )
        else:
            now = (
                "supports the running cluster no longer" if created else "creates no cluster on it"
            )
            now = calendar.past_end or now
            problem = (
                f"is past {calendar.cloud}'s support since {end.date().isoformat()} "
                f"({calendar.source}): {calendar.cloud} {now}; {choose}"
            )
        reason = "KubernetesVersionUnsupported"
    cloud.warn(f"{where} {problem}", reason=reason)
    # Upstream's end of life says nothing of what the cloud takes: not why the cluster waits.
    upstream_end = reason == "KubernetesVersionUnsupported" and calendar.ends_source
    if not upstream_end and not cloud.is_ready("cluster"):
        cloud.why["cluster"] = f"Kubernetes {version} {problem}"


# AKS "Kubernetes release calendar" (MicrosoftDocs/azure-aks-docs
# articles/aks/supported-kubernetes-versions.md, as of 2026-08): End of life month, a month meaning
# its last day, so support ends the first day of the next. Past it a minor is in platform support,
# where AKS creates no cluster ("Cluster creation: Not Supported"). LTS (Premium tier) is not used.
AKS = Calendar(
    cloud="AKS",
    field="spec.cluster.aks.kubernetesVersion",
    source="AKS Kubernetes release calendar",
    ends={
        (1, 28): day(2025, 2),
        (1, 29): day(2025, 4),
        (1, 30): day(2025, 8),
        (1, 31): day(2025, 12),
        (1, 32): day(2026, 4),
        (1, 33): day(2026, 8),
        (1, 34): day(2026, 12),
        (1, 35): day(2027, 4),
        (1, 36): day(2027, 7),
        (1, 37): day(2027, 11),
    },
)

# EKS "Amazon EKS Kubernetes release calendar" (docs.aws.amazon.com eks/latest/userguide/
# kubernetes-versions.html): End of standard support, the day extended support (billed per cluster
# hour) begins. Read 2026-12-07 through the calendar's copies: awsdocs/amazon-eks-user-guide
# (to 1.31, December 2024), endoflife.date's amazon-eks (its release_table of that page, to 1.34)
# and AWS's sample-apex-skills cluster-lifecycle reference (1.35, verified 2026-04-24). 1.36 is
# offered (the spec's default) with no end read yet. The cluster is composed with
# upgradePolicy.supportType STANDARD (eks.py): past the end EKS upgrades it to the next minor
# itself rather than bill extended support, so the version is not what runs.
EKS = Calendar(
    cloud="EKS",
    field="spec.cluster.eks.kubernetesVersion",
    source="Amazon EKS Kubernetes release calendar",
    ends={
        (1, 29): day(2025, 3, 23),
        (1, 30): day(2025, 7, 23),
        (1, 31): day(2025, 11, 26),
        (1, 32): day(2026, 3, 23),
        (1, 33): day(2026, 7, 29),
        (1, 34): day(2026, 12, 2),
        (1, 35): day(2027, 3, 27),
        (1, 36): None,
    },
    past_end=(
        "upgrades a cluster on it to the next minor itself (upgradePolicy.supportType STANDARD, "
        "as composed), so the spec and the cluster disagree"
    ),
)

# GKE "GKE release schedule" (cloud.google.com/kubernetes-engine/docs/release-schedule): End of
# standard support, past which the REGULAR channel the cluster is enrolled in (gke.py) no longer
# offers the minor and GKE upgrades control planes on it. Read 2026-12-07 through endoflife.date's
# google-kubernetes-engine (its eol is that column, copied from the schedule); 1.36 is in the
# Regular channel (GKE release notes, available minor versions) with no end read yet.
GKE = Calendar(
    cloud="GKE",
    field="spec.cluster.gke.kubernetesVersion",
    source="GKE release schedule",
    ends={
        (1, 31): day(2026, 1, 16),
        (1, 32): day(2026, 4, 11),
        (1, 33): day(2026, 8, 3),
        (1, 34): day(2026, 10, 1),
        (1, 35): day(2027, 4, 11),
        (1, 36): None,
    },
)

# Upstream Kubernetes's end of life of each minor: its End Of Life Date on
# kubernetes.io/releases/<minor> (read 2026-12-05), the last day of patches; the day after is the
# end. The floor of the clouds that publish no end dates of their own. Upstream's dates have
# slipped later before (1.30's planned 2025-06-28, patched until 2025-07-15): check the page when
# adding a row.
UPSTREAM_EOL = {
    (1, 32): day(2026, 2, 28),
    (1, 33): day(2026, 6, 28),
    (1, 34): day(2026, 10, 27),
    (1, 35): day(2027, 2, 28),
    (1, 36): day(2027, 6, 28),
}
UPSTREAM_ENDS = {m: last + timedelta(days=1) for m, last in UPSTREAM_EOL.items()}
UPSTREAM = "upstream Kubernetes, kubernetes.io/releases"

# Nebius mk8s takes <major>.<minor> (nebius/api mk8s/v1 cluster.proto) and publishes no end dates
# (at the end of its support it upgrades the control plane itself, cluster.proto); these are the
# minors its documentation and the node images show offered (docs.nebius.com kubernetes/versions,
# images mk8s-worker-node-v-1-3x-*), with upstream's ends.
NEBIUS = Calendar(
    cloud="Nebius",
    field="spec.cluster.nebius.kubernetesVersion",
    source="docs.nebius.com/kubernetes/versions",
    ends={m: UPSTREAM_ENDS[m] for m in ((1, 33), (1, 34), (1, 35))},
    ends_source=UPSTREAM,
    after_end="Nebius upgrades a control plane past its support itself (mk8s cluster.proto)",
)

# VKE's versions API (GET /v2/kubernetes/versions) lists exact builds, v<major>.<minor>.<patch>+
# <build>, and only the newest build of each offered minor; the changelog
# (docs.vultr.com/products/compute/kubernetes/changelog) names the minors. VKE publishes no end
# dates: upstream's ends.
VULTR = Calendar(
    cloud="VKE",
    field="spec.cluster.vultr.kubernetesVersion",
    source="VKE changelog",
    ends=dict(UPSTREAM_ENDS),
    ends_source=UPSTREAM,
    after_end="VKE, which lists only the minors it offers, may stop offering it",
)

# Nebius GPU drivers presets by Kubernetes minor: the node group's gpu_settings.drivers_preset
# table (nebius/api mk8s/v1 node_group.proto: cuda12 on 1.30, cuda12/12.4/12.8 on 1.31) and the
# node images built since (Ubuntu 24.04 with cuda12.8 from 1.32, cuda13.0 from 1.33). The live
# answer is `nebius mk8s node-group get-compatibility-matrix`.
NEBIUS_DRIVERS_PRESETS: dict[str, frozenset[Minor]] = {
    "cuda12": frozenset({(1, 30), (1, 31)}),
    "cuda12.4": frozenset({(1, 31)}),
    "cuda12.8": frozenset({(1, 31), (1, 32), (1, 33)}),
    "cuda13.0": frozenset({(1, 33), (1, 34), (1, 35)}),
}


def check_drivers_preset(cloud: Cloud, pool: str, cls: str, preset: str, version: str) -> None:
    """Warn when a Nebius GPU pool's drivers preset has no node image for the cluster's minor:
    Nebius refuses the node group."""
    wanted = minor(version)
    offered = NEBIUS_DRIVERS_PRESETS.get(preset)
    if wanted is None or wanted not in NEBIUS.ends:
        return
    fitting = sorted(p for p, minors in NEBIUS_DRIVERS_PRESETS.items() if wanted in minors)
    if offered is None:
        problem = "is not a drivers preset Nebius documents"
    elif wanted not in offered:
        problem = f"has no Nebius node image for Kubernetes {text(wanted)}"
    else:
        return
    key = f"nodegroup-{pool}"
    message = (
        f"pool {pool!r} (class {cls!r}): driversPreset {preset} {problem} (Nebius node group "
        f"drivers presets); presets for {text(wanted)}: {', '.join(fitting) or 'none known'}"
    )
    cloud.warn(message, reason="DriversPresetUnsupported")
    if not cloud.is_ready(key):
        cloud.why[key] = f"driversPreset {preset} {problem}"
