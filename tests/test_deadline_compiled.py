"""The compiled twin of ``DueBlocks`` (``fairsim/policies/_deadline_c.pyx``) against the Python
reference (``fairsim.policies.deadline_fast.DueBlocks``), call by call.

The same random operations -- adds (deadlines that tie, so the tuples' other fields decide),
removes, walks at random clocks, reads of the blocks and of the due prefix, the colocated skip's
``exact_leaves`` switched on midway -- go to both; every answer (keys marked, the floor, its
type), the blocks (keys, works, flags, totals, leasts, an emptied block's place) and the segment
tree must be equal, with values past 64 bits too (there the twin sums as Python does).
"""

from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairsim.compiled import compiled_twin
from fairsim.policies.deadline_clock import now_ns
from fairsim.policies.deadline_fast import TWIN_MODULE, DeadlineOrder, DueBlocks, deadline_order, due_blocks
from fairsim.policies.fairway_deadline import FairwayDeadline
from tests.test_deadline_fast import histories, odd_idle
from tests.utils import make_queued

twin = compiled_twin(TWIN_MODULE)
pytestmark = pytest.mark.skipif(twin is None, reason="fairsim.policies._deadline_c is not built")

#: Deadlines and works: small (many ties), ns of a simulated clock, and past the 64-bit edge.
_VALUES = st.one_of(st.integers(-40, 40), st.integers(-10**12, 10**12),
                    st.integers(2**63 - 10**3, 2**63 + 10**3), st.integers(-2**63 - 10**3, -2**63 + 10**3))


def _state(due) -> str:
    """Everything a later call reads: the blocks, the tree, the pending changes' effect."""
    blocks = [(b.keys, b.dl, b.work, b.urgent, b.total, b.least, b.gone) for b in due._blocks]
    return repr((blocks, due.last, due._tot, due._lst, due._size, due._leaves, due._moved, len(due)))


@settings(max_examples=300, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from(["add", "add", "add", "remove", "remove", "walk", "blocks",
                                               "prefix", "exact"]),
                              _VALUES, _VALUES, _VALUES, st.integers(0, 10**6)), max_size=160),
       mode=st.sampled_from(["queue", "own", "none"]), block=st.sampled_from([1, 2, 4, 8, 64]))
def test_twin_answers_as_the_reference(ops, mode, block):
    ref, got = DueBlocks(mode), twin.DueBlocks(mode, DueBlocks.BLOCK)
    ref.BLOCK = got.BLOCK = block
    keys: list = []
    for seq, (op, d, w, t, pick) in enumerate(ops):
        if op == "add":
            key = (d, float(pick % 3), f"r{seq:03d}")  # ties on d: arrival, then id decide
            keys.append(key)
            ref.add(key, w)
            got.add(key, w)
        elif op == "remove" and keys:
            key = keys.pop(pick % len(keys))
            ref.remove(key)
            got.remove(key)
        elif op == "walk":
            a, b = ref.mark_due(t), got.mark_due(t)
            assert repr(a) == repr(b) and type(a[1]) is type(b[1])
        elif op == "blocks":
            assert [k for b in ref.blocks for k in b.keys] == [k for b in got.blocks for k in b.keys]
        elif op == "prefix":
            urgent = sum(u for b in ref.blocks for u in b.urgent)
            assert urgent == sum(u for b in got.blocks for u in b.urgent)
            if urgent:
                assert list(ref.due_prefix(urgent)) == list(got.due_prefix(urgent))
        elif op == "exact":
            ref.exact_leaves = got.exact_leaves = True
        assert len(ref) == len(got) == len(keys)
        assert _state(ref) == _state(got)
    ref.blocks, got.blocks  # apply what is pending
    assert _state(ref) == _state(got)
    assert sorted(keys) == [k for b in got.blocks for k in b.keys]


