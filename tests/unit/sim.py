"""In-process reconciles with the providers simulated: compose, report, compose again."""

import copy
from dataclasses import replace

from function.compose import compose_cluster
from function.inputs import Observed, ObservedResource
from function.output import Output
from tests.sim.providers import World, answer, observe

MAX_PASSES = 25


def reported(
    out: Output, world: World | None = None, drop_status: tuple[str, ...] = ()
) -> Observed:
    """Everything out composed, as the providers would report it after reconciling."""
    resources = {}
    for key, desired in out.resources.items():
        body = copy.deepcopy(desired.body)
        if key not in drop_status:
            body["status"] = observe(body, world).status
        resources[key] = ObservedResource(body)
    return Observed(resources=resources, status=out.status)


def observed_from(out: Output, edit=None) -> Observed:
    """What the providers report for out, with edit(key, body) applied to each body."""
    seen = reported(out)  # bodies of their own: edited in place
    if edit is not None:
        for key, res in seen.resources.items():
            edit(key, res.body)
    return seen


def answered(
    required: dict[str, list[dict]], out: Output, world: World | None = None
) -> dict[str, list[dict]]:
    """required, with Crossplane's answer to the collections' members out asked for."""
    bodies = [d.body for d in out.resources.values()]
    return {**required, **answer(out.requirements, bodies, world or World())}


def said_once(said: list, results: list) -> list:
    """said, then each of results not said yet: what the XR was told over reconciles, each once."""
    return said + [r for r in results if r not in said]


def converge(
    xr: dict,
    required: dict[str, list[dict]],
    world: World | None = None,
    schemas: dict[str, bool] | None = None,
    every_result: bool = False,
) -> Output:
    """Reconcile until the desired set and the status stop changing; every_result: with the
    results of every pass, each once (what the XR was told on the way, events said once)."""
    out = compose_cluster(xr, required, Observed(), schemas)
    said = list(out.results)
    for _ in range(MAX_PASSES):
        again = compose_cluster(xr, answered(required, out, world), reported(out, world), schemas)
        said = said_once(said, again.results)
        if again.resources == out.resources and again.status == out.status:
            return replace(again, results=said) if every_result else again
        out = again
    raise AssertionError(f"no convergence in {MAX_PASSES} passes")


def differing(a, b, path: str = "") -> set[str]:
    """The dotted paths of every field that differs between two bodies."""
    if isinstance(a, dict) and isinstance(b, dict):
        return {
            found
            for k in sorted(set(a) | set(b))
            for found in differing(a.get(k), b.get(k), f"{path}.{k}" if path else k)
        }
    return set() if a == b else {path}


def changes(before: Output, after: Output) -> set[tuple[str, str]]:
    """(resource key, dotted field path) of every field of a desired body that differs."""
    found: set[tuple[str, str]] = set()
    for key in sorted(set(before.resources) | set(after.resources)):
        a, b = before.resources.get(key), after.resources.get(key)
        found |= {(key, p) for p in differing(a.body if a else None, b.body if b else None)}
    return found


def upgrade(xr: dict, required: dict[str, list[dict]], set_version) -> list[Output]:
    """Converge, raise the version (set_version edits the XR), then reconcile with the
    providers reporting after each pass: the converged output and each pass until stable."""
    out = converge(xr, required)
    raised = copy.deepcopy(xr)
    set_version(raised)
    passes = [out]
    for _ in range(MAX_PASSES):
        again = compose_cluster(raised, required, reported(passes[-1]))
        if again.resources == passes[-1].resources and len(passes) > 1:
            return passes
        passes.append(again)
    raise AssertionError(f"no convergence in {MAX_PASSES} passes")
