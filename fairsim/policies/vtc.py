"""VTC: the Virtual Token Counter (Sheng et al., "Fairness in Serving Large Language Models", OSDI'24)."""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Sequence

from fairsim.policies.base import WEIGHT_MAX, WEIGHT_MIN, arrival_key, param_text
from fairsim.policies.clients import client_key
from fairsim.types import QueuedRequest


class VTC:
    """Serve the backlogged client that has received the least service, counted in tokens.

    Ordering contract (docs/POLICIES-more.md "VTC"):

    - Each client (``fairsim.policies.clients.client_key``) has a counter ``c_u`` (tokens).
    - Lift rule for a client that becomes backlogged (new, or returning after its queue emptied):
      ``c_u = max(c_u, min over the clients that were and still are backlogged of c_v)``; when no
      other client is backlogged, the minimum is taken over the counters of the clients that
      last left the queue (VTC's ``l``; we take the largest of them). A returning client thus
      gets no credit for its idle time. A client leaves the moment admissions empty its queue
      (``on_admitted``), so one refilled before the next ``order()`` returns and is lifted too.
    - The order repeatedly takes the backlogged client with the smallest counter, plus the
      charges of its requests already placed in this order (ties: its oldest request's
      arrival), and places its oldest waiting request.
    - At admission (``on_admitted``) the client's counter grows by ``input_weight x charge``,
      ``charge = max(1, L - h)`` (``uncached_len`` of the order-time snapshot).

    Source: VTC, Sheng et al., OSDI'24, Algorithm 2 (counter lift on arrival, min-counter
    selection). Our choices: the counter charges *uncached* prompt tokens at admission (VTC
    counts processed input and output tokens; fairsim's engine is prefill-only and a prefix hit
    is work not done, as DLPM argues); output tokens are not charged; the client labels above.

    Args:
        input_weight: Counter increment per uncached prompt token (``WEIGHT_MIN`` to
            ``WEIGHT_MAX``; VTC's ``w_p``).

    Raises:
        ValueError: ``input_weight`` is not a number within those bounds.
    """

    name = "vtc"
    # fairsim tune searches nothing: input_weight scales every counter alike (no output tokens
    # are charged), so the order does not depend on it.
    search_space: dict = {}
    clock_free_order = True  # same snapshots, no on_admitted since: same order (base.py)

    def __init__(self, input_weight: float = 1.0) -> None:
        if isinstance(input_weight, bool) or not isinstance(input_weight, (int, float)) \
                or not WEIGHT_MIN <= input_weight <= WEIGHT_MAX:
            raise ValueError(f"VTC input_weight={param_text(input_weight)}: need a number from {WEIGHT_MIN:g} to "
                             f"{WEIGHT_MAX:g} (it scales every counter alike; beyond, the counters "
                             f"overflowed and every client tied: FCFS's order)")
        self.input_weight = float(input_weight)
        self.counter: dict[Hashable, float] = {}
        self._backlogged: set[Hashable] = set()
        self._last_left = 0.0
        # Of the last order: request_id -> (client, charge) of each request placed (read), and
        # each placed client's number of waiting requests (its queue empties when all are admitted).
        self._placed: dict[str, tuple[Hashable, int]] = {}
        self._class_size: dict[Hashable, int] = {}

    def _lift(self, active: set[Hashable]) -> None:
        counter = self.counter
        left = self._backlogged - active
        if left:
            self._last_left = max(counter.get(u, 0.0) for u in left)
        stayed = self._backlogged & active
        floor = min(counter.get(v, 0.0) for v in stayed) if stayed else self._last_left
        for u in active - self._backlogged:
            counter[u] = max(counter.get(u, 0.0), floor)
        self._backlogged = active

    def order(self, waiting: Sequence[QueuedRequest], now: float) -> list[QueuedRequest]:
        """Min-counter client first, its oldest request (a permutation of ``waiting``)."""
        classes: dict[Hashable, list[QueuedRequest]] = {}
        for r in sorted(waiting, key=arrival_key):
            classes.setdefault(client_key(r), []).append(r)
        self._lift(set(classes))
        w = self.input_weight
        # Heap of (counter incl. this order's placements, next request's arrival key, seq, class).
        heap = [(self.counter[u], arrival_key(q[0]), i, u) for i, (u, q) in enumerate(classes.items())]
        heapq.heapify(heap)
        head = dict.fromkeys(classes, 0)
        out: list[QueuedRequest] = []
        self._placed = {}
        self._class_size = {u: len(q) for u, q in classes.items()}
        while heap:
            value, _, i, u = heapq.heappop(heap)
            r = classes[u][head[u]]
            head[u] += 1
            out.append(r)
            self._placed[r.request_id] = (u, r.uncached_len)
            if head[u] < len(classes[u]):
                heapq.heappush(heap, (value + w * r.uncached_len, arrival_key(classes[u][head[u]]), i, u))
        return out

    def incremental_order(self):
        """Fast path (``fairsim.policies.incremental``): classes kept sorted by counter across
        steps, merged lazily (``fairsim.policies.credit_fast.VTCOrder``)."""
        from fairsim.policies.credit_fast import VTCOrder
        return VTCOrder(self)

    def on_admitted(self, admitted: Sequence[QueuedRequest], now: float) -> None:
        """Charge each admitted request's client ``input_weight x max(1, L - h)`` (order time);
        a client whose every waiting request was admitted leaves the backlog now.

        VTC (Algorithm 2) lifts a client on a request that finds it with no waiting request. A
        client emptied here and refilled before the next ``order()`` is such a client, but the
        next order sees it waiting in both calls: it must leave here, or it keeps a counter below
        the least-served backlogged client's."""
        # Locals and plain loops, not a comprehension and max() over a generator: this runs once
        # per admitting step, and the compiled module paid a closure for each.
        placed_of, counter, w, class_size = self._placed, self.counter, self.input_weight, self._class_size
        admitted_of: dict[Hashable, int] = {}
        for a in admitted:
            placed = placed_of.get(a.request_id)
            if placed is not None:
                u, charge = placed
                counter[u] = counter.get(u, 0.0) + w * charge
                admitted_of[u] = admitted_of.get(u, 0) + 1
        last_left = None  # the largest counter of the emptied classes (max(): the first of equals)
        for u, n in admitted_of.items():
            if n == class_size[u]:
                self._backlogged.discard(u)
                c = counter[u]
                if last_left is None or c > last_left:
                    last_left = c
        if last_left is not None:
            self._last_left = last_left