def test_due_blocks_picks_the_twin_unless_pure_python():
    assert type(due_blocks("queue")) is twin.DueBlocks and due_blocks("own").mode == "own"
    code = ("from fairsim.policies.deadline_fast import due_blocks\n"
            "print(type(due_blocks('queue')).__module__)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env=dict(os.environ, FAIRSIM_PURE_PYTHON="1"))
    assert out.stdout.strip() == "fairsim.policies.deadline_fast"


def test_a_hand_computed_walk():
    """Three requests in ``queue`` mode, works 5, 3, 2 ns, deadlines 10, 12, 30: margins
    ``D - P`` = 10 - 5, 12 - 8, 30 - 10 = 5, 4, 20. Nobody is due before clock 4; at 4 only b;
    after a leaves, c's margin is 30 - 5 = 25 and the floor (a's stale 5) stays below it."""
    for due in (DueBlocks("queue"), twin.DueBlocks("queue", DueBlocks.BLOCK)):
        a, b, c = (10, 0.0, "a"), (12, 0.0, "b"), (30, 0.0, "c")
        due.add(a, 5)
        due.add(b, 3)
        due.add(c, 2)
        assert due.mark_due(3) == ([], 4)  # nobody: the least margin is b's 12 - 8
        assert due.mark_due(4) == ([b], 5)  # b due; a's 10 - 5 is the least left
        due.remove(a)  # c's margin rises to 30 - 5 = 25; the floor stays a lower bound
        assert due.mark_due(4) == ([], 5)
        assert list(due.due_prefix(1)) == [b]


@pytest.mark.parametrize("mode", ["queue", "own", "none"])
def test_twin_over_a_long_queue(mode):
    """Thousands of operations with the queue grown past a hundred blocks of 4, mostly appended
    last (the usual newcomer) with some in the middle and ties, removes anywhere, walks at a
    clock that moves on; ``exact_leaves`` from the middle on: the same answers and state."""
    rng = np.random.default_rng(7)
    ref, got = DueBlocks(mode), twin.DueBlocks(mode, DueBlocks.BLOCK)
    ref.BLOCK = got.BLOCK = 4
    keys: list = []
    top, clock, marked = 0, -10**6, 0
    for seq in range(6000):
        if seq == 3000:
            ref.exact_leaves = got.exact_leaves = True
        r = rng.random()
        if r < 0.45 or not keys:
            top += int(rng.integers(0, 3))
            d = top if rng.random() < 0.8 else int(rng.integers(0, top + 1))
            key, w = (d * 1000, float(rng.integers(0, 2)), f"r{seq:05d}"), int(rng.integers(0, 900))
            keys.append(key)
            ref.add(key, w)
            got.add(key, w)
        elif r < 0.8:
            key = keys.pop(int(rng.integers(0, len(keys))))
            ref.remove(key)
            got.remove(key)
        else:
            clock += int(rng.integers(0, 5000))
            a, b = ref.mark_due(clock), got.mark_due(clock)
            assert repr(a) == repr(b)
            marked += len(a[0])
            assert _state(ref) == _state(got)
    assert _state(ref) == _state(got) and len(got.blocks) > 20 and marked > 100


# -- the compiled bookkeeping of DeadlineOrder (``_deadline_c.DeadlineCore``) ----------------------

def _order_state(inc) -> str:
    """Everything of a ``DeadlineOrder`` and its policy that a later call reads (the lanes are
    read through the order they give)."""
    p = inc.policy
    mine = (inc.snap, inc._stale, inc._pending, inc._key_of, inc._gone, inc._left, inc._total,
            type(inc._total), inc._alast, inc._floor, type(inc._floor), inc._slo_ns, len(inc))
    policy = (p.deadline_ns, p.work_ns, sorted(p.urgent), p.horizon_ns, p._rate)
    fair = (list(inc.fair.items.items()), inc.fair._last, inc.fair._sorted)  # (the twin edits it inline)
    return repr((mine, [list(d) for d in mine[:6] if isinstance(d, dict)], policy, fair, _state(inc.due)))


@settings(max_examples=150, deadline=None)
@given(steps=histories(quiet=True), params=st.sampled_from([{}, {"lookahead": "own"}, {"lookahead": "none"},
                                                  {"horizon": "own"}, {"fair_lane": False}]),
       lazy=st.booleans(), block=st.sampled_from([1, 4, 64]))
def test_compiled_order_as_the_reference_call_by_call(steps, params, lazy, block):
    """``CompiledDeadlineOrder`` (``deadline_order``) and the reference ``DeadlineOrder`` fed the
    same random history (tests/test_deadline_fast.py's: first sights in and out of arrival order,
    snapshot changes, stale marks, admissions, requests back before the next read, a clock that
    goes back): after every call the same state, theirs and their policies' (to the insertion
    order of every dict), and the same items read."""
    _both_orders(steps, params, lazy, block)


@settings(max_examples=100, deadline=None)
@given(steps=histories(quiet=True), slack=st.sampled_from([1.25, 1e7, 1e8, 3e8, 1e9, 1e12]),
       shift=st.sampled_from([0.0, 1e9, 1.2e9, 2.5e9, 5e9]), lazy=st.booleans(),
       params=st.sampled_from([{}, {"lookahead": "own"}, {"horizon": "own"}]))
def test_compiled_first_sights_past_64_bits_as_the_reference(steps, slack, shift, lazy, params):
    """The twin's first sights on C integers (``_assign_ints``) and, where a value would pass
    2^60 ns (arrivals ``shift`` seconds later: 1e9 s is 2^59.8 ns; a slack that makes ``slack x
    W`` pass it once enough work waits, so steps on either side), on Python ints
    (``_assign_objects``): the same state as the reference after every call."""
    _both_orders(steps, dict(params, slack=slack), lazy, 64, shift)


def test_compiled_first_sights_take_both_paths():
    """The C integers at an ordinary clock, the Python ints past 2^60 ns (the same deadlines)."""
    for shift, big in ((0.0, False), (2.5e9, True)):
        pol, ref_pol = FairwayDeadline(odd_idle), FairwayDeadline(odd_idle)
        got, ref = deadline_order(pol), DeadlineOrder(ref_pol)
        for inc in (got, ref):
            for k in range(3):
                inc.add(make_queued(f"r{k}", 0, 100 * (k + 1), arrival=shift + k, prompt_len=100 * (k + 1)))
        fresh = sorted((q.arrival_time, rid) for rid, q in got.snap.items())
        got._pending = {}
        assert got._assign_ints(fresh) is not big  # (the path taken; nothing written when False)
        assert pol.deadline_ns == {} if big else len(pol.deadline_ns) == 3
        if big:
            got._assign_objects(fresh)
        ref._assign()
        assert _order_state(ref) == _order_state(got)
        assert max(pol.deadline_ns.values()) >= 2**60 if big else max(pol.deadline_ns.values()) < 2**40


def _both_orders(steps, params, lazy, block, shift=0.0):
    """Feed ``steps`` to a ``CompiledDeadlineOrder`` and the reference (arrivals ``shift`` s
    later) and compare them after every call."""
    pols = [FairwayDeadline(odd_idle, **params), FairwayDeadline(odd_idle, **params)]
    ref, got = DeadlineOrder(pols[0]), deadline_order(pols[1])
    assert type(got) is not DeadlineOrder and isinstance(got, DeadlineOrder)
    assert type(got.due) is twin.DueBlocks
    assert got._fair_inline  # (its Fair lane is exactly an ArrivalOrder: edited inline)
    orders = (ref, got)
    snaps: dict = {}
    for inc in orders:
        inc.due.BLOCK = block
        if lazy:
            inc.set_resolver(lambda q: snaps[q.request_id])
    now, seq = 0.0, 0
    for step in steps:
        for t, L, h in (reversed(step["new"]) if step["reverse"] else step["new"]):
            q = make_queued(f"r{seq:04d}", h, L - h, arrival=t + shift, prompt_len=L)
            seq += 1
            now = max(now, t + shift)
            snaps[q.request_id] = q
            for inc in orders:
                inc.add(q)
        ids = sorted(snaps)
        changed = []
        for pick, frac in step["changes"]:
            if ids:
                old = snaps[ids[pick % len(ids)]]
                h = min(old.prompt_len - 1, int(frac * old.prompt_len))
                snaps[old.request_id] = q = old._replace(cached_len=h, uncached_len=max(1, old.prompt_len - h))
                changed.append(q.request_id)
                if not lazy:
                    for inc in orders:
                        inc.add(q)
        if lazy and changed:
            for inc in orders:
                inc.stale(sorted(set(changed)))
        assert _order_state(ref) == _order_state(got)
        read = step["read"]
        a, b = ([x.request_id for x, _ in zip(inc.iter_order(now), range(read))] for inc in orders)
        assert a == b
        assert _order_state(ref) == _order_state(got)
        ids = sorted(snaps)
        gone = [ids[k % len(ids)] for k in step["admit"]] if ids else []
        gone += a[:step["admit_front"]]
        gone = list(dict.fromkeys(gone))
        for rid in gone:
            for inc in orders:
                inc.remove(rid)
        assert _order_state(ref) == _order_state(got)
        for rid in gone[:step["readd"]]:  # back before the next read (the live hook)
            for inc in orders:
                inc.add(snaps[rid])
        for rid in gone[step["readd"]:]:
            del snaps[rid]
        assert _order_state(ref) == _order_state(got)
        now += step["dt"]


def test_deadline_order_picks_the_compiled_bookkeeping_unless_pure_python():
    code = ("from fairsim.costmodel import load_profile\n"
            "from fairsim.policies import make_policy\n"
            "p = make_policy('fairway-deadline', load_profile('a6000-llama3.1-8b-vllm-prior'))\n"
            "print(type(p.incremental_order()).__name__)\n")
    for pure, name in (("0", "CompiledDeadlineOrder"), ("1", "DeadlineOrder")):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             env=dict(os.environ, FAIRSIM_PURE_PYTHON=pure))
        assert out.stdout.strip() == name


