"""Fairway-deadline's ablation options: ``estimate="dedup"``, ``horizon="now-slack"``,
``horizon="growth"``, ``patience="deadline"`` (docs/POLICIES-more.md "Ablation options";
experiments/README.md "Beyond the paper").

Hand-computed deadlines for each option, and, over engine runs, the order property the extending
horizons keep: deadlines of a waiting request never move earlier, a due request stays due, and
from the first step at which a request is due until its admission the engine admits ahead of it
only requests with a smaller *current* ``(D_t, arrival, request_id)``.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from fairsim.policies import FairwayDeadline, make_policy
from fairsim.types import QueuedRequest
from tests.engine_bound import PROFILE, ids, long_miss_traces, overload_traces, run_recorded
from tests.utils import make_queued


def per_token(L: int) -> float:
    return L / 1000.0  # T_idle(L) = 1 ms per token, so work(q) = c / 1000 s


def quick(**params) -> FairwayDeadline:
    """work(q) = c / 1000 s; SLO = 0.1 s (floor 0.1, multiplier 0)."""
    return FairwayDeadline(per_token, slo_multiplier=0.0, slo_floor=0.1, **params)


def keyed(rid: str, keys: tuple, h: int, arrival: float, block: int = 250) -> QueuedRequest:
    """A snapshot with ``block_keys`` (``len(keys) x block`` tokens, ``h`` of them cached)."""
    L = len(keys) * block
    return QueuedRequest(rid, arrival, L, h, max(1, L - h), 0, None, keys, block)


class TestDedupEstimate:
    """a and b share their first two 250-token blocks; neither is cached; c has no block keys."""

    def queue(self):
        return [keyed("a", ("k1", "k2", "k3", "k4"), 0, 0.0),
                keyed("b", ("k1", "k2", "y3", "y4"), 0, 0.1),
                make_queued("c", 0, 500, arrival=0.2)]

    def test_shared_uncached_prefix_is_charged_once(self):
        p = quick(estimate="dedup")
        # b's two leading blocks are charged to a (ahead of it): 1000 - 2 x 250 = 500 tokens.
        assert p.fcfs_works(self.queue()) == pytest.approx([1.0, 0.5, 0.5])
        assert quick().fcfs_works(self.queue()) == pytest.approx([1.0, 1.0, 0.5])  # cold
        p.order(self.queue(), 0.3)
        assert p.deadline["a"] == pytest.approx(0.0 + 1.0)
        assert p.deadline["b"] == pytest.approx(0.1 + 1.25 * 1.0 + 0.5)  # cold: 0.1 + 1.25 + 1.0
        assert p.deadline["c"] == pytest.approx(0.2 + 1.25 * 1.5 + 0.5)
        assert p.horizon_s == pytest.approx(2.0)  # E_c = 1.5 + 0.5

    def test_only_leading_uncached_blocks_count(self):
        p = quick(estimate="dedup")
        a = keyed("a", ("k1", "k2", "k3", "k4"), 0, 0.0)
        # b's first block differs: no prefix in common, so nothing is deduplicated.
        b = keyed("b", ("z1", "k2", "k3", "k4"), 0, 0.1)
        assert p.fcfs_works([a, b]) == pytest.approx([1.0, 1.0])
        # b's two shared blocks are already cached: its uncached part (y3, y4) is new.
        b = keyed("b", ("k1", "k2", "y3", "y4"), 500, 0.1)
        assert p.fcfs_works([a, b]) == pytest.approx([1.0, 0.5])
        # ... and a's uncached blocks k3, k4 do count for a third request sharing them.
        c = keyed("c", ("k1", "k2", "k3", "k4"), 500, 0.2)
        assert p.fcfs_works([a, b, c]) == pytest.approx([1.0, 0.5, 0.001])  # max(1, 500 - 500) tokens


class TestExtendingHorizons:
    """o: miss L = c = 1000, arrival 0 (work 1.0 s); x1, x2: L = 1000, h = 990, c = 10, arrival 0.5."""

    def queue(self):
        return [make_queued("o", 0, 1000, arrival=0.0), make_queued("x1", 990, 10, arrival=0.5),
                make_queued("x2", 990, 10, arrival=0.5)]

    big = make_queued("big", 0, 100_000, arrival=1.1)  # work 100 s

    def test_now_slack(self):
        """``D_t = a + max(SLO, 1.25 W + w, 1.25 H_t)``."""
        p = quick(horizon="now-slack")
        assert ids(p.order(self.queue(), 0.9)) == ["o", "x1", "x2"]
        assert p.horizon_s == pytest.approx(1.02)
        assert p.deadline["o"] == pytest.approx(1.25 * 1.02)  # > its own 1.0
        assert p.deadline["x1"] == pytest.approx(0.5 + 1.25 * 1.02)  # > its own 1.25 x 1.0 + 0.01
        assert p.deadline["x2"] == pytest.approx(0.5 + 1.25 * 1.02)  # = its own 1.25 x 1.01 + 0.01 + ...
        # 0.9 + 1.0 >= 1.275, 1.91 >= 1.775, 1.92 >= 1.775: all due.
        assert p.urgent == {"o", "x1", "x2"}
        out = p.order(self.queue() + [self.big], 1.1)
        assert p.horizon_s == pytest.approx(101.02)
        assert p.deadline["o"] == pytest.approx(1.25 * 101.02)
        assert p.deadline["big"] == pytest.approx(1.1 + 1.25 * 101.02)  # > own 1.25 x 1.02 + 100
        assert p.urgent == {"o", "x1", "x2"} and ids(out) == ["o", "x1", "x2", "big"]
        assert p.incremental_order() is None

    def test_growth(self):
        """``D_t = a + max(SLO, E + 1.25 (H_t - E))``: no slack for the request that sets the record."""
        p = quick(horizon="growth")
        p.order(self.queue(), 0.9)
        assert p.deadline["o"] == pytest.approx(1.0 + 1.25 * 0.02)  # E 1.0, H 1.02
        assert p.deadline["x1"] == pytest.approx(0.5 + 1.01 + 1.25 * 0.01)
        assert p.deadline["x2"] == pytest.approx(0.5 + 1.02)  # the record: its FCFS estimate
        p.order(self.queue() + [self.big], 1.1)
        assert p.deadline["o"] == pytest.approx(1.0 + 1.25 * 100.02)
        assert p.deadline["big"] == pytest.approx(1.1 + 101.02)
        assert p.incremental_order() is None

    def test_deadline_patience(self):
        """``patience="deadline"``: Fast score ``h / c + wait / (D - arrival)`` instead of ``wait / SLO``."""
        p = quick(patience="deadline")
        q = [make_queued("o", 0, 1000, arrival=0.0), make_queued("x", 500, 500, arrival=0.0)]
        p._assign(q)
        assert p.deadline == pytest.approx({"o": 1.0, "x": 1.25 * 1.0 + 0.5})
        keys = p._fast_keys(q, 0.5)
        assert keys[0][0] == pytest.approx(-(0 / 1000 + 0.5 / 1.0))
        assert keys[1][0] == pytest.approx(-(500 / 500 + 0.5 / 1.75))
        # The paper's patience (SLO = 0.1 s here) for comparison.
        assert quick()._fast_keys(q, 0.5)[0][0] == pytest.approx(-(0.5 / 0.1))
        assert p.incremental_order() is None

    def test_errors_and_defaults(self):
        p = make_policy("fairway-deadline", PROFILE)
        assert p.estimate == "cold" and p.horizon == "max" and p.incremental_order() is not None
        assert make_policy("fairway-deadline", PROFILE, estimate="dedup").incremental_order() is None
        assert p.patience == "slo"
        for bad in ({"estimate": "warm"}, {"estimate": 1}, {"horizon": "slack"}, {"patience": "paper"}):
            with pytest.raises(ValueError, match="Fairway-deadline"):
                make_policy("fairway-deadline", PROFILE, **bad)


# -- the order property of the extending horizons, over engine runs ---------------------------------

def state(policy):
    return lambda waiting, now: (dict(policy.deadline), set(policy.urgent))


def violations(steps, states) -> list[tuple]:
    """Breaches of: deadlines of a request still waiting never move earlier; due stays due; from
    its first due step until its admission, only requests with a smaller current key ``(D_t,
    arrival, id)`` are admitted ahead of a due request (resumed preempted requests excluded)."""
    bad = []
    prev_deadline: dict[str, float] = {}
    prev_urgent: set[str] = set()
    for (now, waiting, admitted), (deadline, urgent) in zip(steps, states):
        snaps = {r.request_id: r for r in waiting}
        for rid in snaps:
            if rid in prev_deadline and deadline[rid] < prev_deadline[rid]:
                bad.append(("earlier", rid, now))
        if not (prev_urgent & set(snaps)) <= urgent:
            bad.append(("undue", sorted((prev_urgent & set(snaps)) - urgent), now))
        key = lambda rid: (deadline[rid], snaps[rid].arrival_time, rid)  # noqa: E731
        due = [rid for rid in urgent if rid in snaps]
        for i, a in enumerate(admitted):
            if a not in snaps:
                continue
            for rid in due:
                if rid != a and rid not in admitted[:i] and key(a) > key(rid):
                    bad.append(("overtaken", rid, a, now))
        left = set(admitted)
        prev_deadline = {k: deadline[k] for k in snaps if k not in left}
        prev_urgent = {k for k in urgent if k in snaps and k not in left}
    return bad


@pytest.mark.parametrize("params", [{"horizon": "now-slack", "estimate": "dedup"},
                                    {"horizon": "now-slack", "estimate": "dedup", "patience": "deadline"},
                                    {"horizon": "now-slack"}, {"horizon": "growth", "estimate": "dedup"}],
                         ids=["now-slack+dedup", "now-slack+dedup+patience", "now-slack", "growth+dedup"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=st.one_of(long_miss_traces(), overload_traces()))
def test_extending_horizons_keep_the_order_property(params, trace):
    p = make_policy("fairway-deadline", PROFILE, **params)
    rec = run_recorded(p, trace, state(p))
    assert rec.steps, "the policy was never asked"
    assert violations(rec.steps, rec.states) == []


def test_checker_sees_hand_made_breaches():
    o = make_queued("o", 0, 4000, arrival=0.0)
    a = make_queued("a", 900, 3000, arrival=1.0)
    steps = [(5.0, [o, a], []), (6.0, [o, a], ["a"])]
    d = {"o": 5.0, "a": 9.0}
    assert violations(steps, [(d, {"o"}), (d, {"o"})]) == [("overtaken", "o", "a", 6.0)]
    assert violations(steps, [(d, {"o"}), (d, set())]) == [("undue", ["o"], 6.0)]
    assert violations(steps, [(d, set()), ({"o": 4.0, "a": 9.0}, set())]) == [("earlier", "o", 6.0)]
    assert violations(steps, [(d, set()), ({"o": 9.5, "a": 9.0}, {"o"})]) == []  # a is earlier now
