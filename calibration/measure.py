"""Measure step times and ``T_idle(L)`` on a live vLLM engine (COSTMODEL.md, steps 1-3).

The engine runs with the fairsim hook under FCFS (the hook does not change FCFS's order; it
reports each step's batch, which lets every measured step be checked to hold exactly the
intended requests). Prompts are token ids; every measured prompt is unique so nothing hits the
cache except the context that was deliberately warmed.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from calibration.fit import StepSample
from fairsim import interrupt
from fairsim.live.engine import live_scheduler
from fairsim.live.prompts import block_tokens


@dataclass(frozen=True)
class Grid:
    """What to measure (tokens).

    Attributes:
        new_tokens: Total new tokens per step ``sum n_i`` (each <= the step budget).
        context_tokens: Cached context per request ``k_i`` (multiples of the block size).
        requests_per_step: Requests sharing the step (the new tokens are split evenly).
        idle_lengths: Prompt lengths ``L`` for ``T_idle``.
        decodes: Decoding requests per decode-heavy step (``()`` = no decode grid).
        decode_contexts: Prompt length of each decoding request, tokens (its context).
        mixed_new_tokens: New prefill tokens added to a decode step (0 = decode only, else a
            mixed step: the decodes plus one cold prompt of that many tokens).
        repeats: Measurements per point.
        statistic: ``"median"`` (COSTMODEL.md) or ``"min"`` of the repeats. ``min`` estimates
            the intrinsic cost on a machine shared with other work, where interference only
            ever adds time.
    """

    new_tokens: tuple[int, ...] = (64, 512, 1024, 2048)
    context_tokens: tuple[int, ...] = (0, 1024, 4096)
    requests_per_step: tuple[int, ...] = (1, 4)
    idle_lengths: tuple[int, ...] = (128, 512, 1024, 2048, 4096, 8192)
    repeats: int = 3
    statistic: str = "median"
    decodes: tuple[int, ...] = (1, 8, 32)
    decode_contexts: tuple[int, ...] = (128, 1024, 4096)
    mixed_new_tokens: tuple[int, ...] = (0, 512)

    def __post_init__(self) -> None:
        if self.statistic not in ("median", "min"):
            raise ValueError(f"statistic={self.statistic!r}: use 'median' or 'min'")
        if self.repeats < 1:
            raise ValueError(f"repeats={self.repeats}: need >= 1")

    def reduce(self, times: Sequence[float]) -> float:
        """The kept value of repeated measurements, seconds."""
        return min(times) if self.statistic == "min" else statistics.median(times)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"new_tokens": list(self.new_tokens), "context_tokens": list(self.context_tokens),
                "requests_per_step": list(self.requests_per_step),
                "idle_lengths": list(self.idle_lengths), "repeats": self.repeats,
                "statistic": self.statistic, "decodes": list(self.decodes),
                "decode_contexts": list(self.decode_contexts),
                "mixed_new_tokens": list(self.mixed_new_tokens)}


class Profiler:
    """Drives one live engine (``vllm.LLM`` with the hook) to measure steps.

    Args:
        llm: A ``vllm.LLM`` built by ``fairsim.live.engine.make_llm`` (in-process engine core).
        block_size: KV block size of the engine, tokens.
    """

    def __init__(self, llm: Any, block_size: int) -> None:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        self.llm = llm
        self.engine = llm.llm_engine
        self.sched = live_scheduler(llm)
        self.block_size = block_size
        self._prompt = TokensPrompt
        self._params = SamplingParams(max_tokens=1, detokenize=False)
        self._serial = 0

    def _unique(self, n: int) -> list[int]:
        self._serial += 1
        return block_tokens(f"calib-{self._serial}-{time.time_ns()}", n)

    def _step(self) -> Any:
        """One engine step; first a Ctrl-C that a finaliser swallowed (``fairsim.interrupt``)."""
        interrupt.check()
        return self.engine.step()

    def _run_to_completion(self) -> None:
        while self.engine.has_unfinished_requests():
            self._step()

    def warm_up(self, steps: int = 3) -> None:
        """A few full steps so lazy initialisation is not measured."""
        for _ in range(steps):
            self.engine.add_request(f"warm-{self._serial}", self._prompt(prompt_token_ids=self._unique(512)),
                                    self._params)
            self._serial += 1
            self._run_to_completion()

    def step_sample(self, new_tokens: int, context: int, requests: int, repeats: int) -> tuple[StepSample, list[float]]:
        """Median time of a step computing ``new_tokens`` split over ``requests`` requests, each
        on top of ``context`` cached tokens.

        Raises:
            RuntimeError: The measured step did not hold exactly the intended batch (e.g. the
                budget or ``max_num_seqs`` is too small for the grid point).
        """
        per = [new_tokens // requests + (1 if i < new_tokens % requests else 0) for i in range(requests)]
        times = []
        batch: list[tuple[str, int, int]] = []
        for _ in range(repeats):
            self.engine.reset_prefix_cache()
            contexts = [self._unique(context) for _ in range(requests)] if context else [[]] * requests
            if context:
                for ctx in contexts:  # cache the contexts: prompt = context + 1 token
                    self.engine.add_request(f"ctx-{self._serial}", self._prompt(prompt_token_ids=ctx + [4]),
                                            self._params)
                    self._serial += 1
                self._run_to_completion()
            for ctx, n in zip(contexts, per):
                self.engine.add_request(f"m-{self._serial}", self._prompt(prompt_token_ids=ctx + self._unique(n)),
                                        self._params)
                self._serial += 1
            t0 = time.perf_counter()
            self._step()
            times.append(time.perf_counter() - t0)
            batch = list(self.sched.fairsim_last_batch)
            got = sorted((n, ctx) for _, n, ctx in batch)
            want = sorted((n, context) for n in per)
            if got != want:
                raise RuntimeError(
                    f"measured step held {got}, wanted {want}: raise the budget/max_num_seqs or "
                    f"shrink the grid")
            self._run_to_completion()
        return StepSample(tuple(per), tuple([context] * requests), statistics.median(times)), times

    def decode_sample(self, decodes: int, context: int, new_tokens: int, budget: int) -> tuple[StepSample, float]:
        """Time one step holding ``decodes`` decoding requests (``context``-token prompts) and,
        if ``new_tokens`` > 0, one cold prompt of ``new_tokens`` tokens (a mixed step).

        The decoding requests are prefilled first (unique prompts, ``ignore_eos``) and stepped
        until a step holds exactly them, all decoding; then the cold prompt is added and the next
        step is timed. The sample's contexts are those the engine reported for the timed step.

        Raises:
            RuntimeError: The timed step did not hold exactly the intended batch.
        """
        from vllm import SamplingParams

        self.engine.reset_prefix_cache()
        # Enough output tokens to stay decoding until the last prompt's prefill is done.
        max_tokens = -(-decodes * context // max(1, budget - decodes)) + 16
        params = SamplingParams(max_tokens=max_tokens, ignore_eos=True, detokenize=False)
        ids = []
        for _ in range(decodes):
            rid = f"dec-{self._serial}"
            self._serial += 1
            self.engine.add_request(rid, self._prompt(prompt_token_ids=self._unique(context)), params)
            ids.append(rid)
        for _ in range(max_tokens):
            self._step()
            last = self.sched.fairsim_last_batch
            if len(last) == decodes and all(n == 1 for _, n, _ in last):
                break
        else:
            raise RuntimeError(f"{decodes} requests of {context} tokens never all decoded in one step")
        if new_tokens:
            self.engine.add_request(f"mix-{self._serial}", self._prompt(prompt_token_ids=self._unique(new_tokens)),
                                    self._params)
            self._serial += 1
        t0 = time.perf_counter()
        self._step()
        seconds = time.perf_counter() - t0
        batch = list(self.sched.fairsim_last_batch)
        dec = [(n, ctx) for _, n, ctx in batch if n == 1 and ctx >= context]
        rest = sorted((n, ctx) for _, n, ctx in batch if not (n == 1 and ctx >= context))
        want_rest = [(new_tokens, 0)] if new_tokens else []
        self.engine.abort_request(ids)
        self._run_to_completion()
        if len(dec) != decodes or rest != want_rest:
            raise RuntimeError(f"measured decode step held {sorted(dec)} + {rest}, wanted {decodes} decodes "
                               f"+ {want_rest}: raise the budget/max_num_seqs or shrink the grid")
        ns = tuple([1] * decodes + [n for n, _ in rest])
        ks = tuple([ctx for _, ctx in dec] + [ctx for _, ctx in rest])
        return StepSample(ns, ks, seconds, tuple([True] * decodes + [False] * len(rest))), seconds

    def idle_prefill(self, length: int, repeats: int) -> tuple[float, list[float]]:
        """Median TTFT (s) of a cold ``length``-token prompt alone on the idle engine."""
        times = []
        for _ in range(repeats):
            self.engine.reset_prefix_cache()
            self.engine.add_request(f"idle-{self._serial}", self._prompt(prompt_token_ids=self._unique(length)),
                                    self._params, arrival_time=time.time())
            self._serial += 1
            done = []
            while self.engine.has_unfinished_requests():
                done += [o for o in self._step() if o.finished]
            times.append(float(done[0].metrics.first_token_latency))
        return statistics.median(times), times


def measure(profiler: Profiler, grid: Grid, budget: int,
            progress: Any = None) -> tuple[list[StepSample], dict[int, float], dict[str, Any]]:
    """Run the grid and the ``T_idle`` lengths.

    Returns:
        ``(samples, idle, raw)``: step samples in grid order; ``{L: median seconds}``; raw
        measurements (every repeat) for the profile's metadata.

    Raises:
        ValueError: A grid value above the budget or not block-aligned.
    """
    for n in grid.new_tokens:
        if n > budget or n < 1:
            raise ValueError(f"grid new_tokens={n}: need 1..budget ({budget})")
    for c in grid.context_tokens:
        if c % profiler.block_size:
            raise ValueError(f"grid context_tokens={c}: need a multiple of the block size {profiler.block_size}")
    if grid.decodes and max(grid.decodes) + 1 > budget:
        raise ValueError(f"grid decodes={max(grid.decodes)}: need decodes + 1 <= budget ({budget})")
    for m in grid.mixed_new_tokens:
        if m < 0 or (grid.decodes and m + max(grid.decodes) > budget):
            raise ValueError(f"grid mixed_new_tokens={m}: need 0..budget - decodes")
    points = [(n, c, r) for c in grid.context_tokens for n in grid.new_tokens
              for r in grid.requests_per_step if r <= n]
    decode_points = [(r, c, m) for c in grid.decode_contexts for r in grid.decodes
                     for m in grid.mixed_new_tokens]
    decode_times: list[list[float]] = [[] for _ in decode_points]
    decode_batches: list[StepSample | None] = [None] * len(decode_points)
    # Repeats are interleaved (one pass over the whole grid per repeat) rather than back to back,
    # so a burst of interference from other work on the machine hits one repeat of many points
    # instead of every repeat of one point.
    step_times: list[list[float]] = [[] for _ in points]
    batches: list[StepSample | None] = [None] * len(points)
    idle_times: dict[int, list[float]] = {L: [] for L in grid.idle_lengths}
    for rep in range(grid.repeats):
        for i, (n, c, r) in enumerate(points):
            sample, times = profiler.step_sample(n, c, r, 1)
            step_times[i] += times
            batches[i] = sample
            if progress:
                progress(f"pass {rep + 1}/{grid.repeats}, step {i + 1}/{len(points)}: n={n} k={c} r={r}: "
                         f"{1e3 * times[0]:.1f} ms")
        for i, (r, c, m) in enumerate(decode_points):
            sample, seconds = profiler.decode_sample(r, c, m, budget)
            decode_times[i].append(seconds)
            decode_batches[i] = sample  # contexts of the last repeat (they differ by a token or two)
            if progress:
                progress(f"pass {rep + 1}/{grid.repeats}, decode step {i + 1}/{len(decode_points)}: "
                         f"{r} decodes at {c} + {m} new: {1e3 * seconds:.1f} ms")
        for L in grid.idle_lengths:
            _, times = profiler.idle_prefill(L, 1)
            idle_times[L] += times
            if progress:
                progress(f"pass {rep + 1}/{grid.repeats}, T_idle({L}): {1e3 * times[0]:.1f} ms")
    samples: list[StepSample] = []
    raw_steps: list[dict[str, Any]] = []
    for b, times in zip(batches, step_times):
        if b is None:
            raise RuntimeError("calibration bug: a grid point was never measured")
        samples.append(StepSample(b.new_tokens, b.context_tokens, grid.reduce(times)))
        raw_steps.append({"new_tokens": list(b.new_tokens), "context_tokens": list(b.context_tokens),
                          "seconds": times})
    for b, times in zip(decode_batches, decode_times):
        assert b is not None
        samples.append(StepSample(b.new_tokens, b.context_tokens, grid.reduce(times), b.decoding))
        raw_steps.append({"new_tokens": list(b.new_tokens), "context_tokens": list(b.context_tokens),
                          "decoding": list(b.decoding), "seconds": times})
    idle = {L: grid.reduce(times) for L, times in idle_times.items()}
    raw_idle = [{"prompt_tokens": L, "seconds": times} for L, times in idle_times.items()]
    return samples, idle, {"steps": raw_steps, "idle_prefill": raw_idle}


def monotone(values: Sequence[float]) -> list[float]:
    """Running maximum: ``T_idle`` must not decrease with ``L`` (timing noise can make it)."""
    out: list[float] = []
    for v in values:
        out.append(max(v, out[-1]) if out else v)
    return out
