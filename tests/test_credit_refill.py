"""Credit policies on hand-made queues where admissions empty a client's queue and a new request
refills it before the next step (VTC's lift, DLPM's reset). Each order is checked on the plain
``order()`` and on the fast path (``incremental_order()``), fed as the engine feeds it."""

from __future__ import annotations

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

