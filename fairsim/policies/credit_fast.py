"""Fast paths (``incremental_order``) of the credit policies VTC and DRR.

Both reference ``order()``s (``fairsim/policies/vtc.py``, ``drr.py``) rebuild their classes and
replay the whole queue every step: O(n log n) Python work and, for DRR, a state log of every
placement, although a step admits a few requests (a hot path). The objects here keep the classes'
FIFO queues across steps (``sortedcontainers``), fed by the engine's ``add``/``remove``
(``fairsim.policies.incremental``), and produce the same order lazily, so reading the first ``k``
items costs about O(k log n) plus the work of the classes that changed since the last call.

Both take lazy hits (``fairsim.sim.lazy_hits``): a class, its FIFO position and VTC's key do
not depend on a request's prefix hit, only the charges (``uncached_len``) of the requests an order
reads do, so a cache event moves nothing here (DRR only notes a lower bound of a stale
request's charge, ``DRROrder.stale``) and every snapshot read goes through the engine's resolver
(this step's snapshot). Under overload, where a block shared by thousands of
waiting requests flips again and again, the eager path rebuilt and re-added all their snapshots
at the next step (measured: DRR's cost per request grew 1.9x on the conversation trace tiled
10x).

They share the policy object's state (counters, deficits, ring, cursor) and update it exactly
where the reference does: the per-call bookkeeping (VTC's lift, DRR's ring update) when
``iter_order`` is called, the scratch log of placements as the order is read, and the real
state in the policy's own ``on_admitted``. ``tests/test_fast_order.py`` checks that the engine
makes identical decisions with and without them.
"""

from __future__ import annotations

import heapq
import itertools
import math
from bisect import bisect_left, insort
from collections.abc import Callable, Hashable, Iterator
from typing import Any

from fairsim.policies.clients import client_key
from fairsim.policies import compiled_twins
from fairsim.policies.fast_lane import max_hit
from fairsim.policies.sorted_keys import SortedKeys
from fairsim.types import QueuedRequest

class ClassQueues:
    """Waiting snapshots grouped by class (``client_key``), each class in ``arrival_key`` order.

    ``touched`` collects the classes whose membership changed (a request joined or left) since
    the owner last cleared it. With a resolver (``set_resolver``, lazy hits) a stored snapshot
    is read through it (``current``): the stored one is that of the request's arrival, of a
    later ``add``, or (``DRROrder``) the last one read, and may be out of date. Each class is a
    plain sorted list (``bisect``): most classes hold a few requests, where a list is several
    times cheaper to build, index and update than a ``SortedList``; ``add``/``remove`` O(log n)
    comparisons plus a C ``memmove`` of the class.
    """

    def __init__(self) -> None:
        self.queues: dict[Hashable, list] = {}  # class -> sorted list of (arrival, rid)
        self.items: dict[str, tuple[Hashable, QueuedRequest]] = {}
        self.touched: set[Hashable] = set()
        self.resolve: Callable[[QueuedRequest], QueuedRequest] | None = None

    def __len__(self) -> int:
        return len(self.items)

    def set_resolver(self, resolve: Callable[[QueuedRequest], QueuedRequest]) -> None:
        """Lazy hits: read every stored snapshot as ``resolve(q)`` (this step's snapshot)."""
        self.resolve = resolve

    def stale(self, request_ids: Any, raised: Any = None) -> None:
        """Lazy hits: these snapshots are out of date (``raised``: those whose hit may have
        risen; unused). Classes and FIFO keys do not depend on them, and every read resolves:
        nothing to do."""

    def current(self, request_id: str) -> QueuedRequest:
        """This step's snapshot of a held request (resolved with lazy hits)."""
        q = self.items[request_id][1]
        return q if self.resolve is None else self.resolve(q)

    def add(self, q: QueuedRequest) -> None:
        rid = q.request_id
        old = self.items.get(rid)
        if old is not None:  # a fresh snapshot of a held request: its class and arrival are fixed
            self.items[rid] = (old[0], q)
            return
        u = client_key(q)
        self.items[rid] = (u, q)
        queue = self.queues.get(u)
        if queue is None:
            self.queues[u] = [(q.arrival_time, rid)]
        else:
            insort(queue, (q.arrival_time, rid))
        self.touched.add(u)

    def remove(self, request_id: str) -> None:
        u, q = self.items.pop(request_id)
        queue = self.queues[u]
        del queue[bisect_left(queue, (q.arrival_time, request_id))]
        if not queue:
            del self.queues[u]
        self.touched.add(u)


