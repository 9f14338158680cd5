"""The ModelExpress server in a namespace of its own, and a live cluster's move out of `default`
(function/serving/modelexpress.py)."""

import copy
from dataclasses import replace

import pytest

from function import kube
from function.compose import compose_cluster
from function.inputs import Observed, ObservedResource
from function.output import Desired
from function.serving import modelexpress
from function.serving.components import DEPLOYMENT_AVAILABLE, NO_DELETE
from tests.sim.workload import inference_gateway
from tests.unit import sim
from tests.unit.sim import reported
from tests.unit.test_serving import INSTALLED, condition, existing, required

NEW = {
    modelexpress.NAMESPACE_KEY: "Namespace",
    "modelexpress-serviceaccount": "ServiceAccount",
    "modelexpress-role": "Role",
    "modelexpress-rolebinding": "RoleBinding",
    modelexpress.SERVICE_KEY: "Service",
    modelexpress.DEPLOYMENT_KEY: "Deployment",
}
LEGACY = {
    "modelexpress-server-serviceaccount": "ServiceAccount",
    "modelexpress-server-role": "Role",
    "modelexpress-server-rolebinding": "RoleBinding",
    modelexpress.LEGACY_SERVICE_KEY: "Service",
    modelexpress.LEGACY_DEPLOYMENT_KEY: "Deployment",
}
# The Role the previous release gave the server in `default`, written out: a live cluster's stays
# as it runs until it goes.
PREVIOUS_ROLE_RULES = [
    {
        "apiGroups": ["modelexpress.nvidia.com"],
        "resources": [
            "modelmetadatas",
            "modelmetadatas/status",
            "modelcacheentries",
            "modelcacheentries/status",
        ],
        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
    },
    {
        "apiGroups": [""],
        "resources": ["configmaps"],
        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
    },
]


def dynamo():
    xr, classes = existing("Dynamo")
    req = required(classes, [inference_gateway("fleet-a")])
    return xr, req, sim.converge(xr, req, None, INSTALLED)


def manifest(out, key: str) -> dict:
    return out.resources[key].body["spec"]["forProvider"]["manifest"]


def previous_release(xr: dict, out):
    """What the previous release composed for the same cluster: the server in `default`, and none
    of the new layout (nor the Usages naming it)."""
    provider_config = manifest_pc(out)
    resources = {
        k: d
        for k, d in out.resources.items()
        if k not in NEW and not any(k.endswith(f"-by-{n}") or f"-{n}-by-" in k for n in NEW)
    }
    for key, kind in LEGACY.items():
        body = modelexpress.server(kind, "default")
        if kind == "Role":
            body = {**body, "rules": PREVIOUS_ROLE_RULES}
        ready_when = DEPLOYMENT_AVAILABLE if kind == "Deployment" else None
        made = kube.manifest_object(
            xr["metadata"]["name"], key, body, provider_config, ready_when=ready_when
        )
        resources[key] = Desired(made, ready=True)
    return replace(out, resources=resources)


def manifest_pc(out) -> str:
    return out.resources[modelexpress.DEPLOYMENT_KEY].body["spec"]["providerConfigRef"]["name"]


def walk(xr, req, start):
    """Reconcile from start, the providers reporting each pass, until nothing changes: every
    pass's output, with the observation it was composed from."""
    passes, seen = [], reported(start)
    for _ in range(sim.MAX_PASSES):
        out = compose_cluster(xr, sim.answered(req, start), seen, INSTALLED)
        passes.append((seen, out))
        if out.resources == start.resources:
            return passes
        start, seen = out, reported(out)
    raise AssertionError("no convergence")


# --- a new cluster --------------------------------------------------------------------------------


