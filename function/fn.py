"""The gRPC entry point: decode the request, dispatch on the composite's kind, encode the answer.

All composition logic lives in compose.py and the renderers; this module only touches protobuf.
"""

import marshal
from collections import OrderedDict
from collections.abc import Iterator, Mapping

import grpc
from crossplane.function import logging, request, resource, response
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1
from google.protobuf.struct_pb2 import ListValue, Struct, Value

from function import names
from function.compose import compose_class, compose_cluster
from function.inputs import Observed, ObservedResource
from function.output import BadInput, Output, shown

SEVERITY = {
    "Normal": fnv1.SEVERITY_NORMAL,
    "Warning": fnv1.SEVERITY_WARNING,
    "Fatal": fnv1.SEVERITY_FATAL,
}
READY = {True: fnv1.READY_TRUE, False: fnv1.READY_FALSE}
UNREADY_TTL_SECONDS = 15


class FunctionRunner(grpcv1.FunctionRunnerServiceServicer):
    """Composes InferenceClusters and checks InferenceClasses."""

    def __init__(self) -> None:
        self.log = logging.get_logger()

    async def RunFunction(
        self, req: fnv1.RunFunctionRequest, _: grpc.aio.ServicerContext | None = None
    ) -> fnv1.RunFunctionResponse:
        rsp = response.to(req)
        composite = composite_of(req.observed.composite.resource)
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
            response.fatal(
                rsp,
                f"internal error composing {shown(kind)} {shown(name)}; see the function's logs",
            )
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
            ask_first=request.has_capability(req, fnv1.CAPABILITY_REQUIRED_RESOURCES),
        )
    raise BadInput(
        f"this function composes InferenceCluster and InferenceClass, not kind {shown(kind)}"
    )


# What the function reads of its composite: never its managedFields or other server metadata.
_COMPOSITE_FIELDS = ("apiVersion", "kind", "spec", "status")


def composite_of(struct: Struct) -> dict:
    """The composite's identity, spec and status as a dict."""
    out = {k: _python(_unwrap(struct.fields[k])) for k in _COMPOSITE_FIELDS if k in struct.fields}
    name = _field(struct.fields.get("metadata"), "name")
    out["metadata"] = {"name": name.string_value} if name is not None else {}
    return out


class ConvertedOnRead(Mapping):
    """A protobuf map read as a Mapping, each value converted the first time it is read."""

    def __init__(self, source) -> None:
        self._source = source
        self._cache: dict = {}

    def _convert(self, key: str, value):
        raise NotImplementedError

    def __getitem__(self, key: str):
        if key not in self._cache:
            if key not in self._source:
                raise KeyError(key)
            self._cache[key] = self._convert(key, self._source[key])
        return self._cache[key]

    def __contains__(self, key: object) -> bool:
        return key in self._source

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._source))

    def __len__(self) -> int:
        return len(self._source)


class RequiredResources(ConvertedOnRead):
    """Required resources by requirement name, as dicts; of a list of every InferenceClass, only
    those the pools name."""

    def __init__(self, req: fnv1.RunFunctionRequest, composite: dict) -> None:
        super().__init__(req.required_resources)
        self._classes = referenced_classes(composite)

    def _convert(self, key: str, value) -> list[dict]:
        items = value.items
        if key == names.ALL_CLASSES_REQUIREMENT:
            items = [i for i in items if _struct_name(i.resource) in self._classes]
        return [resource.struct_to_dict(i.resource) for i in items]


def required_resources(req: fnv1.RunFunctionRequest, composite: dict) -> RequiredResources:
    return RequiredResources(req, composite)


def referenced_classes(composite: dict) -> set[str]:
    """The class names the pools give (before validation: anything may be of any type)."""
    spec = composite.get("spec")
    pools = spec.get("nodePools") if isinstance(spec, dict) else None
    if not isinstance(pools, list):
        return set()
    return {
        p["className"] for p in pools if isinstance(p, dict) and isinstance(p.get("className"), str)
    }


def _struct_name(s) -> str | None:
    meta = s.fields.get("metadata")
    if meta is None or not meta.HasField("struct_value"):
        return None
    name = meta.struct_value.fields.get("name")
    return name.string_value if name is not None else None


