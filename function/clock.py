"""The wall clock: the one thing a composition reads besides its request.

Only time-bound cloud facts read it (an EKS Capacity Block that has not started, or nears its
end). Each comparison goes through `reached(instant)`, which notes the instant and the answer while
a composition records them (`recording`): a kept composition is answered again only while every
noted comparison still comes out the same (caches.composition), so the same request and the same
clock give the same bytes. Tests fix the clock with `fixed`.
"""

import contextlib
import contextvars
from collections.abc import Iterator
from datetime import UTC, datetime

_FIXED: contextvars.ContextVar[datetime | None] = contextvars.ContextVar("fixed", default=None)
_TOLD: contextvars.ContextVar[list | None] = contextvars.ContextVar("told", default=None)


def now() -> datetime:
    return _FIXED.get() or datetime.now(UTC)


def reached(instant: datetime) -> bool:
    """Whether the clock is at or past instant (noted while a composition records)."""
    answer = now() >= instant
    told = _TOLD.get()
    if told is not None:
        told.append((instant, answer))
    return answer


def parse(text: object) -> datetime | None:
    """An RFC 3339 time as providers report it, or None."""
    if not isinstance(text, str):
        return None
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


@contextlib.contextmanager
def recording() -> Iterator[list[tuple[datetime, bool]]]:
    told: list[tuple[datetime, bool]] = []
    token = _TOLD.set(told)
    try:
        yield told
    finally:
        _TOLD.reset(token)


def still(told: tuple[tuple[datetime, bool], ...]) -> bool:
    """Whether every noted comparison comes out the same now."""
    moment = now()
    return all((moment >= instant) == answer for instant, answer in told)


@contextlib.contextmanager
def fixed(moment: datetime) -> Iterator[None]:
    """The clock stands at moment (tests)."""
    token = _FIXED.set(moment)
    try:
        yield
    finally:
        _FIXED.reset(token)
