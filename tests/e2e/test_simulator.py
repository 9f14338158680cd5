"""The provider simulator's loop, against an in-memory API server (no control plane needed).

It must do what a provider does and nothing else: report the model's status with condition
transition times, set the external name, write a connection Secret owned by the resource, leave
resources being deleted alone, write nothing when nothing changed, and survive failures.
"""

import base64
import copy
import time

import pytest

from tests.e2e.kube import ApiError
from tests.e2e.simulator import (
    EXTERNAL_NAME,
    Kind,
    Simulator,
    contains,
    desired_status,
    managed_kinds,
    simulating,
)
from tests.sim import providers
from tests.sim.providers import Observation

NS = "modelplane-system"
RELEASE = Kind("helm.m.crossplane.io/v1beta1", "Release")
VPC = Kind("ec2.aws.m.upbound.io/v1beta1", "VPC")


class FakeKube:
    """Objects by (apiVersion, kind, namespace, name); merge patches like the API server, with a
    status schema that knows only some atProvider fields (the rest is pruned with a warning)."""

    def __init__(self, known_at_provider=("id", "arn")):
        self.objects: dict[tuple, dict] = {}
        self.known = set(known_at_provider)
        self.calls: list[tuple] = []
        self._warnings: list[str] = []
        self.rv = 0
        self.fail_list: set[Kind] = set()

    def add(self, kind: Kind, name: str, spec=None, **meta) -> dict:
        self.rv += 1
        obj = {
            "apiVersion": kind.api_version,
            "kind": kind.kind,
            "metadata": {
                "name": name,
                "namespace": NS,
                "uid": f"uid-{name}",
                "resourceVersion": str(self.rv),
                **meta,
            },
            "spec": spec or {"forProvider": {}},
        }
        self.objects[(kind.api_version, kind.kind, NS, name)] = obj
        return obj

    def list(self, api_version, kind, namespace=None, label_selector=None):
        if Kind(api_version, kind) in self.fail_list:
            raise ApiError(503, {"reason": "ServiceUnavailable", "message": "etcd"}, "GET", "/x")
        return [
            copy.deepcopy(o)
            for (a, k, ns, _), o in self.objects.items()
            if (a, k) == (api_version, kind) and ns == namespace
        ]

    def patch(self, api_version, kind, name, patch, *, namespace=None, subresource=None, **kw):
        self.calls.append(("patch", kind, name, subresource, copy.deepcopy(patch)))
        obj = self.objects.get((api_version, kind, namespace, name))
        if obj is None:
            raise ApiError(404, {"reason": "NotFound"}, "PATCH", name)
        self._warnings = []
        if subresource == "status":
            status = copy.deepcopy(patch["status"])
            for key in list(status.get("atProvider", {})):
                if key not in self.known:
                    del status["atProvider"][key]
                    self._warnings.append(f'unknown field "status.atProvider.{key}"')
            obj.setdefault("status", {}).update(status)
        else:
            obj["metadata"].setdefault("annotations", {}).update(patch["metadata"]["annotations"])
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        return copy.deepcopy(obj)

    def warnings(self):
        return list(self._warnings)

    def apply(self, obj, manager=None, **kw):
        self.calls.append(("apply", obj["kind"], obj["metadata"]["name"], None, obj))
        key = ("v1", obj["kind"], obj["metadata"]["namespace"], obj["metadata"]["name"])
        self.objects[key] = copy.deepcopy(obj)
        return obj

    def close(self):
        pass

    def writes(self):
        return [c for c in self.calls if c[0] in ("patch", "apply")]


def observation(body: dict) -> Observation:
    """A model answer: a VPC gets an id and a connection detail; a Release only conditions."""
    name = body["metadata"]["name"]
    conditions = [
        {"type": "Ready", "status": "True", "reason": "Available"},
        {"type": "Synced", "status": "True", "reason": "ReconcileSuccess"},
    ]
    if body["kind"] == "VPC":
        return Observation(
            status={"conditions": conditions, "atProvider": {"id": f"vpc-{name}"}},
            external_name=f"vpc-{name}",
            connection={"endpoint": f"https://{name}.example"},
        )
    return Observation(status={"conditions": conditions, "atProvider": {"revision": 1}})