@settings(max_examples=2000, deadline=None)
@given(x=st.one_of(st.floats(allow_nan=False, allow_infinity=False),
                   st.integers(-2**60, 2**60).map(lambda n: n / 2),  # halfway cases
                   st.floats(-1e4, 1e4).map(lambda f: f * 1e9)))
def test_float_round_is_pythons_round(x):
    """The twin's ``round`` of a float (halfway cases to even, past 64 bits too) is Python's."""
    got = twin.float_round(x)
    assert got == round(x) and type(got) is int


def test_float_round_raises_as_round():
    for bad, error in ((math.inf, OverflowError), (-math.inf, OverflowError), (math.nan, ValueError)):
        with pytest.raises(error):
            twin.float_round(bad)
    assert [twin.float_round(v) for v in (0.5, 1.5, 2.5, -0.5, -2.5, 2.4999999999999996)] == [0, 2, 2, 0, -2, 2]


@given(now=st.one_of(st.floats(-1e290, 1e290), st.integers(-10**12, 10**12),  # (now x 1e9 finite)
                     st.floats(-1e6, 1e6), st.integers(-2**40, 2**40).map(lambda n: n / 1e9)))
def test_floor_ns_is_now_ns(now):
    """The twin's due-test clock (``_update``) is ``deadline_clock.now_ns``: the same int."""
    got = twin.floor_ns(now)
    assert got == now_ns(now) and type(got) is int


