"""The GKE renderer: the project from the ProviderConfig, the cluster's own identity, DRA node
pools with the COS driver installer, pools sized as GKE counts nodes, upgrades, shapes."""

import copy
import itertools
import re
from datetime import UTC, datetime, timedelta

import pytest
import yaml

from function import clock, clusters, names
from function.clusters import gke, gke_driver
from function.clusters.base import Scaling
from function.compose import compose_cluster
from function.inputs import Inputs, Observed, resolve_classes
from function.models import InferenceCluster
from tests.builders import all_classes, example, provider_configs
from tests.charts import charts_dir
from tests.unit import sim
from tests.unit.sim import reported


def required(classes: list[dict], configs: list[dict] | None) -> dict[str, list[dict]]:
    """The classes, and the answer to the cloud-provider-config requirement (None: not yet)."""
    out = all_classes(classes)
    if configs is not None:
        out["cloud-provider-config"] = copy.deepcopy(configs)
    return out


def converge(name: str = "gke"):
    xr, classes = example(name)
    return xr, classes, sim.converge(xr, required(classes, provider_configs(name)))


def test_the_provider_config_is_required_by_the_name_and_kind_the_credentials_give():
    xr, classes = example("gke-team")
    out = compose_cluster(xr, required(classes, None), Observed())
    want = out.requirements["cloud-provider-config"]
    assert (want.api_version, want.kind, want.name, want.namespace) == (
        "gcp.m.upbound.io/v1beta1",
        "ProviderConfig",
        "team-ml",
        "modelplane-system",
    )
    xr, classes = example("gke")
    want = compose_cluster(xr, required(classes, None), Observed()).requirements[
        "cloud-provider-config"
    ]
    assert (want.kind, want.name, want.namespace) == ("ClusterProviderConfig", "default", None)


def test_the_project_goes_into_workload_identity():
    _, _, out = converge("gke-team")
    spec = out.resources["cluster"].body["spec"]["forProvider"]
    assert spec["workloadIdentityConfig"] == {"workloadPool": "team-ml-inference.svc.id.goog"}


def test_costs_are_allocated_by_namespace_and_label():
    """GKE cost allocation (free) breaks the billing export down by namespace and label; live
    clusters get it in place (tests/test_upgrade.py lists it among the in-place changes)."""
    _, _, out = converge()
    spec = out.resources["cluster"].body["spec"]["forProvider"]
    assert spec["costManagementConfig"] == {"enabled": True}


def test_automatic_upgrades_wait_for_a_weekend_window_gke_accepts():
    """GKE's rules for a recurring window (GKE "Maintenance windows and exclusions"): at least
    48 hours of availability in any 32 days, each window at least 4 hours long."""
    _, _, out = converge()
    window = out.resources["cluster"].body["spec"]["forProvider"]["maintenancePolicy"]
    recurring = window["recurringWindow"]
    start = datetime.fromisoformat(recurring["startTime"])
    hours = (datetime.fromisoformat(recurring["endTime"]) - start).total_seconds() / 3600
    rule = dict(part.split("=") for part in recurring["recurrence"].split(";"))
    assert rule["FREQ"] == "WEEKLY"
    days = rule["BYDAY"].split(",")
    assert start.strftime("%a")[:2].upper() in days  # the first window is one of its days
    assert hours >= 4
    # The fewest of those days in any 32 days: four weeks.
    assert 4 * len(days) * hours >= 48


def test_until_the_provider_config_answers_the_cluster_waits_and_nothing_else_does():
    xr, classes = example("gke")
    out = compose_cluster(xr, required(classes, None), Observed())
    assert "cluster" not in out.resources
    assert {"network", "subnetwork", "router", "router-nat"} <= set(out.resources)
    # Node pools reference the cluster: they wait for it to be composed.
    assert "nodepool-gpu-l4" not in out.resources
    message = next(c for c in out.conditions if c.type == "ClusterReady").message
    assert "cluster (the GCP project id and the node service account)" in message
    assert not [r for r in out.results if r.reason == "ProviderConfigNotFound"]


@pytest.mark.parametrize(
    "answer",
    [
        [],
        [
            {
                "apiVersion": "aws.m.upbound.io/v1beta1",
                "kind": "ClusterProviderConfig",
                "metadata": {"name": "default"},
                "spec": {},
            }
        ],
        [
            {
                "apiVersion": "gcp.m.upbound.io/v1beta1",
                "kind": "ClusterProviderConfig",
                "metadata": {"name": "default"},
                "spec": {"credentials": {"source": "None"}},
            }
        ],
    ],
    ids=["missing", "wrong-kind", "no-project"],
)
def test_a_missing_or_wrong_provider_config_is_warned_and_drops_nothing(answer):
    xr, classes, converged = converge()
    first = compose_cluster(xr, required(classes, answer), Observed())
    assert "cluster" not in first.resources
    warning = next(r for r in first.results if r.reason == "ProviderConfigNotFound")
    assert "ClusterProviderConfig 'default' (gcp.m.upbound.io)" in warning.message
    # Once the cluster exists, losing its ProviderConfig changes and removes nothing.
    again = compose_cluster(xr, required(classes, answer), reported(converged))
    assert set(again.resources) == set(converged.resources)
    for key, desired in converged.resources.items():
        assert again.resources[key].body == desired.body, key


ACCESS_IDENTITY = {
    "type": "GoogleApplicationCredentials",
    "source": "Secret",
    "secretRef": {
        "namespace": "modelplane-system",
        "name": names.child_name("gke-us-central", "gcp-access-key"),
        # provider-upjet-gcp writes a ServiceAccountKey's decoded JSON key under private_key.
        "key": "private_key",
    },
}


def test_a_gcp_provider_config_with_a_key_gets_the_cluster_a_key_of_its_own():
    xr, classes = example("gke")
    configs = provider_configs("gke")
    secret = {"namespace": "x", "name": "gcp", "key": "k.json"}
    configs[0]["spec"]["credentials"] = {"source": "Secret", "secretRef": secret}
    out = sim.converge(xr, required(classes, configs))
    for key in ("provider-config-helm", "provider-config-kubernetes"):
        assert out.resources[key].body["spec"]["identity"] == ACCESS_IDENTITY
    assert not [r for r in out.results if r.reason == "UnsupportedIdentity"]
    account = out.resources["access-service-account"].body["metadata"]["name"]
    assert 6 <= len(account) <= 30 and account[0].isalpha()
    key = out.resources["access-key"].body["spec"]
    assert key["writeConnectionSecretToRef"] == {"name": ACCESS_IDENTITY["secretRef"]["name"]}
    assert key["forProvider"] == {
        "serviceAccountIdRef": {"name": account},
        "privateKeyType": "TYPE_GOOGLE_CREDENTIALS_FILE",
    }
    grant = out.resources["access-iam-member-0"].body["spec"]["forProvider"]
    assert grant == {
        "project": "modelplane-demo",
        "role": "roles/container.admin",
        "member": f"serviceAccount:{account}@modelplane-demo.iam.gserviceaccount.com",
    }


