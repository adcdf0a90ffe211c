"""The work spread of concurrently queued requests: does the order of the waiting queue matter?

The Fairway paper's advice to a serving team (its step 1): take each request's cached and
uncached lengths and see how many times the work of concurrently queued requests differs; if only
a few times, ordering matters little. Here a request's *work* is its uncached prompt tokens at
admission, ``max(1, L - h)`` (the Fast lane's ``c`` and the work charge of POLICIES.md), and it is
*queued* from its arrival until it is first scheduled. At each instant with at least two requests
waiting, the *spread* is the upper decile of the queued work divided by its lower decile
(nearest-rank deciles, so with nine or fewer waiting it is the largest over the smallest; with
thousands waiting one outlier does not decide it). Its distribution is weighted by time (seconds
with that queue).

The paper gives no number for "a few times"; fairsim's default threshold is
``DEFAULT_SPREAD_THRESHOLD`` = 4 (``--spread-threshold``), and the verdict compares the
time-weighted median spread with it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from typing import TYPE_CHECKING

import numpy as np
from sortedcontainers import SortedList

if TYPE_CHECKING:  # imported where the timeline is built: the CLI's parser reads this module
    import pandas as pd

DEFAULT_SPREAD_THRESHOLD = 4.0
"""Spread (upper / lower decile of queued work) below which ordering "matters little" (our reading of the
paper's "a few times"; see the module docstring)."""
MIN_QUEUED_SHARE = 0.01
"""Below this share of time with two or more requests waiting, there is no queue to order."""


@dataclass(frozen=True)
class QueueSpread:
    """Work spread of the waiting queue over time.

    Attributes:
        timeline: One row per interval of constant queue: ``start_s``, ``duration_s``,
            ``waiting`` (requests queued), ``spread`` (upper / lower decile of the queued work,
            NaN with fewer than 2).
        span_s: First arrival to last first-scheduling, seconds.
        source: ``observed`` (the trace's own scheduling times) or ``fcfs simulation``.
        threshold: The verdict threshold.
    """

    timeline: pd.DataFrame
    span_s: float
    source: str
    threshold: float

    @property
    def queued_share(self) -> float:
        """Share of ``span_s`` (first arrival to last first-scheduling) with at least two requests
        waiting."""
        tl = self.timeline
        return float(tl.loc[tl["waiting"] >= 2, "duration_s"].sum() / self.span_s) if self.span_s > 0 else 0.0

    def quantile(self, q: float) -> float:
        """Time-weighted quantile of the spread over time with at least two waiting (NaN if never)."""
        tl = self.timeline[self.timeline["waiting"] >= 2]
        if tl.empty or tl["duration_s"].sum() <= 0:
            return float("nan")
        order = np.argsort(tl["spread"].to_numpy())
        s = tl["spread"].to_numpy()[order]
        w = np.cumsum(tl["duration_s"].to_numpy()[order])
        return float(s[min(np.searchsorted(w, q * w[-1], side="left"), s.size - 1)])

    def share_above(self, factor: float) -> float:
        """Share of the time with two or more waiting during which the spread is >= ``factor``;
        NaN (JSON ``null``) when two or more never wait together (the spread is undefined then)."""
        tl = self.timeline[self.timeline["waiting"] >= 2]
        total = tl["duration_s"].sum()
        return float(tl.loc[tl["spread"] >= factor, "duration_s"].sum() / total) if total > 0 else float("nan")

    @property
    def matters(self) -> bool:
        """True when two or more wait often enough and their median spread reaches the threshold."""
        return self.queued_share >= MIN_QUEUED_SHARE and self.quantile(0.5) >= self.threshold

    def verdict(self) -> str:
        """One sentence: does ordering matter for this traffic, by the paper's rule?"""
        if self.queued_share < MIN_QUEUED_SHARE:
            return (f"ordering matters little: two or more requests wait together only "
                    f"{100 * self.queued_share:.1f} % of the time (< {100 * MIN_QUEUED_SHARE:.0f} %)")
        med = self.quantile(0.5)
        if med < self.threshold:
            return (f"ordering matters little: queued work differs {med:.1f}x at the median "
                    f"(< {self.threshold:g}x, the paper's 'only a few times')")
        return (f"ordering matters: queued work differs {med:.1f}x at the median (>= "
                f"{self.threshold:g}x) while two or more wait, {100 * self.queued_share:.1f} % of the time")

    def summary(self) -> dict:
        """JSON-ready figures."""
        return {"source": self.source, "threshold": self.threshold,
                "queued_share": self.queued_share, "spread_p50": self.quantile(0.5),
                "spread_p90": self.quantile(0.9), "spread_max": self.quantile(1.0),
                "share_at_or_above_threshold": self.share_above(self.threshold),
                "verdict": self.verdict()}


def queue_spread(arrival_s: np.ndarray, first_scheduled_s: np.ndarray, work_tokens: np.ndarray,
                 source: str, threshold: float = DEFAULT_SPREAD_THRESHOLD,
                 ids: Sequence[str] | None = None) -> QueueSpread:
    """Sweep the queue intervals ``[arrival, first scheduled)`` and record the spread over time.

    Args:
        arrival_s: Queue entry times, seconds, shape (n,): the arrival, or in a closed-loop replay
            the time the turn was released (sent), the ``released_s`` of a simulation.
        first_scheduled_s: First-scheduled times, seconds, shape (n,), each >= its arrival.
        work_tokens: Uncached prompt tokens at admission, shape (n,), each >= 1.
        source: Where the scheduling times come from (for the report).
        threshold: Verdict threshold (> 1).
        ids: Request ids, shape (n,), named in error messages (default: the row index).

    Raises:
        ValueError: Mismatched shapes, a request scheduled before it arrived, work < 1, NaN, or
            a threshold <= 1.
    """
    a = np.asarray(arrival_s, dtype=np.float64)
    s = np.asarray(first_scheduled_s, dtype=np.float64)
    w = np.asarray(work_tokens, dtype=np.float64)
    if not (a.shape == s.shape == w.shape) or a.ndim != 1 or a.size == 0:
        raise ValueError("queue_spread: need equal-length, non-empty 1-D arrays")
    if np.isnan(a).any() or np.isnan(s).any() or np.isnan(w).any():
        raise ValueError("queue_spread: missing arrival, first-scheduled time or work")
    if (s < a - 1e-9).any():
        i = int(np.argmax(s < a - 1e-9))
        who = f"request {ids[i]!r}" if ids is not None else f"request #{i}"
        raise ValueError(f"{who}: first scheduled at {s[i]} s, before its arrival {a[i]} s")
    if (w < 1).any():
        raise ValueError("queue_spread: work below 1 token")
    if not threshold > 1:
        raise ValueError(f"--spread-threshold {threshold}: need a factor > 1")
    # events: (time, kind, i) with departures (0) before arrivals (1) at the same instant
    events = sorted([(float(t), 1, i) for i, t in enumerate(a)] + [(float(t), 0, i) for i, t in enumerate(s)])
    queue = SortedList()  # (work, index) of the requests waiting now
    inq = np.zeros(a.size, dtype=bool)
    rows_t, rows_d, rows_n, rows_s = [], [], [], []
    k = 0
    while k < len(events):
        t = events[k][0]
        while k < len(events) and events[k][0] == t:
            _, kind, i = events[k]
            if kind == 1 and s[i] > a[i]:  # scheduled the instant it arrived: never queued
                inq[i] = True
                queue.add((w[i], i))
            elif kind == 0 and inq[i]:
                inq[i] = False
                queue.remove((w[i], i))
            k += 1
        if k == len(events):
            break
        n = len(queue)
        rows_t.append(t)
        rows_d.append(events[k][0] - t)
        rows_n.append(n)
        rows_s.append(decile_ratio(queue) if n >= 2 else float("nan"))
    import pandas as pd

    timeline = pd.DataFrame({"start_s": rows_t, "duration_s": rows_d, "waiting": rows_n,
                             "spread": rows_s})
    return QueueSpread(timeline=timeline, span_s=float(s.max() - a.min()), source=source,
                       threshold=threshold)


def decile_ratio(queue: SortedList) -> float:
    """Upper over lower nearest-rank decile of the works in ``queue`` (sorted ``(work, i)``)."""
    n = len(queue)
    return queue[math.ceil(0.9 * n) - 1][0] / queue[math.ceil(0.1 * n) - 1][0]