def test_floor_ns_and_round_any_raise_and_defer_as_python():
    for bad, error in ((math.inf, OverflowError), (-math.inf, OverflowError), (math.nan, ValueError)):
        with pytest.raises(error):
            twin.floor_ns(bad)
        with pytest.raises(error):
            twin.round_any(bad)
    assert twin.floor_ns(np.float64(1.5)) == 1_500_000_000  # (not a float: math.floor itself)
    assert [twin.round_any(v) for v in (2.5, 3.5, -0.5, 7, np.float64(2.5))] == [2, 4, 0, 7, 2]
    assert [twin.floor_ns(v) for v in (1e-9, -1e-9, 0.9999999999, 2)] == [now_ns(v) for v in (1e-9, -1e-9, 0.9999999999, 2)]


def _small_block_pair(mode):
    """The reference ``DueBlocks`` and its twin with blocks of 2 keys, and ``both(op, *args)``:
    the call on each, asserting the same answer and state, returning the reference's answer."""
    ref, got = DueBlocks(mode), twin.DueBlocks(mode, DueBlocks.BLOCK)
    ref.BLOCK = got.BLOCK = 2

    def both(op, *args):
        a, b = getattr(ref, op)(*args), getattr(got, op)(*args)
        assert repr(a) == repr(b) and _state(ref) == _state(got)
        return a

    return ref, got, both


@pytest.mark.parametrize("mode", ["queue", "own", "none"])
def test_twin_tree_in_c_then_past_64_bits(mode):
    """The twin's segment tree runs on C integers while every value is a 64-bit int (or inf)
    and on Python ints from the first value past that on: a queue of small values walked at
    clocks past 64 bits either way (compared as a clamped clock), then deadlines of 2^70 and works
    of -2^64 and 2^65 join; the same answers and state at every call."""
    ref, got, both = _small_block_pair(mode)

    for k in range(12):
        both("add", (100 * k, 0.0, f"r{k:02d}"), 7 + k)
    assert both("mark_due", -2**80)[0] == []  # nobody, long before
    both("mark_due", 300)
    both("remove", (500, 0.0, "r05"))
    both("mark_due", 310)
    assert not got._big
    for k in range(6):  # past 64 bits (a block of these alone, too): the tree goes to Python ints
        both("add", (2**70 + k, 1.0, f"big{k}"), -2**64 if k % 2 else 2**65)
    both("mark_due", 900)
    assert got._big
    both("remove", (700, 0.0, "r07"))
    marked, floor = both("mark_due", 2**71)
    assert marked and _state(ref) == _state(got)


