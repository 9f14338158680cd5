"""The EKS renderer: zones and CIDRs, node groups, launch templates, Capacity Blocks, shapes."""

import copy
import ipaddress
import json
from datetime import UTC, datetime

import pytest

from function import clock, names, shapes
from function.clusters import aws_network, eks_dcgm
from function.clusters.eks import efa_interfaces, rolled_with
from function.compose import compose_cluster
from function.inputs import Observed, ObservedResource
from function.serving import gpu_metrics
from tests.builders import all_classes, example
from tests.sim.providers import World
from tests.unit import sim
from tests.unit.sim import reported

RESERVATION = "cr-0123456789abcdef0"
MATCHING = {
    "availabilityZone": "us-east-2b",
    "instanceType": "p5en.48xlarge",
    "instanceCount": 2,
    "endDate": "2026-12-14T11:30:00Z",
}


def converge(xr: dict, classes: list[dict], world: World | None = None):
    return sim.converge(xr, all_classes(classes), world)


def composed(xr: dict, classes: list[dict]):
    """The third pass: node groups wait for their launch template's version and for aws-node's
    Pod Identity association, which waits for the cluster (itself after its log group)."""
    out = compose_cluster(xr, all_classes(classes), Observed())
    for _ in range(2):
        out = compose_cluster(xr, all_classes(classes), reported(out))
    return out


def test_zone_cidrs_come_from_the_zone_letter_and_never_overlap():
    region = "us-west-2"
    zones = [region + letter for letter in aws_network.ZONE_LETTERS]
    nets = [ipaddress.ip_network(aws_network.private_cidr(region, z)) for z in zones]
    nets += [ipaddress.ip_network(aws_network.public_cidr(region, z)) for z in zones]
    vpc = ipaddress.ip_network(aws_network.VPC_CIDR)
    assert all(n.subnet_of(vpc) for n in nets)
    assert not any(a.overlaps(b) for i, a in enumerate(nets) for b in nets[i + 1 :])
    assert aws_network.private_cidr(region, "us-west-2c") == "10.0.32.0/20"
    assert aws_network.public_cidr(region, "us-west-2c") == "10.0.200.0/22"


def test_adding_a_zone_leaves_every_other_zone_as_it_was():
    xr, classes = example("eks-on-demand")
    before = compose_cluster(xr, all_classes(classes), Observed())
    grown = copy.deepcopy(xr)
    grown["spec"]["nodePools"][0]["zones"] = ["us-west-2a", "us-west-2c"]
    after = compose_cluster(grown, all_classes(classes), reported(before))
    for key, desired in before.resources.items():
        if key.endswith(("us-west-2a", "us-west-2b")):
            assert after.resources[key].body == desired.body, key
    assert "subnet-private-us-west-2c" in after.resources
    assert set(before.resources) - set(after.resources) == set()


def test_a_zone_once_built_outlives_its_last_pool():
    xr, classes = example("eks-on-demand")
    grown = copy.deepcopy(xr)
    grown["spec"]["nodePools"][0]["zones"] = ["us-west-2c"]
    built = compose_cluster(grown, all_classes(classes), Observed())
    # Back to us-west-2a: the us-west-2c network stays, nothing is re-addressed.
    again = compose_cluster(xr, all_classes(classes), reported(built))
    assert {"subnet-private-us-west-2c", "nat-gateway-us-west-2c"} <= set(again.resources)
    assert again.resources["subnet-private-us-west-2c"].body == (
        built.resources["subnet-private-us-west-2c"].body
    )


def test_every_private_route_table_reaches_s3_through_one_gateway_endpoint():
    xr, classes = example("eks-on-demand")
    grown = copy.deepcopy(xr)
    grown["spec"]["nodePools"][0]["zones"] = ["us-west-2a", "us-west-2c"]
    out = compose_cluster(grown, all_classes(classes), Observed())
    endpoint = out.resources["vpc-endpoint-s3"].body
    spec = endpoint["spec"]["forProvider"]
    assert endpoint["kind"] == "VPCEndpoint"
    assert spec["serviceName"] == "com.amazonaws.us-west-2.s3"
    assert spec["vpcEndpointType"] == "Gateway"
    assert (
        spec["vpcIdRef"]
        == out.resources["subnet-private-us-west-2a"].body["spec"]["forProvider"]["vpcIdRef"]
    )
    tables = {
        k.removeprefix("route-table-private-"): d.body["metadata"]["name"]
        for k, d in out.resources.items()
        if k.startswith("route-table-private-")
    }
    assert set(tables) == {"us-west-2a", "us-west-2c"}
    associations = {
        k.removeprefix("vpc-endpoint-s3-private-"): d.body["spec"]["forProvider"]
        for k, d in out.resources.items()
        if d.body["kind"] == "VPCEndpointRouteTableAssociation"
    }
    assert associations == {
        zone: {
            "region": "us-west-2",
            "vpcEndpointIdRef": {"name": endpoint["metadata"]["name"]},
            "routeTableIdRef": {"name": table},
        }
        for zone, table in tables.items()
    }
    # The public route table goes to the internet gateway: S3 is for the nodes' side only.
    public = out.resources["route-table-public"].body["metadata"]["name"]
    assert public not in {a["routeTableIdRef"]["name"] for a in associations.values()}


def test_audit_logs_go_to_a_log_group_composed_first_with_a_bounded_retention():
    xr, classes = example("eks-on-demand")
    first = compose_cluster(xr, all_classes(classes), Observed())
    group = first.resources["cluster-log-group"].body
    assert group["kind"] == "Group"
    assert group["spec"]["forProvider"]["retentionInDays"] == 90
    # Not before the group is there: EKS would make it itself, without expiry.
    assert "cluster" not in first.resources
    ready = next(c for c in first.conditions if c.type == "ClusterReady")
    assert "cluster-log-group" in ready.message, ready
    second = compose_cluster(xr, all_classes(classes), reported(first))
    cluster = second.resources["cluster"].body
    # Created logging, not updated after.
    assert cluster["spec"]["forProvider"]["enabledClusterLogTypes"] == ["audit", "authenticator"]
    out = converge(xr, classes)
    logging = out.resources["cluster"].body["spec"]["forProvider"]["enabledClusterLogTypes"]
    assert logging == ["audit", "authenticator"]
    assert group["metadata"]["annotations"]["crossplane.io/external-name"] == (
        f"/aws/eks/{cluster['metadata']['name']}/cluster"
    )
    # The group outlives the cluster: deleted after it, so nothing is logged into a group
    # EKS would create again.
    usage = out.resources["usage-cluster-log-group-by-cluster"].body["spec"]
    assert usage["of"]["resourceRef"]["name"] == group["metadata"]["name"]
    assert usage["by"]["resourceRef"]["name"] == cluster["metadata"]["name"]
    # Once on, on for good: a group whose status is lost for a while changes nothing.
    lost = reported(out, drop_status=("cluster-log-group",))
    again = compose_cluster(xr, all_classes(classes), lost)
    assert again.resources["cluster"].body == out.resources["cluster"].body


def test_zones_are_padded_to_two_from_the_regions_letters():
    xr, classes = example("eks-on-demand")
    out = compose_cluster(xr, all_classes(classes), Observed())
    assert {k for k in out.resources if k.startswith("subnet-private-")} == {
        "subnet-private-us-west-2a",
        "subnet-private-us-west-2b",
    }
    xr["spec"]["cluster"]["eks"]["region"] = "us-west-1"
    for p in xr["spec"]["nodePools"]:
        p.pop("zones", None)
    out = compose_cluster(xr, all_classes(classes), Observed())
    assert {k for k in out.resources if k.startswith("subnet-private-")} == {
        "subnet-private-us-west-1b",
        "subnet-private-us-west-1c",
    }


def test_efa_interfaces_follow_the_current_ec2_layout():
    p5en = efa_interfaces(shapes.EC2["p5en.48xlarge"])
    assert p5en[0] == {
        "networkCardIndex": 0,
        "deviceIndex": 0,
        "interfaceType": "interface",
        "deleteOnTermination": "true",
    }
    efa = [i for i in p5en if i["interfaceType"] == "efa-only"]
    assert [i["networkCardIndex"] for i in efa] == list(range(16))
    assert efa[0]["deviceIndex"] == 1 and all(i["deviceIndex"] == 0 for i in efa[1:])
    assert not any(i["interfaceType"] == "efa" for i in p5en)
    # p6-b300: card 0 carries no EFA, sixteen other cards do.
    b300 = efa_interfaces(shapes.EC2["p6-b300.48xlarge"])
    assert [i["networkCardIndex"] for i in b300 if i["interfaceType"] == "efa-only"] == list(
        range(1, 17)
    )
    assert (
        len(
            [
                i
                for i in efa_interfaces(shapes.EC2["p6-b200.48xlarge"])
                if i["interfaceType"] == "efa-only"
            ]
        )
        == 8
    )
    assert len(efa_interfaces(shapes.EC2["p5.48xlarge"])) == 33


def test_launch_template_waits_for_both_security_groups_then_sticks():
    xr, classes = example("eks")
    world = World(capacity_reservations={RESERVATION: MATCHING})
    first = compose_cluster(xr, all_classes(classes), Observed())
    assert "launch-template-gpu-h200" not in first.resources
    assert "nodegroup-gpu-h200" not in first.resources
    out = converge(xr, classes, world)
    lt = out.resources["launch-template-gpu-h200"].body["spec"]["forProvider"]
    groups = lt["networkInterfaces"][0]["securityGroups"]
    assert len(groups) == 2 and all(g.startswith("sg-") for g in groups)
    assert out.resources["nodegroup-gpu-h200"].body["spec"]["forProvider"]["launchTemplate"] == {
        "name": lt["name"],
        "version": "1",
    }
    # The cluster's and the EFA group's status vanish: the template and group stay as they are.
    lost = reported(
        out, world, drop_status=("cluster", "efa-security-group", "launch-template-gpu-h200")
    )
    again = compose_cluster(xr, all_classes(classes), lost)
    for key in ("launch-template-gpu-h200", "nodegroup-gpu-h200"):
        assert again.resources[key].body["spec"] == out.resources[key].body["spec"], key