class RunSortedKeys:
    """Unique keys in sorted order: a sorted list of keys (``SortedKeys``) and, above all of
    them, a *run* of keys added in increasing order, kept in a dict (insertion order is sorted
    order).

    VTC with one request per class (a trace without client labels: each request is its own
    class) keys every new class ``(floor, arrival, id)`` with the same floor, in arrival order,
    and removes the oldest: each key joins the run's end and leaves from its front, O(1) dict
    work where a ``SortedList`` add and remove cost about 2 us each (24,000 of them on the
    conversation trace). A key below the run's last key goes to the sorted list when it is also
    below the run's first key (every sorted key stays below every run key), else the run is
    moved into the sorted list first, so with keys added out of order this costs what the
    sorted list alone would, plus that move. Iteration: the sorted list, then the run. As
    ``fairsim.policies.incremental.ArrivalOrder``, the run is compacted (copied) once its
    removals reach a quarter of it (and 1,024): a dict keeps a deleted slot until it grows, and
    reading its first key scans them.
    """

    COMPACT_MIN = 1024

    def __init__(self) -> None:
        self._sorted = SortedKeys()
        self._run: dict[tuple, None] = {}
        self._last: tuple | None = None  # the run's largest key (its last), None when empty
        self._removed = 0  # removals from the run since it was built or last compacted

    def __len__(self) -> int:
        return len(self._sorted) + len(self._run)

    def __iter__(self) -> Iterator[tuple]:
        return itertools.chain(self._sorted, self._run) if self._sorted else iter(self._run)

    def first(self) -> tuple:
        """The least key (``IndexError`` when empty)."""
        if self._sorted:
            return self._sorted[0]
        for key in self._run:
            return key
        raise IndexError("no keys")

    def add(self, key: tuple) -> None:
        last = self._last
        if last is None:
            s = self._sorted
            if not s or key > s[-1]:
                self._run[key] = None
                self._last = key
            else:
                s.add(key)
        elif key > last:
            self._run[key] = None
            self._last = key
        elif key < next(iter(self._run)):
            self._sorted.add(key)
        else:  # inside the run: the run joins the sorted list
            self._sorted.update(self._run)
            self._run = {}
            self._last = None
            self._removed = 0
            self._sorted.add(key)

    def remove(self, key: tuple) -> None:
        run = self._run
        if key not in run:
            self._sorted.remove(key)
            return
        del run[key]
        if not run:
            self._run = {}
            self._last = None
            self._removed = 0
            return
        if key == self._last:
            self._last = next(reversed(run))
        self._removed += 1
        if self._removed >= self.COMPACT_MIN and self._removed >= len(run) >> 2:
            self._run = dict(run)  # same order, no deleted slots
            self._removed = 0