def test_managed_kinds_are_the_namespaced_managed_kinds_of_m_groups():
    def crd(group, kind, scope="Namespaced", categories=("crossplane", "managed"), storage="v1"):
        return {
            "spec": {
                "group": group,
                "scope": scope,
                "names": {"kind": kind, "categories": list(categories)},
                "versions": [
                    {"name": "v1alpha1", "storage": False},
                    {"name": storage, "storage": True},
                ],
            }
        }

    crds = [
        crd("ec2.aws.m.upbound.io", "VPC", storage="v1beta1"),
        crd("ec2.aws.upbound.io", "VPC"),  # legacy cluster-scoped group
        crd("helm.m.crossplane.io", "Release", storage="v1beta1"),
        crd("helm.m.crossplane.io", "ClusterProviderConfig", scope="Cluster", categories=()),
        crd("helm.m.crossplane.io", "ProviderConfig", categories=("crossplane", "provider")),
        crd("gateway.networking.k8s.io", "Gateway"),
    ]
    assert managed_kinds(crds) == [VPC, RELEASE]


def test_desired_status_keeps_transition_times_of_unchanged_conditions():
    current = {
        "conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"},
            {"type": "Synced", "status": "False", "lastTransitionTime": "2026-01-01T00:00:00Z"},
        ]
    }
    reported = {
        "conditions": [
            {"type": "Ready", "status": "True", "reason": "Available"},
            {"type": "Synced", "status": "True", "reason": "ReconcileSuccess"},
        ],
        "atProvider": {"id": "x"},
    }
    status = desired_status(current, reported, "2026-02-02T00:00:00Z")
    times = {c["type"]: c["lastTransitionTime"] for c in status["conditions"]}
    assert times == {"Ready": "2026-01-01T00:00:00Z", "Synced": "2026-02-02T00:00:00Z"}
    assert status["atProvider"] == {"id": "x"}
    assert "lastTransitionTime" not in reported["conditions"][0], (
        "the model's answer is not mutated"
    )


def test_contains_compares_conditions_by_type_and_ignores_extra_fields():
    current = {
        "conditions": [
            {"type": "Synced", "status": "True", "observedGeneration": 2},
            {"type": "Ready", "status": "True"},
        ],
        "atProvider": {"id": "a", "arn": "b"},
    }
    assert contains(current, {"conditions": [{"type": "Ready", "status": "True"}]})
    assert contains(current, {"atProvider": {"id": "a"}})
    assert not contains(current, {"conditions": [{"type": "Ready", "status": "False"}]})
    assert not contains(current, {"atProvider": {"id": "other"}})
    assert not contains({}, {"conditions": [{"type": "Ready", "status": "True"}]})


def test_a_tick_plays_the_provider_for_each_managed_resource():
    kube = FakeKube()
    kube.add(
        VPC, "net", spec={"forProvider": {}, "writeConnectionSecretToRef": {"name": "net-conn"}}
    )
    kube.add(RELEASE, "cert-manager")
    sim = Simulator(kube, NS, [VPC, RELEASE], observe=observation)

    assert sim.tick() == 4  # two statuses, one external name, one Secret

    vpc = kube.objects[(VPC.api_version, "VPC", NS, "net")]
    assert vpc["status"]["atProvider"] == {"id": "vpc-net"}
    assert {c["type"]: c["status"] for c in vpc["status"]["conditions"]} == {
        "Ready": "True",
        "Synced": "True",
    }
    assert all(c["lastTransitionTime"].endswith("Z") for c in vpc["status"]["conditions"])
    assert vpc["metadata"]["annotations"][EXTERNAL_NAME] == "vpc-net"

    secret = kube.objects[("v1", "Secret", NS, "net-conn")]
    assert base64.b64decode(secret["data"]["endpoint"]).decode() == "https://net.example"
    assert secret["type"] == "connection.crossplane.io/v1alpha1"
    (owner,) = secret["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "VPC",
        "net",
        "uid-net",
        True,
    )

    release = kube.objects[(RELEASE.api_version, "Release", NS, "cert-manager")]
    assert EXTERNAL_NAME not in release["metadata"].get("annotations", {})
    assert "revision" not in release["status"]["atProvider"]  # pruned: not in this fake's schema
    assert sim.unknown_fields == {str(RELEASE): {'"status.atProvider.revision"'}}
    assert sim.errors == []


