"""Converge clusters with whichever `function` and `tests.sim` come first on sys.path.

tests/test_upgrade.py runs this file with a previous release's checkout first on PYTHONPATH, so the
live state it hands on is the one that release converged to, with the provider model of its day.
Reads a JSON list of cases on stdin ({"xr", "required", "schemas", "world"}), writes a JSON list:
for each case the desired resources, what the providers report of them (status included), the
XR status, or the error the release gave. Uses only interfaces every release has had:
compose_cluster, Observed, ObservedResource, World and observe.
"""

import copy
import dataclasses
import json
import sys

from function.compose import compose_cluster
from function.inputs import Observed, ObservedResource
from tests.sim.providers import World, observe

MAX_PASSES = 30


def world_of(fields: dict) -> World:
    known = {f.name for f in dataclasses.fields(World)}
    return World(**{k: v for k, v in fields.items() if k in known})


def reported(resources: dict[str, dict], world: World) -> dict[str, dict]:
    out = {}
    for key, body in resources.items():
        seen = copy.deepcopy(body)
        seen["status"] = observe(body, world).status
        out[key] = seen
    return out


def converge(case: dict) -> dict:
    world = world_of(case["world"])
    xr, required, schemas = case["xr"], case["required"], case["schemas"]
    out = compose_cluster(xr, required, Observed(), schemas)
    for _ in range(MAX_PASSES):
        bodies = {k: d.body for k, d in out.resources.items()}
        seen = reported(bodies, world)
        observed = Observed({k: ObservedResource(b) for k, b in seen.items()}, out.status)
        again = compose_cluster(xr, required, observed, schemas)
        if again.resources == out.resources and again.status == out.status:
            fatal = [r.message for r in again.results if r.severity == "Fatal"]
            if fatal:
                return {"error": "; ".join(fatal)}
            final = {k: d.body for k, d in again.resources.items()}
            return {"resources": final, "observed": reported(final, world), "status": again.status}
        out = again
    return {"error": f"no convergence in {MAX_PASSES} passes"}


def main() -> None:
    import function  # noqa: PLC0415 - which checkout answers is the point

    print(f"release_converge: function from {function.__file__}", file=sys.stderr)
    cases = json.load(sys.stdin)
    answers = []
    for case in cases:
        try:
            answers.append(converge(case))
        except Exception as e:
            answers.append({"error": f"{type(e).__name__}: {e}"})
    json.dump(answers, sys.stdout)


if __name__ == "__main__":
    main()
