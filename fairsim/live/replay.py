"""Replay a trace against a live vLLM engine, in real time or on a virtual clock.

Both drivers build the engine with the fairsim hook (``fairsim.live.PolicyScheduler``), drive it
step by step with ``LLMEngine.add_request`` / ``LLMEngine.step``, and return the simulator's
per-request table (``fairsim.sim.SimResult.requests`` columns) plus a per-step table.

- ``replay_realtime``: requests are submitted when the wall clock reaches their release time;
  TTFT is vLLM's own ``RequestOutput.metrics.first_token_latency`` (output time minus the
  request's arrival time in vLLM, which is the release time), cached tokens are
  ``RequestOutput.num_cached_tokens``.
- ``replay_virtual``: decision-equivalence mode. Time is virtual: each step advances it by the
  profile's step time of the batch vLLM actually scheduled, requests are added when virtual time
  reaches their release (release time <= step start, as in the simulator), and the policy reads
  this clock. Simulator and vLLM then see the same inputs, so their decisions can be compared
  step for step (``fairsim.live.equivalence``).

Release times come from the simulator's arrival process (``fairsim.sim.arrivals.Arrivals``): open
loop = the (scaled) arrival time; closed loop (sessions) = when the request it follows finished
*in this live engine* plus ``delay_s * think_scale`` (wall seconds in real time, virtual seconds
with ``--virtual``).

Both are prefill-only by default (``max_tokens=1``, as the simulator's default mode).
``replay_virtual(..., colocated=True)`` instead decodes each request to its ``output_len``
(``max_tokens=output_len``, ``ignore_eos``), costs steps with ``Profile.step_time_colocated`` (a
decode = one new token on top of at least the prompt), and records the first-token step apart from
the finish step - the simulator's colocated mode.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import pandas as pd

from fairsim import interrupt
from fairsim.costmodel import Profile
from fairsim.errors import EngineInvariantError
from fairsim.sim.label_columns import label_columns
from fairsim.live.engine import LiveConfig, live_scheduler, make_llm, shutdown_llm
from fairsim.live.prompts import prompt_tokens
from fairsim.sim.arrivals import Arrivals, resolve_replay
from fairsim.traces.shaping import scale_time
from fairsim.types import Request

STEP_COLUMNS = ["step", "start_s", "duration_s", "tokens", "requests", "waiting", "running", "pair_tokens",
                "decode_tokens", "decode_context_tokens"]


@dataclass(frozen=True)
class LiveResult:
    """Output of one live replay.

    Attributes:
        requests: One row per request, the simulator's columns (``request_id``, ``arrival_s``,
            ``prompt_tokens``, ``cached_tokens``, ``first_scheduled_s``, ``first_token_s``,
            ``ttft_s``, ``finish_s``, ``queue_delay_s``, ``first_scheduled_step``,
            ``finish_step``, ``preemptions``, ``session_id``, ``after``, ``released_s``) plus
            labels. Times in seconds from the trace start (wall clock in real time, virtual in
            lockstep); TTFT and queue delay from ``released_s``.
        steps: One row per engine step: ``step``, ``start_s``, ``duration_s`` (measured wall
            seconds, or the profile's time in virtual mode), ``tokens``, ``requests``,
            ``waiting``, ``running``, ``pair_tokens`` (``sum n_i (k_i + n_i / 2)``, the cost
            model's attention term), ``decode_tokens`` and ``decode_context_tokens`` (decoding
            requests - one token on top of at least their prompt - and their summed context).
        policy: Policy name.
        mode: ``"realtime"`` or ``"virtual"``.
        reorder_s: Per-step seconds spent in the hook's reordering.
        policy_errors: Steps where the policy failed and vLLM's order was kept.
    """

    requests: pd.DataFrame
    steps: pd.DataFrame
    policy: str
    mode: str
    reorder_s: list[float]
    policy_errors: int


class _Driver:
    """Shared engine set-up and bookkeeping of both replay modes."""

    def __init__(self, requests: Sequence[Request], config: LiveConfig, salt: int = 0,
                 colocated: bool = False) -> None:
        ids = [r.request_id for r in requests]
        if len(set(ids)) != len(ids):
            raise ValueError("request ids must be unique within a trace")
        longest = max((r.prompt_len + r.output_len for r in requests), default=1)
        if longest > config.max_model_len:
            config = replace(config, max_model_len=longest + 1)
        if config.kv_blocks is not None and longest > config.kv_blocks * config.block_size:
            raise ValueError(
                f"a request needs {longest} tokens but the KV cache holds "
                f"{config.kv_blocks * config.block_size}; raise kv_blocks"
            )
        self.config = config
        self.requests = sorted(requests, key=lambda r: (r.arrival_time, r.request_id))
        self.salt = salt
        self.llm = make_llm(config)
        self.engine = self.llm.llm_engine
        self.sched = live_scheduler(self.llm)
        from vllm import SamplingParams

        # Prefill-only node, as the simulator: one output token per request.
        self._params = SamplingParams(max_tokens=1, detokenize=False)
        self.colocated = colocated
        self._sampling = SamplingParams
        self.by_vllm_id: dict[str, Request] = {}
        self.by_output_id: dict[str, tuple[Request, str]] = {}
        self.rows: dict[str, dict[str, Any]] = {}
        self.step_rows: list[tuple] = []
        self.first_step: dict[str, tuple[int, float]] = {}
        self.released: dict[str, float] = {}

    def warm_up(self) -> None:
        """One short request so the first measured step does not pay start-up costs; then clear
        the prefix cache, the hook's records and the policy's state."""
        from vllm.inputs import TokensPrompt

        self.llm.generate([TokensPrompt(prompt_token_ids=list(range(3, 3 + 64)))],
                          self._params, use_tqdm=False)
        self.engine.reset_prefix_cache()
        # The warm-up request went through the policy: start it afresh (k-LPM counts turns).
        self.sched.fairsim_reset()

    def submit(self, req: Request, arrival_time: float, released_s: float) -> None:
        """Add ``req`` to vLLM with ``arrival_time`` (vLLM's clock) released at ``released_s``
        (seconds from the trace start)."""
        from vllm.inputs import TokensPrompt

        self.released[req.request_id] = released_s
        params = self._params
        if self.colocated:  # decode to the trace's output length, never stopping early on EOS
            params = self._sampling(max_tokens=req.output_len, ignore_eos=True, detokenize=False)
        vid = self.engine.add_request(
            req.request_id, TokensPrompt(prompt_token_ids=prompt_tokens(req, self.salt)),
            params, arrival_time=arrival_time)
        self.by_vllm_id[vid] = req
        self.by_output_id[req.request_id] = (req, vid)

    def finished(self, out: Any) -> tuple[Request, str]:
        """``(request, internal id)`` of a finished ``RequestOutput`` (vLLM reports the id the
        caller passed; the scheduler knows the internal one with a random suffix)."""
        if out.request_id in self.by_vllm_id:
            return self.by_vllm_id[out.request_id], out.request_id
        return self.by_output_id[out.request_id]

    def batch_sums(self, batch: Sequence[tuple[str, int, int]]) -> tuple[int, int, float, int, int]:
        """``(tokens, requests, pair_tokens, decodes, decode_context)`` of ``batch`` (the hook's
        ``fairsim_last_batch``)."""
        tokens = 0
        pairs = 0.0
        decodes = decode_ctx = 0
        for vid, n, ctx in batch:
            tokens += n
            pairs += n * (ctx + n / 2)
            if n == 1 and ctx >= self.by_vllm_id[vid].prompt_len:
                decodes += 1
                decode_ctx += ctx
        return tokens, len(batch), pairs, decodes, decode_ctx

    def record_batch(self, step: int, start_s: float) -> tuple[int, int, float, int, int]:
        """``batch_sums`` of the last step; remembers first-scheduled steps."""
        batch = self.sched.fairsim_last_batch
        for vid, _, _ in batch:
            if vid not in self.first_step:
                self.first_step[vid] = (step, start_s)
        return self.batch_sums(batch)

    def table(self) -> pd.DataFrame:
        rows = []
        label_keys = sorted({k for r in self.requests for k in r.labels if not k.startswith("_")})
        named = label_columns(label_keys)  # trace_NAME for a label named like a column (the simulator's)
        by_req = {req.request_id: vid for vid, req in self.by_vllm_id.items()}
        for r in self.requests:
            row = dict(self.rows[r.request_id])
            vid = by_req[r.request_id]
            step, start = self.first_step.get(vid, (None, None))
            row["first_scheduled_step"] = step
            row["first_scheduled_s"] = start
            row["queue_delay_s"] = None if start is None else start - self.released[r.request_id]
            row["session_id"] = r.session_id
            row["after"] = r.after
            row["released_s"] = self.released[r.request_id]
            for k, column in named:
                row[column] = r.labels.get(k)
            rows.append(row)
        cols = ["request_id", "arrival_s", "prompt_tokens", "cached_tokens", "first_scheduled_s",
                "first_token_s", "ttft_s", "finish_s", "queue_delay_s", "first_scheduled_step",
                "finish_step", "preemptions", "session_id", "after", "released_s"] + [c for _, c in named]
        cols += [c for c in ("output_tokens", "e2e_s", "tpot_s") if rows and c in rows[0]]
        return pd.DataFrame(rows, columns=cols)

    def result(self, mode: str) -> LiveResult:
        name = getattr(self.sched.fairsim_policy, "name", self.config.policy)
        return LiveResult(self.table(), pd.DataFrame(self.step_rows, columns=STEP_COLUMNS), name,
                          mode, list(self.sched.fairsim_reorder_s), self.sched.fairsim_policy_errors)

    def close(self) -> None:
        """Shut the engine down now (the recorder, if any, writes its last rows and sidecar), then
        drop it."""
        shutdown_llm(self.llm)
        del self.sched, self.engine, self.llm
        gc.collect()


def replay_realtime(requests: Sequence[Request], config: LiveConfig, time_scale: float = 1.0,
                    salt: int = 0, colocated: bool = False, *, replay: str | None = None,
                    think_scale: float = 1.0) -> LiveResult:
    """Submit ``requests`` at their release times, wall seconds after the start.

    Args:
        requests: The trace (arrival times in seconds from its start).
        config: Engine and policy settings.
        time_scale: Multiplies arrival times (> 0; > 1 stretches the trace, lowering load); not
            think times.
        salt: Prompt synthesis salt (``fairsim.live.prompts``).
        replay: ``"open"``, ``"closed"`` or ``None`` (closed where the trace has sessions): a
            closed-loop turn is submitted when its predecessor finished in this engine plus
            ``delay_s * think_scale`` wall seconds.
        think_scale: Closed loop: multiplies ``delay_s`` (>= 0).

    Returns:
        A ``LiveResult`` whose ``requests`` table has scaled arrival times and wall-clock times.
        With ``colocated`` requests decode to ``output_len`` and the table also has
        ``output_tokens``, ``e2e_s`` and ``tpot_s`` (vLLM's ``(e2e - ttft) / (output_tokens - 1)``).

    Raises:
        ValueError: Duplicate ids, a non-positive ``time_scale``, a bad ``replay`` or
            ``think_scale``, or a request the cache cannot hold.
        SessionError: Closed loop: an unknown ``after`` or a cycle.
    """
    scaled = scale_time(requests, time_scale)
    arrivals = Arrivals([(r, r) for r in scaled], resolve_replay(requests, replay), think_scale)
    d = _Driver(scaled, config, salt, colocated)
    try:
        d.warm_up()
        step = 0
        t0 = time.time()
        while arrivals or d.engine.has_unfinished_requests():
            now = time.time() - t0
            for released, req, _ in arrivals.pop_due(now):
                d.submit(req, t0 + released, released)
            if not d.engine.has_unfinished_requests():
                nxt = arrivals.next_time()
                if nxt is None:
                    raise EngineInvariantError("closed-loop turns are held but no request is queued or running")
                time.sleep(max(0.0, nxt - (time.time() - t0)))
                continue
            interrupt.check()
            num_waiting = len(d.sched.waiting)
            start = time.time() - t0
            outputs = d.engine.step()
            end = time.time() - t0
            tokens, nreq, pairs, decodes, decode_ctx = d.record_batch(step, start)
            done = [out for out in outputs if out.finished]
            # Running after admission (the simulator's column): finished ones already left vLLM's list.
            d.step_rows.append((step, start, end - start, tokens, nreq, num_waiting,
                                len(d.sched.running) + len(done), pairs, decodes, decode_ctx))
            for out in done:
                req, _ = d.finished(out)
                m = out.metrics
                released = d.released[req.request_id]
                ttft = float(m.first_token_latency)
                d.rows[req.request_id] = {
                    "request_id": req.request_id, "arrival_s": req.arrival_time,
                    "prompt_tokens": req.prompt_len, "cached_tokens": int(out.num_cached_tokens),
                    "first_token_s": released + ttft, "ttft_s": ttft, "finish_s": end,
                    "finish_step": step, "preemptions": int(getattr(m, "num_preemptions", 0)),
                }
                if colocated:
                    o = len(out.outputs[0].token_ids)
                    e2e = end - released
                    d.rows[req.request_id].update(
                        output_tokens=o, e2e_s=e2e,
                        tpot_s=(e2e - ttft) / (o - 1) if o > 1 else float("nan"))
                arrivals.finished(req.request_id, end)
            step += 1
        return d.result("realtime")
    finally:
        d.close()


def replay_virtual(requests: Sequence[Request], config: LiveConfig, profile: Profile,
                   salt: int = 0, colocated: bool = False, *, replay: str | None = None,
                   think_scale: float = 1.0) -> LiveResult:
    """Run ``requests`` through a live engine on a virtual clock (decision-equivalence mode).

    Each step lasts ``profile.step_time`` of the batch vLLM scheduled (``(new, context)`` tokens
    per request); a request is added before the first step that starts at or after its arrival;
    the policy's ``now`` and vLLM's arrival times are on this clock. The engine's wall time does
    not matter, so the run is deterministic. ``replay``/``think_scale``: as in
    ``replay_realtime``, on the virtual clock (the simulator's ``Arrivals``, so release times
    match the simulator's wherever finish times do).

    Returns:
        A ``LiveResult`` with virtual times; ``cached_tokens`` is the prefix hit at first admission
        (as the simulator's), ``first_scheduled_step``/``finish_step`` count engine steps.

        With ``colocated``: requests decode to ``output_len``; ``first_token_s`` is the end of the
        step that produced the first token, ``finish_s``/``finish_step`` that of the last token.

    Raises:
        ValueError: Duplicate ids, a bad ``replay`` or ``think_scale``, or a request the cache
            cannot hold.
        SessionError: Closed loop: an unknown ``after`` or a cycle.
    """
    arrivals = Arrivals([(r, r) for r in requests], resolve_replay(requests, replay), think_scale)
    d = _Driver(requests, config, salt, colocated)
    first_token: dict[str, float] = {}

    def step_time(batch: Sequence[tuple[str, int, int]]) -> float:
        """The profile's time of a step that ran ``batch`` (the hook's ``fairsim_last_batch``)."""
        if colocated:
            tokens, nreq, pairs, decodes, decode_ctx = d.batch_sums(batch)
            return profile.step_time_colocated(tokens, pairs, nreq, decodes, decode_ctx)
        return profile.step_time((n, ctx) for _, n, ctx in batch)

    try:
        d.warm_up()
        vt = 0.0
        d.sched.fairsim_clock = lambda: vt
        # The recorder stamps first tokens inside step() (update_from_output), before vt moves on:
        # the end of the step is its start plus the profile's time of the batch just scheduled.
        d.sched.fairsim_step_end_clock = lambda: vt + step_time(d.sched.fairsim_last_batch)
        step = 0
        while arrivals or d.engine.has_unfinished_requests():
            for released, req, _ in arrivals.pop_due(vt):
                d.submit(req, released, released)
            if not d.engine.has_unfinished_requests():
                nxt = arrivals.next_time()
                if nxt is None:
                    raise EngineInvariantError("closed-loop turns are held but no request is queued or running")
                vt = nxt
                continue
            interrupt.check()
            num_waiting = len(d.sched.waiting)
            outputs = d.engine.step()
            tokens, nreq, pairs, decodes, decode_ctx = d.record_batch(step, vt)
            duration = step_time(d.sched.fairsim_last_batch)
            done = [out for out in outputs if out.finished]
            d.step_rows.append((step, vt, duration, tokens, nreq, num_waiting,
                                len(d.sched.running) + len(done), pairs, decodes, decode_ctx))
            end = vt + duration
            if colocated:
                for out in outputs:
                    if out.request_id not in first_token and out.outputs and out.outputs[0].token_ids:
                        first_token[out.request_id] = end
            for out in done:
                req, vid = d.finished(out)
                admitted = d.sched.fairsim_admissions.get(vid)
                d.rows[req.request_id] = {
                    "request_id": req.request_id, "arrival_s": req.arrival_time,
                    "prompt_tokens": req.prompt_len,
                    "cached_tokens": admitted[1] if admitted else int(out.num_cached_tokens),
                    "first_token_s": end, "ttft_s": end - d.released[req.request_id],
                    "finish_s": end, "finish_step": step,
                    "preemptions": int(getattr(out.metrics, "num_preemptions", 0) or 0),
                }
                if colocated:
                    first = first_token.get(out.request_id, end)
                    d.rows[req.request_id].update(first_token_s=first, ttft_s=first - d.released[req.request_id],
                                                  output_tokens=len(out.outputs[0].token_ids))
                arrivals.finished(req.request_id, end)
            vt = end
            step += 1
        return d.result("virtual")
    finally:
        d.close()
