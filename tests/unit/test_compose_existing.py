"""Composing an Existing InferenceCluster, and the rules that keep resources alive."""

import copy

import pytest

from function import clusters
from function.clusters import existing
from function.compose import compose_class, compose_cluster
from function.inputs import Observed, ObservedResource
from function.names import provider_config_name
from function.output import BadInput
from tests.builders import all_classes, example, ready

PC = provider_config_name("byo-us-east")


def observe(resources: dict, status: dict | None = None) -> Observed:
    return Observed(
        resources={k: ObservedResource(v) for k, v in resources.items()}, status=status or {}
    )


def first_pass():
    xr, classes = example("existing")
    return xr, classes, compose_cluster(xr, all_classes(classes), Observed())


def test_first_pass_composes_both_provider_configs_from_the_kubeconfig_secret():
    _, _, out = first_pass()
    assert sorted(out.resources) == ["provider-config-helm", "provider-config-kubernetes"]
    kube = out.resources["provider-config-kubernetes"]
    assert kube.ready
    assert kube.body == {
        "apiVersion": "kubernetes.m.crossplane.io/v1alpha1",
        "kind": "ClusterProviderConfig",
        "metadata": {"name": PC},
        "spec": {
            "credentials": {
                "source": "Secret",
                "secretRef": {
                    "namespace": "modelplane-system",
                    "name": "byo-cluster-kubeconfig",
                    "key": "kubeconfig",
                },
            },
            "identity": {
                "type": "GoogleApplicationCredentials",
                "source": "Secret",
                "secretRef": {
                    "namespace": "modelplane-system",
                    "name": "byo-cluster-gcp-sa",
                    "key": "private_key",
                },
            },
        },
    }
    helm = out.resources["provider-config-helm"].body
    assert helm["apiVersion"] == "helm.m.crossplane.io/v1beta1"
    assert helm["spec"] == kube.body["spec"]
    assert out.results == []
    assert out.ready is False  # nothing is installed on the cluster yet


def test_status_of_an_existing_cluster():
    _, _, out = first_pass()
    assert out.status == {
        "namespace": "modelplane-system",
        "providerConfigRef": {"name": PC},
        "cache": {"storageClassName": "weka-rwx"},
        "gpuPools": [
            {
                "name": "gpu-h100",
                "nodes": 2,
                "devices": [
                    {
                        "name": "gpu",
                        "claim": "DRA",
                        "driver": "gpu.nvidia.com",
                        "deviceClassName": "gpu.nvidia.com",
                        "count": 8,
                        "attributes": {
                            "architecture": {"string": "Hopper"},
                            "cudaComputeCapability": {"version": "9.0.0"},
                        },
                        "capacity": {"memory": {"value": "81559Mi"}},
                    },
                    {
                        "name": "nic",
                        "claim": "Synthetic",
                        "driver": "nic.nvidia.com",
                        "count": 8,
                        "attributes": {"linkType": {"string": "infiniband"}},
                    },
                ],
            }
        ],
    }
    conditions = {c.type: c for c in out.conditions}
    # Not ready before the cluster answered through its kubeconfig (test_cluster_ready_...).
    assert (conditions["ClusterReady"].status, conditions["ClusterReady"].reason) == (
        False,
        "Connecting",
    )
    assert conditions["ClassesResolved"].status is True


def test_autoscaling_pool_reports_its_ceiling():
    xr, classes = example("existing")
    xr["spec"]["nodePools"][0].update(nodeCount=1, minNodeCount=1, maxNodeCount=6)
    out = compose_cluster(xr, all_classes(classes), Observed())
    assert out.status["gpuPools"][0]["nodes"] == 6


def test_minimal_existing_cluster_without_identity_or_cache():
    xr, classes = example("existing")
    existing = xr["spec"]["cluster"]["existing"]
    del existing["identitySecretRef"], existing["cache"]
    del existing["secretRef"]["key"]
    out = compose_cluster(xr, all_classes(classes), Observed())
    spec = out.resources["provider-config-kubernetes"].body["spec"]
    assert "identity" not in spec
    assert spec["credentials"]["secretRef"]["key"] == "kubeconfig"  # the XRD's default
    assert "cache" not in out.status


