"""Hostile input the XRD would not let through, and raw bytes: a clear answer, never a crash.

- Drawn clusters broken one field at a time (a default gone, a wrong type, a null, a huge or
  unicode string), unknown sources, another kind, no composite at all: a Fatal result naming the
  field and nothing composed, or a full answer (with a Warning where something is off); never an
  internal error, never part of a desired state.
- Classes with missing or mismatched provisioning: a Warning naming the pool, never a Fatal.
- The fuzz entry point (`fuzz_one`, also usable with atheris: `python -m tests.test_hostile`)
  over raw RunFunctionRequest bytes, random and mutated: never an exception.
"""

import copy
import sys

from crossplane.function import logging, resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from function.fn import FunctionRunner
from tests.strategies import clusters

logging.configure(logging.Level.DISABLED)
RUNNER = FunctionRunner()
INTERNAL = "internal error"
HOSTILE = settings(
    max_examples=300,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def run(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
    return RUNNER.RunFunction(req)


def request(xr: dict | None, classes: list[dict]) -> fnv1.RunFunctionRequest:
    req = fnv1.RunFunctionRequest()
    if xr is not None:
        req.observed.composite.resource.update(xr)
    for c in classes:
        req.required_resources["inference-classes"].items.add().resource.update(c)
    return req


def paths(value, prefix=()) -> list[tuple]:
    """Every path into a JSON value."""
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += paths(v, (*prefix, i))
    return out


def mutate(value, path: tuple, replacement):
    """value with the thing at path replaced (or deleted, for the DELETE marker)."""
    out = copy.deepcopy(value)
    *parents, last = path
    node = out
    for p in parents:
        node = node[p]
    if replacement is DELETE:
        del node[last]
    else:
        node[last] = replacement
    return out


DELETE = object()
REPLACEMENTS = st.one_of(
    st.just(DELETE),
    st.none(),
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.text(max_size=40),
    st.text(alphabet="語😀\u202e\x00é", min_size=1, max_size=30),
    st.just("x" * 20_000),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)


def assert_clear_answer(rsp: fnv1.RunFunctionResponse) -> None:
    fatal = [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    assert not any(INTERNAL in m for m in fatal), fatal
    if fatal:
        # Names what is wrong, and composes nothing: Crossplane then applies and deletes nothing.
        assert any(
            tok in fatal[0] for tok in ("spec", "metadata", "kind", "apiVersion", "InferenceC")
        ), fatal
        assert len(fatal[0]) < 4096
        assert len(rsp.desired.resources) == 0
        assert not rsp.desired.composite.HasField("resource")


@HOSTILE
@given(clusters(), st.data(), REPLACEMENTS)
def test_a_broken_cluster_gets_a_clear_answer(drawn, data, replacement):
    xr, classes = drawn
    path = data.draw(st.sampled_from([p for p in paths(xr) if p]))
    broken = mutate(xr, path, replacement)
    assert_clear_answer(run(request(broken, classes)))


@HOSTILE
@given(clusters(), st.data(), REPLACEMENTS)
def test_a_broken_class_gets_a_clear_answer(drawn, data, replacement):
    xr, classes = drawn
    if not classes:
        return
    i = data.draw(st.integers(0, len(classes) - 1))
    path = data.draw(st.sampled_from([p for p in paths(classes[i]["spec"]) if p]))
    broken = copy.deepcopy(classes)
    broken[i]["spec"] = mutate(classes[i]["spec"], path, replacement)
    rsp = run(request(xr, broken))
    # A class is not the XR: a bad one is a Warning, the cluster is still composed.
    assert not [r for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]


@HOSTILE
@given(clusters(source="EKS"), st.sampled_from(["GKE", "AKS", None]))
def test_a_class_for_another_cloud_is_a_warning_naming_the_pool(drawn, provider):
    xr, classes = drawn
    if not classes:
        return
    wrong = copy.deepcopy(classes)
    if provider is None:
        wrong[0]["spec"].pop("provisioning", None)
    else:
        wrong[0]["spec"]["provisioning"] = {
            "provider": provider,
            provider.lower(): {
                "machineType": "g2-standard-8",
                "accelerator": {"type": "nvidia-l4"},
            }
            if provider == "GKE"
            else {"vmSize": "Standard_NC24ads_A100_v4"},
        }
    rsp = run(request(xr, wrong))
    assert not [r for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    warnings = [r.message for r in rsp.results if r.reason == "InvalidNodePool"]
    assert warnings and all("spec.nodePools[" in w for w in warnings)
    assert rsp.desired.resources


def test_unknown_source_another_kind_and_no_composite_are_fatal_and_named():
    xr = {
        "apiVersion": "modelplane.ai/v1alpha1",
        "kind": "InferenceCluster",
        "metadata": {"name": "x"},
        "spec": {"cluster": {"source": "Mars", "mars": {}}},
    }
    rsp = run(request(xr, []))
    assert "spec.cluster.source" in rsp.results[0].message and "Mars" in rsp.results[0].message
    other = {"apiVersion": "example.org/v1", "kind": "Bucket", "metadata": {"name": "b"}}
    assert "Bucket" in run(request(other, [])).results[0].message
    for rsp in (run(request(None, [])), run(fnv1.RunFunctionRequest())):
        [result] = rsp.results
        assert result.severity == fnv1.SEVERITY_FATAL
        assert "kind" in result.message and INTERNAL not in result.message
        assert len(rsp.desired.resources) == 0


# --- fuzzing ----------------------------------------------------------------------------------------


def fuzz_one(data: bytes) -> None:
    """One fuzz input: raw request bytes, handed to the function as its server does. Any bytes
    get an answer that decodes, never an exception or an internal error. (The function reads
    only what it needs: bytes malformed where it never looks go unnoticed, as they may.)"""
    rsp = fnv1.RunFunctionResponse.FromString(RUNNER.answer(data))
    assert not any(INTERNAL in r.message for r in rsp.results), [r.message for r in rsp.results]


def _valid_request_bytes() -> list[bytes]:
    from tests.builders import example  # noqa: PLC0415 - built once, for the fuzz seeds

    out = []
    for source in ("existing", "eks", "gke", "nebius"):
        xr, classes = example(source)
        out.append(request(xr, classes).SerializeToString())
    return out


SEEDS = _valid_request_bytes()


@settings(max_examples=400, deadline=None, database=None)
@given(st.binary(max_size=4096))
def test_fuzz_random_bytes(data):
    fuzz_one(data)


@settings(max_examples=400, deadline=None, database=None)
@given(st.sampled_from(SEEDS), st.lists(st.tuples(st.integers(0), st.integers(0, 255)), max_size=8))
def test_fuzz_mutated_requests(seed, flips):
    data = bytearray(seed)
    for position, value in flips:
        data[position % len(data)] = value
    fuzz_one(bytes(data))


def test_a_request_of_structs_with_every_value_kind_is_answered():
    req = request(None, [])
    req.observed.composite.resource.update(
        {
            "apiVersion": "modelplane.ai/v1alpha1",
            "kind": "InferenceCluster",
            "metadata": {"name": "n"},
            "spec": {"cluster": {"source": "Existing", "existing": {"secretRef": {"name": None}}}},
        }
    )
    rsp = run(req)
    assert "spec.cluster.existing.secretRef.name" in rsp.results[0].message
    assert resource.struct_to_dict(req.observed.composite.resource)["kind"] == "InferenceCluster"


if __name__ == "__main__":  # atheris, when installed: python -m tests.test_hostile [corpus]
    import atheris

    atheris.Setup(sys.argv, fuzz_one)
    atheris.Fuzz()
