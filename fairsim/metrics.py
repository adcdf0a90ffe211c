"""Summaries computed from the per-request result table (never kept on the side).

Percentiles use numpy's default linear interpolation between order statistics.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # tables may be DataFrames or the engine's ``Columns``; pandas is not needed here
    import pandas as pd

STARVATION_FACTOR = 3.0  # the paper's criterion: worst TTFT above 3 x the policy's own p99


def ttft_summary(requests: pd.DataFrame) -> dict[str, float]:
    """TTFT statistics of a request table, seconds.

    Args:
        requests: Rows with a ``ttft_s`` column.

    Returns:
        ``requests``, ``ttft_mean_s``, ``ttft_p50_s``, ``ttft_p90_s``, ``ttft_p99_s``, ``ttft_max_s``.

    Raises:
        ValueError: An empty table or a missing TTFT (a request that never finished).
    """
    ttft = np.asarray(requests["ttft_s"], dtype=np.float64)
    if ttft.size == 0:
        raise ValueError("no requests to summarise")
    if np.isnan(ttft).any():
        raise ValueError(f"{int(np.isnan(ttft).sum())} requests have no TTFT")
    p50, p90, p99 = np.percentile(ttft, [50, 90, 99])
    return {
        "requests": int(ttft.size),
        "ttft_mean_s": float(ttft.mean()),
        "ttft_p50_s": float(p50),
        "ttft_p90_s": float(p90),
        "ttft_p99_s": float(p99),
        "ttft_max_s": float(ttft.max()),
    }


def summarize(requests: pd.DataFrame, steps: pd.DataFrame | None = None) -> dict[str, Any]:
    """Headline figures of one run.

    Returns:
        ``ttft_summary`` plus ``hit_rate`` (cached tokens at admission / prompt tokens),
        ``queue_delay_p50_s``, ``queue_delay_p99_s``, ``starved`` (max TTFT > 3 x p99),
        ``sim_time_s`` (last finish minus first arrival), ``throughput_tokens_per_s`` (prompt
        tokens / sim time) and, with a step table, ``steps`` and ``evictions``.
    """
    out: dict[str, Any] = ttft_summary(requests)
    out["hit_rate"] = float(requests["cached_tokens"].sum() / requests["prompt_tokens"].sum())
    qd = np.asarray(requests["queue_delay_s"], dtype=np.float64)
    out["queue_delay_p50_s"], out["queue_delay_p99_s"] = (float(v) for v in np.percentile(qd, [50, 99]))
    out["starved"] = bool(out["ttft_max_s"] > STARVATION_FACTOR * out["ttft_p99_s"])
    sim_time = float(requests["finish_s"].max() - requests["arrival_s"].min())
    out["sim_time_s"] = sim_time
    out["throughput_tokens_per_s"] = float(requests["prompt_tokens"].sum() / sim_time) if sim_time > 0 else float("nan")
    if steps is not None:
        out["steps"] = int(len(steps))
        out["evictions"] = int(steps["evictions"].sum())
        out["preemptions"] = int(steps["preemptions"].sum())
    return out
