"""Fairway's bucketed Fast lane (``fairsim.policies.fast_lane``) == ``Fairway.fast_lane``.

Random queues over many steps: arrivals, hits that rise and fall (keys kept as upper bounds),
removals, partial reads (the engine stops at the budget), clocks that jump, wait caps, slopes
spread over many buckets and exact ties; the requests a read took but did not yield re-keyed at
the next read.
"""

from __future__ import annotations

import random
from contextlib import contextmanager

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fairsim.policies.fast_lane as fast_lane
from fairsim.costmodel import load_profile
from fairsim.policies import make_policy
from fairsim.policies.fast_lane import FastLane
from fairsim.types import QueuedRequest
from tests.utils import change_hits

PROFILE = load_profile("a6000-llama3.1-8b-vllm-prior")


def _ids(qs):
    return [q.request_id for q in qs]


#: (SMALL_HI, SMALL_LO): the shipped thresholds; always bucketed; a switch every few steps.
MODES = [(fast_lane.SMALL_HI, fast_lane.SMALL_LO), (0, -1), (6, 2)]


@contextmanager
def _modes(hi, lo):
    old = fast_lane.SMALL_HI, fast_lane.SMALL_LO
    fast_lane.SMALL_HI, fast_lane.SMALL_LO = hi, lo
    try:
        yield
    finally:
        fast_lane.SMALL_HI, fast_lane.SMALL_LO = old


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 100_000), cap=st.sampled_from([None, 0.0, 0.5, 3.0]),
       ties=st.booleans(), jumpy=st.booleans(), modes=st.sampled_from(MODES),
       origin=st.sampled_from([0.0, 0.0, -1e9, 1.7e9]))  # 1.7e9: the live hook's time.time()
