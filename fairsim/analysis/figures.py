"""Figures of ``fairsim analyze`` (matplotlib, Agg backend via ``fairsim.figures``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from fairsim.analysis.load import Window
from fairsim.analysis.reuse import HitCurve
from fairsim.analysis.spread import QueueSpread
from fairsim.figures import plt
from fairsim.run_plots import MAX_STEP_POINTS, TIME_BINS, binned_step_function


def _steps(ax: Any, t: np.ndarray, y: np.ndarray, end: float, edges: np.ndarray | None,
           **line: Any) -> None:
    """The step function ``y[i]`` from ``t[i]`` to ``t[i + 1]`` (the last to ``end``): as it is, or
    per bin of ``edges`` as ``fairsim run``'s long ``queue_kv.png``: time-weighted mean line,
    min-max band."""
    if edges is None:
        ax.step(t, y, where="post", **line)
        return
    mean, low, high = binned_step_function(np.append(t, end), np.append(y, y[-1]), edges)
    drawn, = ax.step(edges, np.append(mean, mean[-1]), where="post", **line)
    ax.fill_between(edges, np.append(low, low[-1]), np.append(high, high[-1]), step="post",
                    alpha=0.2, color=drawn.get_color(), lw=0)


def _bins(t: np.ndarray, end: float) -> np.ndarray | None:
    """``TIME_BINS`` edges over ``t[0]``..``end`` where ``t`` has more than ``MAX_STEP_POINTS``
    samples (more than an 8-inch panel's pixel columns: a solid block), else ``None``."""
    return np.linspace(t[0], end, TIME_BINS + 1) if t.size > MAX_STEP_POINTS and end > t[0] else None


def _binned_label(edges: np.ndarray | None) -> str:
    return "" if edges is None else f"; per {edges[1] - edges[0]:.3g} s: mean line, min-max band"


def load_figure(series: pd.DataFrame, bin_s: float, windows: Sequence[Window] = ()) -> Figure:
    """Offered load per bin over trace time (raw and after ideal reuse), windows shaded; more
    bins than ``MAX_STEP_POINTS`` drawn per ``TIME_BINS`` wider bins (mean line, min-max band)."""
    fig, ax = plt.subplots(figsize=(8, 3.5))
    t = series["start_s"].to_numpy(dtype=np.float64)
    end = float(t[-1] + bin_s) if t.size else 0.0
    edges = _bins(t, end)
    _steps(ax, t, series["load"].to_numpy(dtype=np.float64), end, edges, lw=1, label="prompt tokens")
    ideal = series["ideal_uncached_tokens_per_s"] / series["prompt_tokens_per_s"].where(
        series["prompt_tokens_per_s"] > 0) * series["load"]
    _steps(ax, t, ideal.fillna(0).to_numpy(dtype=np.float64), end, edges, lw=1,
           label="after ideal prefix reuse")
    ax.axhline(1.0, ls="--", color="grey", lw=1)
    for w in windows:
        ax.axvspan(w.start_s, w.end_s, alpha=0.15, color="tab:red")
        ax.text(w.start_s, ax.get_ylim()[1] * 0.95, w.name, fontsize=7, va="top")
    ax.set_ylabel(f"offered load ({bin_s:g} s bins)")
    ax.set_xlabel("trace time (s)" + _binned_label(edges))
    ax.set_title("Offered load over time (1.0 = cold prefill capacity)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def spread_figure(spread: QueueSpread) -> Figure:
    """Waiting requests (top) and work spread of the queue (bottom, log) over time."""
    tl = spread.timeline
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 5), sharex=True)
    t = tl["start_s"].to_numpy(dtype=np.float64)
    end = float(t[-1] + tl["duration_s"].iloc[-1]) if t.size else 0.0
    edges = _bins(t, end)
    _steps(top, t, tl["waiting"].to_numpy(dtype=np.float64), end, edges, lw=1)
    top.set_ylabel("waiting requests")
    _steps(bottom, t, tl["spread"].to_numpy(dtype=np.float64), end, edges, lw=1)
    bottom.axhline(spread.threshold, ls="--", color="tab:red", lw=1,
                   label=f"threshold {spread.threshold:g}x")
    bottom.set_yscale("log")
    bottom.set_ylabel("max / min queued work")
    bottom.set_xlabel(f"time (s; {spread.source}){_binned_label(edges)}")
    bottom.legend(fontsize=8)
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
    fig.suptitle("Work spread of concurrently queued requests")
    fig.tight_layout()
    return fig


def hit_curve_figure(curve: HitCurve, marks: dict[str, int]) -> Figure:
    """LRU hit rate against KV capacity (log x), the infinite-cache bound, marked capacities."""
    top = int(curve.thresholds[-1]) if curve.thresholds.size else 1
    caps = np.unique(np.geomspace(1, max(2, top) * 1.2, 300).astype(np.int64))
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(caps, curve.hit_rate(caps), lw=1.5, label="LRU (one pass, stack distances)")
    ax.axhline(curve.infinite_hit_rate, ls="--", color="grey", lw=1,
               label=f"infinite cache {curve.infinite_hit_rate:.3f}")
    for name, c in marks.items():
        ax.plot([c], [curve.hit_rate(c)], "o", label=f"{name}: {c} blocks -> {curve.hit_rate(c):.3f}")
    ax.set_xscale("log")
    ax.set_xlabel(f"KV capacity (blocks of {curve.block_size} tokens)")
    ax.set_ylabel("prefix hit rate (tokens)")
    ax.set_title("Prefix-cache hit rate against capacity")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
