"""Every pin of versions.CHARTS and versions.IMAGES has a support window (versions.SUPPORT), read
for the version pinned, and the suite fails BUMP_NOTICE before a pin's end of life, so a bump is
started while upstream still fixes what runs. A pin kept past it says why and until when
(versions.Overdue); the test lists those on every run."""

import warnings
from datetime import date, timedelta

from function import clock, versions
from function.versions import BUMP_NOTICE, OVERDUE_AT_MOST, SUPPORT, Overdue, Support

PINS = [f"chart {k}" for k in versions.CHARTS] + [f"image {k}" for k in versions.IMAGES]


def today() -> date:
    return clock.now().date()


def due(table: dict[str, Support], day: date) -> tuple[list[str], list[str]]:
    """The pins due for a bump on day (the suite fails on them) and the ones kept on purpose
    (listed): a pin is due BUMP_NOTICE before its end of life, or before its Overdue's date."""
    failing, kept = [], []
    for pin, support in sorted(table.items()):
        if support.eol is None or day < support.eol - BUMP_NOTICE:
            continue
        line = f"{pin} {support.version}: end of life {support.eol} ({support.source})"
        overdue = support.overdue
        if overdue is None:
            failing.append(line)
        elif day < overdue.until - BUMP_NOTICE:
            kept.append(f"{line}; kept, to revisit by {overdue.until}: {overdue.reason}")
        else:
            failing.append(f"{line}; kept until {overdue.until}, due too: bump it or renew")
    return failing, kept


def test_every_pin_has_a_support_window_read_for_its_version():
    assert sorted(SUPPORT) == sorted(PINS)
    stale = {
        pin: (s.version, versions.pinned_version(pin))
        for pin, s in SUPPORT.items()
        if s.version != versions.pinned_version(pin)
    }
    assert not stale, f"pins bumped without reading their support window again: {stale}"
    assert all(s.source for s in SUPPORT.values())


def test_no_pin_is_within_the_bump_notice_of_its_end_of_life():
    failing, kept = due(SUPPORT, today())
    if kept:
        warnings.warn(
            "pins kept past their end of life:\n" + "\n".join(kept), UserWarning, stacklevel=1
        )
    assert not failing, (
        f"bump these (or, when a bump cannot be made now, give the pin an Overdue with the reason "
        f"and a date to revisit): {BUMP_NOTICE.days} days or less to their end of life:\n"
        + "\n".join(failing)
    )


def test_each_overdue_is_written_honestly():
    """An Overdue names its reason, was due when written (not a silencer for later) and runs at
    most OVERDUE_AT_MOST."""
    for pin, support in SUPPORT.items():
        overdue = support.overdue
        if overdue is None:
            continue
        assert overdue.reason.strip(), pin
        assert support.eol is not None, f"{pin}: an Overdue without an end of life"
        assert overdue.on >= support.eol - BUMP_NOTICE, (
            f"{pin}: not due when the Overdue was written"
        )
        assert overdue.on < overdue.until <= overdue.on + OVERDUE_AT_MOST, pin


def test_the_check_fails_when_due_and_lists_what_is_kept():
    """The check can fail: a pin 59 days from its end is due, 61 days is not, and an Overdue
    moves the count to its own date."""
    eol = date(2027, 3, 1)
    table = {
        "chart a": Support("1", eol, "src"),
        "chart b": Support(
            "1",
            eol,
            "src",
            Overdue("no chart material", on=date(2027, 1, 1), until=date(2027, 4, 1)),
        ),
        "chart c": Support("1", None, "none published"),
    }
    assert due(table, eol - timedelta(days=61)) == ([], [])
    failing, kept = due(table, eol - timedelta(days=59))
    assert [line.split()[1] for line in failing] == ["a"]
    assert [line.split()[1] for line in kept] == ["b"]
    failing, kept = due(table, date(2027, 4, 1) - BUMP_NOTICE)
    assert [line.split()[1] for line in failing] == ["a", "b"] and kept == []
    with clock.fixed(clock.parse("2026-10-01T00:00:00Z")):
        assert today() == date(2026, 10, 1)
