"""GPUsHealthy: the reporter's report of the GPU nodes' conditions, read back through one
Observe-only Object, said per pool on the XR with a Warning per unhealthy node."""

import datetime
import json

import pytest

from function import clock, names
from function.compose import compose_cluster
from function.serving import gpu_health
from function.serving.components import COMPONENTS, RESOURCE_KEYS
from function.serving.programs import report_gpu_health as reporter
from tests.builders import all_classes, example
from tests.sim import workload
from tests.sim.providers import World
from tests.sim.workload import gpu_node, inference_gateway
from tests.unit import sim

POOL = "gpu-h100"  # examples/existing
NOW = datetime.datetime(2026, 12, 5, 12, 0, tzinfo=datetime.UTC)
SCHEMAS = {"inference-gateway-kind": True}


def required() -> tuple[dict, dict[str, list[dict]]]:
    """The Existing example with a fleet gateway that can reach it (so the backend is Ready)."""
    xr, classes = example("existing")
    return xr, {**all_classes(classes), "inference-gateways": [inference_gateway("fleet-a")]}


def converged(*nodes: dict):
    xr, req = required()
    return sim.converge(xr, req, World(gpu_nodes=list(nodes)), SCHEMAS)


def condition(out, kind: str):
    return next(c for c in out.conditions if c.type == kind)


def manifest(out, key: str) -> dict:
    return out.resources[key].body["spec"]["forProvider"]["manifest"]


def reported(nodes: list[dict]) -> str:
    """What the reporter's program writes for nodes (the API server's list of those with the GPU
    label), its own functions run for real with what its pod is given."""
    env = gpu_health.reporter_env()
    healthy = json.loads(env["HEALTHY"])
    key, value = env["NODE_SELECTOR"].split("=")
    listed = [n for n in nodes if n["metadata"].get("labels", {}).get(key) == value]
    limit, many, short = (int(env[k]) for k in ("MESSAGE_LIMIT", "MANY", "SHORT_MESSAGE"))
    made = [reporter.node_report(n, healthy, env["POOL_LABEL"], limit) for n in listed]
    return reporter.report(made, many, short)


def test_the_reporter_program_writes_what_the_simulated_reporter_writes():
    nodes = [
        gpu_node("b-node", POOL, AcceleratedHardwareReady="False:NvidiaXID79Error:" + "x" * 300),
        gpu_node("a-node", POOL, XIDError="True:XIDErrorIsPresent:XID 48 (DBE ECC) ✗"),
        gpu_node("c-node", "", Ready="Unknown:NodeStatusUnknown:Kubelet stopped posting"),
        gpu_node("d-node", POOL, MemoryPressure="False", GPUClockThrottling="True"),
        gpu_node("e-node", POOL, NebiusGPUError="True", KernelReady="False::"),
    ]
    nodes[0]["status"]["conditions"][0]["lastHeartbeatTime"] = "2026-12-05T10:00:00Z"
    del nodes[1]["status"]["conditions"][1]["reason"]
    del nodes[1]["metadata"]["labels"][names.POOL_LABEL]
    del nodes[3]["status"]["conditions"][0]["lastTransitionTime"]
    assert reported(nodes) == workload.gpu_report(nodes)
    report = json.loads(reported(nodes))
    assert [n["name"] for n in report] == ["a-node", "b-node", "c-node", "d-node", "e-node"]
    assert [len(n["bad"]) for n in report] == [1, 1, 1, 0, 2]  # throttling and pressure: not faults
    assert len(report[1]["bad"][0]["message"]) == gpu_health.MESSAGE_LIMIT
    assert report[1]["bad"][0]["since"] == nodes[0]["status"]["conditions"][1]["lastTransitionTime"]


def test_a_fleet_wide_incident_keeps_the_report_within_a_configmap():
    """Past MANY unhealthy nodes, messages are cut so 1100 nodes fit in 1 MiB."""
    long = "m" * 300
    nodes = [
        gpu_node(f"n{i:04d}", POOL, Ready=f"Unknown:NodeStatusUnknown:{long}", **FOUR_FAULTS)
        for i in range(1100)
    ]
    report = reported(nodes)
    assert report == workload.gpu_report(nodes)
    assert len(report.encode()) < 1 << 20
    few = reported(nodes[: gpu_health.MANY])
    assert json.loads(few)[0]["bad"][0]["message"] == long[: gpu_health.MESSAGE_LIMIT]


