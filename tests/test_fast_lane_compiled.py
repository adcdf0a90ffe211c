"""The Fast lane's compiled code paths (``fairsim/policies/_fast_lane_c.pyx``) against the Python
reference, bit for bit: two lanes fed the same random history, one on the compiled read and
updates, one forced onto the Python methods; every read yields the same requests and after every
operation the two lanes hold the same state (keys, bound lines, waste, loose keys, frontier,
clocks, kept first), compared through ``repr`` so that even a float's sign or last bit counts.
"""

from __future__ import annotations

import bisect
import os
import random
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fairsim.policies.fast_lane as fast_lane
from fairsim.policies import make_policy
from fairsim.policies.fast_lane import FastLane
from fairsim.types import QueuedRequest
from tests.test_fast_lane import MODES, PROFILE, _modes

compiled = pytest.importorskip("fairsim.policies._fast_lane_c", reason="compiled Fast lane not built")


def python_lane(slo, cap) -> FastLane:
    """A lane on the compiled bound lines whose methods and buckets are all the Python
    reference's (``_Bucket``: a plain sorted list; the compiled ``Bucket`` keeps its keys in
    blocks that only the compiled methods change)."""
    lane = FastLane(slo, cap)
    for name in fast_lane.COMPILED_METHODS:
        del lane.__dict__[name]  # the compiled method bound over the class's
    lane._bucket_order = lane._bucket_order_py
    lane._new_bucket = fast_lane._Bucket
    return lane


def state(lane: FastLane) -> str:
    """Everything a later read or update depends on, as text (``repr``: floats to the bit)."""
    lane._kept()  # the pending kept-first window, computed (as any later read or change would)
    items = {rid: it[:5] + [None if it[5] is None else it[5].slot] + it[6:] for rid, it in lane._items.items()}
    buckets = [(b.slot, b.t0, b.s_hi, b.keys, b.front) for b in lane._by_slot]
    lines = [lane._lines.line(j) for j in range(len(lane._by_slot))]
    return repr((items, buckets, lines, lane._loose, lane._waste, lane._frontier, lane._tmax,
                 lane._clock, lane._reads, lane._first, lane._small, lane._t0_max, lane._origin,
                 sorted((k, b.slot) for k, b in lane._buckets.items()), sorted(lane._by_len.items())))


def test_python_lane_runs_the_python_methods():
    """The reference twin really reads in Python (else the comparisons below compare nothing)."""
    policy = make_policy("fairway", PROFILE)
    with _modes(0, -1):
        fast, ref = FastLane(policy.slo), python_lane(policy.slo, None)
        for lane in (fast, ref):
            for i in range(5):
                lane.add(QueuedRequest(f"r{i}", i * 0.5, 100 + 300 * i, 0, 100 + 300 * i, 0, None))
        assert type(fast.iter_order(3.0)).__name__ == "generator" and "cython" in type(fast.iter_order(3.0)).__module__
        # ref reads by FastLane's own methods (below): its source, run interpreted or compiled
        # whole by setup.py (fairsim.compiled.WHOLE_MODULES), not the _fast_lane_c twin's
        assert [q.request_id for q in fast.iter_order(3.0)] == [q.request_id for q in ref.iter_order(3.0)]
        for name in fast_lane.COMPILED_METHODS:
            assert getattr(fast, name).__func__ is getattr(compiled, name.lstrip("_"))
            assert getattr(ref, name).__func__ is getattr(FastLane, name)
        assert type(fast._by_slot[0]) is compiled.Bucket


@pytest.mark.parametrize("slo", [1.0, 3, 0.37, 1e-300, 5e-324, 1e300, float("inf"), 0.0, -2.0, float("nan")])
def test_compiled_slope_is_the_reference(slo):
    """A bucketed lane's add of a new prompt length keeps ``FastLane._slope``'s ``(SLO, 1 / SLO,
    bucket index)`` (the compiled copy: ``log`` and the product in C), or raises its error:
    an int SLO, tiny and huge ones (an infinite ``1 / SLO``: ``math.floor``'s OverflowError),
    a zero (ZeroDivisionError), a negative or NaN one (no bucket by the logarithm)."""
    seen = []
    with _modes(0, -1):
        for lane in (FastLane(lambda L: 1.0), python_lane(lambda L: 1.0, None)):
            lane.add(QueuedRequest("r0", 0.0, 100, 0, 100, 0, None))
            list(lane.iter_order(0.0))  # (bucketed from here)
            assert not lane._small
            lane.slo = lambda L: slo
            try:
                lane.add(QueuedRequest("r1", 1.0, 200, 0, 200, 0, None))
                seen.append(repr(lane._by_len[200]))
            except Exception as exc:  # noqa: BLE001 - compared with the reference's
                seen.append(f"{type(exc).__name__}: {exc}")
    assert seen[0] == seen[1]
    try:
        expected = repr(FastLane._slope(python_lane(lambda L: slo, None), 200))
    except (ZeroDivisionError, OverflowError) as exc:
        expected = f"{type(exc).__name__}: {exc}"
    assert seen[0] == expected


