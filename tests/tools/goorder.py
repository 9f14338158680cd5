"""RunFunctionRequests in the map orders Crossplane sends them.

Crossplane (Go) marshals each request afresh without the deterministic option: Go ranges over
every map (each Struct's fields, the observed and required resources) in a random order, so the
same content comes in different bytes on every call. The function must answer them alike, and a
cache kept by bytes would miss; tests and the bench send requests reordered so.
"""

import random

from function.wire import field, read_varint

# Of each message on the way to a Struct, its fields that are messages (by number): the type of
# each, and whether the field is a map (of which only the entry's value, field 2, is a message).
_RESOURCE = "Resource"
_SCHEMA: dict[str, dict[int, tuple[str, bool]]] = {
    "RunFunctionRequest": {
        2: ("State", False),
        3: ("State", False),
        5: ("Struct", False),
        8: ("Resources", True),
        9: ("Schema", True),
    },
    "State": {1: (_RESOURCE, False), 2: (_RESOURCE, True)},
    "Resources": {1: (_RESOURCE, False)},
    _RESOURCE: {1: ("Struct", False), 2: ("", True)},
    "Schema": {1: ("Struct", False)},
    "Struct": {1: ("Value", True)},
    "Value": {5: ("Struct", False), 6: ("ListValue", False)},
    "ListValue": {1: ("Value", False)},
}


def shuffled(data: bytes, seed: int, message: str = "RunFunctionRequest") -> bytes:
    """data, a message of the given type, with the entries of every map in an order drawn from
    seed (each field's entries stay together, in field order, as Go writes them)."""
    return _shuffled(data, random.Random(seed), message)  # noqa: S311 - an order, not a secret


def _shuffled(data: bytes, rng: random.Random, message: str) -> bytes:
    fields: dict[int, list[bytes]] = {}
    i = 0
    while i < len(data):
        start = i
        key, i = read_varint(data, i)
        number, wire_type = key >> 3, key & 7
        if wire_type == 2:
            size, i = read_varint(data, i)
            end = i + size
            nested = _SCHEMA.get(message, {}).get(number)
            if nested is None:
                fields.setdefault(number, []).append(data[start:end])
            else:
                typ, is_map = nested
                payload = data[i:end]
                payload = _entry(payload, typ, rng) if is_map else _shuffled(payload, rng, typ)
                fields.setdefault(number, []).append(field(number, payload))
            i = end
        elif wire_type == 0:
            _, i = read_varint(data, i)
            fields.setdefault(number, []).append(data[start:i])
        elif wire_type in (1, 5):
            i += 8 if wire_type == 1 else 4
            fields.setdefault(number, []).append(data[start:i])
        else:
            raise ValueError(f"wire type {wire_type} in {message}")
    out = []
    for number in sorted(fields):
        entries = fields[number]
        if _SCHEMA.get(message, {}).get(number, ("", False))[1]:
            rng.shuffle(entries)
        out += entries
    return b"".join(out)


def _entry(data: bytes, typ: str, rng: random.Random) -> bytes:
    """A map entry with its value (field 2) reordered when it is a message."""
    return _shuffled(data, rng, f"entry:{typ}") if typ else data


for _typ in {t for fields in _SCHEMA.values() for t, _ in fields.values() if t}:
    _SCHEMA[f"entry:{_typ}"] = {2: (_typ, False)}
