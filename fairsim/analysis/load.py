"""Offered load over time, the busiest windows, and calm / burst / spike window detection.

Offered load of a stretch of time = the engine's best-case busy seconds for the prefill work of
the requests arriving in it, divided by its length: ``busy(R) / W`` with ``busy`` the budget-aware
bound of ``fairsim.traces.offered`` (every step filled to the token budget ``B``, each prompt in
the fewest chunks; cost model ``a + b·Σn + k·Σn(k+n/2) + d·#requests``). It is the same figure as
the offered-load line of ``fairsim run``: over the whole trace it is ``OfferedLoad.load``, and
the busiest window of length ``W`` is ``OfferedLoad.peak_load`` at ``--load-window W``. 1.0 means
the engine, running cold, would just keep up; prefix hits let it carry more.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # imported where a frame is built: the CLI's parser reads this module (start-up)
    import pandas as pd

from fairsim.costmodel import Profile
from fairsim.io import file_stem
from fairsim.traces.offered import PrefillWork, busy_time, prefill_work
from fairsim.types import Request

DEFAULT_WINDOW_S = 60.0
"""Default window length, seconds: the paper's spike lasts 60 s (``calm_burst_spike``)."""
MIN_WINDOW_REQUESTS = 20
"""A calm window needs at least this many requests, so its p99 is not just its maximum."""
MAX_WINDOWS = 1_000_000
"""Most candidate windows ``detect_windows`` slides over a trace (each a few numpy values and a
``Window``): a ``--window-length`` of a microsecond over minutes would need gigabytes."""
MIN_WINDOWS_PER_SPAN = 10
"""The default window length of a trace shorter than three 60 s windows is tried down to this
fraction of its span (``detect_windows``)."""


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


def budget_of(profile: Profile, budget_tokens: int | None) -> int:
    """``budget_tokens``, or the profile's own budget when None (tokens per step)."""
    return int(profile.budget_tokens if budget_tokens is None else budget_tokens)


