"""``fairway-deadline``'s fast path (``fairsim/policies/deadline_fast.py``) equals ``order()``.

A hypothesis property drives two copies of the policy through the same random history -- new
requests (added in arrival order), snapshot changes after cache events, admissions of arbitrary
waiting requests, a clock that moves on -- one read through ``order()`` (the reference), the
other through ``incremental_order()``; every step's full order and the policy state (deadlines,
urgent set, horizon) must be equal, exactly, for every parameter combination. With lazy hits
(``lazy=True``: snapshot changes are marked ``stale`` and given by a resolver, as
``fairsim.sim.lazy_hits`` does) the fast path leaves a stale request unresolved until it is yielded
(the due test reads works fixed at first sight); the replay then also reads only a prefix of the
order, as the engine does, and checks that every item yielded is the step's current snapshot. The engine-level
identity over traces is tests/test_fast_order.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairsim.policies import FairwayDeadline, make_policy
from fairsim.policies.deadline_fast import DeadlineOrder, DueBlocks
from fairsim.policies.incremental import fast_path_of
from tests.engine_bound import PROFILE
from tests.utils import make_queued


def odd_idle(L: int) -> float:
    """A ``T_idle`` with inexact floats (so summation order would show in the last bit)."""
    return 0.0123 + 1.37e-4 * L + 3.1e-9 * L * L


PARAMS = [
    {},
    {"lookahead": "own"},
    {"lookahead": "none"},
    {"horizon": "own"},
    {"fast_first": False},
    {"fair_lane": False},
    {"slack": 1.0, "slo_multiplier": 0.5, "slo_floor": 0.05},
]


@st.composite
def histories(draw, quiet=False):
    """Steps of (new requests, snapshot changes, admissions, clock advance); from the second step on,
    new requests may be added newest first, and some arrive before requests already waiting (the
    fast path then sums ``W`` over the queue); admitted requests may come back before the next
    read, and the clock may go back (both possible in the live hook). ``quiet``: about half the
    steps (after the first) bring no new request."""
    steps = []
    t = 0.0
    for s in range(draw(st.integers(1, 14))):
        new = []
        none = quiet and s and draw(st.booleans())
        for _ in range(0 if none else draw(st.integers(0, 45))):
            t += draw(st.sampled_from([0.0, 0.001, 0.013, 0.2, 1.7]))
            L = draw(st.integers(2, 9000))
            h = draw(st.integers(0, L - 1))
            back = draw(st.sampled_from([0.0, 0.0, 0.0, 0.0, 0.3, 4.0]))  # arrived this long before t
            new.append((max(0.0, t - back), L, h))
        steps.append({
            "new": new,
            "changes": draw(st.lists(st.tuples(st.integers(0, 10**6), st.floats(0, 1)),
                                     max_size=40 if quiet else 6)),
            "read": draw(st.integers(0, 60)) if quiet else None,  # items the engine reads
            "admit": draw(st.lists(st.integers(0, 10**6), max_size=4)),
            "admit_front": draw(st.integers(0, 3)),
            "dt": draw(st.sampled_from([0.0, 0.01, 0.3, 2.0, 25.0, -0.7])),  # a clock may go back (live)
            "readd": draw(st.integers(0, 2)),  # admitted ones back before the next read (live hook)
            "reverse": draw(st.booleans()) if s else False,  # added out of arrival order
        })
    return steps


def _replay(params, history, lazy=False, directed=False, block=8):
    """Run ``history`` through ``order()`` and the fast path; return the longest queue, the
    fast path's number of resolver calls and the fast path. ``directed`` (lazy hits): stale
    marks name the rises in ``raised`` too (``stale(ids, raised)``, as the engine's lazy hits).
    ``block``: ``DueBlocks.BLOCK`` (small, so short histories split, empty and compact blocks)."""
    ref = FairwayDeadline(odd_idle, **params)
    fast_policy = FairwayDeadline(odd_idle, **params)
    inc = fast_policy.incremental_order()
    assert isinstance(inc, DeadlineOrder)
    inc.due.BLOCK = block
    snaps: dict[str, object] = {}
    resolved = [0]

    def resolve(q):
        resolved[0] += 1
        return snaps[q.request_id]

    if lazy:
        inc.set_resolver(resolve)
    now = 0.0
    seq = 0
    max_waiting = 0
    for step in history:
        new = []
        for t, L, h in step["new"]:
            new.append(make_queued(f"r{seq:04d}", h, L - h, arrival=t, prompt_len=L))
            seq += 1
            now = max(now, t)
        for q in reversed(new) if step.get("reverse") else new:
            snaps[q.request_id] = q
            inc.add(q)
        waiting_ids = sorted(snaps)
        changed = []
        rose = []
        for pick, frac in step["changes"]:
            if waiting_ids:
                rid = waiting_ids[pick % len(waiting_ids)]
                old = snaps[rid]
                h = min(old.prompt_len - 1, int(frac * old.prompt_len))
                q = old._replace(cached_len=h, uncached_len=max(1, old.prompt_len - h))
                snaps[rid] = q
                if lazy:
                    changed.append(rid)
                    if h > old.cached_len:
                        rose.append(rid)
                else:
                    inc.add(q)
        if changed and directed:
            inc.stale(sorted(set(changed)), sorted(set(rose)))
        elif changed:
            inc.stale(sorted(set(changed)))
        waiting = list(snaps.values())
        max_waiting = max(max_waiting, len(waiting))
        expect = [q.request_id for q in ref.order(waiting, now)]
        read = step.get("read")
        if read is None:
            got = list(inc.iter_order(now))
        else:  # the engine reads a prefix of the order, then admits
            it = inc.iter_order(now)
            got = [q for q, _ in zip(it, range(read))]
            expect = expect[:read]
        assert [q.request_id for q in got] == expect
        assert all(q is snaps[q.request_id] for q in got)  # this step's snapshots, never a stale one
        assert fast_policy.deadline == ref.deadline
        assert fast_policy.urgent == ref.urgent
        assert fast_policy.horizon_ns == ref.horizon_ns
        assert fast_policy.work_ns == ref.work_ns
        # Admissions: the front of the order (as the engine admits) and arbitrary others.
        gone = set(expect[:step["admit_front"]])
        if expect:
            gone |= {expect[a % len(expect)] for a in step["admit"]}
        back = []
        for rid in sorted(gone):
            back.append(snaps.pop(rid))
            inc.remove(rid)
        for q in back[:step.get("readd", 0)]:  # same id, arrival and prompt: order() cannot tell
            snaps[q.request_id] = q
            inc.add(q)
        now = max(0.0, now + step["dt"])
    return max_waiting, resolved[0], inc


@pytest.mark.parametrize("params", PARAMS, ids=lambda p: ",".join(f"{k}={v}" for k, v in p.items()) or "default")
@settings(max_examples=60, deadline=None)
@given(history=histories())
def test_incremental_equals_order(params, history):
    _replay(params, history)


@pytest.mark.parametrize("params", PARAMS, ids=lambda p: ",".join(f"{k}={v}" for k, v in p.items()) or "default")
@settings(max_examples=60, deadline=None)
@given(history=histories(quiet=True))
def test_incremental_with_lazy_hits_equals_order(params, history):
    """Lazy hits: stale marks instead of new snapshots, partial reads, steps without arrivals
    (where the due test may skip its walk, and stale requests stay unresolved until read)."""
    _replay(params, history, lazy=True)


@pytest.mark.parametrize("params", PARAMS, ids=lambda p: ",".join(f"{k}={v}" for k, v in p.items()) or "default")
@settings(max_examples=60, deadline=None)
@given(history=histories(quiet=True))
def test_incremental_with_directed_lazy_hits_equals_order(params, history):
    """Lazy hits with their direction (the engine's ``stale(ids, raised)``): the Fast lane keeps
    a fallen request's key and bounds only the raised ones."""
    _replay(params, history, lazy=True, directed=True)


def test_long_queue_over_many_blocks():
    """Several hundred waiting in blocks of up to 16 (splits, compactions, walks that open a few blocks),
    all three due modes."""
    rng = np.random.default_rng(7)
    t = 0.0
    history = []
    for _ in range(6):
        new = []
        for _ in range(120):
            t += float(rng.choice([0.0, 0.004, 0.05]))
            L = int(rng.integers(2, 9000))
            new.append((t, L, int(rng.integers(0, L))))
        history.append({"new": new, "changes": [(int(rng.integers(10**6)), float(rng.random())) for _ in range(20)],
                        "admit": [int(x) for x in rng.integers(0, 10**6, 5)], "admit_front": 2, "dt": 3.0})
    for params in PARAMS:
        longest, _, inc = _replay(params, history, block=8)
        assert longest > 500 and len(inc.due.blocks) > 30


def test_long_queue_lazy_hits_resolve_only_what_is_read_or_first_seen():
    """Several hundred waiting, many hits changing per step, steps without arrivals and short
    reads: the orders equal ``order()``'s, and few marked requests are resolved (the due test reads
    works fixed at first sight)."""
    rng = np.random.default_rng(11)
    t = 0.0
    history = []
    marks = 0
    for s in range(12):
        new = []
        for _ in range(150 if s < 3 else 0):
            t += float(rng.choice([0.0, 0.004, 0.05]))
            L = int(rng.integers(2, 9000))
            new.append((t, L, int(rng.integers(0, L))))
        changes = [(int(rng.integers(10**6)), float(rng.random())) for _ in range(60)]
        marks += len(changes)
        history.append({"new": new, "changes": changes, "admit": [int(x) for x in rng.integers(0, 10**6, 3)],
                        "admit_front": 2, "dt": float(rng.choice([0.5, 3.0, 40.0])), "read": 3})
    for params in PARAMS:
        longest, resolved, _ = _replay(params, history, lazy=True)
        assert longest > 400
        # An eager path resolves every mark; here only the items read, first sights marked before
        # their first read, and what the Fast lane needs for its own frontier (FastLane.stale).
        assert resolved < 0.25 * marks, (params, resolved, marks)


@settings(max_examples=200, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from(["add", "add", "remove", "walk", "blocks"]), st.integers(0, 60),
                              st.integers(0, 50), st.integers(-120, 400)), max_size=120),
       mode=st.sampled_from(["queue", "own", "none"]), exact_leaves=st.booleans())
