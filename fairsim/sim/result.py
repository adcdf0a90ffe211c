"""The result tables of one simulation."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd


@dataclass(frozen=True)
class SimResult:
    """Output of one simulation.

    Attributes:
        requests: One row per request: ``request_id``, ``arrival_s``, ``prompt_tokens``,
            ``cached_tokens`` (prefix hit at first admission), ``first_scheduled_s``,
            ``first_token_s``, ``ttft_s``, ``finish_s``, ``queue_delay_s`` (first scheduled minus
            release), ``first_scheduled_step``, ``finish_step``, ``preemptions``, ``session_id``,
            ``after``, ``released_s`` (when the request joined the waiting queue: ``arrival_s`` in
            open loop, predecessor's finish + think time in closed loop; TTFT and queue delay are
            measured from it), plus one column per label (``klass``, ``doc_id``, ...).
        steps: One row per engine step: ``step``, ``start_s``, ``duration_s``, ``tokens``,
            ``decode_tokens`` (of ``tokens``, one per decoding request), ``requests`` (batch size), ``waiting`` (queue length at step start), ``running`` (after
            admission), ``kv_blocks_used`` (``ref_cnt > 0``), ``kv_blocks_cached``, ``evictions``
            (blocks evicted during the step), ``preemptions``.
        policy: Policy name.
        kv_blocks: KV capacity in blocks.
        block_size: Tokens per block.
        wall_time_s: Wall-clock seconds the simulation took.
        token_gaps: Colocated mode only (else ``None``): one row per inter-token gap,
            ``request_row`` (row of ``requests``) and ``itl_s`` (seconds between two consecutive
            tokens of that request, vLLM's inter-token latency).

    In colocated mode ``requests`` also has ``output_tokens``, ``e2e_s`` (finish minus arrival),
    ``tpot_s`` (vLLM's ``(e2e - ttft) / (output_tokens - 1)``, NaN for one token),
    ``discarded_tokens`` (computed tokens dropped by preemptions) and ``resume_cached_tokens``
    (prefix hits at re-admissions); ``first_token_s`` is the end of the last prefill step and
    ``finish_s`` that of the step sampling the last token. ``steps.decode_tokens`` counts decoding
    requests (one token each) in a step.
    """

    requests: pd.DataFrame
    steps: pd.DataFrame
    policy: str
    kv_blocks: int
    block_size: int
    wall_time_s: float
    token_gaps: pd.DataFrame | None = None
