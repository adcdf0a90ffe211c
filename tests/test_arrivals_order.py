"""The open-loop release queue as a deque (``Arrivals`` with requests in release order) releases
the same requests at the same times in the same order as the heap it replaces."""

from __future__ import annotations

import math

import pytest
from collections import deque

from hypothesis import given, settings
from hypothesis import strategies as st

from fairsim.errors import EngineInvariantError
from fairsim.sim.arrivals import Arrivals, in_release_order
from fairsim.types import Request


def _drain(arrivals, clock):
    out = []
    for now in clock:
        out.append([(t, req.request_id, item) for t, req, item in arrivals.pop_due(now)])
    return out, len(arrivals)


def _entries(reqs):
    return [(r.arrival_time, r.request_id, r, None) for r in reqs]


def test_in_release_order_hand_examples():
    r = [Request("b", 0.0, 10), Request("a", 1.0, 10), Request("c", 1.0, 10)]
    assert in_release_order(_entries(r))
    assert not in_release_order(_entries([r[1], r[0]]))  # time decreases
    assert not in_release_order(_entries([r[2], r[1]]))  # same time, id decreases
    assert not in_release_order(_entries([r[0], r[0]]))  # not strictly increasing
    assert not in_release_order(_entries([Request("x", math.nan, 10), Request("y", math.nan, 10)]))
    assert not in_release_order(_entries([Request("x", 0.0, 10), Request("y", math.nan, 10)]))
    assert in_release_order([]) and in_release_order(_entries(r[:1]))


def test_deque_used_only_in_open_loop_release_order():
    reqs = [Request("a", 0.0, 10), Request("b", 2.0, 10)]
    assert isinstance(Arrivals([(r, r) for r in reqs], "open").heap, deque)
    assert isinstance(Arrivals([(r, r) for r in reversed(reqs)], "open").heap, list)
    assert isinstance(Arrivals([(r, r) for r in reqs], "closed").heap, list)
    arrivals = Arrivals([(r, i) for i, r in enumerate(reqs)], "open")
    assert arrivals.next_time() == 0.0
    assert [(t, q.request_id, i) for t, q, i in arrivals.pop_due(1.0)] == [(0.0, "a", 0)]
    assert len(arrivals) == 1 and arrivals.heap[0][0] == 2.0
    assert arrivals.pop_due(1.5) == []
    assert [q.request_id for _, q, _ in arrivals.pop_due(2.0)] == ["b"]
    assert arrivals.next_time() is None and len(arrivals) == 0 and not arrivals.heap


@settings(max_examples=200, deadline=None)
@given(times=st.lists(st.integers(0, 6), min_size=0, max_size=25),
       clock=st.lists(st.integers(0, 8), min_size=1, max_size=10))
def test_deque_releases_as_the_heap(times, clock):
    reqs = sorted((Request(f"r{i:02d}", t / 2, 10) for i, t in enumerate(times)),
                  key=lambda r: (r.arrival_time, r.request_id))
    pairs = [(r, i) for i, r in enumerate(reqs)]
    fast = Arrivals(pairs, "open")
    assert isinstance(fast.heap, deque)
    slow = Arrivals(list(reversed(pairs)), "open")
    assert len(pairs) < 2 or isinstance(slow.heap, list)
    steps = [c / 2 for c in sorted(clock)] + [math.inf]
    assert _drain(fast, steps) == _drain(slow, steps)
    assert len(fast) == 0


def test_finished_queues_followers_once_and_refuses_a_second_finish():
    """Closed loop: a finish at 5 s queues the follower at 5 + 2 x 1.5 = 8 s; a second finish of
    the same request would queue it again, so it is refused. Open loop keeps no record: a finish
    queues nothing there, and only the count moves."""
    first = Request("a", 0.0, 10)
    follower = Request("b", 0.0, 10, after="a", delay_s=2.0)
    closed = Arrivals([(first, 1), (follower, 2)], "closed", think_scale=1.5)
    assert [(t, r.request_id) for t, r, _ in closed.pop_due(0.0)] == [(0.0, "a")]
    assert len(closed) == 1 and closed.next_time() is None  # held for "a"
    closed.finished("a", 5.0)
    assert closed.next_time() == 8.0 and closed.finished_count == 1
    with pytest.raises(EngineInvariantError, match="'a' finished twice"):
        closed.finished("a", 6.0)
    assert [(t, r.request_id, item) for t, r, item in closed.pop_due(8.0)] == [(8.0, "b", 2)]

    opened = Arrivals([(first, 1)], "open")
    opened.pop_due(0.0)
    opened.finished("a", 5.0)
    assert opened.finished_count == 1 and len(opened) == 0 and opened.next_time() is None
