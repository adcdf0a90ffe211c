"""Engine invariants over random small traces, for every registered policy (hypothesis)."""

from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import given, settings

from fairsim.policies import make_policy, policy_names
from fairsim.sim import Engine
from tests.strategies import simulations


# Every registered policy, plus the options that change engine-facing behaviour.
CASES = [(name, {}) for name in policy_names()] + [
    ("ragcache", {"pgdsf": True}),
    ("peek", {"protect": False}),
    ("lpm", {"sglang_sort_limit": True, "sglang_dedup": True}),
]


def run(requests, profile, config, case):
    name, params = case
    engine = Engine(requests, make_policy(name, profile, **params), profile, config)
    return engine, engine.run()


@pytest.mark.parametrize("name", CASES, ids=lambda c: c[0] + "".join(f"-{k}" for k in c[1]))
class TestEngineInvariants:
    """What must hold whatever the order: conservation, capacity, budget, causality, determinism."""

    @settings(max_examples=40)
    @given(sim=simulations())
    def test_invariants(self, name, sim):
        requests, profile, config = sim
        engine, result = run(requests, profile, config, name)
        req, steps = result.requests, result.steps
        # Reason: each request finishes exactly once - one row per id, all with a finish time.
        assert sorted(req["request_id"]) == sorted(r.request_id for r in requests)
        assert req["finish_s"].notna().all() and req["finish_step"].notna().all()
        # Reason: the scheduler never hands out more than max_num_batched_tokens in one step.
        assert (steps["tokens"] <= config.budget_tokens).all()
        assert (steps["tokens"] >= 1).all()
        # Reason: blocks in use are a subset of the pool.
        assert (steps["kv_blocks_used"] <= engine.kv_blocks).all()
        # Reason: every reference taken is dropped exactly once (the pool asserts >= 0 on each
        # free), so at the end no block is referenced and all are free.
        assert min(engine.pool.ref_cnt) == 0 == max(engine.pool.ref_cnt)
        assert engine.pool.num_free == engine.kv_blocks
        # Reason: without preemption each uncached token is computed exactly once.
        if req["preemptions"].sum() == 0:
            assert steps["tokens"].sum() == (req["prompt_tokens"] - req["cached_tokens"]).sum()
        # Reason: a request's chunks sum to c = L - h new tokens whose (new x context) pair sum
        # is c*h + c^2/2 however they are chunked, it needs at least ceil(c / budget) steps, and
        # a step with other requests in it is never shorter (all cost terms are >= 0). So TTFT
        # >= T(c | h) at the engine's budget - exactly, for a request never preempted.
        for row in req.itertuples():
            if row.preemptions == 0:
                c = row.prompt_tokens - row.cached_tokens
                alone = profile.prefill_time(c, row.cached_tokens, budget=config.budget_tokens)
                assert row.ttft_s >= alone * (1 - 1e-9) - 1e-12, (row, alone)

    @settings(max_examples=15)
    @given(sim=simulations())
    def test_same_input_same_table(self, name, sim):
        # Reason: no hidden randomness or shared state - a fresh policy on the same input gives
        # bit-identical tables.
        requests, profile, config = sim
        _, first = run(requests, profile, config, name)
        _, second = run(requests, profile, config, name)
        pd.testing.assert_frame_equal(first.requests, second.requests)
        pd.testing.assert_frame_equal(first.steps, second.steps)
