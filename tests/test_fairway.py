"""Fairway: the worked example of POLICIES.md and lane-level properties."""

from fairsim.policies import Fairway, make_policy
from tests.utils import make_queued


def idle(L: int) -> float:
    return 0.0  # SLO = slo_floor = 1 s for every request


class TestWorkedExample:
    """POLICIES.md: H1..H5 (h=6000, c=300, just arrived) and M (oldest, h=0, c=6000)."""

    def test_order_and_quarter_work(self):
        now = 10.0
        hs = [make_queued(f"H{i}", 6000, 300, arrival=now) for i in range(1, 6)]
        m = make_queued("M", 0, 6000, arrival=now - 1e-9)  # oldest, waited ~0
        order = Fairway(idle).order([m] + hs, now)
        # Fast starts at 4*300 = 1200, Fair at 1*6000: Fast places H1..H4 (ledger 2400..6000),
        # H5 on the 6000 tie, then Fair places M.
        assert [r.request_id for r in order] == ["H1", "H2", "H3", "H4", "H5", "M"]
        ahead = sum(r.uncached_len for r in order[:5])
        assert ahead == 1500 == 6000 // 4

    def test_no_fair_lane_puts_miss_last_forever(self):
        now = 0.0
        reqs = [make_queued("M", 0, 6000, arrival=0.0)] + [
            make_queued(f"H{i}", 6000, 300, arrival=0.0) for i in range(20)]
        order = Fairway(idle, fair_lane=False).order(reqs, now)
        assert order[-1].request_id == "M"


class TestFastLane:
    """The Fast-lane score h/c + wait/SLO."""

    def test_score_value(self):
        f = Fairway(lambda L: 2.0)  # SLO = max(1, 3*2) = 6 s
        r = make_queued("a", 600, 200, arrival=0.0)
        assert f.fast_score(r, now=3.0) == 600 / 200 + 3.0 / 6.0

    def test_slo_uses_full_prompt_length(self):
        seen = []
        f = Fairway(lambda L: seen.append(L) or 0.5)
        r = make_queued("a", 900, 100, arrival=0.0, prompt_len=1000)
        f.fast_score(r, 1.0)
        assert seen == [1000]
        assert f.slo(1000) == 1.5

    def test_absolute_wait_mode(self):
        f = make_policy("fairway-abswait", type("P", (), {"idle_prefill_time": staticmethod(lambda L: 100.0)})())
        assert f.slo(5000) == 1.0


# -- properties ------------------------------------------------------------------------------
from hypothesis import example, given, strategies as st  # noqa: E402

from fairsim.types import QueuedRequest  # noqa: E402


@st.composite
def queues(draw):
    """A waiting queue of 1-30 requests with arbitrary hits, work and waits (seconds)."""
    n = draw(st.integers(1, 30))
    out = []
    for i in range(n):
        h = draw(st.integers(0, 20_000))
        c = draw(st.integers(1, 20_000))
        arrival = draw(st.floats(0.0, 100.0, allow_nan=False))
        out.append(QueuedRequest(f"r{i}", arrival, h + c, h, c, 0, None))
    return out


weights = st.floats(0.01, 100.0, allow_nan=False, allow_infinity=False)


class TestQuarterWorkBound:
    """Work placed ahead of the oldest request <= fair/fast x its work + one overshoot."""

    @given(queue=queues(), fast_w=weights, fair_w=weights, now=st.floats(100.0, 200.0))
    @example(  # the POLICIES.md worked example: 1,500 tokens ahead of M, exactly a quarter
        queue=[QueuedRequest("M", 0.0, 6000, 0, 6000, 0, None)]
        + [QueuedRequest(f"H{i}", 100.0, 6300, 6000, 300, 0, None) for i in range(5)],
        fast_w=4.0, fair_w=1.0, now=100.0)
    def test_bound(self, queue, fast_w, fair_w, now):
        policy = Fairway(lambda L: L / 5000.0, fast_weight=fast_w, fair_weight=fair_w)
        order = policy.order(queue, now)
        assert sorted(map(id, order)) == sorted(map(id, queue))  # a permutation
        oldest = min(queue, key=lambda r: (r.arrival_time, r.request_id))
        ahead = order[: next(i for i, r in enumerate(order) if r is oldest)]
        if ahead:
            bound = fair_w / fast_w * oldest.uncached_len + max(r.uncached_len for r in ahead)
            assert sum(r.uncached_len for r in ahead) <= bound + 1e-6 * bound
