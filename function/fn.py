"""The entry point: decode the request, dispatch on the composite's kind, encode the answer.

All composition logic lives in compose.py and the renderers; this module and wire.py alone touch
protobuf. The server hands over request bytes and sends back the bytes answer() writes (for the
v1 and v1beta1 services alike); in-process callers with messages (tests) go through the same path.
What is kept from one call to the next, for speed, and why each hit is right, is in caches.py:
read without it, a reconcile is decoded, composed and encoded afresh every time.
"""

import contextlib
import functools
import marshal
from collections.abc import Iterator, Mapping

import grpc
from crossplane.function import logging, resource, response
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1
from google.protobuf import struct_pb2

from function import caches, names, wire
from function.caches import ENCODED, Answer
from function.compose import compose_class, compose_cluster
from function.inputs import Observed, ObservedResource, is_true
from function.output import BadInput, Output, shown

SEVERITY = {
    "Normal": fnv1.SEVERITY_NORMAL,
    "Warning": fnv1.SEVERITY_WARNING,
    "Fatal": fnv1.SEVERITY_FATAL,
}
READY = {True: fnv1.READY_TRUE, False: fnv1.READY_FALSE}
UNREADY_TTL_SECONDS = 15
SETTLED_TTL_SECONDS = int(response.DEFAULT_TTL.total_seconds())


class FunctionRunner(grpcv1.FunctionRunnerServiceServicer):
    """Composes InferenceClusters and checks InferenceClasses."""

    @functools.cached_property
    def log(self):
        """structlog's logger, bound on first use (after logging is configured): its lazy proxy
        binds a new one for every message, even one its level drops."""
        return logging.get_logger().bind()

    def RunFunction(
        self, req: fnv1.RunFunctionRequest, _: grpc.ServicerContext | None = None
    ) -> fnv1.RunFunctionResponse:
        return fnv1.RunFunctionResponse.FromString(self.answer(req.SerializeToString()))

    def run_function_bytes(self, data: bytes, _: grpc.ServicerContext) -> bytes:
        """RunFunction as the server registers it: request bytes in, response bytes out."""
        return self.answer(data)

    def answer(self, data: bytes) -> bytes:
        """The serialised RunFunctionResponse to a serialised RunFunctionRequest."""
        req = None
        caches.STORE.call()
        try:
            req = wire.Request(data)
            rsp, entries = respond_to(req)
            kept = answered(req)
            if kept.ready is False:
                # Not there yet: look again sooner than a settled cluster needs (what is awaited,
                # a class or a ProviderConfig, is not watched by Crossplane, only polled).
                rsp.meta.ttl.FromSeconds(UNREADY_TTL_SECONDS)
            self.log.debug("composed", kind=kept.kind, name=kept.name, resources=kept.count)
            # What the function answers follows what the request brings: the parser merges both.
            return b"".join((serialise(rsp, entries), *kept.parts))
        except BadInput as e:
            kind, name = identity(req)
            self.log.info("bad input", kind=kind, name=name, error=str(e))
            message = str(e)
        except Exception:
            kind, name = identity(req)
            # A bug, not bad input: log the traceback here, keep it out of the XR's events.
            self.log.exception("cannot compose", kind=kind, name=name)
            message = (
                f"internal error composing {shown(kind)} {shown(name)}; see the function's logs"
            )
        return failed(req, message)


def identity(req: wire.Request | None) -> tuple[str | None, str | None]:
    """The composite's kind and name, as far as they can be read, for a failure's message."""
    with contextlib.suppress(Exception):
        body = req.composite.body
        return wire.lookup(body, ("kind",)), wire.lookup(body, ("metadata", "name"))
    return None, None


