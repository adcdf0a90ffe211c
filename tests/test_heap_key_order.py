"""``HeapKeyOrder`` (LPM's, RAGCache's and k-LPM's fast path, issue 13) yields exactly the
sorted order of the current keys, whatever mix of arrivals, re-keys (a hit that rose or fell),
removals, partial reads and heap rebuilds came before, and the snapshot it yields is the latest one
added for each request."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairsim.policies.incremental import HeapKeyOrder, longest_key
from tests.utils import make_queued


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 10_000), compact_min=st.sampled_from([0, 1, 3, 1024]),
       steps=st.integers(1, 50))
def test_reads_follow_the_sorted_keys(seed, compact_min, steps):
    rng = random.Random(seed)
    order = HeapKeyOrder(longest_key)
    order.COMPACT_MIN = compact_min
    held: dict[str, object] = {}
    made = 0
    for step in range(steps):
        for _ in range(rng.randint(0, 4)):  # arrivals
            q = make_queued(f"r{made:03d}", rng.choice([0, 16, 32]), rng.randint(1, 50),
                            arrival=float(made // 2))  # pairs share an arrival: ties by id
            made += 1
            held[q.request_id] = q
            order.add(q)
        for rid in rng.sample(sorted(held), min(len(held), rng.randint(0, 3))):  # re-keys
            old = held[rid]
            h = rng.choice([old.cached_len, 0, 16, 48])  # the same hit, or risen or fallen
            q = held[rid] = make_queued(rid, h, old.prompt_len - h if old.prompt_len > h else 1,
                                        arrival=old.arrival_time)
            order.add(q)
        expected = sorted(held.values(), key=longest_key)
        assert len(order) == len(expected)
        k = rng.randint(0, len(expected))  # a step reads the head only, a few, or everything
        it = order.iter_order()
        got = [next(it) for _ in range(k)]
        assert got == expected[:k]
        assert all(a is b for a, b in zip(got, expected))  # the latest snapshot, not an equal one
        gone = [q for q in got if rng.random() < 0.5] if got else []
        for q in gone:  # admitted from what was read (the engine removes after the loop)
            order.remove(q.request_id)
            del held[q.request_id]
    assert list(order.iter_order()) == sorted(held.values(), key=longest_key)


def test_stale_keys_are_dropped_and_the_heap_rebuilt():
    """Four requests re-keyed twice each leave 8 stale keys; with COMPACT_MIN 0 the next read
    rebuilds the heap from the 4 current keys (12 > 2 x 4 + 0)."""
    order = HeapKeyOrder(longest_key)
    order.COMPACT_MIN = 0
    qs = {f"r{i}": make_queued(f"r{i}", 0, 10, arrival=float(i)) for i in range(4)}
    for q in qs.values():
        order.add(q)
    for h in (16, 32):
        for rid, q in qs.items():
            qs[rid] = make_queued(rid, h + int(rid[1]), 10, arrival=q.arrival_time)
            order.add(qs[rid])
    assert len(order._heap) == 12
    it = order.iter_order()
    assert len(order._heap) == 4  # rebuilt when the read starts
    assert [q.request_id for q in it] == ["r3", "r2", "r1", "r0"]  # -h first
    assert len(order._heap) == 0 and len(order) == 4  # a read pops what it passes...
    order.iter_order()
    assert len(order._heap) == 4  # ...and the next read (or change) pushes them back


def test_an_equal_key_keeps_its_place_and_takes_the_new_snapshot():
    order = HeapKeyOrder(longest_key)
    a, b = make_queued("a", 16, 10, arrival=0.0), make_queued("b", 16, 10, arrival=1.0)
    order.add(a)
    order.add(b)
    a2 = make_queued("a", 16, 10, arrival=0.0)
    order.add(a2)
    assert len(order._heap) == 2  # no new key pushed
    assert [q for q in order.iter_order()] == [a2, b] and next(order.iter_order()) is a2


def test_a_read_after_a_change_raises():
    order = HeapKeyOrder(longest_key)
    for i in range(3):
        order.add(make_queued(f"r{i}", 0, 10, arrival=float(i)))
    it = order.iter_order()
    assert next(it).request_id == "r0"
    order.remove("r0")
    with pytest.raises(RuntimeError, match="changed while its order was being read"):
        next(it)
    assert [q.request_id for q in order.iter_order()] == ["r1", "r2"]