class VTCOrder(ClassQueues):
    """``VTC.order`` kept across steps: classes sorted by ``(counter, head arrival, head id)``.

    ``iter_order`` performs VTC's lift for the classes that joined or left since the last call
    (the reference compares the whole backlogged set; only touched classes can differ; a class
    that admissions emptied already left in ``VTC.on_admitted`` and joins again if refilled), then
    merges the sorted classes with a small heap of the classes already served in this order
    (their key grows by ``input_weight x charge`` per placement, as in ``VTC.order``).
    """

    #: The first item is the oldest request of the class with the least key ``(counter, head
    #: arrival, head id)``: the counters move only at ``_sync`` (classes that joined or left)
    #: and ``VTC.on_admitted``, the class queues only with ``add``/``remove``; the charges
    #: (snapshots) order only the items after it, and a read's bookkeeping (``_placed``,
    #: ``_class_size``) is redone by the next read (``fairsim.policies.incremental``).
    head_moved_by = "queue"

    def __init__(self, policy: Any) -> None:
        super().__init__()
        self.policy = policy
        self._keys = RunSortedKeys()  # (counter, head arrival, head rid) per backlogged class
        self._key_of: dict[Hashable, tuple] = {}
        self._class_of_rid: dict[str, Hashable] = {}  # head rid -> class

    def _sync(self) -> None:
        """VTC's lift for the touched classes (``VTC._lift``): the leavers leave, the keys of the
        classes that stayed are refreshed, then the floor is the least key's counter (every
        class still backlogged has a key, each with its current counter, and no other class
        has one), then the joiners are lifted to it and keyed. Only a touched class can have
        left, joined or (``VTC.on_admitted``) changed its counter."""
        touched = self.touched
        if not touched:
            return
        policy = self.policy
        counter, backlogged, queues = policy.counter, policy._backlogged, self.queues
        new = []
        left = []
        for u in touched:
            if u in queues:
                if u in backlogged:
                    self._refresh(u)  # stayed: on_admitted may have charged it
                else:
                    new.append(u)  # new, or emptied by admissions and refilled: lifted below
                    self._drop_key(u)
            else:
                if u in backlogged:
                    left.append(u)
                self._drop_key(u)
        if left:
            policy._last_left = max(counter.get(u, 0.0) for u in left)
            for u in left:
                backlogged.discard(u)
        keys = self._keys
        floor = keys.first()[0] if len(keys) else policy._last_left
        if len(new) > 1:  # by head, so that keys of one floor join the run in order
            new.sort(key=lambda u: queues[u][0])
        for u in new:
            counter[u] = max(counter.get(u, 0.0), floor)
            backlogged.add(u)
            self._refresh(u)
        touched.clear()

    def _drop_key(self, u: Hashable) -> None:
        old = self._key_of.pop(u, None)
        if old is not None:
            self._keys.remove(old)
            del self._class_of_rid[old[2]]

    def _refresh(self, u: Hashable) -> None:
        """Key ``u`` (it has waiting requests) by its counter and head; no sorted-list work
        when the key did not change (a request behind its head joined or left)."""
        queue = self.queues[u]
        arr, rid = queue[0]
        key = (self.policy.counter[u], arr, rid)
        old = self._key_of.get(u)
        if old == key:
            return
        if old is not None:
            self._keys.remove(old)
            del self._class_of_rid[old[2]]
        self._key_of[u] = key
        self._keys.add(key)
        self._class_of_rid[rid] = u

    def iter_order(self, now: float) -> Iterator[QueuedRequest]:
        self._sync()
        self.policy._placed = {}
        self.policy._class_size = {}
        return self._merge()

    def _merge(self) -> Iterator[QueuedRequest]:
        w = self.policy.input_weight
        placed, class_size = self.policy._placed, self.policy._class_size
        queues, items, class_of, resolve = self.queues, self.items, self._class_of_rid, self.resolve
        heap: list[tuple] = []
        it = iter(self._keys)
        nxt = next(it, None)
        while True:
            if heap and (nxt is None or heap[0][:3] < nxt):
                value, _, rid, u, i = heapq.heappop(heap)
            elif nxt is None:
                return
            else:
                value, _, rid = nxt
                u, i = class_of[rid], 0
                nxt = next(it, None)
                class_size[u] = len(queues[u])  # VTC.on_admitted: did admissions empty u?
            r = items[rid][1]
            if resolve is not None:
                r = resolve(r)
            placed[rid] = (u, r.uncached_len)
            yield r
            i += 1
            queue = queues[u]
            if i < len(queue):
                arr2, rid2 = queue[i]
                heapq.heappush(heap, (value + w * r.uncached_len, arr2, rid2, u, i))


