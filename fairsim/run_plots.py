"""``--plots DIR`` of ``run``, ``compare`` and ``accept``: the standard figures of a simulation.

From the per-request and per-step tables of each policy (``SimResult``):

- ``ttft_cdf.png``: TTFT CDF per policy (``fairsim.figures.ttft_cdf``);
- ``ttft_vs_arrival.png``: each request's TTFT against its arrival time, one panel per policy
  (where in the trace the slow requests are: a spike shows as a ramp);
- ``queue_kv.png``: waiting-queue length, KV blocks used (held by running requests) and KV
  blocks cached (holding a prefix hash, hittable) over simulated time, the capacity dashed.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from fairsim.figures import line_style, plt, save, ttft_cdf
from fairsim.sim import SimResult


def ttft_vs_arrival(requests: pd.DataFrame, by: str = "policy",
                    title: str = "TTFT against arrival time") -> Figure:
    """Scatter of ``ttft_s`` (log) against ``arrival_s``, one panel per value of ``by``.

    Raises:
        ValueError: A missing column.
    """
    missing = [c for c in ("arrival_s", "ttft_s", by) if c not in requests.columns]
    if missing:
        raise ValueError(f"ttft_vs_arrival: table lacks columns {missing}")
    names = list(dict.fromkeys(requests[by]))
    fig, axes = plt.subplots(len(names), 1, figsize=(8, 2.2 * len(names) + 0.6), sharex=True,
                             sharey=True, squeeze=False)
    for ax, name in zip(axes[:, 0], names):
        g = requests[requests[by] == name]
        ax.scatter(g["arrival_s"], g["ttft_s"], s=3, alpha=0.5)
        ax.set_yscale("log")
        ax.set_ylabel("TTFT (s)")
        ax.set_title(str(name), fontsize=9, loc="left")
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("arrival time (s)")
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def queue_and_kv_cached(steps: pd.DataFrame, by: str = "policy", kv_blocks: int | None = None,
                        title: str = "Waiting queue and KV over time") -> Figure:
    """Waiting requests (top), KV blocks used (middle) and cached (bottom) against ``start_s``.

    A step table without KV columns (a live replay's) gets the waiting-queue panel only.

    Raises:
        ValueError: A missing ``start_s``, ``waiting`` or ``by`` column.
    """
    missing = [c for c in ("start_s", "waiting", by) if c not in steps.columns]
    if missing:
        raise ValueError(f"queue_and_kv_cached: table lacks columns {missing}")
    panels = [c for c in ("waiting", "kv_blocks_used", "kv_blocks_cached") if c in steps.columns]
    labels = {"waiting": "waiting requests", "kv_blocks_used": "KV blocks used",
              "kv_blocks_cached": "KV blocks cached"}
    fig, axes = plt.subplots(len(panels), 1, figsize=(8, 1.2 + 1.8 * len(panels)), sharex=True,
                             squeeze=False)
    axes = list(axes[:, 0])
    for j, (name, g) in enumerate(steps.groupby(by, sort=False)):
        g = _with_idle_gaps(g.sort_values("start_s"))
        for ax, col in zip(axes, panels):
            ax.plot(g["start_s"], g[col], lw=1, ls=line_style(j), label=str(name), drawstyle="steps-post")
    for ax, label in zip(axes, [labels[c] for c in panels]):
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        if kv_blocks is not None and ax is not axes[0]:
            ax.axhline(kv_blocks, ls="--", color="grey", lw=1)
    axes[0].legend(fontsize=8)
    axes[-1].set_xlabel("simulated time (s)")
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def _with_idle_gaps(g: pd.DataFrame) -> pd.DataFrame:
    """Steps as a step function over time, with the engine's idle gaps shown as such.

    Each row holds from its ``start_s`` to the next row's. Where the engine idles after a step
    (the next step starts after this one ends, ``start_s + duration_s``), a row at the step's end
    says nothing waits and no KV is held by a running request (cached blocks stay cached): joining
    the samples across the gap would draw a queue through an idle engine. A table without
    ``duration_s`` (a live replay's) is drawn as sampled.
    """
    if "duration_s" not in g.columns or len(g) == 0:
        return g
    end = g["start_s"].to_numpy() + g["duration_s"].to_numpy()
    nxt = np.append(g["start_s"].to_numpy()[1:], np.inf)
    idle = g[nxt > end + 1e-12].copy()
    if idle.empty:
        return g
    idle["start_s"] = end[nxt > end + 1e-12]
    for col in ("waiting", "kv_blocks_used"):
        if col in idle.columns:
            idle[col] = 0
    return pd.concat([g, idle]).sort_values("start_s", kind="stable")


def tables_of(results: Mapping[str, SimResult]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Stack the request and step tables of several runs with a ``policy`` column."""
    reqs = pd.concat([r.requests.assign(policy=name) for name, r in results.items()], ignore_index=True)
    steps = pd.concat([r.steps.assign(policy=name) for name, r in results.items()], ignore_index=True)
    return reqs, steps


def write_run_plots(out: Path, results: Mapping[str, SimResult], prefix: str = "",
                    title: str = "") -> list[Path]:
    """Write the three figures of ``results`` (policy name -> result) into ``out``.

    Args:
        out: Folder (created).
        results: One entry per policy; all of the same trace and capacity.
        prefix: File name prefix (``accept`` uses the window name).
        title: Figure title suffix.

    Returns:
        The PNG paths written.
    """
    if not results:
        raise ValueError("write_run_plots: no results")
    reqs, steps = tables_of(results)
    kv = getattr(next(iter(results.values())), "kv_blocks", None)
    suffix = f" ({title})" if title else ""
    log_x = bool((reqs["ttft_s"] > 0).all()) and float(np.ptp(reqs["ttft_s"])) > 0
    return [
        save(ttft_cdf(reqs, title=f"TTFT CDF{suffix}", log_x=log_x), out / f"{prefix}ttft_cdf.png"),
        save(ttft_vs_arrival(reqs, title=f"TTFT against arrival time{suffix}"),
             out / f"{prefix}ttft_vs_arrival.png"),
        save(queue_and_kv_cached(steps, kv_blocks=kv, title=f"Waiting queue and KV{suffix}"),
             out / f"{prefix}queue_kv.png"),
    ]
