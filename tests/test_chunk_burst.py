"""The prefill-only chunk burst (``Engine._chunk_burst``) against the step-by-step schedule.

``simulate(..., fast_chunks=False)`` sends every step through ``Engine._schedule``; the default
runs the steps whose batch is one full-budget chunk of the first running request in a tight loop.
Decisions and floats must be identical: the request and step tables are compared exactly, on
traces with arrivals during long prefills, caches that evict, sessions, hooked pools (PEEK,
RAGCache) and budgets that are not a multiple of the block. (Prefill-only runs do not preempt:
admission reserves blocks for a request's whole remaining prompt, and only the request being
prefilled allocates, so the burst's stop before a step short of free blocks is defensive.)
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

from fairsim.costmodel import load_profile
from fairsim.policies import make_policy
from fairsim.policies.registry import policy_names
from fairsim.scenarios import build_scenario
from fairsim.sim import EngineConfig, simulate
from fairsim.sim.engine import Engine
from fairsim.sim.keys import blocks_for
from fairsim.types import Request
from tests.strategies import BLOCK, profiles, traces
from tests.utils import constant_profile, same_as_reference

PROFILE = load_profile("a6000-llama3.1-8b-vllm-prior")
CONVERSATION = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces" / "conversation_trace.jsonl"


def _both(requests, policy, profile, config, **kw):
    return same_as_reference(requests, policy, profile, config, {"fast_chunks": False}, **kw)


class _Counting(Engine):
    """Counts the steps the burst ran."""

    burst_steps = 0

    def _chunk_burst(self, live, now, step):
        now, after = super()._chunk_burst(live, now, step)
        self.burst_steps += after - step
        return now, after


class TestHandComputed:
    def test_long_prompt_alone(self):
        # 10 tokens at budget 3 (4-token blocks), 1 s + 0.5 s per token: chunks 3, 3, 3, 1.
        # The first is the admission step; the next two are a burst (7 and 4 tokens left, more
        # than the budget); the last, 1 token, goes through _schedule again.
        profile = constant_profile(step_s=1.0, per_token_s=0.5)
        reqs = [Request("A", 0.0, 10, (), BLOCK, 1, {})]
        config = EngineConfig(block_size=BLOCK, budget_tokens=3, kv_blocks=4)
        engine = _Counting(reqs, make_policy("fcfs"), profile, config)
        res = engine.run()
        steps = res.steps
        assert steps["tokens"].tolist() == [3, 3, 3, 1]
        assert steps["start_s"].tolist() == [0.0, 2.5, 5.0, 7.5]
        assert steps["kv_blocks_used"].tolist() == [1, 2, 3, 3]
        assert steps["kv_blocks_cached"].tolist() == [0, 1, 2, 2]  # the 10th token's block: partial
        assert res.requests.loc[0, "first_token_s"] == 9.0
        assert engine.burst_steps == 2
        _both(reqs, "fcfs", profile, config)

    def test_arrival_ends_the_burst(self):
        # B arrives at 3.1 s while A's chunks run (2 s steps): the burst stops before the step
        # at which B is due (start 4.0), which records B as waiting. A's chunks take the whole
        # budget to its last one (exactly the budget: _schedule, no room), so B is admitted
        # in the step after it. (``waiting`` counts at the step's start: A at step 0.)
        profile = constant_profile(step_s=2.0)
        reqs = [Request("A", 0.0, 20, (), BLOCK, 1, {}), Request("B", 3.1, 4, (), BLOCK, 1, {})]
        config = EngineConfig(block_size=BLOCK, budget_tokens=4, kv_blocks=8)
        res = _both(reqs, "fcfs", profile, config)
        steps = res.steps
        assert steps["waiting"].tolist() == [1, 0, 1, 1, 1, 1]
        assert steps["tokens"].tolist() == [4] * 6
        t = res.requests.set_index("request_id")
        assert t.loc["B", "first_scheduled_step"] == 5 and t.loc["A", "finish_step"] == 4


@st.composite
def prefill_runs(draw):
    reqs = draw(traces(max_requests=10))
    longest = max(blocks_for(r.prompt_len, BLOCK) for r in reqs)
    config = EngineConfig(budget_tokens=draw(st.sampled_from([1, 2, 3, 4, 6, 8, 16])),
                          max_num_seqs=draw(st.integers(1, 8)), block_size=BLOCK,
                          kv_blocks=longest + draw(st.integers(0, 12)))
    policy = draw(st.sampled_from(["fcfs", "lpm", "fairway", "fairway-deadline", "preble", "peek",
                                   "ragcache", "drr", "klpm4"]))
    return reqs, draw(profiles()), config, policy


@settings(max_examples=200, deadline=None)
@given(prefill_runs())
def test_same_tables_as_step_by_step(run):
    reqs, profile, config, policy = run
    _both(reqs, policy, profile, config)


@pytest.mark.parametrize("params", [{"pgdsf": True}, {"protect": False}])
def test_hooked_pools(params):
    # RAGCache's PGDSF eviction and PEEK without protection are the pools with eviction hooks
    # (HookedBlockPool); RAGCache's default has none.
    name = "ragcache" if "pgdsf" in params else "peek"
    rag = build_scenario("rag", PROFILE, seed=4)
    reqs = rag.requests[:200]
    config = EngineConfig(kv_tokens=3 * max(r.prompt_len for r in reqs), budget_tokens=700)
    fast = simulate(reqs, make_policy(name, PROFILE, **params), PROFILE, config)
    ref = simulate(reqs, make_policy(name, PROFILE, **params), PROFILE, config, fast_chunks=False)
    pd.testing.assert_frame_equal(fast.requests, ref.requests, check_exact=True)
    pd.testing.assert_frame_equal(fast.steps, ref.steps, check_exact=True)
    assert fast.steps["evictions"].sum() > 0


@pytest.mark.parametrize("name", policy_names())
def test_same_tables_every_policy_small_cache(name):
    # RAG prompts at a 1,000-token budget in a cache of three of the longest: chunks evict.
    rag = build_scenario("rag", PROFILE, seed=2)
    reqs = rag.requests[:200]
    config = EngineConfig(kv_tokens=3 * max(r.prompt_len for r in reqs), budget_tokens=1000, max_num_seqs=16)
    res = _both(reqs, name, PROFILE, config)
    engine = _Counting(reqs, make_policy(name, PROFILE), PROFILE, config)
    engine.run()
    assert engine.burst_steps > 0 and res.steps["evictions"].sum() > 0


def test_sessions_closed_loop():
    agent = build_scenario("agent", PROFILE, seed=3, num_sessions=8)
    res = _both(agent.requests, "fairway", PROFILE, EngineConfig(block_size=16, budget_tokens=512),
                replay="closed")
    assert res.requests["after"].notna().any()


@pytest.mark.skipif(not CONVERSATION.exists(), reason="shared conversation trace not present")
@pytest.mark.parametrize("scale", [1, 8])
@pytest.mark.parametrize("name", ["fcfs", "fairway", "fairway-deadline", "peek", "drr"])
def test_conversation(name, scale):
    from fairsim.traces.formats import read_trace

    reqs = [dataclasses.replace(r, arrival_time=scale * r.arrival_time)
            for r in list(read_trace(CONVERSATION).requests)[:1500]]
    config = EngineConfig(kv_blocks=451)
    engine = _Counting(reqs, make_policy(name, PROFILE), PROFILE, config)
    fast = engine.run()
    res = _both(reqs, name, PROFILE, config)
    pd.testing.assert_frame_equal(fast.steps, res.steps, check_exact=True)
    assert engine.burst_steps > len(res.steps) / 2  # most steps of long prompts are bursts


def test_colocated_never_bursts():
    # Colocated runs have their own fast path (decode_fast); the chunk burst is prefill-only.
    config = EngineConfig(block_size=BLOCK, budget_tokens=3, kv_blocks=8, mode="colocated")
    engine = Engine([Request("A", 0.0, 10, (), BLOCK, 3, {})], make_policy("fcfs"), constant_profile(), config)
    assert engine.fast_chunks is False