def test_nebius_identity_is_given_to_both_providers():
    xr, classes = example("existing")
    xr["spec"]["cluster"]["existing"]["identitySecretRef"] = {
        "name": "nebius-sa",
        "key": "credentials.json",
        "type": "NebiusServiceAccountCredentials",
    }
    out = compose_cluster(xr, all_classes(classes), Observed())
    # provider-kubernetes v1.3.1 takes the Nebius identity as provider-helm v1.4.0 does.
    for provider in ("helm", "kubernetes"):
        assert out.resources[f"provider-config-{provider}"].body["spec"]["identity"] == {
            "type": "NebiusServiceAccountCredentials",
            "source": "Secret",
            "secretRef": {
                "namespace": "modelplane-system",
                "name": "nebius-sa",
                "key": "credentials.json",
            },
        }
    assert out.results == []


def test_cert_manager_waits_for_observed_provider_configs_then_is_kept():
    xr, classes, out = first_pass()
    assert "release-cert-manager" not in out.resources
    observed = {k: d.body for k, d in out.resources.items()}
    second = compose_cluster(xr, all_classes(classes), observe(observed))
    # First it looks for a cert-manager already there (function/serving/adoption.py): none.
    assert "release-cert-manager" not in second.resources
    absent = {
        "conditions": [
            {
                "type": "Synced",
                "status": "False",
                "reason": "ReconcileError",
                "message": "cannot observe external resource: external resource does not exist",
            }
        ]
    }
    observed["detect-cert-manager"] = {**second.resources["detect-cert-manager"].body}
    observed["detect-cert-manager"]["status"] = absent
    second = compose_cluster(xr, all_classes(classes), observe(observed))
    release = second.resources["release-cert-manager"]
    assert not release.ready
    assert release.body["spec"]["providerConfigRef"] == {
        "kind": "ClusterProviderConfig",
        "name": PC,
    }
    assert release.body["metadata"]["namespace"] == "modelplane-system"
    assert release.body["spec"]["forProvider"]["chart"]["name"] == "cert-manager"

    # Ready once observed Ready; kept even when the ProviderConfigs vanish from observed state.
    third = compose_cluster(
        xr, all_classes(classes), observe({"release-cert-manager": ready(release.body)})
    )
    assert third.resources["release-cert-manager"].ready


def test_missing_class_is_reported_and_drops_nothing():
    xr, classes = example("existing")
    first = compose_cluster(xr, all_classes(classes), Observed())
    observed = observe({k: ready(d.body) for k, d in first.resources.items()}, status=first.status)
    # The class is deleted for a moment.
    out = compose_cluster(xr, all_classes([]), observed)
    assert set(out.resources) >= set(first.resources)
    assert out.status["gpuPools"] == first.status["gpuPools"]  # kept, not emptied
    assert out.ready is False
    [warning] = out.results
    assert warning.severity == "Warning"
    assert 'InferenceClass "h100-8x-byo"' in warning.message
    condition = next(c for c in out.conditions if c.type == "ClassesResolved")
    assert (condition.status, condition.reason) == (False, "ClassNotFound")
    assert "h100-8x-byo" in condition.message


def test_missing_class_carries_forward_resources_it_cannot_render():
    xr, classes = example("existing")
    stranger = {
        "apiVersion": "helm.m.crossplane.io/v1beta1",
        "kind": "Release",
        "metadata": {
            "name": "byo-us-east-something-12345",
            "namespace": "modelplane-system",
            "annotations": {"crossplane.io/external-name": "mp-something"},
            "uid": "abc",
            "resourceVersion": "7",
        },
        "spec": {"forProvider": {"chart": {"name": "something"}}},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }
    out = compose_cluster(xr, all_classes([]), observe({"release-something": stranger}))
    carried = out.resources["release-something"]
    assert carried.ready
    # Returned as it is, minus what the API server and providers own: status, uid, resourceVersion.
    expected = copy.deepcopy(stranger)
    del expected["status"], expected["metadata"]["uid"], expected["metadata"]["resourceVersion"]
    assert carried.body == expected