STARTS = "2026-12-10T11:30:00Z"
BEFORE = datetime(2026, 12, 3, tzinfo=UTC)
DURING = datetime(2026, 12, 12, tzinfo=UTC)
NEAR_END = datetime(2026, 12, 14, 10, 45, tzinfo=UTC)
LATER_BLOCK = World(capacity_reservations={RESERVATION: {**MATCHING, "startDate": STARTS}})


def group_sizes(out) -> tuple[dict, dict]:
    spec = out.resources["nodegroup-gpu-h200"].body["spec"]
    return spec["forProvider"].get("scalingConfig"), spec["initProvider"]["scalingConfig"]


def test_a_block_that_has_not_started_asks_for_no_nodes_and_says_when_it_starts():
    xr, classes = example("eks")
    with clock.fixed(BEFORE):
        out = converge(xr, classes, LATER_BLOCK)
    scaling, created = group_sizes(out)
    assert scaling is None  # created from initProvider, never sent again
    assert created == {"minSize": 0, "maxSize": 2, "desiredSize": 0}
    (warning,) = [r for r in out.results if r.reason == "CapacityBlockPending"]
    assert f"capacity block {RESERVATION} of pool 'gpu-h200' starts at {STARTS}" in warning.message
    ready = next(c for c in out.conditions if c.type == "ClusterReady")
    assert not ready.status
    assert f"capacity-block-gpu-h200 (starts {STARTS})" in ready.message
    assert out.ready is False


def test_when_the_block_starts_its_group_is_lifted_once_then_left_to_the_autoscaler():
    xr, classes = example("eks")
    with clock.fixed(BEFORE):
        waiting = converge(xr, classes, LATER_BLOCK)
    with clock.fixed(DURING):
        lifted = compose_cluster(xr, all_classes(classes), reported(waiting, LATER_BLOCK))
        scaling, _ = group_sizes(lifted)
        # In one update: EKS refuses a minimum above the desired size.
        assert scaling == {"minSize": 2, "maxSize": 2, "desiredSize": 2}
        settled = sim.converge(xr, all_classes(classes), LATER_BLOCK)
    scaling, created = group_sizes(settled)
    assert scaling is None  # the autoscaler's again
    assert created == {"minSize": 2, "maxSize": 2, "desiredSize": 2}
    assert not [r for r in settled.results if r.reason == "CapacityBlockPending"]
    assert next(c for c in settled.conditions if c.type == "ClusterReady").status


def test_near_its_end_nothing_holds_the_group_up():
    """EKS scales a Capacity Block group to zero before the block ends; a minimum would fight it."""
    xr, classes = example("eks")
    with clock.fixed(NEAR_END):
        out = converge(xr, classes, LATER_BLOCK)
    scaling, created = group_sizes(out)
    assert scaling is None
    assert created["minSize"] == 0
    assert [r.reason for r in out.results if r.reason.startswith("CapacityBlockEnd")] == [
        "CapacityBlockEnding"
    ]


def test_sizes_are_sent_only_while_they_change_so_the_autoscaler_keeps_its_own():
    """The desired size is the autoscaler's: sizes go in forProvider only for the update that
    changes the bounds, with the reported desired size kept within them (EKS refuses a minimum
    above it); upjet re-sends a desiredSize sitting beside forProvider's sizes on every sync."""
    xr, classes = example("eks-on-demand")
    out = converge(xr, classes)
    assert all(
        "scalingConfig" not in d.body["spec"]["forProvider"]
        for k, d in out.resources.items()
        if d.body["kind"] == "NodeGroup"
    )
    seen = reported(out)
    status = seen.resources["nodegroup-gpu-l4"].body["status"]["atProvider"]
    status["scalingConfig"] = {"minSize": 1, "maxSize": 4, "desiredSize": 3}  # scaled up
    assert (
        "scalingConfig"
        not in compose_cluster(xr, all_classes(classes), seen)
        .resources["nodegroup-gpu-l4"]
        .body["spec"]["forProvider"]
    )
    raised = copy.deepcopy(xr)
    raised["spec"]["nodePools"][0]["minNodeCount"] = 4
    again = compose_cluster(raised, all_classes(classes), seen)
    sent = again.resources["nodegroup-gpu-l4"].body["spec"]["forProvider"]["scalingConfig"]
    assert sent == {"minSize": 4, "maxSize": 4, "desiredSize": 4}
    lowered = copy.deepcopy(xr)
    lowered["spec"]["nodePools"][0]["maxNodeCount"] = 2
    again = compose_cluster(lowered, all_classes(classes), seen)
    sent = again.resources["nodegroup-gpu-l4"].body["spec"]["forProvider"]["scalingConfig"]
    assert sent == {"minSize": 1, "maxSize": 2, "desiredSize": 2}


def test_the_same_request_and_clock_give_the_same_answer():
    xr, classes = example("eks")
    with clock.fixed(BEFORE):
        one = converge(xr, classes, LATER_BLOCK)
        two = converge(xr, classes, LATER_BLOCK)
    assert one.resources == two.resources and one.results == two.results


def test_capacity_block_node_group_and_launch_template():
    xr, classes = example("eks")
    out = converge(xr, classes, World(capacity_reservations={RESERVATION: MATCHING}))
    group = out.resources["nodegroup-gpu-h200"].body["spec"]
    assert group["forProvider"]["capacityType"] == "CAPACITY_BLOCK"
    assert "instanceTypes" not in group["forProvider"]
    assert group["initProvider"] == {
        "scalingConfig": {"minSize": 2, "maxSize": 2, "desiredSize": 2}
    }
    assert "scalingConfig" not in group["forProvider"]
    assert "LateInitialize" not in group["managementPolicies"]
    lt = out.resources["launch-template-gpu-h200"].body["spec"]["forProvider"]
    assert lt["instanceMarketOptions"] == {"marketType": "capacity-block"}
    assert lt["capacityReservationSpecification"] == {
        "capacityReservationTarget": {"capacityReservationId": RESERVATION}
    }
    reservation = out.resources["capacity-block-gpu-h200"].body
    assert reservation["kind"] == "CapacityBlockReservation"
    assert reservation["spec"]["forProvider"] == {"region": "us-east-2"}
    assert reservation["spec"]["managementPolicies"] == ["Observe"]
    assert reservation["metadata"]["annotations"]["crossplane.io/external-name"] == RESERVATION
    assert not [r for r in out.results if r.severity == "Warning"]


@pytest.mark.parametrize(
    ("reported_reservation", "expected"),
    [
        ({**MATCHING, "availabilityZone": "us-east-2a"}, "is in us-east-2a, but the pool's zones"),
        ({**MATCHING, "instanceType": "p5.48xlarge"}, "reserves p5.48xlarge, but class"),
        ({**MATCHING, "instanceCount": 1}, "reserves 1 instances, fewer than the pool's 2 nodes"),
        (None, "is not active (expired, cancelled or not found)"),
    ],
    ids=["zone", "instance-type", "count", "gone"],
)
def test_capacity_block_mismatches_are_warned_naming_the_pool(reported_reservation, expected):
    xr, classes = example("eks")
    world = World(
        capacity_reservations={RESERVATION: reported_reservation} if reported_reservation else {}
    )
    out = converge(xr, classes, world)
    warnings = [r.message for r in out.results if r.severity == "Warning"]
    assert any(expected in w and "pool 'gpu-h200'" in w for w in warnings), warnings
    # A reservation's state never holds the cluster back or removes anything.
    assert "nodegroup-gpu-h200" in out.resources


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"instanceType": "g6.xlarge"}, "fabric EFA asked, but g6.xlarge has no EFA"),
        ({"accelerator": {"type": "nvidia-h200", "count": 4}}, "accelerator count 4 disagrees"),
        ({"instanceType": "p9.96xlarge"}, "instance type not in the shape table"),
    ],
    ids=["efa-without-efa", "accelerator-count", "unknown-type"],
)
def test_shape_warnings(change, expected):
    xr, classes = example("eks")
    classes = copy.deepcopy(classes)
    classes[0]["spec"]["provisioning"]["eks"].update(change)
    out = compose_cluster(xr, all_classes(classes), Observed())
    warnings = [r.message for r in out.results if r.reason == "ShapeMismatch"]
    assert any(expected in w for w in warnings), warnings
    assert all("pool 'gpu-h200'" in w for w in warnings)


def test_declared_gpu_devices_are_checked_against_the_instance():
    xr, classes = example("eks")
    classes = copy.deepcopy(classes)
    classes[0]["spec"]["devices"][0]["count"] = 4
    out = compose_cluster(xr, all_classes(classes), Observed())
    assert any("declares 4 GPU devices, but p5en.48xlarge has 8" in r.message for r in out.results)


def test_autoscaling_range_without_a_size_starts_at_its_minimum():
    xr, classes = example("eks-on-demand")
    pool = xr["spec"]["nodePools"][0]
    pool.update(nodeCount=1, minNodeCount=2, maxNodeCount=10)
    out = composed(xr, classes)
    spec = out.resources["nodegroup-gpu-l4"].body["spec"]
    assert spec["initProvider"] == {
        "scalingConfig": {"minSize": 2, "maxSize": 10, "desiredSize": 2}
    }
    assert out.status["gpuPools"][0]["nodes"] == 10


