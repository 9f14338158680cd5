"""The gRPC entry point: decode the request, dispatch on the composite's kind, encode the answer.

All composition logic lives in compose.py and the renderers; this module only touches protobuf.
"""

from collections.abc import Iterator, Mapping

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
        return compose_cluster(
            composite,
            required_resources(req, composite),
            observed(req, composite),
            {name: s.HasField("openapi_v3") for name, s in req.required_schemas.items()},
        )
    raise BadInput(f"this function composes InferenceCluster and InferenceClass, not kind {kind!r}")


def required_resources(req: fnv1.RunFunctionRequest, composite: dict) -> dict[str, list[dict]]:
    """Required resources as dicts; of a list of every InferenceClass, only those pools name."""
    wanted = referenced_classes(composite)
    out = {}
    for name, resources in req.required_resources.items():
        items = resources.items
        if name == names.ALL_CLASSES_REQUIREMENT:
            items = [i for i in items if _struct_name(i.resource) in wanted]
        out[name] = [resource.struct_to_dict(i.resource) for i in items]
    return out


def referenced_classes(composite: dict) -> set[str]:
    pools = composite.get("spec", {}).get("nodePools")
    if not isinstance(pools, list):
        return set()
    return {p.get("className") for p in pools if isinstance(p, dict)} - {None}


def _struct_name(s) -> str | None:
    meta = s.fields.get("metadata")
    if meta is None or not meta.HasField("struct_value"):
        return None
    name = meta.struct_value.fields.get("name")
    return name.string_value if name is not None else None


class ObservedResources(Mapping[str, ObservedResource]):
    """Observed composed resources, converted from protobuf only when a renderer reads one."""

    def __init__(self, resources) -> None:
        self._resources = resources
        self._cache: dict[str, ObservedResource] = {}

    def __getitem__(self, key: str) -> ObservedResource:
        if key not in self._cache:
            if key not in self._resources:
                raise KeyError(key)
            observed = self._resources[key]
            self._cache[key] = ObservedResource(
                resource.struct_to_dict(observed.resource),
                frozenset(observed.connection_details.keys()),
            )
        return self._cache[key]

    def __contains__(self, key: object) -> bool:
        return key in self._resources

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._resources))

    def __len__(self) -> int:
        return len(self._resources)


def observed(req: fnv1.RunFunctionRequest, composite: dict) -> Observed:
    return Observed(
        resources=ObservedResources(req.observed.resources), status=composite.get("status", {})
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
    for key, want in sorted(out.schemas.items()):
        response.require_schema(rsp, key, want.api_version, want.kind)
    for key, want in sorted(out.requirements.items()):
        response.require_resources(
            rsp,
            key,
            want.api_version,
            want.kind,
            match_name=want.name,
            match_labels=want.labels,
            namespace=want.namespace,
        )
