"""GPUsPublished: each GPU pool's probe claims the class's GPUs with DRA admin access, and the
condition (and BackendReady) reads its DaemonSet's counts."""

import copy
import re

import pytest

from function.compose import compose_cluster
from function.inputs import Observed, ObservedResource
from function.serving import gpus
from tests.builders import all_classes, example
from tests.sim import workload
from tests.sim.providers import World
from tests.unit import sim

POOL = "gpu-h100"  # examples/existing: 2 nodes of 8 H100s
NAME = gpus.workload_name("byo-us-east", POOL)


def condition(out, kind: str):
    return next(c for c in out.conditions if c.type == kind)


def converged(world: World | None = None, edit=None):
    xr, classes = example("existing")
    if edit:
        edit(xr, classes)
    return sim.converge(xr, all_classes(classes), world)


def manifest(out, key: str) -> dict:
    return out.resources[key].body["spec"]["forProvider"]["manifest"]


def test_each_gpu_pool_gets_a_probe_that_claims_its_class_gpus_with_admin_access():
    out = converged()
    namespace = manifest(out, gpus.NAMESPACE_KEY)
    assert namespace["metadata"] == {
        "name": "modelplane-gpu-probe",
        # Admin access to the GPUs, and nothing above baseline Pod Security.
        "labels": {
            "resource.kubernetes.io/admin-access": "true",
            "pod-security.kubernetes.io/enforce": "baseline",
        },
    }
    template = manifest(out, gpus.claim_key(POOL))
    # Named by what it asks for: a claim template cannot be updated, a new class gets a new one.
    assert template["metadata"]["name"].startswith(f"{NAME}-")
    assert template["metadata"]["namespace"] == "modelplane-gpu-probe"
    readiness = out.resources[gpus.claim_key(POOL)].body["spec"]["readiness"]
    assert readiness["celQuery"] == gpus.ADMIN_ACCESS_KEPT
    # The class's NVIDIA device only (not its Synthetic NICs), with its DeviceClass and count.
    assert template["spec"]["spec"]["devices"]["requests"] == [
        {
            "name": "gpu-0",
            "exactly": {
                "deviceClassName": "gpu.nvidia.com",
                "allocationMode": "ExactCount",
                "count": 8,
                "adminAccess": True,
            },
        }
    ]
    ds = manifest(out, gpus.probe_key(POOL))
    pod = ds["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"modelplane.ai/pool": POOL}
    assert pod["tolerations"] == [{"operator": "Exists"}]
    assert pod["resourceClaims"] == [
        {"name": "gpus", "resourceClaimTemplateName": template["metadata"]["name"]}
    ]
    (container,) = pod["containers"]
    assert container["resources"]["claims"] == [{"name": "gpus"}]
    assert "timeout 60 nvidia-smi -L" in container["command"][-1]
    assert container["readinessProbe"]["exec"]["command"] == ["test", "-f", "/run/gpus-listed"]
    assert pod["automountServiceAccountToken"] is False
    readiness = out.resources[gpus.probe_key(POOL)].body["spec"]["readiness"]
    assert readiness == {"policy": "DeriveFromCelQuery", "celQuery": gpus.ALL_READY}
    published = condition(out, "GPUsPublished")
    assert (published.status, published.reason) == (True, "Claimable")
    assert published.message == f"GPUs can be claimed on {POOL}: 2 of 2 nodes, 16 GPUs"
    assert condition(out, "BackendReady").reason in {"Available", "WaitingForClients"}


def test_the_probes_come_after_the_dra_driver_and_go_before_their_namespace():
    out = converged()
    usages = {k for k in out.resources if k.startswith("usage-")}
    assert f"usage-release-nvidia-dra-driver-by-{gpus.NAMESPACE_KEY}" in usages
    for key in (gpus.claim_key(POOL), gpus.probe_key(POOL)):
        assert f"usage-{gpus.NAMESPACE_KEY}-by-{key}" in usages
    # Not before the DRA driver's DeviceClasses exist: the first passes compose no probe.
    xr, classes = example("existing")
    first = compose_cluster(xr, all_classes(classes), Observed())
    assert gpus.probe_key(POOL) not in first.resources
    assert condition(first, "GPUsPublished").reason in {"WaitingForCluster", "WaitingForDRADriver"}


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (
            {
                "observedGeneration": 1,
                "desiredNumberScheduled": 2,
                "numberReady": 1,
                "updatedNumberScheduled": 2,
            },
            f"{POOL}: 1 of 2 nodes, 8 GPUs",
        ),
        # Both ready, one of an older spec: only the current spec's pods count.
        (
            {
                "observedGeneration": 1,
                "desiredNumberScheduled": 2,
                "numberReady": 2,
                "updatedNumberScheduled": 1,
            },
            f"{POOL}: 1 of 2 nodes, 8 GPUs",
        ),
        # The DaemonSet controller has not seen this spec yet: its counts are an older spec's.
        (
            {"observedGeneration": 0, "desiredNumberScheduled": 2, "numberReady": 2},
            f"{POOL}: not observed yet",
        ),
        ({}, f"{POOL}: not observed yet"),
    ],
)
def test_a_pool_whose_nodes_cannot_all_claim_keeps_the_backend_waiting(status, message):
    out = converged(World(remote_status={NAME: status}))
    published = condition(out, "GPUsPublished")
    assert (published.status, published.reason) == (False, "NotClaimable")
    assert message in published.message
    assert f"GPUs cannot be claimed on every node of {POOL}" in published.message
    backend = condition(out, "BackendReady")
    assert (backend.status, backend.reason, backend.message) == (
        False,
        "WaitingForGPUs",
        published.message,
    )
    assert out.ready is False