def test_compiled_add_calls_a_replaced_slope():
    """A lane class that replaces ``_slope`` has the compiled add call it."""
    calls = []

    class Lane(FastLane):
        def _slope(self, prompt_len):
            calls.append(prompt_len)
            return super()._slope(prompt_len)

    with _modes(0, -1):
        lane = Lane(lambda L: 2.0)
        lane.add(QueuedRequest("r0", 0.0, 100, 0, 100, 0, None))
        list(lane.iter_order(0.0))
        lane.add(QueuedRequest("r1", 1.0, 300, 0, 300, 0, None))
    assert lane.add.__func__ is compiled.add and calls[-1] == 300


def test_snapshot_positions_are_queued_request_fields():
    """The compiled lane reads a ``QueuedRequest`` by position: its positions are the fields'."""
    assert compiled.SNAPSHOT_POSITIONS
    for name, i in compiled.SNAPSHOT_POSITIONS.items():
        assert QueuedRequest._fields[i] == name


class OtherSnapshot(QueuedRequest):
    """A snapshot of another type: the compiled lane reads its fields by name."""

    __slots__ = ()


def test_another_snapshot_type_reads_the_same():
    """Fields read by name (another type) or by position (``QueuedRequest``): the same lane."""
    policy = make_policy("fairway", PROFILE)
    with _modes(0, -1):
        lanes, orders = [], []
        for kind in (QueuedRequest, OtherSnapshot):
            lane = FastLane(policy.slo)
            order = []
            for i in range(40):
                lane.add(kind(f"r{i}", i * 0.5, 100 + 37 * i, 64 * (i % 3), 100 + 37 * i - 64 * (i % 3), 0, None,
                              tuple(range(i % 4)), 16))
                if i == 19:  # a read builds the buckets: the later adds take the bucketed path
                    order += [q.request_id for q in lane.iter_order(10.0)]
                    assert not lane._small
            lane.add(kind("r3", 1.5, 211, 64, 147, 0, None, (0, 1, 2, 3), 16))  # a re-add, a higher hit
            lane.remove("r5")
            order += [q.request_id for q in lane.iter_order(30.0)]
            lanes.append(lane)
            orders.append(order)
        assert orders[0] == orders[1]
        assert state(lanes[0]) == state(lanes[1]).replace("OtherSnapshot", "QueuedRequest")


def test_pure_python_switch_reads_in_python():
    """``FAIRSIM_PURE_PYTHON=1``: numpy lines, so the reads are the Python method's."""
    code = ("from fairsim.policies import fast_lane\n"
            "lane = fast_lane.FastLane(lambda L: 1.0)\n"
            "fast_lane.SMALL_HI = fast_lane.SMALL_LO = -1\n"
            "from fairsim.types import QueuedRequest\n"
            "lane.add(QueuedRequest('a', 0.0, 10, 0, 10, 0, None))\n"
            "print(type(lane._lines).__name__, type(lane.iter_order(1.0)).__module__,\n"
            "      lane.add.__func__ is fast_lane.FastLane.add, type(lane._by_slot[0]).__name__)\n")
    env = dict(os.environ, FAIRSIM_PURE_PYTHON="1")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.split() == ["NumpyBoundLines", "builtins", "True", "_Bucket"]


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 1_000_000), cap=st.sampled_from([None, 0.0, 0.5, 3.0]), modes=st.sampled_from(MODES),
       origin=st.sampled_from([0.0, -1e9, 1.7e9]), lazy=st.booleans(), ties=st.booleans())
