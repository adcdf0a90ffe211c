"""Incremental orders: a policy's ``order()`` kept up to date across steps and read lazily.

The simulator's hot spot under overload is ordering thousands of waiting requests in every step
that can admit, although a step admits one or two (hot path). A policy may therefore offer a fast
path, ``incremental_order()``, returning an ``IncrementalOrder``: a per-run object the engine
feeds with snapshot changes (a request joined the queue, its snapshot changed after a cache
event, it left the queue) and reads with ``iter_order(now)``, a generator yielding the same
sequence ``order(waiting, now)`` would return for the current snapshots, so the engine can stop
at the budget or at the first misfit after a few items. ``order()`` stays the reference (the
full permutation the live hook and the tests use); ``tests/test_fast_order.py`` runs every
registered policy with and without the fast path and requires identical per-request tables.

The engine's side of the contract (``fairsim/sim/engine.py``):

- ``add(q)`` is called for each new waiting request in ``(arrival_time, request_id)`` order, and
  again with a fresh snapshot (same ``request_id``) whenever one of its block keys changed state.
  Both happen only between iterations, at the start of a step, with snapshots built from the
  cache as it is then (policy contract rule 1).
- ``remove(request_id)`` after the step's admission loop, for each request admitted from the
  waiting queue.
- ``iter_order(now)`` is read at most once per step and only before the next ``add``/``remove``.
- Lazy hits (optional, ``fairsim.sim.lazy_hits``): an order with ``set_resolver(fn)`` and
  ``stale(request_ids, raised)`` gets ``set_resolver`` once; then a snapshot changed by a cache
  event is not re-added: at the start of a step ``stale(ids, raised)`` names the requests whose
  stored snapshot is out of date and, in ``raised``, those of them (or of the requests already
  stale) whose hit may have risen since (the engine's ``LazyHits.key_changed``: a key that can
  raise it became hittable; for the others it can only have fallen; ``raised=None``: any may
  have risen), and ``fn(q)`` gives the current
  step's snapshot of ``q``'s request (the same object for every call in a step). Everything yielded must be ``fn``'s result or a snapshot
  never marked stale since it was added or resolved. ``ArrivalOrder`` and Fairway's lanes
  (``LazyLanes``: ``FastLane`` + ``ArrivalOrder``), VTC's and DRR's class queues
  (``fairsim.policies.credit_fast``), LPM-aging's and SJF-aging's ``LazyKeyOrder``, Preble's
  lanes (``StaleArrivalOrder``) and SGLang's kept order (``fairsim.policies.sglang.KeptOrder``)
  take them.

Optional ``moved_by`` (what can change the sequence between two reads; the colocated engine
skips an admission attempt that cannot succeed only for an order that declares it,
``fairsim.sim.decode_fast``): ``"queue"``, only an ``add`` of a new request or a ``remove``
(``ArrivalOrder``: snapshots, their hits and stale marks do not move it); ``"snapshots"``, also
an ``add`` that replaces a snapshot (``SortedKeyOrder``). Either way neither the clock (``now``)
nor the reads themselves: reading changes nothing a later read or the policy's other calls see.
Absent (``None``): anything may move it (Fairway's wait term, a cursor advanced by reading).
Optional ``head_moved_by`` (read at each use, so it may be a property of the order's state):
the same for the *first* item alone, where the rest of the sequence may move otherwise; that
is all the skip needs, since it skips only attempts that fail at the first request
(``VTCOrder``: the least-served class's oldest request, whatever the charges; ``KeptOrder``
above SGLang's 128-waiting limit, where it keeps its order). For a policy told the engine's
prefill-token counter (``on_prefill_tokens``), ``"snapshots"`` also means that counter (the
engine skips only while it is unchanged; HRRN's sort at or below the limit). With lazy hits a
``"snapshots"`` first item also needs ``falls_behind = True`` (a stale request's hit, falling
unannounced, cannot move it: ``LazyKeyOrder``, ``KeptOrder``), and the engine skips only while
no hit change waits to be told (``DecodeFastEngine._head_unmoved``). Optional
``head_until(now)``: for a first item that moves with the clock, the clock up to which it stays
the last read's and a read changes nothing, while nothing is told to the order (``None``: not
known now); Fairway's family answers with its Fast lane's kept first (``FastLane.kept_until``):
the merge's first is one of the two lanes' fronts, chosen by their snapshots and the carried
debt, none of which moves with the clock (Fairway-patience's arming moves no item until an
admission); Fairway-deadline's order caps it at the clock from which a new request can be due
(``DeadlineOrder.head_until``).

Cost: ``add``/``remove`` are O(log n) (``sortedcontainers``) or O(1); ``iter_order`` yields the
first ``k`` items in O(k log n) (sorted keys; Fairway's time-dependent Fast-lane score: slope
buckets with bounds, ``fairsim.policies.fast_lane``), instead of an O(n log n) Python sort per
step.

Compiled: ``merge_lanes``, ``ArrivalOrder._resolved`` and ``LazyLanes``'s ``add``/``remove``/
``stale`` over a Fast lane and an ``ArrivalOrder`` have typed twins in
``fairsim/policies/_merge_c.pyx`` (``merge_of``, ``_merge_twin``; ``FAIRSIM_PURE_PYTHON=1`` runs
the code here, which stays the reference: same items, same lane reads, same ledgers to the bit;
``tests/test_merge_compiled.py``).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator
from itertools import chain
from typing import Any, Protocol

from fairsim.compiled import compiled_twin
from fairsim.errors import PolicyContractError
from fairsim.policies.failure import policy_failure, policy_name
from fairsim.policies.fast_lane import FastLane  # noqa: F401  (Fairway's Fast lane)
from fairsim.policies.sorted_keys import SortedKeys, heapify, heappop, heappush
from fairsim.policies.stale import resolve_stale
from fairsim.types import QueuedRequest

#: The compiled twins of ``merge_lanes``, ``ArrivalOrder._resolved`` and ``LazyLanes``'s
#: dispatch (``fairsim/policies/_merge_c.pyx``; ``_merge_twin``).
MERGE_MODULE = "fairsim.policies._merge_c"


def _merge_twin() -> Any:
    """The extension ``_merge_c``, or None where it is not built or ``FAIRSIM_PURE_PYTHON=1``
    is set (looked up per order, so the switch holds from the next run on)."""
    return compiled_twin(MERGE_MODULE)


#: Methods an ``incremental_order`` mirrors: a subclass overriding one of them without its own
#: ``incremental_order`` gets no fast path (its ``order()`` would be bypassed).
MIRRORED = ("order", "_fast_keys", "fast_lane", "saved", "_lift", "_update_ring")


#: Methods the engine calls on what ``incremental_order()`` returns (``IncrementalOrder``).
REQUIRED = ("add", "remove", "iter_order")


def fast_path_of(policy: Any, name: str | None = None) -> IncrementalOrder | None:
    """The policy's fast path, ``policy.incremental_order()``, or ``None`` when it has none (or
    ``incremental_order()`` returns ``None``: no fast path for the policy's present settings).

    ``None`` too when a subclass overrides ``order()`` (or a method the fast path mirrors,
    ``MIRRORED``) below the class that defines ``incremental_order``: a test's recording LPM or a
    team's variant of Fairway must be ordered by its own ``order()``.

    Args:
        name: The policy's name in errors (default ``fairsim.policies.failure.policy_name``).

    Raises:
        PolicyError: ``incremental_order()`` raised (the original is its ``__cause__``).
        PolicyContractError: It returned an object without the ``REQUIRED`` methods.
    """
    make = getattr(policy, "incremental_order", None)
    if make is None:
        return None
    mro = type(policy).__mro__
    owner = next((k for k in mro if "incremental_order" in k.__dict__), None)
    if owner is not None:
        for method in MIRRORED:
            defined = next((k for k in mro if method in k.__dict__), None)
            if defined is not None and not issubclass(owner, defined):
                return None
    name = name if name is not None else policy_name(policy)
    try:
        inc = make()
    except (Exception, SystemExit) as exc:  # SystemExit: a team's sys.exit() is its failure
        found = policy_failure(exc, policy, name)
        if found is None:
            raise
        raise found[0] from found[1]
    if inc is None:  # the policy has no fast path for its present settings (LPM's SGLang switches)
        return None
    lacks = [m for m in REQUIRED if not callable(getattr(inc, m, None))]
    if lacks:
        raise PolicyContractError(
            f"policy {name!r}: incremental_order() "
            f"returned {type(inc).__name__}, which has no {', '.join(m + '()' for m in lacks)}; it "
            f"must return an IncrementalOrder (fairsim/policies/incremental.py) or the policy "
            f"must not define incremental_order")
    return inc


class IncrementalOrder(Protocol):
    """A policy's order over a waiting queue maintained by snapshot changes (module docstring)."""

    def add(self, q: QueuedRequest) -> None:
        """A request joined the queue, or its snapshot changed (same ``request_id``: replace)."""
        ...

    def remove(self, request_id: str) -> None:
        """The request left the waiting queue (admitted)."""
        ...

    def iter_order(self, now: float) -> Iterator[QueuedRequest]:
        """Yield the current snapshots in ``order(snapshots, now)``'s order, lazily."""
        ...

    def __len__(self) -> int:
        """Number of waiting requests held."""
        ...


