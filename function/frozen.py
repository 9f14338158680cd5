"""The frozen-field values a composed body carries (forcenew finds them, output.Desired keeps them).

Plain data with no import of the function's own modules, so that output (which every renderer
imports) can type Desired.frozen without reaching up into forcenew, which reads observed state.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

RECREATE = "delete it and the function creates it again with the new value"


@dataclass(frozen=True)
class Frozen:
    """A field under spec.forProvider its provider cannot change in place."""

    path: tuple[str, ...]
    source: str
    move: str = RECREATE
    # Only these changes replace (live, new) -> bool; None: every change.
    replaces: Callable[[Any, Any], bool] | None = None
    # What this release offers rather than what the spec asks for: kept and said as Normal, so a
    # live resource that only misses it is not a Warning at every reconcile.
    optional: bool = False


@dataclass(frozen=True)
class FrozenKind:
    """The frozen fields of one composed kind, and the name what keep_live reads of an observed
    resource of that kind is noted under (ObservedResource.derived)."""

    noted_as: str
    fields: tuple[Frozen, ...]


@dataclass(frozen=True, slots=True)
class Composed:
    """What keep_live compares an observed resource with: the frozen fields of the composed
    body's kind, its kind, and the values it sets them to (as _values gives them)."""

    of: FrozenKind
    kind: str
    values: bytes
