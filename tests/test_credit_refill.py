"""Credit policies on hand-made queues where admissions empty a client's queue and a new request
refills it before the next step (VTC's lift, DLPM's reset), and DRR against Dynamo's router queue
(``drr`` vs ``drr-dynamo``). Each order is checked on the plain ``order()`` and on the fast path
(``incremental_order()``) where the policy has one, fed as the engine feeds it."""

from __future__ import annotations

import math
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from fairsim.policies import make_policy
from fairsim.types import QueuedRequest


def q(rid: str, c: int, client: str, arrival: float, h: int = 0) -> QueuedRequest:
    return QueuedRequest(rid, arrival, h + c, h, c, 0, None, (), 0, client)


def run_steps(name: str, steps, fast: bool, **params) -> tuple[list[list[str]], object]:
    """Run ``steps`` = [(new requests, number of leading order items admitted)] on a fresh policy,
    through ``order()`` or through its fast path, as the engine does; the order of each step."""
    policy = make_policy(name, None, **params)
    inc = policy.incremental_order() if fast else None
    waiting: dict[str, QueuedRequest] = {}
    orders = []
    for now, (new, k) in enumerate(steps):
        for r in new:
            waiting[r.request_id] = r
            if inc is not None:
                inc.add(r)
        if inc is not None:
            order = list(inc.iter_order(float(now)))
        else:
            order = policy.order(list(waiting.values()), float(now))
        orders.append([r.request_id for r in order])
        admitted = order[:k]
        if admitted:
            policy.on_admitted(admitted, float(now))
        for r in admitted:
            del waiting[r.request_id]
            if inc is not None:
                inc.remove(r.request_id)
    return orders, policy


class TestVTCRefill:
    # Step 1: counters 0 and 0, the oldest head first: B1 (b = 100), A1 (a = 10, a's queue
    # empty), B2, B3. Admitted: B1, A1, B2 (b = 110). A2 arrives before step 2: a had no
    # waiting request, so VTC lifts it to b's 110; tie -> the older head, B3.
    STEPS = [([q("B1", 100, "b", 0.0), q("A1", 10, "a", 1.0), q("B2", 10, "b", 2.0),
               q("B3", 10, "b", 3.0)], 3),
             ([q("A2", 10, "a", 4.0)], 0)]

    def test_refilled_client_is_lifted(self):
        for fast in (False, True):
            orders, p = run_steps("vtc", self.STEPS, fast)
            assert orders == [["B1", "A1", "B2", "B3"], ["B3", "A2"]], fast
            assert p.counter == {"a": 110.0, "b": 110.0}

    def test_client_keeping_a_waiting_request_is_not_lifted(self):
        # Same, but A1 is not admitted (only B1): a never left, so it keeps its counter 0 and
        # is served first in step 2.
        steps = [(self.STEPS[0][0], 1), ([q("A2", 10, "a", 4.0)], 0)]
        for fast in (False, True):
            orders, p = run_steps("vtc", steps, fast)
            assert orders == [["B1", "A1", "B2", "B3"], ["A1", "A2", "B2", "B3"]], fast
            assert p.counter == {"a": 0.0, "b": 100.0}


class TestDLPMRefill:
    # quantum 100. Step 1, LPM order A1 B1 B2 B3; refill a = b = 100: A1 (a 70, a's queue
    # empty), B1 (b 40), B2 (b -20); refill b -> 80: B3. Admitted: A1, B1. A2 arrives before
    # step 2: a left with its queue (deficit reset to 0), so LPM's A2 waits for the refill:
    # B2 (b -20); refill a -> 100, b -> 80: A2, B3. Keeping a's 70 would give A2 B2 B3.
    STEPS = [([q("A1", 30, "a", 0.0, h=900), q("B1", 60, "b", 1.0, h=800),
               q("B2", 60, "b", 2.0, h=500), q("B3", 60, "b", 3.0, h=100)], 2),
             ([q("A2", 30, "a", 4.0, h=600)], 3)]

    def test_refilled_client_starts_from_zero(self):
        for fast in (False, True):
            orders, p = run_steps("dlpm", self.STEPS, fast, quantum=100)
            assert orders == [["A1", "B1", "B2", "B3"], ["B2", "A2", "B3"]], fast
            # Step 2 emptied both queues: both deficits reset.
            assert p.deficit == {"a": 0.0, "b": 0.0}

    def test_deficit_after_admissions_that_empty_a_queue(self):
        for fast in (False, True):
            _, p = run_steps("dlpm", self.STEPS[:1], fast, quantum=100)
            assert p.deficit == {"a": 0.0, "b": 40.0}, fast


