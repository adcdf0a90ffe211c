"""Hook overhead: seconds the hook spends per step, next to the engine's own step time.

For each waiting-queue length ``N`` a live engine (tiny Llama, CPU) gets ``N`` queued requests
(prompts of 256 tokens; a quarter share a 128-token prefix already in the cache, so ``h``
varies), then:

- ``reorder_cold_s``: the first ``fairsim_reorder()`` and a read of the queue's head: every
  request is new to the hook, every hit is looked up.
- ``reorder_s``: median over repeated calls of ``fairsim_reorder()`` plus a read of the head, with
  nothing changed in between (a step that admits nothing, e.g. the batch is full).
- ``changed_s``: median over ``steps`` real engine steps of the hook's whole time in
  ``schedule()`` (``PolicyScheduler.fairsim_reorder_s``: ordering, the lazy reads of the order
  by vLLM's admission loop, the admission feedback); ``changed_p90_s``, their 90th percentile
  (a step with a GC pause or a policy's periodic O(queue) work, such as DLPM's refill when
  every request is its own client, shows there, not in the median). Before each step new
  requests arrive so
  that ``N`` are waiting again, so in every such step the queue changed: requests were admitted,
  finished and arrived, and the new prefills cached blocks. ``admitted_per_step``,
  ``arrived_per_step`` and ``lookups_per_step`` (prefix-cache lookups, ``fairsim.live.hitcache``)
  say how much.
- ``step_s``: median wall time of ``LLMEngine.step()`` over the same steps (schedule + model
  forward + output processing), for the share.

A benchmark that prints figures, not a timed unit test.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from fairsim import interrupt
from fairsim.live.engine import LiveConfig, live_scheduler, make_llm, shutdown_llm
from fairsim.live.prompts import block_tokens

PROMPT_TOKENS = 256
PREFIX_TOKENS = 128
#: Most waiting requests per size: the engine gets 3 KV blocks per waiting request (256-token
#: prompts), about 0.13 MiB each for the tiny model, so 10,000 need about 4 GiB (at 100,000 the
#: CPU engine failed to allocate its cache, 39 GiB, on a 24 GiB machine).
MAX_WAITING = 10_000


def measure_overhead(policies: list[str], sizes: list[int], profile: str | None = None,
                     repeats: int = 20, steps: int = 20,
                     on_row: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """Measure the hook's time per step (module docstring) per policy and waiting-queue size.

    ``on_row``, if given, gets each row as soon as it is measured (``fairsim hook-overhead``
    prints it then, so an interrupted call keeps the rows already measured on screen).

    Returns:
        One dict per (policy, size): ``policy``, ``waiting``, ``reorder_s``, ``reorder_cold_s``,
        ``changed_s``, ``changed_p90_s``, ``step_s`` (seconds), ``admitted_per_step``, ``arrived_per_step``,
        ``lookups_per_step``.

    Raises:
        ValueError: A size < 1 or > ``MAX_WAITING``, or ``repeats``/``steps`` < 1.
    """
    if any(n < 1 or n > MAX_WAITING for n in sizes):
        raise ValueError(f"sizes={sizes}: need 1 to {MAX_WAITING:,} waiting requests")
    if repeats < 1 or steps < 1:
        raise ValueError(f"repeats={repeats}, steps={steps}: need >= 1")
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    params = SamplingParams(max_tokens=1, detokenize=False)
    prefix = block_tokens("overhead-prefix", PREFIX_TOKENS)
    rows = []
    for name in policies:
        interrupt.check()  # e.g. one that came during the last engine's teardown (its finalisers)
        llm = make_llm(LiveConfig(policy=name, profile=profile, max_num_seqs=256,
                                  kv_blocks=max(64, 3 * max(sizes)), max_model_len=1024))
        try:
            interrupt.check()  # a Ctrl-C during the engine's start-up (minutes), seen by the handler only
            engine = llm.llm_engine
            sched = live_scheduler(llm)
            llm.generate([TokensPrompt(prompt_token_ids=prefix + [5] * 8)], params, use_tqdm=False)
            for n in sizes:
                made = 0
                ids = []

                def arrive(count: int) -> None:
                    nonlocal made
                    for _ in range(count):
                        i = made
                        made += 1
                        tail = block_tokens(f"{name}-{n}-{i}", PROMPT_TOKENS - PREFIX_TOKENS)
                        head = prefix if i % 4 == 0 else block_tokens(f"{name}-{n}-{i}-h", PREFIX_TOKENS)
                        ids.append(engine.add_request(f"{name}-{n}-{i}", TokensPrompt(prompt_token_ids=head + tail),
                                                      params, arrival_time=time.time() - 1e-3 * (n - i)))

                arrive(n)
                errors0 = sched.fairsim_policy_errors
                times = []
                for _ in range(repeats + 1):
                    t0 = time.perf_counter()
                    sched.fairsim_reorder()
                    sched.waiting.peek_request()
                    times.append(time.perf_counter() - t0)
                lookups0 = sched.fairsim_hits.lookups
                k0 = len(sched.fairsim_reorder_s)
                step_times, admitted, arrived = [], 0, 0
                for _ in range(steps):
                    interrupt.check()
                    if len(sched.waiting) < n:
                        arrived += n - len(sched.waiting)
                        arrive(n - len(sched.waiting))
                    t0 = time.perf_counter()
                    engine.step()
                    step_times.append(time.perf_counter() - t0)
                    admitted += sum(1 for rid, _, ctx in sched.fairsim_last_batch if rid in sched.fairsim_admissions
                                    and sched.fairsim_admissions[rid][0] == sched.fairsim_step - 1)
                hook = list(sched.fairsim_reorder_s)[k0:]
                lookups = sched.fairsim_hits.lookups - lookups0
                engine.abort_request(ids, internal=True)  # the rest is not needed for the figures
                while engine.has_unfinished_requests():
                    interrupt.check()
                    engine.step()
                rows.append({"policy": name, "waiting": n, "reorder_s": statistics.median(times[1:]),
                             "reorder_cold_s": times[0], "changed_s": statistics.median(hook),
                             "changed_p90_s": float(np.quantile(hook, 0.9)),  # linear interpolation
                             "step_s": statistics.median(step_times),
                             "admitted_per_step": admitted / steps, "arrived_per_step": arrived / steps,
                             "lookups_per_step": lookups / steps,
                             "policy_errors": sched.fairsim_policy_errors - errors0})
                if on_row is not None:
                    on_row(rows[-1])
        finally:
            # Drop every reference before the next engine is built: a late teardown of this one
            # would destroy the process-wide parallel state the next engine uses.
            shutdown_llm(llm)
            engine = sched = None
            del llm, engine, sched
            import gc

            gc.collect()
    return rows