class DRROrder(ClassQueues):
    """``DRR.order`` kept across steps: the ring as a circular linked list, visits replayed lazily.

    ``iter_order`` applies ``DRR._update_ring``'s rules to the classes that changed since the
    last call (a class leaves when emptied by admissions or without waiting requests, new
    classes join at the end of the round, before the cursor, by head arrival; the cursor moves
    to the next surviving class), then returns a generator that runs ``DRR.order``'s visit loop
    on scratch overlays of the ring and the deficits, logging into the policy's ``Replay`` exactly as the reference does, so
    ``DRR.on_admitted`` commits the same state. A round that serves nobody still costs O(ring)
    (the reference's skip of empty rounds), any other item O(log n).
    """

    #: The visits follow the membership, the snapshots and the ring and deficits, which only an
    #: admission changes (``DRR.on_admitted`` commits the log of the read it admitted from; a read
    #: starts by discarding the last read's), never the clock: a read changes nothing the next
    #: sees (``fairsim.policies.incremental``, the colocated skip of blocked admissions).
    head_moved_by = "snapshots"
    #: With lazy hits a stale head is priced by a lower bound of its charge (``_lo``) and
    #: resolved only where the class can afford that bound; a silent fall of its hit raises the
    #: charge, which leaves the bound valid, so while no change waits to be told a read makes
    #: the last read's visits (``DecodeFastEngine._head_unmoved``).
    falls_behind = True

    def __init__(self, policy: Any) -> None:
        super().__init__()
        self.policy = policy
        self._nxt: dict[Hashable, Hashable] = {}
        self._prv: dict[Hashable, Hashable] = {}
        self._first: Hashable | None = None  # DRR.ring[0]
        # Lazy hits: request_id -> a lower bound of the charge (uncached_len) of a stale request,
        # until it is next read (``stale``). A visit whose class cannot afford even the bound is
        # idle whatever the exact charge, so the head's snapshot is not rebuilt for it: under
        # overload nearly every visited head is stale (its blocks were evicted since the last
        # round) and most visits are idle (measured: 5.6 rebuilds per admission on the
        # conversation trace tiled 10x).
        self._lo: dict[str, int] = {}
        # A request not in ``_lo`` was never marked stale since it was added or resolved: its
        # stored snapshot's charge is this step's, so ``_visits`` prices it without the resolver
        # (a call per visit; measured 7 idle visits per order on the conversation trace) and
        # resolves only what it yields.
        # class -> what is known of the charge of its oldest request (queue index 0): ``c > 0``
        # its exact charge this step (the head's id is not in ``_lo``: the stored snapshot's
        # charge), ``-b < 0`` a lower bound ``b`` of it (the head is stale: ``_lo``'s bound or,
        # once resolved in a read, the bound it had, still below the exact charge). Set by
        # ``add`` and ``stale`` of the head and when a visit prices it, dropped by ``remove``
        # (the next head is priced at its first visit). It saves the lookups (queue, head id,
        # bound, snapshot) of a visit, of which most are idle (7 per order on the conversation
        # trace, each class visited about six times before it serves).
        self._hc: dict[Hashable, int] = {}
        # The visit loop: its compiled twin where built (``compiled_twins``), else ``_visits``.
        compiled = compiled_twins.compiled_twin("drr_visits")
        self._read = self._visits if compiled is None else (lambda: compiled(self))
        # The ring's update at each read: its compiled twin where built, else ``_sync_python``.
        sync = compiled_twins.compiled_twin("drr_sync")
        self._sync = self._sync_python if sync is None else (lambda: sync(self))

    def stale(self, request_ids: Any, raised: Any = None) -> None:
        """Lazy hits: these snapshots are out of date. A hit that cannot have risen leaves the
        charge at least that of the snapshot the order last read (the stored one); one that may
        have risen (``raised``; ``None``: all) only at least ``L - max_hit``."""
        items, lo, hc, queues = self.items, self._lo, self._hc, self.queues
        if raised is None:
            raised, request_ids = request_ids, ()
        for rid in request_ids:
            u, q = items[rid]
            b = lo.get(rid)
            if b is None:
                b = lo[rid] = q.uncached_len
            if queues[u][0][1] == rid:
                hc[u] = -b
        for rid in raised:
            u, q = items[rid]
            b = lo[rid] = max(1, q.prompt_len - max_hit(q) - q.num_computed_tokens)
            if queues[u][0][1] == rid:
                hc[u] = -b

    def add(self, q: QueuedRequest) -> None:
        rid = q.request_id
        self._lo.pop(rid, None)  # a fresh snapshot: its charge is exact again
        ClassQueues.add(self, q)  # (not super(): a cpdef method in the compiled class has no __class__ cell)
        u = self.items[rid][0]
        if self.queues[u][0][1] == rid:  # the class's oldest: its charge is this snapshot's
            self._hc[u] = q.uncached_len

    def remove(self, request_id: str) -> None:
        self._lo.pop(request_id, None)
        self._hc.pop(self.items[request_id][0], None)
        ClassQueues.remove(self, request_id)

    def _link(self, u: Hashable, before: Hashable | None = None) -> None:
        """Link ``u`` into the ring just before ``before`` (the cursor's class: the end of the
        round), or before the first class (the list's end) when ``before`` is None; joining
        before the first class, ``u`` becomes the first (``DRR._update_ring``'s list)."""
        nxt, prv, first = self._nxt, self._prv, self._first
        if first is None:
            nxt[u] = prv[u] = u
            self._first = u
        else:
            at = first if before is None else before
            last = prv[at]
            nxt[last] = u
            prv[u] = last
            nxt[u] = at
            prv[at] = u
            if before is not None and at == first:
                self._first = u

    def _unlink(self, u: Hashable) -> None:
        nxt, prv = self._nxt, self._prv
        n = nxt.pop(u)
        p = prv.pop(u)
        if n == u:  # the only class
            self._first = None
            return
        nxt[p] = n
        prv[n] = p
        if self._first == u:
            self._first = n

    def _sync_python(self) -> None:
        """``DRR._update_ring``'s rules for the classes that changed since the last call (the
        reference of the compiled ``drr_sync``)."""
        policy = self.policy
        nxt, queues = self._nxt, self.queues
        cursor, deficit, emptied = policy.cursor, policy.deficit, policy.emptied
        # One pass over the classes that changed: those that leave (emptied by admissions or
        # without waiting requests) and those with waiting requests that are not in the ring
        # once the leavers left (new ones, and emptied ones refilled since: they join again at
        # the end). Most steps change one or two classes.
        gone: list[Hashable] = []
        new: list[Hashable] = []
        for u in self.touched.union(emptied) if emptied else self.touched:
            if u in nxt:
                if u in emptied or u not in queues:
                    gone.append(u)
                    if u in queues:
                        new.append(u)
            elif u in queues:
                new.append(u)
        pos = cursor["pos"]
        if pos is not None and pos in gone:
            k = nxt[pos]
            while k in gone and k != pos:
                k = nxt[k]
            cursor.update(pos=None if k in gone else k, credited=False)
        elif pos is not None and pos not in nxt:
            cursor.update(pos=None, credited=False)
        for u in gone:  # deficit keys are ring classes (set by Replay.commit): drop the leavers'
            self._unlink(u)
            deficit.pop(u, None)
        if new:
            if len(new) > 1:
                new.sort(key=lambda u: queues[u][0])
            pos = cursor["pos"]  # the joiners go at the end of the round, before the cursor's class
            for u in new:
                self._link(u, pos)
        emptied.clear()
        self.touched.clear()
        if cursor["pos"] is None and self._first is not None:
            cursor.update(pos=self._first, credited=False)

    def iter_order(self, now: float) -> Iterator[QueuedRequest]:
        self.policy._replay.commit(0)
        self._sync()
        if not self.items:
            return iter(())
        return self._read()

    def _visits(self) -> Iterator[QueuedRequest]:
        policy = self.policy
        replay = policy._replay
        # Replay.log / Replay.placed inlined, and the scratch lookups (next class, head charge,
        # deficit) too: this loop runs for every visit, served or idle, of every step.
        changes, marks, ids = replay._changes, replay._marks, replay.ids
        append = changes.append
        deficit, cursor, emptied, q = policy.deficit, policy.cursor, policy.emptied, policy.quantum
        dreal = deficit.get
        queues, items, resolve, lo, hc = self.queues, self.items, self.resolve, self._lo, self._hc
        hget = hc.get
        if resolve is None:
            def current(rid):
                return items[rid][1]
        else:
            def current(rid):  # this step's snapshot (lazy hits), kept: the bounds start from it
                item = items[rid]
                r = resolve(item[1])
                if r is not item[1]:
                    items[rid] = (item[0], r)
                    lo.pop(rid, None)
                return r

        def price(k, i, credit_to):
            # The charge of k's head (queue index i), exact, or a stale head's lower bound when
            # that bound already exceeds ``credit_to`` (the deficit after this visit's credit;
            # None: the visit is credited, price exactly): the visit is idle whatever the exact
            # charge, so the head's snapshot is not rebuilt for it. An exact charge is kept
            # (``_hc`` for a class's oldest request, ``ch`` for a later one, this order only).
            rid = queues[k][i][1]
            c = lo.get(rid)
            if c is None:  # never marked stale: the stored snapshot's charge is this step's
                c = items[rid][1].uncached_len
            elif credit_to is None or c <= credit_to:
                c = current(rid).uncached_len
            else:
                if not i:
                    hc[k] = -c
                return c
            if i:
                ch[k] = c
            else:
                hc[k] = c
            return c

        rnxt, rprv = self._nxt, self._prv
        snxt: dict[Hashable, Hashable] = {}
        sprv: dict[Hashable, Hashable] = {}
        d: dict[Hashable, float] = {}
        head: dict[Hashable, int] = {}
        ch: dict[Hashable, int] = {}  # class -> charge of its current head, once it moved (this order)
        size = len(rnxt)

        k = cursor["pos"]
        credited = bool(cursor["credited"])
        idle_visits = 0

        def end_visit(k):
            # DRR.order's end_visit: an emptied class leaves the scratch ring, the cursor moves on.
            nonlocal size, credited
            n = snxt[k] if k in snxt else rnxt[k]
            if head.get(k, 0) == len(queues[k]):
                d[k] = 0.0
                append((deficit, k, 0.0))
                append((emptied, k, True))
                p = sprv[k] if k in sprv else rprv[k]
                snxt[p] = n
                sprv[n] = p
                size -= 1
                if size == 0:
                    n = None
            credited = False
            append((cursor, "pos", n))
            append((cursor, "credited", False))
            return n

        def skip_rounds(k):
            # DRR.order's skip of empty rounds: a whole round from k served nobody, so each class
            # gains the m - 1 quanta more that the first one able to serve needs (exact charges).
            ring = [k]
            x = snxt[k] if k in snxt else rnxt[k]
            while x != k:
                ring.append(x)
                x = snxt[x] if x in snxt else rnxt[x]
            m = None
            for x in ring:
                cx = ch[x] if x in ch else hget(x)
                if cx is None or cx < 0:
                    cx = price(x, head.get(x, 0), None)
                mx = math.ceil((cx - (d[x] if x in d else dreal(x, 0.0))) / q)
                if m is None or mx < m:
                    m = mx
            if m > 1:
                for x in ring:
                    d[x] = v = (d[x] if x in d else dreal(x, 0.0)) + (m - 1) * q
                    append((deficit, x, v))

        moved = False  # idle visits moved the cursor to k, not logged yet (see below)
        while size:
            if not credited:
                # Visits that credit k until one can serve (a run of idle visits, then the
                # serving one). The charge is read after the credit is computed and before it
                # is logged, as DRR.order compares it (``c > d`` after ``d += q``).
                while True:
                    dk = (d[k] if k in d else dreal(k, 0.0)) + q
                    c = ch[k] if k in ch else hget(k)
                    if c is None:
                        c = price(k, head.get(k, 0), dk)
                    elif c < 0:  # a stale head: its bound decides an idle visit alone
                        c = -c if -c > dk else price(k, head.get(k, 0), dk)
                    d[k] = dk
                    append((deficit, k, dk))
                    if c <= dk:
                        break
                    # An idle visit (its head still waits, so the class stays): the cursor
                    # moves on. Its cursor entries ("credited" True then False, "pos" the next
                    # class) are left out of the log: no placement mark falls before the
                    # serving visit that ends a run of idle visits, which logs "pos" (the class
                    # it serves, where the last idle visit left the cursor) and "credited" True,
                    # so every commit applies the reference's values or none of them.
                    k = snxt[k] if k in snxt else rnxt[k]
                    moved = True
                    idle_visits += 1
                    if idle_visits >= size:
                        skip_rounds(k)
                        idle_visits = 0
                if moved:
                    append((cursor, "pos", k))
                    moved = False
                credited = True
                append((cursor, "credited", True))
            else:
                # The visit of k goes on (the cursor was left credited on it): it serves while
                # its head's exact charge fits, else it ends.
                dk = d[k] if k in d else dreal(k, 0.0)
                c = ch[k] if k in ch else hget(k)
                if c is None or c < 0:
                    c = price(k, head.get(k, 0), None)
                if c > dk:
                    k = end_visit(k)
                    idle_visits += 1
                    if idle_visits >= size:
                        skip_rounds(k)
                        idle_visits = 0
                    continue
            idle_visits = 0
            queue = queues[k]
            last = len(queue) - 1
            i = head.get(k, 0)
            while True:
                r = current(queue[i][1])
                dk -= r.uncached_len
                d[k] = dk
                append((deficit, k, dk))
                i += 1
                head[k] = i
                if i > last:
                    ends = True
                else:
                    rid = queue[i][1]
                    c = ch[k] = items[rid][1].uncached_len if rid not in lo else current(rid).uncached_len
                    ends = c > dk
                if ends:
                    nk = end_visit(k)
                ids.append(r.request_id)
                marks.append(len(changes))
                yield r
                if ends:
                    k = nk
                    break