def test_a_new_cluster_runs_the_server_in_its_own_namespace_and_nothing_in_default():
    _, _, out = dynamo()
    assert not LEGACY.keys() & out.resources.keys()
    for key, kind in NEW.items():
        body = manifest(out, key)
        assert body["kind"] == kind
        if kind != "Namespace":
            assert body["metadata"]["namespace"] == "modelexpress-system", key
    namespace = manifest(out, modelexpress.NAMESPACE_KEY)
    assert namespace["metadata"] == {
        "name": "modelexpress-system",
        "labels": {"pod-security.kubernetes.io/enforce": "baseline"},
    }
    binding = manifest(out, "modelexpress-rolebinding")
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": "modelexpress-server",
            "namespace": "modelexpress-system",
        }
    ]
    deployment = manifest(out, modelexpress.DEPLOYMENT_KEY)
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    # The server keeps its objects in the namespace it runs in (POD_NAMESPACE).
    assert env["POD_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert condition(out, "BackendReady").status is True


def test_the_role_grants_only_what_the_server_does():
    _, _, out = dynamo()
    role = manifest(out, "modelexpress-role")
    granted = {(r, v) for rule in role["rules"] for r in rule["resources"] for v in rule["verbs"]}
    assert all(rule["apiGroups"] in (["modelexpress.nvidia.com"], [""]) for rule in role["rules"])
    assert not {v for _, v in granted} & {"watch", "update", "deletecollection", "*"}
    assert {r for r, _ in granted} == {
        "modelmetadatas",
        "modelmetadatas/status",
        "modelcacheentries",
        "modelcacheentries/status",
        "configmaps",
    }
    # Status is only ever patched; the cache entries themselves are never patched.
    assert {v for r, v in granted if r.endswith("/status")} == {"patch"}
    assert ("modelcacheentries", "patch") not in granted
    assert ("configmaps", "patch") in granted and ("configmaps", "delete") in granted


def test_on_an_existing_cluster_the_namespace_is_never_deleted():
    _, _, out = dynamo()
    body = out.resources[modelexpress.NAMESPACE_KEY].body
    assert body["spec"]["managementPolicies"] == list(NO_DELETE)


def test_engines_are_told_the_fqdn():
    assert modelexpress.ADDRESS == "modelexpress-server.modelexpress-system.svc.cluster.local:8001"
    assert modelexpress.alias()["spec"]["externalName"] == modelexpress.ADDRESS.rsplit(":", 1)[0]


# --- a live cluster moves -------------------------------------------------------------------------


def _service(observed: Observed) -> dict | None:
    seen = observed.resources.get(modelexpress.LEGACY_SERVICE_KEY)
    return seen.at_provider("manifest") if seen else None


def _ready(observed: Observed, key: str) -> bool:
    seen = observed.resources.get(key)
    return seen is not None and seen.ready


def _reachable(observed: Observed) -> bool:
    """An engine given the old name reaches a Ready server: the old Service selects the old
    Ready pods, or it is the alias of the new Service, whose server is Ready."""
    service = _service(observed)
    if service is None:
        return False
    if service["spec"].get("type") == "ExternalName":
        return _ready(observed, modelexpress.DEPLOYMENT_KEY) and _ready(
            observed, modelexpress.SERVICE_KEY
        )
    return _ready(observed, modelexpress.LEGACY_DEPLOYMENT_KEY)


def test_a_live_cluster_moves_with_the_old_name_answering_all_along():
    xr, req, new = dynamo()
    old = previous_release(xr, new)
    passes = walk(xr, req, old)
    first_seen, first = passes[0]
    # The first reconcile leaves what runs in `default` exactly as it runs.
    for key in LEGACY:
        assert first.resources[key].body == old.resources[key].body, key
    assert modelexpress.NAMESPACE_KEY in first.resources
    assert modelexpress.DEPLOYMENT_KEY not in first.resources  # its namespace first
    steps = []
    for seen, out in passes:
        assert _reachable(seen)
        service = manifest(out, modelexpress.LEGACY_SERVICE_KEY)
        if service["spec"].get("type") == "ExternalName":
            # Pointed at the new server only once it is Ready.
            assert (
                _ready(seen, modelexpress.DEPLOYMENT_KEY)
                or _service(seen)["spec"].get("type") == "ExternalName"
            )
            steps.append("alias")
        if modelexpress.LEGACY_DEPLOYMENT_KEY not in out.resources:
            # The old server goes only once the cluster holds the alias and the new one serves.
            assert _service(seen)["spec"]["type"] == "ExternalName"
            assert _ready(seen, modelexpress.DEPLOYMENT_KEY)
            steps.append("server gone")
        if "modelexpress-server-role" not in out.resources:
            assert modelexpress.LEGACY_DEPLOYMENT_KEY not in seen.resources
            steps.append("access gone")
    assert steps.index("alias") < steps.index("server gone") < steps.index("access gone")
    # Converged: the new cluster's layout, and the alias for engines given the old name.
    _, last = passes[-1]
    assert set(last.resources) - set(new.resources) == {
        modelexpress.LEGACY_SERVICE_KEY,
        f"usage-{modelexpress.SERVICE_KEY}-by-{modelexpress.LEGACY_SERVICE_KEY}",
        *(f"usage-{c}-by-{modelexpress.LEGACY_SERVICE_KEY}" for c in CRDS),
    }
    assert manifest(last, modelexpress.LEGACY_SERVICE_KEY) == modelexpress.alias()
    for key in NEW:
        assert last.resources[key].body == new.resources[key].body, key
    assert condition(last, "BackendReady").status is True


CRDS = ("modelexpress-crd-modelmetadatas", "modelexpress-crd-modelcacheentries")


def _moved_until(xr, req, old, stop):
    """Reconcile from the previous release until stop(out) holds: that output."""
    for _, out in walk(xr, req, old):
        if stop(out):
            return out
    raise AssertionError("never")


def _aliased(out) -> bool:
    return manifest(out, modelexpress.LEGACY_SERVICE_KEY)["spec"].get("type") == "ExternalName"


def _unready(observed: Observed, key: str) -> Observed:
    resources = dict(observed.resources)
    body = copy.deepcopy(resources[key].body)
    body["status"]["conditions"] = [{"type": "Ready", "status": "False", "reason": "Unavailable"}]
    resources[key] = ObservedResource(body)
    return replace(observed, resources=resources)


def test_the_old_server_stays_while_the_new_one_is_not_ready():
    xr, req, new = dynamo()
    old = previous_release(xr, new)
    # The new server is composed but never becomes Available: nothing in `default` changes.
    composed = _moved_until(xr, req, old, lambda o: modelexpress.DEPLOYMENT_KEY in o.resources)
    seen = _unready(reported(composed), modelexpress.DEPLOYMENT_KEY)
    out = compose_cluster(xr, sim.answered(req, composed), seen, INSTALLED)
    for key in LEGACY:
        assert out.resources[key].body == old.resources[key].body, key
    backend = condition(out, "BackendReady")
    assert backend.status is False and modelexpress.DEPLOYMENT_KEY in backend.message


def test_the_old_server_is_kept_if_the_new_one_falters_before_it_goes():
    xr, req, new = dynamo()
    old = previous_release(xr, new)
    aliased = _moved_until(xr, req, old, _aliased)
    # The cluster holds the alias, but the new server lost Ready: the old one stays, and the
    # alias is never turned back.
    seen = _unready(reported(aliased), modelexpress.DEPLOYMENT_KEY)
    out = compose_cluster(xr, sim.answered(req, aliased), seen, INSTALLED)
    assert modelexpress.LEGACY_DEPLOYMENT_KEY in out.resources
    assert _aliased(out)


@pytest.mark.parametrize("lost", [modelexpress.LEGACY_SERVICE_KEY, modelexpress.DEPLOYMENT_KEY])
def test_an_observation_missing_for_a_moment_retires_nothing(lost):
    xr, req, new = dynamo()
    old = previous_release(xr, new)
    aliased = _moved_until(xr, req, old, _aliased)
    out = compose_cluster(
        xr, sim.answered(req, aliased), reported(aliased, drop_status=(lost,)), INSTALLED
    )
    assert LEGACY.keys() <= out.resources.keys()


def test_a_cluster_that_never_ran_the_old_server_gets_no_alias():
    xr, req, new = dynamo()
    again = compose_cluster(xr, sim.answered(req, new), reported(new), INSTALLED)
    assert not LEGACY.keys() & again.resources.keys()
