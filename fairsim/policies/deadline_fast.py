"""The fast path of ``fairway-deadline``: deadlines kept sorted, the due test vectorised, the merge lazy.

``FairwayDeadline.order()`` (``fairsim/policies/fairway_deadline.py``) sorts the whole waiting
queue by deadline and walks it every step. Deadlines are fixed at a request's first sight, so
this module keeps them in a ``sortedcontainers.SortedList`` and the per-request terms of the due
test in numpy columns in deadline order; each ``iter_order(now)`` then costs O(n) numpy work
(one ``np.cumsum`` for ``lookahead="queue"``) plus O(k log n) for the ``k`` items the engine
reads, instead of an O(n log n) Python sort and an O(n) Python loop.

Exactness (``tests/test_fast_order.py``, ``tests/test_deadline_fast.py``): every float is made
by the same IEEE operations in the same order as in ``order()``:

- the FCFS estimate ``W_r`` of a new request is the sequential sum of ``work`` in arrival order.
  Here it is ``np.cumsum`` (``np.add.accumulate``, a sequential loop, not numpy's pairwise
  reduction) over a column of ``work`` in arrival order in which requests that left hold
  ``0.0`` (``x + 0.0 == x`` exactly), so no column is rebuilt on an admission;
- ``lookahead="queue"``: ``now + w_1 + ... + w_k`` is ``np.cumsum`` of ``[now, w_1, ...]`` in
  deadline order, the reference's running ``finish``;
- the merge of the requests that are not in the due prefix is ``merge_lanes`` over the
  ``FastLane`` and ``ArrivalOrder`` of ``fairsim.policies.incremental`` with the due prefix
  skipped, as ``FairwayDeadline.merge`` (the paper's merge, or ``fast_first``'s unpre-charged
  Fast ledger).

State changes (new deadlines, the horizon ``H``, the sticky urgent set) are made when
``iter_order`` is called, not when it is read, and are mirrored into the policy's
``deadline``/``urgent``/``horizon_s`` so both paths leave the policy in the same state.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
from sortedcontainers import SortedList

from fairsim.policies.incremental import ArrivalOrder, FastLane, merge_lanes
from fairsim.types import QueuedRequest


class DeadlineOrder:
    """Incremental order of a ``FairwayDeadline`` (the ``IncrementalOrder`` protocol).

    Args:
        policy: The ``FairwayDeadline`` whose ``order()`` this mirrors (its ``work``, ``slo``,
            ``slack``, ``horizon``, ``lookahead``, ``fast_first``, weights and its state).
    """

    _SMALL = 32  # up to this many waiting requests the due test runs in plain Python

    def __init__(self, policy: Any) -> None:
        self.policy = policy
        self.fast = FastLane(policy.slo)
        self.fair = ArrivalOrder()
        self._pending: list[str] = []  # added, no deadline yet (first sight at the next read)
        # Arrival-order column of work (s); a request that left keeps its slot with 0.0.
        self._awork = np.zeros(64)
        self._alen = 0
        self._apos: dict[str, int] = {}
        self._alast: tuple[float, str] | None = None
        self._aok = True  # False: a request arrived out of order, rebuild the column
        # Deadline order: keys (D, arrival, request_id) and parallel columns.
        self._keys = SortedList()
        self._key_of: dict[str, tuple[float, float, str]] = {}
        # Columns with spare capacity: the first len(self._keys) slots are live.
        self._ework = np.zeros(64)
        self._edl = np.zeros(64)
        self._eurg = np.zeros(64, dtype=bool)

    def __len__(self) -> int:
        return len(self.fair)

    # -- feeding -----------------------------------------------------------------------------
    def add(self, q: QueuedRequest) -> None:
        """A new waiting request (deadline set at the next ``iter_order``), or a new snapshot."""
        rid = q.request_id
        new = rid not in self.fair.items
        self.fast.add(q)
        self.fair.add(q)
        w = self.policy.work(q)
        if new:
            key = (q.arrival_time, rid)
            if self._alast is not None and key < self._alast:
                self._aok = False
            else:
                self._alast = key
            if self._alen == len(self._awork):
                self._awork = np.concatenate([self._awork, np.zeros(len(self._awork))])
            self._apos[rid] = self._alen
            self._alen += 1
            self._pending.append(rid)
        k = self._key_of.get(rid)
        if k is not None:
            self._ework[self._keys.index(k)] = w
        if self._aok:
            self._awork[self._apos[rid]] = w

    def remove(self, request_id: str) -> None:
        """The request was admitted: drop it everywhere (its deadline is forgotten)."""
        self.fast.remove(request_id)
        self.fair.remove(request_id)
        pos = self._apos.pop(request_id)
        if self._aok:
            self._awork[pos] = 0.0
        k = self._key_of.pop(request_id, None)
        if k is not None:
            i = self._keys.index(k)
            m = len(self._keys)
            del self._keys[i]
            for col in (self._ework, self._edl, self._eurg):
                col[i:m - 1] = col[i + 1:m]  # numpy copies overlapping slices correctly
        else:
            self._pending.remove(request_id)
        self.policy.deadline.pop(request_id, None)
        self.policy.urgent.discard(request_id)

    # -- first sight -------------------------------------------------------------------------
    def _rebuild_arrival(self) -> None:
        """The arrival-order column from scratch (after an out-of-order arrival, or to compact)."""
        items = self.fair.items
        order = sorted(items.values(), key=lambda q: (q.arrival_time, q.request_id))
        n = len(order)
        self._awork = np.zeros(max(64, 2 * n))
        work = self.policy.work
        for i, q in enumerate(order):
            self._awork[i] = work(q)
        self._apos = {q.request_id: i for i, q in enumerate(order)}
        self._alen = n
        self._alast = (order[-1].arrival_time, order[-1].request_id) if order else None
        self._aok = True

    def _assign(self) -> None:
        """``FairwayDeadline._assign`` for the pending requests, in arrival order."""
        if not self._aok or self._alen > 2 * len(self.fair) + 64:
            self._rebuild_arrival()
        p = self.policy
        cum = np.cumsum(self._awork[:self._alen])  # cum[i]: work of arrival slots 0..i
        apos, items = self._apos, self.fair.items
        fresh = sorted(self._pending, key=apos.__getitem__)
        self._pending = []
        slo, slack, use_h = p.slo, p.slack, p.horizon == "max"
        deadline = p.deadline
        new_keys = []
        for rid in fresh:
            q = items[rid]
            i = apos[rid]
            own = float(self._awork[i])
            ahead = float(cum[i - 1]) if i else 0.0
            wait = slack * ahead + own
            if use_h and p.horizon_s > wait:
                wait = p.horizon_s
            d = q.arrival_time + max(slo(q.prompt_len), wait)
            deadline[rid] = d
            end = float(cum[i])  # == ahead + own, the same addition
            if end > p.horizon_s:
                p.horizon_s = end
            new_keys.append((d, q.arrival_time, rid, own))
        keys = self._keys
        need = len(keys) + len(new_keys)
        if need > len(self._ework):
            cap = max(2 * len(self._ework), need)
            self._ework = np.concatenate([self._ework, np.zeros(cap - len(self._ework))])
            self._edl = np.concatenate([self._edl, np.zeros(cap - len(self._edl))])
            self._eurg = np.concatenate([self._eurg, np.zeros(cap - len(self._eurg), dtype=bool)])
        ework, edl, eurg = self._ework, self._edl, self._eurg
        for d, arrival, rid, own in new_keys:
            k = (d, arrival, rid)
            i = keys.bisect_left(k)
            m = len(keys)
            keys.add(k)
            self._key_of[rid] = k
            if i < m:
                for col in (ework, edl, eurg):
                    col[i + 1:m + 1] = col[i:m]
            ework[i], edl[i], eurg[i] = own, d, False

    # -- reading ---------------------------------------------------------------------------
    def iter_order(self, now: float) -> Iterator[QueuedRequest]:
        """``FairwayDeadline.order(snapshots, now)``'s sequence, lazily (state updated now)."""
        p = self.policy
        n = len(self.fair)
        if n == 0:
            p.deadline, p.urgent = {}, set()
            return iter(())
        if self._pending:
            self._assign()
        mode = p.lookahead
        if n <= self._SMALL:
            cut = self._due_small(now, n, mode)
            return self._read(now, n, cut)
        dl, urg, ework = self._edl[:n], self._eurg[:n], self._ework[:n]
        if mode == "none":
            late = now >= dl
            cut = n if late.all() else int(np.argmin(late))  # the first request not yet due
            newly = np.flatnonzero(~urg[:cut])
            urg[:cut] = True
        else:
            if mode == "queue":
                due = np.cumsum(np.concatenate(([now], ework)))[1:] >= dl
            else:
                due = now + ework >= dl
            newly = np.flatnonzero(due & ~urg)
            urg |= due
            marked = np.flatnonzero(urg)
            cut = int(marked[-1]) + 1 if len(marked) else 0
        if len(newly):
            keys = self._keys
            p.urgent.update(keys[int(i)][2] for i in newly)
        return self._read(now, n, cut)

    def _due_small(self, now: float, n: int, mode: str) -> int:
        """The due test in Python floats for a short queue (numpy's per-call cost dominates)."""
        urg = self._eurg
        work = self._ework[:n].tolist()
        dl = self._edl[:n].tolist()
        flags = urg[:n].tolist()
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
            self.policy.urgent.update(keys[k][2] for k in newly)
        return cut

    def _read(self, now: float, n: int, cut: int) -> Iterator[QueuedRequest]:
        """The first ``cut`` requests in deadline order (the due prefix), then the other
        ``n - cut`` in the merge of ``FairwayDeadline.merge`` (``now`` in seconds)."""
        items = self.fair.items
        keys = self._keys
        for k in keys.islice(0, cut):
            yield items[k[2]]
        rest = n - cut
        if rest == 0:
            return
        p = self.policy
        if rest == 1:
            yield items[keys[cut][2]]
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
