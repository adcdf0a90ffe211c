"""``--plots DIR`` of ``run``, ``compare`` and ``accept``: the standard figures of a simulation.

From the per-request and per-step tables of each policy (``SimResult``):

- ``ttft_cdf.png``: TTFT CDF per policy (``fairsim.figures.ttft_cdf``);
- ``ttft_vs_arrival.png``: each request's TTFT against its arrival time, one panel per policy
  (where in the trace the slow requests are: a spike shows as a ramp). The time is when the
  request reached the engine, ``released_s`` where the table has it: its arrival in open loop, its
  send time in closed loop (from which its TTFT is measured; a turn's recorded timestamp is not
  when this replay sent it);
- ``queue_kv.png``: waiting-queue length, KV blocks used (held by running requests) and KV
  blocks cached (holding a prefix hash, hittable) over simulated time, the capacity dashed. A
  long run (more than ``MAX_STEP_POINTS`` steps of one policy) is drawn per time bin instead of
  per step: the time-weighted mean as a line and the bin's min-max as a band, so the lines stay
  apart;

colocated mode (the request table has ``tpot_s``) adds:

- ``tpot_cdf.png``: TPOT CDF per policy (requests with two or more output tokens; vLLM's TPOT);
- ``goodput.png`` (with an SLO): the share of requests meeting every SLO per policy (the table's
  ``goodput`` column) and that share per arrival-time bin (where in the trace the misses are),
  the arrival time being ``released_s`` as for ``ttft_vs_arrival.png``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from fairsim.figures import line_style, plt, save, ttft_cdf
from fairsim.metrics import meets_slo
from fairsim.sim import SimResult

MAX_STEP_POINTS = 4000
"""Steps per policy above which ``queue_and_kv_cached`` aggregates per time bin (a 8-inch panel
has about 900 pixel columns at 110 dpi: more samples than that only overplot)."""
TIME_BINS = 200
"""Time bins of an aggregated ``queue_kv.png`` and of ``goodput.png``'s per-arrival panel
(at most)."""


def _arrival_times(requests: pd.DataFrame) -> tuple[pd.Series, str]:
    """When each request reached the engine, and the axis label: ``released_s`` (the send time in
    closed loop, the arrival in open loop; TTFT is measured from it) where the table has it (a
    missing value: ``arrival_s``), else ``arrival_s``."""
    if "released_s" not in requests.columns:
        return requests["arrival_s"].astype(np.float64), "arrival time (s)"
    sent = requests["released_s"].astype(np.float64)
    if "arrival_s" not in requests.columns:
        return sent, "arrival time (s)"
    arrival = requests["arrival_s"].astype(np.float64)
    sent = sent.fillna(arrival)
    if bool((sent != arrival).any()):
        return sent, "arrival time (s; a closed-loop turn: when it was sent)"
    return sent, "arrival time (s)"


def ttft_vs_arrival(requests: pd.DataFrame, by: str = "policy",
                    title: str = "TTFT against arrival time") -> Figure:
    """Scatter of ``ttft_s`` (log) against the arrival time, one panel per value of ``by``: the
    ``released_s`` column where the table has it (``_arrival_times``), else ``arrival_s``.

    Raises:
        ValueError: A missing column.
    """
    missing = [c for c in ("ttft_s", by) if c not in requests.columns]
    if "arrival_s" not in requests.columns and "released_s" not in requests.columns:
        missing.insert(0, "arrival_s")
    if missing:
        raise ValueError(f"ttft_vs_arrival: table lacks columns {missing}")
    times, label = _arrival_times(requests)
    names = list(dict.fromkeys(requests[by]))
    fig, axes = plt.subplots(len(names), 1, figsize=(8, 2.2 * len(names) + 0.6), sharex=True,
                             sharey=True, squeeze=False)
    t = times.to_numpy(dtype=np.float64)
    for ax, name in zip(axes[:, 0], names):
        mine = (requests[by] == name).to_numpy()
        ax.scatter(t[mine], requests["ttft_s"].to_numpy()[mine], s=3, alpha=0.5)
        ax.set_yscale("log")
        ax.set_ylabel("TTFT (s)")
        ax.set_title(str(name), fontsize=9, loc="left")
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel(label)
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
    groups = [(name, _with_idle_gaps(g.sort_values("start_s"))) for name, g in steps.groupby(by, sort=False)]
    binned = max(len(g) for _, g in groups) > MAX_STEP_POINTS
    t0 = float(steps["start_s"].min())
    t1 = max(float(g["start_s"].max()) for _, g in groups)
    edges = np.linspace(t0, t1, TIME_BINS + 1) if binned and t1 > t0 else None
    for j, (name, g) in enumerate(groups):
        for ax, col in zip(axes, panels):
            if edges is None:
                ax.plot(g["start_s"], g[col], lw=1, ls=line_style(j), label=str(name), drawstyle="steps-post")
                continue
            mean, low, high = binned_step_function(g["start_s"].to_numpy(), g[col].to_numpy(), edges)
            line, = ax.plot(edges, np.append(mean, mean[-1]), lw=1, ls=line_style(j), label=str(name),
                            drawstyle="steps-post")
            ax.fill_between(edges, np.append(low, low[-1]), np.append(high, high[-1]), step="post",
                            alpha=0.2, color=line.get_color(), lw=0)
    for ax, label in zip(axes, [labels[c] for c in panels]):
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        if kv_blocks is not None and ax is not axes[0]:
            ax.axhline(kv_blocks, ls="--", color="grey", lw=1)
    axes[0].legend(fontsize=8)
    axes[-1].set_xlabel("simulated time (s)" if edges is None else
                        f"simulated time (s); per {(edges[1] - edges[0]):.3g} s bin: mean line, min-max band")
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def binned_step_function(t: np.ndarray, y: np.ndarray, edges: np.ndarray
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Time-weighted mean, min and max per bin of a step function.

    Args:
        t: Sample times, sorted, shape (n,); ``y[i]`` holds from ``t[i]`` to ``t[i + 1]``; the
            last sample ends the function (as a ``steps-post`` line ends there).
        y: Values, shape (n,).
        edges: Bin edges, increasing, shape (k + 1,).

    Returns:
        ``(mean, min, max)``, each shape (k,): the mean over the time the function is defined
        in the bin, min and max over the values it takes there (the last sample's included); NaN
        in a bin wholly before the first sample or after the last. A NaN sample is undefined
        until the next one (``analyze``'s spread with fewer than two waiting).
    """
    t = np.asarray(t, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    k = edges.size - 1
    # cut every hold interval at the bin edges: the pieces are the sorted union of both
    cuts = np.union1d(t, edges)
    cuts = cuts[(cuts >= edges[0]) & (cuts <= edges[-1])]
    start, length = cuts[:-1], np.diff(cuts)
    sample = np.searchsorted(t, start, side="right") - 1  # the sample holding at each piece's start
    piece_bin = np.minimum(np.searchsorted(edges, start, side="right") - 1, k - 1)
    value = y[np.maximum(sample, 0)]
    held = (sample >= 0) & (start < t[-1]) & ~np.isnan(value)  # pieces with a value and a length
    seen = (sample >= 0) & (start <= t[-1])  # and the last sample's instant (drawn as a vertex)
    mean = np.full(k, np.nan)
    low = np.full(k, np.nan)
    high = np.full(k, np.nan)
    weight = np.bincount(piece_bin[held], weights=length[held], minlength=k)
    total = np.bincount(piece_bin[held], weights=(value * length)[held], minlength=k)
    np.divide(total, weight, out=mean, where=weight > 0)
    frame = pd.DataFrame({"bin": piece_bin[seen], "v": value[seen]}).groupby("bin")["v"]
    low[frame.min().index] = frame.min().to_numpy()
    high[frame.max().index] = frame.max().to_numpy()
    return mean, low, high


def tpot_cdf(requests: pd.DataFrame, by: str = "policy", title: str = "TPOT CDF") -> Figure:
    """Empirical CDF of TPOT (seconds per output token after the first), one line per value of
    ``by``, over the requests with two or more output tokens (``tpot_s`` not NaN).

    Raises:
        ValueError: A missing ``tpot_s`` or ``by`` column.
    """
    missing = [c for c in ("tpot_s", by) if c not in requests.columns]
    if missing:
        raise ValueError(f"tpot_cdf: table lacks columns {missing}")
    fig, ax = plt.subplots(figsize=(6, 4))
    for j, (name, g) in enumerate(requests.groupby(by, sort=False)):
        x = np.sort(g["tpot_s"].dropna().to_numpy(dtype=np.float64))
        if x.size:
            ax.step(x, np.arange(1, x.size + 1) / x.size, where="post", ls=line_style(j),
                    label=f"{name} ({x.size} of {len(g)} requests)")
        else:
            ax.plot([], [], ls=line_style(j), label=f"{name} (no request decoded twice)")
    ax.set_xlabel("TPOT (s per output token after the first)")
    ax.set_ylabel("fraction of requests (2+ output tokens)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def goodput_figure(requests: pd.DataFrame, slo: dict[str, float], by: str = "policy",
                   title: str = "Goodput") -> Figure:
    """Share of requests meeting every SLO (``fairsim.metrics.meets_slo``): per value of ``by``
    (left, the table's ``goodput`` column) and per arrival-time bin (right).

    Raises:
        ValueError: No SLO, or a missing ``arrival_s``, ``ttft_s``, ``tpot_s`` (with a TPOT SLO)
            or ``by`` column.
    """
    if not slo:
        raise ValueError("goodput_figure: goodput needs an SLO (--slo ttft=S,tpot=S)")
    need = ["ttft_s", by] + (["tpot_s"] if "tpot" in slo else [])
    missing = [c for c in need if c not in requests.columns]
    if "arrival_s" not in requests.columns and "released_s" not in requests.columns:
        missing.insert(0, "arrival_s")
    if missing:
        raise ValueError(f"goodput_figure: table lacks columns {missing}")
    ok = meets_slo(requests, slo)
    names = list(dict.fromkeys(requests[by]))
    times, label = _arrival_times(requests)
    t = times.to_numpy(dtype=np.float64)
    n_bins = int(min(TIME_BINS, max(1, np.sqrt(len(requests) / max(1, len(names))))))
    edges = np.linspace(t.min(), t.max(), n_bins + 1) if t.max() > t.min() else np.array([t.min(), t.min() + 1])
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4), gridspec_kw={"width_ratios": [1, 2.5]})
    for j, name in enumerate(names):
        mine = (requests[by] == name).to_numpy()
        share = float(ok[mine].mean())
        left.bar(j, share, color=f"C{j}")
        left.text(j, share, f"{share:.3f}", ha="center", va="bottom", fontsize=8)
        b = np.clip(np.searchsorted(edges, t[mine], side="right") - 1, 0, edges.size - 2)
        count = np.bincount(b, minlength=edges.size - 1)
        met = np.bincount(b, weights=ok[mine].astype(float), minlength=edges.size - 1)
        per_bin = np.divide(met, count, out=np.full(count.size, np.nan), where=count > 0)
        right.step(edges, np.append(per_bin, per_bin[-1]), where="post", color=f"C{j}",
                   ls=line_style(j), lw=1, label=str(name))
    left.set_xticks(range(len(names)), [str(n) for n in names], rotation=30, ha="right")
    for ax in (left, right):
        ax.set_ylim(0, 1.05)
        ax.grid(alpha=0.3)
    slo_text = ", ".join(f"{k} <= {v:g} s" for k, v in slo.items())
    left.set_ylabel("share of requests meeting every SLO")
    left.set_title(f"whole run ({slo_text})", fontsize=9)
    right.set_xlabel(f"{label.replace('(s', '(simulated s', 1)}, {edges[1] - edges[0]:.3g} s bins")
    right.set_title("per arrival-time bin", fontsize=9)
    right.legend(fontsize=8)
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
                    title: str = "", slo: dict[str, float] | None = None) -> list[Path]:
    """Write the figures of ``results`` (policy name -> result) into ``out`` (module docstring).

    Args:
        out: Folder (created).
        results: One entry per policy; all of the same trace and capacity.
        prefix: File name prefix (``accept`` uses the window name).
        title: Figure title suffix.
        slo: ``fairsim.metrics.parse_slo`` output; with it a colocated run also gets ``goodput.png``.

    Returns:
        The PNG paths written.
    """
    if not results:
        raise ValueError("write_run_plots: no results")
    reqs, steps = tables_of(results)
    kv = getattr(next(iter(results.values())), "kv_blocks", None)
    suffix = f" ({title})" if title else ""
    log_x = bool((reqs["ttft_s"] > 0).all()) and float(np.ptp(reqs["ttft_s"])) > 0
    paths = [
        save(ttft_cdf(reqs, title=f"TTFT CDF{suffix}", log_x=log_x), out / f"{prefix}ttft_cdf.png"),
        save(ttft_vs_arrival(reqs, title=f"TTFT against arrival time{suffix}"),
             out / f"{prefix}ttft_vs_arrival.png"),
        save(queue_and_kv_cached(steps, kv_blocks=kv, title=f"Waiting queue and KV{suffix}"),
             out / f"{prefix}queue_kv.png"),
    ]
    if "tpot_s" in reqs.columns:  # colocated: decode figures
        paths.append(save(tpot_cdf(reqs, title=f"TPOT CDF{suffix}"), out / f"{prefix}tpot_cdf.png"))
        if slo:
            paths.append(save(goodput_figure(reqs, slo, title=f"Goodput{suffix}"), out / f"{prefix}goodput.png"))
    return paths
