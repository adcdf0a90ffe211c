"""The Fairway family's cheaper bookkeeping keeps its invariants (the speed-ups of the fast paths).

- ``DueBlocks``: a key appended after every key updates its block's total and least margin in
  O(1) (``_append``) instead of re-summing the block; the sums must equal a re-sum, and the
  walks the plain definition, when most adds are such appends (the engine's usual newcomer).
- ``DeadlineOrder``: a newcomer lowers the due test's ``floor`` to ``d - `` all the work waiting
  only (no longer also by its work); it must stay at most every margin of a request not urgent
  (else a due request would be missed).
- ``FastLane``: the buckets are plain sorted lists; each stays sorted, its ``front`` is its first
  key, and every bucketed request's key is in its bucket exactly once.

The decisions themselves are compared with the reference orders in tests/test_deadline_fast.py,
tests/test_fast_lane.py and tests/test_fast_order.py.
"""

from __future__ import annotations

import math
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from fairsim.policies import FairwayDeadline
from fairsim.policies.deadline_fast import DeadlineOrder, DueBlocks
from fairsim.policies.fast_lane import FastLane
from tests.test_deadline_fast import odd_idle
from tests.test_fast_lane import PROFILE, _ids, _modes
from fairsim.policies import make_policy
from tests.utils import make_queued


def _margins(keys, work, mode):
    """``D - P`` of each key in deadline order (the definition, one sorted list)."""
    acc, out = 0, []
    for key in keys:
        acc += work[key]
        out.append(key[0] - {"queue": acc, "own": work[key], "none": 0}[mode])
    return out


@settings(max_examples=150, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from(["append", "append", "append", "add", "remove", "walk"]),
                              st.integers(0, 30), st.integers(0, 50), st.integers(-20, 600)),
                    max_size=150),
       mode=st.sampled_from(["queue", "own", "none"]))
