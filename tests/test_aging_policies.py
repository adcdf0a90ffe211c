"""suf, lpm-aging and sjf-aging (fairsim/policies/aging.py) on hand-computed queues, their pass
count, their fast paths against order(), and a starvation bound in the simulator."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairsim.policies import make_policy
from fairsim.sim import EngineConfig, simulate
from fairsim.types import QueuedRequest
from tests.utils import admit, change_hits, constant_profile, make_queued, make_request

PROFILE = constant_profile(step_s=1.0)


def ids(order):
    return [q.request_id for q in order]


class TestShortestUncachedFirst:
    def test_fewest_uncached_first(self):
        a, b, c = make_queued("a", 0, 1000, 0.0), make_queued("b", 0, 100, 1.0), make_queued("c", 0, 5000, 2.0)
        assert ids(make_policy("suf").order([a, b, c], 9.0)) == ["b", "a", "c"]

    def test_a_cached_long_prompt_is_short(self):
        cached = make_queued("cached", 9950, 50, 1.0)  # L = 10,000, c = 50
        short = make_queued("short", 0, 200, 0.0)
        assert ids(make_policy("suf").order([short, cached], 9.0)) == ["cached", "short"]

    def test_ties_by_arrival_then_id(self):
        x, y, z = make_queued("y", 0, 64, 1.0), make_queued("x", 0, 64, 1.0), make_queued("z", 0, 64, 0.5)
        assert ids(make_policy("suf").order([x, y, z], 2.0)) == ["z", "x", "y"]

    def test_starved_request_goes_first_after_k_passes(self):
        # K = 2. Pass 1 admits b, pass 2 admits d: the long request a (first seen in pass 1) has
        # then waited 2 passes and goes ahead of the shorter e.
        suf = make_policy("suf", None, starvation_iterations=2)
        a, b = make_queued("a", 0, 5000, 0.0), make_queued("b", 0, 10, 1.0)
        assert ids(suf.order([a, b], 1.0)) == ["b", "a"]
        suf.on_admitted([b], 1.0)
        d = make_queued("d", 0, 10, 2.0)
        assert ids(suf.order([a, d], 2.0)) == ["d", "a"]  # a waited 1 pass < 2
        suf.on_admitted([d], 2.0)
        e = make_queued("e", 0, 10, 3.0)
        assert ids(suf.order([a, e], 3.0)) == ["a", "e"]  # a waited 2 passes

    def test_order_calls_and_idle_steps_do_not_age(self):
        # Only admitting steps (on_admitted) are passes: calling order() again ages nothing.
        suf = make_policy("suf", None, starvation_iterations=1)
        a, b = make_queued("a", 0, 5000, 0.0), make_queued("b", 0, 10, 1.0)
        for now in range(5):
            assert ids(suf.order([a, b], float(now))) == ["b", "a"]
        suf.on_admitted([make_queued("x", 0, 1, 0.0)], 5.0)
        assert ids(suf.order([a, b], 6.0)) == ["a", "b"]  # both starved, same first sight: by arrival

    def test_starved_most_passes_first(self):
        suf = make_policy("suf", None, starvation_iterations=1)
        old = make_queued("old", 0, 900, 5.0)  # first seen at pass 0, arrived later than young
        suf.order([old], 5.0)
        suf.on_admitted([make_queued("x", 0, 1, 0.0)], 5.0)
        young = make_queued("young", 0, 100, 1.0)
        suf.order([old, young], 6.0)
        suf.on_admitted([make_queued("y", 0, 1, 0.0)], 6.0)
        # old waited 2 passes, young 1: both starved, old first although young arrived first.
        assert ids(suf.order([young, old], 7.0)) == ["old", "young"]

    @pytest.mark.parametrize("k", [0, -1, 1.5, True, "3"])
    def test_bad_starvation_iterations(self, k):
        with pytest.raises(ValueError, match="starvation_iterations"):
            make_policy("suf", None, starvation_iterations=k)


class TestLPMAging:
    def test_zero_is_lpm(self):
        w = [make_queued("a", 0, 10, 0.0), make_queued("b", 512, 10, 1.0), make_queued("c", 512, 10, 0.5)]
        assert ids(make_policy("lpm-aging", None, aging_tokens_per_pass=0).order(w, 2.0)) == \
            ids(make_policy("lpm").order(w, 2.0)) == ["c", "b", "a"]

    def test_match_plus_n_times_passes(self):
        # N = 100: a (h = 0) gains 100 per pass; after 2 passes it ties d (h = 200, new) -> arrival.
        pol = make_policy("lpm-aging", None, aging_tokens_per_pass=100)
        a, b = make_queued("a", 0, 10, 0.0), make_queued("b", 300, 10, 1.0)
        assert ids(pol.order([a, b], 1.0)) == ["b", "a"]  # 300 > 0
        pol.on_admitted([b], 1.0)
        c = make_queued("c", 150, 10, 2.0)
        assert ids(pol.order([a, c], 2.0)) == ["c", "a"]  # 150 > 0 + 100
        pol.on_admitted([c], 2.0)
        d, e = make_queued("d", 200, 10, 3.0), make_queued("e", 201, 10, 3.5)
        assert ids(pol.order([d, a, e], 3.0)) == ["e", "a", "d"]  # 201 > 200 = 0 + 2 x 100 = 200 (a older)

    @pytest.mark.parametrize("n", [-1, float("inf"), float("nan"), False, "x", 1e6 + 1, 1e20])
    def test_bad_aging(self, n):
        with pytest.raises(ValueError, match="aging_tokens_per_pass"):
            make_policy("lpm-aging", None, aging_tokens_per_pass=n)

    def test_the_largest_rate_keeps_ties_by_hit(self):
        """At the bound (1e6 tokens per pass) two requests first seen in the same pass still go
        by their hits after a million passes (at 1e20 the hit rounded away: by arrival)."""
        pol = make_policy("lpm-aging", None, aging_tokens_per_pass=1e6)
        pol.waiting.passes = 10**6
        a, b = make_queued("a", 0, 2048, 1.0), make_queued("b", 512, 2048, 1.0)
        assert ids(pol.order([a, b], 2.0)) == ["b", "a"]


class TestSJFAging:
    def test_uncached_minus_aging_times_wait(self):
        # a = 50 tokens/s at now = 10: a 1000 - 50 x 10 = 500, b 600 - 50 x 1 = 550, c 520 - 0 = 520.
        w = [make_queued("b", 0, 600, 9.0), make_queued("a", 0, 1000, 0.0), make_queued("c", 0, 520, 10.0)]
        assert ids(make_policy("sjf-aging").order(w, 10.0)) == ["a", "c", "b"]
        assert ids(make_policy("sjf-aging", None, aging_tokens_per_s=0).order(w, 10.0)) == ["c", "b", "a"]

    def test_order_does_not_depend_on_now(self):
        w = [make_queued("b", 0, 600, 9.0), make_queued("a", 0, 1000, 0.0), make_queued("c", 0, 520, 10.0)]
        pol = make_policy("sjf-aging")
        assert ids(pol.order(w, 10.0)) == ids(pol.order(w, 1e6))

    @pytest.mark.parametrize("a", [-1, float("inf"), 1e6 + 1, 1e20])
    def test_bad_aging(self, a):
        with pytest.raises(ValueError, match="aging_tokens_per_s=.*from 0 to 1e\\+06"):
            make_policy("sjf-aging", None, aging_tokens_per_s=a)

    def test_the_largest_rate_keeps_ties_by_length(self):
        """At the bound (1e6 tokens/s) two requests that arrived together near fairsim's 1e9 s
        limit still go shortest first (at 1e20 the lengths rounded away: by id)."""
        w = [make_queued("a1", 0, 2048, 9e8), make_queued("b1", 0, 512, 9e8)]
        assert ids(make_policy("sjf-aging", None, aging_tokens_per_s=1e6).order(w, 9e8 + 1)) == ["b1", "a1"]

    def test_tie_by_arrival(self):
        # 100 + 50 x 2 = 200 = 150 + 50 x 1: equal aged lengths -> the earlier arrival.
        w = [make_queued("late", 0, 100, 2.0), make_queued("early", 0, 150, 1.0)]
        assert ids(make_policy("sjf-aging").order(w, 3.0)) == ["early", "late"]


def _snap(rid: str, t: float, L: int, h: int) -> QueuedRequest:
    return QueuedRequest(rid, t, L, h, max(1, L - h), 0, None)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), name=st.sampled_from(["suf", "lpm-aging", "sjf-aging"]),
       param=st.sampled_from([0, 1, 3, 64]), n=st.integers(1, 40))
def test_fast_path_equals_order(seed, name, param, n):
    """Each fast path == order() over random arrivals, cache changes, idle and admitting steps."""
    key = {"suf": "starvation_iterations", "lpm-aging": "aging_tokens_per_pass", "sjf-aging": "aging_tokens_per_s"}[name]
    params = {} if (name == "suf" and param == 0) else {key: param}
    ref, fast = make_policy(name, None, **params), make_policy(name, None, **params)
    inc = fast.incremental_order()
    rng = random.Random(seed)
    waiting: dict[str, QueuedRequest] = {}
    t = 0.0
    for step in range(12):
        change_hits(rng, waiting, inc, 4)
        for i in range(rng.randint(0, n)):
            t += rng.choice([0.0, rng.random()])
            L = rng.choice([512, 1024, 4000]) if seed % 2 else rng.randint(2, 6000)
            q = _snap(f"r{rng.randrange(10**6):06d}-{step}-{i}", t, L, rng.randint(0, L - 1))
            waiting[q.request_id] = q
            inc.add(q)
        if not waiting:
            continue
        now = t + rng.random()
        expected = ref.order(list(waiting.values()), now)
        assert ids(inc.iter_order(now)) == ids(expected)
        admitted = expected[:rng.randint(0, 3)]
        if admitted:
            for policy in (ref, fast):
                if hasattr(policy, "on_admitted"):
                    policy.on_admitted(admitted, now)
        admit(waiting, inc, admitted)


def _stream():
    """A 400-token request at t = 0 and a 4-token request every second (one step each)."""
    return [make_request("long", 0.0, 400)] + [make_request(f"s{i:02d}", float(i), 4) for i in range(30)]


def test_starvation_bound_in_the_simulator():
    """Plain suf serves the long request after the stream of short ones; with K = 3 it is
    admitted in the step after the third admitting pass that showed it."""
    cfg = EngineConfig(budget_tokens=400, block_size=4, kv_blocks=400, max_num_seqs=1)
    for fast in (True, False):
        plain = simulate(_stream(), make_policy("suf"), PROFILE, cfg, fast_order=fast).requests.set_index("request_id")
        guarded = simulate(_stream(), make_policy("suf", None, starvation_iterations=3), PROFILE, cfg,
                           fast_order=fast).requests.set_index("request_id")
        # 1 s steps: behind all 30 short requests (admitted at t = 0..29), first token at 31 s.
        assert plain.loc["long", "ttft_s"] == pytest.approx(31.0)
        # Passes at t = 0, 1, 2 admit s00, s01, s02; at t = 3 it has waited 3 passes: admitted.
        assert guarded.loc["long", "first_scheduled_s"] == pytest.approx(3.0)
        assert guarded.loc["long", "ttft_s"] == pytest.approx(4.0)


def test_registered_for_the_live_hook():
    from fairsim.live.settings import build_policy, hook_policies

    for name in ("suf", "lpm-aging", "sjf-aging"):
        assert name in hook_policies()
        assert build_policy({"policy": name}).name == name