def test_fixed_pool_and_pool_without_zones():
    xr, classes = example("eks-on-demand")
    xr["spec"]["nodePools"][1].pop("maxNodeCount")
    xr["spec"]["nodePools"][1]["nodeCount"] = 3
    out = composed(xr, classes)
    spec = out.resources["nodegroup-gpu-l40s"].body["spec"]
    assert spec["initProvider"]["scalingConfig"] == {"minSize": 3, "maxSize": 3, "desiredSize": 3}
    # No zones: every private subnet of the cluster.
    assert [r["name"] for r in spec["forProvider"]["subnetIdRefs"]] == [
        out.resources["subnet-private-us-west-2a"].body["metadata"]["name"],
        out.resources["subnet-private-us-west-2b"].body["metadata"]["name"],
    ]
    # The instance type and disk come from the pool's launch template (IMDS closed to pods).
    assert "instanceTypes" not in spec["forProvider"]
    lt = out.resources["launch-template-gpu-l40s"].body["spec"]["forProvider"]
    assert lt["instanceType"] == "g6e.12xlarge"
    assert spec["forProvider"]["launchTemplate"]["name"] == lt["name"]
    assert spec["forProvider"]["taint"] == [
        {"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}
    ]


def test_pool_names_that_are_label_values_get_valid_cloud_names():
    xr, classes = example("eks-on-demand")
    xr["spec"]["nodePools"][0]["name"] = "H100_Pool"
    xr["spec"]["nodePools"][1]["name"] = "h100-pool"
    out = composed(xr, classes)
    a = out.resources["nodegroup-H100_Pool"].body
    b = out.resources["nodegroup-h100-pool"].body
    assert a["metadata"]["name"] != b["metadata"]["name"]
    for body in (a, b):
        assert body["metadata"]["name"].islower() and "_" not in body["metadata"]["name"]
    assert a["spec"]["forProvider"]["labels"]["modelplane.ai/pool"] == "H100_Pool"
    assert [p["name"] for p in out.status["gpuPools"]] == ["H100_Pool", "h100-pool"]


def test_a_class_of_another_cloud_is_an_invalid_pool_and_keeps_its_resources():
    xr, classes = example("eks-on-demand")
    out = converge(xr, classes)
    broken = copy.deepcopy(classes)
    broken[1]["spec"]["provisioning"] = {
        "provider": "GKE",
        "gke": {"machineType": "g2-standard-8", "accelerator": {"type": "nvidia-l4"}},
    }
    again = compose_cluster(xr, all_classes(broken), reported(out))
    assert set(again.resources) == set(out.resources)
    assert (
        again.resources["nodegroup-gpu-l40s"].body["spec"]
        == (out.resources["nodegroup-gpu-l40s"].body["spec"])
    )
    cluster_ready = next(c for c in again.conditions if c.type == "ClusterReady")
    assert (cluster_ready.status, cluster_ready.reason) == (False, "InvalidNodePool")
    assert "spec.nodePools[1] 'gpu-l40s'" in cluster_ready.message
    assert "eks-l40s-4x-g6e" in cluster_ready.message
    assert any(r.reason == "InvalidNodePool" for r in again.results)


def test_wait_message_names_what_it_waits_for():
    xr, classes = example("eks-on-demand")
    out = compose_cluster(xr, all_classes(classes), Observed())
    message = next(c for c in out.conditions if c.type == "ClusterReady").message
    assert message.startswith("waiting for ")
    # What is not composed yet says what it waits for.
    assert "cluster (cluster-log-group)" in message and "and " in message
    assert len(message) <= 512


# --- zones that stay -------------------------------------------------------------------------


def changed(before, after) -> set[str]:
    """Keys whose body changed or went, between two compositions."""
    return {
        k
        for k, d in before.resources.items()
        if k not in after.resources or after.resources[k].body != d.body
    }


def test_a_pool_added_in_a_new_zone_removes_and_rewrites_nothing_of_the_others():
    # One pool in us-west-2a, padded to two zones with us-west-2b.
    xr, classes = example("eks-on-demand")
    xr["spec"]["nodePools"] = xr["spec"]["nodePools"][:1]
    out = converge(xr, classes)
    assert "subnet-private-us-west-2b" in out.resources
    grown = copy.deepcopy(xr)
    grown["spec"]["nodePools"].append(
        {"name": "gpu-c", "className": "eks-l40s-4x-g6e", "nodeCount": 1, "zones": ["us-west-2c"]}
    )
    after = compose_cluster(grown, all_classes(classes), reported(out))
    assert changed(out, after) == set()
    # The new pool's node group follows its launch template's first report.
    after = compose_cluster(grown, all_classes(classes), reported(after))
    assert changed(out, after) == set()
    ng = after.resources["nodegroup-gpu-c"].body["spec"]["forProvider"]
    assert [r["name"] for r in ng["subnetIdRefs"]] == [
        after.resources["subnet-private-us-west-2c"].body["metadata"]["name"]
    ]
    for key in (
        "nat-gateway-us-west-2c",
        "efs-mount-target-us-west-2c",
        "subnet-public-us-west-2c",
    ):
        assert key in after.resources
    # The next pass, with the new zone's network reported, rewrites nothing either.
    again = compose_cluster(grown, all_classes(classes), reported(after))
    assert changed(after, again) == set()


def test_a_pools_zones_never_move_its_node_group():
    xr, classes = example("eks-on-demand")
    out = converge(xr, classes)
    moved = copy.deepcopy(xr)
    moved["spec"]["nodePools"][0]["zones"] = ["us-west-2c"]
    after = compose_cluster(moved, all_classes(classes), reported(out))
    key = "nodegroup-gpu-l4"
    assert after.resources[key].body == out.resources[key].body
    warnings = [r.message for r in after.results if r.reason == "ZonesImmutable"]
    assert len(warnings) == 1 and "pool 'gpu-l4'" in warnings[0] and "us-west-2c" in warnings[0]
    # The new zone is built for whatever is created there later; nothing else changed.
    assert "subnet-private-us-west-2c" in after.resources
    assert changed(out, after) == set()


# --- upgrades --------------------------------------------------------------------------------


def versions(out) -> dict[str, str | None]:
    """The version every versioned resource is set to."""
    found = {}
    for key, desired in out.resources.items():
        spec = desired.body["spec"].get("forProvider", {})
        if desired.body["kind"] in ("Cluster", "NodeGroup") and desired.body[
            "apiVersion"
        ].startswith("eks."):
            found[key] = spec.get("version")
        elif desired.body["kind"] == "Addon":
            found[key] = spec.get("addonVersion")
    return found


def upgrade(xr: dict, classes: list[dict], to: str, world: World | None = None):
    """Converge, raise the version, and return the version changes of each pass after it."""
    out = converge(xr, classes, world)
    raised = copy.deepcopy(xr)
    raised["spec"]["cluster"]["eks"]["kubernetesVersion"] = to
    steps = []
    for _ in range(12):
        again = compose_cluster(raised, all_classes(classes), reported(out, world))
        before, after = versions(out), versions(again)
        moved = {k: after[k] for k in after if before.get(k) != after[k]}
        assert set(before) == set(after)
        if not moved and again.resources == out.resources:
            return steps, again
        steps.append(moved)
        out = again
    raise AssertionError("no convergence")


def test_a_version_bump_moves_the_control_plane_then_the_node_groups_then_the_addons():
    """The node groups one at a time, as when EKS moves the control plane: the system group
    first, then the GPU pools by name."""
    xr, classes = example("eks-on-demand")
    xr["spec"]["cluster"]["eks"]["kubernetesVersion"] = "1.34"
    steps, final = upgrade(xr, classes, "1.35")
    assert steps == [
        {"cluster": "1.35"},
        {"system-nodegroup": "1.35"},
        {"nodegroup-gpu-l4": "1.35"},
        {"nodegroup-gpu-l40s": "1.35"},
        {"addon-coredns": "v1.14.3-eksbuild.3", "addon-kube-proxy": "v1.35.3-eksbuild.13"},
    ]
    assert not [r for r in final.results if r.severity == "Warning"]


def test_1_35_to_1_36_moves_every_version_bound_addon_by_the_guides_table():
    """The spec's default minor has its row: kube-proxy and CoreDNS follow (EKS User Guide)."""
    xr, classes = example("eks-on-demand")
    xr["spec"]["cluster"]["eks"]["kubernetesVersion"] = "1.35"
    steps, final = upgrade(xr, classes, "1.36")
    assert steps[0] == {"cluster": "1.36"}
    assert steps[-1] == {"addon-kube-proxy": "v1.36.0-eksbuild.14"}  # CoreDNS: same as 1.35's
    assert not [r for r in final.results if r.severity == "Warning"]


def test_every_addon_update_keeps_what_was_changed_in_its_objects_instead_of_failing():
    xr, classes = example("eks-on-demand")
    out = converge(xr, classes)
    addons = [
        d.body["spec"]["forProvider"] for d in out.resources.values() if d.body["kind"] == "Addon"
    ]
    assert len(addons) >= 6
    for addon in addons:
        assert addon["resolveConflictsOnUpdate"] == "PRESERVE", addon["addonName"]
        assert addon["resolveConflictsOnCreate"] == "OVERWRITE", addon["addonName"]


def test_a_bump_of_two_minors_goes_one_at_a_time():
    xr, classes = example("eks-on-demand")
    xr["spec"]["cluster"]["eks"]["kubernetesVersion"] = "1.33"
    steps, _ = upgrade(xr, classes, "1.35")
    clusters = [s["cluster"] for s in steps if "cluster" in s]
    assert clusters == ["1.34", "1.35"]
    # Each step of the control plane is alone, and comes after the node groups and add-ons
    # reached the one before.
    assert all(len(s) == 1 for s in steps if "cluster" in s)
    second = next(i for i, s in enumerate(steps) if s.get("cluster") == "1.35")
    assert any(s.get("addon-kube-proxy") == "v1.34.6-eksbuild.13" for s in steps[:second])
    assert any(s.get("nodegroup-gpu-l4") == "1.34" for s in steps[:second])


@pytest.mark.parametrize("name", ["eks", "eks-on-demand"])
def test_raising_each_eks_examples_version_moves_exactly_the_control_plane_then_the_pools(name):
    xr, classes = example(name)
    world = World(capacity_reservations={RESERVATION: MATCHING})
    steps, final = upgrade(xr, classes, "1.37", world)
    groups = sorted(
        k for k in final.resources if k == "system-nodegroup" or k.startswith("nodegroup-")
    )
    # 1.37 is not in the add-on table: the add-ons keep EKS's versions. The groups one at a
    # time, the system group first; a Capacity Block group with nodes is drained first, in
    # passes that move only sizes (left out here), while the others wait their turn.
    order = sorted(groups, key=lambda g: (g != "system-nodegroup", g))
    expected = [{"cluster": "1.37"}, *({g: "1.37"} for g in order)]
    assert [s for s in steps if s] == expected


def test_a_capacity_block_group_is_scaled_to_zero_upgraded_and_restored():
    """The EKS guide: scale a Capacity Block node group to 0 before upgrading it. The function
    drains it, upgrades it at 0, restores its size, and then leaves it to the autoscaler."""
    xr, classes = example("eks")
    world = World(capacity_reservations={RESERVATION: MATCHING})
    out = converge(xr, classes, world)
    raised = copy.deepcopy(xr)
    raised["spec"]["cluster"]["eks"]["kubernetesVersion"] = "1.37"
    seen = []
    for _ in range(10):
        again = compose_cluster(raised, all_classes(classes), reported(out, world))
        body = again.resources["nodegroup-gpu-h200"].body
        spec = body["spec"]["forProvider"]
        note = body["metadata"].get("annotations", {}).get("modelplane.ai/restore-desired-size")
        state = (spec.get("version"), spec.get("scalingConfig"), note)
        if not seen or seen[-1] != state:
            seen.append(state)
        if again.resources == out.resources:
            break
        out = again
    scaled = {"minSize": 0, "maxSize": 2, "desiredSize": 0}
    assert seen == [
        ("1.36", None, None),  # the control plane goes first
        ("1.36", scaled, "2"),  # drained at the old version
        ("1.37", scaled, "2"),  # upgraded with no node
        ("1.37", {"minSize": 2, "maxSize": 2, "desiredSize": 2}, "2"),  # restored
        ("1.37", None, None),  # the autoscaler's again
    ]
    warnings = [r.message for r in again.results if r.reason == "CapacityBlockUpgrade"]
    assert not warnings  # said while it drains, not once it is done


def test_an_addon_with_no_known_version_for_the_new_minor_stays_and_says_so():
    xr, classes = example("eks-on-demand")
    out = converge(xr, classes)
    seen = reported(out)
    # As the provider late-initialises it: EKS's default for 1.36, in spec and status.
    addon = seen.resources["addon-kube-proxy"].body
    addon["spec"]["forProvider"]["addonVersion"] = "v1.36.2-eksbuild.1"
    addon["status"]["atProvider"]["addonVersion"] = "v1.36.2-eksbuild.1"
    seen.resources["cluster"].body["status"]["atProvider"]["version"] = "1.37"
    for key, resource in seen.resources.items():
        if key == "system-nodegroup" or key.startswith("nodegroup-"):
            resource.body["status"]["atProvider"]["version"] = "1.37"
    raised = copy.deepcopy(xr)
    raised["spec"]["cluster"]["eks"]["kubernetesVersion"] = "1.37"
    again = compose_cluster(raised, all_classes(classes), seen)
    spec = again.resources["addon-kube-proxy"].body["spec"]["forProvider"]
    assert spec["addonVersion"] == "v1.36.2-eksbuild.1"
    warnings = [r.message for r in again.results if r.reason == "AddonVersionUnknown"]
    warning = next(w for w in warnings if "kube-proxy" in w)
    assert "kube-proxy stays at v1.36.2-eksbuild.1" in warning and "1.37" in warning
    assert "set spec.forProvider.addonVersion on its Addon" in warning
    assert any(w.startswith("add-on coredns stays at") for w in warnings)


def test_a_downgrade_or_a_bad_version_changes_nothing_and_says_so():
    xr, classes = example("eks-on-demand")
    out = converge(xr, classes)
    for bad in ("1.35", "latest"):
        lowered = copy.deepcopy(xr)
        lowered["spec"]["cluster"]["eks"]["kubernetesVersion"] = bad
        again = compose_cluster(lowered, all_classes(classes), reported(out))
        assert versions(again) == versions(out)
        warning = next(r.message for r in again.results if r.reason == "InvalidVersion")
        assert f"kubernetesVersion {bad!r}" in warning


def at_and_raised(at: str, to: str):
    """eks-on-demand converged at one version, and its spec raised to another."""
    xr, classes = example("eks-on-demand")
    xr["spec"]["cluster"]["eks"]["kubernetesVersion"] = at
    raised = copy.deepcopy(xr)
    raised["spec"]["cluster"]["eks"]["kubernetesVersion"] = to
    return xr, raised, classes, converge(xr, classes)


def test_versions_stay_while_the_cluster_status_is_lost():
    _, raised, classes, out = at_and_raised("1.34", "1.35")
    lost = compose_cluster(raised, all_classes(classes), reported(out, drop_status=("cluster",)))
    assert versions(lost) == versions(out)


# --- Capacity Blocks, EFS, metadata, cost ------------------------------------------------------


def test_capacity_block_node_groups_roll_out_within_the_reservation():
    xr, classes = example("eks")
    out = converge(xr, classes, World(capacity_reservations={RESERVATION: MATCHING}))
    update = out.resources["nodegroup-gpu-h200"].body["spec"]["forProvider"]["updateConfig"]
    assert update == {"maxUnavailable": 1, "updateStrategy": "MINIMAL"}
    system = out.resources["system-nodegroup"].body["spec"]["forProvider"]["updateConfig"]
    assert system == {"maxUnavailable": 1}


@pytest.mark.parametrize("name", ["eks", "eks-on-demand"])
def test_every_node_group_repairs_its_unhealthy_nodes(name):
    """EKS node auto repair is off by default on managed node groups: every group, the system
    one and each GPU pool's (Capacity Block or not), turns it on."""
    xr, classes = example(name)
    out = converge(xr, classes, World(capacity_reservations={RESERVATION: MATCHING}))
    groups = [d.body for d in out.resources.values() if d.body["kind"] == "NodeGroup"]
    assert len(groups) > 1
    for group in groups:
        assert group["spec"]["forProvider"]["nodeRepairConfig"] == {"enabled": True}


@pytest.mark.parametrize(
    ("version", "owned"),
    [
        ("v1.7.0-eksbuild.1", True),
        ("v1.6.3-eksbuild.1", True),
        ("v1.6.2-eksbuild.1", False),
        (None, False),
    ],
)
def test_the_agent_s_host_engine_runs_on_every_amd64_gpu_node_where_its_add_on_takes_it(
    version, owned
):
    """Off its chart's list of instance types the agent still reads DCGM, reports DCGMError
    (Fatal) and node repair reboots the node: where the add-on's version takes
    dcgmAgent.affinity (v1.6.3 on), it runs on every amd64 NVIDIA node; an older one, or one
    whose version is not read yet, is never sent the key (its schema refuses it). The GPU
    metrics releases follow in the same reconcile."""
    xr, classes = example("eks-on-demand")
    out = converge(xr, classes, World(node_monitoring_agent=version))
    addon = out.resources["addon-eks-node-monitoring-agent"].body["spec"]["forProvider"]
    dcgm = json.loads(addon["configurationValues"])["dcgmAgent"]
    assert dcgm.get("affinity") == (eks_dcgm.OWNED_AFFINITY if owned else None)
    release = out.resources["release-dcgm-exporter"].body["spec"]["forProvider"]["values"]
    embedded = out.resources["release-dcgm-exporter-embedded"].body["spec"]["forProvider"]
    assert release == gpu_metrics.values("EKS", False, "/", owned)
    assert embedded["values"] == gpu_metrics.EMBEDDED_VALUES[owned]
    # An agent read to be older is named, with what to set, where: the function cannot widen
    # its placement, and EKS never moves the add-on.
    outdated = [r for r in out.results if r.reason == "NodeMonitoringAgentOutdated"]
    if version == "v1.6.2-eksbuild.1":
        (warning,) = outdated
        assert warning.severity == "Warning"
        assert "v1.6.2" in warning.message and "spec.forProvider.addonVersion" in warning.message
        assert addon_name(out) in warning.message
    else:
        assert outdated == []


def addon_name(out) -> str:
    return out.resources["addon-eks-node-monitoring-agent"].body["metadata"]["name"]


def test_the_node_monitoring_agent_s_dcgm_host_engine_tolerates_every_gpu_node_s_taint():
    """The agent sets AcceleratedHardwareReady, which node repair acts on; its DCGM host engine
    tolerates no taint by default, so the add-on's configuration adds one for the GPU taint every
    GPU node group carries."""
    xr, classes = example("eks-on-demand")
    out = converge(xr, classes, World())
    addon = out.resources["addon-eks-node-monitoring-agent"].body["spec"]["forProvider"]
    assert addon["addonName"] == "eks-node-monitoring-agent"
    assert "addonVersion" not in addon  # EKS's default for the cluster's minor
    tolerations = json.loads(addon["configurationValues"])["dcgmAgent"]["tolerations"]
    effects = {"NO_SCHEDULE": "NoSchedule", "NO_EXECUTE": "NoExecute"}
    taints = [
        t
        for d in out.resources.values()
        if d.body["kind"] == "NodeGroup"
        for t in d.body["spec"]["forProvider"].get("taint") or []
    ]
    assert taints
    for taint in taints:
        assert any(
            t["key"] == taint["key"]
            and t["operator"] == "Exists"
            and t["effect"] == effects[taint["effect"]]
            for t in tolerations
        ), taint


def test_efs_addon_comes_after_its_pod_identity_and_never_needs_imds_to_delete():
    xr, classes = example("eks-on-demand")
    logs = compose_cluster(xr, all_classes(classes), Observed())
    # The control plane comes once its log group is Ready.
    first = compose_cluster(xr, all_classes(classes), reported(logs))
    assert "addon-aws-efs-csi-driver" not in first.resources
    assert "pod-identity-efs-csi" in first.resources
    without_agent = reported(first)
    again = compose_cluster(xr, all_classes(classes), without_agent)
    addon = again.resources["addon-aws-efs-csi-driver"].body["spec"]["forProvider"]
    assert json.loads(addon["configurationValues"]) == {
        "controller": {"deleteAccessPointRootDir": False}
    }
    # Once composed it stays, whatever the association reports.
    lost = reported(again, drop_status=("pod-identity-efs-csi", "addon-eks-pod-identity-agent"))
    assert "addon-aws-efs-csi-driver" in compose_cluster(xr, all_classes(classes), lost).resources


def test_gpu_launch_templates_give_pods_no_instance_metadata_and_clusters_standard_support():
    xr, classes = example("eks")
    out = converge(xr, classes, World(capacity_reservations={RESERVATION: MATCHING}))
    groups = [k for k, d in out.resources.items() if d.body["kind"] == "NodeGroup"]
    assert "system-nodegroup" in groups and len(groups) >= 2
    for key in groups:
        launch = out.resources[key].body["spec"]["forProvider"]["launchTemplate"]["name"]
        (lt,) = [
            d.body["spec"]["forProvider"]
            for d in out.resources.values()
            if d.body["kind"] == "LaunchTemplate"
            and d.body["spec"]["forProvider"]["name"] == launch
        ]
        assert lt["metadataOptions"] == {"httpTokens": "required", "httpPutResponseHopLimit": 1}
    cluster = out.resources["cluster"].body["spec"]["forProvider"]
    assert cluster["upgradePolicy"] == {"supportType": "STANDARD"}


# --- scale from zero, load balancers ----------------------------------------------------------


def test_a_dra_pool_at_zero_keeps_one_node_and_says_so():
    xr, classes = example("eks-on-demand")
    xr["spec"]["nodePools"][0].update(minNodeCount=0, nodeCount=0)
    out = composed(xr, classes)
    spec = out.resources["nodegroup-gpu-l4"].body["spec"]
    assert spec["initProvider"] == {"scalingConfig": {"minSize": 1, "maxSize": 4, "desiredSize": 1}}
    warnings = [r.message for r in out.results if r.reason == "ScaleFromZeroUnsupported"]
    assert len(warnings) == 1 and "pool 'gpu-l4'" in warnings[0]
    # A pool whose class claims nothing through DRA may still sit at zero.
    plain = copy.deepcopy(classes)
    for c in plain:
        for device in c["spec"]["devices"]:
            device["claim"] = "Synthetic"
    out = composed(xr, plain)
    assert out.resources["nodegroup-gpu-l4"].body["spec"]["initProvider"]["scalingConfig"] == {
        "minSize": 0,
        "maxSize": 4,
        "desiredSize": 0,
    }


def test_the_network_outlives_the_stack_so_load_balancers_go_first():
    xr, classes = example("eks-on-demand")
    out = converge(xr, classes)
    usages = {
        (u.body["spec"]["of"]["kind"], u.body["spec"]["of"]["resourceRef"]["name"])
        for k, u in out.resources.items()
        if k.startswith("usage-") and u.body["spec"]["by"]["kind"] == "ClusterAuth"
    }
    for key in ("internet-gateway", "subnet-public-us-west-2a", "subnet-private-us-west-2b"):
        body = out.resources[key].body
        assert (body["kind"], body["metadata"]["name"]) in usages, key


def test_an_upgrade_in_flight_finishes_even_if_the_version_is_lowered_again():
    xr, raised, classes, out = at_and_raised("1.34", "1.35")
    started = compose_cluster(raised, all_classes(classes), reported(out))
    assert versions(started)["cluster"] == "1.35"
    # EKS is still updating: the cluster reports 1.34 while its spec asks 1.35.
    seen = reported(started)
    seen.resources["cluster"].body["status"]["atProvider"]["version"] = "1.34"
    back = compose_cluster(xr, all_classes(classes), seen)
    assert versions(back)["cluster"] == "1.35"


# What upjet puts in the Synced message when the Terraform provider's update fails (the shapes of
# terraform-provider-aws 6.34.0 resourceClusterUpdate and resourceNodeGroupUpdate).
REFUSED = (
    "update failed: async update failed: failed to update the resource: [{0 updating EKS "
    "Cluster (modelplane-eks) version: operation error EKS: UpdateClusterVersion, https response "
    "error StatusCode: 400, RequestID: 0f3c, InvalidStateException: Amazon EKS detected upgrade "
    "readiness issues}]"
)
STARTED_AND_FAILED = (
    "update failed: async update failed: failed to update the resource: [{0 waiting for EKS "
    "Cluster (modelplane-eks) version update (4c1e): unexpected state 'Failed', wanted target "
    "'Successful'}]"
)


def with_cluster(observed, *, status: str | None = None, synced: str | None = None):
    """observed, the Cluster reporting EKS's status and its provider's Synced error."""
    body = observed.resources["cluster"].body
    if status is not None:
        body["status"]["atProvider"]["status"] = status
    if synced is not None:
        conditions = [c for c in body["status"]["conditions"] if c["type"] != "Synced"]
        conditions.append(
            {"type": "Synced", "status": "False", "reason": "ReconcileError", "message": synced}
        )
        body["status"]["conditions"] = conditions
    return observed


def stepped(at: str, to: str):
    """eks-on-demand at `at`, its spec raised to `to`: the Cluster asks for the step and still
    runs `at`. Returns the XR at `at`, the raised one, the classes and the observed state."""
    xr, raised, classes, out = at_and_raised(at, to)
    started = compose_cluster(raised, all_classes(classes), reported(out))
    assert versions(started)["cluster"] == to
    seen = reported(started)
    seen.resources["cluster"].body["status"]["atProvider"]["version"] = at
    return xr, raised, classes, seen


@pytest.mark.parametrize(
    "status, synced",
    [("ACTIVE", None), ("UPDATING", REFUSED), ("ACTIVE", STARTED_AND_FAILED), (None, None)],
)
def test_a_step_that_may_be_under_way_is_kept_when_the_spec_is_lowered(status, synced):
    """Updating, or a Synced error that is not a refusal (one that started, or none: upjet
    reports Synced=True while its update runs): the step finishes first."""
    xr, _, classes, seen = stepped("1.34", "1.35")
    back = compose_cluster(
        xr, all_classes(classes), with_cluster(seen, status=status, synced=synced)
    )
    assert versions(back)["cluster"] == "1.35"
    assert not any(r.reason == "ControlPlaneUpgradeRefused" for r in back.results)


def test_a_step_eks_refused_is_said_and_stays_while_the_spec_asks_for_it():
    _, raised, classes, seen = stepped("1.34", "1.35")
    out = compose_cluster(
        raised, all_classes(classes), with_cluster(seen, status="ACTIVE", synced=REFUSED)
    )
    assert versions(out)["cluster"] == "1.35"
    assert "forceUpdateVersion" not in out.resources["cluster"].body["spec"]["forProvider"]
    warning = next(r.message for r in out.results if r.reason == "ControlPlaneUpgradeRefused")
    assert warning.startswith(
        "EKS refused the control plane's update to 1.35 that "
        "spec.cluster.eks.kubernetesVersion '1.35' asks for"
    )
    assert "InvalidStateException: Amazon EKS detected upgrade readiness issues" in warning
    assert "set kubernetesVersion to 1.34 to take the step back" in warning
    # The node groups do not move while the control plane has not.
    assert versions(out)["system-nodegroup"] == "1.34"


def test_a_spec_lowered_after_eks_refused_the_step_takes_it_back():
    xr, _, classes, seen = stepped("1.34", "1.35")
    back = compose_cluster(
        xr, all_classes(classes), with_cluster(seen, status="ACTIVE", synced=REFUSED)
    )
    assert versions(back)["cluster"] == "1.34"
    warning = next(r.message for r in back.results if r.reason == "ControlPlaneUpgradeRefused")
    assert "the step is taken back to 1.34" in warning
    # Back at what runs, with the refusal gone from the Cluster: nothing more is said or moved.
    after = compose_cluster(xr, all_classes(classes), reported(back))
    assert versions(after) == versions(back)
    assert not [r for r in after.results if r.severity == "Warning"]


def test_a_live_cluster_pinned_by_a_refused_step_of_the_previous_release_converges():
    """An earlier release left the Cluster at the next minor after EKS refused it; lowered
    below what runs, the spec gets InvalidVersion and the Cluster goes back to what runs."""
    _, _, classes, seen = stepped("1.34", "1.35")
    lowered, _ = example("eks-on-demand")
    lowered["spec"]["cluster"]["eks"]["kubernetesVersion"] = "1.33"
    back = compose_cluster(
        lowered, all_classes(classes), with_cluster(seen, status="ACTIVE", synced=REFUSED)
    )
    assert versions(back)["cluster"] == "1.34"
    reasons = {r.reason for r in back.results if r.severity == "Warning"}
    assert {"ControlPlaneUpgradeRefused", "InvalidVersion"} <= reasons
    assert set(back.resources) == set(seen.resources)  # nothing dropped


EVICTION = (
    "update failed: async update failed: failed to update the resource: [{0 waiting for EKS Node "
    "Group (modelplane-eks:modelplane-eks-system) version update (9a2b): unexpected state "
    "'Failed', wanted target 'Successful'. last error: PodEvictionFailure: Reached max retries "
    "while trying to evict pods from nodes in node group modelplane-eks-system}]"
)


def test_a_node_group_whose_update_fails_is_said_naming_its_pool_and_the_next_wait():
    _, raised, classes, seen = stepped("1.34", "1.35")
    seen.resources["cluster"].body["status"]["atProvider"]["version"] = "1.35"
    out = compose_cluster(raised, all_classes(classes), seen)
    assert versions(out)["system-nodegroup"] == "1.35"  # its turn
    # EKS fails its drain: it still reports 1.34 and its provider says why.
    seen = reported(out)
    for key in ("system-nodegroup", "nodegroup-gpu-l4", "nodegroup-gpu-l40s"):
        seen.resources[key].body["status"]["atProvider"]["version"] = "1.34"
    group = seen.resources["system-nodegroup"].body
    group["status"]["conditions"] = [
        c for c in group["status"]["conditions"] if c["type"] != "Synced"
    ] + [{"type": "Synced", "status": "False", "reason": "ReconcileError", "message": EVICTION}]
    blocked = compose_cluster(raised, all_classes(classes), seen)
    assert versions(blocked)["system-nodegroup"] == "1.35"  # never called back
    assert versions(blocked)["nodegroup-gpu-l4"] == "1.34"  # waits
    warning = next(r.message for r in blocked.results if r.reason == "NodeGroupUpgradeBlocked")
    assert warning.startswith("the system node group: EKS did not update its node group (")
    assert "PodEvictionFailure: Reached max retries" in warning
    assert "waiting after it: gpu-l4, gpu-l40s" in warning
    assert "PodDisruptionBudget" in warning
    assert (
        "forceUpdateVersion"
        not in blocked.resources["system-nodegroup"].body["spec"]["forProvider"]
    )
    # A wait that timed out while EKS still reports the group UPDATING is no failure: a GPU
    # group replaced a node at a time outlasts the provider's 60 minutes.
    group["status"]["atProvider"]["status"] = "UPDATING"
    under_way = compose_cluster(raised, all_classes(classes), seen)
    assert not any(r.reason == "NodeGroupUpgradeBlocked" for r in under_way.results)
    assert versions(under_way)["nodegroup-gpu-l4"] == "1.34"  # still waits its turn
    group["status"]["atProvider"]["status"] = "ACTIVE"
    # Another Synced error (a scaling update refused) is not said as a blocked upgrade.
    group["status"]["conditions"][-1]["message"] = (
        "update failed: async update failed: failed to update the resource: [{0 updating EKS "
        "Node Group (x): operation error EKS: UpdateNodegroupConfig, InvalidParameterException}]"
    )
    other = compose_cluster(raised, all_classes(classes), seen)
    assert not any(r.reason == "NodeGroupUpgradeBlocked" for r in other.results)


def support(out) -> str:
    return out.resources["cluster"].body["spec"]["forProvider"]["upgradePolicy"]["supportType"]


@pytest.mark.parametrize(
    "runs, reported_type, expected, warned",
    [
        ("1.34", "EXTENDED", "EXTENDED", True),  # standard support ended 2026-12-02
        ("1.32", "EXTENDED", "EXTENDED", True),
        ("1.35", "EXTENDED", "STANDARD", False),  # still in standard support: taken back
        ("1.34", "STANDARD", "STANDARD", False),  # EKS moves it itself
        ("1.28", "EXTENDED", "EXTENDED", True),  # older than the calendar
    ],
)
def test_a_cluster_in_extended_support_is_not_sent_standard_until_it_can_take_it(
    runs, reported_type, expected, warned
):
    xr, classes = example("eks-on-demand")
    xr["spec"]["cluster"]["eks"]["kubernetesVersion"] = runs
    with clock.fixed(datetime(2026, 12, 7, tzinfo=UTC)):
        seen = reported(converge(xr, classes))
        body = seen.resources["cluster"].body
        body["status"]["atProvider"]["upgradePolicy"] = {"supportType": reported_type}
        body["status"]["atProvider"]["version"] = runs
        out = compose_cluster(xr, all_classes(classes), seen)
        assert support(out) == expected
        said = [r.message for r in out.results if r.reason == "ExtendedSupport"]
        assert bool(said) == warned
        if warned:
            assert f"runs {runs}, past its end of standard support" in said[0]
            assert "raise spec.cluster.eks.kubernetesVersion to 1.35 or newer" in said[0]
        # Its version, or its whole status, lost for a moment: what was sent stands.
        for lost in ({"upgradePolicy": {"supportType": reported_type}}, {}):
            seen = reported(out)
            seen.resources["cluster"].body["status"]["atProvider"] = lost
            again = compose_cluster(xr, all_classes(classes), seen)
            assert support(again) == expected


def test_a_cluster_in_extended_support_goes_back_to_standard_once_the_step_lands():
    xr, classes = example("eks-on-demand")
    xr["spec"]["cluster"]["eks"]["kubernetesVersion"] = "1.34"
    with clock.fixed(datetime(2026, 12, 7, tzinfo=UTC)):
        seen = reported(converge(xr, classes))
        extended = {"supportType": "EXTENDED"}
        seen.resources["cluster"].body["status"]["atProvider"]["upgradePolicy"] = extended
        raised = copy.deepcopy(xr)
        raised["spec"]["cluster"]["eks"]["kubernetesVersion"] = "1.35"
        out = compose_cluster(raised, all_classes(classes), seen)
        # The step goes with EXTENDED unchanged (a refused STANDARD would hold it).
        assert versions(out)["cluster"] == "1.35" and support(out) == "EXTENDED"
        seen = reported(out)
        seen.resources["cluster"].body["status"]["atProvider"]["upgradePolicy"] = extended
        after = compose_cluster(raised, all_classes(classes), seen)
        assert support(after) == "STANDARD"
        assert not any(r.reason == "ExtendedSupport" for r in after.results)


def test_a_live_one_node_system_group_is_raised_to_two_in_one_update():
    """Clusters from before v0.3.0 run a system group of (1, 2, 1): the new bounds go out once,
    with the desired size raised into them (SYSTEM_NODES)."""
    xr, classes = example("eks-on-demand")
    seen = reported(converge(xr, classes))
    status = seen.resources["system-nodegroup"].body["status"]["atProvider"]
    status["scalingConfig"] = {"minSize": 1, "maxSize": 2, "desiredSize": 1}
    again = compose_cluster(xr, all_classes(classes), seen)
    sent = again.resources["system-nodegroup"].body["spec"]["forProvider"]["scalingConfig"]
    assert sent == {"minSize": 2, "maxSize": 3, "desiredSize": 2}


# --- least privilege: aws-node on Pod Identity, nodes that only pull ----------------------------

POLICY = "arn:aws:iam::aws:policy/"
CNI_VERSION = "v1.20.4-eksbuild.1"


def attachments(out) -> dict[str, str]:
    """Attachment key -> policy ARN, of every RolePolicyAttachment composed."""
    return {
        key: d.body["spec"]["forProvider"].get("policyArn")
        for key, d in out.resources.items()
        if d.body.get("kind") == "RolePolicyAttachment"
    }


def aws_node(network_policy: bool, updated: int = 3, desired: int = 3) -> dict:
    """The aws-node DaemonSet as provider-kubernetes reports it (status.atProvider.manifest)."""
    flag = f"--enable-network-policy={'true' if network_policy else 'false'}"
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "aws-node", "namespace": "kube-system", "generation": 4},
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {"name": "aws-node"},
                        {"name": "aws-eks-nodeagent", "args": ["--enable-ipv6=false", flag]},
                    ]
                }
            }
        },
        "status": {
            "observedGeneration": 4,
            "desiredNumberScheduled": desired,
            "updatedNumberScheduled": updated,
            "numberAvailable": desired,
        },
    }


