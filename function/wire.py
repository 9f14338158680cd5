"""RunFunction's protobuf wire format, read and written only as far as the function needs.

A request carries every observed resource in full (metadata with managedFields, spec, status):
half a megabyte for a large cluster, sent again on every requirements round. Decoding it into
the generated classes builds a protobuf object for every field before the function reads a few
dozen of them, and was most of a reconcile's cost. Here upb parses the request (in C) with lean
types that mirror the real ones field for field but keep what is nested as bytes; each level is
parsed when it is first read. Answers are written the same way, from encoded bytes kept by
content (function/caches.py). Nothing else in the function touches the wire.
"""

import math
import struct
from collections.abc import Callable, Mapping
from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError
from google.protobuf.struct_pb2 import ListValue, Struct, Value

from function.output import BadInput

# Each lean message mirrors the real one of the same name (field numbers and wire types), with
# nested messages kept as bytes: apiextensions.fn.proto.v1 and google.protobuf.Struct.
_LEAN = {
    "RunFunctionRequest": (
        "bytes meta = 1",  # RequestMeta
        "bytes observed = 2",  # State, parsed when a call is not known by its tag
        "bytes desired = 3",  # State, handed back as it came
        "optional bytes context = 5",  # Struct, handed back as it came
        "map<string, Resources> required_resources = 8",
        "map<string, Schema> required_schemas = 9",
    ),
    "State": ("bytes composite = 1", "map<string, bytes> resources = 2"),  # Resource
    # A RunFunctionRequest read for its observed state alone, in place: not copied out first.
    "ObservedOf": ("State observed = 2",),
    "Resources": ("repeated bytes items = 1",),  # Resource
    "Resource": ("bytes resource = 1", "map<string, bytes> connection_details = 2"),
    "Schema": ("optional bytes openapi_v3 = 1",),
    "Struct": ("map<string, bytes> fields = 1",),  # Value
    "Value": (
        "oneof int32 null_value = 1",
        "oneof double number_value = 2",
        "oneof string string_value = 3",
        "oneof bool bool_value = 4",
        "oneof bytes struct_value = 5",  # Struct
        "oneof bytes list_value = 6",  # ListValue
    ),
    "ListValue": ("repeated bytes values = 1",),  # Value
    # A Resource down to its body's metadata fields, for version(): two levels of its body parsed.
    "Versioned": ("Fields resource = 1", "map<string, bytes> connection_details = 2"),
    "Fields": ("map<string, Field> fields = 1",),  # Struct
    "Field": (  # Value
        "oneof int32 null_value = 1",
        "oneof double number_value = 2",
        "oneof string string_value = 3",
        "oneof bool bool_value = 4",
        "oneof Struct struct_value = 5",
        "oneof bytes list_value = 6",  # ListValue
    ),
}
_PACKAGE = "modelplane.wire"


def _lean_classes() -> dict[str, type]:
    F = descriptor_pb2.FieldDescriptorProto  # noqa: N806 - the proto type's own name
    scalars = {
        "bytes": F.TYPE_BYTES,
        "string": F.TYPE_STRING,
        "int32": F.TYPE_INT32,
        "double": F.TYPE_DOUBLE,
        "bool": F.TYPE_BOOL,
    }
    file = descriptor_pb2.FileDescriptorProto(name="modelplane/wire.proto", package=_PACKAGE)
    file.syntax = "proto3"  # strings are checked to be UTF-8 as they are parsed

    def add_field(msg, name: str, number: int, typ: str, label=F.LABEL_OPTIONAL):
        f = msg.field.add(name=name, number=number, label=label)
        if typ in scalars:
            f.type = scalars[typ]
        else:
            f.type, f.type_name = F.TYPE_MESSAGE, f".{_PACKAGE}.{typ}"
        return f

    for message, fields in _LEAN.items():
        msg = file.message_type.add(name=message)
        for spec in fields:
            decl, number = spec.split(" = ")
            *words, name = decl.replace(", ", ",").split()
            if words[0].startswith("map<"):
                key, value = words[0][4:-1].split(",")
                entry = msg.nested_type.add(name=f"{name.title().replace('_', '')}Entry")
                entry.options.map_entry = True
                add_field(entry, "key", 1, key)
                add_field(entry, "value", 2, value)
                f = add_field(msg, name, int(number), "", F.LABEL_REPEATED)
                f.type_name = f".{_PACKAGE}.{message}.{entry.name}"
            elif words[0] == "repeated":
                add_field(msg, name, int(number), words[1], F.LABEL_REPEATED)
            elif words[0] == "oneof":
                if not msg.oneof_decl:
                    msg.oneof_decl.add(name="kind")
                add_field(msg, name, int(number), words[1]).oneof_index = 0
            elif words[0] == "optional":
                f = add_field(msg, name, int(number), words[1])
                f.proto3_optional, f.oneof_index = True, len(msg.oneof_decl)
                msg.oneof_decl.add(name=f"_{name}")
            else:
                add_field(msg, name, int(number), words[0])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return {
        m: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.{m}"))
        for m in _LEAN
    }