INJECTED = {"type": "GoogleApplicationCredentials", "source": "InjectedIdentity"}
KEYLESS = [
    {"source": "InjectedIdentity"},
    {"source": "ImpersonateServiceAccount", "impersonateServiceAccount": {"name": "sa@p"}},
]


def keyless(credentials: dict) -> tuple:
    xr, classes = example("gke")
    configs = provider_configs("gke")
    configs[0]["spec"]["credentials"] = credentials
    return xr, required(classes, configs)


@pytest.mark.parametrize("credentials", KEYLESS, ids=["injected-identity", "impersonation"])
def test_a_keyless_gcp_provider_config_makes_no_key_and_the_providers_use_their_own_identity(
    credentials,
):
    xr, req = keyless(credentials)
    out = sim.converge(xr, req)
    assert not [k for k in out.resources if k.startswith("access-")]
    for key in ("provider-config-helm", "provider-config-kubernetes"):
        assert out.resources[key].body["spec"]["identity"] == INJECTED
    # The stack uninstalls through the cluster itself, which outlives both ProviderConfigs.
    usages = {k for k in out.resources if k.startswith("usage-")}
    assert "usage-cluster-by-provider-config-helm" in usages
    assert not [u for u in usages if "access" in u]


def test_keyless_provider_configs_wait_only_for_the_cluster():
    xr, req = keyless(KEYLESS[0])
    first = compose_cluster(xr, req, Observed())
    assert "provider-config-helm" not in first.resources
    out = sim.converge(xr, req)
    lost = compose_cluster(xr, req, reported(out, drop_status=("cluster",)))
    assert lost.resources["provider-config-helm"].body == out.resources["provider-config-helm"].body


def test_a_keyless_cluster_makes_no_key_while_its_provider_config_cannot_be_read():
    xr, req = keyless(KEYLESS[0])
    out = sim.converge(xr, req)
    for answer in ([], None):
        gone = dict(req)
        if answer is None:
            del gone["cloud-provider-config"]
        else:
            gone["cloud-provider-config"] = answer
        again = compose_cluster(xr, gone, reported(out))
        assert not [k for k in again.resources if k.startswith("access-")]
        assert again.resources["provider-config-helm"].body["spec"]["identity"] == INJECTED


def test_a_cluster_made_with_a_key_keeps_it_when_its_provider_config_turns_keyless():
    xr, classes, converged = converge()
    _, req = keyless(KEYLESS[0])
    again = compose_cluster(xr, req, reported(converged))
    assert again.resources["access-key"].body == converged.resources["access-key"].body
    helm = again.resources["provider-config-helm"].body["spec"]["identity"]
    assert helm == ACCESS_IDENTITY


@pytest.mark.parametrize("missing", ["cluster", "access-key", "access-iam-member-0"])
def test_provider_configs_wait_for_the_cluster_the_key_and_its_grant(missing):
    xr, classes, converged = converge()
    req = required(classes, provider_configs("gke"))
    first = compose_cluster(xr, req, Observed())
    second = compose_cluster(xr, req, reported(first))
    third = compose_cluster(xr, req, reported(second, drop_status=(missing,)))
    assert "provider-config-kubernetes" not in third.resources
    # Once there, they stay whatever is lost.
    again = compose_cluster(xr, req, reported(converged, drop_status=(missing,)))
    assert again.resources["provider-config-helm"].body == (
        converged.resources["provider-config-helm"].body
    )


def test_provider_configs_made_with_another_identity_keep_it_until_the_key_is_ready():
    xr, classes, converged = converge()
    req = required(classes, provider_configs("gke"))
    older = reported(converged, drop_status=("access-key",))
    old = {"type": "GoogleApplicationCredentials", "source": "Secret"}
    old["secretRef"] = {"namespace": "crossplane-system", "name": "gcp", "key": "k.json"}
    for key in ("provider-config-helm", "provider-config-kubernetes"):
        older.resources[key].body["spec"]["identity"] = old
    again = compose_cluster(xr, req, older)
    assert again.resources["provider-config-helm"].body["spec"]["identity"] == old
    done = compose_cluster(xr, req, reported(again))
    assert done.resources["provider-config-helm"].body["spec"]["identity"] == ACCESS_IDENTITY


def test_the_key_outlives_the_stack_and_the_cluster_and_grant_outlive_the_key():
    _, _, out = converge()
    usages = {k for k in out.resources if k.startswith("usage-")}
    assert "usage-access-key-by-provider-config-helm" in usages
    assert {"usage-cluster-by-access-key", "usage-access-iam-member-0-by-access-key"} <= usages
    assert not [u for u in usages if u.startswith("usage-cluster-by-provider-config")]


# --- the access key's rotation -------------------------------------------------------------------

XR = "gke-us-central"
DAY0 = datetime(2026, 1, 5, 9, tzinfo=UTC)
# The ProviderConfigs use the anchor (every stack resource uses them: function/usages.py).
STACK = "provider-config-helm"


def secret(generation: int) -> str:
    first = names.child_name(XR, "gcp-access-key")
    return first if generation == 1 else f"{first}-{generation}"


def key_name(generation: int) -> str:
    return names.cloud_name(
        XR, *(("access-key",) if generation == 1 else ("access-key", str(generation)))
    )


class Keys:
    """The providers, with each key's validAfter the moment it was first observed (the IAM API's
    validAfterTime is its creation)."""

    def __init__(self) -> None:
        self.made: dict[str, datetime] = {}

    def report(self, out, drop=(), lost=()):
        """What the providers report of out: drop_status for drop, nothing at all for lost."""
        seen = reported(out, drop_status=tuple(drop))
        for key in lost:
            del seen.resources[key]
        for key, res in seen.resources.items():
            if gke.key_generation(key) is None or key in drop:
                continue
            made = self.made.setdefault(res.body["metadata"]["name"], clock.now())
            res.body["status"]["atProvider"]["validAfter"] = made.strftime("%Y-%m-%dT%H:%M:%SZ")
            res.body["status"]["atProvider"]["validBefore"] = "9999-12-31T23:59:59Z"
        return seen


def keyed():
    xr, classes = example("gke")
    return xr, required(classes, provider_configs("gke"))


