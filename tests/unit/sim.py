"""In-process reconciles with the providers simulated: compose, report, compose again."""

import copy

from function.compose import compose_cluster
from function.inputs import Observed, ObservedResource
from function.output import Output
from tests.sim.providers import World, observe

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


def converge(
    xr: dict,
    required: dict[str, list[dict]],
    world: World | None = None,
    schemas: dict[str, bool] | None = None,
) -> Output:
    """Reconcile until the desired set and the status stop changing."""
    out = compose_cluster(xr, required, Observed(), schemas)
    for _ in range(MAX_PASSES):
        again = compose_cluster(xr, required, reported(out, world), schemas)
        if again.resources == out.resources and again.status == out.status:
            return again
        out = again
    raise AssertionError(f"no convergence in {MAX_PASSES} passes")
