"""Fairway-deadline: hand-computed deadlines and merges, and the cross-step bound over engine runs.

The bound (docs/POLICIES-more.md "Fairway-deadline"): from the first step at which a request
``r`` is due (``lookahead="queue"``: ``now +`` the work of the requests up to ``r`` in deadline
order ``>= D(r)``; ``"none"``: ``now >= D(r)``) until its admission, the engine admits ahead of
``r`` only requests with an earlier ``(D, arrival, request_id)``. The property runs
random traces (tests/engine_bound.py), records every step's snapshots and the policy's deadlines,
and checks it for every request. With deadlines computed by a shadow policy from the same
snapshots, the paper's ``fairway`` (no deadline) and a variant that recomputes the deadline every
step (the persistence removed) break it; hypothesis finds the traces.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, Phase, find, given, settings, strategies as st

from fairsim.policies import FairwayCarry, FairwayDeadline, make_policy
from fairsim.policies.base import arrival_key
from fairsim.policies.registry import accepted_params
from tests.engine_bound import BUDGET, PROFILE, const_slo, ids, long_miss_traces, overload_traces, run_recorded
from tests.utils import make_queued


def per_token(L: int) -> float:
    return L / 1000.0  # T_idle(L) = 1 ms per token, so work(q) = c / 1000 s


def quick(**params) -> FairwayDeadline:
    """work(q) = c / 1000 s; SLO = 0.1 s (floor 0.1, multiplier 0)."""
    return FairwayDeadline(per_token, slo_multiplier=0.0, slo_floor=0.1, **params)


class TestDeadlines:
    """o: miss L = c = 1000, arrival 0 (work 1.0 s); x1, x2: L = 1000, h = 990, c = 10, arrival
    0.5 (work 0.01 s). Deadline ``D = a + max(SLO, 1.25 x W + w, H_prev)`` (W: work ahead in
    arrival order, w: own work, H_prev: largest ``W + w`` seen before)."""

    def queue(self):
        return [make_queued("o", 0, 1000, arrival=0.0), make_queued("x1", 990, 10, arrival=0.5),
                make_queued("x2", 990, 10, arrival=0.5)]

    def test_first_sight_deadlines(self):
        p = quick()
        assert p.slack == 1.25  # 1 + fair_weight / fast_weight
        p.order(self.queue(), 0.9)
        assert p.horizon_s == pytest.approx(1.02)  # FCFS estimates 1.0, 1.01, 1.02 s
        assert p.deadline["o"] == pytest.approx(0.0 + 1.0)  # W 0, w 1.0
        assert p.deadline["x1"] == pytest.approx(0.5 + 1.25 * 1.0 + 0.01)  # > H_prev = 1.0
        assert p.deadline["x2"] == pytest.approx(0.5 + 1.25 * 1.01 + 0.01)

    def test_changed_in_place_is_a_new_request(self):
        # The live hook feeds a request whose prompt changed in place (a streaming update) to the
        # fast path as a new request; order() gives it a new deadline too (found in review).
        p = quick()
        p.order(self.queue(), 0.9)
        grown = make_queued("x2", 990, 510, arrival=0.5)  # 500 more uncached tokens: w = 0.51 s
        p.order(self.queue()[:2] + [grown], 0.95)
        assert p.deadline["x2"] == pytest.approx(0.5 + 1.25 * 1.01 + 0.51)  # W still o + x1
        assert p.deadline["x1"] == pytest.approx(0.5 + 1.25 * 1.0 + 0.01)  # unchanged

    def test_works_are_fixed_at_first_sight(self):
        # o's prefix gets cached after its first sight (900 of 1000 tokens hit: work now 0.1 s);
        # a newcomer's W and the due test still count o's 1.0 s, its work when first seen.
        p = quick()
        p.order(self.queue(), 0.1)
        assert p.work_ns == {"o": 1_000_000_000, "x1": 10_000_000, "x2": 10_000_000}
        cached = make_queued("o", 900, 100, arrival=0.0)
        y = make_queued("y", 0, 10, arrival=0.6)
        p.order([cached] + self.queue()[1:] + [y], 0.2)
        assert p.work_ns["o"] == 1_000_000_000
        assert p.deadline["y"] == pytest.approx(0.6 + 1.25 * 1.02 + 0.01)  # W = 1.0 + 0.01 + 0.01 s
        # o is due at 0.2 s: 0.2 + 1.0 >= D(o) = 1.0 (with its current 0.1 s it would not be).
        assert "o" in p.urgent

    def test_not_late_is_the_fast_first_merge(self):
        # At 0.9 s nobody is late or urgent (o: 0.9 + 1.0 >= 1.0 is urgent with the queue
        # lookahead, so this uses lookahead "none"). Fast scores: x 990/10 + 0.4/0.1 = 103, o 9.
        # Fast-first merge: Fast 0 <= Fair 1000 -> x1 (40) -> x2 (80) -> o.
        p = quick(lookahead="none")
        c = FairwayCarry(per_token, slo_multiplier=0.0, slo_floor=0.1, fast_first=True)
        assert ids(p.order(self.queue(), 0.9)) == ids(c.order(self.queue(), 0.9)) == ["x1", "x2", "o"]

    def test_late_goes_first_by_deadline(self):
        p = quick(lookahead="none")
        p.order(self.queue(), 0.9)
        assert ids(p.order(self.queue(), 1.0)) == ["o", "x1", "x2"]  # o late (1.0 <= 1.0)
        assert p.urgent == {"o"}

    def test_deadline_is_fixed_at_first_sight(self):
        p = quick()
        p.order(self.queue(), 0.9)
        before = dict(p.deadline)
        big = make_queued("big", 0, 100_000, arrival=1.1)  # 100 s of work behind 1.02 s
        p.order(self.queue() + [big], 1.1)
        assert p.horizon_s == pytest.approx(101.02)
        assert {k: p.deadline[k] for k in before} == before  # earlier deadlines unchanged
        assert p.deadline["big"] == pytest.approx(1.1 + 1.25 * 1.02 + 100.0)
        # A later arrival gets at least the largest estimate so far, however short the queue.
        y = make_queued("y", 990, 10, arrival=2.0)
        p.order([y], 2.0)
        assert p.deadline == {"y": pytest.approx(2.0 + 101.02)}  # the others left: forgotten

    def test_patience_floor(self):
        p = FairwayDeadline(const_slo)  # T_idle = 1 s: SLO = max(1, 3 x 1) = 3 s > w = 1 s
        p.order(self.queue()[:1], 0.0)
        assert p.deadline["o"] == 3.0

    def test_own_horizon(self):
        p = quick(horizon="own")
        big = make_queued("big", 0, 100_000, arrival=0.5)
        p.order(self.queue()[:1] + [big], 1.0)
        y = make_queued("y", 990, 10, arrival=2.0)
        p.order([y], 2.0)
        assert p.deadline["y"] == pytest.approx(2.0 + 0.1)  # its own queue only: w 0.01 < SLO

    def test_now_horizon_extends_waiting_deadlines(self):
        """``horizon="now"`` (ablation): ``D_t = a + max(SLO, 1.25 W + w, H_t)`` with the current ``H``."""
        p = quick(horizon="now")
        assert ids(p.order(self.queue(), 0.9)) == ["o", "x1", "x2"]
        assert p.urgent == {"o", "x1", "x2"}  # o: 0.9 + 1.0 >= 1.02; x1: 0.9 + 1.01 >= 1.76; x2 too
        assert p.horizon_s == pytest.approx(1.02)  # this step's first sights included
        assert p.deadline["o"] == pytest.approx(1.02)  # H_t = 1.02 > its own 1.0
        assert p.deadline["x1"] == pytest.approx(0.5 + 1.25 * 1.0 + 0.01)  # own estimate > H_t
        big = make_queued("big", 0, 100_000, arrival=1.1)
        out = p.order(self.queue() + [big], 1.1)
        assert p.horizon_s == pytest.approx(101.02)
        assert p.deadline["o"] == pytest.approx(101.02)  # extended with the backlog ...
        assert p.deadline["x1"] == pytest.approx(0.5 + 101.02)
        assert p.deadline["big"] == pytest.approx(1.1 + 1.25 * 1.02 + 100.0)
        # ... but a due request stays due (none is due at 1.1 s against its new deadline).
        assert p.urgent == {"o", "x1", "x2"} and ids(out) == ["o", "x1", "x2", "big"]
        # With the default (H fixed at first sight) nothing moves.
        q = quick()
        q.order(self.queue(), 0.9)
        q.order(self.queue() + [big], 1.1)
        assert q.deadline["o"] == pytest.approx(1.0)
        assert p.incremental_order() is None and q.incremental_order() is not None

    @pytest.mark.parametrize("lookahead", ["queue", "own"])
    def test_lookahead_urgency_persists(self, lookahead):
        p = quick(lookahead=lookahead)
        # At 0.6 s: o's estimated finish 0.6 + 1.0 >= D = 1.0: urgent, placed first.
        assert ids(p.order(self.queue(), 0.6)) == ["o", "x1", "x2"]
        assert "o" in p.urgent
        # Without lookahead it is not late yet (0.6 < 1.0): the merge.
        assert ids(quick(lookahead="none").order(self.queue(), 0.6)) == ["x1", "x2", "o"]
        # Once urgent, it stays first even if its work (hence the estimate) shrinks.
        small_o = make_queued("o", 990, 10, arrival=0.0, prompt_len=1000)
        assert ids(p.order([small_o] + self.queue()[1:], 0.61))[0] == "o"

    def test_queue_lookahead_counts_the_work_before(self):
        # o2 (D = 1.0 + 1.25 x 1.0 + 1.0 = 3.25) is urgent at 1.3 s only because o's 1.0 s of work
        # comes first in deadline order: 1.3 + 1.0 + 1.0 >= 3.25; its own work alone is not enough.
        w = [make_queued("o", 0, 1000, arrival=0.0), make_queued("o2", 0, 1000, arrival=1.0)]
        p, q = quick(lookahead="queue"), quick(lookahead="own")
        p.order(w, 1.0)
        q.order(w, 1.0)
        assert p.deadline["o2"] == q.deadline["o2"] == pytest.approx(3.25)
        p.order(w, 1.3)
        q.order(w, 1.3)
        assert p.urgent == {"o", "o2"} and q.urgent == {"o"}

    def test_registry_and_errors(self):
        p = make_policy("fairway-deadline", PROFILE)
        assert isinstance(p, FairwayDeadline) and p.name == "fairway-deadline"
        assert p.fast_first and p.lookahead == "queue" and p.horizon == "max" and p.slack == 1.25
        assert {"horizon", "slack", "lookahead", "fast_first", "fast_weight"} <= set(accepted_params("fairway-deadline"))
        assert make_policy("fairway-deadline", PROFILE, fast_weight=8.0).slack == 1.125
        for bad in ({"horizon": "min"}, {"fast_first": "yes"}, {"lookahead": True}, {"slack": 0.5},
                    {"slack": math.inf}, {"slack": True}):
            with pytest.raises(ValueError, match="Fairway-deadline"):
                make_policy("fairway-deadline", PROFILE, **bad)


@st.composite
def queues(draw):
    n = draw(st.integers(1, 12))
    now = draw(st.floats(0.0, 100.0))
    w = [make_queued(f"r{i}", draw(st.integers(0, 4000)), draw(st.integers(1, 9000)),
                     arrival=now - draw(st.floats(0.0, 50.0))) for i in range(n)]
    return w, now


@pytest.mark.parametrize("lookahead", ["none", "own", "queue"])
@settings(max_examples=200, deadline=None)
@given(q=queues())
def test_order_is_the_deadline_prefix_then_the_merge(lookahead, q):
    """Any queue: the requests in deadline order up to the last due one (late: ``now >= D``; own:
    ``now + w >= D``; queue: ``now +`` the work up to it in deadline order ``>= D``), then the
    others as fairway-plus merges them."""
    w, now = q
    p = FairwayDeadline(const_slo, lookahead=lookahead)
    p.order(w, max(r.arrival_time for r in w))  # first sight at the last arrival: deadlines set then
    p.urgent = set()
    out = p.order(w, now)
    assert sorted(ids(out)) == sorted(ids(w))
    edf = sorted(w, key=lambda r: (p.deadline[r.request_id], r.arrival_time, r.request_id))
    cut, finish = 0, now
    for k, r in enumerate(edf):
        finish += p.work(r)
        due = {"none": now, "own": now + p.work(r), "queue": finish}[lookahead] >= p.deadline[r.request_id]
        cut = k + 1 if due else cut
    assert ids(out[:cut]) == ids(edf[:cut])
    assert ids(out[cut:]) == ids(FairwayCarry(const_slo, fast_first=True).order(edf[cut:], now))


# -- the cross-step bound over engine runs ------------------------------------------------------

def own_state(policy):
    return lambda waiting, now: (dict(policy.deadline), set(policy.urgent))


def shadow_state(**params):
    """Deadlines a ``fairway-deadline`` would set from the same snapshots (its order unused)."""
    shadow = make_policy("fairway-deadline", PROFILE, **params)

    def observe(waiting, now):
        shadow.order(waiting, now)
        return dict(shadow.deadline), set(shadow.urgent)

    return observe


def deadline_excess(steps, states) -> list[tuple[str, float]]:
    """Requests overtaken, once due, by a request with a later deadline.

    From the first step at which ``r`` is in the recorded urgent (due) set until its admission,
    every request the engine admits ahead of ``r`` must have a smaller ``(D, arrival, id)``.
    Returns ``(request_id, uncached work of the others admitted ahead)`` per violation.
    """
    watch: dict[str, tuple[tuple, float]] = {}  # r -> (its key, intruding work)
    bad = []
    for (now, waiting, admitted), (deadline, urgent) in zip(steps, states):
        snaps = {r.request_id: r for r in waiting}
        key = lambda r: (deadline[r.request_id], r.arrival_time, r.request_id)  # noqa: E731
        for rid in urgent:
            if rid not in watch and rid in snaps:
                watch[rid] = (key(snaps[rid]), 0.0)
        for a in admitted:
            for rid in list(watch):
                k, extra = watch[rid]
                if rid == a:
                    del watch[rid]
                    if extra > 0:
                        bad.append((rid, extra))
                elif a in snaps and key(snaps[a]) > k:  # resumed preempted: not the order's
                    watch[rid] = (k, extra + snaps[a].uncached_len)
    return bad


TRACES = st.one_of(long_miss_traces(), overload_traces())


@pytest.mark.parametrize("lookahead", ["none", "own", "queue"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=TRACES)
def test_bound_after_deadline_holds(lookahead, trace):
    p = make_policy("fairway-deadline", PROFILE, lookahead=lookahead)
    rec = run_recorded(p, trace, own_state(p))
    assert rec.steps, "the policy was never asked"
    assert deadline_excess(rec.steps, rec.states) == []


class Recomputed(FairwayDeadline):
    """The persistence removed: every step, every deadline is set again from the current ``H``."""

    def order(self, waiting, now):
        self.deadline_ns, self.work_ns, self.urgent = {}, {}, set()
        return super().order(waiting, now)


def _find(make):
    """The first generated trace whose run under ``make()`` breaks the bound (no shrinking)."""
    def breaks(t):
        p = make()
        rec = run_recorded(p, t, shadow_state())
        return bool([b for b in deadline_excess(rec.steps, rec.states) if b[1] > BUDGET])

    return find(overload_traces(), breaks,
                settings=settings(max_examples=300, derandomize=True, database=None, deadline=None,
                                  phases=[Phase.generate], suppress_health_check=list(HealthCheck)))


@pytest.mark.parametrize("make", [lambda: make_policy("fairway", PROFILE),
                                  lambda: Recomputed(PROFILE.idle_prefill_time)],
                         ids=["fairway", "recomputed-deadline"])
def test_bound_fails_without_persistence(make):
    trace = _find(make)
    rec = run_recorded(make(), trace, shadow_state())
    bad = deadline_excess(rec.steps, rec.states)
    assert bad and max(extra for _, extra in bad) > BUDGET  # beyond even the live hook's slack
    # ... and fairway-deadline keeps the bound on that very trace.
    p = make_policy("fairway-deadline", PROFILE)
    rec = run_recorded(p, trace, own_state(p))
    assert deadline_excess(rec.steps, rec.states) == []


def test_checker_sees_a_hand_made_violation():
    o = make_queued("o", 0, 4000, arrival=0.0)
    a = make_queued("a", 900, 3000, arrival=1.0)
    b = make_queued("b", 900, 3000, arrival=1.0)
    d = {"o": 5.0, "a": 9.0, "b": 9.0}
    steps = [(5.0, [o, a, b], ["a"]), (6.0, [o, b], ["b", "o"])]
    assert deadline_excess(steps, [(d, {"o"}), (d, {"o"})]) == [("o", 6000.0)]
    assert deadline_excess(steps, [(d, set()), (d, {"o"})]) == [("o", 3000.0)]  # due from step 2
    d2 = {"o": 5.0, "a": 4.0, "b": 4.5}  # earlier deadlines: allowed ahead
    assert deadline_excess(steps, [(d2, {"o"}), (d2, {"o"})]) == []