def at(day: float, xr, req, observed):
    with clock.fixed(DAY0 + timedelta(days=day)):
        return compose_cluster(xr, req, observed)


def keys_of(out) -> list[str]:
    return sorted(k for k in out.resources if gke.key_generation(k) is not None)


def held(out) -> set[str]:
    """The Secrets the ProviderConfigs name."""
    return {
        out.resources[k].body["spec"]["identity"]["secretRef"]["name"]
        for k in ("provider-config-helm", "provider-config-kubernetes")
    }


def kept(out) -> str:
    """The key the stack's Usages keep (every component that comes after nothing)."""
    of = out.resources[f"usage-access-key-by-{STACK}"].body["spec"]["of"]
    assert of["kind"] == "ServiceAccountKey"
    return of["resourceRef"]["name"]


def usage_pairs(out) -> set[tuple[str, str]]:
    """(of, by) names of every Usage."""
    return {
        (d.body["spec"]["of"]["resourceRef"]["name"], d.body["spec"]["by"]["resourceRef"]["name"])
        for k, d in out.resources.items()
        if k.startswith("usage-") and "by" in d.body["spec"]
    }


def converged_keyed(keys: Keys):
    xr, req = keyed()
    with clock.fixed(DAY0):
        out = compose_cluster(xr, req, Observed())
        for _ in range(sim.MAX_PASSES):
            again = compose_cluster(xr, req, keys.report(out))
            if again.resources == out.resources:
                return xr, req, again
            out = again
    raise AssertionError("no convergence")


def rotate(keys: Keys, xr, req, out, day: float, generation: int) -> list:
    """One rotation from generation - 1 to generation at day: each reconcile's output, checked
    step by step."""
    with clock.fixed(DAY0 + timedelta(days=day)):  # keys made now are made at day
        return _rotate(keys, xr, req, out, day, generation)


def _rotate(keys: Keys, xr, req, out, day: float, generation: int) -> list:
    old, new = generation - 1, generation
    old_key, new_key = gke.key_resource(old), gke.key_resource(new)
    # 1. the successor appears; the ProviderConfigs and the Usages stay on the old key.
    first = at(day, xr, req, keys.report(out))
    assert keys_of(first) == sorted([old_key, new_key])
    assert held(first) == {secret(old)}
    assert kept(first) == key_name(old)
    body = first.resources[new_key].body
    assert body["metadata"]["name"] == key_name(new)
    assert body["spec"]["writeConnectionSecretToRef"] == {"name": secret(new)}
    assert body["spec"]["forProvider"] == out.resources[old_key].body["spec"]["forProvider"]
    # The cluster stays as ready as the key in use keeps it while the successor is made.
    assert first.resources[new_key].ready
    assert next(c for c in first.conditions if c.type == "ClusterReady").status
    # The successor outlives the old key, which outlives the stack.
    assert (key_name(new), key_name(old)) in usage_pairs(first)
    # 2. the successor is Ready with its Secret: both ProviderConfigs move to it.
    second = at(day, xr, req, keys.report(first))
    assert keys_of(second) == sorted([old_key, new_key])
    assert held(second) == {secret(new)}
    assert kept(second) == key_name(old)  # the ProviderConfigs may still be observed on it
    # 3. both are observed on it: the stack's Usages move to it, in place (same key and name).
    third = at(day, xr, req, keys.report(second))
    assert keys_of(third) == sorted([old_key, new_key])
    assert kept(third) == key_name(new)
    assert (
        third.resources[f"usage-access-key-by-{STACK}"].body["metadata"]["name"]
        == out.resources[f"usage-access-key-by-{STACK}"].body["metadata"]["name"]
    )
    # 4. no observed Usage keeps the old key: it goes, and the Usages naming it with it.
    fourth = at(day, xr, req, keys.report(third))
    assert keys_of(fourth) == [new_key]
    assert held(fourth) == {secret(new)}
    assert not [p for p in usage_pairs(fourth) if key_name(old) in p]
    assert {f"usage-cluster-by-{new_key}", f"usage-access-iam-member-0-by-{new_key}"} <= set(
        fourth.resources
    )
    # 5. and it holds.
    fifth = at(day, xr, req, keys.report(fourth))
    assert fifth.resources == fourth.resources
    return [first, second, third, fourth, fifth]


def test_a_fresh_key_is_left_alone_until_its_rotation_age():
    keys = Keys()
    xr, req, out = converged_keyed(keys)
    assert keys_of(out) == ["access-key"] and held(out) == {secret(1)}
    for day in (1, 30, 74.9):
        assert at(day, xr, req, keys.report(out)).resources == out.resources


def test_the_key_rotates_at_75_days_with_no_window_the_providers_hold_a_dead_key():
    """Each step waits for what it needs observed: the successor Ready before the
    ProviderConfigs move, both ProviderConfigs observed on it before the Usages move, the
    Usages moved before the old key goes; the key the ProviderConfigs name always exists."""
    keys = Keys()
    xr, req, out = converged_keyed(keys)
    steps = rotate(keys, xr, req, out, 75, 2)
    for before, after in itertools.pairwise([out, *steps]):
        # What the ProviderConfigs are observed on, and what they are told, is composed.
        for generation in (1, 2):
            if secret(generation) in held(before) | held(after):
                assert gke.key_resource(generation) in after.resources


def test_the_rotation_runs_again_and_again():
    keys = Keys()
    xr, req, out = converged_keyed(keys)
    out = rotate(keys, xr, req, out, 80, 2)[-1]
    # The second key is 75 days old 75 days after it was made.
    assert at(154.9, xr, req, keys.report(out)).resources == out.resources
    out = rotate(keys, xr, req, out, 155, 3)[-1]
    out = rotate(keys, xr, req, out, 240, 4)[-1]
    assert keys_of(out) == ["access-key-4"]
    assert kept(out) == key_name(4)


def test_a_live_cluster_with_an_old_key_rotates_it_on_upgrade():
    """A live cluster's `access-key` is the first generation, kept as it is: once older than
    75 days, its successor comes at the first reconcile."""
    keys = Keys()
    xr, req, out = converged_keyed(keys)
    rotate(keys, xr, req, out, 400, 2)


