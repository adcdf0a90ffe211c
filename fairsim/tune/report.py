"""``fairsim tune``'s results: the trials table, the Pareto front (median vs tail), the chosen
trial, and the figure."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from fairsim.tune.evaluate import Score


def trial_rows(study: Any) -> list[dict[str, Any]]:
    """One row per finished trial (complete, or failed with an error), by trial number."""
    from optuna.trial import TrialState

    from fairsim.tune.search import trial_params

    rows = []
    for t in study.get_trials(deepcopy=False):
        if t.state == TrialState.COMPLETE or (t.state == TrialState.FAIL and "error" in t.user_attrs):
            policy, params = trial_params(t)
            a = t.user_attrs
            ok = t.state == TrialState.COMPLETE
            rows.append({"trial": t.number, "slot": a.get("slot"), "policy": policy, "params": params,
                         "median": t.values[0] if ok else math.nan, "tail": t.values[1] if ok else math.nan,
                         "holds": bool(a.get("holds", False)), "excess": a.get("excess", math.inf),
                         "ratios": a.get("ratios", {}), "starvation": a.get("starvation", math.nan),
                         "error": a.get("error")})
    return rows


def pareto_front(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows no other row beats on both axes (``median``, ``tail``; lower is better), by
    median; of rows with the same two values only the first trial is kept."""
    ok = [r for r in rows if r["error"] is None]
    front, seen = [], set()
    for r in sorted(ok, key=lambda r: (r["median"], r["tail"], r["trial"])):
        point = (r["median"], r["tail"])
        if point in seen:
            continue
        if any(o["median"] <= r["median"] and o["tail"] <= r["tail"] and (o["median"], o["tail"]) != point for o in ok):
            continue
        seen.add(point)
        front.append(r)
    return front


def choose(rows: Sequence[dict[str, Any]]) -> tuple[dict[str, Any] | None, bool]:
    """``(row, meets)``: the row meeting every target with the lowest median (then tail, then
    trial number), ``meets`` True; when none meets them, the closest (lowest ``excess``: the
    largest ratio of a statistic to its target) and False; ``(None, False)`` without rows."""
    ok = [r for r in rows if r["error"] is None]
    meeting = [r for r in ok if r["holds"]]
    if meeting:
        return min(meeting, key=lambda r: (r["median"], r["tail"], r["trial"])), True
    if ok:
        return min(ok, key=lambda r: (r["excess"], r["median"], r["tail"], r["trial"])), False
    return None, False


def show_params(params: dict[str, Any]) -> str:
    """``fast_weight=6.3 slo_floor=0.41`` (floats to 4 significant digits), or ``defaults``."""
    def value(v: Any) -> str:
        return f"{v:.4g}" if isinstance(v, float) else json.dumps(v)
    return " ".join(f"{k}={value(v)}" for k, v in sorted(params.items())) or "defaults"


def front_table(front: Sequence[dict[str, Any]], axes: tuple[str, str]) -> str:
    """The front as text: trial, policy, parameters, the two axes, whether the targets hold."""
    rows = [["trial", "policy", "parameters", axes[0], axes[1], "meets targets"]]
    for r in front:
        rows.append([str(r["trial"]), r["policy"], show_params(r["params"]), f"{r['median']:.3f}",
                     f"{r['tail']:.3f}", "yes" if r["holds"] else "no"])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def frame(rows: Sequence[dict[str, Any]]) -> Any:
    """The rows as a DataFrame (params and ratios as JSON text, one column per target ratio)."""
    import pandas as pd

    out = []
    for r in rows:
        row = {k: v for k, v in r.items() if k not in ("params", "ratios")}
        row["params"] = json.dumps(r["params"], sort_keys=True)
        row.update({f"ratio {k}": v for k, v in r["ratios"].items()})
        out.append(row)
    return pd.DataFrame(out)


def comparison_table(entries: Sequence[tuple[str, Score, Score]], axes: tuple[str, str]) -> str:
    """Rows ``(label, training score, held-out score)`` as text."""
    rows = [["", f"train {axes[0]}", f"train {axes[1]}", "train ok", f"held-out {axes[0]}",
             f"held-out {axes[1]}", "held-out ok"]]
    for label, train, held in entries:
        rows.append([label, f"{train.median:.3f}", f"{train.tail:.3f}", "yes" if train.holds else "no",
                     f"{held.median:.3f}", f"{held.tail:.3f}", "yes" if held.holds else "no"])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()
                     for r in rows)


def gain(before: float, after: float) -> float:
    """How many times lower ``after`` is than ``before`` (> 1: better)."""
    return before / after if after > 0 else math.inf


def figure(rows: Sequence[dict[str, Any]], front: Sequence[dict[str, Any]], axes: tuple[str, str],
           marks: dict[str, Score], limits: tuple[float | None, float | None], title: str) -> Any:
    """Every trial (grey; those meeting the targets black), the front (line), the marked
    untuned policies (labelled), and the target bounds (dashed), log-log."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.8))
    ok = [r for r in rows if r["error"] is None]
    for holds, color in ((False, "0.7"), (True, "0.1")):
        pts = [r for r in ok if r["holds"] == holds]
        if pts:
            ax.scatter([r["median"] for r in pts], [r["tail"] for r in pts], s=14, color=color,
                       label="trials meeting the targets" if holds else "other trials", zorder=2)
    ax.plot([r["median"] for r in front], [r["tail"] for r in front], color="C0", marker="o", ms=4,
            label="Pareto front", zorder=3)
    for i, (label, score) in enumerate(marks.items()):
        ax.scatter([score.median], [score.tail], marker="s", s=40, color=f"C{i + 1}", label=label, zorder=4)
    if limits[0] is not None and math.isfinite(limits[0]):
        ax.axvline(limits[0], ls="--", color="C3", lw=1)
    if limits[1] is not None and math.isfinite(limits[1]):
        ax.axhline(limits[1], ls="--", color="C3", lw=1)
    positive = all(v > 0 for r in ok for v in (r["median"], r["tail"]))
    if positive:
        ax.set_xscale("log")
        ax.set_yscale("log")
    ax.set_xlabel(f"{axes[0]} (worst training window)")
    ax.set_ylabel(f"{axes[1]} (worst training window)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
