"""SGLang's orderings in a real engine (live hook): each only orders, serves every request once,
and the hook's prefill-token counter (policy contract rule 5) is what the simulator's rule gives
for the batches vLLM scheduled."""

from __future__ import annotations

import os

import pytest

pytestmark = pytest.mark.live

from fairsim.live.engine import ENGINE_ENV  # noqa: E402  (no vLLM import)

for _k, _v in ENGINE_ENV.items():
    os.environ.setdefault(_k, _v)

from fairsim.live.engine import LiveConfig, live_scheduler, make_llm  # noqa: E402
from tests.test_live_hook import _serve_misses_and_hits  # noqa: E402


@pytest.mark.parametrize("name", ["hrrn", "shortest-prefill-first", "dfs-weight", "lof", "lpm-sglang"])
def test_sglang_orderings_live(name):
    llm = make_llm(LiveConfig(policy=name, kv_blocks=64, max_num_seqs=4, budget_tokens=512))
    try:
        sched = live_scheduler(llm)
        assert sched.fairsim_policy.name == name
        prefill_by_step = []
        seen_arrival: dict[str, int] = {}
        real_order = sched.fairsim_policy.order

        def spy(waiting, now):
            for q in waiting:
                seen_arrival.setdefault(q.request_id, q.arrival_prefill_tokens)
            return real_order(waiting, now)

        sched.fairsim_policy.order = spy
        sched._fairsim_inc = None  # read order() so the spy sees every snapshot

        def after_step():
            # the simulator's rule: every scheduled token but a decode (1 token on a full context)
            prefill_by_step.append(sum(n for _, n, _ in sched.fairsim_last_batch))

        finished = _serve_misses_and_hits(llm.llm_engine, after_step)
        assert sorted(r.split("-")[0] for r in finished) == [f"r{i}" for i in range(8)]
        assert sched.fairsim_policy_errors == 0
        # max_tokens=1: nothing decodes, so the counter is the sum of every scheduled token
        assert sched.fairsim_prefill_tokens == sum(prefill_by_step) > 0
        # each request joined with the counter of the steps before its add_request
        assert all(0 <= v <= sched.fairsim_prefill_tokens for v in seen_arrival.values())
        assert all(v == 0 for v in seen_arrival.values())  # all added before the first step
        # A request added after those steps joins with the counter they left.
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        from fairsim.live.prompts import block_tokens

        before = sched.fairsim_prefill_tokens
        engine = llm.llm_engine
        engine.add_request("late", TokensPrompt(prompt_token_ids=block_tokens("late", 100)),
                           SamplingParams(max_tokens=1, detokenize=False), arrival_time=9.0)
        while engine.has_unfinished_requests():
            engine.step()
        late = [v for rid, v in seen_arrival.items() if rid.startswith("late")]
        assert late == [before]
        assert sched.fairsim_prefill_tokens == before + 100
        if name == "hrrn":
            assert sched.fairsim_policy.prefill_tokens <= sched.fairsim_prefill_tokens
    finally:
        del llm
        import gc

        gc.collect()
