"""Offered load at the engine's token budget: mean, busiest window, and the time scale for a target.

The load of a trace is the engine's best-case busy time for its prefill work divided by the time
over which that work arrives. Best case: every step is filled to the token budget ``B`` (chunked
prefill packs chunks of several requests into one step) and each request is split into as few
chunks as its length allows. With the cost model's step time
``a + b·Σn + k·Σn(k+n/2) + d·#requests`` (``fairsim.costmodel``) summed over those steps::

    busy(R) = a · ceil(Σ c_i / B)  +  b · Σ c_i  +  k · Σ ((h_i + c_i)² − h_i²) / 2  +  d · Σ ceil(c_i / B)

for requests ``R`` computing ``c_i`` new tokens on top of ``h_i`` cached ones. The attention term
does not depend on how a request is chunked (the pairs of all its chunks sum to
``((h + c)² − h²) / 2``); the per-step term ``a`` counts the fewest steps that can hold the tokens;
the per-request term ``d`` counts each request once per step it needs at least. No real schedule is
faster, so the load is a lower bound on the engine's utilisation by prefill.

Colocated mode (``--mode colocated``) adds each request's decode work: ``o_i - 1`` decode tokens
(the first output token comes from the last prefill step) share the step budget, so they join the
``ceil(Σ / B)`` step count, and cost, from ``Profile.step_time_colocated`` summed over the decode
steps of request ``i`` (context ``L_i + g - 1`` at its ``g``-th decode)::

    decode_s(i) = (o_i - 1)·(b + d + f + k/2) + (k + e) · ((o_i - 1)·L_i + (o_i - 1)(o_i - 2) / 2)

The weight-read floor ``min_step_s`` is not counted (the bound stays a lower bound).

- ``load = busy(all, h = 0) / span`` (no reuse), ``ideal_load`` the same with ``h_i`` the prefix an
  infinite cache would hold (the whole hash blocks seen earlier in the trace that fit in
  ``L - 1`` tokens, as vLLM's prefix hits); the real load with a finite cache lies between the two.
- The busiest window: ``max over t of busy(requests arriving in [t, t + W)) / W`` (``W`` =
  ``--load-window``, default 60 s, at least ``MIN_LOAD_WINDOW_S`` = 1 ms; the maximum is reached
  at a window starting at an arrival), without reuse; its ideal-reuse load is that same window's.
  A trace whose span is shorter than ``W`` is its own busiest
  window: its peak load is the mean load (its work over its span, not over ``W``, which would
  dilute it below the mean).
- Load is inversely proportional to the time scale, so the scale that gives load ``X`` is
  ``load(scale 1) / X``.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Sequence
from itertools import accumulate
from operator import attrgetter
from typing import TYPE_CHECKING

from fairsim.compiled import compiled_twin
from fairsim.costmodel import Profile
from fairsim.npfloat import float_sum
from fairsim.record import field_names, record
from fairsim.types import Request

if TYPE_CHECKING:
    from types import ModuleType

    import numpy as np


def compiled_kernel() -> ModuleType | None:
    """The compiled twin of this module's loops (``fairsim/traces/_offered_c.pyx``, built at
    install by ``setup.py``; same floats to the bit: ``tests/test_offered_compiled.py``), or None
    where it was not built or ``FAIRSIM_PURE_PYTHON=1``: the Python loops here (the reference) run."""
    return compiled_twin("fairsim.traces._offered_c")


DEFAULT_LOAD_WINDOW_S = 60.0
"""Length of the busiest-window load, seconds."""

MIN_LOAD_WINDOW_S = 1e-3
"""Shortest ``--load-window`` accepted, seconds: below about one engine step (milliseconds on the
shipped profiles) a window holds a fraction of a step's work and its "load" measures nothing."""


@record(frozen=True, slots=True)
class PrefillWork:
    """Per-request prefill work of a trace, in arrival order (arrays of shape ``(n,)``).

    Attributes:
        arrival_s: Arrival times, seconds, non-decreasing.
        new_tokens: Tokens to compute ``c_i``.
        pairs: Attention pairs ``((h_i + c_i)² − h_i²) / 2``.
        chunks: Fewest chunks ``ceil(c_i / B)`` at budget ``B``.
        decode_tokens: Decode tokens ``o_i - 1`` (zeros unless colocated).
        decode_s: Decode seconds ``decode_s(i)`` of the module docstring (zeros unless colocated).
    """

    arrival_s: np.ndarray
    new_tokens: np.ndarray
    pairs: np.ndarray
    chunks: np.ndarray
    decode_tokens: np.ndarray
    decode_s: np.ndarray


