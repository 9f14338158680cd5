"""What the function keeps between calls, for speed, and why a hit is always the right answer.

A control plane calls the function for every XR it serves, each reconcile two calls of the
requirements loop, each XR at least every minute (Crossplane's poll interval, or the TTL the
function answers with). Nearly all of those calls repeat an earlier one, so the function remembers:

- answers by Crossplane's tag (TAGGED): a steady cluster's reconcile is answered from them;
- compositions with what they were made from (COMPOSED), for a call under a new tag that reads
  nothing new;
- observed resources as last read (SEEN) and required resources converted (REQUIRED);
- what is made of content alone and shared by identity: encoded bodies (ENCODED), validated models
  (PARSED), the serving stack's bodies (BODIES), a cloud's parts (PARTS), Usages (USAGES) and
  children's names (NAMES).

What a cluster has many small entries of (what was read of its observed resources, its
children's names, its stack bodies, cloud parts, Usages and encoded entries) is kept in one group
a cluster (Groups): a composition finds its cluster's group once and each item in that small map,
not hundreds of items in a fleet's map of every cluster's, whose lookups reach memory the
processor's caches have let go (docs/performance.md "Caches with a fleet").

Every entry is weighed in bytes (what it holds, estimated from its encoded size) against one
budget for all of them, which the operator sets (`--cache-mib`, `FUNCTION_CACHE_MIB`); when it is
full the entry used longest ago goes, whichever cache holds it. An entry unused for IDLE_SECONDS
goes too: Crossplane reconciles every XR it serves at least every few minutes, so a cluster not
seen for that long is paused or deleted, and nothing of a composite gone for good outlives it by
more than that (Crossplane never calls a function for an XR being deleted). What is dropped is
made again on the next call that needs it: the caches change how fast an answer comes, never what
it is (tests/test_server.py replays fleets in Go's map orders with caches emptied, starved and
warm, and compares bytes).

What each hit relies on: Crossplane's tag is a SHA-256 of the request marshalled deterministically
(`Tag` in composition_functions.go), so equal tags are equal requests; the API server never gives
the same uid and resourceVersion to different content (what every Kubernetes cache trusts); a
dict's content is its marshal dump (marshal is faithful for plain data, and dicts are converted in
key order, so equal content is equal bytes).
"""

import functools
import marshal
import re
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from function import clock, wire
from function.output import Output

MIB = 1 << 20
BUDGET_ENV = "FUNCTION_CACHE_MIB"
# Room for 430 clusters of the largest shape (EKS, 8 pools, Dynamo: 1.18 MiB of entries each) or
# 2600 small ones (Existing: 0.19 MiB); the entries' weights are within a fifth of what tracemalloc
# finds them holding (docs/performance.md "Caches with a fleet").
DEFAULT_BUDGET_MIB = 512
IDLE_SECONDS = 10 * 60
# A converted dict takes about seven times its marshal dump in memory (measured on the largest
# cluster's bodies with sys.getsizeof, item by item).
DICT_WEIGHT = 7
ENTRY_OVERHEAD = 200  # an OrderedDict slot, the entry's list, the key's tuple