def test_due_blocks_equal_a_plain_walk(ops, mode, exact_leaves):
    """``DueBlocks`` with blocks of up to 16 (emptied in place, compacted) against the definition walked over
    one sorted list: the same newly due keys at every walk, the least slack it reports is at most
    the true one (a lower bound: a leave re-sums no block, ``DueBlocks._drop_work``), and its due
    prefix ends at the last urgent key. Adds and removes go into the blocks
    only when these are read (a walk, ``blocks``), so several of them, in any mix, are applied at
    once. With ``exact_leaves`` (the colocated skip's) a leave re-sums its block at the next
    walk, in every lookahead mode, so the least reported is the true one; without it the least
    is only a lower bound in every mode (found by CI's derandomized run: a leave in ``"own"``
    mode had left a block's least as it was)."""
    due = DueBlocks(mode)
    due.BLOCK = 8
    due.exact_leaves = exact_leaves
    keys: list = []
    work: dict = {}
    urgent: set = set()
    seq = 0
    for op, d, w, t in ops:
        if op == "add":
            key = (d, 0.0, f"r{seq:03d}")
            seq += 1
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
            expect, slacks, acc = [], [], 0
            for key in keys:
                acc += work[key]
                slack = key[0] - {"queue": acc, "own": work[key], "none": 0}[mode]
                if key not in urgent:
                    if slack <= t:
                        expect.append(key)
                    else:
                        slacks.append(slack)
            urgent.update(expect)
            assert newly == expect
            assert least <= min(slacks, default=math.inf)
            if exact_leaves:
                assert least == min(slacks, default=math.inf)
        assert len(due) == len(keys)
        if op in ("walk", "blocks"):
            assert [k for b in due.blocks for k in b.keys] == keys
            assert all(len(b.keys) <= 2 * due.BLOCK for b in due.blocks)
            assert len(due.blocks) <= 2 * len(due) // due.BLOCK + 4  # empties compacted
        if op == "blocks" and urgent:  # the due prefix: deadline order up to the last urgent key
            last = max(i for i, k in enumerate(keys) if k in urgent)
            assert list(due.due_prefix(len(urgent))) == keys[: last + 1]
    assert [k for b in due.blocks for k in b.keys] == keys