def test_a_shorter_key_life_rotates_at_five_sixths_of_it():
    keys = Keys()
    xr, req, out = converged_keyed(keys)
    seen = keys.report(out)
    at_provider = seen.resources["access-key"].body["status"]["atProvider"]
    at_provider["validBefore"] = (DAY0 + timedelta(days=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert "access-key-2" not in at(24.9, xr, req, seen).resources
    assert "access-key-2" in at(25, xr, req, seen).resources


def test_a_missing_observation_during_the_rotation_drops_no_key():
    keys = Keys()
    xr, req, out = converged_keyed(keys)
    first, second, third, fourth, _ = rotate(keys, xr, req, out, 75, 2)
    # The old key's status lost at the rotation age: no successor yet, nothing dropped.
    lost = at(75, xr, req, keys.report(out, drop=("access-key",)))
    assert keys_of(lost) == ["access-key"] and held(lost) == {secret(1)}
    # The successor not observed (or its status lost): the ProviderConfigs stay; both keys stay.
    for seen in (
        keys.report(first, lost=("access-key-2",)),
        keys.report(first, drop=("access-key-2",)),
    ):
        again = at(75, xr, req, seen)
        assert keys_of(again) == ["access-key", "access-key-2"]
        assert held(again) == {secret(1)}
        assert again.resources["access-key-2"].body == first.resources["access-key-2"].body
    # The old key not observed while the ProviderConfigs hold it: composed as it was.
    again = at(75, xr, req, keys.report(first, lost=("access-key",)))
    assert again.resources["access-key"].body == first.resources["access-key"].body
    # The new key lost after the switch: the ProviderConfigs keep it, and it is composed (once
    # the Usages have moved, the old key goes as it would).
    for step, composed in ((second, ["access-key", "access-key-2"]), (third, ["access-key-2"])):
        again = at(75, xr, req, keys.report(step, lost=("access-key-2",)))
        assert held(again) == {secret(2)}
        assert keys_of(again) == composed
        assert again.resources["access-key-2"].body == step.resources["access-key-2"].body
    # A ProviderConfig not observed: the old key stays, and keeps the stack.
    for step in (second, third):
        seen = keys.report(step, lost=("provider-config-kubernetes",))
        again = at(75, xr, req, seen)
        assert keys_of(again) == ["access-key", "access-key-2"]
        assert kept(again) == key_name(1)
    # The ProviderConfigs observed on different keys (one update failed): both stay.
    seen = keys.report(second)
    seen.resources["provider-config-kubernetes"].body["spec"]["identity"]["secretRef"]["name"] = (
        secret(1)
    )
    again = at(75, xr, req, seen)
    assert keys_of(again) == ["access-key", "access-key-2"] and held(again) == {secret(2)}
    assert kept(again) == key_name(1)
    # After the rotation, the key in use lost for a moment: composed as it is.
    again = at(76, xr, req, keys.report(fourth, lost=("access-key-2",)))
    assert set(again.resources) == set(fourth.resources)
    assert all(d.body == fourth.resources[k].body for k, d in again.resources.items())


def test_a_failing_successor_keeps_the_old_key_in_use_and_says_why():
    keys = Keys()
    xr, req, out = converged_keyed(keys)
    first = at(75, xr, req, keys.report(out))
    seen = keys.report(first)
    seen.resources["access-key-2"].body["status"]["conditions"] = [
        {"type": "Ready", "status": "False", "reason": "Creating"},
        {
            "type": "Synced",
            "status": "False",
            "reason": "ReconcileError",
            "message": "create failed: googleapi: Error 400: Precondition check failed.",
        },
    ]
    again = at(75, xr, req, seen)
    assert held(again) == {secret(1)} and kept(again) == key_name(1)
    assert keys_of(again) == ["access-key", "access-key-2"]
    warning = next(r for r in again.results if r.reason == "AccessKeyRotation")
    assert "access-key stays in use" in warning.message
    assert "Precondition check failed" in warning.message
    # Merely Creating for a while says nothing until the key in use is 90 days old.
    seen = keys.report(first)
    seen.resources["access-key-2"].body["status"]["conditions"] = [
        {"type": "Ready", "status": "False", "reason": "Creating"},
        {"type": "Synced", "status": "True", "reason": "ReconcileSuccess"},
    ]
    assert not [r for r in at(80, xr, req, seen).results if r.reason == "AccessKeyRotation"]
    late = [r for r in at(90, xr, req, seen).results if r.reason == "AccessKeyRotation"]
    assert "over 90 days old" in late[0].message
    # Ready but its Secret not written (publishing failed): not yet.
    seen = keys.report(first)
    seen.resources["access-key-2"].body["status"]["conditions"][1] = {
        "type": "Synced",
        "status": "False",
        "reason": "ReconcileError",
        "message": "cannot publish connection details",
    }
    assert held(at(75, xr, req, seen)) == {secret(1)}


def test_an_xr_deleted_mid_rotation_uninstalls_through_whichever_key_is_held():
    """At every step, each key a ProviderConfig is (or may be observed) on outlives the stack:
    it is the key the stack's Usages keep, or outlives it through the successor's Usage."""
    keys = Keys()
    xr, req, out = converged_keyed(keys)
    steps = rotate(keys, xr, req, out, 75, 2)
    for before, after in itertools.pairwise([out, *steps]):
        pairs = usage_pairs(after)
        anchored = kept(after)
        outlive = {anchored} | {of for of, by in pairs if by == anchored}
        for generation in (1, 2):
            if secret(generation) in held(before) | held(after):
                assert key_name(generation) in outlive, (generation, anchored)
        # The cluster and the grant outlive every key.
        for key in keys_of(after):
            assert f"usage-cluster-by-{key}" in after.resources


def test_nodes_run_as_a_least_privilege_service_account_of_their_own():
    _, _, out = converge()
    account = out.resources["node-service-account"].body
    email = f"{account['metadata']['name']}@modelplane-demo.iam.gserviceaccount.com"
    roles = sorted(
        r.body["spec"]["forProvider"]["role"] for k, r in out.resources.items() if "node-iam" in k
    )
    assert roles == ["roles/artifactregistry.reader", "roles/container.defaultNodeServiceAccount"]
    # Immutable: given at creation only, so a cluster or pool composed before keeps its own.
    for key in ("cluster", "system-nodepool", "nodepool-gpu-l4", "nodepool-gpu-h100"):
        spec = out.resources[key].body["spec"]
        assert spec["initProvider"]["nodeConfig"] == {"serviceAccount": email}, key
        assert "serviceAccount" not in spec["forProvider"].get("nodeConfig", {}), key


def test_the_cluster_waits_for_its_node_service_account():
    xr, classes = example("gke")
    req = required(classes, provider_configs("gke"))
    first = compose_cluster(xr, req, Observed())
    assert "cluster" not in first.resources
    assert "node-service-account" in first.resources
    second = compose_cluster(xr, req, reported(first))
    assert "cluster" in second.resources


def test_the_filestore_api_is_enabled_and_never_disabled_and_the_cache_waits_for_it():
    xr, classes, converged = converge()
    api = converged.resources["filestore-api"].body["spec"]["forProvider"]
    assert api == {
        "project": "modelplane-demo",
        "service": "file.googleapis.com",
        "disableOnDestroy": False,
        "disableDependentServices": False,
    }
    storage = converged.resources["storage-class-rwx"].body["spec"]["forProvider"]["manifest"]
    assert storage["parameters"]["tier"] == "zonal"
    without = copy.deepcopy(converged)
    del without.resources["storage-class-rwx"]
    req = required(classes, provider_configs("gke"))
    again = compose_cluster(xr, req, reported(without, drop_status=("filestore-api",)))
    assert "storage-class-rwx" not in again.resources
    assert "Filestore API" in next(c for c in again.conditions if c.type == "ClusterReady").message


def test_gpu_pools_follow_gkes_dra_guide():
    _, _, out = converge()
    for key in ("nodepool-gpu-l4", "nodepool-gpu-h100"):
        config = out.resources[key].body["spec"]["forProvider"]["nodeConfig"]
        (accelerator,) = config["guestAccelerator"]
        assert accelerator["gpuDriverInstallationConfig"] == {
            "gpuDriverVersion": "INSTALLATION_DISABLED"
        }
        assert config["labels"]["gke-no-default-nvidia-gpu-device-plugin"] == "true"
        assert "cloud.google.com/gke-nvidia-gpu-dra-driver" not in config["labels"]
        assert config["gvnic"] == {"enabled": True}
    system = out.resources["system-nodepool"].body["spec"]["forProvider"]["nodeConfig"]
    assert "guestAccelerator" not in system and "gvnic" not in system


SHARED_INSTALLER = "manifests/gke-nvidia-driver-installer-cos/daemonset-preloaded.yaml"


def _what_matters(daemonset: dict) -> dict:
    """What decides where the installer runs and what it does to the host."""
    pod = daemonset["spec"]["template"]["spec"]
    containers = pod["initContainers"] + pod["containers"]
    return {
        "images": [(c["name"], c["image"], c.get("imagePullPolicy")) for c in containers],
        "host paths": {v["name"]: v["hostPath"]["path"] for v in pod["volumes"]},
        "mounts": [
            sorted((m["name"], m["mountPath"]) for m in c.get("volumeMounts", []))
            for c in containers
        ],
        "env": [c.get("env") for c in containers],
        "privileged": [c.get("securityContext") for c in containers],
        "affinity": pod["affinity"],
        "tolerations": pod["tolerations"],
        "priority": pod["priorityClassName"],
        "host": (pod["hostNetwork"], pod["hostPID"]),
        "name": (daemonset["metadata"]["name"], daemonset["metadata"]["namespace"]),
    }


def test_the_cos_driver_installer_is_the_documented_daemonset_tolerating_the_gpu_taint():
    """The function builds the installer itself; Google's manifest (../shared, the only copy)
    decides image, host paths, node affinity, tolerations and priority class."""
    reference = yaml.safe_load((charts_dir() / SHARED_INSTALLER).read_text())
    assert _what_matters(gke_driver.daemonset()) == _what_matters(reference)
    assert gke.NVIDIA_DRIVER_ROOT in _what_matters(reference)["host paths"].values()
    _, _, out = converge()
    installer = out.resources["nvidia-driver-installer"].body["spec"]
    manifest = installer["forProvider"]["manifest"]
    assert (manifest["kind"], manifest["metadata"]["namespace"]) == ("DaemonSet", "kube-system")
    tolerations = manifest["spec"]["template"]["spec"]["tolerations"]
    assert {"operator": "Exists"} in tolerations
    assert installer["readiness"] == {"policy": "DeriveFromCelQuery", "celQuery": gke.INSTALLED}
    # Installed with the cluster and gone with it.
    assert installer["managementPolicies"] == ["Observe", "Create", "Update"]


def test_the_cluster_is_not_ready_until_the_driver_is_installed():
    xr, classes, converged = converge()
    req = required(classes, provider_configs("gke"))
    again = compose_cluster(xr, req, reported(converged, drop_status=("nvidia-driver-installer",)))
    ready = next(c for c in again.conditions if c.type == "ClusterReady")
    assert not ready.status and "nvidia-driver-installer" in ready.message


def test_provider_configs_wait_for_the_cluster_to_be_ready():
    xr, classes = example("gke")
    req = required(classes, provider_configs("gke"))
    first = compose_cluster(xr, req, Observed())
    second = compose_cluster(xr, req, reported(first, drop_status=("cluster",)))
    assert "provider-config-kubernetes" not in second.resources
    third = compose_cluster(xr, req, reported(second))
    assert "provider-config-kubernetes" in third.resources


def test_node_pools_are_sized_as_gke_counts_nodes():
    _, _, out = converge()
    l4 = out.resources["nodepool-gpu-l4"].body["spec"]
    # Autoscaling limits are totals; the first nodes are per zone, within the maximum.
    assert l4["forProvider"]["autoscaling"] == {
        "totalMinNodeCount": 1,
        "totalMaxNodeCount": 4,
        "locationPolicy": "ANY",
    }
    assert l4["forProvider"]["nodeLocations"] == ["us-central1-a", "us-central1-c"]
    assert l4["initProvider"]["initialNodeCount"] == 1
    # A fixed pool is a node count per zone, exactly the spec's.
    h100 = out.resources["nodepool-gpu-h100"].body["spec"]
    assert h100["forProvider"]["nodeLocations"] == ["us-central1-a"]
    assert h100["forProvider"]["nodeCount"] == 1
    assert "autoscaling" not in h100["forProvider"]
    assert "initialNodeCount" not in h100["initProvider"]
    config = l4["forProvider"]["nodeConfig"]
    assert config["labels"]["modelplane.ai/pool"] == "gpu-l4"
    # Exactly GKE's own GPU taint, so the node never carries two.
    assert config["taint"] == [
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NO_SCHEDULE"}
    ]
    status = {p["name"]: p["nodes"] for p in out.status["gpuPools"]}
    assert status == {"gpu-l4": 4, "gpu-h100": 1}


@pytest.mark.parametrize(
    ("zones", "count", "locations", "per_zone"),
    [
        (["a", "b"], 1, ["a"], 1),
        (["a", "b"], 2, ["a", "b"], 1),
        (["a", "b", "c"], 4, ["a", "b"], 2),
        (["a", "b", "c"], 6, ["a", "b", "c"], 2),
        (["a", "b"], 3, ["a"], 3),
        (["a", "b"], 0, ["a", "b"], 0),
    ],
)
def test_a_fixed_pool_has_exactly_its_nodes(zones, count, locations, per_zone):
    xr, classes = example("gke")
    pool = xr["spec"]["nodePools"][1]
    pool["zones"] = [f"us-central1-{z}" for z in zones]
    pool["nodeCount"] = count
    out = sim.converge(xr, required(classes, provider_configs("gke")))
    spec = out.resources["nodepool-gpu-h100"].body["spec"]["forProvider"]
    assert spec["nodeLocations"] == [f"us-central1-{z}" for z in locations]
    assert spec["nodeCount"] * len(spec["nodeLocations"]) == count
    assert spec["nodeCount"] == per_zone
    narrowed = [r.message for r in out.results if r.reason == "PoolZonesNarrowed"]
    assert bool(narrowed) == (len(locations) < len(zones))


@pytest.mark.parametrize(
    ("size", "zones", "per_zone"),
    [
        (Scaling(1, 4, 1, True), 2, 1),
        (Scaling(0, 1, 1, True), 2, 0),
        (Scaling(2, 5, 3, True), 2, 2),
        (Scaling(0, 2, 0, True), 3, 0),
        (Scaling(1, 3, 1, True), 3, 1),
    ],
)
def test_the_first_nodes_never_exceed_the_maximum(size, zones, per_zone):
    assert gke.initial_per_zone(size, zones) == per_zone
    assert per_zone * zones <= size.maximum


def raised(version: str):
    """The converged gke example with spec.cluster.gke.kubernetesVersion raised."""
    xr, classes = example("gke")
    xr["spec"]["cluster"]["gke"]["kubernetesVersion"] = version
    return xr, required(classes, provider_configs("gke"))


def changes(before, after) -> dict[str, dict]:
    """key -> the forProvider of each resource whose body changed."""
    assert set(before.resources) == set(after.resources)
    return {
        k: after.resources[k].body["spec"]["forProvider"]
        for k in before.resources
        if before.resources[k].body != after.resources[k].body
    }


POOLS = ("system-nodepool", "nodepool-gpu-h100", "nodepool-gpu-l4")


def gke_runs(out, runs: dict[str, str]):
    """What the providers report for out, each pool running the version runs gives it."""
    seen = reported(out)
    for key, version in runs.items():
        seen.resources[key].body["status"]["atProvider"]["version"] = version
    return seen


def upgrade(xr, req, converged, running: str) -> list:
    """Reconcile until stable, each pool running the version it last asked for (the pools of
    converged run `running`): the converged output and each pass."""
    runs = dict.fromkeys(POOLS, running)
    passes = [converged]
    for _ in range(sim.MAX_PASSES):
        for key in POOLS:
            runs[key] = (
                passes[-1].resources[key].body["spec"]["forProvider"].get("version", runs[key])
            )
        again = compose_cluster(xr, req, gke_runs(passes[-1], runs))
        if again.resources == passes[-1].resources and len(passes) > 1:
            return passes
        passes.append(again)
    raise AssertionError("no convergence")


def asking(out) -> dict[str, str]:
    """The pools that ask for a version, and which."""
    return {
        k: v
        for k in POOLS
        if (v := out.resources[k].body["spec"]["forProvider"].get("version")) is not None
    }


def test_raising_the_version_moves_the_control_plane_then_the_pools_one_at_a_time():
    """The control plane first; once it reports the minor, the system pool and then each GPU
    pool asks for its exact version, one at a time, each once the one before runs it; then
    none asks for any version again, and GKE's auto-upgrade carries them."""
    _, _, converged = converge()
    assert asking(converged) == {}
    xr, req = raised("1.36")
    passes = upgrade(xr, req, converged, "1.35.4-gke.1")
    first = changes(converged, passes[1])
    assert set(first) == {"cluster"}
    assert passes[1].resources["cluster"].body["spec"]["forProvider"]["minMasterVersion"] == (
        "1.36"
    )
    moving = [asking(p) for p in passes[2:]]
    assert moving == [
        {"system-nodepool": "1.36.4-gke.1"},
        {"nodepool-gpu-h100": "1.36.4-gke.1"},
        {"nodepool-gpu-l4": "1.36.4-gke.1"},
        {},
    ]
    for key in POOLS:
        spec = passes[-1].resources[key].body["spec"]["forProvider"]
        assert spec["management"] == {"autoRepair": True, "autoUpgrade": True}
    said = [r.message for r in passes[2].results if r.reason == "NodePoolsFollowing"]
    assert said and "system-nodepool now; then nodepool-gpu-h100, nodepool-gpu-l4" in said[0]


def test_pools_follow_gkes_auto_upgrade_and_ask_for_no_version_at_rest():
    """Auto-upgrade on, no version: the NodePool CRD calls setting both "highly discouraged"."""
    _, _, out = converge()
    for key in POOLS:
        spec = out.resources[key].body["spec"]["forProvider"]
        assert spec["management"] == {"autoRepair": True, "autoUpgrade": True}
        assert "version" not in spec


def test_a_patch_gke_applies_in_its_window_changes_nothing():
    """GKE patched the control plane and the pools: no pool is moved by the function, and no
    field the function composes changes (no update outside the window)."""
    _, _, converged = converge()
    xr, classes = example("gke")
    req = required(classes, provider_configs("gke"))
    seen = gke_runs(converged, dict.fromkeys(POOLS, "1.35.9-gke.3"))
    seen.resources["cluster"].body["status"]["atProvider"]["masterVersion"] = "1.35.9-gke.3"
    again = compose_cluster(xr, req, seen)
    assert changes(converged, again) == {}
    # Half way through GKE's own rollout of the patch: still nothing.
    seen = gke_runs(converged, {"system-nodepool": "1.35.9-gke.3"})
    seen.resources["cluster"].body["status"]["atProvider"]["masterVersion"] = "1.35.9-gke.3"
    assert changes(converged, compose_cluster(xr, req, seen)) == {}


def test_a_live_pool_pinned_to_the_control_planes_build_lets_go_of_it_and_nothing_else_moves():
    """A pool the previous release pinned to the control plane's exact build: the version is
    dropped (Optional and Computed: no update), auto-upgrade is on (GKE's own default under a
    release channel: no change on GKE's side)."""
    _, _, converged = converge()
    xr, classes = example("gke")
    req = required(classes, provider_configs("gke"))
    seen = gke_runs(converged, dict.fromkeys(POOLS, "1.35.4-gke.1"))
    for key in POOLS:
        spec = seen.resources[key].body["spec"]["forProvider"]
        spec["version"] = "1.35.4-gke.1"
        spec["management"] = {"autoRepair": True}
    again = compose_cluster(xr, req, seen)
    assert changes(converged, again) == {}
    assert asking(again) == {}


def test_after_gke_moved_the_control_plane_its_auto_upgrade_moves_the_pools_and_the_xr_says_so():
    """GKE upgraded the control plane past the spec (at the end of the minor's support): the
    control plane keeps asking for the spec's (a minimum, no downgrade asked), the XR says GKE
    moved it, and no pool is given a version: GKE's auto-upgrade moves them inside the
    maintenance window, where a version set by the function would be a manual upgrade outside
    it (GKE "About Standard cluster upgrades")."""
    _, _, converged = converge()
    xr, classes = example("gke")
    req = required(classes, provider_configs("gke"))
    seen = gke_runs(converged, dict.fromkeys(POOLS, "1.35.4-gke.1"))
    seen.resources["cluster"].body["status"]["atProvider"]["masterVersion"] = "1.36.2-gke.7"
    again = compose_cluster(xr, req, seen)
    said = [r.message for r in again.results if r.reason == "VersionDowngrade"]
    assert said and "GKE moved the cluster past it" in said[0]
    assert asking(again) == {}
    assert not [r for r in again.results if r.reason == "NodePoolsFollowing"]
    assert again.resources["cluster"].body == converged.resources["cluster"].body
    for pool in POOLS:
        assert again.resources[pool].body["spec"]["forProvider"]["management"]["autoUpgrade"]


def test_the_control_plane_moves_one_minor_version_at_a_time():
    """Each minor step waits for every pool to run the minor before the next."""
    _, _, converged = converge()
    xr, req = raised("1.37")
    passes = upgrade(xr, req, converged, "1.35.4-gke.1")
    assert any(r.reason == "UpgradingStepwise" for r in passes[1].results)
    masters = [
        p.resources["cluster"].body["spec"]["forProvider"]["minMasterVersion"] for p in passes
    ]
    pools = [asking(p) for p in passes]
    # 1.36 until the last pool has asked for it and runs it, then 1.37.
    first_137 = masters.index("1.37")
    assert masters[1:first_137] == ["1.36"] * (first_137 - 1)
    assert pools[first_137 - 1] == {"nodepool-gpu-l4": "1.36.4-gke.1"}
    assert [p for p in pools[first_137 + 1 :] if p] == [
        {"system-nodepool": "1.37.4-gke.1"},
        {"nodepool-gpu-h100": "1.37.4-gke.1"},
        {"nodepool-gpu-l4": "1.37.4-gke.1"},
    ]
    assert masters[-1] == "1.37" and pools[-1] == {}


def test_the_step_holds_while_the_control_plane_version_is_not_observed():
    _, _, converged = converge()
    xr, req = raised("1.38")
    first = compose_cluster(xr, req, reported(converged))
    blind = compose_cluster(xr, req, reported(first, drop_status=("cluster",)))
    assert blind.resources["cluster"].body["spec"]["forProvider"]["minMasterVersion"] == "1.36"


@pytest.mark.parametrize("version", ["latest", "1.36.2-gke.1000"])
def test_a_version_gke_names_otherwise_goes_to_the_control_plane_as_given(version):
    _, _, converged = converge()
    xr, req = raised(version)
    out = compose_cluster(xr, req, reported(converged))
    assert out.resources["cluster"].body["spec"]["forProvider"]["minMasterVersion"] == version
    assert not [r for r in out.results if r.reason in ("UpgradingStepwise", "VersionDowngrade")]


def test_a_lower_version_is_warned_and_changes_no_pool():
    _, _, converged = converge()
    xr, req = raised("1.34")
    out = compose_cluster(xr, req, reported(converged))
    assert any(r.reason == "VersionDowngrade" for r in out.results)
    for key in ("system-nodepool", "nodepool-gpu-l4"):
        assert out.resources[key].body == converged.resources[key].body


def test_pools_keep_their_version_while_the_control_plane_is_not_observed():
    xr, classes, converged = converge()
    req = required(classes, provider_configs("gke"))
    again = compose_cluster(xr, req, reported(converged, drop_status=("cluster",)))
    for key in ("system-nodepool", "nodepool-gpu-l4", "nodepool-gpu-h100"):
        assert again.resources[key].body == converged.resources[key].body


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            {
                "machineType": "g2-standard-8",
                "accelerator": {"type": "nvidia-h100-80gb", "count": 1},
            },
            "nvidia-h100-80gb does not exist on machine type g2-standard-8",
        ),
        (
            {"machineType": "g2-standard-24", "accelerator": {"type": "nvidia-l4", "count": 1}},
            "g2-standard-24 carries 2 nvidia-l4, but the class asks for 1",
        ),
        (
            {
                "machineType": "e2-standard-8",
                "accelerator": {"type": "nvidia-tesla-t4", "count": 1},
            },
            "nvidia-tesla-t4 attaches to n1-* machine types",
        ),
        ({"accelerator": {"type": "nvidia-x1000", "count": 1}}, "not in the shape table"),
    ],
    ids=["h100-on-g2", "count", "t4-on-e2", "unknown"],
)
def test_shape_warnings(change, expected):
    xr, classes = example("gke")
    classes = copy.deepcopy(classes)
    classes[0]["spec"]["provisioning"]["gke"].update(change)
    out = compose_cluster(xr, required(classes, provider_configs("gke")), Observed())
    warnings = [r.message for r in out.results if r.reason == "ShapeMismatch"]
    assert any(expected in w and "pool 'gpu-l4'" in w for w in warnings), warnings


