"""docs/status.md shows `kubectl describe ic` for four states of the EKS example; this renders each
from the function, so the page shows what a user sees (UPDATE_GOLDEN=1 rewrites the blocks)."""

import copy
import datetime
import os
import re

import pytest

from function import clock
from function.compose import compose_cluster
from function.inputs import Observed, ObservedResource
from function.output import Output
from function.serving import gpus
from tests.builders import all_classes, example, world_for
from tests.conftest import ROOT
from tests.sim.providers import World, conditions, observe
from tests.sim.workload import gpu_node, inference_gateway, timestamp
from tests.unit import sim

DOC = ROOT / "docs" / "status.md"
BLOCK = re.compile(r"(<!-- describe: ([\w-]+) -->\n```\n)(.*?)(```)", re.S)
SCHEMAS = {"inference-gateway-kind": True}
POOL = "gpu-h200"  # examples/eks


def required(classes: list[dict]) -> dict[str, list[dict]]:
    return {**all_classes(classes), "inference-gateways": [inference_gateway("fleet-a")]}


def reported(out: Output, world: World, statuses: dict[str, dict]) -> Observed:
    """As the providers report out, with the statuses given by resource key instead."""
    resources = {}
    for key, desired in out.resources.items():
        body = copy.deepcopy(desired.body)
        body["status"] = statuses.get(key) or observe(body, world).status
        resources[key] = ObservedResource(body)
    return Observed(resources=resources, status=out.status)


def state(name: str) -> Output:
    xr, classes = example("eks")
    world, req = world_for(xr), required(classes)
    # As the EKS node monitoring agent words it (aws/eks-node-monitoring-agent, its DCGM XID test).
    xid = "False:NvidiaXID79Error:detected XID-79 on the instance, review kernel logs for additional information."
    world.gpu_nodes = [
        gpu_node("ip-10-0-1-17.ec2.internal", POOL),
        gpu_node(
            "ip-10-0-2-43.ec2.internal",
            POOL,
            since=timestamp(clock.now() - datetime.timedelta(minutes=7)),  # turned 7 minutes ago
            **({"AcceleratedHardwareReady": xid} if name == "gpu-unhealthy" else {}),
        ),
    ]
    if name == "provisioning":
        first = compose_cluster(xr, req, Observed(), SCHEMAS)
        creating = {"conditions": conditions(ready=False, reason="Creating"), "atProvider": {}}
        return compose_cluster(xr, req, reported(first, world, {"cluster": creating}), SCHEMAS)
    if name == "gpus-not-published":
        world.remote_status[gpus.workload_name(xr["metadata"]["name"], POOL)] = {
            "observedGeneration": 1,
            "desiredNumberScheduled": 2,
            "numberReady": 1,
            "updatedNumberScheduled": 2,
        }
    out = sim.converge(xr, req, world, SCHEMAS)
    if name == "provider-fails":
        failing = {
            "conditions": conditions(
                ready=False,
                reason="Creating",
                message="update failed: async update failed: failed to update the resource: "
                "[{0 updating EKS Node Group (modelplane-eks-us-east-gpu-h200): operation error "
                "EKS: UpdateNodegroupConfig, https response error StatusCode: 400, "
                "InvalidParameterException: Capacity Block reservation is not active}]",
            ),
            "atProvider": {},
        }
        out = compose_cluster(
            xr, req, reported(out, world, {f"nodegroup-{POOL}": failing}), SCHEMAS
        )
    return out


def describe(out: Output) -> str:
    """The conditions and events as `kubectl describe ic` prints them (times left out)."""
    lines = ["Status:", "  Conditions:"]
    for c in out.conditions:
        fields = {
            "Message": c.message or "",
            "Reason": c.reason,
            "Status": str(c.status),
            "Type": c.type,
        }
        lines += [f"    {k + ':':<9} {v}" for k, v in fields.items()]
    events = [r for r in out.results if r.severity == "Warning"]
    if events:
        lines += ["Events:", "  Type     Reason          Message"]
        lines += [f"  Warning  {r.reason or '':<15} {r.message}" for r in events]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    "name", ["provisioning", "provider-fails", "gpus-not-published", "gpu-unhealthy", "ready"]
)
def test_the_status_page_shows_what_kubectl_describe_shows(name):
    text = DOC.read_text()
    blocks = {m[2]: m for m in BLOCK.finditer(text)}
    rendered = describe(state(name))
    if os.environ.get("UPDATE_GOLDEN"):
        m = blocks[name]
        DOC.write_text(text[: m.start(3)] + rendered + text[m.end(3) :])
        return
    assert name in blocks, f"docs/status.md has no <!-- describe: {name} --> block"
    assert blocks[name][3] == rendered
