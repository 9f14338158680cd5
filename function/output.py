"""Plain values the renderers return. fn.py alone turns them into protobuf."""

from dataclasses import dataclass, field
from typing import Literal

from function.frozen import Composed

Severity = Literal["Normal", "Warning", "Fatal"]


@dataclass(frozen=True)
class Desired:
    """A composed resource and whether Crossplane may count it as ready."""

    body: dict
    ready: bool = False
    # The body is shared by every reconcile it is the same for (made once, never changed after):
    # it is encoded once, and known again by identity.
    shared: bool = False
    # Of a shared body: its frozen fields and their values (forcenew.composed), found once when
    # it was made, so keep_live reads no shared body unless one moved.
    frozen: Composed | None = None


@dataclass(frozen=True)
class Result:
    severity: Severity
    message: str
    reason: str | None = None


@dataclass(frozen=True)
class Condition:
    type: str
    status: bool
    reason: str
    message: str | None = None


@dataclass(frozen=True)
class Requirement:
    """A required resource, fetched by name (or every one of the kind when name is None)."""

    api_version: str
    kind: str
    name: str | None = None
    namespace: str | None = None
    # Every one of the kind carrying these labels (in any namespace), instead of one by name.
    labels: dict[str, str] | None = None


@dataclass
class Output:
    """Everything one RunFunction call answers for a composite."""

    resources: dict[str, Desired] = field(default_factory=dict)
    status: dict = field(default_factory=dict)
    conditions: list[Condition] = field(default_factory=list)
    results: list[Result] = field(default_factory=list)
    requirements: dict[str, Requirement] = field(default_factory=dict)
    # Kinds whose schema the function asks for (to learn whether they are installed).
    schemas: dict[str, Requirement] = field(default_factory=dict)
    # None leaves XR readiness to Crossplane (all composed resources ready).
    ready: bool | None = None
    # Only requirements: Crossplane calls again with them answered, and only that answer counts.
    deferred: bool = False
    # Every comparison with the wall clock it was made with (function/clock.py).
    clock: tuple = field(default=(), compare=False, repr=False)


def shown(value: object, limit: int = 64) -> str:
    """A value as a message shows it: its repr, cut short (input may be huge or hostile)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 5]}...{text[-1]}"


class BadInput(Exception):  # noqa: N818 - it is input, not an error of ours
    """Input the function cannot compose from; answered with a Fatal result naming the field."""