def test_registered_policy_has_the_fast_path_and_subclasses_opt_out():
    assert isinstance(fast_path_of(make_policy("fairway-deadline", PROFILE)), DeadlineOrder)

    class OwnWork(FairwayDeadline):
        def work(self, r):
            return 2.0 * super().work(r)

    assert OwnWork(odd_idle).incremental_order() is None

    class OwnEstimate(FairwayDeadline):
        """A team's FCFS estimate (``_assign`` reads it; the fast path sums ``work`` itself)."""

        def fcfs_works(self, fifo):
            return [0.5 * w for w in super().fcfs_works(fifo)]

    assert OwnEstimate(odd_idle).incremental_order() is None


def test_lazy_hits_unread_requests_stay_unresolved():
    """A long queue far from its deadlines (SLO floor 10^4 s), a few hits changed per step and no
    arrivals: only what is read gets resolved."""
    new = [(0.01 * i, 100 + 37 * i, 0) for i in range(80)]
    history = [{"new": new, "changes": [], "admit": [], "admit_front": 0, "dt": 1.0, "read": 2}]
    for s in range(6):
        changes = [((7 * s + 13 * j) % 80, 0.1 * j) for j in range(5)]
        history.append({"new": [], "changes": changes, "admit": [], "admit_front": 1, "dt": 1.0, "read": 2})
    for params in ({"slo_floor": 1e4}, {"slo_floor": 1e4, "lookahead": "own"}):
        longest, _, inc = _replay(params, history, lazy=True)
        assert longest == 80
        # Marked requests the lanes did not read are still unresolved in the deadline order.
        assert inc._stale and set(inc._stale) < set(inc.snap)