def respond_to(req: wire.Request) -> tuple[fnv1.RunFunctionResponse, dict[str, bytes]]:
    """As the SDK's response.to: the request's tag and context, and what earlier steps of the
    pipeline desire (its resources as encoded entries, ours go on top)."""
    rsp = fnv1.RunFunctionResponse()
    rsp.meta.tag = req.meta.tag
    rsp.meta.ttl.FromSeconds(SETTLED_TTL_SECONDS)
    if req.context is not None:
        rsp.context.CopyFrom(wire.parse(struct_pb2.Struct, req.context, "context"))
    composite, earlier = wire.state_resources(req.desired)
    if composite:
        rsp.desired.composite.CopyFrom(wire.parse(fnv1.Resource, composite, "desired composite"))
    for key, body in earlier.items():  # checked, since they go back out as they came
        wire.parse(fnv1.Resource, body, f"desired resource {shown(key)}")
    return rsp, {k: wire.resource_entry(k, v) for k, v in earlier.items()}


def failed(req: wire.Request | None, message: str) -> bytes:
    """A Fatal answer: Crossplane applies nothing of it, and deletes nothing."""
    rsp, entries = fnv1.RunFunctionResponse(), {}
    if req is not None:
        with contextlib.suppress(BadInput):  # earlier steps' state undecodable: leave it out
            rsp, entries = respond_to(req)
    response.fatal(rsp, message)
    return serialise(rsp, entries)


def serialise(rsp: fnv1.RunFunctionResponse, entries: dict[str, bytes]) -> bytes:
    """rsp, with the desired resources' encoded entries merged into its desired state.

    A message field that occurs twice is merged by every protobuf parser, so the entries follow
    rsp as a second desired State instead of being decoded into it and encoded again.
    """
    data = rsp.SerializeToString(deterministic=True)
    if not entries:
        return data
    return data + wire.field(2, b"".join(entries[k] for k in sorted(entries)))


def answered(req: wire.Request) -> Answer:
    """The function's answer to the request (kept by Crossplane's tag, caches.by_tag)."""
    handed = required(req)
    return caches.by_tag(req, handed, lambda: made_for(req, handed))


def made_for(req: wire.Request, handed: dict[str, tuple]) -> Answer:
    composite, marshalled = composite_of(req.composite_data)
    kind = composite.get("kind")
    if kind == names.INFERENCE_CLASS:
        return answer_of(compose_class(composite), kind, composite.get("metadata", {}).get("name"))
    if kind == names.INFERENCE_CLUSTER:
        return composed(composite, marshalled, req, handed)
    raise BadInput(
        f"this function composes InferenceCluster and InferenceClass, not kind {shown(kind)}"
    )


def answer_of(out: Output, kind: str, name: str | None) -> Answer:
    """out, encoded: all that is kept of a composition."""
    return Answer(kind, name, out.ready, len(out.resources), encoded(out, name), out.clock)


# What the function reads of its composite: never its managedFields or other server metadata.
_COMPOSITE_FIELDS = ("apiVersion", "kind", "spec", "status")


def composite_of(data: bytes) -> tuple[dict, bytes]:
    """The composite's identity, spec and status as a dict of its own (never changed: it is
    kept by version for the next call, caches.composite), and the same marshalled.

    Without the status's conditions: the function never reads them (Crossplane sets them from
    the answer), and Crossplane marks some in memory before it calls (WatchCircuitClosed, with
    the time), so they are not what the composite's resourceVersion stands for.
    """
    if not data:
        return {}, marshal.dumps({})

    def convert() -> dict:
        body = wire.Resource(data).body
        out = {k: wire.lookup(body, (k,)) for k in _COMPOSITE_FIELDS if k in body}
        if isinstance(out.get("status"), dict):
            out["status"].pop("conditions", None)
        name = wire.lookup(body, ("metadata", "name"))
        out["metadata"] = {"name": name} if isinstance(name, str) else {}
        return out

    return caches.composite(data, convert)


_MISSING = object()
_READY = (None, "ready")


class ConvertedOnRead(Mapping):
    """A map read as a Mapping, each value converted the first time it is read."""

    def __init__(self, source: Mapping) -> None:
        self._source = source
        self._cache: dict = {}
        self._keys: list[str] | None = None

    def _convert(self, key: str, value):
        raise NotImplementedError

    def get(self, key: str, default=None):
        # Renderers look resources up by the hundred: one dict read when already converted.
        value = self._cache.get(key, _MISSING)
        if value is _MISSING:
            raw = self._source.get(key, _MISSING)
            if raw is _MISSING:
                return default
            value = self._cache[key] = self._convert(key, raw)
        return value

    def __getitem__(self, key: str):
        value = self.get(key, _MISSING)
        if value is _MISSING:
            raise KeyError(key)
        return value

    def __contains__(self, key: object) -> bool:
        return key in self._source

    def __iter__(self) -> Iterator[str]:
        if self._keys is None:  # read a few times a composition; the source never changes
            self._keys = sorted(self._source)
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._source)