def test_a_pool_without_zones_is_warned_and_held_at_its_size_in_totals():
    xr, classes = example("gke")
    xr["spec"]["nodePools"][1].pop("zones")
    out = sim.converge(xr, required(classes, provider_configs("gke")))
    assert any(r.reason == "PoolWithoutZones" for r in out.results)
    spec = out.resources["nodepool-gpu-h100"].body["spec"]
    assert "nodeLocations" not in spec["forProvider"]
    assert spec["forProvider"]["autoscaling"]["totalMaxNodeCount"] == 1
    assert spec["initProvider"]["initialNodeCount"] == 1


def test_the_dra_driver_is_told_where_gke_puts_the_nvidia_driver():
    xr, classes = example("gke")
    model = InferenceCluster.model_validate(xr)
    req = required(classes, provider_configs("gke"))
    facts = clusters.RENDERERS["GKE"](Inputs(model, resolve_classes(model, req), Observed(), req))
    assert facts.nvidia_driver_root == "/home/kubernetes/bin/nvidia"
    # What the stack's DRA driver is to wait for: the installer, one of the composed resources.
    assert facts.nvidia_driver_installers == ("nvidia-driver-installer",)
    _, _, out = converge()
    assert set(facts.nvidia_driver_installers) <= set(out.resources)