def test_appended_keys_keep_block_sums_and_walks(ops, mode):
    """Mostly appends (a deadline past every key), some keys inside the order, removals and
    walks: at every walk the newly due keys are the definition's, the least margin at most the
    definition's, and every block's total (``queue``) equals a fresh re-sum, its least at most
    the re-sum's."""
    due = DueBlocks(mode)
    due.BLOCK = 4  # splits and compactions within short histories
    keys: list = []
    work: dict = {}
    urgent: set = set()
    top = 0
    for seq, (op, d, w, t) in enumerate(ops):
        if op in ("append", "add"):
            if op == "append":
                top += d
                key = (top, 0.0, f"r{seq:03d}")
            else:
                key = (d * top // 30, 0.0, f"r{seq:03d}")
            due.add(key, w)
            keys.append(key)
            keys.sort()
            work[key] = w
        elif op == "remove" and keys:
            key = keys.pop(d % len(keys))
            due.remove(key)
            urgent.discard(key)
        elif op == "walk":
            newly, least = due.mark_due(t)
            margins = _margins(keys, work, mode)
            expect = [k for k, m in zip(keys, margins) if k not in urgent and m <= t]
            urgent.update(expect)
            assert newly == expect
            # A lower bound (mark_due's contract): a removal leaves the leasts of blocks the walk
            # did not open as they were (``_remove_now``), e.g. 0 after the last key left, not inf.
            assert least <= min((m for k, m in zip(keys, margins) if k not in urgent), default=math.inf)
            for b in due.blocks:  # (no change since the walk: the sums are the walk's)
                total, least_b = b.total, b.least
                due._resum(b)
                # the total exact where totals are kept (``_drop_work``), the least a lower bound
                # where a removal left a block the walk did not open
                assert (b.total == total or mode != "queue") and least_b <= b.least
        assert len(due) == len(keys)
    assert [k for b in due.blocks for k in b.keys] == keys


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), lookahead=st.sampled_from(["queue", "own", "none"]))
def test_floor_is_below_every_margin_not_urgent(seed, lookahead):
    """Random arrivals (prompt lengths that put some deadlines before earlier ones), reads at a
    clock that moves on, admissions of the front and of others: after every read the floor is
    at most the margin of every request not urgent, and the order is ``order()``'s."""
    rng = random.Random(seed)
    ref = FairwayDeadline(odd_idle, lookahead=lookahead)
    policy = FairwayDeadline(odd_idle, lookahead=lookahead)
    inc = policy.incremental_order()
    assert isinstance(inc, DeadlineOrder)
    inc.due.BLOCK = 4
    snaps: dict = {}
    now = 0.0
    seq = 0
    walked = 0
    for _ in range(30):
        for _ in range(rng.choice([0, 1, 1, 3, 8])):
            L = rng.choice([20, 300, 2000, 9000])
            h = rng.randrange(L)
            q = make_queued(f"r{seq:04d}", h, L - h, arrival=now, prompt_len=L)
            seq += 1
            snaps[q.request_id] = q
            inc.add(q)
        expect = [q.request_id for q in ref.order(list(snaps.values()), now)]
        assert [q.request_id for q in inc.iter_order(now)] == expect
        if inc._floor is not None:
            dl, work = policy.deadline_ns, policy.work_ns
            order = sorted((d, snaps[r].arrival_time, r) for r, d in dl.items())
            margins = _margins(order, {k: work[k[2]] for k in order}, lookahead)
            for key, m in zip(order, margins):
                if key[2] not in policy.urgent:
                    assert inc._floor <= m, (key, m, inc._floor)
                    walked += 1
        for rid in expect[: rng.choice([0, 1, 2])] + rng.sample(expect, min(len(expect), rng.choice([0, 0, 1]))):
            if rid in snaps:
                del snaps[rid]
                inc.remove(rid)
        now += rng.choice([0.0, 0.05, 0.4, 3.0])


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**6), cap=st.sampled_from([None, 1.0]))
def test_bucket_lists_stay_sorted_and_hold_each_key_once(seed, cap):
    """Bucketed lane under arrivals, hit changes (up: re-keyed; down: key kept), stale marks,
    removals and partial reads: every bucket sorted, ``front`` its first key, each bucketed
    request's key in its own bucket once, no other key; the reads equal the reference."""
    rng = random.Random(seed)
    policy = make_policy("fairway", PROFILE)
    with _modes(0, -1):  # always bucketed
        lane = FastLane(policy.slo, cap)
        waiting: dict = {}
        now = 0.0
        for i in range(150):
            now += rng.choice([0.0, 0.01, 0.3])
            L = rng.choice([50, 700, 3000, 12000, 40000])
            q = make_queued(f"q{i:03d}", 0, L, arrival=now, prompt_len=L)
            waiting[q.request_id] = q
            lane.add(q)
            if rng.random() < 0.3:  # a hit change
                rid = rng.choice(sorted(waiting))
                old = waiting[rid]
                h = rng.randrange(old.prompt_len)
                waiting[rid] = q = old._replace(cached_len=h, uncached_len=max(1, old.prompt_len - h))
                lane.add(q)
            if rng.random() < 0.3:
                k = rng.choice([1, 2, 5])
                ref = policy.fast_lane(list(waiting.values()), now) if cap is None else None
                got = [q for q, _ in zip(lane.iter_order(now), range(k))]
                if ref is not None:
                    assert _ids(got) == _ids(ref)[:k]
                for q in got[: rng.choice([0, 1])]:
                    del waiting[q.request_id]
                    lane.remove(q.request_id)
            held = {}
            for b in lane._by_slot:
                assert b.keys == sorted(b.keys)
                assert b.front == (b.keys[0] if b.keys else None)
                for kt in b.keys:
                    assert kt[2] not in held
                    held[kt[2]] = b
            if not lane._small:
                assert set(held) == set(lane._items)
                for rid, item in lane._items.items():
                    assert held[rid] is item[5] and item[6] in item[5].keys
