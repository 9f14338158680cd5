"""Typed inputs of one InferenceCluster reconcile: the XR, its classes and what is observed.

Built from plain dicts (fn.py decodes the protobuf request), so everything downstream is pure.
"""

import marshal
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from function import names
from function.caches import PARSED
from function.models import InferenceClass, InferenceCluster
from function.output import BadInput, Requirement, shown

M = TypeVar("M", bound=BaseModel)


class ObservedResource:
    """One observed composed resource: read where it is needed, not converted as a whole.

    This one wraps a dict (tests build them); fn.py's WireResource reads the request's bytes
    Crossplane sent, field by field, and converts the whole body only when one is kept as is.
    """

    def __init__(self, body: dict, connection_keys: frozenset[str] = frozenset()) -> None:
        self._body = body
        # Names of the connection details Crossplane read from the resource's Secret; never values.
        self.connection_keys = connection_keys

    @property
    def body(self) -> dict:
        return self._body

    def get(self, *path: str | int) -> Any:
        """The value at path in the observed body, or None when any step is missing."""
        node: Any = self._body
        for step in path:
            if isinstance(step, int):
                if not isinstance(node, list) or not -len(node) <= step < len(node):
                    return None
            elif not isinstance(node, dict):
                return None
            node = node[step] if isinstance(step, int) else node.get(step)
        return node

    def at_provider(self, *path: str | int) -> Any:
        return self.get("status", "atProvider", *path)

    def condition(self, type_: str) -> dict | None:
        conditions = self.get("status", "conditions")
        if not isinstance(conditions, list):
            return None
        return next((c for c in conditions if isinstance(c, dict) and c.get("type") == type_), None)

    def derived(self, name: str, derive: Callable[["ObservedResource"], Any]) -> Any:
        """derive(self), a plain value computed from what is read of this resource (the wire
        reader keeps it with the resource's version, as it keeps its reads)."""
        return derive(self)

    @property
    def ready(self) -> bool:
        """Crossplane's own readiness: a Ready=True condition on the managed resource."""
        return is_true(self.condition("Ready"))

    @property
    def external_name(self) -> str | None:
        return self.get("metadata", "annotations", "crossplane.io/external-name")


def is_true(condition: dict | None) -> bool:
    """Whether a condition, as Kubernetes writes them, holds."""
    return condition is not None and condition.get("status") == "True"


@dataclass(frozen=True)
class Observed:
    resources: Mapping[str, ObservedResource] = field(default_factory=dict)
    status: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Classes:
    """The InferenceClasses the pools name, and the ones not usable this time."""

    resolved: dict[str, InferenceClass]
    missing: tuple[str, ...] = ()
    invalid: dict[str, str] = field(default_factory=dict)
    # Requirements not answered yet (first call of a dynamic fetch): nothing to report about them.
    pending: bool = False

    @property
    def complete(self) -> bool:
        return not (self.missing or self.invalid or self.pending)


@dataclass(frozen=True)
class Inputs:
    xr: InferenceCluster
    classes: Classes
    observed: Observed
    # Every required resource Crossplane handed over, by requirement name; a name is absent until
    # Crossplane has answered it.
    required: Mapping[str, list[dict]] = field(default_factory=dict)
    # Required schemas Crossplane answered: whether the kind is installed.
    schemas: Mapping[str, bool] = field(default_factory=dict)


def field_path(loc: tuple) -> str:
    """('spec', 'nodePools', 0, 'name') -> spec.nodePools[0].name"""
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


def describe(error: ValidationError, prefix: str = "") -> str:
    """One line per problem, naming the field and the value it had."""
    lines = []
    for e in error.errors(include_url=False):
        where = field_path((prefix, *e["loc"]) if prefix else e["loc"]) or prefix or "object"
        got = e.get("input")
        value = "" if isinstance(got, dict | list) or got is None else f" (got {shown(got)})"
        message = e["msg"].removeprefix("Value error, ")
        lines.append(f"{where}: {message}{value}")
    return "; ".join(lines)


def validated(model: type[M], body: dict, marshalled: bytes | None = None) -> M:
    """model validated from body (marshalled, when the caller has it so: the same bytes object
    each call is known without marshalling or comparing it again); raises ValidationError as
    model_validate does."""
    key = marshal.dumps(body) if marshalled is None else marshalled
    return PARSED.get((model, key), lambda: model.model_validate(body))


def parse_cluster(body: dict, marshalled: bytes | None = None) -> InferenceCluster:
    try:
        return validated(InferenceCluster, body, marshalled)
    except ValidationError as e:
        raise BadInput(f"invalid InferenceCluster: {describe(e)}") from None


def parse_class(body: dict) -> InferenceClass:
    try:
        return validated(InferenceClass, body)
    except ValidationError as e:
        raise BadInput(f"invalid InferenceClass: {describe(e)}") from None


def class_requirements(
    xr: InferenceCluster, required: dict[str, list[dict]]
) -> dict[str, Requirement]:
    """Ask for each class by name, unless the Composition already hands over all of them."""
    if names.ALL_CLASSES_REQUIREMENT in required:
        return {}
    return {
        names.class_requirement(c): Requirement(names.API_VERSION, names.INFERENCE_CLASS, c)
        for c in xr.spec.class_names
    }


def resolve_classes(xr: InferenceCluster, required: dict[str, list[dict]]) -> Classes:
    """Match each pool's className against the fetched InferenceClasses."""
    if names.ALL_CLASSES_REQUIREMENT in required:
        by_name = {
            c.get("metadata", {}).get("name"): c for c in required[names.ALL_CLASSES_REQUIREMENT]
        }
        pending = False
    else:
        by_name = {}
        pending = False
        for c in xr.spec.class_names:
            key = names.class_requirement(c)
            if key not in required:
                pending = True
            for item in required.get(key, []):
                by_name[c] = item
    resolved: dict[str, InferenceClass] = {}
    missing: list[str] = []
    invalid: dict[str, str] = {}
    for c in xr.spec.class_names:
        body = by_name.get(c)
        if body is None:
            missing.append(c)
            continue
        try:
            resolved[c] = validated(InferenceClass, body)
        except ValidationError as e:
            invalid[c] = describe(e)
    if pending:
        missing = []
    return Classes(resolved=resolved, missing=tuple(missing), invalid=invalid, pending=pending)