def test_compiled_and_python_lanes_stay_identical(seed, cap, modes, origin, lazy, ties):
    rng = random.Random(seed)
    policy = make_policy("fairway-carry", PROFILE, **({} if cap is None else {"wait_cap": cap}))
    with _modes(*modes):
        fast, ref = FastLane(policy.slo, policy.wait_cap), python_lane(policy.slo, policy.wait_cap)
        lanes = (fast, ref)
        current: dict[str, QueuedRequest] = {}
        if lazy:
            for lane in lanes:
                lane.set_resolver(lambda q: current[q.request_id])
        t = now = origin
        for step in range(20):
            for _ in range(rng.randint(0, 25 if step % 7 else 90)):  # now and then a long queue
                t += rng.expovariate(4.0)
                L = rng.choice([64, 512, 2048]) if ties else int(rng.lognormvariate(7.5, 1.3)) + 2
                h = rng.randint(0, L - 1) if rng.random() < 0.5 else 0
                q = QueuedRequest(f"r{step}-{rng.randrange(10**9)}", t if not ties else round(t, 1), L, h,
                                  max(1, L - h), 0, None, block_size=16, block_keys=tuple(range(L // 16)))
                current[q.request_id] = q
                for lane in lanes:
                    lane.add(q)
            assert state(fast) == state(ref)
            stale, raised = [], []
            for rid in rng.sample(sorted(current), min(len(current), rng.randint(0, 10))):
                old = current[rid]
                # A hit any cache could give (whole blocks of block_keys, at most L - 1: as the
                # engine's); a stale request's key is bounded by that (fast_lane.max_hit).
                h = rng.randint(0, fast_lane.max_hit(old))
                q = current[rid] = old._replace(cached_len=h, uncached_len=max(1, old.prompt_len - h))
                if not lazy or rng.random() < 0.5:
                    for lane in lanes:
                        lane.add(q)
                else:
                    stale.append(rid)
                    if h > old.cached_len or rng.random() < 0.3:
                        raised.append(rid)
            if stale:
                for lane in lanes:
                    lane.stale(list(stale), list(raised))
            assert state(fast) == state(ref)
            if not current:
                continue
            now = max(now, t) + rng.random() * rng.choice([0.0, 0.1, 5.0])
            if rng.random() < 0.1:
                now -= rng.random()  # a clock gone back (the live hook's)
            for _ in range(rng.randint(1, 3)):
                k = rng.choice([0, 1, 1, 2, 3, 5, 70, len(current)])
                got = []
                for lane in lanes:
                    it = lane.iter_order(now)
                    got.append([next(it).request_id for _ in range(min(k, len(current)))])
                assert got[0] == got[1]
                assert fast.kept_until(now) == ref.kept_until(now)
                assert state(fast) == state(ref)
                now += rng.choice([0.0, 1e-6, 0.01])
            for rid in rng.sample(sorted(current), min(len(current), rng.randint(0, 6))):
                del current[rid]
                for lane in lanes:
                    lane.remove(rid)
            assert state(fast) == state(ref)


# -- fairway-deadline's block sums (``_fast_lane_c.block_sums``/``open_due``) -------------------
from fairsim.policies.deadline_fast import DueBlocks, _Block  # noqa: E402

#: Integers of every size the sums meet: ns deadlines of a simulated clock and of a wall clock
#: (1.7e18), works, and values at and past the 64-bit edge (there the kernels answer ``None``).
_INTS = st.one_of(st.integers(-10**12, 10**12), st.integers(10**17, 2 * 10**18),
                  st.integers(2**63 - 10**6, 2**63 + 10**6), st.integers(-2**63 - 10**6, -2**63 + 10**6))


def _reference_sums(due: DueBlocks, b: _Block) -> tuple:
    due._resum(b)
    return b.total, b.least


@settings(max_examples=300, deadline=None)
@given(data=st.data(), mode=st.sampled_from(["queue", "own", "none"]), n=st.integers(0, 140))
def test_block_sums_are_the_python_sums(data, mode, n):
    """``block_sums`` gives ``_resum``'s total and least (the same ints, ``inf`` when no request
    is free), or ``None`` exactly where a value or a partial sum leaves 64-bit integers."""
    dl = data.draw(st.lists(_INTS, min_size=n, max_size=n))
    work = data.draw(st.lists(_INTS, min_size=n, max_size=n))
    urgent = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
    due = DueBlocks(mode)
    b = _Block([(d, 0.0, str(j)) for j, d in enumerate(dl)], list(work), list(urgent))
    got = compiled.block_sums(b.dl, b.work, b.urgent, compiled.MODE_CODES[mode])
    want = _reference_sums(due, b)
    values = list(dl) + ([] if mode == "none" else list(work))
    if mode == "queue":
        p = 0
        for d, w in zip(dl, work):
            p += w
            values += [p, d - p]
    elif mode == "own":
        values += [d - w for d, w in zip(dl, work)]
    if any(not -2**63 <= v < 2**63 for v in values):
        assert got is None
    else:
        assert got is not None and repr(got) == repr(want) and type(got[1]) is type(want[1])


@settings(max_examples=300, deadline=None)
@given(data=st.data(), mode=st.sampled_from(["queue", "own", "none"]), n=st.integers(1, 140))
def test_open_due_marks_what_python_marks(data, mode, n):
    """``open_due`` marks the same requests, in the same order, and leaves the same sums as
    ``DueBlocks._open`` on the Python path; ``None`` leaves the block untouched."""
    small = st.integers(-10**6, 10**6)
    ints = data.draw(st.sampled_from([small, _INTS]))
    dl = data.draw(st.lists(ints, min_size=n, max_size=n))
    work = data.draw(st.lists(ints, min_size=n, max_size=n))
    urgent = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
    t = data.draw(st.one_of(small, _INTS))
    keys = [(d, 0.0, str(j)) for j, d in enumerate(dl)]
    runs = []
    for kernel in (True, False):
        due = DueBlocks(mode)
        if not kernel:
            due.kernel = None
        due._blocks = [_Block(list(keys), list(work), list(urgent))]
        due.last = [keys[-1]]
        due._moved = 0  # every leaf to set
        due._retree()
        newly: list = []
        due._open(0, 0, t, {}, newly)
        b = due._blocks[0]
        runs.append(repr((newly, b.urgent, b.total, b.least, due._tot, due._lst)))
    assert runs[0] == runs[1]


def test_due_blocks_use_the_kernel_unless_pure_python():
    assert DueBlocks("queue").kernel is compiled
    code = "from fairsim.policies.deadline_fast import DueBlocks\nprint(DueBlocks('queue').kernel)\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env=dict(os.environ, FAIRSIM_PURE_PYTHON="1"))
    assert out.stdout.strip() == "None"


_FIRST = st.one_of(st.sampled_from([0.0, -0.0, 1.0, -1.0, 2.5]), st.floats(-1e6, 1e6, allow_nan=False))


@settings(max_examples=60, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from(["put", "drop", "search", "assign", "odd"]),
                              _FIRST, st.integers(0, 3), st.integers(0, 10**6)), max_size=80),
       exotic=st.sampled_from([None, 1, float("nan")]))
def test_bucket_mirror_finds_bisect_places(ops, exotic):
    """A compiled bucket's search over its mirrored doubles gives ``bisect``'s index, ties on
    the first field included (compared as tuples), and its keys stay those ``insort`` and
    ``del`` would leave; a key whose first field is not a float or is NaN, and an assignment of
    the keys, fall back to (or rebuild from) the tuples."""
    from bisect import bisect_left, bisect_right, insort

    b = compiled.Bucket(0, 0.0)
    ref: list[tuple] = []
    for i, (op, first, arrival, n) in enumerate(ops):
        kt = (first, arrival, f"r{i}")
        if op == "put":
            b.insert_key(kt)
            insort(ref, kt)
        elif op == "drop" and ref:
            j = n % len(ref)
            b.delete_at(j)
            del ref[j]
        elif op == "search":  # (with a NaN: bisect's own probes, so its index too)
            assert b.search(kt) == bisect_left(ref, kt) and b.search(kt, True) == bisect_right(ref, kt)
        elif op == "assign":
            ref = sorted(ref + [kt])
            b.keys = list(ref)
        elif op == "odd" and exotic is not None and i % 7 == 0:
            kt = (exotic, arrival, f"x{i}")  # (an int or NaN first field: searched as tuples)
            b.insert_key(kt)
            insort(ref, kt)
        assert b.keys == ref
        if all(type(k[0]) is float for k in ref) and b.mirrored() is not None:
            assert b.mirrored() == [k[0] for k in ref]
        assert sum(b.block_lengths()) == len(ref) and all(b.block_lengths())


def _bucket_op(b, ref: list, op: str, kt: tuple, n: int, run: int) -> None:
    """Apply ``op`` to the compiled bucket ``b`` and to the sorted list ``ref`` alike: ``put`` a
    key, take 1 to ``run`` keys off the ``front`` (admissions), ``drop`` the key at ``n``, or
    check a ``search`` (``bisect``'s indexes) or the mirror (``peek``)."""
    from bisect import bisect_left, bisect_right, insort

    if op == "put":
        b.insert_key(kt)
        insort(ref, kt)
    elif op == "front":
        for _ in range(1 + n % run):
            if not ref:
                break
            b.delete_at(0)
            del ref[0]
    elif op == "drop" and ref:
        j = n % len(ref)
        b.delete_at(j)
        del ref[j]
    elif op == "search":
        assert b.search(kt) == bisect_left(ref, kt) and b.search(kt, True) == bisect_right(ref, kt)
    elif op == "peek":
        assert b.mirrored() == [k[0] for k in ref]


@settings(max_examples=40, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from(["put", "put", "put", "front", "drop", "search"]),
                              st.sampled_from([0.0, 1.0, 2.0]), st.integers(0, 2), st.integers(0, 10**6)),
                    min_size=1, max_size=40),
       fill=st.integers(0, 3000))
