"""Property tests of the orderings (hypothesis); each test states why the property must hold."""

from __future__ import annotations

from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from fairsim.policies import KLPM, LPM, Fairway, RAGCache, make_policy, policy_names
from fairsim.types import QueuedRequest
from tests.strategies import profiles, waiting_queues, weights
from tests.utils import make_queued


def ids(order):
    return [r.request_id for r in order]


def fcfs_ids(waiting):
    return ids(sorted(waiting, key=lambda r: (r.arrival_time, r.request_id)))


class TestPermutation:
    """Every registered policy returns a permutation of its input (POLICIES.md)."""

    @given(data=st.data(), queue=waiting_queues(max_size=20), profile=profiles())
    def test_every_policy(self, data, queue, profile):
        # Reason: the engine maps the order back onto its queue; a dropped or added request would
        # be lost or run twice.
        waiting, now = queue
        name, params = data.draw(st.sampled_from(
            [(n, {}) for n in policy_names()]
            + [("lpm", {"sglang_sort_limit": True, "sglang_dedup": True}), ("klpm", {"k": 3})]))
        policy = make_policy(name, profile, **params)
        for step in range(3):  # stateful policies (k-LPM, Preble, LPM switches) over steps
            order = policy.order(list(waiting), now + step)
            assert sorted(ids(order)) == sorted(ids(waiting)), name
            assert len(order) == len(waiting)
            admitted = order[: data.draw(st.integers(0, len(order)), label="admitted")]
            if hasattr(policy, "on_admitted"):
                policy.on_admitted(admitted, now + step)
            taken = {r.request_id for r in admitted}
            waiting = [r for r in waiting if r.request_id not in taken]


    @settings(max_examples=20)
    @given(data=st.data(), queue=waiting_queues(min_size=120, max_size=140))
    def test_lpm_sort_limit_large_queues(self, data, queue):
        # Reason: above 128 waiting LPM keeps the previous order; requests admitted in between
        # or arriving new must neither vanish nor repeat.
        waiting, now = queue
        lpm = LPM(sglang_sort_limit=True, sglang_dedup=True)
        for step in range(3):
            order = lpm.order(list(waiting), now + step)
            assert sorted(ids(order)) == sorted(ids(waiting))
            cut = data.draw(st.integers(0, 10), label="admitted")
            waiting = [r for r in waiting if r.request_id not in set(ids(order[:cut]))]


class TestFairwayBounds:
    """The quarter-work bound and the limits of the Fairway merge."""

    @given(queue=waiting_queues(max_size=25), fast_w=weights, fair_w=weights,
           slo_mult=st.floats(0.0, 10.0), slo_floor=st.floats(0.01, 10.0))
    @example(  # the worked example of POLICIES.md, at its 1,500-token boundary
        queue=([make_queued("M", 0, 6000, arrival=0.0)]
               + [make_queued(f"H{i}", 6000, 300, arrival=1e-9) for i in range(1, 6)], 1e-9),
        fast_w=4.0, fair_w=1.0, slo_mult=3.0, slo_floor=1.0)
    def test_quarter_work_bound(self, queue, fast_w, fair_w, slo_mult, slo_floor):
        # Reason: before the oldest request o is placed only the Fast lane places, and it may do
        # so only while fast_w * (its front's c + work placed) <= fair_w * c(o); the last placed
        # request overshoots by at most one request's work.
        waiting, now = queue
        policy = Fairway(lambda L: L / 5000.0, fast_weight=fast_w, fair_weight=fair_w,
                         slo_multiplier=slo_mult, slo_floor=slo_floor)
        order = policy.order(waiting, now)
        oldest = min(waiting, key=lambda r: (r.arrival_time, r.request_id))
        ahead = order[: ids(order).index(oldest.request_id)]
        assume(ahead)  # the bound says nothing when o goes first
        work = sum(r.uncached_len for r in ahead)
        bound = fair_w / fast_w * oldest.uncached_len + max(r.uncached_len for r in ahead)
        assert work <= bound * (1 + 1e-9), (work, bound)

    @given(queue=waiting_queues(max_size=25), fair_w=weights)
    def test_huge_fast_weight_is_fcfs(self, queue, fair_w):
        # Reason: the Fast ledger starts at fast_weight * c >= 1e15, above anything the Fair lane
        # can accumulate here (fair_w * sum(c) <= 100 * 26 * 20,000), so Fair places everything.
        waiting, now = queue
        order = Fairway(lambda L: 0.1, fast_weight=1e15, fair_weight=fair_w).order(waiting, now)
        assert ids(order) == fcfs_ids(waiting)

    @given(queue=waiting_queues(max_size=25, zero_wait=True), slo_floor=st.floats(0.01, 10.0))
    def test_no_fair_lane_zero_wait_is_ragcache(self, queue, slo_floor):
        # Reason: with wait = 0 the Fast score is h / c, RAGCache's key, with the same tie-breaks.
        waiting, now = queue
        fast_only = Fairway(lambda L: 1.0, fair_lane=False, slo_floor=slo_floor)
        assert ids(fast_only.order(waiting, now)) == ids(RAGCache().order(waiting, now))

    @given(h=st.integers(0, 10_000), c1=st.integers(1, 10_000), c2=st.integers(1, 10_000))
    def test_equal_cache_less_work_first(self, h, c1, c2):
        # Reason: h / c decreases in c, so at equal h and wait the smaller remaining work leads.
        assume(c1 != c2 and h > 0)
        a, b = make_queued("a", h, c1), make_queued("b", h, c2)
        first = Fairway(lambda L: 0.0, fair_lane=False).order([a, b], 0.0)[0]
        assert first.uncached_len == min(c1, c2)

    @given(h=st.integers(1, 10_000), c=st.integers(1, 10_000), wait=st.floats(0.01, 100.0),
           idle_a=st.floats(0.5, 50.0), idle_b=st.floats(0.5, 50.0))
    def test_equal_ratio_shorter_patience_first(self, h, c, wait, idle_a, idle_b):
        # Reason: at equal h / c and equal wait, wait / SLO is larger for the smaller SLO.
        assume(abs(idle_a - idle_b) > 0.01)
        a = make_queued("a", h, c, arrival=0.0, prompt_len=h + c)
        b = make_queued("b", h, c, arrival=0.0, prompt_len=h + c + 1)
        idle = {h + c: idle_a, h + c + 1: idle_b}  # SLO = 3 x T_idle (> the 1 s floor)
        first = Fairway(idle.__getitem__, fair_lane=False).order([a, b], wait)[0]
        assert first.request_id == ("a" if idle_a < idle_b else "b")