FOUR_FAULTS = {
    t: f"False:Fault:{'m' * 300}"
    for t in ("AcceleratedHardwareReady", "KernelReady", "StorageReady")
}


def test_every_gpu_node_healthy_says_so_per_pool():
    out = converged(gpu_node("n1", POOL), gpu_node("n2", POOL))
    healthy = condition(out, "GPUsHealthy")
    assert (healthy.status, healthy.reason) == (True, "Healthy")
    assert healthy.message == f"every GPU node is healthy ({POOL}: 2 of 2 healthy)"
    assert not [r for r in out.results if r.reason == "UnhealthyGPUNode"]


def ago(minutes: float) -> str:
    return workload.timestamp(NOW - datetime.timedelta(minutes=minutes))


@pytest.mark.parametrize(
    ("conditions", "said"),
    [
        # EKS node monitoring agent
        (
            {"AcceleratedHardwareReady": "False:NvidiaXID79Error:GPU has fallen off the bus"},
            "AcceleratedHardwareReady=False (NvidiaXID79Error): GPU has fallen off the bus",
        ),
        # AKS Node Problem Detector, under both names AKS gives its XID check
        (
            {"XIDError": "True:XIDErrorIsPresent:XID 48"},
            "XIDError=True (XIDErrorIsPresent): XID 48",
        ),
        ({"XIDErrors": "True:XIDErrorsFound:XID 48"}, "XIDErrors=True (XIDErrorsFound): XID 48"),
        # Nebius mk8s health checks
        (
            {"NebiusGPUError": "True:GPUHealthCheckFailedMK8S:"},
            "NebiusGPUError=True (GPUHealthCheckFailedMK8S)",
        ),
        ({"NebiusBootDiskIOError": "True:IOErrors:"}, "NebiusBootDiskIOError=True (IOErrors)"),
        # kubelet
        ({"Ready": "Unknown:NodeStatusUnknown:"}, "Ready=Unknown (NodeStatusUnknown)"),
    ],
)
def test_a_node_turned_unhealthy_is_named_with_why_in_the_condition_and_a_warning(conditions, said):
    with clock.fixed(NOW):
        out = converged(gpu_node("n1", POOL), gpu_node("n2", POOL, since=ago(6), **conditions))
    healthy = condition(out, "GPUsHealthy")
    assert (healthy.status, healthy.reason) == (False, "UnhealthyNodes")
    assert healthy.message == f"{POOL}: 1 of 2 healthy. Unhealthy: n2 ({said})"
    (warning,) = [r for r in out.results if r.reason == "UnhealthyGPUNode"]
    assert warning.message == f"GPU node n2 (pool {POOL}) is unhealthy: {said}"
    # A broken node is the cloud's to repair: the backend and the XR stay as they are.
    assert condition(out, "BackendReady").status is True
    assert out.ready is None


@pytest.mark.parametrize(
    ("minutes", "counted", "warned"),
    [(2, False, False), (6, True, True), (14, True, True), (16, True, False), (600, True, False)],
)
def test_a_fault_counts_once_it_held_and_is_warned_about_for_a_while(minutes, counted, warned):
    """A node passes through NotReady as it joins or leaves: a fault counts after SETTLE, and is
    a Warning for WARN_FOR after that (Crossplane's recorder passes 25 events an XR, then one
    every five minutes); the condition names it as long as it lasts."""
    with clock.fixed(NOW):
        out = converged(gpu_node("n1", POOL, since=ago(minutes), Ready="False:KubeletNotReady:"))
    assert (condition(out, "GPUsHealthy").reason == "UnhealthyNodes") is counted
    assert bool([r for r in out.results if r.reason == "UnhealthyGPUNode"]) is warned


def test_many_unhealthy_nodes_are_counted_and_the_condition_stays_bounded():
    nodes = [gpu_node(f"n{i:02d}", POOL, XIDError="True:XIDErrorIsPresent:") for i in range(25)]
    out = converged(*nodes)
    message = condition(out, "GPUsHealthy").message
    assert message.startswith(f"{POOL}: 0 of 25 healthy. Unhealthy: n00 (")
    assert message.count("XIDError=True") == gpu_health.SHOWN
    assert message.endswith(
        "; and 15 more (kubectl -n modelplane-system get configmap modelplane-gpu-health "
        "-o yaml lists each)"
    )