def test_cloud_nat_gives_busy_nodes_ports_as_the_api_accepts_them():
    """Dynamic port allocation, from more than the 64 static ports a VM gets by default; the
    Compute API's rules (the RouterNAT CRD's field descriptions, provider-upjet-gcp v3.0.0):
    powers of two, the minimum at least 32, the maximum above it, endpoint-independent mapping
    off beside it."""
    _, _, out = converge("gke")
    nat = out.resources["router-nat"].body["spec"]["forProvider"]
    low, high = nat["minPortsPerVm"], nat["maxPortsPerVm"]
    assert nat["enableDynamicPortAllocation"] is True
    assert nat["enableEndpointIndependentMapping"] is False
    assert 64 < low < high <= 65536
    assert low & (low - 1) == 0 and high & (high - 1) == 0
    # A connection it drops (OUT_OF_RESOURCES) is logged, and only those.
    assert nat["logConfig"] == {"enable": True, "filter": "ERRORS_ONLY"}


# --- the control plane's path to the stack's webhooks ---------------------------------------------

GCP_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")


def test_the_control_plane_reaches_the_webhook_ports_on_the_clusters_own_network():
    """One ingress rule from the cluster's control plane range to exactly WEBHOOK_PORTS over TCP,
    on every node of the cluster's own network (no target: GKE's node tags are not known ahead),
    at GKE's own rules' priority, not logged (tests/test_webhook_ports.py holds the ports to what
    the rendered charts need)."""
    _, _, out = converge()
    body = out.resources["webhook-firewall"].body
    assert (body["apiVersion"], body["kind"]) == ("compute.gcp.m.upbound.io/v1beta1", "Firewall")
    assert GCP_NAME.match(body["metadata"]["name"]), body["metadata"]["name"]
    spec = body["spec"]["forProvider"]
    cluster = out.resources["cluster"].body["spec"]["forProvider"]
    network = out.resources["network"].body["metadata"]["name"]
    assert spec["networkRef"] == cluster["networkRef"] == {"name": network}
    assert spec["direction"] == "INGRESS"
    assert spec["sourceRanges"] == [cluster["privateClusterConfig"]["masterIpv4CidrBlock"]]
    assert spec["allow"] == [{"protocol": "tcp", "ports": ["6443", "9443"]}]
    assert [int(p) for p in spec["allow"][0]["ports"]] == sorted(gke.WEBHOOK_PORTS)
    assert spec["priority"] == 1000
    for wider in ("targetTags", "targetServiceAccounts", "sourceTags", "deny", "logConfig"):
        assert wider not in spec, wider
    # Every port names where it comes from; 443 and 10250 are GKE's own rule's.
    assert all(gke.WEBHOOK_PORTS.values())
    assert not {443, 10250} & set(gke.WEBHOOK_PORTS)