class TestFairwayMergeModel:
    """The merge against a literal transcription of POLICIES.md's three steps."""

    @staticmethod
    def reference(policy, waiting, now):
        fast = policy.fast_lane(waiting, now)
        fair = sorted(waiting, key=lambda r: (r.arrival_time, r.request_id))
        ledger = {"fast": policy.fast_weight * fast[0].uncached_len,
                  "fair": policy.fair_weight * fair[0].uncached_len}
        weight = {"fast": policy.fast_weight, "fair": policy.fair_weight}
        lanes = {"fast": fast, "fair": fair}
        placed: list = []
        while len(placed) < len(waiting):
            lane = "fast" if ledger["fast"] <= ledger["fair"] else "fair"
            r = next(q for q in lanes[lane] if all(q is not p for p in placed))
            placed.append(r)
            ledger[lane] += weight[lane] * r.uncached_len
        return placed

    @given(queue=waiting_queues(max_size=15), fast_w=weights, fair_w=weights)
    def test_merge_matches_spec(self, queue, fast_w, fair_w):
        # Reason: the optimised merge must place exactly what the specification's ledgers place,
        # request by request (this pins every weight and the tie rule, not only the bound).
        waiting, now = queue
        policy = Fairway(lambda L: L / 5000.0, fast_weight=fast_w, fair_weight=fair_w)
        assert ids(policy.order(waiting, now)) == ids(self.reference(policy, waiting, now))


class TestKLPM:
    """k-LPM's interleaving."""

    @given(queue=waiting_queues(max_size=20), turns=st.lists(st.integers(0, 5), max_size=4))
    def test_k1_is_fcfs(self, queue, turns):
        # Reason: with k = 1 every pick satisfies (t + i) % 1 == 0, so every pick is the oldest.
        waiting, now = queue
        policy = KLPM(k=1)
        for t in turns:  # any turn-counter state
            policy.on_admitted([None] * t, now)
        assert ids(policy.order(waiting, now)) == fcfs_ids(waiting)

    @given(queue=waiting_queues(max_size=20), k=st.integers(2, 9), t=st.integers(0, 20))
    def test_oldest_every_kth_pick(self, queue, k, t):
        # Reason: pick i is the oldest remaining exactly when (t + i) % k == 0 (POLICIES.md).
        waiting, now = queue
        policy = KLPM(k=k)
        policy.on_admitted([None] * t, now)
        order = policy.order(waiting, now)
        remaining = list(waiting)
        for i, r in enumerate(order):
            oldest = min(remaining, key=lambda q: (q.arrival_time, q.request_id))
            longest = min(remaining, key=lambda q: (-q.cached_len, q.arrival_time, q.request_id))
            assert r is (oldest if (t + i) % k == 0 else longest)
            remaining.remove(r)


def test_ragcache_ratio_order():
    """Descending h / c; equal ratios by arrival (hand-checked)."""
    a = QueuedRequest("a", 0.0, 300, 100, 200, 0, None)   # 0.5
    b = QueuedRequest("b", 1.0, 40, 30, 10, 0, None)      # 3.0
    c = QueuedRequest("c", 0.5, 60, 20, 40, 0, None)      # 0.5, arrived after a
    assert ids(RAGCache().order([c, a, b], 2.0)) == ["b", "a", "c"]
