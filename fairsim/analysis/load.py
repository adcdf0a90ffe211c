"""Offered load over time, the busiest windows, and calm / burst / spike window detection.

Offered load of a stretch of time = prompt tokens arriving per second / the engine's cold prefill
throughput at the trace's own prompt lengths (``sum(L) / sum(T_idle(L))`` over the whole trace,
the same capacity as ``fairsim.traces.offered_load``). 1.0 means the engine, running cold, would
just keep up; prefix hits let it carry more.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # imported where a frame is built: the CLI's parser reads this module (issue 13)
    import pandas as pd

from fairsim.costmodel import Profile
from fairsim.types import Request

DEFAULT_WINDOW_S = 60.0
"""Default window length, seconds: the paper's spike lasts 60 s (``calm_burst_spike``)."""
MIN_WINDOW_REQUESTS = 20
"""A calm window needs at least this many requests, so its p99 is not just its maximum."""


@dataclass(frozen=True, slots=True)
class Window:
    """A named stretch of trace time ``[start_s, end_s)`` (seconds, trace clock).

    Attributes:
        name: ``calm``, ``burst``, ``spike`` or a user's name.
        start_s, end_s: Bounds, seconds.
        requests: Requests arriving inside (0 when not computed).
        load: Offered load inside (NaN when not computed).
    """

    name: str
    start_s: float
    end_s: float
    requests: int = 0
    load: float = float("nan")

    def overlaps(self, other: Window) -> bool:
        """True when the two intervals share any time."""
        return self.start_s < other.end_s and other.start_s < self.end_s


def cold_capacity(requests: Sequence[Request], profile: Profile) -> float:
    """Cold prefill throughput at these prompt lengths, tokens/s: ``sum(L) / sum(T_idle(L))``."""
    return sum(r.prompt_len for r in requests) / sum(profile.idle_prefill_time(r.prompt_len)
                                                    for r in requests)


def load_series(requests: Sequence[Request], profile: Profile, bin_s: float) -> pd.DataFrame:
    """Offered load per time bin.

    Args:
        requests: The trace (any order).
        profile: Cost model giving the capacity.
        bin_s: Bin width, seconds (> 0).

    Returns:
        One row per bin from the first arrival to the last: ``start_s``, ``requests``,
        ``prompt_tokens_per_s``, ``ideal_uncached_tokens_per_s`` (minus the hits of an infinite
        prefix cache, first-seen blocks computed once), ``load`` (prompt tokens/s over capacity).

    Raises:
        ValueError: No requests or ``bin_s <= 0``.
    """
    if not requests:
        raise ValueError("load_series: no requests")
    if not (bin_s > 0 and math.isfinite(bin_s)):
        raise ValueError(f"--bin {bin_s}: need a bin width > 0 s")
    ordered = sorted(requests, key=lambda r: r.arrival_time)
    seen: set = set()
    uncached = []
    for r in ordered:
        hit = 0
        for x in r.block_hashes:
            if x not in seen:
                break
            hit += 1
        seen.update(r.block_hashes)
        uncached.append(r.prompt_len - min(hit * r.hash_block_size, r.prompt_len - 1))
    t = np.array([r.arrival_time for r in ordered])
    t0 = float(t[0])
    idx = np.floor((t - t0) / bin_s).astype(np.int64)
    n = int(idx[-1]) + 1
    count = np.bincount(idx, minlength=n)
    tokens = np.bincount(idx, weights=[r.prompt_len for r in ordered], minlength=n)
    ideal = np.bincount(idx, weights=uncached, minlength=n)
    cap = cold_capacity(ordered, profile)
    import pandas as pd

    return pd.DataFrame({
        "start_s": t0 + np.arange(n) * bin_s,
        "requests": count,
        "prompt_tokens_per_s": tokens / bin_s,
        "ideal_uncached_tokens_per_s": ideal / bin_s,
        "load": tokens / bin_s / cap,
    })


def _window_stats(requests: Sequence[Request], profile: Profile, length_s: float,
                  step_s: float) -> pd.DataFrame:
    """Every window ``[s, s + length_s)`` for ``s`` on a grid of ``step_s`` from the first arrival
    to the last arrival minus ``length_s``: ``start_s``, ``end_s``, ``requests``, ``load``."""
    t = np.sort(np.array([r.arrival_time for r in requests]))
    tokens = np.array([r.prompt_len for r in sorted(requests, key=lambda r: r.arrival_time)],
                      dtype=np.float64)
    csum = np.concatenate([[0.0], np.cumsum(tokens)])
    last_start = max(float(t[0]), float(t[-1]) - length_s)
    starts = np.arange(float(t[0]), last_start + step_s / 2, step_s)
    lo = np.searchsorted(t, starts, side="left")
    hi = np.searchsorted(t, starts + length_s, side="left")
    cap = cold_capacity(requests, profile)
    import pandas as pd

    return pd.DataFrame({"start_s": starts, "end_s": starts + length_s, "requests": hi - lo,
                         "load": (csum[hi] - csum[lo]) / length_s / cap})