def _lpm_key(q: QueuedRequest) -> tuple[int, float, str]:
    return (-q.cached_len, q.arrival_time, q.request_id)


class DLPMOrder:
    """``DLPM.order`` kept across steps: per-client LPM queues, the clients with credit sorted.

    The first pass of ``DLPM.order`` places, in LPM order, the requests of the clients whose
    deficit is positive, each until its deficit drops to <= 0: a merge of those clients' LPM
    queues. The clients with a positive deficit are kept sorted by their head's LPM key
    (``SortedList``), refreshed for the clients whose queue or deficit changed since the last
    call, so the first pass is read in O(log n) per item. After the first pass every backlogged
    client has a deficit <= 0; the refill and the later passes then run as in the reference
    (O(clients) per refill), logging into the policy's ``Replay`` so ``DLPM.on_admitted``
    commits the same state.

    A read that admitted nothing leaves the real state as it was, so the next read repeats it:
    the first refill's result (deficits, log entries, heap) is kept and reused while no request
    was added or removed and no admission was committed (``Replay.applied``), and the clients
    the last read logged are re-sorted only after a commit. The live hook reads the order in
    every step, also in steps that admit nothing (the head does not fit), where this turns the
    O(clients) Python refill into C-level copies.
    """

    #: The sequence follows the membership, the snapshots (an ``add`` that replaces one) and
    #: the deficits, which only an admission changes (``DLPM.on_admitted`` commits the read's
    #: log; a read starts by discarding the last one's), never the clock: a read changes
    #: nothing a later read sees (``fairsim.policies.incremental``; the colocated skip of
    #: blocked admissions; eager hits, so every snapshot change is an ``add`` the engine counts).
    moved_by = "snapshots"

    #: Least number of clients to re-sort at once for which ``iter_order`` rebuilds ``_pos``
    #: (when they are also a quarter of its entries or more) instead of moving each one.
    REBUILD_MIN = 256

    def __init__(self, policy: Any) -> None:
        self.policy = policy
        self.queues: dict[Hashable, list] = {}  # client -> sorted list of LPM keys (bisect)
        self.items: dict[str, tuple[Hashable, QueuedRequest, tuple]] = {}
        self.touched: set[Hashable] = set()
        self._logged: set[Hashable] = set()  # clients whose deficit the last order logged
        self._pos = SortedKeys()  # head LPM key of each waiting client with a deficit > 0
        self._pos_key: dict[Hashable, tuple] = {}
        self._version = 0  # add/remove calls so far
        self._applied = -1  # Replay.applied at the last iter_order
        self._key: tuple[int, int] = (-1, -1)
        self._refill: tuple | None = None  # (key, deficits, log entries, heap) of the first refill
        # The passes: their compiled twin where built (``compiled_twins``), else ``_passes``.
        compiled = compiled_twins.compiled_twin("dlpm_passes")
        self._read = self._passes if compiled is None else (lambda: compiled(self))

    def __len__(self) -> int:
        return len(self.items)

    def add(self, q: QueuedRequest) -> None:
        rid = q.request_id
        key = _lpm_key(q)
        self._version += 1
        old = self.items.get(rid)
        if old is not None:
            u = old[0]
            if old[2] != key:
                queue = self.queues[u]
                del queue[bisect_left(queue, old[2])]
                insort(queue, key)
                self.touched.add(u)
        else:
            u = client_key(q)
            queue = self.queues.get(u)
            if queue is None:
                self.queues[u] = [key]
            else:
                insort(queue, key)
            self.touched.add(u)
        self.items[rid] = (u, q, key)

    def remove(self, request_id: str) -> None:
        u, _, key = self.items.pop(request_id)
        self._version += 1
        queue = self.queues[u]
        del queue[bisect_left(queue, key)]
        if not queue:
            del self.queues[u]
        self.touched.add(u)

    def _refresh(self, u: Hashable) -> None:
        old = self._pos_key.pop(u, None)
        if old is not None:
            self._pos.remove(old)
        queue = self.queues.get(u)
        if queue and self.policy.deficit.get(u, 0.0) > 0:
            key = self._pos_key[u] = queue[0]
            self._pos.add(key)

    def iter_order(self, now: float) -> Iterator[QueuedRequest]:
        policy = self.policy
        policy._replay.commit(0)
        deficit, queues = policy.deficit, self.queues
        for u in self.touched:
            if u not in queues:  # a client with no waiting request leaves (deficit reset)
                deficit.pop(u, None)
        applied = policy._replay.applied
        # Real deficits change only by a commit: without one since the last read, only the
        # clients whose queue changed need re-sorting.
        changed = (self.touched | self._logged) if applied != self._applied else self.touched
        if len(changed) >= self.REBUILD_MIN and 4 * len(changed) >= len(self._pos_key):
            # Many clients at once (the commit of a refill logs every backlogged client): set
            # their entries, then sort all entries in one C-level pass instead of a SortedKeys
            # remove and add per client. The same keys, so the same sorted sequence.
            pos_key, real = self._pos_key, policy.deficit
            for u in changed:
                queue = queues.get(u)
                if queue and real.get(u, 0.0) > 0:
                    pos_key[u] = queue[0]
                else:
                    pos_key.pop(u, None)
            self._pos = SortedKeys(pos_key.values())
        else:
            for u in changed:
                self._refresh(u)
        self._applied = applied
        self._key = (self._version, applied)
        self.touched.clear()
        self._logged = set()
        if not self.items:
            return iter(())
        return self._read()

    def _passes(self) -> Iterator[QueuedRequest]:
        policy = self.policy
        replay = policy._replay
        real, log, q = policy.deficit, replay.log, policy.quantum
        queues, items, logged = self.queues, self.items, self._logged
        d: dict[Hashable, float] = {}
        head: dict[Hashable, int] = {}
        left = len(items)

        def dget(u):
            return d[u] if u in d else real.get(u, 0.0)

        source: Iterator[tuple] | None = iter(self._pos)  # pass 1: the persistent sorted heads
        heap: list[tuple] = []
        state_key, first = self._key, True
        while left:
            nxt = next(source, None) if source is not None else None
            while True:  # one pass: merge of the clients with credit, in LPM order
                if heap and (nxt is None or heap[0][0] < nxt):
                    key, u = heapq.heappop(heap)
                elif nxt is None:
                    break
                else:
                    key = nxt
                    u = items[key[2]][0]
                    nxt = next(source, None)
                r = items[key[2]][1]
                d[u] = dget(u) - r.uncached_len
                log(real, u, d[u])
                logged.add(u)
                i = head[u] = head.get(u, 0) + 1
                queue = queues[u]
                if i == len(queue):  # its queue empties here: it leaves, deficit reset (DLPM.order)
                    log(real, u, 0.0)
                replay.placed(r)
                left -= 1
                yield r
                if d[u] > 0 and i < len(queue):
                    heapq.heappush(heap, (queue[i], u))
            source = None
            if not left:
                return
            # Every backlogged client now has a deficit <= 0: refill (DLPM.order), next pass.
            cached = self._refill if first else None
            if cached is not None and cached[0] == state_key:
                _, dvals, entries, heap0 = cached  # the same state as the last read's refill
                d.update(dvals)
                replay._changes.extend(entries)
                logged.update(dvals)
                heap = list(heap0)
            else:
                backlogged = [u for u, queue in queues.items() if head.get(u, 0) < len(queue)]
                m = min(int(-dget(u) // q) + 1 for u in backlogged)
                n0 = len(replay._changes)
                for u in backlogged:
                    d[u] = dget(u) + m * q
                    log(real, u, d[u])
                    logged.add(u)
                heap = [(queues[u][head.get(u, 0)], u) for u in backlogged if d[u] > 0]
                heapq.heapify(heap)
                if first:
                    self._refill = (state_key, {u: d[u] for u in backlogged}, replay._changes[n0:], list(heap))
            first = False