def test_bucket_blocks_split_and_empty_as_a_sorted_list(ops, fill):
    """With thousands of keys (blocks of at most 1,024, split in halves and dropped when
    emptied), insertions, deletions and searches, ties across blocks included (three first
    fields only), give what ``insort``, ``del`` and ``bisect`` give on one list."""
    from bisect import insort

    b = compiled.Bucket(0, 0.0)
    ref: list[tuple] = []
    for i in range(fill):
        kt = (float(i % 3), i % 5, f"f{i:05d}")
        b.insert_key(kt)
        insort(ref, kt)
    for i, (op, first, arrival, n) in enumerate(ops):
        _bucket_op(b, ref, op, (first, arrival, f"r{n:07d}"), n, 700)
    assert b.keys == ref
    assert b.mirrored() == [k[0] for k in ref]
    lengths = b.block_lengths()
    assert sum(lengths) == len(ref) and all(0 < m <= 1024 for m in lengths)


def test_bucket_tie_run_across_blocks():
    """Hand-made: 3,000 keys of one first field (a tie run over three blocks after the splits)
    and one key below and above it: a search inside the run compares the tuples across block
    boundaries and gives ``bisect``'s indexes; deleting the first block's keys drops the block."""
    b = compiled.Bucket(0, 0.0)
    keys = [(0.0, 0, f"r{i:05d}") for i in range(3000)] + [(-1.0, 0, "lo"), (1.0, 0, "hi")]
    for kt in keys:
        b.insert_key(kt)
    ref = sorted(keys)
    lengths = b.block_lengths()
    assert len(lengths) >= 3 and sum(lengths) == 3002 and max(lengths) <= 1024
    for probe in ((0.0, 0, "r01500x"), (0.0, 0, "r02999"), (0.0, 0, "r00000"), (0.0, -1, "z"), (0.0, 1, "")):
        assert b.search(probe) == bisect.bisect_left(ref, probe)
        assert b.search(probe, True) == bisect.bisect_right(ref, probe)
    for _ in range(lengths[0]):
        b.delete_at(0)
    assert b.block_lengths() == lengths[1:] and b.keys == ref[lengths[0]:]