def test_a_second_tick_writes_nothing_when_nothing_changed():
    kube = FakeKube()
    kube.add(VPC, "net", spec={"forProvider": {}, "writeConnectionSecretToRef": {"name": "c"}})
    kube.add(RELEASE, "rel")  # its reported status is partly pruned: still written only once
    sim = Simulator(kube, NS, [VPC, RELEASE], observe=observation)
    sim.tick()
    writes = len(kube.writes())
    assert sim.tick() == 0
    assert len(kube.writes()) == writes


def test_a_changed_report_is_written_again():
    kube = FakeKube()
    kube.add(VPC, "net")
    answers = {"ready": "False"}

    def changing(body):
        return Observation(
            status={"conditions": [{"type": "Ready", "status": answers["ready"], "reason": "x"}]}
        )

    sim = Simulator(kube, NS, [VPC], observe=changing)
    sim.tick()
    first = kube.objects[(VPC.api_version, "VPC", NS, "net")]["status"]["conditions"][0]
    answers["ready"] = "True"
    assert sim.tick() == 1
    second = kube.objects[(VPC.api_version, "VPC", NS, "net")]["status"]["conditions"][0]
    assert (first["status"], second["status"]) == ("False", "True")


def test_resources_being_deleted_are_left_alone():
    kube = FakeKube()
    kube.add(VPC, "going", deletionTimestamp="2026-01-01T00:00:00Z")
    sim = Simulator(kube, NS, [VPC], observe=observation)
    assert sim.tick() == 0
    assert kube.calls == []


def test_failures_are_collected_not_raised():
    kube = FakeKube()
    kube.add(VPC, "net")
    kube.add(RELEASE, "rel")
    kube.fail_list.add(RELEASE)

    def broken(body):
        raise ValueError("model has no answer")

    sim = Simulator(kube, NS, [VPC, RELEASE], observe=broken)
    assert sim.tick() == 0
    assert any("503" in e for e in sim.errors), sim.errors
    assert any("model has no answer" in e for e in sim.errors), sim.errors


def test_a_resource_deleted_under_the_simulator_is_not_an_error():
    kube = FakeKube()
    kube.add(VPC, "net")
    real_patch = kube.patch

    def vanish(*args, **kw):
        kube.objects.clear()
        return real_patch(*args, **kw)

    kube.patch = vanish
    sim = Simulator(kube, NS, [VPC], observe=observation)
    sim.tick()
    assert sim.errors == []


def test_the_loop_runs_in_the_background_until_stopped():
    kube = FakeKube()
    kube.add(VPC, "net")
    with simulating(kube, NS, kinds=[VPC], observe=observation, interval=0.01) as sim:
        deadline = time.monotonic() + 10
        while sim.ticks < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        kube.add(VPC, "later")
        deadline = time.monotonic() + 10
        while "status" not in kube.objects[(VPC.api_version, "VPC", NS, "later")]:
            assert time.monotonic() < deadline, "a resource created later was never played"
            time.sleep(0.01)
    ticks = sim.ticks
    time.sleep(0.05)
    assert sim.ticks == ticks, "the loop kept running after stop()"
    assert sim.writes["status"] == 2


@pytest.mark.parametrize("kind", [VPC, RELEASE])
def test_the_default_model_is_the_shared_provider_model(kind):
    """Without an observe callable the simulator asks tests/sim/providers.py."""
    kube = FakeKube(known_at_provider=())
    kube.add(kind, "thing")
    sim = Simulator(kube, NS, [kind])
    assert sim.observe is providers.observe
    sim.tick()
    ready = kube.objects[(kind.api_version, kind.kind, NS, "thing")]["status"]["conditions"]
    assert {c["type"] for c in ready} >= {"Ready", "Synced"}
