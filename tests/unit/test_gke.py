"""The GKE renderer: the project from the ProviderConfig, node pools sized in totals, shapes."""

import copy

import pytest

from function import clusters
from function.compose import compose_cluster
from function.inputs import Inputs, Observed, resolve_classes
from function.models import InferenceCluster
from tests.builders import all_classes, example, provider_configs
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


def test_until_the_provider_config_answers_the_cluster_waits_and_nothing_else_does():
    xr, classes = example("gke")
    out = compose_cluster(xr, required(classes, None), Observed())
    assert "cluster" not in out.resources
    assert {"network", "subnetwork", "router", "router-nat"} <= set(out.resources)
    # Node pools reference the cluster: they wait for it to be composed.
    assert "nodepool-gpu-l4" not in out.resources
    message = next(c for c in out.conditions if c.type == "ClusterReady").message
    assert "cluster (the GCP project id)" in message
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
    for key in ("cluster", "provider-config-helm", "provider-config-kubernetes"):
        assert again.resources[key].body == converged.resources[key].body, key


def test_provider_configs_authenticate_with_the_gcp_credentials_secret():
    _, _, out = converge()
    for key in ("provider-config-helm", "provider-config-kubernetes"):
        identity = out.resources[key].body["spec"]["identity"]
        assert identity == {
            "type": "GoogleApplicationCredentials",
            "source": "Secret",
            "secretRef": {
                "namespace": "crossplane-system",
                "name": "gcp-credentials",
                "key": "credentials.json",
            },
        }


def test_provider_configs_wait_for_the_cluster_to_be_ready():
    xr, classes = example("gke")
    req = required(classes, provider_configs("gke"))
    first = compose_cluster(xr, req, Observed())
    second = compose_cluster(xr, req, reported(first, drop_status=("cluster",)))
    assert "provider-config-kubernetes" not in second.resources
    third = compose_cluster(xr, req, reported(second))
    assert "provider-config-kubernetes" in third.resources


def test_node_pools_are_sized_in_totals_over_their_zones():
    _, _, out = converge()
    l4 = out.resources["nodepool-gpu-l4"].body["spec"]
    assert l4["forProvider"]["autoscaling"] == {
        "totalMinNodeCount": 1,
        "totalMaxNodeCount": 4,
        "locationPolicy": "ANY",
    }
    assert l4["forProvider"]["nodeLocations"] == ["us-central1-a", "us-central1-c"]
    assert l4["initProvider"] == {"initialNodeCount": 1}
    config = l4["forProvider"]["nodeConfig"]
    assert config["guestAccelerator"] == [
        {
            "type": "nvidia-l4",
            "count": 1,
            "gpuDriverInstallationConfig": {"gpuDriverVersion": "DEFAULT"},
        }
    ]
    assert config["labels"]["modelplane.ai/pool"] == "gpu-l4"
    # Exactly GKE's own GPU taint, so the node never carries two.
    assert config["taint"] == [
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NO_SCHEDULE"}
    ]


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


def test_a_pool_without_zones_is_warned_and_spread_over_three():
    xr, classes = example("gke")
    xr["spec"]["nodePools"][0].pop("zones")
    out = compose_cluster(xr, required(classes, provider_configs("gke")), Observed())
    assert any(r.reason == "PoolWithoutZones" for r in out.results)


def test_the_dra_driver_is_told_where_gke_puts_the_nvidia_driver():
    xr, classes = example("gke")
    model = InferenceCluster.model_validate(xr)
    req = required(classes, provider_configs("gke"))
    facts = clusters.RENDERERS["GKE"](Inputs(model, resolve_classes(model, req), Observed(), req))
    assert facts.nvidia_driver_root == "/home/kubernetes/bin/nvidia"