_CLASSES = _lean_classes()
(
    _REQUEST,
    _STATE,
    _OBSERVED_OF,
    _RESOURCES,
    _RESOURCE,
    _SCHEMA,
    _STRUCT,
    _VALUE,
    _LIST,
    _VERSIONED,
) = (
    _CLASSES[m]
    for m in (
        "RunFunctionRequest",
        "State",
        "ObservedOf",
        "Resources",
        "Resource",
        "Schema",
        "Struct",
        "Value",
        "ListValue",
        "Versioned",
    )
)


class Undecodable(BadInput):
    """Bytes that are not the message they should be: answered with a Fatal result."""


def parse(cls: type, data: bytes, what: str):
    try:
        return cls.FromString(data)
    except DecodeError as e:
        raise Undecodable(f"cannot decode the request's {what}: {e}") from None


# --- reading -------------------------------------------------------------------------------------


def python(node: Value | Struct | ListValue) -> Any:
    """A whole protobuf Struct, ListValue or Value as plain Python (numbers as floats)."""
    if isinstance(node, Struct):
        return _object(node)
    if isinstance(node, ListValue):
        return _array(node)
    return _value(node)


def _object(node: Struct) -> dict:
    # Keys sorted: the same content, in whatever order its map came, is the same dict.
    return {k: _value(v) for k, v in sorted(node.fields.items())}


def _array(node: ListValue) -> list:
    return [_value(v) for v in node.values]


def _value(value: Value) -> Any:
    kind = value.WhichOneof("kind")
    if kind == "struct_value":
        return _object(value.struct_value)
    if kind == "list_value":
        return _array(value.list_value)
    if kind == "number_value":
        return _finite(value.number_value)
    return None if kind in (None, "null_value") else getattr(value, kind)


def _finite(number: float) -> float:
    if not math.isfinite(number):
        raise Undecodable(f"the request holds a number JSON cannot: {number}")
    return number


_ABSENT = object()
_UNREAD = object()


class LazyStruct:
    """A Struct read a level at a time: only the fields read are parsed, each once."""

    # Kept for long (observed resources are remembered by content): only the bytes, the keys and
    # what was read stay; the parsed message is made again when an unread field is first read.
    __slots__ = ("_data", "_keys", "_read")

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._keys = frozenset(parse(_STRUCT, data, "object").fields.keys())
        self._read: dict[str, Any] = {}

    def child(self, key: str) -> Any:
        value = self._read.get(key, _UNREAD)
        if value is _UNREAD:
            raw = _STRUCT.FromString(self._data).fields.get(key) if key in self._keys else None
            value = self._read[key] = _ABSENT if raw is None else _node(raw)
        return value

    def __contains__(self, key: str) -> bool:
        return key in self._keys

    def python(self) -> dict:
        return python(parse(Struct, self._data, "object"))


