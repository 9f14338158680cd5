"""The gRPC entry point: decode the request, dispatch on the composite's kind, encode the answer.

All composition logic lives in compose.py and the renderers; this module only touches protobuf.
"""

import grpc
from crossplane.function import logging, resource, response
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from function import names
from function.compose import compose_class, compose_cluster
from function.inputs import Observed, ObservedResource
from function.output import BadInput, Output

SEVERITY = {
    "Normal": fnv1.SEVERITY_NORMAL,
    "Warning": fnv1.SEVERITY_WARNING,
    "Fatal": fnv1.SEVERITY_FATAL,
}
READY = {True: fnv1.READY_TRUE, False: fnv1.READY_FALSE}


class FunctionRunner(grpcv1.FunctionRunnerServiceServicer):
    """Composes InferenceClusters and checks InferenceClasses."""

    def __init__(self) -> None:
        self.log = logging.get_logger()

    async def RunFunction(
        self, req: fnv1.RunFunctionRequest, _: grpc.aio.ServicerContext | None = None
    ) -> fnv1.RunFunctionResponse:
        rsp = response.to(req)
        composite = resource.struct_to_dict(req.observed.composite.resource)
        kind = composite.get("kind")
        name = composite.get("metadata", {}).get("name")
        log = self.log.bind(kind=kind, name=name)
        try:
            out = run(kind, composite, req)
        except BadInput as e:
            log.info("bad input", error=str(e))
            response.fatal(rsp, str(e))
            return rsp
        except Exception:
            # A bug, not bad input: log the traceback here, keep it out of the XR's events.
            log.exception("cannot compose")
            response.fatal(rsp, f"internal error composing {kind} {name}; see the function's logs")
            return rsp
        encode(out, rsp)
        log.debug("composed", resources=len(out.resources))
        return rsp


def run(kind: str | None, composite: dict, req: fnv1.RunFunctionRequest) -> Output:
    if kind == names.INFERENCE_CLASS:
        return compose_class(composite)
    if kind == names.INFERENCE_CLUSTER:
        return compose_cluster(composite, required_resources(req), observed(req, composite))
    raise BadInput(f"this function composes InferenceCluster and InferenceClass, not kind {kind!r}")


def required_resources(req: fnv1.RunFunctionRequest) -> dict[str, list[dict]]:
    return {
        name: [resource.struct_to_dict(item.resource) for item in resources.items]
        for name, resources in req.required_resources.items()
    }


def observed(req: fnv1.RunFunctionRequest, composite: dict) -> Observed:
    return Observed(
        resources={
            key: ObservedResource(resource.struct_to_dict(r.resource))
            for key, r in req.observed.resources.items()
        },
        status=composite.get("status", {}),
    )


def encode(out: Output, rsp: fnv1.RunFunctionResponse) -> None:
    for key, desired in out.resources.items():
        target = rsp.desired.resources[key]
        resource.update(target, desired.body)
        if desired.ready:
            target.ready = fnv1.READY_TRUE
    if out.status:
        resource.update(rsp.desired.composite, {"status": out.status})
    if out.ready is not None:
        rsp.desired.composite.ready = READY[out.ready]
    response.set_conditions(
        rsp,
        *(
            resource.Condition(
                typ=c.type,
                status="True" if c.status else "False",
                reason=c.reason,
                message=c.message,
            )
            for c in out.conditions
        ),
    )
    for r in out.results:
        rsp.results.add(severity=SEVERITY[r.severity], message=r.message, reason=r.reason or "")
    for key, want in sorted(out.requirements.items()):
        response.require_resources(rsp, key, want.api_version, want.kind, match_name=want.name)