@settings(max_examples=80, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from(["put", "put", "front", "front", "drop", "search", "peek"]),
                              _FIRST, st.integers(0, 3), st.integers(0, 10**6)), max_size=200))
def test_bucket_front_taken_off(ops):
    """Runs of front deletions (admissions) between insertions and searches: every search gives
    ``bisect``'s index, the mirror is the keys' first fields, and the keys handed out at the end
    are what ``insort`` and ``del`` leave, also after a bucket is emptied."""
    b = compiled.Bucket(0, 0.0)
    ref: list[tuple] = []
    for i, (op, first, arrival, n) in enumerate(ops):
        _bucket_op(b, ref, op, (first, arrival, f"r{i}"), n, 20)
    assert b.mirrored() == [k[0] for k in ref]
    assert b.keys == ref
    assert b.mirrored() == [k[0] for k in ref]


def test_bucket_front_deletions_leave_the_rest_in_order():
    """Hand-made: 40 keys, 30 taken from the front, one new front: the keys are the 10 left
    after it, in order."""
    b = compiled.Bucket(0, 0.0)
    keys = [(float(i), 0, f"r{i}") for i in range(40)]
    for kt in keys:
        b.insert_key(kt)
    for _ in range(30):
        b.delete_at(0)
    b.insert_key((-1.0, 0, "new"))
    assert b.search((35.0, 0, "r35")) == 6
    assert b.keys == [(-1.0, 0, "new")] + keys[30:]
    assert b.mirrored() == [-1.0] + [float(i) for i in range(30, 40)]