class LazyList:
    """A ListValue read an item at a time."""

    __slots__ = ("_data", "_read", "_values")

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._values = parse(_LIST, data, "list").values
        self._read: dict[int, Any] = {}

    def __len__(self) -> int:
        return len(self._values)

    def child(self, index: int) -> Any:
        if not -len(self._values) <= index < len(self._values):
            return _ABSENT
        if index not in self._read:
            self._read[index] = _node(self._values[index])
        return self._read[index]

    def python(self) -> list:
        return python(parse(ListValue, self._data, "list"))


def _node(data: bytes) -> Any:
    """A Value: a scalar as itself, a Struct or a list as its lazy reader."""
    value = parse(_VALUE, data, "value")
    kind = value.WhichOneof("kind")
    if kind == "struct_value":
        return LazyStruct(value.struct_value)
    if kind == "list_value":
        return LazyList(value.list_value)
    if kind == "string_value":
        return value.string_value
    if kind == "number_value":
        return _finite(value.number_value)
    if kind == "bool_value":
        return value.bool_value
    return None


def at(node: Any, path: tuple[str | int, ...]) -> Any:
    """The node at path (a lazy reader or a scalar), or None when any step is missing."""
    for step in path:
        if (isinstance(step, int) and isinstance(node, LazyList)) or (
            isinstance(step, str) and isinstance(node, LazyStruct)
        ):
            node = node.child(step)
        else:
            return None
        if node is _ABSENT:
            return None
    return node


def lookup(node: Any, path: tuple[str | int, ...]) -> Any:
    """The value at path as plain Python, or None when any step is missing."""
    node = at(node, path)
    return node.python() if isinstance(node, LazyStruct | LazyList) else node


class Resource:
    """A Resource message: its body's bytes, read lazily, and the names of its connection details
    (never their values, which are not kept)."""

    __slots__ = ("_body", "connection_keys", "data")

    def __init__(self, data: bytes) -> None:
        message = parse(_RESOURCE, data, "resource")
        # The body as a view into data when it is there once, as it always is: a resource kept
        # with its message then holds its bytes once.
        self.data: bytes | memoryview = _only_field(data, 1) or message.resource
        self.connection_keys = frozenset(message.connection_details.keys())
        self._body: LazyStruct | None = None

    @property
    def body(self) -> LazyStruct:
        if self._body is None:
            self._body = LazyStruct(self.data)
        return self._body


# What a version begins with: a wire type no protobuf message can start with (7), so a version is
# never equal to the bytes of a resource kept without one (caches.seen keeps either).
_VERSION_MARK = b"\xff"
_TEXT = 0x1A  # an encoded Value holding a string


def version(data: bytes) -> bytes | None:
    """Of a Resource message as Crossplane sends it, what identifies its content whatever order
    its maps come in, as one short bytes (kept for every observed resource of every cluster):
    the body's metadata.uid and metadata.resourceVersion (as encoded Values), the message's size
    and its connection details' names. None when the body has no uid or no resourceVersion.

    Crossplane marshals every request afresh, each map in a new order, so equal content rarely
    comes in equal bytes. An object read from the API server gets a new resourceVersion with every
    write, which is what every Kubernetes cache trusts; the size and the connection details' names
    (which come from a Secret, not the object) are checked on top. upb parses the body two levels
    deep, in C, and nothing else of it.
    """
    try:
        message = _VERSIONED.FromString(data)
    except DecodeError:  # told when the resource itself is read
        return None
    metadata = message.resource.fields.get("metadata")
    if metadata is None:
        return None
    fields = metadata.struct_value.fields
    uid, resource_version = fields.get("uid"), fields.get("resourceVersion")
    if not (_is_text(uid) and _is_text(resource_version)):
        return None
    details = message.connection_details
    names = b"".join(_string(k) for k in sorted(details)) if details else b""
    return b"".join((_VERSION_MARK, uid, resource_version, len(data).to_bytes(4, "little"), names))


def _is_text(value: bytes | None) -> bool:
    """Whether value is an encoded Value holding a string that is not empty (self-delimiting:
    tag, size, text)."""
    return value is not None and len(value) > 2 and value[0] == _TEXT


