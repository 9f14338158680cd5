"""Node pools follow their control plane's minor one at a time, GPU pools last.

Whether the spec raised the version or the cloud moved the control plane itself (AKS and GKE
past a version's end of life, Nebius past its support), pools that run an older minor than the
control plane are moved by the function one after the other: the next one asks for the new
minor only once the one before reports it and is Ready. A drain then empties one pool's nodes
at a time, and the GPU pools, whose replicas are the slowest to move and the dearest to lose,
go after the system and CPU pools have shown the new minor works. A pool not created yet is
made at the control plane's version and waits for nothing.
"""

from dataclasses import dataclass

from function.clusters.base import Cloud, Minor, minor, text
from function.output import Result


@dataclass(frozen=True)
class Member:
    """One pool as the rollout sees it: what it asks for and runs (minors, None: not known)."""

    key: str
    gpu: bool
    exists: bool
    asked: Minor | None
    runs: Minor | None
    ready: bool


def movers(members: list[Member], target: Minor) -> frozenset[str]:
    """The pools that ask for target this reconcile: those there or on their way, and while
    none is on its way, the first of the rest (system and CPU pools, then GPU pools, by key)."""
    moving: set[str] = set()
    busy = False
    order = sorted(members, key=lambda m: (m.gpu, m.key))
    for m in order:
        if done(m, target):
            moving.add(m.key)
        elif target in (m.asked, m.runs):
            moving.add(m.key)
            busy = True
    if not busy:
        following = next((m for m in order if m.key not in moving), None)
        if following is not None:
            moving.add(following.key)
    return frozenset(moving)


def step(cloud: Cloud, where: str, spec: str, running: str, maker: str) -> Minor | None:
    """The next minor on the way to the spec's when it is more than one above the control
    plane's, said as UpgradingStepwise; None when the spec's is the next one, the same, older or
    not a minor. AKS, GKE and mk8s upgrade a control plane one minor at a time, as Kubernetes
    does (kubernetes.io "Version Skew Policy": kube-apiserver instances within one minor): the
    caller asks for it once every pool runs the control plane's minor."""
    want, have = minor(spec), minor(running)
    if want is None or have is None or want <= (have[0], have[1] + 1):
        return None
    following = (have[0], have[1] + 1)
    cloud.warn(
        f"{where} {spec}: the control plane is at {running} and {maker} upgrades one minor "
        f"version at a time; upgrading to {text(following)} first",
        reason="UpgradingStepwise",
    )
    return following


def say(cloud: Cloud, members: list[Member], target: Minor, moving: frozenset[str]) -> None:
    """A Normal result naming the pool that moves and those that wait, while any lags."""
    if not any(m.exists and m.runs not in (target, None) for m in members):
        return  # none runs another minor (a pool only rolling its nodes is no step)
    lagging = [m for m in sorted(members, key=lambda m: (m.gpu, m.key)) if not done(m, target)]
    now = [m.key for m in lagging if m.key in moving]
    later = [m.key for m in lagging if m.key not in moving]
    message = (
        f"node pools follow the control plane to {text(target)} one at a time, GPU pools last: "
        f"{', '.join(now) or 'none'} now"
    )
    if later:
        message += f"; then {', '.join(later)}"
    cloud.results.append(Result("Normal", message, reason="NodePoolsFollowing"))


def done(m: Member, target: Minor) -> bool:
    """Not made yet (it is made at the control plane's version), or Ready on target (or on a
    version its provider does not report: nothing says it lags)."""
    return not m.exists or (m.ready and m.runs in (target, None))
