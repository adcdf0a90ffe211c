"""The fast path of ``fairway-deadline``: deadlines kept sorted, the due test vectorised, the merge lazy.

``FairwayDeadline.order()`` (``fairsim/policies/fairway_deadline.py``) sorts the whole waiting
queue by deadline and walks it every step. Deadlines are fixed at a request's first sight, so
this module keeps them in a ``sortedcontainers.SortedList`` with numpy columns in deadline order
(deadline, urgent flag, and the arrival slot of each request, ``perm``); each request's ``work``
lives in a column in arrival order. Each ``iter_order(now)`` then costs O(n) numpy work (one
gather ``work[perm]`` and one ``np.cumsum`` for ``lookahead="queue"``) plus O(k log n) Python
for the ``k`` items the engine reads, instead of an O(n log n) Python sort and an O(n) Python
loop.

A step without new requests whose due test cannot find anybody new (the clock and the works'
rises since the last full test stay below the smallest ``D - F`` it left, by more than the
rounding of the sums: ``_can_skip``) skips it and costs O(log n) plus what is read.

Changes are batched per step: requests admitted since the last read are dropped from the
deadline columns with one ``np.delete``, new ones (their deadlines set at the read) put in with
one ``np.insert``, so an admission or arrival costs no O(n) column shift of its own.

Lazy hits (``fairsim.sim.lazy_hits``): the order takes ``set_resolver``/``stale``. A snapshot
invalidated by a cache event is not rebuilt by the engine, and the order resolves it only when a
read needs its exact ``work``:

- at a step with new requests, all of them: the FCFS estimate ``W`` of a new request sums the
  ``work`` of every request ahead of it, and it is (almost always, under overload) a new maximum
  ``H``, so no bound would do;
- otherwise the due test runs on bounds: a stale request's work lies between its work at the
  largest possible hit and at none (``_work_bounds``), IEEE addition and multiplication are
  monotone, so the sequential sums with the low and the high works bracket the exact ones and
  decide every request outside the bracket; the stale requests ahead of the last undecided one
  are resolved and that prefix summed exactly (``_due_queue``, ``_due_own``; ``"none"`` reads
  no work);
- every request yielded (``_current``).

A request whose hit flips several times between two reads is resolved once, and the two lanes
(``FastLane``, ``ArrivalOrder``) take the same stale marks instead of a re-key per change. On the
conversation trace tiled 4x at its native rate this resolves 0.52 M snapshots where the eager
path rebuilt and re-added 3.7 M.

Exactness (``tests/test_fast_order.py``, ``tests/test_deadline_fast.py``): every float is made
by the same IEEE operations in the same order as in ``order()``:

- the FCFS estimate ``W_r`` of a new request is the sequential sum of ``work`` in arrival order.
  Here it is ``np.cumsum`` (``np.add.accumulate``, a sequential loop, not numpy's pairwise
  reduction) over a column of ``work`` in arrival order in which requests that left hold
  ``0.0`` (``x + 0.0 == x`` exactly), so no column is rebuilt on an admission;
- ``lookahead="queue"``: ``now + w_1 + ... + w_k`` is ``np.cumsum`` of ``[now, w_1, ...]`` in
  deadline order, the reference's running ``finish``;
- ``work`` itself is ``policy.work(q)`` of the step's snapshot (resolved when stale);
- the merge of the requests that are not in the due prefix is ``merge_lanes`` over the
  ``FastLane`` and ``ArrivalOrder`` of ``fairsim.policies.incremental`` with the due prefix
  skipped, as ``FairwayDeadline.merge`` (the paper's merge, or ``fast_first``'s unpre-charged
  Fast ledger).

State changes (new deadlines, the horizon ``H``, the sticky urgent set) are made when
``iter_order`` is called, not when it is read, and are mirrored into the policy's
``deadline``/``urgent``/``horizon_s`` so both paths leave the policy in the same state.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
from sortedcontainers import SortedList

from fairsim.policies.incremental import ArrivalOrder, FastLane, merge_lanes
from fairsim.types import QueuedRequest


class DeadlineOrder:
    """Incremental order of a ``FairwayDeadline`` (the ``IncrementalOrder`` protocol, with lazy hits).

    Args:
        policy: The ``FairwayDeadline`` whose ``order()`` this mirrors (its ``work``, ``slo``,
            ``slack``, ``horizon``, ``lookahead``, ``fast_first``, weights and its state).
    """

    _SMALL = 32  # up to this many waiting requests the due test runs in plain Python

    def __init__(self, policy: Any) -> None:
        self.policy = policy
        self.fast = FastLane(policy.slo)
        self.fair = ArrivalOrder()
        self.snap: dict[str, QueuedRequest] = {}  # request_id -> stored snapshot
        self._stale: dict[str, None] = {}  # stored snapshot out of date (lazy hits), resolve at the read
        self._resolve: Callable[[QueuedRequest], QueuedRequest] | None = None
        self._pending: dict[str, None] = {}  # added, no deadline yet (first sight at the next read)
        # Arrival-order columns: work (s) of the stored snapshot (a request that left keeps its
        # slot with 0.0), its bounds over every hit (s) and the stale flag.
        self._awork = np.zeros(64)
        self._alo = np.zeros(64)
        self._ahi = np.zeros(64)
        self._astale = np.zeros(64, dtype=bool)
        self._bounds: dict[str, tuple[float, float]] = {}  # request_id -> (lowest, highest) work (s)
        self._alen = 0
        self._apos: dict[str, int] = {}
        self._alast: tuple[float, str] | None = None
        self._aok = True  # False: a request arrived out of order, rebuild the column
        # Deadline order: keys (D, arrival, request_id) and parallel columns of exactly len(keys).
        self._keys = SortedList()
        self._key_of: dict[str, tuple[float, float, str]] = {}
        self._gone: list[tuple[float, float, str]] = []  # keys of requests that left, still in the columns
        self._perm = np.zeros(0, dtype=np.intp)  # arrival slot of each request, in deadline order
        self._edl = np.zeros(0)  # its deadline D (s)
        self._eurg = np.zeros(0, dtype=bool)  # its urgent flag
        self._ukeys = SortedList()  # keys of the urgent requests
        # Skip state (``_can_skip``): clock of the last full due test (None: none valid), the
        # smallest D - F over the requests it left not urgent, its largest F, and a bound on how
        # much the works' sums rose since (s).
        self._t0: float | None = None
        self._margin = 0.0
        self._tot = 0.0
        self._inc = 0.0

    def __len__(self) -> int:
        return len(self.snap)

    # -- feeding -----------------------------------------------------------------------------
    def add(self, q: QueuedRequest) -> None:
        """A new waiting request (deadline set at the next ``iter_order``), or a new snapshot."""
        rid = q.request_id
        new = rid not in self.snap
        self.fast.add(q)
        self.fair.add(q)
        self.snap[rid] = q
        if new:
            key = (q.arrival_time, rid)
            if self._alast is not None and key < self._alast:
                self._aok = False
            else:
                self._alast = key
            if self._alen == len(self._awork):
                self._grow()
            i = self._apos[rid] = self._alen
            self._alen += 1
            self._pending[rid] = None
            self._awork[i] = self.policy.work(q)
            lo, hi = self._bounds[rid] = self._work_bounds(q)
            self._alo[i], self._ahi[i] = lo, hi
        else:
            i = self._apos[rid]
            w = self.policy.work(q)
            if rid in self._stale:
                del self._stale[rid]  # its rise was counted when it was marked
            else:
                rise = w - float(self._awork[i])
                if rise > 0:
                    self._inc += rise
            self._astale[i] = False
            self._awork[i] = w

    def _grow(self) -> None:
        """Double the arrival-order columns."""
        m = len(self._awork)
        self._awork = np.concatenate([self._awork, np.zeros(m)])
        self._alo = np.concatenate([self._alo, np.zeros(m)])
        self._ahi = np.concatenate([self._ahi, np.zeros(m)])
        self._astale = np.concatenate([self._astale, np.zeros(m, dtype=bool)])

    def _work_bounds(self, q: QueuedRequest) -> tuple[float, float]:
        """``policy.work`` of ``q`` at its largest and at no prefix hit (s), after a ``work(q)``:
        every snapshot of the request has ``max(1, L - len(block_keys) x block_size) <=
        uncached_len <= L`` and ``work`` is one IEEE product ``rate(L) x uncached_len`` (the
        policy's cached ``rate``), rising with ``uncached_len``, so its work lies between the two."""
        L = q.prompt_len
        least = max(1, L - len(q.block_keys) * q.block_size) if q.block_size and q.block_keys is not None else 1
        rate = self.policy._rate[L]
        return rate * min(least, L), rate * L

    def remove(self, request_id: str) -> None:
        """The request was admitted: drop it everywhere (its deadline is forgotten)."""
        self.fast.remove(request_id)
        self.fair.remove(request_id)
        del self.snap[request_id]
        del self._bounds[request_id]
        self._stale.pop(request_id, None)
        pos = self._apos.pop(request_id)
        self._awork[pos] = 0.0
        self._astale[pos] = False
        k = self._key_of.pop(request_id, None)
        if k is not None:
            self._gone.append(k)
            self._ukeys.discard(k)
        else:
            del self._pending[request_id]
        self.policy.deadline.pop(request_id, None)
        self.policy.urgent.discard(request_id)

    # -- lazy hits (fairsim.sim.lazy_hits) ---------------------------------------------------
    def set_resolver(self, resolve: Callable[[QueuedRequest], QueuedRequest]) -> None:
        """Take lazy hits: ``resolve(q)`` gives this step's snapshot of ``q``'s request."""
        self._resolve = resolve
        self.fast.set_resolver(resolve)
        self.fair.set_resolver(resolve)

    def stale(self, request_ids: list[str], raised: list[str] | None = None) -> None:
        """These requests' stored snapshots are out of date: resolved when a read needs them.
        ``raised``: those whose hit may have risen (``None``: all), passed to the Fast lane
        (``FastLane.stale``); the work bounds here assume any change either way."""
        self.fast.stale(request_ids, raised)
        self.fair.stale(request_ids, raised)
        self._stale.update(dict.fromkeys(request_ids))
        apos, astale = self._apos, self._astale
        # The most a newly stale request's work can rise: to its work at no hit.
        if len(request_ids) < 16:  # numpy's per-call cost dominates
            ahi, awork = self._ahi, self._awork
            for rid in request_ids:
                i = apos[rid]
                if not astale[i]:
                    astale[i] = True
                    self._inc += float(ahi[i] - awork[i])
            return
        at = np.fromiter((apos[rid] for rid in request_ids), dtype=np.intp, count=len(request_ids))
        at = at[~astale[at]]
        self._inc += float(np.sum(self._ahi[at] - self._awork[at]))
        astale[at] = True

    def _refresh(self) -> None:
        """Resolve every stale snapshot (this step's hits) and write its ``work``."""
        resolve, snap, work = self._resolve, self.snap, self.policy.work
        awork, apos = self._awork, self._apos
        for rid in self._stale:
            q = snap[rid] = resolve(snap[rid])  # type: ignore[misc]
            awork[apos[rid]] = work(q)
        self._stale = {}
        self._astale[:self._alen] = False

    def _current(self, rid: str) -> QueuedRequest:
        """``rid``'s snapshot of this step (resolved now if stale)."""
        if rid in self._stale:
            del self._stale[rid]
            q = self.snap[rid] = self._resolve(self.snap[rid])  # type: ignore[misc]
            i = self._apos[rid]
            self._awork[i] = self.policy.work(q)
            self._astale[i] = False
            return q
        return self.snap[rid]

    def _resolve_at(self, positions: np.ndarray) -> None:
        """Resolve the stale requests at these deadline-order positions."""
        keys = self._keys
        for i in positions.tolist():
            self._current(keys[i][2])

    # -- columns -----------------------------------------------------------------------------
    def _compact(self) -> None:
        """Drop the requests that left from the deadline order and its columns (one pass)."""
        keys = self._keys
        at = [keys.index(k) for k in self._gone]
        for k in self._gone:
            keys.remove(k)
        self._gone = []
        if len(at) == 1:  # shift the tail in place (views: no allocation)
            i = at[0]
            cols = []
            for col in (self._perm, self._edl, self._eurg):
                col[i:-1] = col[i + 1:]
                cols.append(col[:-1])
            self._perm, self._edl, self._eurg = cols
            return
        keep = np.ones(len(self._edl), dtype=bool)  # a mask, not np.delete (5 us a call)
        keep[at] = False
        self._perm, self._edl, self._eurg = self._perm[keep], self._edl[keep], self._eurg[keep]

    def _insert(self, at: list[int], perm: list[int], dl: list[float]) -> None:
        """Put new requests in the deadline columns before the old positions ``at`` (ascending;
        equal positions in the order given), not urgent."""
        m, k = len(self._edl), len(at)
        if at[0] == m:  # all after the old ones (the usual case: H and arrival only grow)
            self._perm = np.concatenate([self._perm, np.asarray(perm, dtype=np.intp)])
            self._edl = np.concatenate([self._edl, dl])
            self._eurg = np.concatenate([self._eurg, np.zeros(k, dtype=bool)])
            return
        dest = np.asarray(at, dtype=np.intp) + np.arange(k)
        old = np.ones(m + k, dtype=bool)
        old[dest] = False
        cols = []
        for col, vals in ((self._perm, perm), (self._edl, dl), (self._eurg, False)):
            new = np.empty(m + k, dtype=col.dtype)
            new[old] = col
            new[dest] = vals
            cols.append(new)
        self._perm, self._edl, self._eurg = cols

    def _rebuild_arrival(self) -> None:
        """The arrival-order column from scratch (after an out-of-order arrival, or to compact);
        ``perm`` re-pointed at the new slots."""
        snap, bounds = self.snap, self._bounds
        order = sorted(snap.values(), key=lambda q: (q.arrival_time, q.request_id))
        n = len(order)
        m = max(64, 2 * n)
        self._awork, self._alo, self._ahi = np.zeros(m), np.zeros(m), np.zeros(m)
        self._astale = np.zeros(m, dtype=bool)  # called after _refresh: nothing stale
        work = self.policy.work
        for i, q in enumerate(order):
            self._awork[i] = work(q)
            self._alo[i], self._ahi[i] = bounds[q.request_id]
        self._apos = apos = {q.request_id: i for i, q in enumerate(order)}
        self._alen = n
        self._alast = (order[-1].arrival_time, order[-1].request_id) if order else None
        self._aok = True
        self._perm[:] = np.fromiter((apos[k[2]] for k in self._keys), dtype=np.intp, count=len(self._keys))

    def _squeeze_arrival(self) -> None:
        """Drop the slots of requests that left from the arrival-order columns (in order, so no
        float changes: a left slot holds 0.0), vectorised; ``perm`` re-pointed."""
        apos = self._apos
        live = np.fromiter(apos.values(), dtype=np.intp, count=len(apos))
        live.sort()
        n = len(live)
        m = max(64, 2 * n)
        remap = np.empty(self._alen, dtype=np.intp)
        remap[live] = np.arange(n)
        for name in ("_awork", "_alo", "_ahi", "_astale"):
            old = getattr(self, name)
            col = np.zeros(m, dtype=old.dtype)
            col[:n] = old[live]
            setattr(self, name, col)
        self._apos = dict(zip(apos, remap[np.fromiter(apos.values(), dtype=np.intp, count=n)].tolist()))
        self._alen = n
        self._perm[:] = remap[self._perm]

    def _assign(self) -> None:
        """``FairwayDeadline._assign`` for the pending requests, in arrival order."""
        if not self._aok:
            self._rebuild_arrival()
        elif self._alen > 2 * len(self.snap) + 64:
            self._squeeze_arrival()  # shorter cumsum below
        p = self.policy
        apos, snap = self._apos, self.snap
        fresh = sorted(self._pending, key=apos.__getitem__)
        self._pending = {}
        slots = np.fromiter((apos[rid] for rid in fresh), dtype=np.intp, count=len(fresh))
        cum = np.cumsum(self._awork[:slots[-1] + 1])  # cum[i]: work of arrival slots 0..i
        owns = self._awork[slots].tolist()
        ends = cum[slots].tolist()  # cum[i] == cum[i - 1] + awork[i]: order()'s ``ahead + own``
        aheads = cum[slots - 1].tolist()
        if slots[0] == 0:
            aheads[0] = 0.0
        slo, slack, use_h = p.slo, p.slack, p.horizon == "max"
        deadline = p.deadline
        h = p.horizon_s
        new_keys = []
        for rid, own, ahead, end in zip(fresh, owns, aheads, ends):
            q = snap[rid]
            wait = slack * ahead + own
            if use_h and h > wait:
                wait = h
            d = q.arrival_time + max(slo(q.prompt_len), wait)
            deadline[rid] = d
            if end > h:
                h = end
            new_keys.append((d, q.arrival_time, rid))
        p.horizon_s = h
        new_keys.sort()
        keys, key_of = self._keys, self._key_of
        if keys and new_keys[0] > keys[-1]:
            at = [len(keys)] * len(new_keys)
        else:
            at = [keys.bisect_left(k) for k in new_keys]  # positions in the old order
        self._insert(at, [apos[k[2]] for k in new_keys], [k[0] for k in new_keys])
        keys.update(new_keys)
        for k in new_keys:
            key_of[k[2]] = k

    # -- reading ---------------------------------------------------------------------------
    def iter_order(self, now: float) -> Iterator[QueuedRequest]:
        """``FairwayDeadline.order(snapshots, now)``'s sequence, lazily (state updated now)."""
        p = self.policy
        n = len(self.snap)
        mode = p.lookahead
        if self._stale and (self._pending or n <= self._SMALL):
            self._refresh()  # the FCFS estimate of a new request reads every waiting request's work
        if n > self._SMALL and not self._pending and len(self._gone) < 64 and self._can_skip(now, n):
            return self._read_skipped(now, n)
        if self._gone:
            self._compact()
        if n == 0:
            p.deadline, p.urgent = {}, set()
            self._ukeys.clear()
            self._t0 = None
            return iter(())
        if self._pending:
            self._assign()
        if n <= self._SMALL:
            self._t0 = None
            cut = self._due_small(now, n, mode)
            return self._read(now, n, cut)
        dl, urg = self._edl, self._eurg
        if mode == "none":
            late = now >= dl
            cut = n if late.all() else int(np.argmin(late))  # the first request not yet due
            newly = np.flatnonzero(~urg[:cut])
            urg[:cut] = True
            # Every urgent request is late (due at an earlier clock), so the others start at cut.
            margin, tot = (float(dl[cut]) - now if cut < n else math.inf), now
        else:
            due, fup = self._due_queue(now) if mode == "queue" else self._due_own(now)
            newly = np.flatnonzero(due & ~urg)
            urg |= due
            marked = np.flatnonzero(urg)
            cut = int(marked[-1]) + 1 if len(marked) else 0
            margin = float(np.min(np.where(urg, math.inf, dl - fup)))
            tot = float(fup[-1] if mode == "queue" else np.max(fup))
        self._t0, self._margin, self._tot, self._inc = now, margin, tot, 0.0
        if len(newly):
            keys = self._keys
            fresh = [keys[int(i)] for i in newly]
            p.urgent.update(k[2] for k in fresh)
            self._ukeys.update(fresh)
        return self._read(now, n, cut)

    def _can_skip(self, now: float, n: int) -> bool:
        """No request that is not urgent can be due at ``now``: the due test would change nothing.

        Since the last full due test (clock ``t0``) each waiting request's ``F = now + w_1 + ... +
        w_k`` (``"own"``: ``now + w_k``) rose by at most ``now - t0`` plus ``_inc``, the sum of
        every rise of a work since (a stale mark counts the rise to its work at no hit; an
        admission only lowers the sums). So if that is below the smallest ``D - F`` the last test
        left, by more than the rounding of both sequential sums (``8 (n + 4) 2^-53`` of the
        magnitudes; a sequential sum of ``n`` non-negative terms is off by at most ``n 2^-53`` of
        it, Higham, *Accuracy and Stability of Numerical Algorithms*, 4.2), nobody new is due.
        """
        if self._t0 is None:
            return False
        rise = now - self._t0
        err = 8 * (n + 4) * 2.0 ** -53 * (abs(now) + abs(self._tot) + self._inc + abs(rise))
        return rise + self._inc + err < self._margin

    def _read_skipped(self, now: float, n: int) -> Iterator[QueuedRequest]:
        """``_read`` at a step whose due test is skipped: the prefix ends at the last urgent
        request; admissions since the last full test are still in the keys (not compacted)."""
        uk = self._ukeys
        if not uk:
            return self._read(now, n, 0, 0)
        last = uk[-1]
        cut = self._keys.index(last) + 1
        return self._read(now, n, cut, cut - sum(1 for g in self._gone if g < last))

    def _due_queue(self, now: float) -> np.ndarray:
        """``lookahead="queue"``: ``now + w_1 + ... + w_k >= D_k`` for each ``k`` in deadline order.

        With stale snapshots the sums are first taken with each stale request's lowest and
        highest work (``_work_bounds``): IEEE addition is monotone in each operand, so the exact
        sum lies between the two and decides every ``k`` outside ``[low, high)``; only the stale
        requests ahead of the last undecided ``k`` are resolved, and that prefix summed exactly.
        """
        dl, perm = self._edl, self._perm
        w = self._awork[perm]
        if not self._stale:
            f = np.cumsum(np.concatenate(([now], w)))[1:]
            return f >= dl, f
        st = self._astale[perm]
        fhi = np.cumsum(np.concatenate(([now], np.where(st, self._ahi[perm], w))))[1:]
        hi = fhi >= dl
        if not hi.any():
            return hi, fhi  # nobody due even at the highest works
        due = np.cumsum(np.concatenate(([now], np.where(st, self._alo[perm], w))))[1:] >= dl
        open_ = np.flatnonzero(hi & ~due)
        if len(open_):
            m = int(open_[-1]) + 1
            self._resolve_at(np.flatnonzero(st[:m]))
            w = self._awork[perm[:m]]
            fhi[:m] = np.cumsum(np.concatenate(([now], w)))[1:]  # exact there, an upper bound after
            due[:m] = fhi[:m] >= dl[:m]
        return due, fhi

    def _due_own(self, now: float) -> np.ndarray:
        """``lookahead="own"``: ``now + w_k >= D_k``; a stale request resolved only when its
        bounds leave it undecided."""
        dl, perm = self._edl, self._perm
        f = now + self._awork[perm]
        if not self._stale:
            return f >= dl, f
        st = self._astale[perm]
        fhi = np.where(st, now + self._ahi[perm], f)
        hi = fhi >= dl
        lo = now + self._alo[perm] >= dl
        due = np.where(st, lo, f >= dl)
        open_ = np.flatnonzero(st & hi & ~lo)
        if len(open_):
            self._resolve_at(open_)
            fhi[open_] = now + self._awork[perm[open_]]
            due[open_] = fhi[open_] >= dl[open_]
        return due, fhi

    def _due_small(self, now: float, n: int, mode: str) -> int:
        """The due test in Python floats for a short queue (numpy's per-call cost dominates)."""
        urg = self._eurg
        work = self._awork[self._perm].tolist()  # nothing stale: refreshed by iter_order
        dl = self._edl.tolist()
        flags = urg.tolist()
        newly = []
        cut = 0
        finish = now
        for k in range(n):
            if mode == "queue":
                finish += work[k]
                due = finish >= dl[k]
            elif mode == "own":
                due = now + work[k] >= dl[k]
            else:
                due = now >= dl[k]
                if not due:
                    break
            if due or flags[k]:
                if not flags[k]:
                    newly.append(k)
                cut = k + 1
        if newly:
            keys = self._keys
            urg[newly] = True
            fresh = [keys[k] for k in newly]
            self.policy.urgent.update(k[2] for k in fresh)
            self._ukeys.update(fresh)
        return cut

    def _read(self, now: float, n: int, cut: int, live: int | None = None) -> Iterator[QueuedRequest]:
        """The first ``cut`` requests in deadline order (the due prefix), then the other
        requests in the merge of ``FairwayDeadline.merge`` (``now`` in seconds). ``live``: the
        number of waiting requests among the first ``cut`` keys when admitted ones are still in
        the keys (``_read_skipped``), else ``cut``."""
        current = self._current
        keys = self._keys
        if live is None or live == cut:
            for k in keys.islice(0, cut):
                yield current(k[2])
            live = cut
        else:
            key_of = self._key_of
            for k in keys.islice(0, cut):
                if key_of.get(k[2]) == k:
                    yield current(k[2])
        rest = n - live
        if rest == 0:
            return
        p = self.policy
        if rest == 1 and not self._gone:
            yield current(keys[cut][2])
            return
        if cut:
            skip = {k[2] for k in keys.islice(0, cut)}
            fast = (q for q in self.fast.iter_order(now) if q.request_id not in skip)
            fair = (q for q in self.fair.iter_order(now) if q.request_id not in skip)
        else:  # nobody due: the merge of the whole queue
            fast, fair = iter(self.fast.iter_order(now)), self.fair.iter_order(now)
        if not p.fair_lane:
            yield from fast
            return
        yield from merge_lanes(fast, fair, rest, p.fast_weight, p.fair_weight,
                               0.0 if p.fast_first else None)