def busiest_windows(requests: Sequence[Request], profile: Profile, length_s: float,
                    count: int = 3) -> list[Window]:
    """The ``count`` busiest non-overlapping windows of ``length_s`` seconds, busiest first.

    Windows slide on a grid of a tenth of their length; the busiest is taken, windows that
    overlap it are dropped, and so on (greedy).
    """
    stats = _window_stats(requests, profile, length_s, length_s / 10)
    out: list[Window] = []
    for row in stats.sort_values(["load", "start_s"], ascending=[False, True]).itertuples():
        w = Window(f"busy{len(out) + 1}", float(row.start_s), float(row.end_s), int(row.requests),
                   float(row.load))
        if not any(w.overlaps(o) for o in out):
            out.append(w)
            if len(out) == count:
                break
    return out


def detect_windows(requests: Sequence[Request], profile: Profile,
                   length_s: float | None = None,
                   min_requests: int = MIN_WINDOW_REQUESTS) -> list[Window]:
    """Calm, burst and spike windows of a trace, from its offered load.

    Rule (ours; the paper's dynamic traces are calm, then a burst, then a spike above capacity):
    among windows of ``length_s`` sliding by a tenth of it, *spike* = the highest offered load,
    *burst* = the highest load among windows not overlapping the spike, *calm* = the lowest load
    among windows with at least ``min_requests`` requests that overlap neither.

    Args:
        requests: The trace.
        profile: Cost model giving the capacity.
        length_s: Window length, seconds. Default ``DEFAULT_WINDOW_S``, or a third of the trace's
            span when the trace is shorter than three such windows.
        min_requests: Fewest requests a calm window may hold.

    Returns:
        ``[calm, burst, spike]``, each with its request count and load.

    Raises:
        ValueError: Fewer than ``3 * min_requests`` requests, a span of 0 s, or no three
            disjoint windows that qualify (the message says to pass ``--windows``).
    """
    if len(requests) < 3 * min_requests:
        raise ValueError(f"window detection needs at least {3 * min_requests} requests, the "
                         f"trace has {len(requests)}; pass --windows NAME:START-END,...")
    t = [r.arrival_time for r in requests]
    span = max(t) - min(t)
    if not span > 0:
        raise ValueError("all requests arrive at one instant: no windows to find; pass --windows")
    if length_s is None:
        length_s = min(DEFAULT_WINDOW_S, span / 3)
    if not (length_s > 0 and math.isfinite(length_s)):
        raise ValueError(f"--window-length {length_s}: need > 0 s")
    stats = _window_stats(requests, profile, length_s, length_s / 10)
    rows = [Window("", float(r.start_s), float(r.end_s), int(r.requests), float(r.load))
            for r in stats.itertuples()]
    by_load = sorted(rows, key=lambda w: (-w.load, w.start_s))
    spike = by_load[0]
    burst = next((w for w in by_load if not w.overlaps(spike)), None)
    calm = None
    if burst is not None:
        calm = next((w for w in reversed(by_load) if w.requests >= min_requests
                     and not w.overlaps(spike) and not w.overlaps(burst)), None)
    if burst is None or calm is None:
        raise ValueError(f"no disjoint calm, burst and spike windows of {length_s:g} s (calm with "
                         f">= {min_requests} requests) in a trace of {span:.0f} s; pass "
                         f"--window-length or --windows NAME:START-END,...")
    return [Window("calm", calm.start_s, calm.end_s, calm.requests, calm.load),
            Window("burst", burst.start_s, burst.end_s, burst.requests, burst.load),
            Window("spike", spike.start_s, spike.end_s, spike.requests, spike.load)]


def with_load(requests: Sequence[Request], profile: Profile, w: Window, time_scale: float = 1.0) -> Window:
    """``w`` with its request count and offered load filled in (load divided by ``time_scale``:
    arrivals stretched by S arrive S times slower)."""
    inside = [r.prompt_len for r in requests if w.start_s <= r.arrival_time < w.end_s]
    load = sum(inside) / (w.end_s - w.start_s) / cold_capacity(requests, profile) / time_scale
    return Window(w.name, w.start_s, w.end_s, len(inside), load)


def parse_windows(spec: str) -> list[Window]:
    """``"calm:0-120,spike:300-360"`` -> windows (seconds of trace time).

    Raises:
        ValueError: A malformed item, an empty or negative interval, or a repeated name; the
            message names ``--windows`` and the item.
    """
    out: list[Window] = []
    for item in (s.strip() for s in spec.split(",")):
        name, sep, rng = item.partition(":")
        lo, dash, hi = rng.partition("-")
        try:
            start, end = float(lo), float(hi)
        except ValueError:
            start = end = float("nan")
        if not (sep and dash and name) or not (0 <= start < end and math.isfinite(end)):
            raise ValueError(f"--windows {item!r}: expected NAME:START-END with 0 <= START < END "
                             f"(seconds of trace time), e.g. spike:300-360")
        if any(w.name == name for w in out):
            raise ValueError(f"--windows: window name {name!r} given twice")
        out.append(Window(name, start, end))
    return out