class WorkSums:
    """Prefix sums of a trace's ``PrefillWork`` (arrival order), for the busy seconds of any run
    of consecutive arrivals in O(1).

    Args:
        requests: The trace.
        profile: Cost model.
        budget_tokens: Step token budget ``B``, tokens (None: the profile's).
        colocated: Count decode work too (``fairsim.traces.offered``, colocated mode).
    """

    def __init__(self, requests: Sequence[Request], profile: Profile, budget_tokens: int | None = None,
                 colocated: bool = False) -> None:
        self.profile = profile
        self.budget = budget_of(profile, budget_tokens)
        work: PrefillWork = prefill_work(requests, self.budget, ideal_reuse=False, profile=profile,
                                         colocated=colocated)
        self.arrival_s = work.arrival_s
        self.tokens = np.concatenate(([0.0], np.cumsum(work.new_tokens)))
        self._cum = [np.concatenate(([0.0], np.cumsum(x))) for x in
                     (work.new_tokens, work.pairs, work.chunks, work.decode_tokens, work.decode_s)]

    def busy(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Best-case busy seconds of arrivals ``lo[j] .. hi[j] - 1`` (indices in arrival order)."""
        return np.asarray(busy_time(self.profile, self.budget, *(c[hi] - c[lo] for c in self._cum)),
                          dtype=np.float64)

    def between(self, start_s: np.ndarray, end_s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(lo, hi)`` index bounds of the arrivals in ``[start_s, end_s)``."""
        return (np.searchsorted(self.arrival_s, start_s, side="left"),
                np.searchsorted(self.arrival_s, end_s, side="left"))


def load_series(requests: Sequence[Request], profile: Profile, bin_s: float,
                budget_tokens: int | None = None, colocated: bool = False) -> pd.DataFrame:
    """Offered load per time bin.

    Args:
        requests: The trace (any order).
        profile: Cost model.
        bin_s: Bin width, seconds (> 0).
        budget_tokens: Step token budget, tokens (None: the profile's ``budget_tokens``).
        colocated: Count decode work too.

    Returns:
        One row per bin from the first arrival to the last: ``start_s``, ``requests``,
        ``prompt_tokens_per_s``, ``ideal_uncached_tokens_per_s`` (minus the hits of an infinite
        prefix cache, first-seen blocks computed once), ``load`` (best-case busy seconds of the
        bin's arrivals over ``bin_s``, module docstring).

    Raises:
        ValueError: No requests or ``bin_s`` not a finite number > 0.
    """
    if not requests:
        raise ValueError("load_series: no requests")
    if not (bin_s > 0 and math.isfinite(bin_s)):
        raise ValueError(f"--bin {bin_s}: need a bin width > 0 s")
    ordered = sorted(requests, key=lambda r: r.arrival_time)
    sums = WorkSums(ordered, profile, budget_tokens, colocated)
    ideal = prefill_work(ordered, sums.budget, ideal_reuse=True).new_tokens
    t = sums.arrival_s
    t0 = float(t[0])
    q = (t - t0) / bin_s
    idx = np.floor(q).astype(np.int64)
    # The division rounds (0.3 / 0.1 is 2.9999999999999996): an arrival at a bin's start, to
    # rounding, is counted in that bin, not in the one before.
    idx += np.isclose(q, idx + 1, rtol=1e-12, atol=0)
    n = int(idx[-1]) + 1
    count = np.bincount(idx, minlength=n)
    tokens = np.bincount(idx, weights=[r.prompt_len for r in ordered], minlength=n)
    ideal_tokens = np.bincount(idx, weights=ideal, minlength=n)
    hi = np.cumsum(count)
    busy = sums.busy(hi - count, hi)
    import pandas as pd

    return pd.DataFrame({
        "start_s": t0 + np.arange(n) * bin_s,
        "requests": count,
        "prompt_tokens_per_s": tokens / bin_s,
        "ideal_uncached_tokens_per_s": ideal_tokens / bin_s,
        "load": busy / bin_s,
    })


def _window_stats(requests: Sequence[Request], profile: Profile, length_s: float,
                  starts: np.ndarray | None = None, budget_tokens: int | None = None,
                  colocated: bool = False) -> pd.DataFrame:
    """Windows ``[s, s + length_s)`` for ``s`` in ``starts`` (default: every arrival, where the
    busiest window is reached, as ``fairsim.traces.offered``): ``start_s``, ``end_s``,
    ``requests``, ``load``."""
    sums = WorkSums(requests, profile, budget_tokens, colocated)
    if starts is None:
        starts = np.unique(sums.arrival_s)
    lo, hi = sums.between(starts, starts + length_s)
    import pandas as pd

    return pd.DataFrame({"start_s": starts, "end_s": starts + length_s, "requests": hi - lo,
                         "load": sums.busy(lo, hi) / length_s})


def _grid(requests: Sequence[Request], length_s: float) -> np.ndarray:
    """Window starts on a grid of a tenth of ``length_s`` from the first arrival to the last
    arrival minus ``length_s``."""
    t = [r.arrival_time for r in requests]
    first, last = min(t), max(t)
    step = length_s / 10
    return np.arange(first, max(first, last - length_s) + step / 2, step)


def busiest_windows(requests: Sequence[Request], profile: Profile, length_s: float,
                    count: int = 3, budget_tokens: int | None = None,
                    colocated: bool = False) -> list[Window]:
    """The ``count`` busiest non-overlapping windows of ``length_s`` seconds, busiest first.

    Candidate windows start at every arrival (the busiest of all windows starts at one, so the
    first equals ``OfferedLoad.peak_load`` at ``--load-window length_s``); the busiest is taken,
    windows that overlap it are dropped, and so on (greedy). Windows with no arrival are never
    listed (fewer than ``count`` come back when the trace has no more busy stretches). A trace
    shorter than ``length_s`` is one window, the whole trace, with its load over its own span
    (``OfferedLoad.peak_load``'s rule, so ``analyze`` and ``run`` state the same figure).

    Args:
        requests: The trace.
        profile: Cost model.
        length_s: Window length, seconds (> 0).
        count: Windows wanted.
        budget_tokens: Step token budget, tokens (None: the profile's).
        colocated: Count decode work too.
    """
    t = [r.arrival_time for r in requests]
    span = max(t) - min(t) if t else 0.0
    if 0 < span < length_s:  # the whole trace is the busiest window, load over its span (as run's)
        sums = WorkSums(requests, profile, budget_tokens, colocated)
        lo, hi = sums.between(np.array([min(t)]), np.array([np.inf]))
        return [Window("busy1", float(min(t)), float(max(t)), len(requests),
                       float(sums.busy(lo, hi)[0]) / span)]
    stats = _window_stats(requests, profile, length_s, None, budget_tokens, colocated)
    out: list[Window] = []
    for row in stats.sort_values(["load", "start_s"], ascending=[False, True]).itertuples():
        w = Window(f"busy{len(out) + 1}", float(row.start_s), float(row.end_s), int(row.requests),
                   float(row.load))
        if w.requests > 0 and not any(w.overlaps(o) for o in out):
            out.append(w)
            if len(out) == count:
                break
    return out


def default_window_s(span_s: float) -> float:
    """The first window length ``detect_windows`` tries by default, seconds: ``DEFAULT_WINDOW_S``,
    or a third of a shorter span (three disjoint windows fit in it)."""
    return min(DEFAULT_WINDOW_S, span_s / 3)


def detect_windows(requests: Sequence[Request], profile: Profile,
                   length_s: float | None = None,
                   min_requests: int = MIN_WINDOW_REQUESTS, budget_tokens: int | None = None,
                   colocated: bool = False) -> list[Window]:
    """Calm, burst and spike windows of a trace, from its offered load.

    Rule (ours; the paper's dynamic traces are calm, then a burst, then a spike above capacity):
    among windows of ``length_s`` sliding by a tenth of it, *spike* = the highest offered load,
    *burst* = the highest load among windows not overlapping the spike, *calm* = the lowest load
    among windows with at least ``min_requests`` requests that overlap neither.

    Args:
        requests: The trace.
        profile: Cost model giving the capacity.
        length_s: Window length, seconds. Default ``DEFAULT_WINDOW_S``, or a third of the trace's
            span when the trace is shorter than three such windows; where that finds no three
            disjoint windows (the spike mid-trace), the longest of a quarter ... a tenth of the
            span (``MIN_WINDOWS_PER_SPAN``) that does.
        min_requests: Fewest requests a calm window may hold.
        budget_tokens: Step token budget of the load, tokens (None: the profile's).
        colocated: Count decode work too.

    Returns:
        ``[calm, burst, spike]``, each with its request count and load.

    Raises:
        ValueError: Fewer than ``3 * min_requests`` requests, a span of 0 s, a ``length_s`` not
            finite and > 0, or no three disjoint windows that qualify (the message says to pass
            a shorter ``--window-length`` or ``--windows``).
    """
    if len(requests) < 3 * min_requests:
        raise ValueError(f"window detection needs at least {3 * min_requests} requests, the "
                         f"trace has {len(requests)}; pass --windows NAME:START-END,...")
    t = [r.arrival_time for r in requests]
    span = max(t) - min(t)
    if not span > 0:
        raise ValueError("all requests arrive at one instant: no windows to find; pass --windows")
    if length_s is None:
        # The default: 60 s, or a third of a shorter trace; where the spike then sits mid-trace,
        # the other two no longer fit beside it, so shorter lengths (a quarter ... a tenth of the
        # span) are tried, longest first.
        first = default_window_s(span)
        lengths = [first] + [span / k for k in range(4, MIN_WINDOWS_PER_SPAN + 1) if span / k < first]
    else:
        if not (length_s > 0 and math.isfinite(length_s)):
            raise ValueError(f"--window-length {length_s}: need > 0 s")
        if span / length_s * 10 >= MAX_WINDOWS:  # windows slide by a tenth of their length (5e-324 / 10 is 0)
            raise ValueError(f"--window-length {length_s:g}: windows sliding by a tenth of it over the trace's "
                             f"{span:.6g} s are more than {MAX_WINDOWS:,}; use a longer window")
        lengths = [length_s]
    for length in lengths:
        found = _three_windows(requests, profile, length, min_requests, budget_tokens, colocated)
        if found is not None:
            return found
    tried = f"{lengths[0]:g} s" if len(lengths) == 1 else f"{lengths[0]:g} s down to {lengths[-1]:g} s"
    raise ValueError(f"no disjoint calm, burst and spike windows of {tried} (calm with >= {min_requests} "
                     f"requests) in a trace of {span:.0f} s; pass another --window-length (shorter leaves "
                     f"room for three, longer holds more requests), or --windows NAME:START-END,...")


def _three_windows(requests: Sequence[Request], profile: Profile, length_s: float, min_requests: int,
                   budget_tokens: int | None, colocated: bool) -> list[Window] | None:
    """``detect_windows``' rule at one window length: ``[calm, burst, spike]``, or None where no
    three disjoint windows qualify."""
    stats = _window_stats(requests, profile, length_s, _grid(requests, length_s), budget_tokens,
                          colocated)
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
        return None
    return [Window("calm", calm.start_s, calm.end_s, calm.requests, calm.load),
            Window("burst", burst.start_s, burst.end_s, burst.requests, burst.load),
            Window("spike", spike.start_s, spike.end_s, spike.requests, spike.load)]


def with_load(requests: Sequence[Request], profile: Profile, w: Window, time_scale: float = 1.0,
              budget_tokens: int | None = None, colocated: bool = False) -> Window:
    """``w`` with its request count and offered load filled in: best-case busy seconds of the
    requests arriving in it over its length (module docstring), divided by ``time_scale``
    (arrivals stretched by S arrive S times slower). NaN for a window that spans no time (cut
    at its one arrival instant by ``accept``'s ``clip_to_trace``): no load over no time."""
    sums = WorkSums(requests, profile, budget_tokens, colocated)
    lo, hi = sums.between(np.array([w.start_s]), np.array([w.end_s]))
    if math.nextafter(w.start_s, math.inf) < w.end_s:
        load = float(sums.busy(lo, hi)[0]) / (w.end_s - w.start_s) / time_scale
    else:
        load = math.nan
    return Window(w.name, w.start_s, w.end_s, int(hi[0] - lo[0]), load)


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
        same = next((w.name for w in out if file_stem(w.name) == file_stem(name)), None)
        if same is not None:  # accept writes requests-WINDOW-POLICY.parquet: one would overwrite the other
            raise ValueError(f"--windows: windows {same!r} and {name!r} would both write "
                             f"requests-{file_stem(name)}-*.parquet; rename one of them")
        out.append(Window(name, start, end))
    return out