def live_cluster():
    """A cluster the previous release composed and runs: the node role with AmazonEKS_CNI_Policy
    and ECR ReadOnly, no vpc-cni role nor association, the VPC CNI add-on as EKS installed it."""
    xr, classes = example("eks-on-demand")
    out = converge(xr, classes)
    seen = reported(out)
    resources = {
        k: r
        for k, r in seen.resources.items()
        if not k.startswith(("iam-role-vpc-cni", "iam-attach-vpc-cni", "pod-identity-vpc-cni"))
        and k not in ("iam-attach-node-ecr-pull",)
    }
    role = out.resources["iam-role-node"].body["metadata"]["name"]
    template = out.resources["iam-attach-node-worker"].body
    for suffix, arn in (
        ("cni", "AmazonEKS_CNI_Policy"),
        ("ecr", "AmazonEC2ContainerRegistryReadOnly"),
    ):
        body = copy.deepcopy(template)
        body["metadata"]["name"] = names.cloud_name(
            xr["metadata"]["name"], "attach", "node", suffix
        )
        body["spec"]["forProvider"] = {"policyArn": POLICY + arn, "roleRef": {"name": role}}
        resources[f"iam-attach-node-{suffix}"] = ObservedResource(body)
    addon = copy.deepcopy(seen.resources["addon-vpc-cni"].body)
    addon["spec"]["forProvider"].pop("configurationValues", None)
    addon["status"]["atProvider"]["addonVersion"] = CNI_VERSION
    resources["addon-vpc-cni"] = ObservedResource(addon)
    return xr, classes, Observed(resources=resources, status=seen.status)


