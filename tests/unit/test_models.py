"""The pydantic models: XRD defaults, strict types, and errors that name the field and the value."""

import pytest

from function.inputs import parse_class, parse_cluster
from function.models import InferenceClass, InferenceCluster
from function.output import BadInput
from tests.builders import example
from tests.xrds import openapi_schema


def apply_defaults(schema: dict, value):
    """Structural-schema defaulting as the API server does it: defaults fill absent object fields."""
    if isinstance(value, dict) and schema.get("type") == "object":
        props = schema.get("properties", {})
        out = {}
        for key, sub in props.items():
            if key in value:
                out[key] = apply_defaults(sub, value[key])
            elif "default" in sub:
                out[key] = apply_defaults(sub, sub["default"])
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            if key not in props:
                out[key] = apply_defaults(extra, item) if isinstance(extra, dict) else item
        return out
    if isinstance(value, list) and "items" in schema:
        return [apply_defaults(schema["items"], v) for v in value]
    return value


@pytest.mark.parametrize("source", ["existing", "gke", "eks", "aks", "nebius", "vultr"])
def test_model_defaults_match_the_xrd(source):
    """Parsing a raw example and its XRD-defaulted copy gives the same model."""
    xr, classes = example(source)
    defaulted = apply_defaults(openapi_schema("InferenceCluster"), xr)
    assert defaulted != xr  # the walk really filled in defaults (stack, versions, credentials...)
    assert parse_cluster(xr) == parse_cluster(defaulted)
    for c in classes:
        assert parse_class(c) == parse_class(apply_defaults(openapi_schema("InferenceClass"), c))


def test_defaults_of_a_minimal_cluster():
    xr = InferenceCluster.model_validate(
        {
            "metadata": {"name": "n"},
            "spec": {
                "cluster": {"source": "Vultr", "vultr": {"region": "ewr"}},
                "nodePools": [{"name": "p", "className": "c"}],
            },
        }
    )
    assert xr.spec.stack == "Standard"
    assert xr.spec.cluster.vultr.kubernetes_version == "v1.36.1+3"
    assert xr.spec.cluster.vultr.credentials.model_dump() == {
        "name": "default",
        "type": "ClusterProviderConfig",
    }
    assert xr.spec.node_pools[0].node_count == 1
    assert xr.spec.node_pools[0].nodes == 1


def test_struct_floats_are_integers():
    xr, _ = example("existing")
    xr["spec"]["nodePools"][0]["nodeCount"] = 2.0
    assert parse_cluster(xr).spec.node_pools[0].node_count == 2


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda s: s["nodePools"][0].update(nodeCount="two"),
            "spec.nodePools[0].nodeCount: Input should be a valid integer (got 'two')",
        ),
        (
            lambda s: s["nodePools"][0].update(nodeCount=1.5),
            "spec.nodePools[0].nodeCount",
        ),
        (
            lambda s: s["cluster"].update(source="Civo"),
            "spec.cluster.source: Input should be 'GKE', 'EKS', 'AKS', 'Nebius', 'Vultr' or "
            "'Existing' (got 'Civo')",
        ),
        (
            lambda s: s["cluster"].pop("existing"),
            "spec.cluster: existing is required when source is Existing",
        ),
        (
            lambda s: s["cluster"].update(gke={"region": "x"}),
            "spec.cluster: gke not allowed when source is Existing",
        ),
        (
            lambda s: s["nodePools"].append(dict(s["nodePools"][0])),
            "spec.nodePools: names must be unique, repeated: gpu-h100",
        ),
        (
            lambda s: s["nodePools"][0].update(name="GPU pool"),
            "spec.nodePools[0].name: String should match pattern",
        ),
        (
            lambda s: s.update(nodePools="gpu"),
            "spec.nodePools: Input should be a valid list (got 'gpu')",
        ),
        (
            lambda s: s["cluster"]["existing"]["secretRef"].pop("name"),
            "spec.cluster.existing.secretRef.name: Field required",
        ),
    ],
)
def test_bad_cluster_input_names_the_field(mutate, message):
    xr, _ = example("existing")
    mutate(xr["spec"])
    with pytest.raises(BadInput) as err:
        parse_cluster(xr)
    assert message in str(err.value)


@pytest.mark.parametrize(
    "region", ["cn-northwest-1", "us-gov-east-1", "eusc-de-east-1", "us-iso-east-1"]
)
def test_an_eks_region_of_another_partition_is_refused_by_name(region):
    xr, _ = example("eks")
    xr["spec"]["cluster"]["eks"]["region"] = region
    with pytest.raises(BadInput) as err:
        parse_cluster(xr)
    assert "spec.cluster.eks.region: must be a region of the aws partition" in str(err.value)
    assert repr(region) in str(err.value)


@pytest.mark.parametrize("region", ["us-west-2", "eu-central-1", "ap-southeast-5", "il-central-1"])
def test_an_eks_region_of_the_aws_partition_is_taken(region):
    xr, _ = example("eks")
    xr["spec"]["cluster"]["eks"]["region"] = region
    for pool in xr["spec"]["nodePools"]:
        pool.pop("zones", None)
    assert parse_cluster(xr).spec.cluster.eks.region == region


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda s: s["devices"][0].pop("deviceClassName"),
            "spec.devices[0]: deviceClassName is required when claim is DRA",
        ),
        (
            lambda s: s["devices"][0]["attributes"].update(x={"string": "a", "int": 1}),
            "spec.devices[0].attributes.x: set exactly one of string, version, bool or int",
        ),
        (
            lambda s: s["devices"][0].update(count=65),
            "spec.devices[0].count: Input should be less than or equal to 64 (got 65)",
        ),
        (
            lambda s: s.update(provisioning={"provider": "GKE", "eks": {"instanceType": "x"}}),
            "spec.provisioning: gke is required when provider is GKE",
        ),
        (lambda s: s.update(devices=[]), "spec.devices: List should have at least 1 item"),
    ],
)
def test_bad_class_input_names_the_field(mutate, message):
    _, classes = example("existing")
    cls = classes[0]
    mutate(cls["spec"])
    with pytest.raises(BadInput) as err:
        parse_class(cls)
    assert message in str(err.value)


def test_every_example_class_parses():
    for source in ["existing", "gke", "eks", "aks", "nebius", "vultr"]:
        for c in example(source)[1]:
            assert InferenceClass.model_validate(c).spec.devices
