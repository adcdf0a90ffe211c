"""Hook overhead: seconds the hook spends reordering per step, next to the engine's own step time.

For each waiting-queue length ``N`` a live engine (tiny Llama, CPU) gets ``N`` queued requests
(short prompts; a quarter share a prefix already in the cache, so ``h`` varies), then:

- ``reorder_s``: median wall time of ``PolicyScheduler.fairsim_reorder()`` over repeated calls
  with all ``N`` waiting: snapshotting (a prefix-cache lookup only for requests whose watched
  blocks changed, ``fairsim.live.hitcache``), ``policy.order()`` and rebuilding the queue;
  exactly what the hook adds to a ``schedule()`` whose step changed no watched block.
- ``reorder_cold_s``: the first call, which looks every request's hit up (as in a step where
  every watched block changed); ``lookups_per_step``: mean lookups of the repeated calls.
- ``step_s``: median wall time of ``LLMEngine.step()`` for the full-budget steps that follow
  (schedule + model forward + output processing).

A benchmark that prints figures, not a timed unit test.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from fairsim.live.engine import LiveConfig, live_scheduler, make_llm
from fairsim.live.prompts import block_tokens

PROMPT_TOKENS = 256
PREFIX_TOKENS = 128


def measure_overhead(policies: list[str], sizes: list[int], profile: str | None = None,
                     repeats: int = 20, steps: int = 5) -> list[dict[str, Any]]:
    """Measure ``reorder_s`` and ``step_s`` (see the module docstring) per policy and size.

    Returns:
        One dict per (policy, size): ``policy``, ``waiting``, ``reorder_s``, ``reorder_cold_s``,
        ``step_s`` (seconds), ``lookups_per_step``.

    Raises:
        ValueError: A size < 1.
    """
    if any(n < 1 for n in sizes):
        raise ValueError(f"sizes={sizes}: need >= 1 waiting request")
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    params = SamplingParams(max_tokens=1, detokenize=False)
    prefix = block_tokens("overhead-prefix", PREFIX_TOKENS)
    rows = []
    for name in policies:
        llm = make_llm(LiveConfig(policy=name, profile=profile, max_num_seqs=256,
                                  kv_blocks=max(64, 3 * max(sizes)), max_model_len=1024))
        try:
            engine = llm.llm_engine
            sched = live_scheduler(llm)
            llm.generate([TokensPrompt(prompt_token_ids=prefix + [5] * 8)], params, use_tqdm=False)
            for n in sizes:
                ids = []
                for i in range(n):
                    tail = block_tokens(f"{name}-{n}-{i}", PROMPT_TOKENS - PREFIX_TOKENS)
                    head = prefix if i % 4 == 0 else block_tokens(f"{name}-{n}-{i}-h", PREFIX_TOKENS)
                    ids.append(engine.add_request(f"{name}-{n}-{i}", TokensPrompt(prompt_token_ids=head + tail),
                                       params, arrival_time=time.time() - 1e-3 * i))
                times = []
                sched.fairsim_hits.clear()
                lookups0 = None
                for _ in range(repeats):
                    t0 = time.perf_counter()
                    sched.fairsim_reorder()
                    times.append(time.perf_counter() - t0)
                    if lookups0 is None:
                        lookups0 = sched.fairsim_hits.lookups
                step_times = []
                while engine.has_unfinished_requests() and len(step_times) < steps:
                    t0 = time.perf_counter()
                    engine.step()
                    step_times.append(time.perf_counter() - t0)
                engine.abort_request(ids, internal=True)  # the rest is not needed for the figures
                while engine.has_unfinished_requests():
                    engine.step()
                warm = times[1:] or times
                rows.append({"policy": name, "waiting": n, "reorder_s": statistics.median(warm),
                             "reorder_cold_s": times[0],
                             "lookups_per_step": (sched.fairsim_hits.lookups - lookups0) / max(1, len(times) - 1),
                             "step_s": statistics.median(step_times)})
        finally:
            # Drop every reference before the next engine is built: a late teardown of this one
            # would destroy the process-wide parallel state the next engine uses.
            engine = sched = None
            del llm, engine, sched
            import gc

            gc.collect()
    return rows