class ArrivalOrder:
    """Waiting requests in ``(arrival_time, request_id)`` order: FCFS, and the Fair lane.

    An ``OrderedDict`` keeps insertion order, which is arrival order when requests are added in
    that order (the engine's release order); a replaced snapshot keeps its place. Should a
    request arrive out of order it is re-sorted once before the next iteration, so the order is
    right in any case. ``add``/``remove`` O(1); iteration O(1) per item.

    Why an ``OrderedDict``: removals are mostly at the front (the oldest is admitted first), and
    a plain dict keeps a deleted entry's slot until it is copied or grows again, so the first
    item of an iteration is found after a scan over the removals since (about 0.5 ns each:
    13 us at 50,000). Compacting once the removals reach a quarter of the size still left a
    scan that grows with the queue (FCFS's cost per request at 10x the trace, native rate);
    an ``OrderedDict`` reaches its first item through its linked list, in the same time at any
    length. Its iteration costs more per item (about 45 ns against 11), which a read of a few
    items does not feel; ``StaleArrivalOrder``, read up to 100 items at a time, keeps a
    compacted dict.
    """

    #: The sequence moves only when a request joins or leaves (module docstring, ``moved_by``).
    moved_by = "queue"

    def __init__(self) -> None:
        self.items: dict[str, QueuedRequest] = self._new_items()
        self._last: tuple[float, str] | None = None
        self._sorted = True
        self.resolve: Callable[[QueuedRequest], QueuedRequest] | None = None
        # ``_resolved``'s compiled twin (``_merge_c.Resolved``), set with the resolver.
        self._resolved_twin: Callable[..., Iterator[QueuedRequest]] | None = None

    def set_resolver(self, resolve: Callable[[QueuedRequest], QueuedRequest]) -> None:
        """Lazy hits (``fairsim.sim.lazy_hits``): yield ``resolve(q)``, this step's snapshot.
        Read through ``_merge_c.Resolved`` (the same calls and write-backs as ``_resolved``)
        where it is built and no subclass replaces ``_resolved``."""
        self.resolve = resolve
        mod = _merge_twin()
        if mod is not None and type(self)._resolved is ArrivalOrder._resolved:
            self._resolved_twin = mod.Resolved

    def stale(self, request_ids: Any, raised: Any = None) -> None:
        """Lazy hits: these snapshots are out of date; the arrival order does not depend on them."""

    def __len__(self) -> int:
        return len(self.items)

    def add(self, q: QueuedRequest) -> None:
        """A request joined (kept in arrival order), or its snapshot changed (replaced in place)."""
        rid = q.request_id
        items = self.items
        if rid not in items:
            key = (q.arrival_time, rid)
            if self._last is not None and key < self._last:
                self._sorted = False
            else:
                self._last = key
        items[rid] = q

    #: The container of ``items``, built from ``(request_id, snapshot)`` pairs in order.
    _new_items = OrderedDict

    def remove(self, request_id: str) -> None:
        """The request left the queue."""
        del self.items[request_id]

    def _sort(self) -> None:
        """Put ``items`` in ``(arrival_time, request_id)`` order (after a late arrival)."""
        self.items = self._new_items(sorted(self.items.items(), key=lambda kv: (kv[1].arrival_time, kv[0])))
        self._sorted = True

    def iter_order(self, now: float = 0.0) -> Iterator[QueuedRequest]:
        """The snapshots by ``(arrival_time, request_id)`` (``now`` unused; resolved when lazy)."""
        if not self._sorted:
            self._sort()
        if self.resolve is None:
            return iter(self.items.values())
        if self._resolved_twin is not None:
            return self._resolved_twin(self.items, self.resolve)
        return self._resolved(self.resolve)

    def _resolved(self, resolve: Callable[[QueuedRequest], QueuedRequest]) -> Iterator[QueuedRequest]:
        items = self.items
        for rid, q in items.items():
            r = resolve(q)
            if r is not q:
                items[rid] = r  # a value change, not a size change: the iteration stays valid
            yield r