def test_bucketed_lane_equals_reference(seed, cap, ties, jumpy, modes, origin):
    rng = random.Random(seed)
    policy = make_policy("fairway-carry", PROFILE, **({} if cap is None else {"wait_cap": cap}))
    with _modes(*modes):
        lane = FastLane(policy.slo, policy.wait_cap)
        waiting: dict[str, QueuedRequest] = {}
        t = origin
        now = origin
        for step in range(25):
            change_hits(rng, waiting, lane, 12, (lambda r, q: r.choice([0, q.prompt_len // 2, q.prompt_len - 1]))
                        if ties else None)
            for _ in range(rng.randint(0, 40)):
                t += 0.0 if ties and rng.random() < 0.5 else rng.expovariate(3.0)
                L = rng.choice([100, 6000, 30000]) if ties else int(rng.lognormvariate(8.0, 1.2)) + 2
                h = rng.randint(0, L - 1) if rng.random() < 0.5 else 0
                q = QueuedRequest(f"r{rng.randrange(10**6):06d}-{step}-{len(waiting)}", t, L, h,
                                  max(1, L - h), 0, None)
                waiting[q.request_id] = q
                lane.add(q)
            if not waiting:
                continue
            # The engine's clock only grows; the lane must also hold for a clock that goes back.
            now = (t + rng.random() * 50) if jumpy else max(now, t) + rng.random()
            expected = _ids(policy.fast_lane(list(waiting.values()), now))
            it = lane.iter_order(now)
            k = rng.choice([1, 2, 5, len(expected)])
            got = [next(it).request_id for _ in range(min(k, len(expected)))]
            assert got == expected[:len(got)]
            if rng.random() < 0.2:
                assert got + _ids(it) == expected
            for rid in got[: rng.randint(0, len(got))]:
                del waiting[rid]
                lane.remove(rid)
        assert len(lane) == len(waiting)


def test_a_negative_clock_keeps_the_order():
    """Bound lines measured from the clock the buckets were built at: measured from 0, a clock of
    -1e9 s pulled each line below its front's score by about 2e-9 x 1e9 x slope, and ``a`` (9 at
    T, slope 1) came before ``b`` (10 at T, slope 2). Found in review."""
    slo = {100: 1.0, 200: 0.5}.__getitem__
    T = -1e9
    with _modes(0, -1):
        lane = FastLane(slo)
        lane.add(QueuedRequest("a", T - 9.0, 100, 0, 100, 0, None))  # score at T: 9 / 1
        lane.add(QueuedRequest("b", T - 5.0, 200, 0, 200, 0, None))  # score at T: 5 / 0.5 = 10
        assert _ids(lane.iter_order(T)) == ["b", "a"]
        assert _ids(lane.iter_order(T + 5.0)) == ["b", "a"]  # 14 / 20: b's slope is the larger


def test_many_buckets_and_a_long_queue():
    """3,000 waiting over a wide range of SLOs, read a few at a time over 200 steps."""
    rng = random.Random(7)
    policy = make_policy("fairway", PROFILE)
    lane = FastLane(policy.slo)
    waiting = {}
    t = 0.0
    for i in range(3000):
        t += rng.expovariate(5.0)
        L = int(rng.lognormvariate(8.5, 1.3)) + 2
        h = rng.choice([0, (L - 1) // 512 * 512])
        q = QueuedRequest(f"q{i}", t, L, h, max(1, L - h), 0, None)
        waiting[q.request_id] = q
        lane.add(q)
    assert lane._small  # no buckets before the first read
    now = t
    for step in range(200):
        now += 0.4
        expected = _ids(policy.fast_lane(list(waiting.values()), now))
        it = lane.iter_order(now)
        got = [next(it).request_id for _ in range(3)]
        assert got == expected[:3]
        assert len({id(b) for b in lane._by_slot if b.keys}) > 50  # really many slope buckets
        for rid in got[:2]:
            del waiting[rid]
            lane.remove(rid)
        for rid in rng.sample(sorted(waiting), 20):  # hits flip up and down
            q = waiting[rid]
            h = 0 if q.cached_len else (q.prompt_len - 1) // 512 * 512
            waiting[rid] = q = q._replace(cached_len=h, uncached_len=max(1, q.prompt_len - h))
            lane.add(q)
    assert _ids(lane.iter_order(now)) == _ids(policy.fast_lane(list(waiting.values()), now))


def test_readding_under_the_same_id_with_another_arrival():
    policy = make_policy("fairway", PROFILE)
    lane = FastLane(policy.slo)
    qs = [QueuedRequest(f"r{i}", float(i), 1000 + 500 * i, 0, 1000 + 500 * i, 0, None) for i in range(40)]
    for q in qs:
        lane.add(q)
    moved = qs[3]._replace(arrival_time=-5.0, prompt_len=20_000, uncached_len=20_000)
    lane.add(moved)
    qs[3] = moved
    assert _ids(lane.iter_order(50.0)) == _ids(policy.fast_lane(qs, 50.0))


def test_a_read_far_before_arrival_keeps_the_bounds():
    """Found in review: a clock gone back 1e8 s below the requests' arrivals re-keyed a wasted
    request there, and the two terms of its key (about 9.6e7 each) cancelled to a bound below
    its exact score, far under the float margin; keys are now made no earlier than the bucket's
    reference time. b and c tie on score and arrival (b wins on its id) in two buckets."""
    T = 1e8
    policy = make_policy("fairway", PROFILE)
    with _modes(0, -1):
        lane = FastLane(policy.slo)
        waiting = {}
        for q in (QueuedRequest("r3", 0.0, 4000, 3999, 1, 0, None),
                  QueuedRequest("a", T, 2524, 0, 2524, 0, None), QueuedRequest("b", T, 2524, 0, 2524, 0, None)):
            waiting[q.request_id] = q
            lane.add(q)
        it = lane.iter_order(T)
        assert [next(it).request_id for _ in range(2)] == ["r3", "a"]  # b taken, not yielded
        c = waiting["c"] = QueuedRequest("c", T, 200, 0, 200, 0, None)
        lane.add(c)
        assert next(lane.iter_order(0.0)).request_id == "r3"  # the clock goes back to 0
        expected = _ids(policy.fast_lane(list(waiting.values()), T))
        assert expected == ["r3", "a", "b", "c"]
        assert _ids(lane.iter_order(T)) == expected


def test_wasted_takes_are_rekeyed_at_the_next_read(monkeypatch):
    """A read that stops early leaves requests it took but did not yield; the next full read
    re-keys them at its clock, so each one's bound is its exact score there (the mechanism that
    keeps a read's waste from growing with the queue; orders stay right without it, only slower).
    Full reads only: a kept first request (``CACHE_FIRST``) is yielded without settling."""
    monkeypatch.setattr(fast_lane, "CACHE_FIRST", False)
    policy = make_policy("fairway", PROFILE)
    rng = random.Random(3)
    with _modes(0, -1):
        lane = FastLane(policy.slo)
        for i in range(2000):  # SLOs of 1.2-3.9 s: many buckets, each with a spread of slopes
            L = rng.randrange(3000, 9000)
            lane.add(QueuedRequest(f"q{i:04d}", 0.01 * i, L, 0, L, 0, None))
        now = 100.0
        rekeyed = 0
        for _ in range(100):  # enough reads to waste some takes with DELTA = 1/128 (12 here)
            it = lane.iter_order(now)
            next(it), next(it)
            wasted = [e[2] for e in lane._waste if e[3] >= 0]
            now += 30.0
            next(lane.iter_order(now))  # settles: re-keys the last read's waste at ``now``
            for rid in wasted:
                item = lane._items.get(rid)
                if item is None:
                    continue
                b = item[5]
                bound = -item[6][0] + (now - b.t0) * b.s_hi
                assert bound == pytest.approx(item[1] + (now - item[2]) / item[3], rel=1e-12, abs=1e-9)
                rekeyed += 1
        assert rekeyed >= 10  # the reads did waste takes


@pytest.mark.parametrize("n", [0, 1, 24, 25])
def test_small_and_empty_queues(n):
    policy = make_policy("fairway", PROFILE)
    lane = FastLane(policy.slo)
    qs = [QueuedRequest(f"r{i}", float(i % 3), 500 * (1 + i % 4), 0, 500 * (1 + i % 4), 0, None) for i in range(n)]
    for q in qs:
        lane.add(q)
    assert _ids(lane.iter_order(10.0)) == _ids(policy.fast_lane(qs, 10.0))


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 100_000), cap=st.sampled_from([None, 1.0]), modes=st.sampled_from(MODES),
       directed=st.booleans())
def test_stale_requests_are_bounded_then_read(seed, cap, modes, directed):
    """Lazy hits: stale() without the new snapshot, the lane reads it through the resolver."""
    with _modes(*modes):
        _stale_history(seed, cap, directed)


def _stale_history(seed, cap, directed):
    rng = random.Random(seed)
    policy = make_policy("fairway-carry", PROFILE, **({} if cap is None else {"wait_cap": cap}))
    lane = FastLane(policy.slo, policy.wait_cap)
    truth: dict[str, QueuedRequest] = {}
    reads = []

    def resolve(q):
        reads.append(q.request_id)
        return truth[q.request_id]

    lane.set_resolver(resolve)
    t = 0.0
    for step in range(20):
        for _ in range(rng.randint(0, 30)):
            t += rng.expovariate(4.0)
            L = int(rng.lognormvariate(7.5, 1.2)) + 2
            keys = tuple(range(L // 16))
            h = rng.randint(0, len(keys)) * 16 if rng.random() < 0.5 else 0
            h = min(h, (L - 1) // 16 * 16)
            q = QueuedRequest(f"q{step}-{len(truth)}", t, L, h, max(1, L - h), 0, None, keys, 16)
            truth[q.request_id] = q
            lane.add(q)
        changed = rng.sample(sorted(truth), k=min(len(truth), rng.randint(0, 15)))
        raised = []
        for rid in changed:  # hits change; the lane is only told they are stale
            q = truth[rid]
            h = rng.randint(0, (q.prompt_len - 1) // 16) * 16
            if h > q.cached_len or rng.random() < 0.2:
                raised.append(rid)  # a rise must be named; a fall may be
            truth[rid] = q._replace(cached_len=h, uncached_len=max(1, q.prompt_len - h))
        # Without direction (every hit may have risen) or with it; a request already stale may
        # rise later (named in raised only).
        if directed:
            lane.stale([r for r in changed if r not in raised or rng.random() < 0.5], raised)
        else:
            lane.stale(changed)
        if not truth:
            continue
        now = t + rng.random()
        expected = _ids(policy.fast_lane(list(truth.values()), now))
        it = lane.iter_order(now)
        got = [next(it) for _ in range(min(rng.choice([1, 3, 100]), len(expected)))]
        assert [q.request_id for q in got] == expected[:len(got)]
        assert all(q is truth[q.request_id] for q in got)  # this step's snapshots, read through
        for q in got[: rng.randint(0, 2)]:
            del truth[q.request_id]
            lane.remove(q.request_id)
    assert reads  # the resolver was used


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 100_000), cap=st.sampled_from([None, 0.5]),
       modes=st.sampled_from([(6, 2), (3, 0), (10, 9)]))
def test_small_mode_switches_keep_the_order(seed, cap, modes):
    """A queue that grows past SMALL_HI and drains below SMALL_LO again and again, with hits
    that change (added or only marked stale): every read equals ``Fairway.fast_lane``."""
    _switch_history(seed, cap, modes)


def test_the_switch_history_switches_both_ways():
    assert sum(_switch_history(seed, None, (6, 2)) for seed in range(5)) >= 4


def _switch_history(seed, cap, modes) -> int:
    """Run one random history (asserting every read); return the number of mode switches."""
    rng = random.Random(seed)
    policy = make_policy("fairway-carry", PROFILE, **({} if cap is None else {"wait_cap": cap}))
    truth: dict[str, QueuedRequest] = {}

    def resolve(q):
        return truth[q.request_id]

    switches = 0
    with _modes(*modes):
        lane = FastLane(policy.slo, policy.wait_cap)
        lane.set_resolver(resolve)
        t = 0.0
        was_small = lane._small
        for step in range(40):
            grow = rng.random() < 0.5
            for _ in range(rng.randint(0, 8 if grow else 2)):
                t += rng.expovariate(2.0)
                L = rng.choice([300, 2000, int(rng.lognormvariate(8.0, 1.0)) + 2])
                keys = tuple(range(L // 64))
                h = min(rng.randint(0, len(keys)) * 64, (L - 1) // 64 * 64)
                q = QueuedRequest(f"q{step}-{len(truth)}", t, L, h, max(1, L - h), 0, None, keys, 64)
                truth[q.request_id] = q
                lane.add(q)
            for rid in rng.sample(sorted(truth), k=min(len(truth), rng.randint(0, 4))):
                q = truth[rid]
                h = rng.randint(0, (q.prompt_len - 1) // 64) * 64
                rose = h > q.cached_len
                truth[rid] = q = q._replace(cached_len=h, uncached_len=max(1, q.prompt_len - h))
                if rng.random() < 0.5:
                    lane.add(q)
                elif rose or rng.random() < 0.3:
                    lane.stale([], [rid])  # may have risen
                else:
                    lane.stale([rid], [])  # only fell
            now = t + rng.random() * 3
            expected = _ids(policy.fast_lane(list(truth.values()), now))
            it = lane.iter_order(now)
            got = [next(it) for _ in range(min(rng.choice([1, 2, 50]), len(expected)))]
            assert [q.request_id for q in got] == expected[:len(got)]
            assert all(q is truth[q.request_id] for q in got)
            switches += lane._small != was_small
            was_small = lane._small
            gone = [q.request_id for q in got[: rng.randint(0, len(got))]]
            if not grow:
                gone += rng.sample(sorted(set(truth) - set(gone)), k=min(len(truth) - len(gone), rng.randint(0, 6)))
            for rid in gone:
                del truth[rid]
                lane.remove(rid)
        assert len(lane) == len(truth)
    return switches
