"""``ArrivalOrder`` (an ``OrderedDict``) and ``StaleArrivalOrder`` (a dict compacted after
many removals: a scan over deleted slots at the start of every iteration was FCFS's hot spot
under overload): the order and the lookups of Fairway-carry's ``_UncachedView`` are those of
a sorted list whatever the removals and compactions."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from fairsim.policies.incremental import ArrivalOrder, StaleArrivalOrder, _UncachedView
from tests.utils import make_queued


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 10_000), compact_min=st.sampled_from([1, 2, 5, 1024]),
       steps=st.integers(1, 60), front=st.floats(0.0, 1.0), kind=st.sampled_from([ArrivalOrder, StaleArrivalOrder]))
def test_order_and_lookups_survive_removals(seed, compact_min, steps, front, kind):
    rng = random.Random(seed)
    order = kind()
    order.COMPACT_MIN = compact_min  # StaleArrivalOrder's; ArrivalOrder never compacts
    view = _UncachedView(order)
    held: dict[str, object] = {}
    t = 0.0
    for step in range(steps):
        for _ in range(rng.randint(0, 4)):
            t += rng.choice([0.0, 0.5, 1.0])
            q = make_queued(f"r{step}-{len(held)}-{rng.randrange(10**6)}", rng.randint(0, 50),
                            rng.randint(1, 50), arrival=t)
            held[q.request_id] = q
            order.add(q)
        expected = sorted(held.values(), key=lambda q: (q.arrival_time, q.request_id))
        assert list(order.iter_order()) == expected
        for q in expected:
            assert view.get(q.request_id) == q.uncached_len
        k = min(len(expected), rng.randint(0, 3))
        # Mostly the oldest leave (FCFS admits the head), sometimes any.
        gone = expected[:k] if rng.random() < front else rng.sample(expected, k)
        for q in gone:
            order.remove(q.request_id)
            del held[q.request_id]
            assert view.get(q.request_id) is None
    assert list(order.iter_order()) == sorted(held.values(), key=lambda q: (q.arrival_time, q.request_id))


def test_compaction_threshold_by_hand():
    """COMPACT_MIN 4: with 12 held, the 4th removal leaves 8 (4 >= 8 / 4): compacted once."""
    order = StaleArrivalOrder()
    order.COMPACT_MIN = 4
    qs = [make_queued(f"r{i:02d}", 0, 1, arrival=float(i)) for i in range(12)]
    for q in qs:
        order.add(q)
    first = order.items
    for q in qs[:3]:
        order.remove(q.request_id)
    assert order.items is first  # 3 removals: below COMPACT_MIN
    order.remove(qs[3].request_id)
    assert order.items is not first and list(order.items) == [q.request_id for q in qs[4:]]
    assert [q.request_id for q in order.iter_order()] == [q.request_id for q in qs[4:]]