def test_a_complete_render_drops_what_the_spec_no_longer_asks_for():
    xr, classes = example("existing")
    stale = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "old"}}
    out = compose_cluster(xr, all_classes(classes), observe({"old-thing": stale}))
    assert "old-thing" not in out.resources


def test_invalid_class_is_reported_like_a_missing_one():
    xr, classes = example("existing")
    broken = copy.deepcopy(classes)
    del broken[0]["spec"]["devices"][0]["deviceClassName"]
    out = compose_cluster(xr, all_classes(broken), Observed())
    [warning] = out.results
    assert "is invalid" in warning.message
    assert "deviceClassName is required when claim is DRA" in warning.message
    assert out.ready is False


def test_classes_are_asked_for_by_name_without_a_bootstrap_requirement():
    xr, classes = example("existing")
    first = compose_cluster(xr, {}, Observed())
    assert {k: (r.kind, r.name) for k, r in first.requirements.items()} == {
        "class-h100-8x-byo": ("InferenceClass", "h100-8x-byo")
    }
    assert first.results == []  # not answered yet: nothing to warn about
    assert next(c for c in first.conditions if c.type == "ClassesResolved").reason == "Fetching"

    second = compose_cluster(xr, {"class-h100-8x-byo": classes}, Observed())
    assert second.requirements == first.requirements  # stable, so Crossplane stops iterating
    assert second.status["gpuPools"][0]["name"] == "gpu-h100"

    gone = compose_cluster(xr, {"class-h100-8x-byo": []}, Observed())
    assert [r.reason for r in gone.results] == ["ClassNotFound"]


def test_bootstrap_requirement_means_no_dynamic_requirements():
    xr, classes, out = first_pass()
    assert out.requirements == {}


@pytest.mark.parametrize("source", ["vultr"])
def test_unbuilt_sources_warn_and_keep_what_exists(source, monkeypatch):
    xr, classes = example(source)
    # Every source is built now: take one renderer away to see the rule still holds.
    monkeypatch.delitem(clusters.RENDERERS, xr["spec"]["cluster"]["source"])
    keep = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kept"}}
    out = compose_cluster(xr, all_classes(classes), observe({"something": keep}))
    assert [r.reason for r in out.results] == ["SourceNotBuilt"]
    assert f"spec.cluster.source {xr['spec']['cluster']['source']} is not built" in (
        out.results[0].message
    )
    assert out.resources["something"].body == keep
    assert out.ready is False
    assert out.status["gpuPools"][0]["name"] == xr["spec"]["nodePools"][0]["name"]


def test_malformed_cluster_is_bad_input():
    xr, classes = example("existing")
    xr["spec"]["cluster"]["source"] = "Mars"
    with pytest.raises(BadInput, match=r"spec\.cluster\.source.*got 'Mars'"):
        compose_cluster(xr, all_classes(classes), Observed())


def test_inference_class_is_accepted_and_ready():
    _, classes = example("existing")
    out = compose_class(classes[0])
    assert out.ready is True
    [condition] = out.conditions
    assert (condition.type, condition.status, condition.reason) == (
        "Accepted",
        True,
        "ValidDevices",
    )
    assert "gpu x8 (DRA gpu.nvidia.com)" in condition.message
    assert out.resources == {}


def test_same_input_same_output():
    xr, classes = example("existing")
    assert compose_cluster(xr, all_classes(classes), Observed()) == compose_cluster(
        copy.deepcopy(xr), all_classes(classes), Observed()
    )


def test_cluster_without_node_pools_needs_no_classes():
    xr, _ = example("existing")
    del xr["spec"]["nodePools"]
    out = compose_cluster(xr, {}, Observed())
    assert out.requirements == {}
    assert "gpuPools" not in out.status
    assert out.ready is False  # the stack is not installed yet
    assert next(c for c in out.conditions if c.type == "ClassesResolved").status is True


def synced_false(body: dict, message: str) -> dict:
    return {
        **body,
        "status": {
            "conditions": [
                {
                    "type": "Synced",
                    "status": "False",
                    "reason": "ReconcileError",
                    "message": message,
                }
            ]
        },
    }


