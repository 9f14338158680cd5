"""The lean wire reader and writer agree with the generated protobuf classes they stand in for."""

import copy
import math

import pytest
from crossplane.function import logging, resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import struct_pb2
from hypothesis import given, settings
from hypothesis import strategies as st

from function import caches, fn, wire
from tests.tools import goorder
from tests.unit.test_fn import cluster_request

logging.configure(logging.Level.DISABLED)

# What a Struct can hold, as JSON: numbers are doubles on the wire.
scalars = (
    st.none()
    | st.booleans()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=25,
)
objects = st.dictionaries(st.text(max_size=6), json_values, max_size=5)


def encoded(body: dict) -> bytes:
    struct = struct_pb2.Struct()
    struct.update(body)
    return struct.SerializeToString()


def paths(value, prefix=()):
    """Every path into value, as lookup takes it."""
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from paths(v, (*prefix, i))


@settings(max_examples=200)
@given(objects)
def test_a_struct_reads_as_the_sdk_converts_it(body):
    assert wire.python(struct_pb2.Struct.FromString(encoded(body))) == resource.struct_to_dict(
        struct_pb2.Struct.FromString(encoded(body))
    )
    assert wire.LazyStruct(encoded(body)).python() == resource.struct_to_dict(
        struct_pb2.Struct.FromString(encoded(body))
    )


@settings(max_examples=200)
@given(objects)
def test_lookup_reads_what_is_at_every_path_and_none_past_it(body):
    lazy = wire.LazyStruct(encoded(body))
    plain = resource.struct_to_dict(struct_pb2.Struct.FromString(encoded(body)))
    for path in paths(plain):
        expected = plain
        for step in path:
            expected = expected[step]
        assert wire.lookup(lazy, path) == expected
        assert wire.lookup(lazy, (*path, "missing")) is None
        assert wire.lookup(lazy, (*path, 99)) is None


def test_lookup_does_not_confuse_a_list_index_with_a_key():
    lazy = wire.LazyStruct(encoded({"a": [{"b": 1}], "m": {"0": "zero"}}))
    assert wire.lookup(lazy, ("a", 0, "b")) == 1.0
    assert wire.lookup(lazy, ("a", -1, "b")) == 1.0
    assert wire.lookup(lazy, ("a", "0")) is None
    assert wire.lookup(lazy, ("m", 0)) is None
    assert wire.lookup(lazy, ("m", "0")) == "zero"


@given(st.text(max_size=30), objects, st.booleans())
def test_an_entry_is_what_the_generated_classes_encode(key, body, ready):
    state = fnv1.State()
    state.resources[key].resource.SetInParent()  # a desired resource always has a body
    state.resources[key].resource.update(body)
    if ready:
        state.resources[key].ready = fnv1.READY_TRUE
    ours = fnv1.State.FromString(structs().entry(key, body, ready))
    assert ours == state
    assert ours.SerializeToString(deterministic=True) == state.SerializeToString(deterministic=True)


def structs() -> caches.Structs:
    """Encoded entries kept on a budget of their own (not the function's)."""
    return caches.Structs(caches.Store(budget=caches.MIB))


def test_an_entry_changes_with_any_change_of_its_body():
    entries = caches.Structs(caches.Store(budget=4096))
    assert entries.encoded({"a": 1}) is entries.encoded({"a": 1})
    first = entries.entry("k", {"a": 1}, True)
    assert entries.entry("k", {"a": 1.5}, True) != first
    assert entries.entry("k", {"a": 1}, False) != first
    assert entries.entry("k", {"a": True}, True) != first
    assert fnv1.State.FromString(entries.entry("k", {"a": 1}, True)) == fnv1.State.FromString(first)


# Keys that are often prefixes of one another, multi-byte UTF-8 among them: the map order upb writes.
prefix_keys = st.text(alphabet=["a", "b", "é", "\U0001f600", "-", "A"], max_size=4)
plain_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4)
    | st.lists(inner, max_size=3).map(tuple)
    | st.dictionaries(prefix_keys, inner, max_size=5),
    max_leaves=30,
)


