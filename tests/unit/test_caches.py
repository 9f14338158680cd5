"""The caches' budget: sized in bytes, the least recently used entry dropped first whichever cache
holds it, answers by tag kept last, nothing kept longer than the idle time."""

from function import caches, names


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def store(budget: int, idle: float = 600) -> tuple[caches.Store, Clock]:
    clock = Clock()
    return caches.Store(budget, idle, clock), clock


def by_length(_, value: bytes) -> int:
    return len(value)


def test_the_budget_holds_and_the_least_recently_used_entry_goes_first_in_any_cache():
    s, clock = store(budget=3 * (100 + caches.ENTRY_OVERHEAD))
    a, b = caches.Cache("a", by_length, s), caches.Cache("b", by_length, s)
    for i, cache in enumerate((a, b, a)):
        clock.now = i
        s.call()
        cache.put(i, b"x" * 100)
    clock.now = 3
    s.call()
    assert a.find(0) == b"x" * 100  # used again: now the most recent
    b.put("new", b"y" * 100)  # over budget: the coldest, b's entry 1, goes
    assert b.find(1) is None
    assert a.find(0) is not None and a.find(2) is not None and b.find("new") is not None
    assert s.held == a.held + b.held <= s.budget


def test_answers_by_tag_go_only_once_every_other_cache_is_empty():
    s, clock = store(budget=2 * (100 + caches.ENTRY_OVERHEAD))
    answers = caches.Cache("answers", by_length, s, kept_last=True)
    other = caches.Cache("other", by_length, s)
    answers.put("old", b"a" * 100)
    clock.now = 1
    s.call()
    other.put("warm", b"o" * 100)
    other.put("warmer", b"o" * 100)  # over: the other cache gives, though its entry is newer
    assert answers.find("old") is not None
    assert len(other) == 1
    answers.put("new", b"a" * 100)
    answers.put("newer", b"a" * 100)  # other is empty now: the oldest answer goes
    assert len(other) == 0 and answers.find("old") is None and len(answers) == 2


def test_an_entry_larger_than_the_budget_is_not_kept():
    s, _ = store(budget=1000)
    cache = caches.Cache("a", by_length, s)
    cache.put("small", b"s")
    cache.put("huge", b"h" * 2000)
    assert cache.find("huge") is None and cache.find("small") == b"s"
    assert cache.get("huge", lambda: b"h" * 2000) == b"h" * 2000  # made, answered, not kept


def test_what_no_call_used_for_the_idle_time_is_dropped():
    """Crossplane calls for every XR at least every few minutes: what a deleted composite left
    goes once the idle time has passed, what live ones use stays."""
    s, clock = store(budget=1 << 20, idle=600)
    cache = caches.Cache("a", by_length, s)
    cache.put("gone", b"g")
    cache.put("live", b"l")
    for minute in range(1, 12):
        clock.now = 60 * minute
        s.call()
        assert cache.find("live") == b"l"
    assert cache.find("gone") is None
    assert s.held == cache.held == len(b"l") + caches.ENTRY_OVERHEAD


def test_a_replaced_entry_is_weighed_once():
    s, _ = store(budget=1 << 20)
    cache = caches.Cache("a", by_length, s)
    cache.put("k", b"x" * 10)
    cache.put("k", b"x" * 30)
    assert s.held == cache.held == 30 + caches.ENTRY_OVERHEAD
    cache.pop("k")
    cache.clear()
    assert s.held == cache.held == 0


def test_a_fleets_names_are_all_kept_and_weighed_in_the_budget():
    # 9600 names: more than the 8192 a count-bound memo held (55 clusters of the largest shape).
    caches.forget()
    try:
        wanted = {
            (f"cluster-{i:04d}", f"pool-{p}"): names._cloud_name(
                63, False, f"cluster-{i:04d}", f"pool-{p}"
            )
            for i in range(320)
            for p in range(30)
        }
        assert {k: names.cloud_name(*k) for k in wanted} == wanted
        held = caches.NAMES.held
        assert len(caches.NAMES) == 320  # a group a cluster
        kept = sum(len(caches.NAMES.find(f"cluster-{i:04d}").items) for i in range(320))
        assert kept == len(wanted) and held >= len(wanted) * caches.ENTRY_OVERHEAD
        assert {k: names.cloud_name(*k) for k in wanted} == wanted  # every one found again
        assert caches.NAMES.held == held and caches.STORE.held >= held
    finally:
        caches.forget()


