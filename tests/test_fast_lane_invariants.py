"""The Fast lane's bucket structure after every operation, and the family's tables on the trace.

``FastLane`` keeps each bucket's keys sorted with its front cached (``front``) and the bucket's
bound line in two vectors (``_c``, ``_s``, set by ``_sync``); a re-key may store a key in place
(``_rekey_as``) and a front change re-sets only the intercept (``_sync_front``). These tests
check that structure after every operation of random histories (adds, hit changes both ways,
stale marks with a resolver, removals, reads stopped after a few items at growing clocks, at and
one ulp around the crossings of score lines), that every read equals the reference order
(``Fairway.fast_lane``), and that the family's tables on a slice of the conversation trace are
those of the reference path (``order()`` every step).
"""

from __future__ import annotations

import math
import random

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fairsim.policies.fast_lane as fast_lane
from fairsim.policies import make_policy
from fairsim.policies.fast_lane import EMPTY, MARGIN, FastLane, NumpyBoundLines
from fairsim.sim import simulate
from fairsim.sim.config import EngineConfig
from fairsim.types import QueuedRequest
from tests.test_fast_lane import PROFILE, _ids, _modes
from tests.test_fast_order import CONVERSATION

FAMILY = ["fairway", "fairway-abswait", "fairway-nofair", "fairway-carry", "fairway-plus",
          "fairway-patience", "fairway-deadline"]


def check_structure(lane: FastLane) -> None:
    """Every bucketed item sits in its bucket under its key; each bucket's keys are sorted and
    distinct, its front is its first key, and its bound line is ``_sync``'s."""
    if lane._small:
        return
    members: dict[int, set] = {b.slot: set() for b in lane._by_slot}
    for rid, item in lane._items.items():
        b, kt = item[5], item[6]
        assert kt[2] == rid and kt not in members[b.slot]
        members[b.slot].add(kt)
        assert item[4] <= b.s_hi
    for b in lane._by_slot:
        assert b.keys == sorted(set(b.keys)), "keys sorted and distinct"
        assert set(b.keys) == members[b.slot], "exactly its items' keys"
        assert b.front == (b.keys[0] if b.keys else None)
        c, s = lane._lines.line(b.slot)
        if b.front is None:
            assert c == EMPTY
        else:
            k = -b.front[0]
            assert c == k + 2.0 * MARGIN * (1.0 + abs(k)) - (b.t0 - lane._origin) * b.s_hi
            assert s == b.s_hi * (1.0 + 2.0 * MARGIN)
    lines = lane._lines
    if isinstance(lines, NumpyBoundLines):
        nb, cv, sv = lines._views
        if nb == len(lane._by_slot):
            assert np.shares_memory(cv, lines._c) and np.shares_memory(sv, lines._s)


def _crossing_clocks(policy, qs, now):
    """The clocks after ``now`` where two of the first few requests' score lines meet."""
    head = policy.fast_lane(qs, now)[:4]
    out = []
    for a in head:
        for b in qs[:40]:
            sa, sb = 1.0 / policy.slo(a.prompt_len), 1.0 / policy.slo(b.prompt_len)
            if sa == sb:
                continue
            ha = a.cached_len / max(a.uncached_len, 1)
            hb = b.cached_len / max(b.uncached_len, 1)
            t = (hb - ha + a.arrival_time * sa - b.arrival_time * sb) / (sa - sb)
            if now < t < now + 1e4:
                out.append(t)
    return sorted(out)[:4]


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 100_000), cap=st.sampled_from([None, 0.5, 3.0]),
       origin=st.sampled_from([0.0, -1e9, 1.7e9]), small=st.booleans())