def test_many_admissions_keep_the_blocks_few():
    """Admissions outpace arrivals for a while, so blocks shrink and empty (left in place, so no
    leaf of the tree moves) until they are compacted, while steps without arrivals skip the walk;
    eager and lazy."""
    rng = np.random.default_rng(5)
    t = 0.0
    history = []
    for s in range(24):
        new = []
        for _ in range(400 if s == 0 else (6 if s % 2 else 0)):
            t += float(rng.choice([0.0, 0.002, 0.03]))
            L = int(rng.integers(2, 6000))
            new.append((t, L, int(rng.integers(0, L))))
        history.append({"new": new, "changes": [(int(rng.integers(10**6)), float(rng.random())) for _ in range(8)],
                        "admit": [int(x) for x in rng.integers(0, 10**6, 40)], "admit_front": 3,
                        "dt": float(rng.choice([0.001, 0.02, 0.5])), "read": 4 if s % 3 else None})
    for params in PARAMS:
        for lazy in (False, True):
            _, _, inc = _replay(params, history, lazy=lazy, block=16)
            blocks = inc.due.blocks
            assert len(inc) > 32 and len(blocks) > 1
            assert all(len(b.keys) <= 32 for b in blocks)
            assert len(blocks) <= 2 * len(inc.due) // 16 + 4  # DueBlocks._compact's bound


def test_a_leave_keeps_the_least_as_a_lower_bound():
    """A leave re-sums no block (``DueBlocks._drop_work``): the least reported may stay below the
    true one until a walk opens the block, and the due keys stay exact. By hand: ``a`` (D 10,
    work 50) and ``b`` (D 12, work 0) share a block; margins -40 and -38 (10 - 50, 12 - 50)."""
    due = DueBlocks("queue")
    a, b = (10, 0.0, "a"), (12, 0.0, "b")
    due.add(a, 50)
    due.add(b, 0)
    assert due.mark_due(-100) == ([], -40)
    due.remove(a)  # b's margin is now 12 - 0 = 12
    newly, least = due.mark_due(-100)
    assert newly == [] and least == -40  # not opened: the old least, a lower bound of 12
    assert due.blocks[0].total == 0 and due._tot[1] == 0  # the totals are exact
    assert due.mark_due(11) == ([], 12)  # opened (-40 <= 11): re-summed, b not due until 12
    assert due.mark_due(12) == ([b], math.inf)