class StructResource(ObservedResource):
    """An observed resource read straight from its protobuf Struct: a renderer reads a handful of
    fields (a condition, an id); the whole body is converted only when it is kept as is."""

    def __init__(self, struct, connection_keys: frozenset[str]) -> None:
        super().__init__({}, connection_keys)
        self._struct = struct
        self._converted: dict | None = None
        self._ready: bool | None = None

    @property
    def body(self) -> dict:
        if self._converted is None:
            self._converted = resource.struct_to_dict(self._struct)
        return self._converted

    def get(self, *path: str | int):
        node = self._struct  # a Struct, a ListValue, or a Value on the way down
        for step in path:
            if isinstance(step, int):
                values = node.values if isinstance(node, ListValue) else None
                if values is None or not -len(values) <= step < len(values):
                    return None
                node = _unwrap(values[step])
            else:
                if not isinstance(node, Struct) or step not in node.fields:
                    return None
                node = _unwrap(node.fields[step])
        return _python(node)

    @property
    def ready(self) -> bool:
        if self._ready is None:
            self._ready = self._condition_status("Ready") == "True"
        return self._ready

    def _condition_status(self, type_: str) -> str | None:
        conditions = _field(self._struct.fields.get("status"), "conditions")
        if conditions is None or conditions.WhichOneof("kind") != "list_value":
            return None
        for c in conditions.list_value.values:
            fields = c.struct_value.fields
            if "type" in fields and fields["type"].string_value == type_:
                return fields["status"].string_value if "status" in fields else None
        return None

    def condition(self, type_: str) -> dict | None:
        """A status condition's scalar fields, read without converting the status."""
        conditions = _field(self._struct.fields.get("status"), "conditions")
        if conditions is None or conditions.WhichOneof("kind") != "list_value":
            return None
        for c in conditions.list_value.values:
            fields = c.struct_value.fields
            if "type" in fields and fields["type"].string_value == type_:
                return {
                    k: f.string_value
                    for k, f in fields.items()
                    if f.WhichOneof("kind") == "string_value"
                }
        return None


def _field(value: Value | None, name: str) -> Value | None:
    """value[name] when value holds a Struct with that field."""
    if value is None or value.WhichOneof("kind") != "struct_value":
        return None
    return value.struct_value.fields.get(name)


def _unwrap(value: Value):
    """A Value as the Struct or ListValue it holds, else as itself (a scalar Value)."""
    kind = value.WhichOneof("kind")
    if kind == "struct_value":
        return value.struct_value
    if kind == "list_value":
        return value.list_value
    return value


def _python(node):
    if isinstance(node, Struct):
        return resource.struct_to_dict(node)
    if isinstance(node, ListValue):
        return [_python(_unwrap(v)) for v in node.values]
    kind = node.WhichOneof("kind")
    return None if kind in (None, "null_value") else getattr(node, kind)


class ObservedResources(ConvertedOnRead):
    """Observed composed resources, wrapped (not converted) when a renderer reads one."""

    def _convert(self, key: str, value) -> ObservedResource:
        return StructResource(value.resource, frozenset(value.connection_details.keys()))


def observed(req: fnv1.RunFunctionRequest, composite: dict) -> Observed:
    return Observed(
        resources=ObservedResources(req.observed.resources), status=composite.get("status", {})
    )


class EncodedBodies:
    """Desired bodies already encoded as protobuf Structs, by their content.

    Encoding a dict into a Struct runs in Python, field by field, and is the costliest step of a
    reconcile; a steady cluster returns the same bodies every time. The body's serialisation is
    the key, so a body that changes in any way is encoded afresh: the bytes are the same either way.
    """

    def __init__(self, capacity: int = 2048) -> None:
        self.capacity = capacity
        self._encoded: OrderedDict[bytes, bytes] = OrderedDict()

    def merge_into(self, target: Struct, body: dict) -> None:
        # marshal is the fastest faithful serialisation of plain data: equal keys, equal bodies.
        key = marshal.dumps(body)
        data = self._encoded.get(key)
        if data is None:
            fresh = Struct()
            fresh.update(body)
            data = fresh.SerializeToString(deterministic=True)
            self._encoded[key] = data
            if len(self._encoded) > self.capacity:
                self._encoded.popitem(last=False)
        else:
            self._encoded.move_to_end(key)
        target.MergeFromString(data)


BODIES = EncodedBodies()


def encode(out: Output, rsp: fnv1.RunFunctionResponse) -> None:
    encode_requirements(out, rsp)
    if out.deferred:
        return
    for key, desired in out.resources.items():
        target = rsp.desired.resources[key]
        BODIES.merge_into(target.resource, desired.body)
        if desired.ready:
            target.ready = fnv1.READY_TRUE
    if out.status:
        resource.update(rsp.desired.composite, {"status": out.status})
    if out.ready is not None:
        rsp.desired.composite.ready = READY[out.ready]
    if out.ready is False:
        # Not there yet: look again sooner than a settled cluster needs (what is awaited, a class
        # or a ProviderConfig, is not watched by Crossplane, only polled).
        rsp.meta.ttl.FromSeconds(UNREADY_TTL_SECONDS)
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


def encode_requirements(out: Output, rsp: fnv1.RunFunctionResponse) -> None:
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