def _slo_pair(name: str = "fairway", **params):
    """Two policies of ``name`` on two copies of the profile: one asked through a ``SloCurve``,
    one through the reference ``Fairway.slo`` (their memos compared after)."""
    from fairsim.costmodel import load_profile
    a = make_policy(name, load_profile("a6000-llama3.1-8b-vllm-prior"), **params)
    b = make_policy(name, load_profile("a6000-llama3.1-8b-vllm-prior"), **params)
    return a, b, compiled.slo_curve(a.slo)


@pytest.mark.parametrize("name", ["fairway", "fairway-carry", "fairway-patience", "fairway-plus"])
def test_slo_curve_is_fairway_slo(name):
    """``SloCurve`` gives ``Fairway.slo``'s floats to the bit (and its errors) at lengths inside
    the ``T_idle`` table (the table's own points, between them), below it, past it, and at
    non-``int`` lengths, and leaves the same memo entries in the policy and the profile."""
    a, b, curve = _slo_pair(name)
    assert curve is not None and curve.reference == a.slo
    x = a.idle_prefill_time.__self__.idle_prompt_tokens
    rng = random.Random(7)
    lengths = ([-1, 0, 1, x[0] - 1] + list(x) + [v + 1 for v in x] + [v - 1 for v in x]
               + [rng.randrange(1, 2 * x[-1]) for _ in range(3000)] + [True, 100.0, 2.5])
    for L in lengths + lengths:  # (the second pass: every answer from the memo)
        results = []
        for ask in (curve, b.slo):
            try:
                v = ask(L)
                results.append((type(v), v.hex() if isinstance(v, float) else v))
            except Exception as exc:  # noqa: BLE001 - compared with the reference's
                results.append((type(exc), str(exc)))
        assert results[0] == results[1], L
    assert repr(a._slo_by_len) == repr(b._slo_by_len)
    assert repr(a.idle_prefill_time.__self__._idle_memo) == repr(b.idle_prefill_time.__self__._idle_memo)


def test_slo_curve_follows_the_policy_and_falls_back():
    """The curve reads the policy's floor, multiplier and mode at each new length (the
    reference's reads): an absolute policy, or a floor that is not a float, is answered by
    ``Fairway.slo`` itself; a policy or profile that replaces a reference method gets no curve."""
    a, b, curve = _slo_pair()
    for policy in (a, b):
        policy.slo_floor = 0.02
    assert curve(3000).hex() == b.slo(3000).hex() and a._slo_by_len[3000] > 0.02
    for policy in (a, b):
        policy.wait_mode = "absolute"
    assert curve(3001) == b.slo(3001) == 0.02
    for policy in (a, b):
        policy.wait_mode, policy.slo_floor = "relative", 1
    assert curve(5) == b.slo(5) == 1 and type(a._slo_by_len[5]) is int

    class Patient(type(a)):
        def slo(self, prompt_len):
            return 2.0

    c = Patient(a.idle_prefill_time)
    assert compiled.slo_curve(c.slo) is None and compiled.slo_curve(lambda L: 1.0) is None
    d = make_policy("fairway", PROFILE)
    d.idle_prefill_time = lambda L: 0.5
    assert compiled.slo_curve(d.slo) is None


def test_lane_with_a_replaced_slo_calls_it():
    """A lane whose ``slo`` is replaced after it was made calls the new one (not its curve)."""
    policy = make_policy("fairway", PROFILE)
    with _modes(0, -1):
        lane = FastLane(policy.slo)
        assert type(lane._slo_c) is compiled.SloCurve
        lane.add(QueuedRequest("r0", 0.0, 100, 0, 100, 0, None))
        list(lane.iter_order(0.0))
        lane.slo = lambda L: 7.0
        lane.add(QueuedRequest("r1", 1.0, 300, 0, 300, 0, None))
    assert lane._by_len[300][0] == 7.0 and lane._items["r0"][3] == policy.slo(100) != 7.0
