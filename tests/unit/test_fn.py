"""The servicer in-process: encoding of readiness, requirements and results, and its error paths."""

from crossplane.function import logging, resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function import caches, fn, wire
from tests.builders import example

logging.configure(logging.Level.DISABLED)


def run(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
    return fn.FunctionRunner().RunFunction(req)


def cluster_request(classes: bool = True) -> fnv1.RunFunctionRequest:
    xr, found = example("existing")
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(xr)
    if classes:
        for c in found:
            req.required_resources["inference-classes"].items.add().resource.update(c)
    return req


def test_a_bug_is_a_fatal_result_without_the_traceback(monkeypatch):
    def explode(*_):
        raise RuntimeError("secret-looking internals")

    monkeypatch.setattr(fn, "compose_cluster", explode)
    caches.forget()  # an earlier test's composition of the same request would be answered
    rsp = run(cluster_request())
    [result] = rsp.results
    assert result.severity == fnv1.SEVERITY_FATAL
    assert result.message == (
        "internal error composing 'InferenceCluster' 'byo-us-east'; see the function's logs"
    )
    assert len(rsp.desired.resources) == 0


def test_dynamic_class_requirements_are_encoded_by_name():
    rsp = run(cluster_request(classes=False))
    selector = rsp.requirements.resources["class-h100-8x-byo"]
    assert (selector.api_version, selector.kind, selector.match_name) == (
        "modelplane.ai/v1alpha1",
        "InferenceClass",
        "h100-8x-byo",
    )
    assert rsp.desired.composite.ready == fnv1.READY_FALSE  # not ready while classes are fetched


def test_readiness_and_warnings_are_encoded():
    req = cluster_request()
    req.required_resources["inference-classes"].Clear()
    req.required_resources["inference-classes"].SetInParent()
    rsp = run(req)
    assert rsp.desired.resources["provider-config-helm"].ready == fnv1.READY_TRUE
    assert rsp.desired.composite.ready == fnv1.READY_FALSE
    [warning] = rsp.results
    assert (warning.severity, warning.reason) == (fnv1.SEVERITY_WARNING, "ClassNotFound")
    conditions = {c.type: (c.status, c.reason) for c in rsp.conditions}
    assert conditions["ClassesResolved"] == (fnv1.STATUS_CONDITION_FALSE, "ClassNotFound")


def test_only_the_classes_pools_name_are_decoded():
    req = cluster_request()
    other = req.required_resources["inference-classes"].items.add()
    other.resource.update({"apiVersion": "modelplane.ai/v1alpha1", "kind": "InferenceClass"})
    other.resource.update({"metadata": {"name": "unrelated"}, "spec": {"devices": "garbage"}})
    composite = resource.struct_to_dict(req.observed.composite.resource)
    decoded = fn.RequiredResources(fn.required(wire.Request(req.SerializeToString())), composite)
    assert [c["metadata"]["name"] for c in decoded["inference-classes"]] == ["h100-8x-byo"]
    assert len(run(req).results) == 0  # the unrelated, broken class is never even parsed


def test_inference_class_is_marked_ready():
    _, classes = example("existing")
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(classes[0])
    rsp = run(req)
    assert rsp.desired.composite.ready == fnv1.READY_TRUE
    assert [(c.type, c.status) for c in rsp.conditions] == [
        ("Accepted", fnv1.STATUS_CONDITION_TRUE)
    ]


def with_capabilities(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionRequest:
    req.meta.capabilities.extend([fnv1.CAPABILITY_CAPABILITIES, fnv1.CAPABILITY_REQUIRED_RESOURCES])
    return req


def answer_schemas(req: fnv1.RunFunctionRequest, installed: bool) -> None:
    for name in (
        "inference-gateway-kind",
        "model-replicas-kind",
        "model-routes-kind",
        "model-caches-kind",
    ):
        schema = req.required_schemas[name]
        if installed:
            schema.openapi_v3.update({"type": "object"})


def test_a_call_missing_what_it_needs_asks_first_and_composes_nothing():
    """In Crossplane's requirements loop only the last answer counts: a call without the
    InferenceGateways it needs answers with requirements alone, the next one composes."""
    req = with_capabilities(cluster_request())
    answer_schemas(req, installed=True)
    first = run(req)
    assert set(first.requirements.resources) == {
        "inference-gateways",
        "model-replicas",
        "model-routes",
        "model-caches",
    }
    assert len(first.desired.resources) == 0 and not first.results
    assert not first.desired.composite.HasField("resource")
    for name in first.requirements.resources:
        req.required_resources[name].SetInParent()
    second = run(req)
    assert second.requirements == first.requirements
    assert sorted(second.desired.resources) == [
        "provider-config-helm",
        "provider-config-kubernetes",
    ]


def test_everything_answered_composes_at_once_and_old_crossplanes_are_never_deferred():
    req = with_capabilities(cluster_request())
    answer_schemas(req, installed=False)
    assert len(run(req).desired.resources) == 2
    # Without the capability, a call always composes (nothing guarantees a second call).
    req = cluster_request()
    answer_schemas(req, installed=True)
    assert len(run(req).desired.resources) == 2


def test_a_settled_cluster_is_looked_at_every_minute_an_unsettled_one_sooner():
    unsettled = run(cluster_request())
    assert unsettled.desired.composite.ready == fnv1.READY_FALSE
    assert unsettled.meta.ttl.seconds == 15
    _, classes = example("existing")
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(classes[0])  # an InferenceClass is ready at once
    assert run(req).meta.ttl.seconds == 60
