"""Colocated-mode additions to ``run``/``compare`` output: decode summary, columns and groups.

Kept apart from ``fairsim/run.py`` (the ``run``/``compare`` command) so it only calls in here.
"""

from __future__ import annotations

from typing import Any

from fairsim.metrics import decode_summary, group_summaries
from fairsim.sim import SimResult

GOODPUT_HEADER = "goodput (share meeting SLOs)"
"""Header of the ``goodput_share`` column: the share of requests meeting every ``--slo`` given
(``fairsim.metrics.meets_slo``); ``n/a`` without ``--slo``."""

DECODE_COLUMNS = [
    ("tpot_p50_s", "TPOT p50 s", "{:.4f}"), ("tpot_p99_s", "TPOT p99 s", "{:.4f}"),
    ("itl_p99_s", "ITL p99 s", "{:.4f}"), ("e2e_p99_s", "E2E p99 s", "{:.2f}"),
    ("output_tokens_per_s", "out tok/s", "{:.1f}"), ("goodput_share", GOODPUT_HEADER, "{:.3f}"),
    ("preemptions", "preempt", "{:d}"),
]
"""Extra columns of the printed table in colocated mode: (summary key, header, format)."""


def colocated_summary(result: SimResult, slo: dict[str, float]) -> dict[str, Any]:
    """``decode_summary`` of a colocated run plus ``decode_tokens`` and ``groups``.

    ``groups`` is ``metrics.group_summaries`` (per window/class label present in the trace);
    ``decode_tokens`` is the step table's sum of decoding requests' tokens.
    """
    # The engine's tables as built (``Columns``): pandas is imported only to group by a label.
    requests, gaps = result.columns("requests"), result.columns("token_gaps")
    out = decode_summary(requests, gaps, slo)
    out["decode_tokens"] = int(result.columns("steps")["decode_tokens"].sum())
    if slo:
        out["slo"] = {f"{k}_s": v for k, v in slo.items()}
    groups = group_summaries(requests, gaps, slo)
    if groups:
        out["groups"] = groups
    return out


def format_groups(rows: dict[str, dict[str, Any]]) -> str:
    """One plain-text block per grouping label: policy x value with TTFT, TPOT and goodput."""
    lines: list[str] = []
    labels = sorted({label for s in rows.values() for label in s.get("groups", {})})
    for label in labels:
        lines.append(f"\nby {label}:")
        header = ["policy", label, "requests", "TTFT p50 s", "TTFT p99 s", "TPOT p50 s",
                  "TPOT p99 s", GOODPUT_HEADER]
        body = []
        for name, s in rows.items():
            for value, g in s.get("groups", {}).get(label, {}).items():
                good = g.get("goodput_share")
                body.append([name, value, f"{g['requests']:d}", _num(g['ttft_p50_s'], ".3f"),
                             _num(g['ttft_p99_s'], ".3f"), _num(g['tpot_p50_s'], ".4f"),
                             _num(g['tpot_p99_s'], ".4f"), "-" if good is None else _num(good, ".3f")])
        widths = [max(len(r[i]) for r in [header] + body) for i in range(len(header))]
        lines += ["  ".join(v.rjust(w) if i > 1 else v.ljust(w) for i, (v, w) in enumerate(zip(r, widths)))
                  for r in [header] + body]
    return "\n".join(lines)


def _num(value: Any, spec: str) -> str:
    """``value`` formatted, or ``n/a`` for a figure that does not exist (None or NaN)."""
    if value is None or (isinstance(value, float) and value != value):
        return "n/a"
    return format(value, spec)