def test_the_firewall_waits_for_nothing_and_a_live_cluster_gains_it_alone():
    """Composed from the first reconcile (it needs only the network's name), and a cluster
    composed before it existed gains it with nothing else changed."""
    xr, classes = example("gke")
    first = compose_cluster(xr, required(classes, None), Observed())
    assert "webhook-firewall" in first.resources
    xr, classes, converged = converge()
    seen = reported(converged)
    del seen.resources["webhook-firewall"]
    again = compose_cluster(xr, required(classes, provider_configs("gke")), seen)
    assert again.resources["webhook-firewall"].body == converged.resources["webhook-firewall"].body
    for key, desired in converged.resources.items():
        if key != "webhook-firewall":
            assert again.resources[key].body == desired.body, key


def test_no_usage_orders_the_firewall():
    """GCP refuses to delete a network that still has firewall rules and the provider retries
    until the rule is gone, which deletes by itself (crossplane-runtime resolves no reference for
    a deletion): the cloud's own order, so no Usage (GKE's own rules hold the network the same
    way until the cluster is gone)."""
    _, _, out = converge()
    assert not [k for k in out.resources if k.startswith("usage-") and "firewall" in k]


def test_network_policy_is_enforced_by_dataplane_v2_and_no_calico_addon():
    """GKE Dataplane V2 enforces every NetworkPolicy itself: the Calico add-on and the legacy
    networkPolicy block stay unset (GKE "Use GKE Dataplane V2": network policy enforcement is
    built in and cannot be enabled beside it)."""
    _, _, out = converge()
    spec = out.resources["cluster"].body["spec"]["forProvider"]
    assert spec["datapathProvider"] == "ADVANCED_DATAPATH"
    assert "networkPolicy" not in spec
    assert "networkPolicyConfig" not in spec["addonsConfig"]