def test_a_group_is_weighed_item_by_item_and_goes_as_one_entry():
    s, clock = store(budget=1 << 20)
    groups = caches.Groups("g", by_length, s)
    other = caches.Cache("other", by_length, s)
    a = groups.group("a")
    a.add("x", b"x" * 100)
    a.add("x", b"x" * 300)  # replaced: weighed once
    a.add("y", b"y" * 50)
    assert groups.group("a") is a and len(groups) == 1
    assert s.held == groups.held == 350 + 3 * caches.ENTRY_OVERHEAD
    clock.now = 1
    s.call()
    other.put("o", b"o" * 10)
    s.budget = s.held - 1  # full: the coldest entry is the whole group
    s.make_room()
    assert groups.find("a") is None and groups.held == 0 and other.find("o") == b"o" * 10
    a.add("z", b"z")  # a group dropped meanwhile is weighed no more
    assert groups.held == 0 and s.held == other.held


def test_a_group_found_again_in_the_same_call_is_the_one_kept_and_used_now():
    """A composition asks for its cluster's group hundreds of times: the one found first in a
    call is handed back, but never one dropped meanwhile, and a new call marks it used again."""
    s, clock = store(budget=1 << 20)
    groups = caches.Groups("g", by_length, s)
    other = caches.Cache("other", by_length, s)
    a = groups.group("a")
    assert groups.group("a") is a and groups.group("b") is not a and groups.group("a") is a
    groups.clear()
    assert groups.group("a") is not a  # dropped: a new group, kept
    a = groups.group("a")
    assert groups.find("a") is a
    groups.pop("a")
    assert groups.group("a") is not a
    # A new call marks the group used again, though it was the one found last.
    groups.group("b")
    a = groups.group("a")
    clock.now = 1
    s.call()
    other.put("o", b"o")
    clock.now = 2
    s.call()
    assert groups.group("a") is a
    s.budget = caches.ENTRY_OVERHEAD + 1  # room for one entry: the one used last
    s.make_room()
    assert groups.find("a") is a and groups.find("b") is None and other.find("o") is None


def test_a_kept_composition_holds_only_while_its_clock_comparisons_do():
    """A composition that compared the wall clock with an instant (a Capacity Block's start) is
    answered again only while that comparison comes out the same."""
    from datetime import UTC, datetime, timedelta  # noqa: PLC0415

    from function import clock  # noqa: PLC0415
    from function.output import Output  # noqa: PLC0415

    starts = datetime(2026, 12, 10, tzinfo=UTC)
    made = []

    def compose():
        out = Output(ready=clock.reached(starts))
        made.append(out)
        return out, {}

    def answer(out):
        return caches.Answer("InferenceCluster", "xr", out.ready, 0, (), out.clock)

    where, given = ("clock-test", ()), ("xr",)
    with clock.fixed(starts - timedelta(days=1)):
        before = caches.composition(where, given, {}, compose, answer)
        assert caches.composition(where, given, {}, compose, answer) is before
    with clock.fixed(starts - timedelta(seconds=1)):
        assert caches.composition(where, given, {}, compose, answer) is before
    with clock.fixed(starts):
        after = caches.composition(where, given, {}, compose, answer)
    assert after is not before and (before.ready, after.ready) == (False, True)
    assert [o.clock for o in made] == [((starts, False),), ((starts, True),)]


def test_a_part_is_made_once_for_the_same_arguments_and_the_last_one_only_is_kept():
    """A cloud's part (Cloud.made_once) is made again only when what it is made of changes, is
    then kept in place of the one before, and weighs what its bodies hold."""
    caches.forget()
    made: list[tuple] = []

    def make(args):
        made.append(args)
        return {"vpc": ({"spec": {"forProvider": {"region": args[0], "tags": args[1]}}}, None)}

    tags = {"a": "1"}
    first = caches.part("c", "network", ("us-east-2", tags, ["x"]), make)
    again = caches.part("c", "network", ("us-east-2", {"a": "1"}, ["x"]), make)
    assert again is first and made == [("us-east-2", {"a": "1"}, ["x"])]
    assert first["vpc"][0]["spec"]["forProvider"]["tags"] is not tags  # made of a copy
    held = caches.PARTS.held
    assert held > caches.DICT_WEIGHT * 20
    for args in (("us-east-2", {"a": "2"}, ["x"]), ("us-east-2", {"a": "2"}, ["x", "y"])):
        moved = caches.part("c", "network", args, make)
        assert moved is not first and made[-1] == args
    assert caches.part("d", "network", ("us-east-2", {"a": "1"}, ["x"]), make)
    assert len(caches.PARTS.group("c").items) == 1 and len(caches.PARTS) == 2
    caches.forget()
