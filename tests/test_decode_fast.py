"""The aggregated decode path (``fairsim.sim.decode_fast``) against the step-by-step engine.

``simulate(..., fast_decode=False)`` runs ``Engine`` (every running request touched every step);
the default runs ``DecodeFastEngine``. Decisions and floats must be identical: the request, step
and token-gap tables are compared exactly, on traces with preemptions, long outputs, arrivals
during decode, sessions and budgets smaller than the running batch.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

from fairsim.costmodel import load_profile
from fairsim.policies import make_policy
from fairsim.policies.registry import policy_names
from fairsim.scenarios import build_scenario
from fairsim.sim import EngineConfig
from fairsim.sim.decode_fast import DecodeFastEngine
from fairsim.sim.keys import blocks_for
from fairsim.types import Request
from tests.strategies import BLOCK, colocated_traces, profiles
from tests.utils import constant_profile, same_as_reference, rag_preempting

PROFILE = load_profile("a6000-llama3.1-8b-vllm-prior")
CONVERSATION = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces" / "conversation_trace.jsonl"


def _both(requests, policy, profile, config, **kw):
    return same_as_reference(requests, policy, profile, config, {"fast_decode": False},
                             ("requests", "steps", "token_gaps"), **kw)


def _engine(requests, policy, profile, config, **kw):
    engine = DecodeFastEngine(requests, make_policy(policy, profile), profile, config, **kw)
    return engine, engine.run()


class TestHandComputed:
    def test_one_long_decode_is_one_stretch(self):
        # 5-token prompt, 12 outputs, 4-token blocks, 1 s steps + 0.25 s per token: step 0
        # prefills 5 tokens (2.25 s), then 11 decode steps of 1.25 s. Blocks: the context
        # reaches 8 (2nd block full) in step 3 and needs a 3rd block in step 4, and so on.
        profile = constant_profile(step_s=1.0, per_token_s=0.25)
        reqs = [Request("A", 0.0, 5, (), BLOCK, 12, {})]
        config = EngineConfig(block_size=BLOCK, kv_blocks=8, mode="colocated")
        engine, res = _engine(reqs, "fcfs", profile, config)
        steps = res.steps
        assert steps["tokens"].tolist() == [5] + [1] * 11
        assert steps["decode_tokens"].tolist() == [0] + [1] * 11
        assert steps["start_s"].tolist() == [0.0] + [2.25 + 1.25 * i for i in range(11)]
        assert steps["kv_blocks_used"].tolist() == [2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4]
        assert steps["kv_blocks_cached"].tolist() == [1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4]
        assert res.token_gaps["itl_s"].tolist() == [1.25] * 11
        assert res.requests.loc[0, "finish_s"] == 2.25 + 1.25 * 11
        # Events (a full block, a new block, the last token) cut the decode into stretches;
        # nothing falls back to the step-by-step schedule.
        assert engine.stretched_steps > 0 and engine.reference_steps == 1
        _both(reqs, "fcfs", profile, config)

    def test_arrival_during_decode_is_admitted_at_its_step(self):
        # B arrives at 3.1 s while A decodes (1 s steps): it is waiting at step 4 (start 4.0).
        profile = constant_profile(step_s=1.0)
        reqs = [Request("A", 0.0, 3, (), BLOCK, 10, {}), Request("B", 3.1, 3, (), BLOCK, 2, {})]
        config = EngineConfig(block_size=BLOCK, kv_blocks=8, mode="colocated")
        res = _both(reqs, "fcfs", profile, config)
        t = res.requests.set_index("request_id")
        assert t.loc["B", "first_scheduled_step"] == 4 and t.loc["B", "first_token_s"] == 5.0
        assert res.steps["decode_tokens"].tolist()[3:6] == [1, 1, 2]

    def test_preemption_of_a_decoder(self):
        # test_colocated's hand case: B (admitted last) is preempted by A's growth at step 5.
        reqs = [Request("A", 0.0, 4, (), BLOCK, 6, {}), Request("B", 0.0, 4, (), BLOCK, 6, {})]
        config = EngineConfig(block_size=BLOCK, budget_tokens=8, kv_blocks=4, mode="colocated")
        res = _both(reqs, "fcfs", constant_profile(step_s=1.0), config)
        assert res.steps["preemptions"].tolist() == [0, 0, 0, 0, 0, 1, 0]

    def test_token_gaps_grouped_by_request(self):
        reqs = [Request(f"r{i}", 0.1 * i, 6, (), BLOCK, 3 + i, {}) for i in range(4)]
        config = EngineConfig(block_size=BLOCK, kv_blocks=40, mode="colocated")
        res = _both(reqs, "fcfs", constant_profile(step_s=1.0), config)
        rows = res.token_gaps["request_row"].to_numpy()
        assert (np.diff(rows) >= 0).all() and np.bincount(rows).tolist() == [2, 3, 4, 5]


@st.composite
def colocated_runs(draw):
    reqs, config = draw(colocated_traces(max_spare_blocks=12))
    policy = draw(st.sampled_from(["fcfs", "lpm", "fairway", "preble", "peek", "drr", "klpm4"]))
    return reqs, draw(profiles()), config, policy


@settings(max_examples=200, deadline=None)
@given(colocated_runs(), st.sampled_from([1, 2, DecodeFastEngine.vector_min_steps]))
def test_same_tables_as_step_by_step(run, vector_min_steps):
    # vector_min_steps 1: every pure decode stretch goes through numpy (step_times_colocated and
    # the cumulative sum); the default mixes both loops.
    reqs, profile, config, policy = run
    saved = DecodeFastEngine.vector_min_steps
    DecodeFastEngine.vector_min_steps = vector_min_steps
    try:
        _both(reqs, policy, profile, config)
    finally:
        DecodeFastEngine.vector_min_steps = saved


@settings(max_examples=300, deadline=None)
@given(profiles(), st.integers(1, 300), st.lists(st.integers(0, 10**7), min_size=1, max_size=40),
       st.sampled_from([0.0, 0.004, 0.02]), st.sampled_from([0.0, 3e-4]), st.sampled_from([0.0, 1e-8]))
def test_vector_step_times_equal_the_scalar_ones(profile, m, ctxs, floor, f, e):
    profile = dataclasses.replace(profile, min_step_s=floor, f_s_per_decode=f, e_s_per_decode_ctx_token=e)
    c = np.asarray(ctxs, dtype=np.int64)
    got = profile.step_times_colocated(m, c + 0.5 * m, m, m, c).tolist()
    assert got == [profile.step_time_colocated(m, x + 0.5 * m, m, m, x) for x in ctxs]


@pytest.mark.parametrize("name", policy_names())
def test_same_tables_every_policy_with_preemptions(name):
    reqs, config = rag_preempting(PROFILE)
    res = _both(reqs, name, PROFILE, config)
    assert res.requests["preemptions"].sum() > 0
    steps = res.steps
    assert ((steps["decode_tokens"] > 0) & (steps["waiting"] > 0)).any()  # arrivals during decode


def test_sessions_closed_loop():
    agent = build_scenario("agent", PROFILE, seed=3, num_sessions=8)
    reqs = [dataclasses.replace(r, output_len=1 + (i * 31) % 300) for i, r in enumerate(agent.requests)]
    longest = max(blocks_for(r.prompt_len + r.output_len - 1, 16) for r in reqs)
    config = EngineConfig(kv_blocks=3 * longest, block_size=16, mode="colocated")
    res = _both(reqs, "fairway", PROFILE, config, replay="closed")
    assert res.requests["after"].notna().any()


@pytest.mark.skipif(not CONVERSATION.exists(), reason="shared conversation trace not present")
@pytest.mark.parametrize("name", ["fcfs", "fairway", "lpm", "preble"])
def test_conversation_real_output_lengths(name):
    from fairsim.traces.formats import read_trace

    reqs = [dataclasses.replace(r, arrival_time=8 * r.arrival_time)
            for r in list(read_trace(CONVERSATION).requests)[:400]]
    config = EngineConfig(kv_blocks=451, mode="colocated")
    engine, fast = _engine(reqs, name, PROFILE, config)
    res = _both(reqs, name, PROFILE, config)
    pd.testing.assert_frame_equal(fast.steps, res.steps, check_exact=True)
    assert res.requests["preemptions"].sum() > 0 and res.requests["output_tokens"].max() > 500
    assert engine.stretched_steps > 0 and engine.reference_steps < len(res.steps) / 10


def test_prefill_only_is_refused():
    with pytest.raises(ValueError, match="colocated"):
        DecodeFastEngine([Request("A", 0.0, 4, (), BLOCK, 1, {})], make_policy("fcfs"),
                         constant_profile(), EngineConfig(block_size=BLOCK, kv_blocks=4))