class SortedKeyOrder:
    """Waiting requests sorted by a per-snapshot key that does not depend on ``now``.

    ``key(q)`` must end with ``request_id`` (so keys are unique) and be a function of the snapshot
    alone (LPM: ``(-cached_len, arrival_time, request_id)``). Backed by a sorted list of keys
    (``fairsim.policies.sorted_keys.SortedKeys``: ``sortedcontainers.SortedList`` or its compiled
    twin): ``add``/``remove`` O(log n), iteration O(1) per item.

    ``head_changes(k)`` (a protected set's head, ``Engine._update_protected``) says how the first
    ``k`` changed since its last call; from its first call on, ``add``/``remove`` note the changes
    that can move them (a journal of O(1) per change). PEEK, which reads it at every admitting
    step, keeps its order in ``fairsim.policies.peek_order.HeadHeapOrder`` (same contract, the
    head in a plain sorted list and the rest in a heap); this class is its reference in
    ``tests/test_peek_order.py``.
    """

    #: The sequence is the held keys' (computed at ``add``), so it moves only with an add or a
    #: removal (module docstring, ``moved_by``).
    moved_by = "snapshots"

    def __init__(self, key: Callable[[QueuedRequest], tuple]) -> None:
        self.key = key
        self._keys = SortedKeys()
        self._by_id: dict[str, tuple[tuple, QueuedRequest]] = {}
        self._by_key: dict[tuple, QueuedRequest] = {}
        # head_changes' state (None until its first call): the head it last gave (key ->
        # snapshot), its last key, and the journal since: keys added at or below that key (the
        # only new keys the range walk of head_changes does not see), and the snapshots
        # removed from the head.
        self._head: dict[tuple, QueuedRequest] | None = None
        self._head_last: tuple | None = None
        self._entered: dict[tuple, None] = {}  # a dict: ordered, so the build is deterministic
        self._left: list[QueuedRequest] = []

    def __len__(self) -> int:
        return len(self._by_id)

    def add(self, q: QueuedRequest) -> None:
        old = self._by_id.get(q.request_id)
        k = self.key(q)
        if old is not None:
            if old[0] != k:
                self._keys.remove(old[0])
                self._keys.add(k)
                if self._head is not None:
                    self._note_gone(old[0])
                    self._note_new(k)
            del self._by_key[old[0]]
        else:
            self._keys.add(k)
            if self._head is not None:
                self._note_new(k)
        self._by_id[q.request_id] = (k, q)
        self._by_key[k] = q

    def remove(self, request_id: str) -> None:
        k, _ = self._by_id.pop(request_id)
        self._keys.remove(k)
        del self._by_key[k]
        if self._head is not None:
            self._note_gone(k)

    def iter_order(self, now: float = 0.0) -> Iterator[QueuedRequest]:
        return map(self._by_key.__getitem__, self._keys)  # C-level per item

    def head(self, k: int) -> list[QueuedRequest]:
        """The first ``k`` snapshots of the order (all when fewer wait)."""
        return list(map(self._by_key.__getitem__, self._keys.islice(0, k)))

    def head_changes(self, k: int) -> tuple[list[QueuedRequest], list[QueuedRequest]]:
        """How the first ``k`` of the order (all when fewer wait; none when ``k <= 0``) changed
        since the last call: ``(entered, left)``, the current snapshots of the requests among
        them now that were not at the last call, and a snapshot of each of those that were and
        are no longer (removed, re-keyed elsewhere, or pushed past the ``k``-th). A request
        re-keyed within the head is in both; one re-added with the same key in neither. The
        first call gives the whole head as entered.

        Cost: O(log n) plus the changes since the last call, not ``k``: the new head is every
        key up to its ``k``-th, so only the keys noted by ``add``/``remove`` and those between
        the two calls' last keys (the head grew or shrank there) are looked at."""
        head = self._head
        if head is None:
            head = self._head = {}
        keys = self._keys
        m = min(k, len(keys)) if k > 0 else 0
        last = keys[m - 1] if m else None  # the new head: every key <= last
        prev = self._head_last  # the old head: every key <= prev, at the last call
        by_key = self._by_key
        entered = [(key, by_key[key]) for key in self._entered if last is not None and key <= last]
        left = self._left
        if last is None:
            left.extend(head.values())
            head.clear()
        elif prev is None or last > prev:  # grew: the keys after the old last key joined
            entered.extend((key, by_key[key]) for key in keys.irange(prev, last, inclusive=(False, True)))
        elif last < prev:  # shrank: the old head's keys after the new last key left
            for key in list(keys.irange(last, prev, inclusive=(False, True))):
                q = head.pop(key, None)
                if q is not None:
                    left.append(q)
        for key, q in entered:
            head[key] = q
        self._head_last = last
        self._entered = {}
        self._left = []
        return [q for _, q in entered], left

    def _note_new(self, key: tuple) -> None:
        """head_changes' journal: a key was added (one after the head's last key is found by
        the range walk)."""
        last = self._head_last
        if last is not None and key <= last:
            self._entered[key] = None

    def _note_gone(self, key: tuple) -> None:
        """head_changes' journal: a key was removed (from the head, or one noted since)."""
        q = self._head.pop(key, None)
        if q is not None:
            self._left.append(q)
        else:
            self._entered.pop(key, None)