class RequiredResources(ConvertedOnRead):
    """Required resources by requirement name, as dicts; of a list of every InferenceClass, only
    those the pools name. Given as required_item made them."""

    def __init__(self, required: Mapping[str, tuple], composite: dict) -> None:
        super().__init__(required)
        self._classes = referenced_classes(composite)

    def _convert(self, key: str, items: tuple) -> list[dict]:
        if key == names.ALL_CLASSES_REQUIREMENT:
            items = tuple((n, b) for n, b in items if n in self._classes)
        return [marshal.loads(b) for _, b in items]  # noqa: S302 - written by this process


def required(req: wire.Request) -> dict[str, tuple]:
    """Required resources by requirement name, each item as required_item makes it."""
    items = req.required_resources
    return {k: tuple(map(required_item, items[k].items)) for k in sorted(items)}


def required_item(data: bytes) -> tuple[str | None, bytes]:
    """A required resource's name and its body, converted once and kept marshalled."""

    def convert() -> tuple[str | None, bytes]:
        body = wire.Resource(data).body
        name = wire.lookup(body, ("metadata", "name"))
        return (name if isinstance(name, str) else None), marshal.dumps(body.python())

    return caches.required_item(data, convert)


def referenced_classes(composite: dict) -> set[str]:
    """The class names the pools give (before validation: anything may be of any type)."""
    spec = composite.get("spec")
    pools = spec.get("nodePools") if isinstance(spec, dict) else None
    if not isinstance(pools, list):
        return set()
    return {
        p["className"] for p in pools if isinstance(p, dict) and isinstance(p.get("className"), str)
    }


class WireResource(ObservedResource):
    """An observed resource read from the request's bytes: a renderer reads a handful of fields
    (a condition, an id), each parsed when first read, and the whole body is converted, afresh,
    only when it is kept as is. Connection details are known by name only.

    What is read is noted in reads (caches.seen keeps it for the resource's version, without
    its bytes): a later request observing the same version answers those reads from there, and
    parses its own bytes only for what was not read before. Containers are noted marshalled,
    so each read gets its own copy.
    """

    def __init__(self, data: bytes, reads: dict) -> None:
        self._data = data
        self._reads = reads
        self._resource: wire.Resource | None = None

    @property
    def _parsed(self) -> wire.Resource:
        if self._resource is None:
            self._resource = wire.Resource(self._data)
        return self._resource

    @property
    def connection_keys(self) -> frozenset[str]:
        return self._parsed.connection_keys

    @property
    def body(self) -> dict:
        return self._parsed.body.python()

    def _noted(self, key: tuple, value, read):
        """The read at key, given what was found noted there (value) when that is not the answer
        itself: nothing (_MISSING: read() now, and noted) or a container, marshalled."""
        if value is _MISSING:
            value = read()
            self._reads[key] = marshal.dumps(value) if isinstance(value, dict | list) else value
            return value
        return marshal.loads(value)  # noqa: S302 - ours

    # What is noted is keyed by its path (strings and numbers), or for what is not a field by a
    # key no path can be (None first). JSON holds no bytes: bytes noted are a container,
    # marshalled, so each read gets its own copy. Each read looks in what was noted first,
    # inline: a composition reads hundreds, nearly all noted before.
    def get(self, *path: str | int):
        value = self._reads.get(path, _MISSING)
        if value is _MISSING or type(value) is bytes:
            return self._noted(path, value, lambda: wire.lookup(self._parsed.body, path))
        return value

    def condition(self, type_: str) -> dict | None:
        key = (None, "condition", type_)
        value = self._reads.get(key, _MISSING)
        if value is _MISSING or type(value) is bytes:
            return self._noted(key, value, lambda: self._condition(type_))
        return value

    def derived(self, name: str, derive):
        key = (None, "derived", name)
        value = self._reads.get(key, _MISSING)
        if value is _MISSING or type(value) is bytes:
            return self._noted(key, value, lambda: derive(self))
        return value

    @property
    def ready(self) -> bool:
        # Read of nearly every resource: noted as what it is, a bool, not as the condition.
        value = self._reads.get(_READY, _MISSING)
        if value is _MISSING:
            return self._noted(_READY, value, lambda: is_true(self._condition("Ready")))
        return value

    def _condition(self, type_: str) -> dict | None:
        conditions = wire.at(self._parsed.body, ("status", "conditions"))
        if not isinstance(conditions, wire.LazyList):
            return None
        for i in range(len(conditions)):
            c = conditions.child(i)
            if isinstance(c, wire.LazyStruct) and c.child("type") == type_:
                return c.python()
        return None