def generated_encoding(body: dict) -> bytes:
    message = struct_pb2.Struct()
    message.update(body)
    return message.SerializeToString(deterministic=True)


@settings(max_examples=500)
@given(st.dictionaries(prefix_keys, plain_values, max_size=6))
def test_a_struct_is_written_byte_for_byte_as_the_generated_class_writes_it(body):
    assert wire.struct_message(body) == generated_encoding(body)


class Tagged(str):
    """A str subclass: the generated class decides how it is written."""


def test_what_is_not_plain_data_is_written_by_the_generated_class():
    body = {"a": Tagged("x"), "b": [True, 1]}
    assert wire.struct_message(body) == generated_encoding(body)
    with pytest.raises(ValueError, match="Unexpected type"):
        wire.struct_message({"a": object()})


def test_a_fixed_dict_is_spliced_as_it_was_encoded():
    manifest = wire.fixed({"kind": "CustomResourceDefinition", "spec": {"names": ["a", "ab"]}})
    body = {"spec": {"forProvider": {"manifest": manifest}}, "metadata": {"name": "x"}}
    assert wire.struct_message(body) == generated_encoding(body)
    assert wire.struct_message(manifest) is wire.struct_message(manifest)


def test_a_shared_body_is_encoded_once_then_known_by_identity():
    entries, by_content = structs(), structs()
    body = {"spec": {"forProvider": {"manifest": {"kind": "Namespace"}}}}
    first = entries.entry("k", body, True, shared=True)
    assert first == by_content.entry("k", body, True)
    assert entries.entry("k", body, True, shared=True) is first
    # Under another key or readiness the same body is what that key and readiness encode.
    assert entries.entry("other", body, True, shared=True) == by_content.entry("other", body, True)
    assert entries.entry("k", body, False, shared=True) == by_content.entry("k", body, False)
    # An equal body that is another object is encoded (and kept) on its own.
    twin = {"spec": {"forProvider": {"manifest": {"kind": "Namespace"}}}}
    assert entries.entry("k", twin, True, shared=True) == first


# A composed resource as the API server keeps it, and as Crossplane sends it: a Resource message.
STORED = {
    "apiVersion": "ec2.aws.m.upbound.io/v1beta1",
    "kind": "VPC",
    "metadata": {
        "name": "vpc",
        "uid": "9d0c4f5e-0000-4000-8000-000000000001",
        "resourceVersion": "4182",
        "labels": {"crossplane.io/composite": "c", "modelplane.ai/pool": "gpu"},
        "annotations": {"crossplane.io/external-name": "vpc-0abc"},
    },
    "spec": {"forProvider": {"region": "us-east-2", "cidrBlock": "10.0.0.0/16"}},
    "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Available"}]},
}


def resource_message(body: dict, connection: dict[str, bytes] | None = None) -> bytes:
    message = fnv1.Resource()
    message.resource.update(body)
    for key, value in (connection or {}).items():
        message.connection_details[key] = value
    return message.SerializeToString()


def changed(body: dict, *path_and_value) -> dict:
    out = copy.deepcopy(body)
    *path, last, value = path_and_value
    node = out
    for step in path:
        node = node[step]
    node[last] = value
    return out


def test_a_version_is_the_same_in_any_map_order():
    data = resource_message(STORED, {"kubeconfig": b"k", "endpoint": b"e"})
    orders = [goorder.shuffled(data, seed, "Resource") for seed in range(8)]
    assert len(set(orders)) > 1
    assert {wire.version(d) for d in orders} == {wire.version(data)}
    # The uid and resourceVersion as encoded Values, the size, the connection details' names.
    assert wire.version(data) == b"".join(
        (
            b"\xff",
            wire.field(3, b"9d0c4f5e-0000-4000-8000-000000000001"),
            wire.field(3, b"4182"),
            len(data).to_bytes(4, "little"),
            wire.field(3, b"endpoint"),
            wire.field(3, b"kubeconfig"),
        )
    )