def prefill_work(requests: Sequence[Request], budget_tokens: int, ideal_reuse: bool,
                 profile: Profile | None = None, colocated: bool = False) -> PrefillWork:
    """The ``PrefillWork`` of ``requests`` at budget ``budget_tokens`` (float64 arrays).

    Args:
        requests: The trace (any order; sorted by arrival here).
        budget_tokens: Step token budget ``B`` (>= 1).
        ideal_reuse: Subtract the prefix an infinite cache would hold (hash blocks seen in an
            earlier request), at most ``L - 1`` tokens, as vLLM always computes the last token.
        profile: The cost model, needed for the decode seconds when ``colocated``.
        colocated: Count each request's decode work too (module docstring).

    Raises:
        ValueError: ``budget_tokens < 1``.
    """
    import numpy as np

    work = _both_works(requests, budget_tokens, profile, colocated, ideal_reuse)[-1]
    return PrefillWork(**{name: np.asarray(getattr(work, name), dtype=np.float64) for name in field_names(work)})


def _both_works(requests: Sequence[Request], budget_tokens: int, profile: Profile | None, colocated: bool,
                ideal_reuse: bool = True, kernel: ModuleType | None = None) -> tuple[PrefillWork, ...]:
    """``(cold,)`` or ``(cold, ideal)``: ``prefill_work`` without and with ideal reuse, the arrival
    order, arrival times, lengths and decode work computed once for both (``offered_load``).

    Its fields are lists of floats, each entry the float numpy's element-wise operations give
    (the same IEEE operations in the same order; ``x * x`` for numpy's ``x ** 2``), so a run
    computes its offered load without numpy (start-up; ``prefill_work`` makes the arrays).
    ``kernel`` (``compiled_kernel()``) runs the lengths and arrival times, the walk and the work
    lists as typed loops (the same floats); None runs the Python loops here.

    Raises:
        ValueError: ``budget_tokens < 1``; ``colocated`` without ``profile``.
    """
    if budget_tokens < 1:
        raise ValueError(f"--budget {budget_tokens}: need >= 1 token per step")
    ordered = sorted(requests, key=attrgetter("arrival_time"))  # the same keys, no Python call
    n = len(ordered)
    if kernel is not None:
        lengths, arrival = kernel.columns(ordered)
    else:
        lengths = [float(r.prompt_len) for r in ordered]
        arrival = [float(r.arrival_time) for r in ordered]
    decode_tokens = decode_s = [0.0] * n
    if colocated:
        if profile is None:
            raise ValueError("prefill_work(colocated=True) needs the profile")
        p = profile
        per_decode = p.b_s_per_token + p.d_s_per_request + p.f_s_per_decode + p.k_s_per_pair / 2
        per_ctx = p.k_s_per_pair + p.e_s_per_decode_ctx_token
        decode_tokens = [float(r.output_len - 1) for r in ordered]
        # ctx = o1 * L + o1 * (o1 - 1) / 2: the sum over g = 1..o-1 of L + g - 1
        decode_s = [o1 * per_decode + per_ctx * (o1 * L + o1 * (o1 - 1) / 2.0)
                    for o1, L in zip(decode_tokens, lengths)]

    def work(hits: list[float]) -> PrefillWork:
        if kernel is not None:
            new, pairs, chunks = kernel.work_lists(lengths, hits, budget_tokens)
            return PrefillWork(arrival_s=arrival, new_tokens=new, pairs=pairs, chunks=chunks,
                               decode_tokens=decode_tokens, decode_s=decode_s)
        new = [L - h for L, h in zip(lengths, hits)]
        return PrefillWork(arrival_s=arrival, new_tokens=new,
                           pairs=[(L * L - h * h) / 2.0 for L, h in zip(lengths, hits)],
                           chunks=[float(math.ceil(c / budget_tokens)) for c in new],
                           decode_tokens=decode_tokens, decode_s=decode_s)

    cold = work([0.0] * n)
    if not ideal_reuse:
        return (cold,)
    if kernel is not None:
        hits = kernel.ideal_hits(ordered)
    else:
        seen: set[int] = set()
        hits = [0.0] * n
        for i, r in enumerate(ordered):
            ids = r.block_hashes
            hit = 0
            for x in ids:
                if x not in seen:
                    break
                hit += 1
            # Whole blocks within L - 1 tokens: vLLM computes at least a prompt's last token,
            # and a hit is whole blocks (``fairsim.sim.keys``; the engine's hits are the same).
            hits[i] = float(min(hit, (r.prompt_len - 1) // r.hash_block_size) * r.hash_block_size)
            seen.update(ids[hit:] if hit else ids)  # its first ``hit`` ids are in already
    # No hit anywhere (a trace without prefix identity, Azure's): the ideal work is the cold
    # work, list for list, and offered_load reads it once.
    return cold, (work(hits) if any(hits) else cold)


def busy_time(profile: Profile, budget_tokens: int, new_tokens: np.ndarray | float,
              pairs: np.ndarray | float, chunks: np.ndarray | float,
              decode_tokens: np.ndarray | float = 0.0, decode_s: np.ndarray | float = 0.0) -> np.ndarray | float:
    """Best-case busy seconds for work totals (scalars or arrays): the module docstring's ``busy``
    (plus the decode work in colocated mode). Python floats in, a Python float out (no numpy)."""
    if type(new_tokens) is float and type(decode_tokens) is float:
        steps = float(math.ceil((new_tokens + decode_tokens) / budget_tokens))
    else:
        import numpy as np

        steps = np.ceil((np.asarray(new_tokens, dtype=np.float64) + decode_tokens) / budget_tokens)
    return (profile.a_s * steps + profile.b_s_per_token * new_tokens
            + profile.k_s_per_pair * pairs + profile.d_s_per_request * chunks + decode_s)


def _window_ends(t: list[float], window_s: float, kernel: ModuleType | None = None) -> list[int]:
    """For each arrival ``t[i]`` (non-decreasing), the index of the first arrival at or after
    ``t[i] + window_s`` (``np.searchsorted(t, t + window_s, side="left")``; ``kernel``: the
    compiled forward scan, the same indices)."""
    if kernel is not None:
        return kernel.window_ends(t, window_s)
    return [bisect_left(t, ti + window_s) for ti in t]


def _busiest(work: PrefillWork, profile: Profile, budget: int, window_s: float,
             ends: list[int] | None = None, kernel: ModuleType | None = None) -> tuple[float, float, int]:
    """``(load, start_s, i)`` of the busiest ``window_s``-second window: the first window, starting
    at an arrival (``i``, its first request), whose ``busy_time`` is the largest (numpy's
    ``argmax``: a NaN wins).

    The window sums are differences of running sums (``np.cumsum``'s, in order) at the
    arrivals ``[t, t + W)`` (``ends``: ``_window_ends``, computed here when not given).
    ``kernel`` (``compiled_kernel()``): the same loop typed, the same floats."""
    t = work.arrival_s
    if ends is None:
        ends = _window_ends(t, window_s, kernel)
    if kernel is not None:
        best, top = kernel.busiest(work.new_tokens, work.pairs, work.chunks, work.decode_tokens, work.decode_s,
                                   ends, profile.a_s, profile.b_s_per_token, profile.k_s_per_pair,
                                   profile.d_s_per_request, budget)
        return top / window_s, t[best], best
    cn, cp, cc, cdt, cds = ([0.0, *accumulate(x)]
                            for x in (work.new_tokens, work.pairs, work.chunks, work.decode_tokens, work.decode_s))
    a, b, k, d = profile.a_s, profile.b_s_per_token, profile.k_s_per_pair, profile.d_s_per_request
    ceil = math.ceil
    best, top = 0, -math.inf
    for i, e in enumerate(ends):
        new = cn[e] - cn[i]
        busy = (a * float(ceil((new + (cdt[e] - cdt[i])) / budget)) + b * new + k * (cp[e] - cp[i])
                + d * (cc[e] - cc[i]) + (cds[e] - cds[i]))
        if busy > top:
            best, top = i, busy
        elif busy != busy:  # NaN: numpy's argmax stops at the first
            best, top = i, busy
            break
    return top / window_s, t[best], best


def _window_load(work: PrefillWork, profile: Profile, budget: int, window_s: float, i: int, e: int) -> float:
    """The load of the window of requests ``[i, e)`` of ``work`` over ``window_s`` seconds, as
    ``_busiest`` computes it for that window (the same running sums, so the same float)."""
    cn, cp, cc, cdt, cds = ([0.0, *accumulate(x)]
                            for x in (work.new_tokens, work.pairs, work.chunks, work.decode_tokens, work.decode_s))
    new = cn[e] - cn[i]
    busy = (profile.a_s * float(math.ceil((new + (cdt[e] - cdt[i])) / budget)) + profile.b_s_per_token * new
            + profile.k_s_per_pair * (cp[e] - cp[i]) + profile.d_s_per_request * (cc[e] - cc[i])
            + (cds[e] - cds[i]))
    return busy / window_s


def _whole_sum(values: list[float]) -> float:
    """numpy's sum of non-negative multiples of 0.5 (tokens, chunks, pairs ``(L² - h²) / 2``):
    below ``2**52`` every partial sum of any order is exact, so numpy's pairwise sum is the
    exact sum, which ``math.fsum`` gives at C speed; above it, numpy's own order (``float_sum``)."""
    total = math.fsum(values)
    return total if total < 2.0**52 else float_sum(values)


@record(frozen=True, slots=True)
class OfferedLoad:
    """Prefill work a trace offers, next to the engine's best-case throughput at its budget.

    Attributes:
        requests: Requests in the trace.
        span_s: Last arrival minus first arrival, seconds.
        budget_tokens: Step token budget the load is computed at.
        prompt_tokens_per_s: Prompt tokens per second over the span.
        ideal_uncached_tokens_per_s: Same, minus the prefix hits of an infinite cache.
        busy_s: Best-case busy seconds for all prompts computed cold (module docstring).
        ideal_busy_s: Same with ideal reuse.
        capacity_tokens_per_s: Best-case cold prefill throughput at this trace's prompt lengths:
            prompt tokens / ``busy_s``.
        load: ``busy_s / span_s`` (no reuse); NaN when all requests arrive at one instant.
        ideal_load: ``ideal_busy_s / span_s`` (perfect reuse).
        window_s: Length of the busiest window, seconds.
        peak_load, peak_ideal_load: Load of the busiest window without reuse, and of the same
            window with ideal reuse; the mean loads when the trace is shorter than the window.
        peak_start_s: Start of the busiest (no-reuse) window, seconds.
        colocated: True when decode work is counted (``--mode colocated``).
    """

    requests: int
    span_s: float
    budget_tokens: int
    prompt_tokens_per_s: float
    ideal_uncached_tokens_per_s: float
    busy_s: float
    ideal_busy_s: float
    capacity_tokens_per_s: float
    load: float
    ideal_load: float
    window_s: float
    peak_load: float
    peak_ideal_load: float
    peak_start_s: float
    colocated: bool = False

    def describe(self, what: str = "offered load", seconds: str = "s") -> str:
        """One line for the CLI, starting ``WHAT:``.

        Args:
            what: What the figures are, e.g. the load a closed-loop replay delivered.
            seconds: The unit printed after every time and length, naming its clock where a
                command shows two (``fairsim accept``: ``"simulated s"``, as its windows are in
                trace seconds).
        """
        u = seconds
        kind = "prefill capacity (decode counted)" if self.colocated else "prefill capacity"
        cap = (f"best-case {kind} {self.capacity_tokens_per_s:,.0f} tokens/s "
               f"(budget {self.budget_tokens})")
        reqs = f"{self.requests} request{'' if self.requests == 1 else 's'}"
        if not self.span_s > 0:
            return f"{what}: {reqs} arriving at one instant (no rate to state); {cap}"
        short = (f" (the trace is shorter than the window: the whole {self.span_s:.3g} {u} trace)"
                 if self.span_s < self.window_s else "")
        return (
            f"{what}: {reqs} over {self.span_s:.1f} {u}, "
            f"{self.prompt_tokens_per_s:,.0f} prompt tokens/s "
            f"({self.ideal_uncached_tokens_per_s:,.0f} after ideal reuse) vs {cap} -> "
            f"load {self.load:.2f} (ideal reuse {self.ideal_load:.2f}); busiest {self.window_s:g} {u} "
            f"window from {self.peak_start_s + 0.0:.1f} {u}: load {self.peak_load:.2f} "  # (-0.0 shows as 0.0)
            f"(ideal reuse {self.peak_ideal_load:.2f}){short}"
        )

    def to_dict(self) -> dict[str, float | int]:
        """The figures as a JSON-ready dict (NaN -> None)."""
        out: dict[str, float | int] = {}
        for name in self.__slots__:
            value = getattr(self, name)
            out[name] = None if isinstance(value, float) and math.isnan(value) else value
        return out


def check_load_window(window_s: float) -> None:
    """Refuse a ``--load-window`` below ``MIN_LOAD_WINDOW_S`` or not finite (ValueError)."""
    if not (window_s >= MIN_LOAD_WINDOW_S and math.isfinite(window_s)):
        raise ValueError(f"--load-window {window_s:g}: need a finite number of seconds >= "
                         f"{MIN_LOAD_WINDOW_S:g} (about one engine step)")


def offered_load(requests: Sequence[Request], profile: Profile, budget_tokens: int,
                 window_s: float = DEFAULT_LOAD_WINDOW_S, colocated: bool = False) -> OfferedLoad:
    """The ``OfferedLoad`` of ``requests`` on ``profile``'s engine at ``budget_tokens``.

    Args:
        requests: The trace, arrival times in seconds (already windowed and scaled).
        profile: Cost model (``a``, ``b``, ``k``, ``d``).
        budget_tokens: Step token budget, tokens.
        window_s: Length of the busiest window, seconds (> 0).
        colocated: Count decode work too (module docstring); ``capacity_tokens_per_s`` is then
            prompt tokens per second of prefill-and-decode busy time.

    Raises:
        ValueError: An empty trace, ``window_s`` below ``MIN_LOAD_WINDOW_S`` or not finite, or
            ``budget_tokens < 1``.
    """
    if not requests:
        raise ValueError("offered load of an empty trace")
    check_load_window(window_s)
    kernel = compiled_kernel()
    cold, ideal = _both_works(requests, budget_tokens, profile, colocated, kernel=kernel)
    span = cold.arrival_s[-1] - cold.arrival_s[0]
    # numpy's sums, to the bit: exact ones for the whole and half tokens, numpy's pairwise order
    # for decode seconds (fairsim.npfloat)
    total = _whole_sum(cold.new_tokens)

    def busy(w: PrefillWork) -> float:
        # Prefill-only: no decode work, all zeros, whose sum is 0.0 in any order (no pairwise walk).
        return busy_time(profile, budget_tokens, _whole_sum(w.new_tokens), _whole_sum(w.pairs),
                         _whole_sum(w.chunks), _whole_sum(w.decode_tokens),
                         float_sum(w.decode_s) if colocated else 0.0)

    busy_cold = busy(cold)
    busy_ideal = busy_cold if ideal is cold else busy(ideal)
    span_eff = span if span > 0 else float("nan")
    if 0 < span < window_s:  # the whole trace is the busiest window (module docstring)
        peak, start, peak_ideal = busy_cold / span, cold.arrival_s[0], busy_ideal / span
    else:
        ends = _window_ends(cold.arrival_s, window_s, kernel)  # the same arrivals in both
        peak, start, first = _busiest(cold, profile, budget_tokens, window_s, ends, kernel)
        # The same window's ideal-reuse load (the line prints both after its start).
        peak_ideal = peak if ideal is cold else _window_load(ideal, profile, budget_tokens, window_s, first,
                                                             ends[first])
    return OfferedLoad(
        requests=len(requests), span_s=span, budget_tokens=budget_tokens,
        prompt_tokens_per_s=total / span_eff,
        ideal_uncached_tokens_per_s=_whole_sum(ideal.new_tokens) / span_eff,
        busy_s=busy_cold, ideal_busy_s=busy_ideal, capacity_tokens_per_s=total / busy_cold,
        load=busy_cold / span_eff, ideal_load=busy_ideal / span_eff, window_s=window_s,
        peak_load=peak, peak_ideal_load=peak_ideal, peak_start_s=start, colocated=colocated,
    )


def time_scale_for_load(requests: Sequence[Request], profile: Profile, budget_tokens: int,
                        target: float, colocated: bool = False) -> float:
    """The ``--time-scale`` at which ``requests`` offer mean load ``target`` (no reuse; decode
    work counted when ``colocated``).

    Load is ``busy / span`` and the span scales with the arrival times, so the scale is
    ``load(scale 1) / target``.

    Raises:
        ValueError: ``target`` not a finite number > 0, or all requests arriving at one instant
            (no span to scale).
    """
    if not (target > 0 and math.isfinite(target)):
        raise ValueError(f"--target-load {target:g}: need a finite load > 0")
    # Without numpy (a run's start-up: importing it cost a --target-load run about 0.1 s and 15 MB):
    # the same floats as prefill_work's arrays and their sums (offered_load's, fairsim.npfloat).
    (work,) = _both_works(requests, budget_tokens, profile, colocated, ideal_reuse=False, kernel=compiled_kernel())
    span = work.arrival_s[-1] - work.arrival_s[0] if work.arrival_s else 0.0
    if not span > 0:
        raise ValueError(f"--target-load {target:g}: the {len(work.arrival_s)} requests kept arrive at "
                         f"one instant, so no time scale changes their load")
    busy = busy_time(profile, budget_tokens, _whole_sum(work.new_tokens), _whole_sum(work.pairs),
                     _whole_sum(work.chunks), _whole_sum(work.decode_tokens), float_sum(work.decode_s))
    return busy / span / target
