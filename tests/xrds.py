"""The XRDs under apis/, read as data: their OpenAPI schemas and the CEL rules in them."""

from collections.abc import Iterator
from pathlib import Path

import yaml

APIS = Path(__file__).resolve().parent.parent / "apis"
XRDS = {
    "InferenceCluster": APIS / "inferenceclusters" / "definition.yaml",
    "InferenceClass": APIS / "inferenceclasses" / "definition.yaml",
}


def openapi_schema(kind: str) -> dict:
    xrd = yaml.safe_load(XRDS[kind].read_text())
    (version,) = xrd["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]


def walk(schema: dict, path: str = "") -> Iterator[tuple[str, dict]]:
    """Yield (path, node) for every node of an OpenAPI schema; arrays add [] and maps .*."""
    yield path, schema
    for name, sub in (schema.get("properties") or {}).items():
        yield from walk(sub, f"{path}.{name}" if path else name)
    if isinstance(schema.get("items"), dict):
        yield from walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from walk(schema["additionalProperties"], f"{path}.*")


def cel_rules(kind: str) -> list[tuple[str, dict]]:
    """(path, rule) for every x-kubernetes-validations rule of the kind's XRD."""
    return [
        (path, rule)
        for path, node in walk(openapi_schema(kind))
        for rule in node.get("x-kubernetes-validations", [])
    ]