def _only_field(data: bytes, number: int) -> memoryview | None:
    """A view of the payload of length-delimited field number, when data holds it exactly once
    (a message known to parse)."""
    found, i, end = None, 0, len(data)
    while i < end:
        key, i = read_varint(data, i)
        wire_type = key & 7
        if wire_type == 2:
            size, i = read_varint(data, i)
            if key >> 3 == number:
                if found is not None:
                    return None
                found = memoryview(data)[i : i + size]
            i += size
        elif wire_type == 0:
            _, i = read_varint(data, i)
        elif wire_type in (1, 5):
            i += 8 if wire_type == 1 else 4
        else:
            return None
    return found


def read_varint(data: bytes, i: int) -> tuple[int, int]:
    """The varint at data[i:] and the index after it."""
    shift = result = 0
    while True:
        b = data[i]
        result |= (b & 0x7F) << shift
        i += 1
        if b < 0x80:
            return result, i
        shift += 7


class Request:
    """A RunFunctionRequest, parsed a level at a time."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._message = parse(_REQUEST, data, "RunFunctionRequest")
        self.meta = parse(fnv1.RequestMeta, self._message.meta, "meta")
        self._observed = None

    @property
    def _state(self):
        if self._observed is None:
            self._observed = parse(_OBSERVED_OF, self._data, "observed state").observed
        return self._observed

    @property
    def composite(self) -> Resource | None:
        data = self._state.composite
        return Resource(data) if data else None

    @property
    def composite_data(self) -> bytes:
        """The observed composite as Resource message bytes (empty when there is none)."""
        return self._state.composite

    @property
    def observed(self) -> Mapping[str, bytes]:
        """Observed composed resources by name, as Resource message bytes."""
        return self._state.resources

    @property
    def desired(self) -> bytes:
        """The desired state of earlier steps, as State message bytes."""
        return self._message.desired

    @property
    def context(self) -> bytes | None:
        return self._message.context if self._message.HasField("context") else None

    @property
    def required_resources(self) -> Mapping[str, Any]:
        """Required resources by requirement name: each a Resources whose items are Resource
        message bytes."""
        return self._message.required_resources

    @property
    def installed_schemas(self) -> dict[str, bool]:
        """Each required schema Crossplane answered: whether the kind is installed."""
        return {k: s.HasField("openapi_v3") for k, s in self._message.required_schemas.items()}


def state_resources(data: bytes) -> tuple[bytes, Mapping[str, bytes]]:
    """A State's composite and resources, as Resource message bytes."""
    state = parse(_STATE, data, "desired state")
    return state.composite, state.resources


# --- writing -------------------------------------------------------------------------------------


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def field(number: int, payload: bytes) -> bytes:
    """A length-delimited field: a string, bytes or an embedded message."""
    return tag_and_size(number, len(payload)) + payload


def tag_and_size(number: int, size: int) -> bytes:
    """What a length-delimited field of size bytes begins with."""
    return _varint(number << 3 | 2) + _varint(size)


_READY_TRUE = _varint(3 << 3) + _varint(1)  # Resource.ready = READY_TRUE


def resource_entry(key: str, resource: bytes) -> bytes:
    """One entry of State.resources (field 2), the Resource given as message bytes."""
    return field(2, field(1, key.encode()) + field(2, resource))


def state_entry(key: str, body: dict, ready: bool) -> bytes:
    """The State.resources entry of a desired resource."""
    message = field(1, struct_message(body))
    return resource_entry(key, message + _READY_TRUE if ready else message)


def struct_message(body: dict) -> bytes:
    """body as a Struct message, byte for byte what the generated class writes deterministically."""
    try:
        return _fields(body)
    except (KeyError, AttributeError, OverflowError, UnicodeError):
        # Not plain data (a subclass, a key that is not a string): the generated class decides.
        message = Struct()
        message.update(body)
        return message.SerializeToString(deterministic=True)