def test_a_report_the_reporter_stopped_writing_is_not_taken_for_health():
    """The reporter rewrites its report every ten minutes: one older than STALE says the reporter
    stopped (its pod gone, its access revoked), whatever it last said."""
    with clock.fixed(NOW):
        node = gpu_node("n1", POOL)
        seen = sim.reported(converged(node), World(gpu_nodes=[node]))  # written at NOW
    xr, req = required()
    with clock.fixed(NOW + gpu_health.STALE - datetime.timedelta(seconds=1)):
        fresh = compose_cluster(xr, req, seen, SCHEMAS)
    assert condition(fresh, "GPUsHealthy").reason == "Healthy"
    with clock.fixed(NOW + gpu_health.STALE):
        stale = compose_cluster(xr, req, seen, SCHEMAS)
    said = condition(stale, "GPUsHealthy")
    assert (said.status, said.reason) == (False, "ReportStale")
    assert f"last written {NOW.strftime('%Y-%m-%dT%H:%M:%SZ')}" in said.message


def test_no_labelled_gpu_node_where_pools_have_them_is_not_healthy():
    """NFD gone, or configured otherwise: nothing listed is not all well."""
    said = condition(converged(), "GPUsHealthy")
    assert (said.status, said.reason) == (False, "NoGPUNodesLabelled")
    assert POOL in said.message


def test_a_condition_message_with_secret_material_is_scrubbed():
    jwt = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJlc2lnbmF0dXJl"  # not a real one
    out = converged(gpu_node("n1", POOL, KernelReady=f"False:Oops:Bearer {jwt} was refused"))
    assert jwt not in condition(out, "GPUsHealthy").message
    assert not [r for r in out.results if jwt in r.message]


def test_no_report_yet_waits_and_holds_nothing_back():
    xr, req = required()
    out = converged(gpu_node("n1", POOL))
    assert out.resources[gpu_health.REPORT_KEY].body["spec"]["managementPolicies"] == ["Observe"]
    # The reporter has not written its ConfigMap yet: provider-kubernetes reports the Object
    # without its manifest.
    seen = sim.reported(out, drop_status=(gpu_health.REPORT_KEY,))
    again = compose_cluster(xr, req, seen, SCHEMAS)
    waiting = condition(again, "GPUsHealthy")
    assert (waiting.status, waiting.reason) == (False, "WaitingForReport")
    assert condition(again, "BackendReady").status is True
    assert again.resources.keys() == out.resources.keys()


def test_the_reporter_may_read_nodes_and_write_its_one_configmap_only():
    out = converged()
    rules = {
        key: manifest(out, key).get("rules")
        for key in gpu_health.ACCESS
        if manifest(out, key)["kind"] in ("ClusterRole", "Role")
    }
    assert rules == {
        "gpu-health-node-reader": [
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]}
        ],
        "gpu-health-report-writer": [
            {
                "apiGroups": [""],
                "resources": ["configmaps"],
                "resourceNames": [gpu_health.NAME],
                "verbs": ["create", "patch"],
            }
        ],
    }
    pod = manifest(out, gpu_health.REPORTER_KEY)["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == gpu_health.NAME
    assert pod["securityContext"]["runAsNonRoot"] is True
    (container,) = pod["containers"]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert json.loads(container["env"][0]["value"]) == gpu_health.HEALTHY


def test_health_is_reported_whatever_runs_the_gpus():
    """Nothing of the reporter waits for the NVIDIA DRA driver: on an Existing cluster whose GPU
    Operator holds the driver back, GPU health is still said."""
    after = {c.key: set(c.after) for c in COMPONENTS}

    def before(key: str) -> set[str]:
        found = set(after[key])
        for k in after[key]:
            found |= before(k)
        return found

    for key in (*gpu_health.ACCESS, gpu_health.REPORTER_KEY, gpu_health.REPORT_KEY):
        assert before(key) <= {gpu_health.NAMESPACE_KEY, gpu_health.SERVICE_ACCOUNT_KEY}, key
    assert before(gpu_health.REPORTER_KEY) == {
        gpu_health.NAMESPACE_KEY,
        gpu_health.SERVICE_ACCOUNT_KEY,
    }


def test_the_reporter_comes_after_what_it_may_do():
    out = converged()
    assert set(RESOURCE_KEYS) >= {gpu_health.REPORTER_KEY, gpu_health.REPORT_KEY}
    for key in (*gpu_health.ACCESS, gpu_health.REPORTER_KEY, gpu_health.REPORT_KEY):
        assert key in out.resources, key