def _bound(q: QueuedRequest) -> QueuedRequest:
    """``q`` with the largest prefix hit its request can have: every full block of its prompt
    but the last token's (``_Live.max_hit_blocks`` in ``fairsim.sim.engine``); its own hit when
    the snapshot carries no block keys (nothing can then be hit)."""
    bs = q.block_size
    if bs <= 0 or not q.block_keys:
        return q
    h = min(len(q.block_keys), (q.prompt_len - 1) // bs) * bs
    if h <= q.cached_len:
        return q
    # ``_replace`` by position (cached_len, uncached_len: _BOUND_FIELDS), a third of its cost.
    return _make_queued(q[:3] + (h, max(1, q.prompt_len - h - q.num_computed_tokens)) + q[5:])


_make_queued = QueuedRequest._make
_BOUND_FIELDS = QueuedRequest._fields[3:5]
if _BOUND_FIELDS != ("cached_len", "uncached_len"):  # _bound builds its snapshot by position
    raise RuntimeError(f"QueuedRequest fields 3-4 are {_BOUND_FIELDS}; _bound expects cached_len, uncached_len")


class LazyKeyOrder:
    """Waiting requests by a per-snapshot key (as ``SortedKeyOrder``), taking lazy hits
    (``fairsim.sim.lazy_hits``), for a key that a falling prefix hit can only raise or keep:
    LPM-aging's ``N x first sight - h``, SJF-aging's ``c + a x arrival`` (``c = max(1, L - h)``)
    (LPM's ``-h`` would be one too); each ends with ``request_id`` (keys are unique).

    Why it is exact: a stale request (``stale``) keeps its stored key. Its hit can only have
    fallen since the order last saw its snapshot (lazy hits name in ``raised`` every request
    whose hit may have risen), so its true key is at least the stored one: a lower bound. A
    raised request (its hit may have risen, its key fallen) is stored under its key at the
    largest hit it can have (``_bound``), a lower bound again, and stays stale. A read takes
    the least stored key; a stale request met there is resolved and re-keyed (later, never
    earlier), and the read takes the least again; else it is yielded. So an item is yielded
    only when its key is exact and no stored key, hence no true key, of the requests not yet
    yielded is below it: the reference order. Under overload most stale requests lie far
    behind the few read per step and are not resolved there, where the eager path rebuilt and
    re-keyed each of them; and a request handed over as raised is not named again before it
    is resolved (``LazyHits.bounded``), so the blocks a conversation's running turn caches
    chunk by chunk do not rebuild its waiting next turn's snapshot at each chunk.

    Held in a binary heap of keys (``heapq``'s algorithm; where built, its compiled twin with the
    key tuples compared in C: ``fairsim.policies.sorted_keys``) rather than a ``SortedList``: a
    step reads a few items, and a heap push is a fraction of a sorted insertion. A key replaced or
    removed stays in the heap, dead (its request's stored key differs, or it left), and is
    dropped when it comes to the top; the heap is rebuilt from the live keys once the dead
    outnumber them; a key pushed again while a copy of it waits (re-keyed away and back) is
    taken once. The items a read took off the heap go back at the next read (those still held
    under the same key). ``add``/``remove``/``stale`` O(log n) amortised; a read
    O(log n) per item taken.

    Raises:
        RuntimeError: A re-keyed stale request's key fell (``key`` is not of the kind above),
            so the order read so far may be wrong.
    """

    #: With lazy hits the whole sequence can move without being told (a stale request's hit
    #: falls silently), so only the first item is declared (``fairsim.sim.decode_fast``).
    moved_by = None
    head_moved_by = "snapshots"
    #: A silent fall of a stale request's hit moves it later only, never before the first
    #: item, whose own changes are told (read by ``DecodeFastEngine``'s skip with lazy hits).
    falls_behind = True

    def __init__(self, key: Callable[[QueuedRequest], tuple],
                 bound_key: Callable[[QueuedRequest], tuple] | None = None) -> None:
        self.key = key
        # ``key(_bound(q))``, or a function giving the same key without building the bound
        # snapshot (``longest_bound_key``): it runs once per raised request.
        self.bound_key = bound_key
        self._heap: list[tuple] = []
        self._by_id: dict[str, tuple[tuple, QueuedRequest]] = {}  # request_id -> (stored key, snapshot)
        self._taken: list[tuple] = []  # keys the last read took off the heap
        self._stale: set[str] = set()
        self.resolve: Callable[[QueuedRequest], QueuedRequest] | None = None

    def __len__(self) -> int:
        return len(self._by_id)

    def set_resolver(self, resolve: Callable[[QueuedRequest], QueuedRequest]) -> None:
        """Lazy hits: stale requests are re-keyed from ``resolve(q)``, this step's snapshot."""
        self.resolve = resolve

    def add(self, q: QueuedRequest) -> None:
        """A request joined, or its snapshot changed (exact again: no longer stale)."""
        rid = q.request_id
        k = self.key(q)
        by_id = self._by_id
        old = by_id.get(rid)
        by_id[rid] = (k, q)
        if old is None or old[0] != k:
            heap = self._heap
            heappush(heap, k)
            if len(heap) > 2 * len(by_id) + 64:  # the test of ``_compact``, inlined (hot)
                self._compact()
        if old is not None:
            self._stale.discard(rid)

    def remove(self, request_id: str) -> None:
        by_id = self._by_id
        del by_id[request_id]
        self._stale.discard(request_id)
        if len(self._heap) > 2 * len(by_id) + 64:
            self._compact()

    def stale(self, request_ids: list[str], raised: list[str] | None = None) -> None:
        """Lazy hits: these stored keys are lower bounds now (class docstring); those in
        ``raised`` (all for ``None``) may have risen, so their key is lowered to a bound: the key
        at the largest hit the request can have (``_bound``, or ``bound_key``), till a read
        resolves them."""
        by_id = self._by_id
        stale = self._stale
        stale.update(request_ids)  # held ones (lazy hits names no other; ``_read`` checks anyway)
        heap, key, bound_key = self._heap, self.key, self.bound_key
        for rid in (request_ids if raised is None else raised):
            held = by_id.get(rid)
            if held is not None:
                k, q = held
                stale.add(rid)
                bound = key(_bound(q)) if bound_key is None else bound_key(q)
                if bound < k:
                    by_id[rid] = (bound, q)
                    heappush(heap, bound)
        self._compact()

    def _compact(self) -> None:
        """Rebuild the heap from the live keys once the dead ones outnumber them."""
        heap = self._heap
        if len(heap) > 2 * len(self._by_id) + 64:
            self._taken = []
            heap[:] = [k for k, _ in self._by_id.values()]
            heapify(heap)

    def _put_back(self) -> None:
        """The keys the last read took that are still live go back on the heap."""
        by_id, heap = self._by_id, self._heap
        for k in self._taken:
            held = by_id.get(k[-1])
            if held is not None and held[0] == k:
                heappush(heap, k)
        self._taken = []

    def iter_order(self, now: float = 0.0) -> Iterator[QueuedRequest]:
        """The snapshots by ascending key, exact as read (class docstring); ``now`` unused."""
        self._put_back()
        return self._read()

    def _read(self) -> Iterator[QueuedRequest]:
        heap, by_id, stale, taken = self._heap, self._by_id, self._stale, self._taken
        key, resolve = self.key, self.resolve
        while heap:
            k = heappop(heap)
            rid = k[-1]
            held = by_id.get(rid)
            if held is None or held[0] != k:
                continue  # dead: removed, or stored under another key since
            q = held[1]
            if stale and rid in stale:
                stale.discard(rid)
                q = resolve(q)
                true = key(q)
                if true < k:
                    raise RuntimeError(
                        f"LazyKeyOrder: the key of stale request {rid!r} fell from {k!r} to "
                        f"{true!r}; a falling hit must not lower the key")
                by_id[rid] = (true, q)
                if true != k:
                    heappush(heap, true)  # moved later: take the least again
                    continue
            while heap and heap[0] == k:
                heappop(heap)  # a copy of k pushed again (re-keyed away and back): one is live
            taken.append(k)
            yield q


def merge_lanes(fast: Iterator[QueuedRequest], fair: Iterator[QueuedRequest], n: int,
                fast_weight: float, fair_weight: float,
                fast_ledger0: float | None = None,
                carried: float = 0.0, oldest: str | None = None) -> Iterator[QueuedRequest]:
    """Fairway's merge of the two lanes (``Fairway.order`` / ``FairwayCarry.order``), lazily.

    The reference of its compiled twin ``_merge_c.Merge`` (``merge_of``).

    Args:
        fast, fair: The lanes, each yielding all ``n`` waiting snapshots.
        n: Number of waiting requests (>= 1).
        fast_weight, fair_weight: Work charge multipliers.
        fast_ledger0: Initial Fast ledger before ``carried``; ``None``: ``fast_weight x c`` of the
            Fast lane's front (the paper's pre-charge).
        carried: Fairway-carry's ``fast_weight x debt``, taken off once ``oldest`` is placed.
        oldest: ``request_id`` of the oldest request (Fairway-carry), else ``None``.
    """
    placed: set[str] = set()
    fast_head = next(fast)
    fair_head = next(fair)
    fast_ledger = (fast_weight * fast_head.uncached_len if fast_ledger0 is None else fast_ledger0) + carried
    fair_ledger = fair_weight * fair_head.uncached_len
    for _ in range(n):
        if fast_ledger <= fair_ledger:  # tie -> Fast
            while fast_head.request_id in placed:
                fast_head = next(fast)
            x = fast_head
            fast_ledger += fast_weight * x.uncached_len
        else:
            while fair_head.request_id in placed:
                fair_head = next(fair)
            x = fair_head
            fair_ledger += fair_weight * x.uncached_len
        placed.add(x.request_id)
        yield x
        if oldest is not None and x.request_id == oldest:
            fast_ledger -= carried
            carried = 0.0
            oldest = None


def merge_of(fast_weight: Any, fair_weight: Any) -> Callable[..., Iterator[QueuedRequest]]:
    """``merge_lanes``, or its compiled twin ``_merge_c.Merge`` (same arguments, same items, same
    lane reads) where it is built and both weights are ``float`` objects: the twin's ledgers are C
    doubles, which are Python's floats only when every charge is ``float * int`` (Fairway's
    weights are, ``Fairway.__init__``)."""
    mod = _merge_twin()
    if mod is None or type(fast_weight) is not float or type(fair_weight) is not float:
        return merge_lanes
    return mod.Merge


class Lanes:
    """Several incremental orders fed the same changes (k-LPM's two lanes, Fairway's two lanes).

    ``iter_order`` is given by ``combine(now, *lanes)``. ``LazyLanes``: lanes that all take lazy
    hits (``set_resolver``/``stale``).
    """

    #: Unknown in general (``combine`` may read the clock); set per instance where known.
    moved_by: str | None = None
    #: Optional ``head_until(now)``: the clock (s) up to which the first item stays the last
    #: read's and a read changes nothing, while nothing is told to the lanes; ``None`` when not
    #: known (Fairway's family: ``FastLane.kept_until``; ``fairsim.sim.decode_fast``).
    head_until: Callable[[float], float | None] | None = None

    def __init__(self, combine: Callable[..., Iterator[QueuedRequest]], *lanes: Any) -> None:
        self.lanes = lanes
        self.combine = combine

    def __len__(self) -> int:
        return len(self.lanes[0])

    def add(self, q: QueuedRequest) -> None:
        for lane in self.lanes:
            lane.add(q)

    def remove(self, request_id: str) -> None:
        for lane in self.lanes:
            lane.remove(request_id)

    def iter_order(self, now: float) -> Iterator[QueuedRequest]:
        return self.combine(now, *self.lanes)


class LazyLanes(Lanes):
    """``Lanes`` whose lanes all take lazy hits (``fairsim.sim.lazy_hits``): Fairway's two.

    Over a Fast lane and an ``ArrivalOrder`` (Fairway's family), ``add``, ``remove`` and ``stale``
    are the compiled ``_merge_c.LanePair``'s where it is built (the same calls to the Fast lane,
    ``ArrivalOrder.add``/``remove`` inline, no call of its empty ``stale``), bound on the
    instance; a subclass or patch that replaces one of them is called as it is.
    """

    def __init__(self, combine: Callable[..., Iterator[QueuedRequest]], *lanes: Any) -> None:
        super().__init__(combine, *lanes)
        mod = _merge_twin()
        if mod is None or len(lanes) != 2 or type(lanes[1]) is not ArrivalOrder:
            return
        pair = mod.LanePair(*lanes)
        cls = type(self)
        for name, reference in (("add", Lanes.add), ("remove", Lanes.remove), ("stale", _LAZY_STALE)):
            if getattr(cls, name) is reference:
                setattr(self, name, getattr(pair, name))

    def set_resolver(self, resolve: Callable[[QueuedRequest], QueuedRequest]) -> None:
        """Lazy hits: every lane yields ``resolve(q)``, this step's snapshot of ``q``'s request."""
        for lane in self.lanes:
            lane.set_resolver(resolve)

    def stale(self, request_ids: list[str], raised: list[str] | None = None) -> None:
        """Lazy hits: these requests' snapshots are out of date; ``raised`` names those whose hit
        may have risen (``None``: any of them). Passed to every lane (module docstring)."""
        for lane in self.lanes:
            lane.stale(request_ids, raised)


_LAZY_STALE = LazyLanes.stale  # the reference ``stale`` (a patched one is not replaced: ``__init__``)


class _UncachedView:
    """``request_id -> uncached_len`` over an ``ArrivalOrder`` (Fairway-carry's ``_work``), from
    this step's snapshots (resolved, with lazy hits)."""

    def __init__(self, lane: ArrivalOrder) -> None:
        self._lane = lane  # its ``items`` dict is replaced when compacted or re-sorted: read it each time

    def get(self, request_id: str, default: Any = None) -> Any:
        lane = self._lane
        q = lane.items.get(request_id)
        if q is None:
            return default
        return (q if lane.resolve is None else lane.resolve(q)).uncached_len


def _small_merge(fast: FastLane, now: float, fast_w: float, fair_w: float,
                 fast_ledger0: float | None = None, carried: float = 0.0,
                 oldest: bool = False, merge: Callable[..., Iterator[QueuedRequest]] = merge_lanes,
                 ) -> Iterator[QueuedRequest] | None:
    """Fairway's merge over a small Fast lane (``FastLane.small_lane``: this step's snapshots in
    both lane orders, no buckets), yielded through the resolver; ``None`` when the lane is
    bucketed. ``oldest``: ``carried`` comes off once the Fair lane's front is placed
    (Fairway-carry's debt); ``merge``: ``merge_lanes`` or its twin (``merge_of``); the other
    arguments are ``merge_lanes``'s."""
    small = fast.small_lane(now)
    if small is None:
        return None
    by_arrival, order = small
    merged = merge(iter(order), iter(by_arrival), len(order), fast_w, fair_w, fast_ledger0,
                   carried, by_arrival[0].request_id if oldest else None)
    res = fast._resolve
    return merged if res is None else map(res, merged)


def fairway_order(policy: Any) -> Lanes:
    """The fast path of ``Fairway`` (``fairway``, ``fairway-abswait``, ``fairway-nofair``)."""
    fast_w, fair_w = policy.fast_weight, policy.fair_weight

    if not policy.fair_lane:  # the ablation reads the Fast lane alone: keep no Fair lane
        fast = FastLane(policy.slo)
        lanes = LazyLanes(lambda now, fast: fast.iter_order(now), fast)
        lanes.head_until = fast.kept_until
        return lanes

    def combine(now: float, fast: FastLane, fair: ArrivalOrder) -> Iterator[QueuedRequest]:
        n = len(fast)
        if n <= 1:
            return fast.iter_order(now)
        small = _small_merge(fast, now, fast_w, fair_w, merge=merge)
        if small is not None:
            return small
        return merge(fast._bucket_order(now), fair.iter_order(now), n, fast_w, fair_w)  # (bucketed_order's body)

    merge = merge_of(fast_w, fair_w)

    fast = FastLane(policy.slo)
    lanes = LazyLanes(combine, fast, ArrivalOrder())
    # The merge's first is the Fast lane's or the Fair lane's front, chosen by their snapshots:
    # while the Fast lane keeps its first (nothing told since), the merge's is the same.
    lanes.head_until = fast.kept_until
    return lanes


def fairway_carry_order(policy: Any, see_oldest: Callable[[QueuedRequest, float], None] | None = None) -> Lanes:
    """The fast path of ``FairwayCarry`` (``fairway-carry``, ``fairway-plus``): same state updates
    as ``FairwayCarry.order`` (the oldest and its debt, ``_work``), made when ``iter_order`` is
    called, not when it is read. ``see_oldest(oldest, now)`` replaces the carry's rule for a new
    oldest request (a new oldest starts with no debt): ``fairway-patience`` passes its ``arm``."""
    fast_w, fair_w = policy.fast_weight, policy.fair_weight

    def combine(now: float, fast: FastLane, fair: ArrivalOrder) -> Iterator[QueuedRequest]:
        n = len(fast)
        policy._work = _UncachedView(fair)
        if n == 0:
            return iter(())
        fair_it = fair.iter_order(now)
        o = next(iter(fair.items.values()))
        if see_oldest is not None:
            see_oldest(o, now)
        elif o.request_id != policy.oldest:
            policy.oldest, policy.debt = o.request_id, 0.0
        if n == 1:
            return fair_it  # o alone (this step's snapshot of it)
        small = _small_merge(fast, now, fast_w, fair_w, 0.0 if policy.fast_first else None,
                             fast_w * policy.debt, True, merge)
        if small is not None:
            return small
        return merge(fast._bucket_order(now), fair_it, n, fast_w, fair_w,
                     0.0 if policy.fast_first else None, fast_w * policy.debt, o.request_id)

    merge = merge_of(fast_w, fair_w)

    fast = FastLane(policy.slo, policy.wait_cap)
    lanes = LazyLanes(combine, fast, ArrivalOrder())
    # As Fairway's, with the oldest and its debt, which move only with the membership and at
    # admissions. Fairway-patience's ``see_oldest`` arms with the clock, but arming alone moves
    # no item: the debt stays 0 until an admission in an armed step (counted by the engine), and
    # ``armed`` is set anew from the clock at every read (once past its patience the oldest
    # stays so), so a skipped read leaves the state the next read would leave anyway.
    lanes.head_until = fast.kept_until
    return lanes


def klpm_order(policy: Any) -> Lanes:
    """The fast path of ``KLPM``: the oldest-first and longest-prefix lanes, picked by turns.

    Both lanes take lazy hits (``LazyLanes``; LPM's key ``-h`` only rises when a hit falls, so
    the longest lane is a ``LazyKeyOrder``): k-LPM's oldest-request turns leave a longer backlog
    than LPM's, and under overload with shared prefixes (agent templates) the eager lane re-keyed
    every waiting request whose hit changed (docs/performance.md, "k-LPM's lanes lazy")."""

    def combine(now: float, oldest_lane: ArrivalOrder, longest_lane: SortedKeyOrder) -> Iterator[QueuedRequest]:
        return _klpm_picks(oldest_lane.iter_order(now), longest_lane.iter_order(now),
                           len(oldest_lane), policy.turn, policy.k)

    lanes = LazyLanes(combine, ArrivalOrder(), LazyKeyOrder(longest_key, longest_bound_key))
    # Its picks follow the two lanes and ``policy.turn``, which moves only at admissions. With
    # lazy hits the sequence can move untold (``LazyKeyOrder.moved_by``), the first pick not:
    # the oldest lane's first moves with membership only, the longest lane's as
    # ``LazyKeyOrder``'s head (``falls_behind``).
    lanes.head_moved_by = "snapshots"
    lanes.falls_behind = True
    return lanes


def _klpm_picks(oldest: Iterator[QueuedRequest], longest: Iterator[QueuedRequest], n: int,
                t: int, k: int) -> Iterator[QueuedRequest]:
    if k == 1:
        yield from oldest
        return
    placed: set[str] = set()
    o_head = l_head = None
    for pick in range(n):
        if (t + pick) % k == 0:
            if o_head is None:
                o_head = next(oldest)
            while o_head.request_id in placed:
                o_head = next(oldest)
            x = o_head
        else:
            if l_head is None:
                l_head = next(longest)
            while l_head.request_id in placed:
                l_head = next(longest)
            x = l_head
        placed.add(x.request_id)
        yield x


def longest_key(q: QueuedRequest) -> tuple[int, float, str]:
    """LPM's key: longest cached prefix first, ties by arrival then ``request_id``."""
    return (-q.cached_len, q.arrival_time, q.request_id)


def longest_bound_key(q: QueuedRequest) -> tuple[int, float, str]:
    """``longest_key(_bound(q))``, without building the bound snapshot: the key at the largest
    hit ``q``'s request can have (``_bound``: every full block but the last token's, or its own
    hit where that is more or the snapshot carries no block keys)."""
    h = q.cached_len
    bs = q.block_size
    if bs > 0 and q.block_keys:
        most = min(len(q.block_keys), (q.prompt_len - 1) // bs) * bs
        if most > h:
            h = most
    return (-h, q.arrival_time, q.request_id)


class StaleArrivalOrder(ArrivalOrder):
    """``ArrivalOrder`` that remembers which held snapshots lazy hits made stale and resolves
    only those when a read reaches them; with none stale a read is the dict's own iteration
    (C-level), where ``ArrivalOrder`` calls the resolver on every item yielded. For an order
    that reads many items per step and whose requests' hits seldom change: Preble's lanes (up
    to ``(g + 1) x 10`` items read per step). ``stale`` takes held ids only.

    Its snapshots are in a plain dict (iterated at about 11 ns an item against an
    ``OrderedDict``'s 45), compacted (copied) once the removals since the last copy reach a
    quarter of its size and 1,024: the first item is found after a scan over the deleted slots
    left by those removals (``ArrivalOrder``), short at a lane's length."""

    #: Least removals before a compaction (a copy of a small dict would cost more than its scan).
    COMPACT_MIN = 1024

    _new_items = dict

    def __init__(self) -> None:
        super().__init__()
        self._stale: set[str] = set()
        self._removed = 0  # removals since the dict was built or last compacted

    def stale(self, request_ids: Any, raised: Any = None) -> None:
        """Lazy hits: these held snapshots are out of date (resolved when read)."""
        self._stale.update(request_ids)

    def add(self, q: QueuedRequest) -> None:
        super().add(q)
        self._stale.discard(q.request_id)

    def remove(self, request_id: str) -> None:
        del self.items[request_id]
        self._stale.discard(request_id)
        self._removed += 1
        if self._removed >= self.COMPACT_MIN and self._removed >= len(self.items) >> 2:
            self.items = dict(self.items)  # same order, no deleted slots
            self._removed = 0

    def iter_order(self, now: float = 0.0) -> Iterator[QueuedRequest]:
        if not self._sorted:  # a late arrival (``ArrivalOrder.iter_order``)
            self._sort()
        if self._stale and self.resolve is not None:
            return self._fresh()
        return iter(self.items.values())  # every held snapshot is this step's

    def _fresh(self) -> Iterator[QueuedRequest]:
        yield from resolve_stale(self.items, self._stale, self.resolve)


class PrebleOrder:
    """The fast path of ``Preble``: one arrival-ordered lane per hit group.

    A request's group is fixed by ``Preble.group_of`` when it is first added (the first step whose
    order sees it, as in ``Preble.order``); ``iter_order`` moves the pointer and sets
    ``admission_limit`` at once, as ``order()`` does, and yields the served group, then the other
    groups 9..0, each in arrival order.
    """

    def __init__(self, policy: Any, num_groups: int, quota: int) -> None:
        self.policy = policy
        self.num_groups = num_groups
        self.quota = quota
        self.lanes = [StaleArrivalOrder() for _ in range(num_groups)]
        self._lane_of: dict[str, int] = {}
        self._sizes = [0] * num_groups  # requests per group (len of each lane, without a call)
        #: The group the last ``iter_order`` served (None before the first).
        self.served: int | None = None

    def __len__(self) -> int:
        return len(self._lane_of)

    def set_resolver(self, resolve: Callable[[QueuedRequest], QueuedRequest]) -> None:
        """Lazy hits (``fairsim.sim.lazy_hits``): a lane yields ``resolve(q)`` for a stale
        snapshot (``stale``). A request's group is fixed at its first ``add`` (a new request's
        fresh snapshot), so no later hit moves it."""
        for lane in self.lanes:
            lane.set_resolver(resolve)

    def stale(self, request_ids: list[str], raised: list[str] | None = None) -> None:
        """Lazy hits: the lanes are in arrival order and the groups fixed, so nothing moves;
        each lane resolves its stale snapshots when read (``StaleArrivalOrder``)."""
        lane_of, lanes = self._lane_of, self.lanes
        for ids in (request_ids, raised or ()):
            for rid in ids:
                g = lane_of.get(rid)
                if g is not None:
                    lanes[g].stale((rid,))

    def add(self, q: QueuedRequest) -> None:
        g = self._lane_of.get(q.request_id)
        if g is None:
            g = self._lane_of[q.request_id] = self.policy.group_of(q)
            self._sizes[g] += 1
        self.lanes[g].add(q)

    def remove(self, request_id: str) -> None:
        g = self._lane_of.pop(request_id)
        self._sizes[g] -= 1
        self.lanes[g].remove(request_id)

    def iter_order(self, now: float) -> Iterator[QueuedRequest]:
        policy, lanes, groups = self.policy, self.lanes, self.num_groups
        if not self._lane_of:
            policy.admission_limit = 0
            return iter(())
        g = self._serve()
        # The served group first, read through C-level chains (the engine reads at most
        # ``admission_limit`` items, all of the served group); the others only complete the
        # permutation, each lane's read started when it is reached.
        rest = (lanes[x].iter_order(now) for x in range(groups - 1, -1, -1) if x != g)
        return chain(lanes[g].iter_order(now), chain.from_iterable(rest))

    def _serve(self) -> int:
        """A read's state change (``Preble.order``): the first non-empty group from the pointer
        down is served, the pointer moves below it and ``admission_limit`` is its cap; returns
        the group. Needs a waiting request."""
        policy, sizes, groups = self.policy, self._sizes, self.num_groups
        g = policy.pointer
        while not sizes[g]:
            g = (g - 1) % groups
        policy.pointer = (g - 1) % groups
        policy.admission_limit = min(sizes[g], (g + 1) * self.quota)
        self.served = g
        return g

    def turn_groups(self) -> list[int]:
        """The non-empty groups: with the membership unchanged, the reads serve them in turn."""
        return [g for g, size in enumerate(self._sizes) if size]

    def skip_reads(self, count: int) -> None:
        """The state ``count`` reads would leave (pointer, ``admission_limit``, ``served``) with
        the membership unchanged; a read's only state change is ``_serve``'s (the groups are
        fixed and the lanes resolve stale snapshots without moving: ``stale``). The served
        groups repeat with the period of the non-empty groups, so at most that many are
        walked (``DecodeFastEngine``'s skip of attempts that cannot admit; needs a waiting
        request)."""
        if count <= 0:
            return
        period = len(self.turn_groups())
        for _ in range((count - 1) % period + 1):
            self._serve()
