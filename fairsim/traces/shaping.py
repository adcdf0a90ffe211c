"""Load shaping: scale arrival times, take a window, and state the offered load."""

from __future__ import annotations

import math
from collections.abc import Sequence

from fairsim.costmodel import Profile
from fairsim.record import record
from fairsim.traces.fastreq import with_arrival
from fairsim.types import Request


def scale_time(requests: Sequence[Request], factor: float) -> list[Request]:
    """Multiply every arrival time by ``factor`` (> 1 stretches: lower load; < 1 compresses).

    Raises:
        ValueError: ``factor <= 0``.
    """
    if not (factor > 0 and math.isfinite(factor)):
        raise ValueError(f"--time-scale {factor}: need a finite factor > 0")
    if factor == 1:
        return list(requests)
    return [with_arrival(r, r.arrival_time * factor) for r in requests]


def nothing_in_window(requests: Sequence[Request], start_s: float = 0.0, end_s: float | None = None) -> str:
    """The message for a ``window`` that kept no request: the options, and where the trace's
    arrivals lie (seconds, before any time scale), so the user sees which bound missed."""
    text = "no requests left after --window-start/--window-end/--max-requests"
    if not requests:
        return text
    first, last = min(r.arrival_time for r in requests), max(r.arrival_time for r in requests)
    given = f"--window-start {start_s:g}" + (f" --window-end {end_s:g}" if end_s is not None else "")
    return f"{text}: {given} keeps none of the trace's arrivals, which run from {first:g} s to {last:g} s"


def window(requests: Sequence[Request], start_s: float = 0.0, end_s: float | None = None,
           max_requests: int | None = None) -> list[Request]:
    """Requests arriving in ``[start_s, end_s)`` (seconds), rebased so ``start_s`` becomes 0.

    Args:
        requests: Requests sorted by arrival.
        start_s: Window start, seconds (>= 0).
        end_s: Window end, seconds (None: to the end).
        max_requests: Keep at most this many (the first ones).

    Raises:
        ValueError: ``start_s < 0``, ``end_s <= start_s`` or ``max_requests < 1``.
    """
    if end_s is None and start_s < 0:
        raise ValueError(f"--window-start {start_s:g}: need a time >= 0 s")
    if start_s < 0 or (end_s is not None and end_s <= start_s):
        raise ValueError(f"--window-start {start_s:g} --window-end {end_s:g}: the window "
                         f"[{start_s:g}, {end_s:g}) s is empty or negative")
    if max_requests is not None and max_requests < 1:
        raise ValueError(f"--max-requests {max_requests}: need an integer >= 1")
    out = [
        with_arrival(r, r.arrival_time - start_s) if start_s else r
        for r in requests
        if r.arrival_time >= start_s and (end_s is None or r.arrival_time < end_s)
    ]
    return out[:max_requests] if max_requests is not None else out


@record(frozen=True, slots=True)
class OfferedLoad:
    """What a trace asks of an engine, next to what the engine can give.

    Attributes:
        requests: Requests in the trace.
        span_s: Last arrival minus first arrival, seconds.
        prompt_tokens_per_s: Offered prompt tokens per second over the span.
        ideal_uncached_tokens_per_s: Same, minus the prefix hits an infinite cache would give
            (first-seen prefixes computed once).
        capacity_tokens_per_s: Cold prefill throughput at this trace's prompt lengths:
            ``sum(L) / sum(T_idle(L))`` (attention over earlier chunks included).
        load: ``prompt_tokens_per_s / capacity`` (no reuse).
        ideal_load: ``ideal_uncached_tokens_per_s / capacity`` (perfect reuse): the real
            utilisation lies between the two.
    """

    requests: int
    span_s: float
    prompt_tokens_per_s: float
    ideal_uncached_tokens_per_s: float
    capacity_tokens_per_s: float
    load: float
    ideal_load: float

    def describe(self) -> str:
        """One line for the CLI."""
        reqs = f"{self.requests} request{'' if self.requests == 1 else 's'}"
        if not self.span_s > 0:
            return (f"offered load: {reqs} arriving at one instant "
                    f"(no rate to state); capacity {self.capacity_tokens_per_s:,.0f} tokens/s")
        return (
            f"offered load: {reqs} over {self.span_s:.1f} s, "
            f"{self.prompt_tokens_per_s:,.0f} prompt tokens/s "
            f"({self.ideal_uncached_tokens_per_s:,.0f} after ideal reuse) vs capacity "
            f"{self.capacity_tokens_per_s:,.0f} tokens/s -> load {self.load:.2f} "
            f"(ideal reuse {self.ideal_load:.2f})"
        )


def offered_load(requests: Sequence[Request], profile: Profile) -> OfferedLoad:
    """Compute the ``OfferedLoad`` of ``requests`` on ``profile``'s engine.

    Capacity here is ``sum(L) / sum(T_idle(L))``: each prompt alone on an idle engine. The named
    real-trace scenarios (``fairsim.traces.real``, experiments E1-E4) are scaled with it. The CLI's
    offered-load line uses ``fairsim.traces.offered`` instead, which packs prompts into
    budget-sized steps (best-case batching).

    Raises:
        ValueError: An empty trace.
    """
    if not requests:
        raise ValueError("offered_load of an empty trace")
    arrivals = [r.arrival_time for r in requests]
    span = max(arrivals) - min(arrivals)
    seen: set[int] = set()
    total = uncached = 0
    for r in sorted(requests, key=lambda r: r.arrival_time):
        hit = 0
        for x in r.block_hashes:
            if x not in seen:
                break
            hit += 1
        hit_tokens = min(hit * r.hash_block_size, r.prompt_len - 1)
        seen.update(r.block_hashes)
        total += r.prompt_len
        uncached += r.prompt_len - hit_tokens
    span_eff = span if span > 0 else float("nan")
    cap = total / sum(profile.idle_prefill_time(r.prompt_len) for r in requests)
    return OfferedLoad(
        requests=len(requests),
        span_s=span,
        prompt_tokens_per_s=total / span_eff,
        ideal_uncached_tokens_per_s=uncached / span_eff,
        capacity_tokens_per_s=cap,
        load=total / span_eff / cap,
        ideal_load=uncached / span_eff / cap,
    )
