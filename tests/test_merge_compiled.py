"""The compiled twins of Fairway's merge and lane plumbing (``fairsim/policies/_merge_c.pyx``)
against their Python references in ``fairsim.policies.incremental``.

- ``Merge`` against ``merge_lanes``: random lanes (ties on the ledgers, work past 2**53, odd
  float weights, a start ledger, a carried debt and its oldest), the same items yielded and the
  same number of items read from each lane after every ``next()``; a hand-computed merge; an
  exhausted lane raising as the generator does.
- ``Resolved`` against ``ArrivalOrder._resolved``: the same snapshots and write-backs.
- ``LanePair`` against ``Lanes.add``/``remove`` and ``LazyLanes.stale``: the same lanes after
  random joins, leaves, replaced snapshots and stale marks; not bound over a subclass's method.
- The Fairway family's fast path built with ``FAIRSIM_PURE_PYTHON`` on and off: the same items
  at every read of random joins, reads, admissions and stale marks; whole runs: the same tables.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairsim.compiled import compiled_twin
from fairsim.costmodel import load_profile
from fairsim.policies import make_policy
from fairsim.policies.fast_lane import FastLane
from fairsim.policies.incremental import (MERGE_MODULE, ArrivalOrder, Lanes, LazyLanes, fairway_order,
                                          merge_lanes, merge_of)
from fairsim.scenarios import build_scenario
from fairsim.sim import simulate
from fairsim.sim.config import EngineConfig
from tests.utils import make_queued

twin = compiled_twin(MERGE_MODULE)
pytestmark = pytest.mark.skipif(twin is None, reason="fairsim.policies._merge_c is not built")

PROFILE = load_profile("a6000-llama3.1-8b-vllm-prior")
CONVERSATION = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces" / "conversation_trace.jsonl"


class Counted:
    """An iterator over ``items`` that counts the items read from it."""

    def __init__(self, items):
        self.it = iter(items)
        self.read = 0

    def __iter__(self):
        return self

    def __next__(self):
        x = next(self.it)
        self.read += 1
        return x


def _snapshot(rid: str, work: int, plain: bool):
    """A ``QueuedRequest`` (read by position in the twin) or another object with the fields."""
    if plain:
        return make_queued(rid, 0, work)
    return SimpleNamespace(request_id=rid, uncached_len=work)


def _both(fast, fair, n, *args):
    """Items and lane reads of the reference and of the twin, after every ``next()``."""
    runs = []
    for merge in (merge_lanes, twin.Merge):
        fl, fa = Counted(fast), Counted(fair)
        it = merge(fl, fa, n, *args)
        runs.append([(x, fl.read, fa.read) for x in it])
    return runs


_WORK = st.one_of(st.integers(1, 8), st.integers(1, 10**6), st.integers(2**53 - 4, 2**53 + 4))
_WEIGHT = st.one_of(st.sampled_from([1.0, 4.0, 0.1, 3.0, 1e-3, 7.3]),
                    st.floats(1e-6, 1e6, allow_nan=False, allow_infinity=False))


@settings(deadline=None)
@given(works=st.lists(_WORK, min_size=1, max_size=40), seed=st.randoms(use_true_random=False),
       fast_w=_WEIGHT, fair_w=_WEIGHT,
       ledger0=st.one_of(st.none(), st.just(0.0), st.floats(0.0, 1e6)),
       carried=st.one_of(st.just(0.0), st.floats(0.0, 1e7)), oldest=st.integers(-1, 40),
       plain=st.booleans())
def test_merge_twin_as_the_reference(works, seed, fast_w, fair_w, ledger0, carried, oldest, plain):
    snaps = [_snapshot(f"r{i:02d}", w, plain) for i, w in enumerate(works)]
    fast = list(snaps)
    seed.shuffle(fast)
    oldest_id = snaps[oldest].request_id if 0 <= oldest < len(snaps) else None
    ref, got = _both(fast, snaps, len(snaps), fast_w, fair_w, ledger0, carried, oldest_id)
    assert [(x.request_id, a, b) for x, a, b in got] == [(x.request_id, a, b) for x, a, b in ref]
    assert all(x is y for (x, _, _), (y, _, _) in zip(got, ref))
    assert sorted(x.request_id for x, _, _ in got) == sorted(s.request_id for s in snaps)


def test_merge_twin_on_a_hand_computed_merge():
    # Fast lane A(c=1), B(c=5), C(c=2); Fair lane C, A, B; weights 4 and 1.
    # Ledgers: fast 4*1 = 4, fair 1*2 = 2 -> Fair: C (fair 4); tie 4 <= 4 -> Fast: A (fast 8);
    # 8 > 4 -> Fair: C and A are placed, so B.
    a, b, c = make_queued("A", 0, 1), make_queued("B", 0, 5), make_queued("C", 0, 2)
    for merge in (merge_lanes, twin.Merge):
        assert [q.request_id for q in merge(iter([a, b, c]), iter([c, a, b]), 3, 4.0, 1.0)] == ["C", "A", "B"]
    # With a carried debt of 8 until C (the oldest) is placed: fast 4 + 8 = 12 > 2 -> C (fair 4),
    # the debt comes off (fast 4), tie -> A (fast 8), 8 > 4 -> B.
    # Without taking it off, B would come before A (12 > 4 -> Fair: A).
    for merge in (merge_lanes, twin.Merge):
        assert [q.request_id for q in merge(iter([a, b, c]), iter([c, a, b]), 3, 4.0, 1.0, None, 8.0, "C")] \
            == ["C", "A", "B"]
        assert [q.request_id for q in merge(iter([a, b, c]), iter([c, a, b]), 3, 4.0, 1.0, 0.0, 8.0, "B")] \
            == ["C", "A", "B"]


def test_merge_twin_reads_nothing_before_the_first_next_and_raises_on_a_short_lane():
    a, b = make_queued("A", 0, 1), make_queued("B", 0, 5)
    for merge in (merge_lanes, twin.Merge):
        fl, fa = Counted([a]), Counted([a])
        it = merge(fl, fa, 2, 1.0, 1.0)
        assert (fl.read, fa.read) == (0, 0)
        assert next(it) is a
        with pytest.raises(RuntimeError, match="StopIteration"):
            next(it)  # both lanes end before the second request: a broken lane, not the end
        assert list(it) == []
        assert list(merge(iter([a, b]), iter([b, a]), 0, 1.0, 1.0)) == []


def test_merge_of_picks_the_twin_for_float_weights_only(monkeypatch):
    assert merge_of(4.0, 1.0) is twin.Merge
    assert merge_of(4, 1.0) is merge_lanes  # an int ledger is not a C double
    monkeypatch.setenv("FAIRSIM_PURE_PYTHON", "1")
    assert merge_of(4.0, 1.0) is merge_lanes


@settings(deadline=None)
@given(n=st.integers(0, 30), changed=st.lists(st.integers(0, 29), max_size=30), stop=st.integers(0, 31))
def test_resolved_twin_as_the_reference(n, changed, stop):
    snaps = [make_queued(f"r{i:02d}", 0, i + 1) for i in range(n)]
    fresh = {i: make_queued(f"r{i:02d}", 1, i) for i in changed}

    def resolve(q):
        return fresh.get(int(q.request_id[1:]), q)

    results = []
    def reference(items):
        # A real ArrivalOrder (compiled, an extension type: its methods read C fields, so an
        # unbound call on another object would read the wrong memory).
        order = ArrivalOrder()
        order.items = items
        return ArrivalOrder._resolved(order, resolve)

    for make in (reference,
                 lambda items: twin.Resolved(items, resolve)):
        items = OrderedDict((q.request_id, q) for q in snaps)
        it = make(items)
        got = [q for _, q in zip(range(stop), it)]
        results.append((got, list(items.items())))
    (ref_got, ref_items), (twin_got, twin_items) = results
    assert [id(q) for q in twin_got] == [id(q) for q in ref_got]
    assert [(k, id(q)) for k, q in twin_items] == [(k, id(q)) for k, q in ref_items]


def _slo(prompt_len: int) -> float:
    return 1.0 + prompt_len / 100.0


def _lane_state(lanes) -> tuple:
    fast, fair = lanes.lanes
    return (list(fair.items.items()), fair._last, fair._sorted,
            sorted((rid, item[0], item[8]) for rid, item in fast._items.items()),
            [q.request_id for q in lanes.iter_order(10.0)])


@settings(deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from(["add", "add", "add", "again", "remove", "stale", "raise"]),
                              st.integers(0, 10**6), st.floats(0.0, 9.0), st.integers(0, 200)),
                    max_size=80))
def test_lane_pair_as_the_reference(ops):
    def combine(now, fast, fair):
        return merge_lanes(fast.iter_order(now), fair.iter_order(now), len(fast), 4.0, 1.0) \
            if len(fast) > 1 else fast.iter_order(now)

    ref = LazyLanes(combine, FastLane(_slo), ArrivalOrder())
    got = LazyLanes(combine, FastLane(_slo), ArrivalOrder())
    assert type(got.add.__self__) is twin.LanePair
    waiting: dict[str, object] = {}
    for seq, (op, pick, arrival, work) in enumerate(ops):
        if op == "add" or (op == "again" and not waiting):
            q = make_queued(f"r{seq:03d}", work % 7, work + 1, arrival, prompt_len=work + 1 + work % 7)
        elif op == "again":  # a replaced snapshot: same id, new hit
            old = sorted(waiting)[pick % len(waiting)]
            q = waiting[old]._replace(cached_len=work % 5)
        elif not waiting:
            continue
        else:
            rid = sorted(waiting)[pick % len(waiting)]
            if op == "remove":
                del waiting[rid]
                Lanes.remove(ref, rid)
                got.remove(rid)
            else:
                raised = None if op == "raise" else [rid] if pick % 2 else []
                LazyLanes.stale(ref, [rid], raised)
                got.stale([rid], raised)
            continue
        waiting[q.request_id] = q
        Lanes.add(ref, q)
        got.add(q)
        if seq % 7 == 0:
            assert _lane_state(got) == _lane_state(ref)
    assert _lane_state(got) == _lane_state(ref)


def test_lane_pair_is_not_bound_over_a_replaced_method():
    class Recording(LazyLanes):
        def add(self, q):
            super().add(q)

    lanes = Recording(lambda now, *lanes: iter(()), FastLane(_slo), ArrivalOrder())
    assert lanes.add.__func__ is Recording.add
    assert type(lanes.remove.__self__) is twin.LanePair
    single = LazyLanes(lambda now, fast: fast.iter_order(now), FastLane(_slo))
    assert single.add.__func__ is Lanes.add


def test_fairway_order_uses_the_twins():
    lanes = fairway_order(make_policy("fairway", PROFILE))
    assert type(lanes.add.__self__) is twin.LanePair


@contextmanager
def _pure_python():
    old = os.environ.get("FAIRSIM_PURE_PYTHON")
    os.environ["FAIRSIM_PURE_PYTHON"] = "1"
    try:
        yield
    finally:
        if old is None:
            del os.environ["FAIRSIM_PURE_PYTHON"]
        else:
            os.environ["FAIRSIM_PURE_PYTHON"] = old


@settings(deadline=None, max_examples=60)
@given(name=st.sampled_from(["fairway", "fairway-carry", "fairway-plus", "fairway-patience"]),
       ops=st.lists(st.tuples(st.sampled_from(["add", "add", "add", "read", "read", "stale", "raise"]),
                              st.integers(0, 10**6), st.integers(1, 3000), st.integers(0, 5)),
                    max_size=120),
       lazy=st.booleans())
def test_family_read_as_the_reference(name, ops, lazy):
    """The whole fast path, compiled (``Merge``, ``Resolved``, ``LanePair`` and the compiled Fast
    lane) against the pure-Python one: the same items at every read (partial
    reads, admissions, stale marks, over and under the small lane's size), the same carry state."""
    with _pure_python():
        ref_policy = make_policy(name, PROFILE)
        ref = ref_policy.incremental_order()
    got_policy = make_policy(name, PROFILE)
    got = got_policy.incremental_order()
    fresh: dict[str, object] = {}
    if lazy:  # a resolver giving a new snapshot object for a request marked stale
        for order in (ref, got):
            order.set_resolver(lambda q: fresh.get(q.request_id, q))
    waiting: dict[str, object] = {}
    now = 0.0
    for seq, (op, pick, work, take) in enumerate(ops):
        now += 0.25
        if op == "add":
            q = make_queued(f"r{seq:03d}", work % 11 * 16, work, now, prompt_len=work + work % 11 * 16)
            waiting[q.request_id] = q
            ref.add(q)
            got.add(q)
        elif not waiting:
            continue
        elif op == "read":
            ref_ids = [q.request_id for _, q in zip(range(take + 1), ref.iter_order(now))]
            got_ids = [q.request_id for _, q in zip(range(take + 1), got.iter_order(now))]
            assert got_ids == ref_ids
            for rid in ref_ids[:take // 2]:  # admitted
                del waiting[rid]
                ref.remove(rid)
                got.remove(rid)
                for policy in (ref_policy, got_policy):
                    if hasattr(policy, "debt"):
                        policy.debt += 1.5
            for attr in ("oldest", "debt", "armed"):
                assert getattr(got_policy, attr, None) == getattr(ref_policy, attr, None), attr
        elif lazy:
            rid = sorted(waiting)[pick % len(waiting)]
            fresh[rid] = waiting[rid] = waiting[rid]._replace(cached_len=pick % 3 * 16)
            raised = None if op == "raise" else [rid] if pick % 2 else []
            ref.stale([rid], raised)
            got.stale([rid], raised)
    if waiting:
        assert [q.request_id for q in got.iter_order(now + 1)] == [q.request_id for q in ref.iter_order(now + 1)]


def _runs(requests, config):
    for name in ("fairway", "fairway-abswait", "fairway-carry", "fairway-plus", "fairway-patience"):
        yield name, simulate(requests, make_policy(name, PROFILE), PROFILE, config)


def _cases():
    rag = build_scenario("rag", PROFILE, seed=2)
    longest = max(r.prompt_len for r in rag.requests)
    yield rag.requests[:400], EngineConfig(kv_tokens=3 * longest)  # evicting: stale marks, resolves
    if CONVERSATION.exists():
        from fairsim.traces.formats import read_trace

        trace = list(read_trace(CONVERSATION).requests)[:4000]
        yield trace, EngineConfig(kv_blocks=451)  # native rate: ~thousands waiting, bucketed lane
        yield trace, EngineConfig(kv_blocks=451, mode="colocated")


def test_runs_with_and_without_the_twins_give_the_same_tables(monkeypatch):
    for requests, config in _cases():
        compiled = dict(_runs(requests, config))
        monkeypatch.setenv("FAIRSIM_PURE_PYTHON", "1")
        pure = dict(_runs(requests, config))
        monkeypatch.delenv("FAIRSIM_PURE_PYTHON")
        for name, result in compiled.items():
            assert result.requests.equals(pure[name].requests), name
            assert result.steps.equals(pure[name].steps), name