@pytest.mark.parametrize("mode", ["queue", "own", "none"])
def test_twin_blocks_in_c_arrays_then_python_ints(mode):
    """A block of the twin holds its deadlines, works and flags in C arrays while each is a
    64-bit int, and the reference's Python lists from the first value past that on, or from a
    margin sum past 64 bits (``queue``: two works near 2^62 after deadlines near -2^62); a block
    split off it with values that fit is in C again, and a compaction joins both kinds. The same
    answers and state as the reference at every call."""
    ref, got, both = _small_block_pair(mode)

    for k in range(8):
        both("add", (100 * k, 0.0, f"r{k}"), 7 + k)
    both("mark_due", 250)
    assert not any(b._obj for b in got.blocks)
    both("add", (2**64 + 50, 0.0, "big"), 3)  # last, into the last block: that block to lists
    both("mark_due", 260)
    assert [b._obj for b in got.blocks][-1] and not got.blocks[0]._obj
    for k in range(4):  # in the middle of a C block, and splitting it
        both("add", (100 * k + 1, 0.0, f"m{k}"), 1)
    both("mark_due", 310)
    both("remove", (2**64 + 50, 0.0, "big"))
    for k in range(9):  # the last block (lists) grows past 2 BLOCK: the halves cut off are in C
        both("add", (1000 + k, 0.0, f"n{k}"), 2)
    both("mark_due", 320)
    assert not got.blocks[-1]._obj and len(got.blocks) > 4
    edge = 2**62  # works that fit, sums that do not (queue): that block's sums on Python ints
    both("add", (-edge, 0.0, "e0"), edge)
    both("add", (-edge + 1, 0.0, "e1"), edge)
    marked, _ = both("mark_due", 330)
    assert (mode == "queue") == got.blocks[0]._obj and marked
    for key in [k for b in ref.blocks for k in b.keys][2:]:  # empties and joins (compaction)
        both("remove", key)
    both("mark_due", 10**6)
    assert len(got.blocks) == 1
    assert list(ref.due_prefix(1)) == list(got.due_prefix(1))


def test_compiled_core_calls_a_fair_lane_that_is_not_an_arrival_order():
    """``DeadlineCore`` edits an ``ArrivalOrder`` inline; any other Fair lane (here a subclass
    that records its calls) gets the reference's calls, ``stale`` included, and the same state."""
    from fairsim.policies.fast_lane import FastLane
    from fairsim.policies.incremental import ArrivalOrder

    calls = []

    class Recording(ArrivalOrder):
        def add(self, q):
            calls.append(("add", q.request_id))
            super().add(q)

        def remove(self, request_id):
            calls.append(("remove", request_id))
            super().remove(request_id)

        def stale(self, request_ids, raised=None):
            calls.append(("stale", list(request_ids)))

    pol = FairwayDeadline(odd_idle)
    core = twin.DeadlineCore(pol, FastLane(pol.slo), Recording(), twin.DueBlocks("queue", DueBlocks.BLOCK))
    inline = twin.DeadlineCore(pol, FastLane(pol.slo), ArrivalOrder(), twin.DueBlocks("queue", DueBlocks.BLOCK))
    assert not core._fair_inline and inline._fair_inline
    for k in (1, 0, 2):  # r0 arrives before r1, added after it: the lane is left unsorted
        for c in (core, inline):
            c.add(make_queued(f"r{k}", 0, 100, arrival=float(k), prompt_len=100))
    core.stale(["r2"])
    core.remove("r1")
    inline.remove("r1")
    assert calls == [("add", "r1"), ("add", "r0"), ("add", "r2"), ("stale", ["r2"]), ("remove", "r1")]
    for fair in (core.fair, inline.fair):
        assert list(fair.items) == ["r0", "r2"] and fair._last == (2.0, "r2") and fair._sorted is False
