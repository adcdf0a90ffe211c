"""DRR: deficit round robin over request classes, charged in uncached tokens at order time.

Dynamo's router queue runs a variant of it; that one is ``drr-dynamo``
(``fairsim.policies.drr_dynamo``, which lists the differences)."""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

from fairsim.policies.base import arrival_key, param_text
from fairsim.policies.clients import client_key
from fairsim.policies.credit import Replay
from fairsim.types import QueuedRequest
from fairsim.policies.space import IntRange


#: Smallest quantum, tokens. Below one token a refill of ``rounds x quantum`` (``rounds`` from a
#: ceiling of ``(cost - deficit) / quantum``) can fall short of the cost in floating point, and
#: DRR-Dynamo's "nobody could pay" step then finds no payer (1e-300 did); no class is served a
#: fraction of a token anyway.
MIN_QUANTUM = 1.0


def check_quantum(owner: str, quantum: object) -> float:
    """``quantum`` as a float, or ``ValueError`` naming ``owner`` if it is not a finite number of
    at least ``MIN_QUANTUM`` tokens."""
    if isinstance(quantum, bool) or not isinstance(quantum, (int, float)) or not math.isfinite(quantum) \
            or not quantum >= MIN_QUANTUM:
        raise ValueError(f"{owner} quantum={param_text(quantum)}: need a finite number of tokens >= {MIN_QUANTUM:g}")
    return float(quantum)


