"""``costmodel.PrefillTimes``: ``Profile.prefill_time`` at the profile's budget from running totals
kept per cached length; every value must be the loop's float, bit for bit (PEEK orders by it)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from fairsim.costmodel import PrefillTimes, builtin_profiles, load_profile

PROFILES = [load_profile(name) for name in builtin_profiles()]
CONVERSATION = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces" / "conversation_trace.jsonl"


def test_by_hand():
    p = load_profile("a6000-llama3.1-8b-vllm-prior")
    times = PrefillTimes(p).prefill_time
    B = p.budget_tokens
    # Two full chunks then 3 tokens on top of 512 cached: the loop's sum, in its order.
    step = p.step_time_from_sums
    want = 0.0 + step(B, B * (512 + 0 + B / 2), 1)
    want += step(B, B * (512 + B + B / 2), 1)
    want += step(3, 3 * (512 + 2 * B + 3 / 2), 1)
    assert times(2 * B + 3, 512) == want == p.prefill_time(2 * B + 3, 512)
    assert times(0, 512) == 0.0 == times(-4)
    assert times(B) == p.prefill_time(B, 0)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(range(len(PROFILES))),
       st.lists(st.tuples(st.integers(-3, 40_000), st.integers(0, 80).map(lambda b: b * 512)
                          | st.integers(0, 50_000)), min_size=1, max_size=40))
def test_same_float_as_the_loop(which, calls):
    # Any sequence of calls (short prompts before long ones at the same h, and back): the
    # running totals extended on demand give the loop's float each time.
    profile = PROFILES[which]
    times = PrefillTimes(profile).prefill_time
    for c, h in calls:
        assert times(c, h) == profile.prefill_time(c, h)
        assert times(c) == profile.prefill_time(c)


@pytest.mark.skipif(not CONVERSATION.exists(), reason="shared conversation trace not present")
def test_pairs_of_the_conversation_trace():
    # (c, h) pairs as PEEK asks them on the trace's prompts: cold, and hits of block multiples.
    from fairsim.traces.formats import read_trace

    p = load_profile("a6000-llama3.1-8b-vllm-prior")
    times = PrefillTimes(p).prefill_time
    for r in list(read_trace(CONVERSATION).requests)[:3000]:
        L = r.prompt_len
        for h in range(0, L, 512 * 7):
            assert times(L - h, h) == p.prefill_time(L - h, h)


def test_idle_check_gives_the_loops_worst_gap():
    # check_idle_consistency reads T(L | 0) from PrefillTimes: the same worst gap as the loop's
    # floats give, on every shipped profile (their tables reach 262,144 tokens).
    from fairsim.costmodel import IDLE_TABLE_SLACK_S, check_idle_consistency

    for p in PROFILES:
        gaps = [abs(t - p.prefill_time(L)) / p.prefill_time(L)
                for L, t in zip(p.idle_prompt_tokens, p.idle_seconds)
                if abs(t - p.prefill_time(L)) > IDLE_TABLE_SLACK_S]
        assert check_idle_consistency(p, "x", tolerance=10.0) == max(gaps, default=0.0)
