"""The workload cluster as provider-kubernetes and provider-helm see it: what the controllers
running there (cert-manager, trust-manager, Envoy Gateway, the API server) write into the status
of each manifest an Object carries, and how provider-kubernetes derives the Object's Ready
condition from its readiness policy (the CEL query is evaluated for real, with cel-python).

Written from those projects' documented status fields, not from the function's output.
"""

import copy
import datetime
import json
from pathlib import Path

import celpy

from function import clock, names
from function.serving import gpu_health
from function.workload import GPU_NODE_LABEL

HERE = Path(__file__).parent
# Public CA certificates made once for the simulation (their keys were never kept).
CLUSTER_CA = (HERE / "cluster-ca.pem").read_text()
FLEET_GATEWAY_CA = (HERE / "fleet-gateway-ca.pem").read_text()
GATEWAY_ADDRESS = "203.0.113.10"

_CEL = celpy.Environment()


def _true(type_: str, reason: str = "Ready") -> dict:
    return {"type": type_, "status": "True", "reason": reason}


def _gateway(manifest: dict, address: str | None) -> dict:
    status: dict = {"conditions": [_true("Accepted"), _true("Programmed")]}
    if address:
        status["addresses"] = [{"type": "IPAddress", "value": address}]
    return status


def _client_traffic_policy(manifest: dict, address: str | None) -> dict:
    ancestor = {
        "ancestorRef": manifest.get("spec", {}).get("targetRefs", [{}])[0],
        "controllerName": "gateway.envoyproxy.io/gatewayclass-controller",
        "conditions": [_true("Accepted")],
    }
    return {"ancestors": [ancestor]}


def _deployment(manifest: dict, address: str | None) -> dict:
    replicas = manifest.get("spec", {}).get("replicas", 1)
    return {
        "replicas": replicas,
        "readyReplicas": replicas,
        "availableReplicas": replicas,
        "conditions": [_true("Available", "MinimumReplicasAvailable")],
    }


# kind -> the status its controller on the workload cluster writes.
STATUS = {
    "CustomResourceDefinition": lambda m, a: {
        "conditions": [_true("NamesAccepted"), _true("Established")]
    },
    "Certificate": lambda m, a: {"conditions": [_true("Ready")]},
    "Issuer": lambda m, a: {"conditions": [_true("Ready")]},
    "Bundle": lambda m, a: {"conditions": [_true("Synced")]},
    "Gateway": _gateway,
    "ClientTrafficPolicy": _client_traffic_policy,
    "Deployment": _deployment,
    "DaemonSet": lambda m, a: {
        "observedGeneration": 1,
        "desiredNumberScheduled": 2,
        "numberReady": 2,
        "numberAvailable": 2,
        "updatedNumberScheduled": 2,
    },
    # The Job controller, once the pod succeeded (the CRD Jobs: function/serving/crd_job.py).
    "Job": lambda m, a: {
        "succeeded": 1,
        "conditions": [_true("SuccessCriteriaMet"), _true("Complete")],
    },
    # The network operator's overall state once every component it deploys is ready.
    "NicClusterPolicy": lambda m, a: {"state": "ready"},
}


def remote_status(manifest: dict, gateway_address: str | None) -> dict | None:
    """The status the workload cluster's controllers give an object of this kind (None: none)."""
    writer = STATUS.get(manifest.get("kind", ""))
    return writer(manifest, gateway_address) if writer else None


def remote_object(manifest: dict, observe_only: bool, gateway_address: str | None) -> dict:
    """The object as it exists on the workload cluster."""
    remote = copy.deepcopy(manifest)
    meta = remote.setdefault("metadata", {})
    meta["uid"], meta["generation"] = "00000000-0000-0000-0000-000000000001", 1
    if observe_only and manifest.get("kind") == "ConfigMap":
        # The ConfigMaps the function observes: trust-manager's copy of the cluster CA, and the
        # GPU health reporter's (which World.gpu_nodes decides).
        remote["data"] = {"ca.crt": CLUSTER_CA}
    status = remote_status(manifest, gateway_address)
    if status is not None:
        remote["status"] = status
    return remote


def object_ready(body: dict, remote: dict) -> bool:
    """provider-kubernetes' readiness: created, or the CEL query over the remote object."""
    readiness = body.get("spec", {}).get("readiness") or {}
    if readiness.get("policy") != "DeriveFromCelQuery":
        return True
    program = _CEL.program(_CEL.compile(readiness["celQuery"]))
    try:
        return bool(program.evaluate({"object": celpy.json_to_cel(remote)}))
    except celpy.CELEvalError:
        return False


def inference_gateway(name: str, namespace: str = "fleet", ca: str = FLEET_GATEWAY_CA) -> dict:
    """A fleet InferenceGateway that has published its client CA."""
    return {
        "apiVersion": "modelplane.ai/v1alpha1",
        "kind": "InferenceGateway",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterName": "fleet"},
        "status": {"clientCACertificate": ca},
    }


def gpu_report(nodes: list[dict]) -> str:
    """What the GPU health reporter writes for these Nodes (function/serving/gpu_health.py): its
    jq program modelled, and held to the real jq by tests/unit/test_gpu_health.py."""
    report = []
    gpu_nodes = [n for n in nodes if n["metadata"].get("labels", {}).get(GPU_NODE_LABEL) == "true"]
    for node in sorted(gpu_nodes, key=lambda n: n["metadata"]["name"]):
        bad = [
            {
                "type": c["type"],
                "status": c["status"],
                "reason": c.get("reason") or "",
                "message": (c.get("message") or "")[: gpu_health.MESSAGE_LIMIT],
                "since": c.get("lastTransitionTime") or "",
            }
            for c in node.get("status", {}).get("conditions") or []
            if gpu_health.HEALTHY.get(c["type"], c["status"]) != c["status"]
        ]
        report.append(
            {
                "name": node["metadata"]["name"],
                "pool": (node["metadata"].get("labels") or {}).get(names.POOL_LABEL) or "",
                "bad": sorted(bad, key=lambda b: b["type"]),
            }
        )
    if len([n for n in report if n["bad"]]) > gpu_health.MANY:
        for n in report:
            for b in n["bad"]:
                b["message"] = b["message"][: gpu_health.SHORT_MESSAGE]
    return json.dumps(report, separators=(",", ":"), ensure_ascii=False)


def gpu_node(name: str, pool: str, since: str | None = None, **conditions: str) -> dict:
    """A GPU node of pool as the API server has it, Ready unless conditions say otherwise
    (type=status, or type=status:reason:message), each condition so since `since` (an hour ago
    by default)."""
    since = since or timestamp(clock.now() - datetime.timedelta(hours=1))
    listed = {"Ready": "True", **conditions}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {GPU_NODE_LABEL: "true", names.POOL_LABEL: pool}},
        "status": {"conditions": [_condition(t, v, since) for t, v in listed.items()]},
    }


def healthy_gpu_nodes(xr: dict) -> list[dict]:
    """The nodes of every pool of xr, healthy (its nodeCount, or minNodeCount where set)."""
    nodes = []
    for pool in xr["spec"].get("nodePools", []):
        count = pool.get("minNodeCount", pool.get("nodeCount", 1))
        nodes += [gpu_node(f"{pool['name'].lower()}-{i}", pool["name"]) for i in range(count)]
    return nodes


def timestamp(moment: datetime.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _condition(type_: str, value: str, since: str) -> dict:
    status, _, rest = value.partition(":")
    reason, _, message = rest.partition(":")
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": since,
    }
