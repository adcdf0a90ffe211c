"""suf, lpm-aging and sjf-aging in the live vLLM hook: they only order, count their waiting passes
from the hook's on_admitted calls, and serve every request once."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.live

pytest.importorskip("vllm")

from fairsim.live.engine import LiveConfig, live_scheduler, make_llm  # noqa: E402
from tests.test_live_hook import _serve_misses_and_hits  # noqa: E402


@pytest.mark.parametrize("name, params", [("suf", {"starvation_iterations": 2}),
                                          ("lpm-aging", {"aging_tokens_per_pass": 64}),
                                          ("sjf-aging", {})])
def test_orders_live(name, params):
    llm = make_llm(LiveConfig(policy=name, params=params, kv_blocks=64, max_num_seqs=2, budget_tokens=512))
    try:
        sched = live_scheduler(llm)
        policy = sched.fairsim_policy
        assert policy.name == name and sched._fairsim_inc is not None  # the hook reads the fast path
        calls = []
        inner = sched._fairsim_on_admitted
        if inner is not None:
            sched._fairsim_on_admitted = lambda admitted, now: (calls.append(len(admitted)), inner(admitted, now))
        finished = _serve_misses_and_hits(llm.llm_engine)
        assert sorted(finished) == sorted(f"r{i}" for i in range(8))
        assert sched.fairsim_policy_errors == 0
        if hasattr(policy, "waiting"):  # one pass per admitting step; every admitted request forgotten
            assert policy.waiting.passes == len(calls) > 0
            assert policy.waiting.first == {}
    finally:
        del llm
        import gc

        gc.collect()
