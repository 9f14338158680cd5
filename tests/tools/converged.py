"""Render a bundled example's last reconcile: the whole composition, offline.

python -m tests.tools.converged eks-on-demand

`crossplane render` reconcile after reconcile against the running function, each fed what the
project's simulated providers (tests/sim) would report about the last one, until nothing changes
(tests/converge.py, as tests/test_clouds.py converges every example); then the last reconcile's
output: the XR with its status, every composed resource, the function's results. The observed
state is the simulator's, not a cloud's: made-up ids and addresses, every resource Ready, a fleet
InferenceGateway that has published its client CA, every pool's GPU nodes healthy, and each
Capacity Block the example names bought for its pool.
"""

import sys
import tempfile
from pathlib import Path

from tests.builders import example, provider_configs
from tests.converge import SCHEMAS, Renderer, converge
from tests.sim.providers import World
from tests.sim.workload import healthy_gpu_nodes, inference_gateway
from tests.tools.render import crossplane_bin, example_folder
from tests.tools.server import function_server

# Far ahead, so a bought block neither nears its end nor has ended on any day this runs.
BLOCK_END = "2099-12-14T11:30:00Z"


def capacity_blocks(xr: dict, classes: list[dict]) -> dict[str, dict]:
    """Each Capacity Block the XR names, as EC2 reports one bought for its pool: the pool's first
    zone, its class's instance type and its node count."""
    types = {c["metadata"]["name"]: instance_type(c) for c in classes}
    out = {}
    for pool in xr["spec"].get("nodePools", []):
        block = (pool.get("capacityBlock") or {}).get("capacityReservationId")
        if block:
            out[block] = {
                "availabilityZone": pool["zones"][0],
                "instanceType": types.get(pool["className"]),
                "instanceCount": pool.get("nodeCount", 1),
                "endDate": BLOCK_END,
            }
    return out


def instance_type(body: object) -> str | None:
    """The first instanceType anywhere in a class (EKS names it in its cloud's part)."""
    if isinstance(body, dict):
        if isinstance(body.get("instanceType"), str):
            return body["instanceType"]
        body = list(body.values())
    if isinstance(body, list):
        for item in body:
            found = instance_type(item)
            if found:
                return found
    return None


def world(xr: dict, classes: list[dict]) -> World:
    """What the simulated clouds and workload cluster hold for an example to converge Ready."""
    return World(
        inference_gateways=[inference_gateway("fleet-a")],
        gpu_nodes=healthy_gpu_nodes(xr),
        capacity_reservations=capacity_blocks(xr, classes),
    )


def converged(target: str, name: str, workdir: Path) -> tuple[str, int]:
    """The last reconcile's `crossplane render` output for an example, and the passes it took."""
    xr, classes = example(name)
    renderer = Renderer(crossplane_bin(), target, workdir, schemas=SCHEMAS)
    passes = converge(renderer, xr, classes + provider_configs(name), world(xr, classes))
    return (workdir / f"pass-{renderer.calls}" / "rendered.yaml").read_text(), len(passes)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    if example_folder(argv[0]) is None:
        return 2
    with function_server() as server, tempfile.TemporaryDirectory(prefix="render-") as workdir:
        try:
            out, count = converged(server.target, argv[0], Path(workdir))
        except AssertionError as e:  # a render that failed, or no fixed point
            print(e, file=sys.stderr)
            return 1
    print(
        f"# {argv[0]}: the reconcile after {count} passes; observed state from the project's "
        "simulated providers (tests/sim), not from a cloud",
        file=sys.stderr,
    )
    sys.stdout.write(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