class Store:
    """One budget in bytes for every cache, and the clock their entries are used by."""

    def __init__(
        self, budget: int, idle: float = IDLE_SECONDS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.budget = budget
        self.idle = idle
        self.clock = clock
        self.caches: list[Cache] = []
        self.held = 0
        self.now = clock()

    def call(self) -> None:
        """A call begins: entries it uses are marked now, and what no call used for `idle`
        seconds is dropped."""
        self.now = self.clock()
        cutoff = self.now - self.idle
        for cache in self.caches:
            cache.drop_idle(cutoff)

    def make_room(self) -> None:
        """Drop the entries used longest ago, in whichever cache, until the budget holds; those
        of a cache kept last (answers by tag) only once the others hold nothing."""
        while self.held > self.budget:
            holding = [c for c in self.caches if c and not c.kept_last] or [
                c for c in self.caches if c
            ]
            if not holding:
                return
            min(holding, key=Cache.coldest).drop_coldest()

    def clear(self) -> None:
        for cache in self.caches:
            cache.clear()


# The budget is set by the CLI (--cache-mib, or FUNCTION_CACHE_MIB).
STORE = Store(DEFAULT_BUDGET_MIB * MIB)


class Cache:
    """A map whose entries count against the store's budget, least recently used dropped first.

    weigh(key, value) is what an entry holds in bytes (an estimate from its encoded size, cheap
    to take: it is taken once, when the entry is put). A cache kept last gives up entries only
    when no other cache holds any.
    """

    def __init__(
        self,
        name: str,
        weigh: Callable[[Any, Any], int],
        store: Store | None = None,
        *,
        kept_last: bool = False,
    ) -> None:
        self.name = name
        self.weigh = weigh
        self.kept_last = kept_last
        self.store = store or STORE
        self.store.caches.append(self)
        self._items: OrderedDict[Any, list] = OrderedDict()  # key -> [value, size, last used]
        self.held = 0
        # Groups: the group found last, with its key and the call it was found in.
        self._last: tuple | None = None

    def __len__(self) -> int:
        return len(self._items)

    def find(self, key: Any) -> Any:
        """The value kept for key (now the most recently used), or None."""
        entry = self._items.get(key)
        if entry is None:
            return None
        entry[2] = self.store.now
        self._items.move_to_end(key)
        return entry[0]

    def get(self, key: Any, make: Callable[[], Any]) -> Any:
        """The value kept for key, made (and kept) when there is none."""
        value = self.find(key)
        if value is None:
            value = make()
            self.put(key, value)
        return value

    def put(self, key: Any, value: Any) -> None:
        size = self.weigh(key, value) + ENTRY_OVERHEAD
        old = self._items.pop(key, None)
        if old is not None:
            self._forget(old)
        if size > self.store.budget:  # would push out everything else: not kept
            return
        self._items[key] = [value, size, self.store.now]
        self.held += size
        self.store.held += size
        self.store.make_room()

    def pop(self, key: Any) -> None:
        old = self._items.pop(key, None)
        if old is not None:
            self._forget(old)

    def coldest(self) -> float:
        return next(iter(self._items.values()))[2]

    def drop_coldest(self) -> None:
        self._forget(self._items.popitem(last=False)[1])

    def drop_idle(self, cutoff: float) -> None:
        items = self._items
        while items and next(iter(items.values()))[2] < cutoff:
            self._forget(items.popitem(last=False)[1])

    def clear(self) -> None:
        self.store.held -= self.held
        self.held = 0
        self._items.clear()
        self._last = None

    def _forget(self, entry: list) -> None:
        self.held -= entry[1]
        self.store.held -= entry[1]
        self._last = None


class Groups(Cache):
    """A cache whose entries are groups of small ones: a cluster's, found once by whoever reads
    many of them (one lookup in a map of clusters rather than one in a map of every cluster's
    items, whose memory a fleet leaves cold). A group is weighed item by item as they are added
    (weigh_item), and goes as one entry: used last when any of its items was."""

    def __init__(
        self, name: str, weigh_item: Callable[[Any, Any], int], store: Store | None = None
    ) -> None:
        super().__init__(name, lambda _, group: 0, store)
        self.weigh_item = weigh_item

    def group(self, key: Any) -> "Group":
        """The group kept under key (made, and kept, when there is none). A composition asks for
        its cluster's hundreds of times in a row: after the first, within the same call, the
        group is handed back without looking it up (nothing was dropped since, or _last would be
        None)."""
        last, now = self._last, self.store.now
        if last is not None and last[2] == now and last[0] == key:
            return last[1]
        group = self.find(key)
        if group is None:
            group = Group(self, key)
            self.put(key, group)
        self._last = (key, group, now)
        return group

    def item(self, of: Any, key: Any, make: Callable[[], Any]) -> Any:
        """The item kept by key in the group of `of`, made (and kept) when there is none."""
        group = self.group(of)
        found = group.items.get(key)
        if found is None:
            found = make()
            group.add(key, found)
        return found

    def grow(self, key: Any, group: "Group", size: int) -> None:
        """Weigh size more (or less) on group, while it is the one kept under key."""
        entry = self._items.get(key)
        if entry is None or entry[0] is not group:  # dropped meanwhile: nothing to weigh
            return
        entry[1] += size
        self.held += size
        self.store.held += size
        self.store.make_room()


class Group:
    """The items of one group of a Groups cache, by key."""

    __slots__ = ("_cache", "_key", "items")

    def __init__(self, cache: Groups, key: Any) -> None:
        self._cache = cache
        self._key = key
        self.items: dict = {}

    def add(self, key: Any, value: Any) -> None:
        weigh = self._cache.weigh_item
        size = weigh(key, value) + ENTRY_OVERHEAD
        old = self.items.get(key)
        if old is not None:
            size -= weigh(key, old) + ENTRY_OVERHEAD
        self.items[key] = value
        self._cache.grow(self._key, self, size)


def _bytes(*parts: Any) -> int:
    """Bytes held by plain data: bytes and strings by length, tuples item by item."""
    total = 0
    for part in parts:
        if isinstance(part, bytes | str | memoryview):
            total += len(part)
        elif isinstance(part, tuple | list | frozenset):
            total += 8 * len(part) + _bytes(*part)
        else:
            total += 16
    return total


# --- answers by Crossplane's tag -----------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    """What one call answers, encoded: all a kept answer needs, none of the composition."""

    kind: str | None
    name: str | None
    ready: bool | None
    count: int  # desired resources, for the log
    parts: tuple[bytes, ...]  # the encoded answer (fn.encoded)
    # The composition's comparisons with the wall clock (function/clock.py): kept while they hold.
    clock: tuple = ()


# Crossplane tags a request with a SHA-256 of the whole request, marshalled deterministically (its
# composite, every observed resource with its connection details, the bootstrap required resources
# and schemas, context, input and credentials): equal tags, equal requests, whatever order their
# maps came in. The calls of a requirements loop keep the first call's tag: what the loop fetched
# (required resources and schemas) and the capabilities are part of the key, by content. A steady
# cluster's reconcile is then known without reading what it observes. A tag that is not a SHA-256
# (a hand-made request's; crossplane render sends none) vouches for nothing. Only the encoded
# answer is kept: a cluster that changes leaves a trail of old tags behind, which must not hold
# its compositions. Kept last when the budget is short: a steady reconcile needs nothing else, and
# an answer is the smallest thing kept of a cluster (a fifth of what a cluster's entries weigh).
TAGGED = Cache(
    "answers by tag", lambda key, answer: len(key[0]) + sum(map(len, answer.parts)), kept_last=True
)
_CONTENT_HASH = re.compile(r"[0-9a-f]{64}")


def by_tag(req: wire.Request, handed: dict[str, tuple], make: Callable[[], Answer]) -> Answer:
    """The answer kept for the request's tag and what was fetched after tagging, or make()'s."""
    if not _CONTENT_HASH.fullmatch(req.meta.tag):
        return make()
    key = (
        req.meta.tag,
        tuple(req.meta.capabilities),
        tuple(handed.items()),
        tuple(sorted(req.installed_schemas.items())),
    )
    kept = TAGGED.find(key)
    if kept is not None and clock.still(kept.clock):
        return kept
    answer = make()
    TAGGED.put(key, answer)
    return answer


# --- compositions with what they were made from --------------------------------------------------


@dataclass(frozen=True)
class Made:
    """A composition's answer, encoded, and everything it was made from, compactly (a fleet keeps
    one a cluster). Not the composition's bodies: a kept composition is only ever answered again,
    and its dicts took a seventh of what a cluster held (docs/performance.md)."""

    given: tuple  # the composite, the required resources, the installed kinds, ask_first
    names: bytes  # the observed resources' names, marshalled in the order they came (_same_names)
    read_keys: bytes  # the names of the observed resources read, marshalled
    told: tuple[bytes, ...]  # what told each of them (its version, or its bytes)
    answer: Answer  # with its comparisons with the wall clock (answer.clock, function/clock.py)


def _made_weight(_: Any, made: Made) -> int:
    # What it was made from; the answer's parts are the encoded entries ENCODED weighs.
    return (
        len(made.given[0])
        + len(made.names)
        + len(made.read_keys)
        + 8 * (len(made.told) + len(made.answer.parts))
    )


def _names(observed: Mapping[str, bytes]) -> bytes:
    return marshal.dumps(tuple(observed))


def _same_names(kept: bytes, observed: Mapping[str, bytes]) -> bool:
    """Whether observed holds the names kept (_names), as a set: the same number, each there.
    Kept unsorted, so a composition made again does not sort a few hundred names with long
    common prefixes (12 µs instead of 20 for the largest shape); this check costs what comparing
    sorted names did."""
    names = marshal.loads(kept)  # noqa: S302 - written by this process
    return len(names) == len(observed) and all(n in observed for n in names)


# Compositions by composite and the names of the requirements handed over (a reconcile's calls
# differ in those). compose_cluster is a pure function of what it is given: while the composite,
# its required resources, the installed kinds, the observed resources' names and every observed
# resource it read are the same (by version, or by bytes without one), so is its answer. A
# request under a new tag that matches is answered with the kept composition; any other is
# composed afresh.
COMPOSED = Cache("compositions", _made_weight)


def composition(
    where: tuple,
    given: tuple,
    observed: Mapping[str, bytes],
    compose: Callable[[], tuple[Output, Mapping[str, bytes]]],
    answer: Callable[[Output], Answer],
) -> Answer:
    """The answer kept at where if its composition was made from what is given now, else
    answer() of compose()'s (which says what told each observed resource it read)."""
    made = COMPOSED.find(where)
    if made is not None and _still(made, given, observed) and clock.still(made.answer.clock):
        return made.answer
    with clock.recording() as told:
        out, read = compose()
    out.clock = tuple(told)
    answered = answer(out)
    made = Made(given, _names(observed), marshal.dumps(tuple(read)), tuple(read.values()), answered)
    COMPOSED.put(where, made)
    return answered


def _still(made: Made, given: tuple, observed: Mapping[str, bytes]) -> bool:
    """Whether made was made from what is given now."""
    if made.given != given or not _same_names(made.names, observed):
        return False
    for key, told in zip(marshal.loads(made.read_keys), made.told, strict=True):  # noqa: S302
        data = observed[key]
        if data != told and wire.version(data) != told:
            return False
    return True


# --- what is observed and required ---------------------------------------------------------------


# Composites converted (identity, spec and status), by version: both calls of a reconcile carry
# the same composite, and so does every reconcile until the XR is written (its resourceVersion
# changes with every write, its status included). Without a version, converted afresh. Kept
# with the same marshalled, which is what a composition is known to be made from (Made.given).
COMPOSITES = Cache("composites", lambda _, kept: 64 * DICT_WEIGHT + len(kept[1]))


def composite(data: bytes, convert: Callable[[], dict]) -> tuple[dict, bytes]:
    """The composite in data as convert() makes it (kept by version), and the same marshalled."""

    def made() -> tuple[dict, bytes]:
        body = convert()
        return body, marshal.dumps(body)

    version = wire.version(data)
    return made() if version is None else COMPOSITES.get(version, made)


# What was read of each observed resource, grouped by composite, by resource name. Crossplane
# sends every observed resource on every call, the same until a provider or the API server
# changes it: what was read of one (a condition, an id) is read once. Kept with what tells the
# content it was read from (its version, wire.version, or without one its bytes), never the
# resource's own bytes: a new request brings them again, and they are parsed only for what was
# not read before. A resource no longer observed keeps its reads until its composite's group goes.
SEEN = Groups("reads of observed resources", lambda _, kept: 600 + len(kept[0]))


def seen(reads: Group, key: str, data: bytes) -> tuple[dict, bytes]:
    """What was read of the observed resource key, encoded as data (a Resource message), to note
    more in; and what tells its content (its version, or its bytes). reads is its composite's
    group of SEEN."""
    told = wire.version(data) or data
    kept = reads.items.get(key)
    if kept is not None and kept[0] == told:
        return kept[1], told
    noted: dict = {}
    reads.add(key, (told, noted))
    return noted, told


# Required resources (InferenceClasses, InferenceGateways, consumers, ProviderConfigs) converted,
# by version (wire.version), or by content without one: every call of every reconcile hands over
# the same classes and gateways until one changes, and every cluster of a fleet the same classes.
REQUIRED = Cache(
    "required resources",
    lambda key, item: (len(key) if isinstance(key, bytes) else 64) + DICT_WEIGHT * len(item[1]),
)


def required_item(data: bytes, convert: Callable[[], tuple[str | None, bytes]]):
    return REQUIRED.get(wire.version(data) or data, convert)


# --- made of content alone -----------------------------------------------------------------------


class Structs:
    """Dicts encoded as Struct messages and desired resources as State entries, kept by content,
    grouped by the cluster they are of.

    Encoding a dict into a Struct runs in Python, field by field; a steady cluster returns the
    same bodies every time. An equal marshal dump means equal content, hence equal bytes, and a
    body that changes in any way is encoded afresh. A desired resource's entry is kept by its key
    with its readiness and the dump it was made from, the last one only: comparing two dumps costs
    less than hashing one, and a body that changed leaves nothing behind. A shared body (never
    changed once made, see Desired.shared) is known by identity instead of its dump: its entry
    holds the body, so no other object can take its identity while the entry is kept.
    """

    def __init__(self, store: Store | None = None) -> None:
        self._content = Groups(
            "encoded by content", lambda key, data: len(key[-1]) + len(data), store
        )
        self._by_key = Groups("encoded entries by key", _entry_weight, store)

    def encoded(self, body: dict, of: str | None = None) -> bytes:
        return self._content.item(of, (marshal.dumps(body),), lambda: wire.struct_message(body))

    def entry(
        self, key: str, body: dict, ready: bool, *, shared: bool = False, of: str | None = None
    ) -> bytes:
        """The State.resources entry of a desired resource of cluster `of`."""
        return self.entries([(key, body, ready, shared)], of)[0]

    def entries(
        self, resources: Iterable[tuple[str, dict, bool, bool]], of: str | None = None
    ) -> list[bytes]:
        """The State.resources entries of desired resources (key, body, ready, shared) of
        cluster `of`, in order; its group found once for all of them."""
        by_key = self._by_key.group(of)
        out = []
        for key, body, ready, shared in resources:
            kept = by_key.items.get(key)
            made_of = body if shared else marshal.dumps(body)
            if (
                kept is None
                or kept[0] != ready
                or (kept[1] is not body if shared else kept[1] != made_of)
            ):
                kept = (ready, made_of, wire.state_entry(key, body, ready))
                by_key.add(key, kept)
            out.append(kept[2])
        return out

    def clear(self) -> None:
        self._content.clear()
        self._by_key.clear()


def _entry_weight(_: str, kept: tuple) -> int:
    """An entry and what it was made from: its dump, or a shared body (weighed at half its
    entry's size, as dicts held are)."""
    made_of, entry = kept[1], kept[2]
    return len(entry) + (len(made_of) if isinstance(made_of, bytes) else len(entry) // 2)


ENCODED = Structs()

# InferenceCluster and InferenceClass models by the content they were validated from (a model is
# frozen): a cluster and its classes are the same from one call to the next.
PARSED = Cache("validated models", lambda key, _: 2 * len(key[1]))

# The serving stack's bodies, grouped by cluster, by what they are made of (component,
# ProviderConfig, and the built values by content, or a fixed manifest by identity (its id), which
# is held for good): a cluster's stack is the same from one reconcile to the next,
# so each body is made once and shared (never changed once made).
BODIES = Groups(
    "stack bodies", lambda key, _: 2 * len(key[-1]) if isinstance(key[-1], bytes) else 0
)

# Managed resources a cloud makes of its cluster's name, credentials and spec alone
# (Cloud.made_once), grouped by cluster, by part, the last made only, with what they were made of:
# the same from one reconcile to the next, made once and shared.
PARTS = Groups("cloud parts", lambda _, kept: len(kept[0]) + kept[2])


def part(cluster: str, name: str, args: tuple, make: Callable[[tuple], dict]) -> dict:
    """make(args), kept as the part `name` of cluster while args (plain data) are the same:
    marshal version 2 writes equal values alike (no references), and equal bytes are equal
    values. make is given a copy of args, read back from those bytes, so what it makes shares
    nothing with the caller's objects and is made of exactly what it is kept by."""
    made_of = marshal.dumps(args, 2)
    group = PARTS.group(cluster)
    kept = group.items.get(name)
    if kept is not None and kept[0] == made_of:
        return kept[1]
    made = make(marshal.loads(made_of))  # noqa: S302 - ours
    held = DICT_WEIGHT * len(marshal.dumps([body for body, _ in made.values()]))
    group.add(name, (made_of, made, held))
    return made


# Usages, grouped by cluster, by what they name (edge, both ends' apiVersion, kind and name): the
# same from one reconcile to the next, made once and shared.
USAGES = Groups("usages", lambda key, _: _bytes(*key))

# Names of a cluster's children (names.cloud_name, names.child_name) by what they are made of,
# grouped by cluster: a hash and a sanitising for each, made again by every composition of the
# cluster. Weighed with the rest, so a fleet keeps every cluster's (a count-bound memo held 8192:
# 55 clusters of the largest shape, after which a fleet's compositions made every name again).
NAMES = Groups("names", lambda key, name: _bytes(*key) + len(name))


def name(cluster: str, key: tuple, make: Callable[..., str]) -> str:
    """make(*key), kept by key in cluster's group."""
    return NAMES.item(cluster, key, lambda: make(*key))


# The names of charts' CRD Jobs by what each applies (crd_job.ChartCRDs: frozen, its chart
# pinned, so a process meets a handful, one per chart and selection of files). A name carries a
# hash of the whole Job spec, built and dumped as JSON: 30 µs that every composition of every
# cluster spent twice a chart. Equal specs, equal names (crd_job.name is a pure function of it).
@functools.cache
def crd_job_name(spec: Any, make: Callable[[Any], str]) -> str:
    """make(spec), kept by spec for the process."""
    return make(spec)


def forget() -> None:
    """Empty every cache: each answer is then made from nothing, as for a cluster not seen for
    longer than the caches remember (`make bench` measures it; nothing else needs it, since a
    cache can only be right)."""
    STORE.clear()
    crd_job_name.cache_clear()