class ObservedResources(ConvertedOnRead):
    """Observed composed resources, wrapped (not converted) when a renderer reads one."""

    def __init__(self, source: Mapping, composite: str | None) -> None:
        super().__init__(source)
        self._composite = composite
        self._seen: caches.Group | None = None  # the composite's, found when one is first read
        # What tells each resource read: its version, or its bytes (caches.seen).
        self.read: dict[str, bytes] = {}

    def _convert(self, key: str, value: bytes) -> ObservedResource:
        if self._seen is None:
            self._seen = caches.SEEN.group(self._composite)
        reads, self.read[key] = caches.seen(self._seen, key, value)
        return WireResource(value, reads)


def observed(req: wire.Request, composite: dict) -> Observed:
    name = composite.get("metadata", {}).get("name")
    return Observed(
        resources=ObservedResources(req.observed, name), status=composite.get("status", {})
    )


def composed(
    composite: dict, marshalled: bytes, req: wire.Request, handed: dict[str, tuple]
) -> Answer:
    """The cluster composed from the request and encoded (or kept from the same inputs:
    caches.composition). marshalled is the composite, marshalled."""
    ask_first = fnv1.CAPABILITY_REQUIRED_RESOURCES in req.meta.capabilities
    given = (
        marshalled,
        tuple(handed.items()),
        tuple(sorted(req.installed_schemas.items())),
        ask_first,
    )

    def compose() -> tuple[Output, Mapping[str, bytes]]:
        seen_now = observed(req, composite)
        out = compose_cluster(
            composite,
            RequiredResources(handed, composite),
            seen_now,
            req.installed_schemas,
            ask_first=ask_first,
            marshalled=marshalled,
        )
        return out, seen_now.resources.read

    name = composite.get("metadata", {}).get("name")
    return caches.composition(
        (name, tuple(handed)),
        given,
        req.observed,
        compose,
        lambda out: answer_of(out, names.INFERENCE_CLUSTER, name),
    )


def encoded(out: Output, of: str | None) -> tuple[bytes, ...]:
    """What out answers, serialised: its requirements, the composite's status and readiness,
    conditions and results, then the desired resources' entries (those ENCODED keeps for the
    composite named `of`, not copied)."""
    rsp, entries = fnv1.RunFunctionResponse(), []
    encode_requirements(out, rsp)
    if not out.deferred:
        encode(out, rsp, of)
        entries = ENCODED.entries(
            ((key, d.body, d.ready, d.shared) for key, d in sorted(out.resources.items())), of
        )
    head = rsp.SerializeToString(deterministic=True)
    # The resources follow as a second desired State, which the parser merges.
    state = (wire.tag_and_size(2, sum(map(len, entries))),) if entries else ()
    return (head, *state, *entries)


def encode(out: Output, rsp: fnv1.RunFunctionResponse, of: str | None) -> None:
    if out.status:
        # As resource.update: the status replaces any an earlier step desired (the parser merges
        # the composite's fields, the later value of a key winning).
        status = ENCODED.encoded({"status": out.status}, of)
        rsp.desired.composite.resource.MergeFromString(status)
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