@pytest.mark.parametrize("live", [None, "LEGACY_DATAPATH"])
def test_a_live_cluster_keeps_its_dataplane_and_the_xr_says_once_that_no_policy_is_enforced(live):
    """A cluster an earlier release created (no datapathProvider, or the legacy one its provider
    read back) is never replaced for Dataplane V2 (datapath_provider ForceNew): it keeps what it
    has, every other resource is untouched, and one Warning a reconcile says why NetworkPolicy
    is not enforced there and how to get it."""
    xr, classes, out = converge()

    def before(key: str, body: dict) -> None:
        if key == "cluster":
            spec = body["spec"]["forProvider"]
            del spec["datapathProvider"]
            if live:
                spec["datapathProvider"] = live

    again = compose_cluster(
        xr, required(classes, provider_configs("gke")), sim.observed_from(out, before)
    )
    spec = again.resources["cluster"].body["spec"]["forProvider"]
    assert spec.get("datapathProvider") == live
    (said,) = [r for r in again.results if r.reason == "KeptLiveField"]
    assert said.severity == "Warning"
    shown = f'"{live}"' if live else "unset"
    assert f"forProvider.datapathProvider stays {shown}" in said.message
    assert '"ADVANCED_DATAPATH"' in said.message
    assert "no NetworkPolicy is enforced" in said.message
    assert said.message.endswith(
        "NetworkPolicy is enforced only on a cluster created with Dataplane V2: create another "
        "InferenceCluster and move the workloads"
    )
    others = {k: d.body for k, d in again.resources.items() if k != "cluster"}
    assert others == {k: d.body for k, d in out.resources.items() if k != "cluster"}
    # Only the dataplane differs from what a new cluster gets.
    made = out.resources["cluster"].body["spec"]["forProvider"]
    assert {k: v for k, v in spec.items() if k != "datapathProvider"} == {
        k: v for k, v in made.items() if k != "datapathProvider"
    }