def test_a_pool_without_nodes_has_nothing_to_publish():
    world = World(
        remote_status={
            NAME: {"observedGeneration": 1, "desiredNumberScheduled": 0, "numberReady": 0}
        }
    )
    published = condition(converged(world), "GPUsPublished")
    assert (published.status, published.message) == (
        True,
        f"GPUs can be claimed on {POOL}: no nodes",
    )


def test_a_class_without_nvidia_gpus_gets_no_probe():
    def no_gpus(xr, classes):
        classes[0]["spec"]["devices"] = [
            d for d in classes[0]["spec"]["devices"] if d["driver"] != "gpu.nvidia.com"
        ]

    out = converged(edit=no_gpus)
    assert not {gpus.probe_key(POOL), gpus.claim_key(POOL)} & out.resources.keys()
    published = condition(out, "GPUsPublished")
    assert (published.status, published.reason) == (True, "NoGPUPools")


def test_a_class_gone_for_a_moment_keeps_the_probes_and_their_count():
    out = converged()
    xr, classes = example("existing")
    again = compose_cluster(xr, all_classes([]), sim.reported(out))
    for key in (gpus.claim_key(POOL), gpus.probe_key(POOL)):
        assert again.resources[key].body == out.resources[key].body
    assert condition(again, "GPUsPublished").status is True


def test_a_pool_removed_from_the_spec_takes_its_probes_with_it():
    out = converged()
    xr, classes = example("existing")
    second = copy.deepcopy(xr["spec"]["nodePools"][0])
    second["name"] = "gpu-more"
    xr["spec"]["nodePools"].append(second)
    grown = compose_cluster(xr, all_classes(classes), sim.reported(out))
    assert gpus.claim_key("gpu-more") in grown.resources
    assert gpus.probe_key("gpu-more") not in grown.resources  # after its template kept adminAccess
    grown = compose_cluster(xr, all_classes(classes), sim.reported(grown))
    assert gpus.probe_key("gpu-more") in grown.resources
    xr["spec"]["nodePools"].pop()
    shrunk = compose_cluster(xr, all_classes(classes), sim.reported(grown))
    assert gpus.probe_key("gpu-more") not in shrunk.resources
    assert gpus.probe_key(POOL) in shrunk.resources


def test_counts_read_as_protobuf_brings_them():
    """Over gRPC every number in an observed body is a float (google.protobuf.Struct)."""
    body = {
        "status": {
            "atProvider": {
                "manifest": {
                    "metadata": {"generation": 3.0},
                    "status": {
                        "observedGeneration": 3.0,
                        "desiredNumberScheduled": 4.0,
                        "numberReady": 3.0,
                        "updatedNumberScheduled": 4.0,
                    },
                }
            }
        }
    }
    assert gpus.nodes(ObservedResource(body)) == (3, 4)
    body["status"]["atProvider"]["manifest"]["status"]["observedGeneration"] = 2.0
    assert gpus.nodes(ObservedResource(body)) is None


def test_a_label_value_pool_name_gets_dns_names_and_its_nodes_as_labelled():
    def rename(xr, classes):
        xr["spec"]["nodePools"][0]["name"] = "H100_Pool"

    out = converged(edit=rename)
    dns = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    for key in (gpus.claim_key("H100_Pool"), gpus.probe_key("H100_Pool")):
        assert dns.match(out.resources[key].body["metadata"]["name"]), key
        assert dns.match(manifest(out, key)["metadata"]["name"]), key
    pod = manifest(out, gpus.probe_key("H100_Pool"))["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"modelplane.ai/pool": "H100_Pool"}


def test_an_autoscaled_pool_is_not_probed():
    """cluster-autoscaler counts admin-access claims as used GPUs: a held probe claim would keep
    the pool from scaling (function/serving/gpus.py, autoscaled)."""

    def autoscale(xr, classes):
        xr["spec"]["nodePools"][0].update({"minNodeCount": 1, "maxNodeCount": 4})

    out = converged(edit=autoscale)
    assert not {gpus.probe_key(POOL), gpus.claim_key(POOL)} & out.resources.keys()
    published = condition(out, "GPUsPublished")
    assert (published.status, published.reason) == (True, "Claimable")
    assert published.message == f"GPUs can be claimed on {POOL}: autoscaled"


def test_an_api_server_that_drops_admin_access_gets_no_probe():
    """DRAAdminAccess off: the claim would be an ordinary one and take the GPUs from models."""
    out = converged()
    template = out.resources[gpus.claim_key(POOL)].body
    dropped = copy.deepcopy(template["spec"]["forProvider"]["manifest"])
    for r in dropped["spec"]["spec"]["devices"]["requests"]:
        del r["exactly"]["adminAccess"]
    xr, classes = example("existing")
    reported = sim.reported(out)
    body = copy.deepcopy(template)
    body["status"] = {
        "conditions": [{"type": "Ready", "status": "False", "reason": "Unavailable"}],
        "atProvider": {"manifest": dropped},
    }
    reported.resources[gpus.claim_key(POOL)] = ObservedResource(body)
    del reported.resources[gpus.probe_key(POOL)]
    again = compose_cluster(xr, all_classes(classes), reported)
    assert gpus.probe_key(POOL) not in again.resources
    published = condition(again, "GPUsPublished")
    assert (published.status, published.reason) == (False, "AdminAccessOff")
    assert "DRAAdminAccess" in published.message
    assert workload.object_ready(template, dropped) is False
    assert workload.object_ready(template, template["spec"]["forProvider"]["manifest"]) is True