def cluster_ready(out):
    return next(c for c in out.conditions if c.type == "ClusterReady")


def second_pass():
    """The first pass's ProviderConfigs observed: the answer Object is composed."""
    xr, classes, first = first_pass()
    observed = {k: d.body for k, d in first.resources.items()}
    return xr, classes, observed, compose_cluster(xr, all_classes(classes), observe(observed))


def test_cluster_ready_only_once_the_cluster_answered_through_its_kubeconfig():
    _, _, first = first_pass()
    assert existing.ANSWER_KEY not in first.resources  # the ProviderConfigs come first
    assert "Secret modelplane-system/byo-cluster-kubeconfig key kubeconfig" in (
        cluster_ready(first).message
    )
    xr, classes, observed, second = second_pass()
    asked = second.resources[existing.ANSWER_KEY].body
    assert asked["spec"]["managementPolicies"] == ["Observe"]
    assert asked["spec"]["providerConfigRef"] == {"kind": "ClusterProviderConfig", "name": PC}
    assert asked["spec"]["forProvider"]["manifest"] == {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "kube-system"},
    }
    assert cluster_ready(second).status is False  # composed, not answered yet
    observed[existing.ANSWER_KEY] = ready(asked)
    third = compose_cluster(xr, all_classes(classes), observe(observed))
    assert (cluster_ready(third).status, cluster_ready(third).reason) == (True, "Available")
    assert third.resources[existing.ANSWER_KEY].ready


@pytest.mark.parametrize(
    ("said", "hint"),
    [
        (
            "connect failed: cannot create new client: cannot get credentials: cannot get "
            'credentials secret: Secret "byo-cluster-kubeconfig" not found',
            "the Secret or its key is missing",
        ),
        (
            "connect failed: cannot create new client: failed to load kubeconfig: yaml: line 3",
            "the key holds no kubeconfig the provider can load",
        ),
        ("observe failed: cannot get object: Unauthorized", "the API server refuses"),
        (
            "observe failed: cannot get object: dial tcp 10.0.0.1:443: i/o timeout",
            "reachable from the providers' pods",
        ),
    ],
)
def test_a_cluster_that_does_not_answer_says_what_to_fix(said, hint):
    xr, classes, observed, second = second_pass()
    observed[existing.ANSWER_KEY] = synced_false(second.resources[existing.ANSWER_KEY].body, said)
    out = compose_cluster(xr, all_classes(classes), observe(observed))
    condition = cluster_ready(out)
    assert (condition.status, condition.reason) == (False, "Unreachable")
    assert condition.message.startswith(
        "the cluster does not answer through the kubeconfig in Secret "
        "modelplane-system/byo-cluster-kubeconfig key kubeconfig: "
    )
    assert hint in condition.message and said.split(" ")[-1] in condition.message
    # Nothing is held back or dropped: the ProviderConfigs and what the stack composed stay.
    assert set(out.resources) >= set(second.resources)


def test_a_namespace_said_not_to_exist_is_an_answer():
    xr, classes, observed, second = second_pass()
    observed[existing.ANSWER_KEY] = synced_false(
        second.resources[existing.ANSWER_KEY].body,
        "cannot observe external resource: external resource does not exist",
    )
    out = compose_cluster(xr, all_classes(classes), observe(observed))
    assert cluster_ready(out).status is True


def test_a_live_cluster_stays_ready_while_the_answer_is_first_read():
    # A cluster the previous release composed: its releases are Ready, the answer Object is new.
    xr, classes, observed, second = second_pass()
    observed["release-cert-manager"] = ready(
        {"apiVersion": "helm.m.crossplane.io/v1beta1", "kind": "Release", "metadata": {}}
    )
    out = compose_cluster(xr, all_classes(classes), observe(observed))
    assert existing.ANSWER_KEY in out.resources
    assert cluster_ready(out).status is True
    # ...but a refusal, once in, is said whatever ran before.
    observed[existing.ANSWER_KEY] = synced_false(
        out.resources[existing.ANSWER_KEY].body, "observe failed: Unauthorized"
    )
    refused = compose_cluster(xr, all_classes(classes), observe(observed))
    assert cluster_ready(refused).status is False
