"""The Fast lane's compiled bound lines (``fairsim/policies/_fast_lane_c.pyx``) against the numpy
reference (``fairsim.policies.fast_lane.NumpyBoundLines``): the same floats and indices call by
call, the same lane reads and kept windows, and the same per-request and per-step tables on a
slice of the conversation trace (and those of ``order()``, the engine's reference path)."""

from __future__ import annotations

import math
import random
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fairsim.policies.fast_lane as fast_lane
from fairsim.policies import make_policy
from fairsim.policies.incremental import Lanes
from fairsim.policies.fast_lane import EMPTY, MARGIN, FastLane, NumpyBoundLines, bound_lines_class
from fairsim.sim import simulate
from fairsim.types import QueuedRequest
from tests.test_fast_lane import MODES, PROFILE, _ids, _modes
from tests.test_fast_order import CONVERSATION, _conversation
from tests.utils import change_hits

compiled = pytest.importorskip("fairsim.policies._fast_lane_c", reason="compiled Fast lane not built")
CompiledBoundLines = compiled.CompiledBoundLines

FAMILY = ["fairway", "fairway-nofair", "fairway-carry", "fairway-patience", "fairway-deadline"]

# A bound line's values: ordinary, EMPTY (an empty bucket), huge, and repeated ones (ties).
_c = st.one_of(st.just(EMPTY), st.floats(-1e6, 1e6, allow_nan=False), st.sampled_from([0.0, 1.5, -2.25]))
_s = st.one_of(st.just(0.0), st.floats(0.0, 1e3, allow_nan=False), st.sampled_from([0.5, 1.0]))


def _pair(cap):
    return CompiledBoundLines(cap), NumpyBoundLines(cap)


def _same_float(a, b):
    assert a == b or (math.isnan(a) and math.isnan(b)), (a, b)


@settings(max_examples=300, deadline=None)
@given(lines=st.lists(st.tuples(_c, _s), min_size=1, max_size=40), cap=st.integers(1, 8),
       u=st.one_of(st.floats(0.0, 1e9, allow_nan=False), st.sampled_from([0.0, 1e-300, 7.0])),
       takes=st.lists(st.integers(0, 39), max_size=12),
       lead=st.tuples(st.floats(-1e3, 1e6, allow_nan=False), st.floats(0.0, 1e3, allow_nan=False),
                      st.sampled_from([4 * MARGIN, 0.0, 1e-3]), st.floats(0.0, 1e4, allow_nan=False),
                      st.floats(0.0, 2.0, allow_nan=False)))
def test_compiled_lines_equal_numpy(lines, cap, u, takes, lead):
    """Every method, same floats: the bounds (product then sum, no fused multiply-add), the
    argmax (first of equals), ``take``'s rescans and ``lead_limit``'s None / least ratio."""
    a, b = _pair(cap)
    for x in (a, b):
        x.ensure(len(lines))
        assert x.cap >= len(lines)
        for slot, (c, s) in enumerate(lines):
            if slot % 3 == 2:
                x.set_line(slot, 123.0, s)
                x.set_c(slot, c)  # the slope stays
            else:
                x.set_line(slot, c, s)
    for slot in range(len(lines)):
        assert a.line(slot) == b.line(slot)
    nb = len(lines)
    assert a.evaluate(nb, u) == b.evaluate(nb, u)
    _same_float(a.top, b.top)
    for slot in range(nb):
        _same_float(a.bound(slot), b.bound(slot))
    for slot in takes:
        if slot < nb:
            assert a.take(slot) == b.take(slot)
            _same_float(a.top, b.top)
    ra, rb = a.lead_limit(*lead), b.lead_limit(*lead)
    assert (ra is None) == (rb is None)
    if ra is not None:
        _same_float(ra, rb)
    a.clear()
    b.clear()
    assert [a.line(j) for j in range(nb)] == [b.line(j) for j in range(nb)]
    assert all(a.line(j)[0] == EMPTY for j in range(nb))


