"""Figures from result tables (matplotlib, Agg backend: no display needed).

Every function takes the tidy tables the simulator writes (``requests``: one row per request with
``ttft_s`` and labels; ``steps``: one row per engine step) plus the column that names the run
(``policy`` by default), and returns a ``matplotlib.figure.Figure``; ``save`` writes a PNG.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: CI, Ray workers, notebooks executed by nbclient

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

WINDOW_ORDER = ("calm", "burst", "spike")

#: Dash patterns cycled over the lines of one axis, so runs with identical results (two policies
#: that order a light load the same way) stay visible on top of each other instead of one colour
#: hiding the other.
LINE_STYLES = ("-", (0, (5, 2)), (0, (1, 1.5)), (0, (6, 2, 1, 2)))


def line_style(j: int) -> object:
    """Matplotlib ``linestyle`` of the ``j``-th line (0-based) of an axis (``LINE_STYLES``)."""
    return LINE_STYLES[j % len(LINE_STYLES)]


def _need(df: pd.DataFrame, cols: Sequence[str], what: str) -> None:
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise ValueError(f"{what}: table lacks columns {missing}; has {list(df.columns)}")


def ttft_cdf(requests: pd.DataFrame, by: str = "policy", title: str = "TTFT CDF",
             log_x: bool = True) -> Figure:
    """Empirical CDF of TTFT (seconds), one line per value of ``by``.

    Raises:
        ValueError: ``requests`` lacks ``ttft_s`` or ``by``.
    """
    _need(requests, ["ttft_s", by], "ttft_cdf")
    fig, ax = plt.subplots(figsize=(6, 4))
    for j, (name, group) in enumerate(requests.groupby(by, sort=False)):
        x = np.sort(group["ttft_s"].to_numpy(dtype=np.float64))
        ax.step(x, np.arange(1, x.size + 1) / x.size, where="post", label=str(name), ls=line_style(j))
    if log_x:
        ax.set_xscale("log")
    ax.set_xlabel("TTFT (s)")
    ax.set_ylabel("fraction of requests")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def window_bars(requests: pd.DataFrame, by: str = "policy", window: str = "window",
                title: str = "TTFT per window") -> Figure:
    """Grouped bars of TTFT p50 (left) and p99 (right) per arrival window and ``by`` value.

    Raises:
        ValueError: ``requests`` lacks ``ttft_s``, ``by`` or ``window``.
    """
    _need(requests, ["ttft_s", by, window], "window_bars")
    stats = (requests.groupby([window, by], sort=False)["ttft_s"]
             .quantile([0.5, 0.99]).unstack(-1))
    windows = [w for w in WINDOW_ORDER if w in stats.index.get_level_values(0)]
    windows += [w for w in stats.index.get_level_values(0).unique() if w not in windows]
    names = list(dict.fromkeys(requests[by]))
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    width = 0.8 / max(1, len(names))
    for ax, q, label in ((axes[0], 0.5, "median"), (axes[1], 0.99, "p99")):
        for j, name in enumerate(names):
            vals = [stats[q].get((w, name), np.nan) for w in windows]
            ax.bar(np.arange(len(windows)) + j * width, vals, width, label=str(name))
        ax.set_xticks(np.arange(len(windows)) + width * (len(names) - 1) / 2, windows)
        ax.set_ylabel(f"TTFT {label} (s)")
        ax.grid(axis="y", alpha=0.3)
    axes[1].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def queue_and_kv(steps: pd.DataFrame, by: str = "policy", kv_blocks: int | None = None,
                 title: str = "Waiting queue and KV usage") -> Figure:
    """Waiting-queue length (top) and KV blocks in use (bottom) over simulated time (s).

    Args:
        steps: Step table (``start_s``, ``waiting``, ``kv_blocks_used``) plus ``by``.
        kv_blocks: Cache capacity to draw as a dashed line (optional).

    Raises:
        ValueError: ``steps`` lacks a needed column.
    """
    _need(steps, ["start_s", "waiting", "kv_blocks_used", by], "queue_and_kv")
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 5), sharex=True)
    for j, (name, group) in enumerate(steps.groupby(by, sort=False)):
        top.plot(group["start_s"], group["waiting"], label=str(name), lw=1, ls=line_style(j))
        bottom.plot(group["start_s"], group["kv_blocks_used"], label=str(name), lw=1, ls=line_style(j))
    if kv_blocks is not None:
        bottom.axhline(kv_blocks, ls="--", color="grey", lw=1)
    top.set_ylabel("waiting requests")
    bottom.set_ylabel("KV blocks used")
    bottom.set_xlabel("simulated time (s)")
    top.legend(fontsize=8)
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def bars(table: pd.DataFrame, x: str, y: str, hue: str, title: str = "", ylabel: str = "",
         log_y: bool = False) -> Figure:
    """Grouped bars of column ``y`` over categories ``x``, one colour per ``hue`` value.

    Raises:
        ValueError: ``table`` lacks a column.
    """
    _need(table, [x, y, hue], "bars")
    xs = list(dict.fromkeys(table[x]))
    hues = list(dict.fromkeys(table[hue]))
    width = 0.8 / max(1, len(hues))
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(xs) * max(1, len(hues)) / 3), 4))
    lookup = table.set_index([x, hue])[y]
    for j, h in enumerate(hues):
        vals = [lookup.get((c, h), np.nan) for c in xs]
        ax.bar(np.arange(len(xs)) + j * width, vals, width, label=str(h))
    ax.set_xticks(np.arange(len(xs)) + width * (len(hues) - 1) / 2, xs, rotation=30, ha="right")
    if log_y:
        ax.set_yscale("log")
    ax.set_ylabel(ylabel or y)
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def legend_and_title_above(fig: Figure, ax: object, title: str) -> None:
    """One legend for ``fig`` (``ax``'s handles) and a left-aligned ``title``, both above the
    panels, which are laid out below them (inside a panel the legend covers bars)."""
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper right", ncol=max(1, len(labels)), fontsize=8, frameon=False)
    fig.suptitle(x=0.01, ha="left", t=title)
    fig.tight_layout(rect=(0, 0, 1, 0.92))  # room for the title and the legend


def save(fig: Figure, path: str | Path, dpi: int = 110) -> Path:
    """Write ``fig`` to ``path`` (PNG, or the format its suffix names; folders created) atomically
    (``fairsim.io.atomic_write``) and close it.

    Raises:
        OutputError: The file cannot be written (the message names it).
    """
    from fairsim.io import atomic_write

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=dpi, format=path.suffix.lstrip(".") or "png"))
    finally:
        plt.close(fig)
    return path