class DRR:
    """Deficit round robin (Shreedhar & Varghese, SIGCOMM'95) over request classes.

    Ordering contract (docs/POLICIES-more.md "DRR"):

    - Classes: ``fairsim.policies.clients.client_key`` (tenant, else session, else prefix group,
      else the request itself); each class is a FIFO queue (``arrival_time``, then
      ``request_id``).
    - Active classes form a ring; a class joins at the end of the round when it gets a waiting
      request (just before the cursor's class: the last the cursor visits before it comes back,
      DRR's tail of the active list) and leaves (its deficit reset to 0) when it has none.
    - The cursor visits the ring in order. A visit adds ``quantum`` tokens to the class's deficit,
      then serves its head while ``charge(head) <= deficit``, subtracting the charge; then the
      cursor moves on. ``charge = max(1, L - h)`` = ``uncached_len`` of the order-time snapshot
      (Dynamo charges uncached prefill tokens).
    - One ``order()`` runs this on scratch state until every waiting request is placed; the real
      state (deficits, ring, cursor) advances only through the requests the engine admitted
      (``on_admitted``; ``fairsim.policies.credit``).

    Guarantee (DRR's): over any interval in which two classes stay backlogged, the uncached work
    they are served differs by at most ``quantum + max charge``.

    Source: Shreedhar & Varghese's DRR, charged as NVIDIA Dynamo's router queue charges
    (uncached tokens ``max(1, L - h)``), at order time. Our choices: one quantum for all classes
    (default 2,048 tokens = one step's budget), FIFO within a class, the class labels above.
    Dynamo's own queue orders differently (cost fixed at enqueue, credit carried across its
    skip of empty rounds): ``drr-dynamo``.

    Args:
        quantum: Tokens added to a class's deficit per visit (>= ``MIN_QUANTUM``).

    Raises:
        ValueError: ``quantum`` is not a finite number >= 1.
    """

    name = "drr"
    search_space = {"quantum": IntRange(128, 65536, log=True)}  # fairsim tune: tokens per visit
    clock_free_order = True  # same snapshots, no on_admitted since: same order (base.py)

    def __init__(self, quantum: float = 2048) -> None:
        self.quantum = check_quantum("DRR", quantum)
        self.deficit: dict[Hashable, float] = {}
        self.ring: list[Hashable] = []
        self.cursor: dict[str, object] = {"pos": None, "credited": False}
        self.emptied: dict[Hashable, bool] = {}
        self._replay = Replay()

    def _update_ring(self, classes: dict[Hashable, list[QueuedRequest]]) -> None:
        """Drop classes with no waiting request (or emptied by admissions); new ones join at the
        end of the round, just before the cursor's class (DRR's tail of the active list: every
        class already waiting is visited before them)."""
        ring, pos = self.ring, self.cursor["pos"]
        keep = [k for k in ring if k in classes and k not in self.emptied]
        if pos is not None and pos not in keep:
            # The cursor moves to the next surviving class after its old position.
            nxt = None
            if pos in ring:
                i = ring.index(pos)
                for k in ring[i + 1:] + ring[:i]:
                    if k in keep:
                        nxt = k
                        break
            self.cursor.update(pos=nxt, credited=False)
        for k in list(self.deficit):
            if k not in keep:
                del self.deficit[k]
        present = set(keep)
        new = sorted((k for k in classes if k not in present), key=lambda k: arrival_key(classes[k][0]))
        pos = self.cursor["pos"]
        at = keep.index(pos) if pos is not None and new else len(keep)
        self.ring = keep[:at] + new + keep[at:]
        self.emptied.clear()
        if self.cursor["pos"] is None and self.ring:
            self.cursor.update(pos=self.ring[0], credited=False)

    def order(self, waiting: Sequence[QueuedRequest], now: float) -> list[QueuedRequest]:
        """DRR over the waiting classes on scratch state (a permutation of ``waiting``)."""
        self._replay.commit(0)
        if not waiting:
            return []
        classes: dict[Hashable, list[QueuedRequest]] = {}
        for r in sorted(waiting, key=arrival_key):
            classes.setdefault(client_key(r), []).append(r)
        self._update_ring(classes)
        log = self._replay.log
        deficit, cursor, q = self.deficit, self.cursor, self.quantum
        d = {k: deficit.get(k, 0.0) for k in self.ring}
        ring = list(self.ring)
        head = dict.fromkeys(ring, 0)
        idx = ring.index(cursor["pos"])
        credited = bool(cursor["credited"])
        out: list[QueuedRequest] = []
        idle_visits = 0

        def end_visit(k: Hashable) -> None:
            # The visit of k ends: an emptied class leaves the ring (deficit reset, DRR), the
            # cursor moves to the next class. Logged with the placement that ended it.
            nonlocal idx, credited
            if head[k] == len(classes[k]):
                d[k] = 0.0
                log(deficit, k, 0.0)
                log(self.emptied, k, True)
                ring.pop(idx)
                if ring:
                    idx %= len(ring)
            else:
                idx = (idx + 1) % len(ring)
            credited = False
            log(cursor, "pos", ring[idx] if ring else None)
            log(cursor, "credited", False)

        while ring:
            k = ring[idx]
            queue = classes[k]
            if not credited:
                d[k] += q
                log(deficit, k, d[k])
                credited = True
                log(cursor, "credited", True)
            if queue[head[k]].uncached_len > d[k]:
                end_visit(k)
                idle_visits += 1
                if idle_visits >= len(ring):
                    # A whole round served nobody: skip the further empty rounds at once (each
                    # class would gain m - 1 quanta before the first one can serve).
                    m = min(math.ceil((classes[c][head[c]].uncached_len - d[c]) / q) for c in ring)
                    if m > 1:
                        for c in ring:
                            d[c] += (m - 1) * q
                            log(deficit, c, d[c])
                    idle_visits = 0
                continue
            idle_visits = 0
            while True:
                r = queue[head[k]]
                d[k] -= r.uncached_len
                log(deficit, k, d[k])
                head[k] += 1
                ends = head[k] == len(queue) or queue[head[k]].uncached_len > d[k]
                if ends:
                    end_visit(k)
                self._replay.placed(r)
                out.append(r)
                if ends:
                    break
        return out

    def incremental_order(self):
        """Fast path (``fairsim.policies.incremental``): the ring kept across steps, visits read
        lazily (``fairsim.policies.credit_fast.DRROrder``)."""
        from fairsim.policies.credit_fast import DRROrder
        return DRROrder(self)

    def on_admitted(self, admitted: Sequence[QueuedRequest], now: float) -> None:
        """Advance deficits and cursor through the admitted prefix of the last order."""
        self._replay.commit(self._replay.admitted_prefix(admitted))