@pytest.mark.parametrize(
    "other",
    [
        pytest.param(changed(STORED, "metadata", "resourceVersion", "4183"), id="resourceVersion"),
        pytest.param(changed(STORED, "metadata", "uid", "another"), id="uid"),
        # A body changed under the same resourceVersion (never from the API server) is told by
        # its size, when that changes.
        pytest.param(changed(STORED, "status", "conditions", 0, "status", "False"), id="size"),
    ],
)
def test_a_version_changes_with_the_object_version_or_the_size(other):
    assert wire.version(resource_message(other)) != wire.version(resource_message(STORED))


def test_a_version_changes_with_the_connection_details_names_not_their_values():
    one = wire.version(resource_message(STORED, {"kubeconfig": b"a"}))
    assert wire.version(resource_message(STORED, {"kubeconfig": b"b"})) == one
    assert wire.version(resource_message(STORED, {"kubeconfih": b"a"})) != one


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(resource_message(changed(STORED, "metadata", "uid", None)), id="no-uid"),
        pytest.param(
            resource_message({**STORED, "metadata": {"name": "vpc", "uid": "u"}}),
            id="no-resourceVersion",
        ),
        pytest.param(resource_message({"spec": {}}), id="no-metadata"),
        pytest.param(resource_message({"metadata": "text"}), id="metadata-not-an-object"),
        pytest.param(resource_message(STORED)[:-9], id="cut-short"),
        pytest.param(b"\x0a\x03\x0a\x01\xff", id="not-utf8"),
    ],
)
def test_without_an_id_and_a_version_or_whole_bytes_there_is_no_version(data):
    assert wire.version(data) is None


def answer(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
    return fnv1.RunFunctionResponse.FromString(fn.FunctionRunner().answer(req.SerializeToString()))


def test_earlier_steps_desired_state_and_the_context_are_handed_on_ours_on_top():
    req = cluster_request()
    ours = answer(req)
    assert "provider-config-helm" in ours.desired.resources

    req.context.update({"apiextensions.crossplane.io/environment": {"region": "eu"}})
    req.desired.composite.resource.update({"metadata": {"labels": {"earlier": "step"}}})
    req.desired.resources["earlier-bucket"].resource.update({"kind": "Bucket"})
    req.desired.resources["provider-config-helm"].resource.update({"kind": "Overridden"})
    rsp = answer(req)
    assert rsp.context == req.context
    assert rsp.desired.resources["earlier-bucket"] == req.desired.resources["earlier-bucket"]
    assert (
        rsp.desired.resources["provider-config-helm"]
        == ours.desired.resources["provider-config-helm"]
    )
    assert rsp.desired.composite.resource["metadata"]["labels"]["earlier"] == "step"
    assert rsp.desired.composite.resource["status"] == ours.desired.composite.resource["status"]
    assert set(rsp.desired.resources) == set(ours.desired.resources) | {"earlier-bucket"}


def fatal_message(rsp: fnv1.RunFunctionResponse) -> str:
    [result] = rsp.results
    assert result.severity == fnv1.SEVERITY_FATAL
    assert len(rsp.desired.resources) == 0
    return result.message


@pytest.mark.parametrize("number", [math.nan, math.inf, -math.inf])
def test_a_number_json_cannot_hold_is_fatal(number):
    req = cluster_request()
    req.observed.composite.resource["spec"]["nodePools"][0]["nodeCount"] = number
    assert fatal_message(answer(req)) == f"the request holds a number JSON cannot: {number}"


@pytest.mark.parametrize(
    ("field", "what"),
    [(5, "context"), (3, "desired state")],
)
def test_undecodable_parts_of_a_request_are_fatal_and_name_the_part(field, what):
    data = cluster_request().SerializeToString() + wire.field(field, b"\xff\xff\xff")
    rsp = fnv1.RunFunctionResponse.FromString(fn.FunctionRunner().answer(data))
    assert fatal_message(rsp).startswith(f"cannot decode the request's {what}: ")


def test_an_undecodable_earlier_desired_resource_is_fatal_and_named():
    state = wire.resource_entry("earlier", wire.field(1, b"\xff\xff"))
    data = cluster_request().SerializeToString() + wire.field(3, state)
    rsp = fnv1.RunFunctionResponse.FromString(fn.FunctionRunner().answer(data))
    assert fatal_message(rsp).startswith("cannot decode the request's desired resource 'earlier': ")