# --- encoding Structs --------------------------------------------------------------------------
# Struct.update runs in Python a field at a time, then serialises; writing the bytes directly is as
# fast, and lets what never changes be encoded once: the component table's manifests and chart
# values go into every cluster's bodies, so a cluster met for the first time pays only the rest.

# Dicts declared never to change, by identity (each entry holds its dict): their Struct encoding.
_FIXED: dict[int, tuple[dict, bytes]] = {}
# The keys of a dict (as inserted) in upb's deterministic order (bytes ascending, a longer key
# first where one is a prefix of the other; 0xFF never occurs in UTF-8), each with its encoded
# field. Bodies are built by code, so the same keys come in the same order again and again.
_ORDERS: dict[tuple, tuple[tuple[str, bytes], ...]] = {}
_ORDERS_KEPT = 1 << 14
_ORDER_KEYS_KEPT = 64
_DOUBLE = struct.Struct("<d").pack
_SIZES = [_varint(n) for n in range(1 << 14)]


def fixed(value: dict) -> dict:
    """Declare value never to change: it is encoded once, now, and spliced wherever it is held."""
    _FIXED[id(value)] = (value, _fields(value))
    return value


def is_fixed(value: object) -> bool:
    """Whether value was declared never to change (fixed)."""
    held = _FIXED.get(id(value))
    return held is not None and held[0] is value


def _size(n: int) -> bytes:
    return _SIZES[n] if n < 16384 else _varint(n)


def _order(keys: tuple) -> tuple[tuple[str, bytes], ...]:
    order = _ORDERS.get(keys)
    if order is None:
        raw = {k: k.encode() for k in keys}
        order = tuple(
            (k, b"\x0a" + _size(len(raw[k])) + raw[k])
            for k in sorted(keys, key=lambda k: raw[k] + b"\xff")
        )
        if len(keys) <= _ORDER_KEYS_KEPT and len(_ORDERS) < _ORDERS_KEPT:
            _ORDERS[keys] = order
    return order


def _fields(value: dict) -> bytes:
    """A Struct's encoding: its map entries, in upb's deterministic order."""
    known = _FIXED.get(id(value))
    if known is not None and known[0] is value:
        return known[1]
    out = []
    sizes = _SIZES  # lengths below 16 KiB, which is nearly all of them, from the table
    for k, key in _order(tuple(value)):
        item = value[k]
        if type(item) is str:  # most values
            raw = item.encode()
            n = len(raw)
            encoded = b"\x1a" + (sizes[n] if n < 16384 else _varint(n)) + raw
        else:
            encoded = _ENCODE[type(item)](item)
        n = len(encoded)
        entry = key + b"\x12" + (sizes[n] if n < 16384 else _varint(n)) + encoded
        n = len(entry)
        out.append(b"\x0a" + (sizes[n] if n < 16384 else _varint(n)) + entry)
    return b"".join(out)


def _items(values: list) -> bytes:
    """A ListValue's encoding."""
    out = []
    for item in values:
        encoded = _ENCODE[type(item)](item)
        out.append(b"\x0a" + _size(len(encoded)) + encoded)
    return b"".join(out)


def _string(value: str) -> bytes:
    raw = value.encode()
    return b"\x1a" + _size(len(raw)) + raw


def _struct_value(value: dict) -> bytes:
    fields = _fields(value)
    return b"\x2a" + _size(len(fields)) + fields


def _list_value(value: list) -> bytes:
    items = _items(value)
    return b"\x32" + _size(len(items)) + items


# A Value by the exact type of what it holds, as Struct.update sets it; any other type (a subclass
# too) is a KeyError, and the generated class encodes the body instead.
_ENCODE: dict[type, Callable[[Any], bytes]] = {
    str: _string,
    dict: _struct_value,
    list: _list_value,
    tuple: _list_value,
    bool: lambda v: b"\x20\x01" if v else b"\x20\x00",
    int: lambda v: b"\x11" + _DOUBLE(v),
    float: lambda v: b"\x11" + _DOUBLE(v),
    type(None): lambda _: b"\x08\x00",
}