@settings(max_examples=200, deadline=None)
@given(lines=st.lists(st.tuples(st.one_of(st.sampled_from([EMPTY, 0.0, 1.5, math.nan, math.inf, -math.inf]), _c),
                                st.sampled_from([0.0, 0.5])), min_size=1, max_size=100),
       u=st.sampled_from([0.0, 1.0, 7.0, math.inf]), takes=st.lists(st.integers(0, 99), max_size=40))
def test_compiled_argmax_over_blocks_equals_numpy(lines, u, takes):
    """The compiled argmax reads per-block summaries (32 slots a block): over several blocks,
    with NaNs (the first wins, wherever the largest number is), infinities, ties across
    blocks and takes that empty a block's best, it picks numpy's index and bound."""
    a, b = _pair(4)
    for x in (a, b):
        x.ensure(len(lines))
        for slot, (c, s) in enumerate(lines):
            x.set_line(slot, c, s)
    nb = len(lines)
    with np.errstate(invalid="ignore"):  # (inf x 0: NaN, as in C)
        assert a.evaluate(nb, u) == b.evaluate(nb, u)
    _same_float(a.top, b.top)
    for slot in takes:
        if slot < nb:
            assert a.take(slot) == b.take(slot)
            _same_float(a.top, b.top)


def test_argmax_across_blocks_by_hand():
    """Across the compiled lines' blocks of 32 slots: a tie goes to the earlier block, a take
    moves to the next, and a NaN in a later block wins over a larger number before it."""
    for x in _pair(4):
        x.ensure(100)
        for slot in range(100):
            x.set_line(slot, 5.0 if slot in (40, 70) else 1.0, 0.0)
        assert x.evaluate(100, 1.0) == 40 and x.top == 5.0
        assert x.take(40) == 70 and x.top == 5.0
        assert x.take(70) == 0 and x.top == 1.0
        x.set_line(90, math.nan, 0.0)
        assert x.evaluate(100, 1.0) == 90 and math.isnan(x.top)


def test_argmax_by_hand():
    """Ties go to the first slot; a taken slot reads EMPTY; a NaN counts as the largest."""
    for x in _pair(4):
        x.ensure(5)
        for slot, (c, s) in enumerate([(1.0, 0.0), (0.0, 1.0), (3.0, 0.0), (EMPTY, 0.0), (-1.0, 2.0)]):
            x.set_line(slot, c, s)
        assert x.evaluate(5, 2.0) == 2 and x.top == 3.0  # bounds 1, 2, 3, EMPTY, 3: the first 3
        assert x.take(2) == 4 and x.top == 3.0
        assert x.take(4) == 1 and x.top == 2.0
        assert x.bound(2) == EMPTY
        # slot 0 (bound 1, flat) sets no limit; slot 1 (bound 2, slope 1): slack 10 - 2, rate 1
        assert x.lead_limit(10.0, 0.0, 0.0, 0.0, 0.0) == 8.0
        assert x.lead_limit(2.0, 0.0, 0.0, 0.0, 0.0) is None  # slot 1's bound 2 is not below 2
        x.set_line(0, math.nan, 0.0)
        assert x.evaluate(2, 1.0) == 0 and math.isnan(x.top)


def test_compiled_lines_reject_bad_slots():
    """The compiled lines check their slots (the C arrays have no bounds of their own)."""
    x = CompiledBoundLines(2)
    with pytest.raises(IndexError):
        x.set_line(2, 0.0, 0.0)
    with pytest.raises(IndexError):
        x.set_c(-1, 0.0)
    with pytest.raises(ValueError):
        x.evaluate(0, 1.0)
    with pytest.raises(ValueError):
        CompiledBoundLines(0)
    x.evaluate(2, 1.0)
    with pytest.raises(IndexError):
        x.take(2)


def test_pure_python_switch(monkeypatch):
    assert bound_lines_class() is CompiledBoundLines
    monkeypatch.setenv("FAIRSIM_PURE_PYTHON", "1")
    assert bound_lines_class() is NumpyBoundLines
    assert isinstance(FastLane(lambda L: 1.0)._lines, NumpyBoundLines)


def test_no_extension_falls_back_to_numpy(monkeypatch):
    """Where the extension was not built (no C compiler at install) the numpy lines are used."""
    monkeypatch.setattr(fast_lane, "COMPILED_MODULE", "fairsim.policies._fast_lane_c_not_built")
    assert bound_lines_class() is NumpyBoundLines