def test_an_emptied_block_stays_in_place_and_fills_again():
    """Removing every key of a middle block moves no leaf of the tree (no re-set from it on); a
    key falling between its neighbours fills it again; the walk stays the plain one."""
    due = DueBlocks("queue")
    due.BLOCK = 4
    keys = [(10 * i, 0.0, f"r{i:02d}") for i in range(40)]
    for k in keys:
        due.add(k, 1)
    due.mark_due(-10**9)  # apply and build the tree
    blocks = list(due.blocks)
    assert len(blocks) >= 4
    middle = blocks[len(blocks) // 2]
    for k in list(middle.keys):
        due.remove(k)
        keys.remove(k)
    due.blocks  # apply the removes
    assert due._moved is None and due.blocks[len(blocks) // 2] is middle and middle.keys == []
    newly, least = due.mark_due(-10**9)
    assert newly == [] and least == min(k[0] - (i + 1) for i, k in enumerate(keys))
    gap = (middle.gone[0] - 1, 0.0, "new")  # between the neighbours of the emptied block
    due.add(gap, 1)
    keys = sorted(keys + [gap])
    assert due.blocks[len(blocks) // 2] is middle and middle.keys == [gap]
    newly, _ = due.mark_due(10 * 20)  # everything with margin <= 200 is due, in deadline order
    assert newly == [k for i, k in enumerate(keys) if k[0] - (i + 1) <= 200]


@pytest.mark.parametrize("params", PARAMS[:5], ids=lambda p: ",".join(f"{k}={v}" for k, v in p.items()) or "default")
@settings(max_examples=60, deadline=None)
@given(history=histories(quiet=True), where=st.lists(st.floats(0, 1), min_size=1, max_size=4))
def test_head_until_keeps_the_first_and_the_state(params, history, where):
    """``DeadlineOrder.head_until(now)``: at every clock from ``now`` to the clock it gives, the
    reference ``order()`` (on a copy of its policy, with the snapshots of the last read) puts the
    same request first and leaves the policy's state as the read at ``now`` left it; at the
    clock it gives exactly, too."""
    import copy

    ref = FairwayDeadline(odd_idle, **params)
    fast_policy = FairwayDeadline(odd_idle, **params)
    inc = fast_policy.incremental_order()
    inc.due.BLOCK = 8
    snaps: dict[str, object] = {}
    now, seq = 0.0, 0
    for step in history:
        for t, L, h in step["new"]:
            q = make_queued(f"r{seq:04d}", h, L - h, arrival=t, prompt_len=L)
            seq += 1
            now = max(now, t)
            snaps[q.request_id] = q
            inc.add(q)
        waiting = list(snaps.values())
        expect = [q.request_id for q in ref.order(waiting, now)]
        got = [q.request_id for q in inc.iter_order(now)]
        assert got == expect
        until = inc.head_until(now)
        if until is not None and expect:
            assert until >= now
            state = (dict(ref.deadline_ns), set(ref.urgent), ref.horizon_ns)
            span = min(until, now + 1e6) - now
            for c in {now, until if until != math.inf else now + 1e6, *(now + f * span for f in where)}:
                other = copy.deepcopy(ref)
                assert other.order(waiting, c)[0].request_id == expect[0], (now, c, until)
                assert (other.deadline_ns, other.urgent, other.horizon_ns) == state
        for a in step["admit"][:1]:  # one admission at most, then the clock moves
            if expect:
                rid = expect[a % len(expect)]
                snaps.pop(rid)
                inc.remove(rid)
        now = max(now, now + step["dt"])