class TestDRRvsDynamo:
    def test_skipped_rounds_stay_credited(self):
        # quantum 100; classes a (A1 150, A2 150) and b (B1 300), a first.
        # drr: a +100, b +100, nobody served (1 round needed: no skip); a 200: A1 (50 left),
        # A2 > 50; b 200 < 300; a 150: A2; b 300: B1.
        # drr-dynamo: the scan credits a 100, b 100, serves nobody; rounds = min(ceil(50/100),
        # ceil(200/100)) = 1 to every class: a 200, b 200; A1 (a 50, carried). A2 > 50: scan
        # from b: 200 < 300, +100: B1. Then a 50 + 100: A2.
        w = [q("A1", 150, "a", 0.0), q("B1", 300, "b", 1.0), q("A2", 150, "a", 2.0)]
        assert [r.request_id for r in make_policy("drr", None, quantum=100).order(w, 0.0)] == ["A1", "A2", "B1"]
        for fast in (False, True):
            orders, _ = run_steps("drr", [(w, 0)], fast, quantum=100)
            assert orders == [["A1", "A2", "B1"]]
        for fast in (False, True):
            orders, _ = run_steps("drr-dynamo", [(w, 0)], fast, quantum=100)
            assert orders == [["A1", "B1", "A2"]], fast

    def test_cost_fixed_when_first_seen(self):
        # quantum 100. Step 1: A1 costs 300, B1 100: both order B1 A1 (b pays at its first
        # visit); nothing admitted. Step 2: A1's prefix is now cached (cost 50): drr charges
        # the order-time 50 (a pays at its first visit: A1 B1); Dynamo keeps the cost at
        # enqueue, 300: B1 A1 again.
        a1, b1 = q("A1", 300, "a", 0.0), q("B1", 100, "b", 1.0)
        steps = [([a1, b1], 0), ([a1._replace(cached_len=250, uncached_len=50)], 1)]
        for fast in (False, True):
            orders, p = run_steps("drr", steps, fast, quantum=100)
            assert orders == [["B1", "A1"], ["A1", "B1"]], fast
        for fast in (False, True):
            orders, p = run_steps("drr-dynamo", steps, fast, quantum=100)
            assert orders == [["B1", "A1"], ["B1", "A1"]], fast
            # B1 admitted: a was credited 100 on the way (300 > 100), b's queue emptied (0).
            assert p.deficit == {"a": 100.0, "b": 0.0} and p.cost["A1"] == 300
            assert p.cursor == {"round": 2, "carry": None}


class DynamoQueue:
    """An independent model of Dynamo's router queue for the property below: a persistent queue
    that takes requests as they arrive (cost fixed then) and hands them out one ``pop()`` at a
    time, as ``PolicyQueue::pop_next`` does for one always-dispatchable worker. Classes are
    numbered in order of first arrival and never removed (Dynamo's class vector)."""

    def __init__(self, quantum: int) -> None:
        self.quantum = quantum
        self.queues: list[list[tuple[str, int]]] = []
        self.number: dict[str, int] = {}
        self.deficit: list[float] = []
        self.next_scan = 0  # class number where the next scan starts (after the last served)
        self.carry: int | None = None

    def push(self, client: str, rid: str, cost: int) -> None:
        if client not in self.number:
            self.number[client] = len(self.queues)
            self.queues.append([])
            self.deficit.append(0.0)
        self.queues[self.number[client]].append((rid, cost))

    def _serve(self, i: int) -> str:
        rid, cost = self.queues[i].pop(0)
        self.deficit[i] -= cost
        self.next_scan = i + 1
        if not self.queues[i]:
            self.deficit[i] = 0.0
        self.carry = i if self.queues[i] and self.deficit[i] > 0 else None
        return rid

    def pop(self) -> str:
        carried, self.carry = self.carry, None
        if carried is not None and self.queues[carried][0][1] <= self.deficit[carried]:
            return self._serve(carried)
        n = len(self.queues)
        scan = [(self.next_scan + j) % n for j in range(n)]
        live = [i for i in scan if self.queues[i]]
        for i in live:
            if self.queues[i][0][1] <= self.deficit[i]:
                return self._serve(i)
            self.deficit[i] += self.quantum
            if self.queues[i][0][1] <= self.deficit[i]:
                return self._serve(i)
        rounds = min(math.ceil((self.queues[i][0][1] - self.deficit[i]) / self.quantum) for i in live)
        for i in live:
            self.deficit[i] += rounds * self.quantum
        return self._serve(next(i for i in live if self.queues[i][0][1] <= self.deficit[i]))

    def drain_copy(self, n: int) -> list[str]:
        import copy
        other = copy.deepcopy(self)
        return [other.pop() for _ in range(n)]


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 10_000), quantum=st.sampled_from([100, 300]), num_clients=st.integers(1, 5),
       fast=st.booleans())
def test_drr_dynamo_is_dynamos_queue(seed, quantum, num_clients, fast):
    """Over 10 steps of random arrivals, admissions and cache changes (costs that change after
    arrival), each order (``order()``, or the fast path's read in full) is the sequence the
    model's pops would give, and the admitted prefix is what it pops."""
    rng = random.Random(seed)
    policy = make_policy("drr-dynamo", None, quantum=quantum)
    inc = policy.incremental_order() if fast else None
    model = DynamoQueue(quantum)
    waiting: dict[str, QueuedRequest] = {}
    t = 0.0
    for step in range(10):
        for _ in range(rng.randint(0, 4)):
            t += rng.random()
            rid, client, cost = f"r{len(model.number)}-{t:.6f}", f"c{rng.randrange(num_clients)}", rng.randint(1, 700)
            waiting[rid] = q(rid, cost, client, t)
            model.push(client, rid, cost)
            if inc is not None:
                inc.add(waiting[rid])
        if not waiting:
            continue
        got = inc.iter_order(t) if inc is not None else policy.order(list(waiting.values()), t)
        order = [r.request_id for r in got]
        assert order == model.drain_copy(len(waiting))
        k = rng.randint(0, len(order))
        policy.on_admitted([waiting[rid] for rid in order[:k]], t)
        for rid in order[:k]:
            assert model.pop() == rid
            del waiting[rid]
            if inc is not None:
                inc.remove(rid)
        for rid in list(waiting):  # the cache changed: new snapshots with another cost
            if rng.random() < 0.3:
                c = rng.randint(1, 700)
                waiting[rid] = waiting[rid]._replace(prompt_len=c, uncached_len=c)
                if inc is not None:
                    inc.add(waiting[rid])
