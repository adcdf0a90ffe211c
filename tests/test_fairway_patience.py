"""Fairway-patience: the paper's order until the oldest request is past its patience, then the carry.

The bound (docs/POLICIES-more.md "Fairway-patience"): the uncached work admitted ahead of a request
``o`` from the first step at which it is the oldest waiting request *and* ``wait > SLO(o)`` until
its admission is at most ``fair_weight / fast_weight x max_t c_t(o) + max c(A) + budget``. The
property reuses the engine-run harness of tests/test_fairway_carry.py; it fails for the paper's
``fairway`` (no persistence) and holds for ``fairway-patience``.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, Phase, find, given, settings, strategies as st

from fairsim.policies import Fairway, FairwayCarry, FairwayPatience, make_policy
from fairsim.policies.base import arrival_key
from tests.engine_bound import (BUDGET, PROFILE, bound_excess, const_slo, ids, long_miss_traces,
                                overload_traces, run_recorded)
from tests.utils import make_queued


class TestArming:
    """o: oldest miss, c = 1000, arrival 0, SLO = max(1, 3 x 1) = 3 s; hits c = 100, h = 900."""

    def queue(self, n_hits: int = 2):
        o = make_queued("o", 0, 1000, arrival=0.0)
        return [o] + [make_queued(f"x{i}", 900, 100, arrival=1.0 + i) for i in range(1, n_hits + 1)]

    def test_before_patience_no_debt_accrues(self):
        p = FairwayPatience(const_slo)
        x0 = make_queued("x0", 900, 150, arrival=0.5)
        assert ids(p.order(self.queue(2) + [x0], 2.0)) == ids(Fairway(const_slo).order(self.queue(2) + [x0], 2.0))
        assert p.oldest == "o" and not p.armed
        p.on_admitted([x0], 2.0)
        assert p.debt == 0  # wait 2 s <= SLO 3 s: the paper's per-step protection only
        # Still not armed at 3.0 (wait == SLO, not past it): the paper's order, x1, x2, o.
        assert ids(p.order(self.queue(2), 3.0)) == ["x1", "x2", "o"]
        assert not p.armed and p.debt == 0

    def test_past_patience_debt_moves_the_oldest_forward(self):
        p = FairwayPatience(const_slo)
        x0 = make_queued("x0", 900, 150, arrival=0.5)
        p.order(self.queue(2) + [x0], 3.5)  # wait 3.5 s > 3 s: armed
        assert p.armed
        p.on_admitted([x0], 3.5)
        assert p.debt == 150
        # Fast 400 + 4*150 = 1000 <= 1000: x1 (1400) > 1000: o, then the paper's merge: x2.
        assert ids(p.order(self.queue(2), 4.0)) == ["x1", "o", "x2"]
        p.on_admitted([make_queued("o", 999, 1, arrival=0.0)], 4.0)
        assert p.oldest is None and p.debt == 0

    def test_debt_counts_from_the_patience_not_from_becoming_oldest(self):
        p = FairwayPatience(const_slo)
        w = self.queue(3)
        p.order(w, 1.0)
        p.on_admitted([w[1]], 1.0)  # before patience: not charged
        p.order(w[:1] + w[2:], 3.25)
        p.on_admitted([w[2]], 3.25)  # after: charged
        assert p.armed and p.debt == 100

    def test_registry(self):
        p = make_policy("fairway-patience", PROFILE)
        assert isinstance(p, FairwayPatience) and p.name == "fairway-patience"
        assert not p.fast_first and p.wait_cap is None and p.fast_weight == 4 and p.fair_weight == 1
        with pytest.raises(ValueError, match="Fair lane"):
            make_policy("fairway-patience", PROFILE, fair_lane=False)


@st.composite
def young_queues(draw):
    """A waiting queue whose oldest request is within its patience at ``now`` (SLO 3 s)."""
    n = draw(st.integers(1, 12))
    now = draw(st.floats(0.0, 100.0))
    oldest_arrival = now - draw(st.floats(0.0, 3.0))
    w = [make_queued(f"r{i}", draw(st.integers(0, 4000)), draw(st.integers(1, 9000)),
                     arrival=oldest_arrival + draw(st.floats(0.0, 3.0))) for i in range(n)]
    return w, now


@settings(max_examples=200, deadline=None)
@given(q=young_queues(), debt=st.floats(0, 1e5))
def test_within_patience_it_is_the_paper(q, debt):
    """Whatever debt was left, while the oldest is within its patience the order is ``fairway``'s."""
    w, now = q
    p = FairwayPatience(const_slo)
    p.oldest, p.debt = min(w, key=arrival_key).request_id, debt
    assert ids(p.order(w, now)) == ids(Fairway(const_slo).order(w, now))
    assert p.debt == 0