def test_compiled_lane_needs_no_numpy():
    """With the compiled lines a Fairway read imports no numpy (35-60 ms of a run's start)."""
    code = ("import sys\n"
            "from fairsim.policies.fast_lane import FastLane\n"
            "from fairsim.types import QueuedRequest\n"
            "lane = FastLane(lambda L: 1.0 + L / 1000)\n"
            "for i in range(100):\n"
            "    lane.add(QueuedRequest(f'r{i}', i * 0.1, 100 + 37 * i, 0, 100 + 37 * i, 0, None))\n"
            "assert [q.request_id for q in lane.iter_order(20.0)][:1]\n"
            "assert not lane._small\n"
            "print('numpy' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 100_000), cap=st.sampled_from([None, 0.5]), modes=st.sampled_from(MODES),
       origin=st.sampled_from([0.0, 1.7e9]))
def test_lanes_on_both_lines_read_the_same(seed, cap, modes, origin):
    """Two lanes fed the same changes, one on each kind of lines: the same reads (and the
    reference's), the same kept windows, the same bound lines."""
    rng = random.Random(seed)
    policy = make_policy("fairway-carry", PROFILE, **({} if cap is None else {"wait_cap": cap}))
    with _modes(*modes):
        lanes = [FastLane(policy.slo, policy.wait_cap), FastLane(policy.slo, policy.wait_cap)]
        lanes[1]._lines = NumpyBoundLines(16)
        waiting: dict[str, QueuedRequest] = {}
        t = now = origin
        for step in range(20):
            change_hits(rng, waiting, Lanes(None, *lanes), 10, None)  # the same changes to both
            for _ in range(rng.randint(0, 30)):
                t += rng.expovariate(3.0)
                L = int(rng.lognormvariate(8.0, 1.2)) + 2
                h = rng.randint(0, L - 1) if rng.random() < 0.5 else 0
                q = QueuedRequest(f"r{step}-{len(waiting)}-{rng.randrange(1000)}", t, L, h, max(1, L - h), 0, None)
                waiting[q.request_id] = q
                for lane in lanes:
                    lane.add(q)
            if not waiting:
                continue
            now = max(now, t) + rng.random() * 0.3
            expected = _ids(policy.fast_lane(list(waiting.values()), now))
            k = rng.choice([1, 1, 2, len(expected)])
            got = []
            for lane in lanes:
                it = lane.iter_order(now)
                got.append([next(it).request_id for _ in range(min(k, len(expected)))])
            assert got[0] == got[1] == expected[:len(got[0])]
            assert lanes[0].kept_until(now) == lanes[1].kept_until(now)
            later = now + rng.random()
            assert lanes[0].kept_until(later) == lanes[1].kept_until(later)
            if not lanes[0]._small:
                nb = len(lanes[0]._by_slot)
                assert [lanes[0]._lines.line(j) for j in range(nb)] == [lanes[1]._lines.line(j) for j in range(nb)]
            for rid in got[0][: rng.randint(0, len(got[0]))]:
                del waiting[rid]
                for lane in lanes:
                    lane.remove(rid)


@pytest.mark.skipif(not CONVERSATION.exists(), reason="shared conversation trace not present")
@pytest.mark.parametrize("name", FAMILY)
def test_conversation_slice_same_tables(name, monkeypatch):
    """700 requests of the conversation trace at the native rate (hundreds waiting, bucketed
    reads): the compiled lines, the numpy lines and ``order()`` give equal tables."""
    requests, engine = _conversation()

    def run(fast):
        return simulate(requests, make_policy(name, PROFILE), PROFILE, engine, fast_order=fast)

    with_compiled = run(True)
    monkeypatch.setattr(fast_lane, "bound_lines_class", lambda: NumpyBoundLines)
    with_numpy = run(True)
    reference = run(False)
    for other in (with_numpy, reference):
        pd.testing.assert_frame_equal(with_compiled.requests, other.requests, check_exact=True)
        pd.testing.assert_frame_equal(with_compiled.steps, other.steps, check_exact=True)