def step(xr, classes, observed: Observed, edit=None) -> tuple:
    """One reconcile over observed; then what the providers report for it, edited: the
    association, the attachments and the add-on as they would be, the DaemonSet as edit says."""
    out = compose_cluster(xr, all_classes(classes), observed)
    seen = reported(out)
    addon = seen.resources["addon-vpc-cni"].body
    addon["status"]["atProvider"]["addonVersion"] = CNI_VERSION
    if edit is not None:
        edit(seen.resources)
    return out, seen


def with_aws_node(daemonset: dict):
    def edit(resources):
        if "aws-node-daemonset" in resources:
            resources["aws-node-daemonset"].body["status"]["atProvider"] = {"manifest": daemonset}

    return edit


def test_a_new_cluster_gives_the_cni_policy_to_aws_node_and_nodes_only_pull():
    xr, classes = example("eks-on-demand")
    out = converge(xr, classes)
    attached = attachments(out)
    assert POLICY + "AmazonEKS_CNI_Policy" not in {
        arn for key, arn in attached.items() if key.startswith("iam-attach-node-")
    }
    assert attached["iam-attach-node-ecr-pull"] == POLICY + "AmazonEC2ContainerRegistryPullOnly"
    assert attached["iam-attach-vpc-cni-cni"] == POLICY + "AmazonEKS_CNI_Policy"
    assert "iam-attach-node-ecr" not in attached and "iam-attach-node-cni" not in attached
    trust = json.loads(
        out.resources["iam-role-vpc-cni"].body["spec"]["forProvider"]["assumeRolePolicy"]
    )
    assert trust["Statement"][0]["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    association = out.resources["pod-identity-vpc-cni"].body["spec"]["forProvider"]
    assert (association["namespace"], association["serviceAccount"]) == ("kube-system", "aws-node")
    assert association["roleArnRef"] == {
        "name": out.resources["iam-role-vpc-cni"].body["metadata"]["name"]
    }
    assert "addon-eks-pod-identity-agent" in out.resources
    assert "aws-node-daemonset" not in out.resources
    # The role outlives the association and the nodes aws-node runs on (through the cluster,
    # which EKS keeps until its node groups are gone).
    assert "usage-iam-role-vpc-cni-by-pod-identity-vpc-cni" in out.resources
    assert "usage-iam-attach-vpc-cni-cni-by-cluster" in out.resources


def test_a_new_cluster_enforces_network_policy_from_its_first_add_on():
    xr, classes = example("eks-on-demand")
    out = converge(xr, classes)
    values = out.resources["addon-vpc-cni"].body["spec"]["forProvider"]["configurationValues"]
    assert json.loads(values) == {"enableNetworkPolicy": "true"}


def test_node_groups_of_a_new_cluster_wait_for_the_aws_node_association():
    xr, classes = example("eks-on-demand")
    out = compose_cluster(xr, all_classes(classes), Observed())
    for _ in range(3):
        seen = reported(out, drop_status=("pod-identity-vpc-cni",))
        out = compose_cluster(xr, all_classes(classes), seen)
    assert "pod-identity-vpc-cni" in out.resources
    assert not any(k.startswith("nodegroup-") or k == "system-nodegroup" for k in out.resources)
    assert "system-nodegroup (vpc-cni Pod Identity)" in out.conditions[0].message
    out = compose_cluster(xr, all_classes(classes), reported(out))
    assert "system-nodegroup" in out.resources


def test_a_live_cluster_hands_the_cni_policy_over_only_once_aws_node_uses_its_pod_identity():
    xr, classes, observed = live_cluster()
    node_cni = observed.resources["iam-attach-node-cni"].body
    node_ecr = observed.resources["iam-attach-node-ecr"].body

    # 1. Nothing of the new identity is Ready yet: both old policies stay as they were, the
    #    association and PullOnly are composed, aws-node is observed, network policy waits.
    out, seen = step(xr, classes, observed, with_aws_node(aws_node(False)))
    assert out.resources["iam-attach-node-cni"].body["spec"] == node_cni["spec"]
    assert out.resources["iam-attach-node-ecr"].body["spec"] == node_ecr["spec"]
    assert (
        out.resources["iam-attach-node-cni"].body["metadata"]["name"]
        == node_cni["metadata"]["name"]
    )
    assert {"pod-identity-vpc-cni", "iam-attach-node-ecr-pull"} <= set(out.resources)
    assert "configurationValues" not in out.resources["addon-vpc-cni"].body["spec"]["forProvider"]
    daemonset = out.resources["aws-node-daemonset"].body
    assert daemonset["spec"]["managementPolicies"] == ["Observe"]
    assert daemonset["spec"]["forProvider"]["manifest"]["metadata"] == {
        "name": "aws-node",
        "namespace": "kube-system",
    }
    # Live node groups never wait for the association.
    assert "system-nodegroup" in out.resources

    # 2. The association and PullOnly are Ready: ReadOnly goes, the add-on gets the network
    #    policy agent; aws-node has not rolled yet, so the CNI policy stays.
    out, seen = step(xr, classes, seen, with_aws_node(aws_node(False)))
    assert released(out, "iam-attach-node-ecr")
    assert "iam-attach-node-cni" in out.resources
    values = out.resources["addon-vpc-cni"].body["spec"]["forProvider"]["configurationValues"]
    assert json.loads(values) == {"enableNetworkPolicy": "true"}

    # 3. The new template is rolling out (2 of 3 pods updated): the CNI policy stays.
    out, seen = step(xr, classes, seen, with_aws_node(aws_node(True, updated=2)))
    assert "iam-attach-node-cni" in out.resources

    # 4. Its status lost for a moment: the CNI policy stays.
    lost, _ = step(xr, classes, seen)
    rolled = aws_node(True)
    seen.resources["aws-node-daemonset"].body["status"] = {}
    assert "iam-attach-node-cni" in compose_cluster(xr, all_classes(classes), seen).resources
    assert "iam-attach-node-cni" in lost.resources

    # 5. Every aws-node pod runs the template given after the association was Ready: the node
    #    role loses the CNI policy, and aws-node is no longer observed.
    seen.resources["aws-node-daemonset"].body["status"] = {"atProvider": {"manifest": rolled}}
    for key in ("pod-identity-vpc-cni", "addon-vpc-cni"):
        seen.resources[key].body["status"] = reported(out).resources[key].body["status"]
    seen.resources["addon-vpc-cni"].body["status"]["atProvider"]["addonVersion"] = CNI_VERSION
    done = compose_cluster(xr, all_classes(classes), seen)
    assert released(done, "iam-attach-node-cni")
    # Its Usage goes (rewritten, then left out), then the attachment, then the observer of
    # aws-node (kept while the policy is observed, so the policy never comes back meanwhile).
    seen, usage_seen = reported(done), True
    with_aws_node(rolled)(seen.resources)
    for _ in range(4):
        after, seen = step(xr, classes, seen, with_aws_node(rolled))
        assert ("iam-attach-node-cni" in after.resources) == usage_seen
        usage_seen = any(k.startswith("usage-iam-attach-node-cni") for k in seen.resources)
    assert "iam-attach-node-cni" not in after.resources
    after, _ = step(xr, classes, seen, with_aws_node(rolled))
    assert "iam-attach-node-cni" not in after.resources
    assert "aws-node-daemonset" not in after.resources


@pytest.mark.parametrize(
    "why",
    ["association not Ready", "add-on too old", "add-on version unknown", "old template"],
)
def test_the_cni_policy_stays_while_anything_says_aws_node_may_use_the_node_role(why):
    xr, classes, observed = live_cluster()
    _, seen = step(xr, classes, observed, with_aws_node(aws_node(False)))
    _, seen = step(xr, classes, seen, with_aws_node(aws_node(True)))
    addon = seen.resources["addon-vpc-cni"].body["status"]["atProvider"]
    if why == "association not Ready":
        seen.resources["pod-identity-vpc-cni"].body["status"]["conditions"] = []
    elif why == "add-on too old":
        addon["addonVersion"] = "v1.15.4-eksbuild.1"
    elif why == "add-on version unknown":
        del addon["addonVersion"]
    else:
        with_aws_node(aws_node(False))(seen.resources)
    assert "iam-attach-node-cni" in compose_cluster(xr, all_classes(classes), seen).resources


def test_network_policy_keeps_what_else_the_vpc_cni_add_on_was_configured_with():
    xr, classes, observed = live_cluster()
    _, seen = step(xr, classes, observed)
    spec = seen.resources["addon-vpc-cni"].body["spec"]["forProvider"]
    spec["configurationValues"] = json.dumps({"env": {"WARM_IP_TARGET": "5"}})
    out = compose_cluster(xr, all_classes(classes), seen)
    values = json.loads(
        out.resources["addon-vpc-cni"].body["spec"]["forProvider"]["configurationValues"]
    )
    assert values == {"env": {"WARM_IP_TARGET": "5"}, "enableNetworkPolicy": "true"}
    # Once on, on for good: the association's status lost changes nothing.
    seen = reported(out)
    seen.resources["pod-identity-vpc-cni"].body["status"] = {}
    again = compose_cluster(xr, all_classes(classes), seen)
    assert again.resources["addon-vpc-cni"].body == out.resources["addon-vpc-cni"].body


def test_rolled_with_reads_a_daemonset_as_its_status_omits_zeros():
    assert rolled_with(aws_node(True), "--enable-network-policy=true")
    assert not rolled_with(aws_node(False), "--enable-network-policy=true")
    assert not rolled_with(aws_node(True, updated=2), "--enable-network-policy=true")
    empty = aws_node(True)
    empty["status"] = {"observedGeneration": 4, "desiredNumberScheduled": 0}
    assert rolled_with(empty, "--enable-network-policy=true")
    behind = aws_node(True)
    behind["metadata"]["generation"] = 5
    assert not rolled_with(behind, "--enable-network-policy=true")
    unavailable = aws_node(True)
    unavailable["status"]["numberUnavailable"] = 1
    assert not rolled_with(unavailable, "--enable-network-policy=true")


def test_network_policy_reads_an_add_on_configuration_in_yaml_and_leaves_one_it_cannot_read():
    xr, classes, observed = live_cluster()
    _, seen = step(xr, classes, observed)
    spec = seen.resources["addon-vpc-cni"].body["spec"]["forProvider"]
    spec["configurationValues"] = "env:\n  WARM_IP_TARGET: '5'\n"
    out = compose_cluster(xr, all_classes(classes), seen)
    values = out.resources["addon-vpc-cni"].body["spec"]["forProvider"]["configurationValues"]
    assert json.loads(values) == {"env": {"WARM_IP_TARGET": "5"}, "enableNetworkPolicy": "true"}
    spec["configurationValues"] = "[not, an, object]"
    out = compose_cluster(xr, all_classes(classes), seen)
    for_provider = out.resources["addon-vpc-cni"].body["spec"]["forProvider"]
    assert for_provider["configurationValues"] == "[not, an, object]"
    assert any(r.reason == "NetworkPolicyNotEnforced" for r in out.results)


def released(out, key: str) -> bool:
    """key leaves: not composed, or returned as it runs only while every Usage that names it goes
    first, rewritten without its user (usages.retiring)."""
    if key not in out.resources:
        return True
    name = out.resources[key].body["metadata"]["name"]
    naming = [
        d.body["spec"]
        for d in out.resources.values()
        if d.body["kind"] == "Usage" and d.body["spec"]["of"]["resourceRef"]["name"] == name
    ]
    return bool(naming) and all("by" not in spec and "reason" in spec for spec in naming)


def test_where_the_network_policy_agent_was_on_before_only_a_restart_after_the_association_counts():
    """An add-on whose agent was switched on outside the function rolls nothing when the
    function switches it on: the CNI policy stays until aws-node is restarted after the
    association became Ready (the template's restartedAt against the association's Ready
    transition), and a Warning asks for that restart."""
    xr, classes, observed = live_cluster()
    addon = observed.resources["addon-vpc-cni"].body
    addon["spec"]["forProvider"]["configurationValues"] = '{"enableNetworkPolicy": "true"}'
    addon["status"]["atProvider"]["configurationValues"] = '{"enableNetworkPolicy": "true"}'
    out, seen = step(xr, classes, observed, with_aws_node(aws_node(True)))
    marked = out.resources["aws-node-daemonset"].body["metadata"]["annotations"]
    assert marked == {"modelplane.ai/network-policy-before": "true"}
    ready = next(
        c
        for c in seen.resources["pod-identity-vpc-cni"].body["status"]["conditions"]
        if c["type"] == "Ready"
    )
    ready["lastTransitionTime"] = "2026-12-07T10:00:00Z"

    def restarted(at: str | None, updated: int = 3):
        daemonset = aws_node(True, updated=updated)
        if at:
            daemonset["spec"]["template"]["metadata"] = {
                "annotations": {"kubectl.kubernetes.io/restartedAt": at}
            }
        with_aws_node(daemonset)(seen.resources)
        return compose_cluster(xr, all_classes(classes), seen)

    # Rolled long ago with the agent on, never restarted: kept, and the restart asked for.
    kept = restarted(None)
    assert "iam-attach-node-cni" in kept.resources
    assert any(r.reason == "AwsNodeRestartNeeded" for r in kept.results)
    # Restarted before the association was Ready: kept.
    assert "iam-attach-node-cni" in restarted("2026-12-07T09:59:00Z").resources
    # Restarted after, still rolling: kept.
    assert "iam-attach-node-cni" in restarted("2026-12-07T10:05:00Z", updated=1).resources
    # Restarted after, rolled out: the node role loses the CNI policy.
    done = restarted("2026-12-07T10:05:00Z")
    assert released(done, "iam-attach-node-cni")
    assert not any(r.reason == "AwsNodeRestartNeeded" for r in done.results)


def test_the_aws_node_observer_waits_for_the_add_on_to_report_and_keeps_its_mark():
    xr, classes, observed = live_cluster()
    observed.resources["addon-vpc-cni"].body["status"] = {}
    out = compose_cluster(xr, all_classes(classes), observed)
    assert "aws-node-daemonset" not in out.resources
    assert "iam-attach-node-cni" in out.resources
    # Made once the add-on reports; its mark is kept whatever the add-on says after.
    _, seen = step(xr, classes, live_cluster()[2])
    mark = seen.resources["aws-node-daemonset"].body["metadata"]["annotations"]
    assert mark == {"modelplane.ai/network-policy-before": "false"}
    seen.resources["addon-vpc-cni"].body["status"]["atProvider"]["configurationValues"] = (
        '{"enableNetworkPolicy": "true"}'
    )
    again = compose_cluster(xr, all_classes(classes), seen)
    assert again.resources["aws-node-daemonset"].body["metadata"]["annotations"] == mark


# --- upgrades EKS makes itself -------------------------------------------------------------------

MOVED = "modelplane.ai/upgraded-by-eks"


def moved_by_eks(xr: dict, classes: list[dict], to: str, world: World | None = None):
    """Converge, let EKS move the control plane to `to` by itself (the Cluster reports it while
    its spec names the old minor, as at the end of standard support), then reconcile the same
    spec until nothing changes. Returns each pass's version changes, the Cluster's mark and the
    reasons of its Warnings, and the last composition."""
    out = converge(xr, classes, world)
    seen = reported(out, world)
    seen.resources["cluster"].body["status"]["atProvider"]["version"] = to
    passes = []
    for _ in range(12):
        again = compose_cluster(xr, all_classes(classes), seen)
        before, after = versions(out), versions(again)
        moved = {k: after[k] for k in after if before.get(k) != after[k]}
        mark = again.resources["cluster"].body["metadata"].get("annotations", {}).get(MOVED)
        warned = sorted({r.reason for r in again.results if r.severity == "Warning"})
        if not moved and again.resources == out.resources:
            return passes, again
        passes.append((moved, mark, warned))
        out, seen = again, reported(again, world)
    raise AssertionError("no convergence")


def test_after_eks_moves_the_control_plane_the_node_groups_follow_one_at_a_time():
    xr, classes = example("eks-on-demand")
    xr["spec"]["cluster"]["eks"]["kubernetesVersion"] = "1.34"
    passes, final = moved_by_eks(xr, classes, "1.35")
    said = ["ClusterUpgradedByCloud"]
    assert passes == [
        # The spec follows what runs (EKS cannot go back); the system group goes first.
        ({"cluster": "1.35", "system-nodegroup": "1.35"}, "1.35", said),
        ({"nodegroup-gpu-l4": "1.35"}, "1.35", said),
        ({"nodegroup-gpu-l40s": "1.35"}, "1.35", said),
        # Once every group runs it, the add-ons follow, as after a step the spec asks for.
        (
            {"addon-coredns": "v1.14.3-eksbuild.3", "addon-kube-proxy": "v1.35.3-eksbuild.13"},
            "1.35",
            said,
        ),
    ]
    warning = next(r.message for r in final.results if r.reason == "ClusterUpgradedByCloud")
    assert warning.startswith("EKS moved the control plane to 1.35, beyond the '1.34'")
    assert "3 of 3 run 1.35" in warning and "set kubernetesVersion to 1.35" in warning
    # The spec set to what runs: the mark goes, and nothing else moves or is said.
    caught_up = copy.deepcopy(xr)
    caught_up["spec"]["cluster"]["eks"]["kubernetesVersion"] = "1.35"
    after = compose_cluster(caught_up, all_classes(classes), reported(final))
    assert MOVED not in after.resources["cluster"].body["metadata"].get("annotations", {})
    assert versions(after) == versions(final)
    assert not [r for r in after.results if r.severity == "Warning"]


def test_a_capacity_block_group_follows_eks_drained_to_zero_after_the_system_group():
    xr, classes = example("eks")
    world = World(capacity_reservations={RESERVATION: MATCHING})
    ends = datetime(2026, 12, 10, tzinfo=UTC)  # the block runs
    with clock.fixed(ends):
        passes, final = moved_by_eks(xr, classes, "1.37", world)
    moved = [p[0] for p in passes if p[0]]
    assert moved == [
        {"cluster": "1.37", "system-nodegroup": "1.37"},
        {"nodegroup-gpu-h200": "1.37"},
    ]
    body = final.resources["nodegroup-gpu-h200"].body
    assert body["spec"]["forProvider"]["version"] == "1.37"
    # It was drained before its version moved (EKS guide), and is back at its size.
    drained = [p for p in passes if "CapacityBlockUpgrade" in p[2]]
    assert drained and all(p[0].get("nodegroup-gpu-h200") is None for p in drained)
    assert "modelplane.ai/restore-desired-size" not in body["metadata"].get("annotations", {})


def test_a_group_on_its_way_is_never_called_back_and_the_next_waits_for_it():
    xr, classes = example("eks-on-demand")
    xr["spec"]["cluster"]["eks"]["kubernetesVersion"] = "1.34"
    seen = reported(converge(xr, classes))
    seen.resources["cluster"].body["status"]["atProvider"]["version"] = "1.35"
    # A group of an earlier release's follow (all at once) already asks for 1.35, still at 1.34.
    on_its_way = seen.resources["nodegroup-gpu-l40s"].body
    on_its_way["spec"]["forProvider"]["version"] = "1.35"
    again = compose_cluster(xr, all_classes(classes), seen)
    assert versions(again)["nodegroup-gpu-l40s"] == "1.35"
    assert versions(again)["system-nodegroup"] == "1.34"
    assert versions(again)["nodegroup-gpu-l4"] == "1.34"
    # Its status lost for a moment: nothing moves, and the mark stays.
    seen = reported(again, drop_status=("cluster",))
    lost = compose_cluster(xr, all_classes(classes), seen)
    assert versions(lost) == versions(again)
    assert lost.resources["cluster"].body["metadata"]["annotations"][MOVED] == "1.35"


def test_a_spec_lowered_below_what_runs_is_not_taken_for_a_move_of_eks():
    xr, classes = example("eks-on-demand")
    out = converge(xr, classes)
    lowered = copy.deepcopy(xr)
    lowered["spec"]["cluster"]["eks"]["kubernetesVersion"] = "1.35"
    again = compose_cluster(lowered, all_classes(classes), reported(out))
    reasons = {r.reason for r in again.results if r.severity == "Warning"}
    assert "InvalidVersion" in reasons and "ClusterUpgradedByCloud" not in reasons
    assert MOVED not in again.resources["cluster"].body["metadata"].get("annotations", {})