@settings(max_examples=200, deadline=None)
@given(q=young_queues(), late=st.floats(0.001, 50.0), debt=st.floats(0, 1e5))
def test_past_patience_it_is_the_carry(q, late, debt):
    """Once the oldest is past its patience the order is ``fairway-carry``'s with the same debt."""
    w, now = q
    o = min(w, key=arrival_key)
    now = o.arrival_time + 3.0 + late  # SLO = 3 s
    p, c = FairwayPatience(const_slo), FairwayCarry(const_slo)
    p.oldest = c.oldest = o.request_id
    p.debt = c.debt = debt
    assert ids(p.order(w, now)) == ids(c.order(w, now))
    assert p.armed and p.debt == debt


# -- the cross-step bound from the patience on, over engine runs ------------------------------

SLO = make_policy("fairway", PROFILE).slo


def bound_excess_after_patience(steps, ratio: float, budget: int = BUDGET) -> list[tuple[str, float, float]]:
    """``bound_excess`` counted from the first step at which the oldest request ``o`` is past its
    patience (``now - arrival > SLO``): ``(request_id, work_ahead, bound)`` per violation."""
    return bound_excess(steps, ratio, budget, armed=lambda now, o: now - o.arrival_time > SLO(o.prompt_len))


TRACES = st.one_of(long_miss_traces(), overload_traces())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=TRACES)
def test_bound_from_patience_holds(trace):
    rec = run_recorded("fairway-patience", trace)
    assert rec.steps, "the policy was never asked"
    assert bound_excess_after_patience(rec.steps, 1 / 4) == []


def test_bound_from_patience_fails_without_persistence():
    """The paper's ``fairway`` (the same order with the persistence removed) breaks the bound."""
    trace = find(overload_traces(),
                 lambda t: bool(bound_excess_after_patience(run_recorded("fairway", t).steps, 1 / 4)),
                 settings=settings(max_examples=500, derandomize=True, database=None, deadline=None,
                                   phases=[Phase.generate], suppress_health_check=list(HealthCheck)))
    bad = bound_excess_after_patience(run_recorded("fairway", trace).steps, 1 / 4)
    assert bad and all(ahead > bound for _, ahead, bound in bad)
    assert any(rid.startswith("m") for rid, _, _ in bad)  # a long miss, overtaken past its patience
    assert bound_excess_after_patience(run_recorded("fairway-patience", trace).steps, 1 / 4) == []


def test_checker_sees_a_violation_only_after_patience():
    """o (SLO = 3 x T_idle(4000) > 1 s) overtaken by 6,000 tokens: counted only past its patience."""
    o = make_queued("o", 0, 4000, arrival=0.0)
    a = make_queued("a", 900, 3000, arrival=1.0)
    b = make_queued("b", 900, 3000, arrival=1.0)
    late = SLO(o.prompt_len) + 1.0
    steps = [(late, [o, a, b], ["a"]), (late + 1, [o, b], ["b"]), (late + 2, [o], ["o"])]
    assert bound_excess_after_patience(steps, 1 / 4, budget=100) == [("o", 6000.0, 4100.0)]
    early = [(0.0, [o, a, b], ["a"]), (late, [o, b], ["b"]), (late + 1, [o], ["o"])]
    assert bound_excess_after_patience(early, 1 / 4, budget=100) == []  # 3,000 <= 1000 + 3000 + 100