def test_structure_and_reads_through_random_histories(seed, cap, origin, small):
    rng = random.Random(seed)
    policy = make_policy("fairway-carry", PROFILE, **({} if cap is None else {"wait_cap": cap}))
    modes = (fast_lane.SMALL_HI, fast_lane.SMALL_LO) if small else (0, -1)
    with _modes(*modes):
        lane = FastLane(policy.slo, policy.wait_cap)
        current: dict[str, QueuedRequest] = {}  # this step's snapshot of each waiting request
        lane.set_resolver(lambda q: current[q.request_id])
        t = now = origin
        for step in range(25):
            for _ in range(rng.randint(0, 25)):
                t += rng.expovariate(3.0)
                L = int(rng.lognormvariate(7.5, 1.2)) + 2
                h = rng.randint(0, L - 1) if rng.random() < 0.5 else 0
                q = QueuedRequest(f"r{step}-{rng.randrange(10**9)}", t, L, h, max(1, L - h), 0, None)
                current[q.request_id] = q
                lane.add(q)
                check_structure(lane)
            rids = list(current)
            # Hit changes: some told eagerly (add: a rise re-keys, a fall keeps the key), some
            # marked stale (raised or not) and read through the resolver.
            stale, raised = [], []
            for rid in rng.sample(rids, min(len(rids), rng.randint(0, 8))):
                old = current[rid]
                h = rng.randint(0, old.prompt_len - 1)
                q = current[rid] = QueuedRequest(rid, old.arrival_time, old.prompt_len, h,
                                                 max(1, old.prompt_len - h), 0, None)
                if rng.random() < 0.5:
                    lane.add(q)
                else:
                    stale.append(rid)
                    # The contract: every stale request whose hit rose is named raised (a
                    # fall keeps the lane's key an upper bound); some others are too.
                    if h > old.cached_len or rng.random() < 0.3:
                        raised.append(rid)
            if stale:
                lane.stale(stale, raised)
            check_structure(lane)
            if not current:
                continue
            now = max(now, t)
            qs = list(current.values())
            clocks = [now + rng.random() * x for x in (0.0, 0.5, 20.0)] + _crossing_clocks(policy, qs, now)
            seq = sorted({c2 for c in clocks for c2 in (math.nextafter(c, -math.inf), c,
                                                         math.nextafter(c, math.inf)) if c2 >= now})
            for c in seq[: rng.randint(1, len(seq))]:
                now = c
                expected = _ids(policy.fast_lane(list(current.values()), now))
                k = rng.randint(1, 4)
                it = lane.iter_order(now)
                got = [next(it).request_id for _ in range(min(k, len(expected)))]
                assert got == expected[: len(got)]
                check_structure(lane)
            for rid in _ids(policy.fast_lane(list(current.values()), now))[: rng.randint(0, 3)]:
                del current[rid]
                lane.remove(rid)
                check_structure(lane)


def test_rekey_in_place_and_moved_by_hand():
    """One bucket (equal SLOs) of three requests: tightening the front's key at a later clock
    keeps its place (stored in place) or moves it behind the next (delete and insert); either
    way the keys stay sorted, the front and its bound line follow."""
    policy = make_policy("fairway", PROFILE)
    with _modes(0, -1):
        lane = FastLane(policy.slo)
        # The Python reference's methods and buckets (``_rekey_as`` below is the reference's; the
        # compiled twins keep their keys in the compiled Bucket's blocks).
        for name in fast_lane.COMPILED_METHODS:
            lane.__dict__.pop(name, None)
        lane._bucket_order = lane._bucket_order_py
        lane._new_bucket = fast_lane._Bucket
        qs = [QueuedRequest(rid, arr, 100, h, 100 - h, 0, None)
              for rid, arr, h in (("a", 0.0, 90), ("b", 0.0, 50), ("c", 0.0, 0))]
        for q in qs:
            lane.add(q)
        assert _ids(lane.iter_order(1.0)) == ["a", "b", "c"]
        check_structure(lane)
        item = lane._items["a"]
        b = item[5]
        # The key of a with a lower hit (h/c 1 instead of 9): still first (b's h/c is 1, tie
        # on score, a arrived with b but sorts first by id): stored in place.
        lane._clock = 1.0
        lane._rekey_as(item, "a", 1.0)
        assert b.keys[0][2] == "a" and b.front is b.keys[0]
        check_structure(lane)
        # With h/c 0 it falls behind b: moved.
        lane._rekey_as(item, "a", 0.0)
        assert [k[2] for k in b.keys] == ["b", "a", "c"]
        check_structure(lane)


@pytest.mark.skipif(not CONVERSATION.exists(), reason="shared conversation trace not present")
@pytest.mark.parametrize("name", FAMILY)
def test_family_same_tables_on_conversation_slice(name):
    """The first 1,000 requests of the conversation trace at its native rate (hundreds waiting,
    the lane bucketed), and at four times its rate: the fast path's tables are the reference
    path's (``order()`` over every waiting snapshot each step)."""
    from fairsim.traces.formats import read_trace

    requests = list(read_trace(CONVERSATION).requests)[:1000]
    engine = EngineConfig(kv_blocks=451)
    for scale in (1.0, 0.25):
        reqs = [r if scale == 1.0 else _scaled(r, scale) for r in requests]
        fast = simulate(reqs, make_policy(name, PROFILE), PROFILE, engine, fast_order=True)
        ref = simulate(reqs, make_policy(name, PROFILE), PROFILE, engine, fast_order=False)
        pd.testing.assert_frame_equal(fast.requests, ref.requests, check_exact=True)
        pd.testing.assert_frame_equal(fast.steps, ref.steps, check_exact=True)
        assert fast.steps["waiting"].max() >= 100


def _scaled(r, scale):
    import dataclasses
    return dataclasses.replace(r, arrival_time=r.arrival_time * scale)
