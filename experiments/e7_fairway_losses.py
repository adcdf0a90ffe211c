"""Why Fairway loses where it loses in E7, read from E7's per-request and step tables.

Two questions, answered from ``results/e7`` (``requests.parquet``, ``steps-agent.parquet``):

1. **No reuse (Azure).** Fairway's Fast-lane key is ``h / c + wait / SLO`` with ``SLO =
   max(1 s, 3 x T_idle(L))``. With no hits ``h = 0``; every prompt shorter than ``L_floor`` (where
   ``3 x T_idle(L) = 1 s`` on the profile) has the same 1 s SLO, so among them the key is the plain
   wait: FCFS order. Reported per case: the share of prompts under ``L_floor``, the share of
   requests whose TTFT under Fairway equals FCFS's, and the medians of Fairway, FCFS and SUF.
2. **Agent sessions.** Per (case, policy): TTFT and queueing delay by request kind (a session's
   first turn, a later turn, a sub-agent turn), the hit rate against the *ideal* hit rate (the
   longest prefix of the request's blocks that any request sent before it carried: what an
   unbounded cache would hit), the share of later turns that found their own session's context
   evicted, and from the step tables the mean waiting queue and evictions per run.

Run: ``python -m experiments.e7_fairway_losses [--results results/e7]`` (after E7); writes
``fairway_losses.md``, ``agent_kinds.parquet`` and ``agent_later_by_wait.parquet`` next to E7's
tables.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from experiments.common import pct, write_parquet
from fairsim.costmodel import Profile, load_profile

FOCUS = ("fcfs", "lpm", "fairway", "hrrn", "suf", "fairway-nofair", "dfs-weight")
"""Policies compared in the agent tables."""
BLOCK = 512
"""Hash block of the agent trace (tokens): a hit a block short of the ideal lost context."""


def floor_length(profile: Profile, multiplier: float = 3.0, floor_s: float = 1.0) -> int:
    """The shortest prompt whose Fairway SLO ``multiplier x T_idle(L)`` exceeds ``floor_s``."""
    lo, hi = 1, 1 << 20
    while lo < hi:  # T_idle is monotone: bisect for the first L above the floor
        mid = (lo + hi) // 2
        if multiplier * profile.idle_prefill_time(mid) > floor_s:
            hi = mid
        else:
            lo = mid + 1
    return lo


def no_reuse_table(req: pd.DataFrame, l_floor: int) -> pd.DataFrame:
    """Per Azure case: share under ``l_floor``, share of equal TTFTs Fairway vs FCFS, medians."""
    rows = []
    for case, g in req[req["case"].str.startswith("azure")].groupby("case", sort=False):
        by = {p: g[g["policy"] == p].set_index(["seed", "request_id"])["ttft_s"] for p in ("fcfs", "fairway", "suf")}
        fw, fc = by["fairway"].align(by["fcfs"])
        rows.append({"case": case, "requests": len(fc), "hit_rate": float(g["cached_tokens"].sum()),
                     "under_floor": float((g.loc[g["policy"] == "fcfs", "prompt_tokens"] < l_floor).mean()),
                     "same_ttft": float(np.isclose(fw, fc, rtol=0, atol=1e-9).mean()),
                     "fcfs_p50_s": pct(fc, 50), "fairway_p50_s": pct(fw, 50), "suf_p50_s": pct(by["suf"], 50),
                     "fcfs_max_s": float(fc.max()), "fairway_max_s": float(fw.max()), "suf_max_s": float(by["suf"].max())})
    return pd.DataFrame(rows)


def kind(req: pd.DataFrame) -> pd.Series:
    """``first`` (a top-level session's first turn), ``later`` (its other turns) or ``subagent``."""
    k = np.where(req["klass"] == "subagent", "subagent", np.where(req["turn"] == 0, "first", "later"))
    return pd.Series(k, index=req.index)


def agent_table(req: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Per (case, policy, kind) over the agent runs: see the module docstring."""
    rows = []
    for case, g in req[req["case"].str.startswith("agent")].groupby("case", sort=False):
        for pol in FOCUS:
            run = g[g["policy"] == pol].copy()
            if run.empty:
                continue
            run["kind"] = kind(run)
            run["wait_s"] = run["first_scheduled_s"] - run["released_s"]  # closed loop: sent at release
            st = steps[(steps["case"] == case) & (steps["policy"] == pol)]
            waiting = float(st["waiting"].mean()) if len(st) else np.nan
            evictions = float(st.groupby("seed")["evictions"].sum().mean()) if len(st) else np.nan
            for k, kg in [("all", run), *run.groupby("kind", sort=True)]:
                lost = (kg["ideal_cached_tokens"] - kg["cached_tokens"]) >= BLOCK
                rows.append({"case": case, "policy": pol, "kind": k, "requests": len(kg),
                             "ttft_p50_s": pct(kg["ttft_s"], 50), "ttft_p90_s": pct(kg["ttft_s"], 90),
                             "wait_p50_s": pct(kg["wait_s"], 50), "uncached_p50": pct(kg["prompt_tokens"] - kg["cached_tokens"], 50),
                             "hit_rate": float(kg["cached_tokens"].sum() / kg["prompt_tokens"].sum()),
                             "ideal_hit_rate": float(kg["ideal_cached_tokens"].sum() / kg["prompt_tokens"].sum()),
                             "context_lost": float(lost.mean()),
                             "mean_waiting": waiting, "evictions_per_run": evictions})
    return pd.DataFrame(rows)


WAIT_BUCKETS = (0.0, 2.0, 10.0, np.inf)
"""Queueing-delay buckets (s) of the later-turn table: served at once, after a few s, late."""


def lost_by_wait(req: pd.DataFrame, profile: Profile) -> pd.DataFrame:
    """Later turns of top-level sessions, per (case, policy, wait bucket): share of the turns,
    share that found their context evicted, and the medians of Fairway's two key terms at
    admission (``h / c`` and ``wait / SLO``, whatever the policy that ran)."""
    rows = []
    later = req[req["case"].str.startswith("agent") & (req["klass"] == "agent") & (req["turn"] > 0)
                & req["policy"].isin(FOCUS)].copy()
    later["wait_s"] = later["first_scheduled_s"] - later["released_s"]
    later["lost"] = (later["ideal_cached_tokens"] - later["cached_tokens"]) >= BLOCK
    slo = {L: max(1.0, 3.0 * profile.idle_prefill_time(int(L))) for L in later["prompt_tokens"].unique()}
    later["hit_term"] = later["cached_tokens"] / np.maximum(later["prompt_tokens"] - later["cached_tokens"], 1)
    later["wait_term"] = later["wait_s"] / later["prompt_tokens"].map(slo)
    later["bucket"] = pd.cut(later["wait_s"], WAIT_BUCKETS, right=False,
                             labels=[f"{a:g}-{b:g} s" for a, b in zip(WAIT_BUCKETS, WAIT_BUCKETS[1:])])
    for (case, pol), g in later.groupby(["case", "policy"], sort=False):
        for bucket, b in g.groupby("bucket", observed=False):
            rows.append({"case": case, "policy": pol, "wait": str(bucket), "share": len(b) / len(g),
                         "lost": float(b["lost"].mean()) if len(b) else np.nan,
                         "hit_term_p50": pct(b["hit_term"], 50), "wait_term_p50": pct(b["wait_term"], 50)})
    return pd.DataFrame(rows)


def markdown(l_floor: int, azure: pd.DataFrame, agent: pd.DataFrame, by_wait: pd.DataFrame) -> str:
    lines = ["# Fairway's losses in E7, from the per-request data", "",
             f"Fairway's SLO is the 1 s floor for every prompt under {l_floor:,} tokens (3 x T_idle(L) <= 1 s).", "",
             "## No reuse (Azure)", "",
             "| case | requests | prompts under the floor | Fairway TTFT = FCFS's | p50 fcfs / fairway / suf (s) | worst fcfs / fairway / suf (s) |",
             "|---|---|---|---|---|---|"]
    for r in azure.itertuples():
        lines.append(f"| {r.case} | {r.requests} | {r.under_floor:.1%} | {r.same_ttft:.1%} | "
                     f"{r.fcfs_p50_s:.2f} / {r.fairway_p50_s:.2f} / {r.suf_p50_s:.2f} | "
                     f"{r.fcfs_max_s:.1f} / {r.fairway_max_s:.1f} / {r.suf_max_s:.1f} |")
    lines += ["", "## Agent sessions", "",
              "`kind`: first = a session's first turn, later = its other turns, subagent = sub-agent turns. "
              "`ideal hit` = an unbounded cache's; `context lost` = share whose hit fell a block or more short of it; "
              "`waiting` = mean waiting queue per step; `evict/run` = evicted blocks per run.", ""]
    for case, g in agent.groupby("case", sort=False):
        lines += [f"### {case}", "",
                  "| policy | kind | requests | TTFT p50 / p90 s | wait p50 s | uncached p50 | hit / ideal hit | context lost | waiting | evict/run |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for r in g.itertuples():
            lines.append(f"| {r.policy} | {r.kind} | {r.requests} | {r.ttft_p50_s:.2f} / {r.ttft_p90_s:.2f} | "
                         f"{r.wait_p50_s:.2f} | {r.uncached_p50:.0f} | {r.hit_rate:.2f} / {r.ideal_hit_rate:.2f} | "
                         f"{r.context_lost:.1%} | {r.mean_waiting:.1f} | {r.evictions_per_run:.0f} |")
        lines.append("")
    lines += ["## Agent sessions: later turns by queueing delay", "",
              "Share of a policy's later turns in each bucket, share of them that found their session's context "
              "evicted, and Fairway's key terms at admission (`h / c`, `wait / SLO`; medians).", "",
              "| case | policy | " + " | ".join(f"{w}: share, lost, h/c, wait/SLO" for w in dict.fromkeys(by_wait["wait"])) + " |",
              "|---|---|" + "---|" * by_wait["wait"].nunique()]
    for (case, pol), g in by_wait.groupby(["case", "policy"], sort=False):
        cells = [f"{r.share:.0%}, {r.lost:.0%}, {r.hit_term_p50:.1f}, {r.wait_term_p50:.1f}" if r.share else "–"
                 for r in g.itertuples()]
        lines.append(f"| {case} | {pol} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results", type=Path, default=Path("results/e7"), help="E7's output folder")
    args = p.parse_args(argv)
    req_path, steps_path = args.results / "requests.parquet", args.results / "steps-agent.parquet"
    for path in (req_path, steps_path):
        if not path.is_file():
            raise SystemExit(f"{path}: not found; run python -m experiments.e7_engine_orderings first")
    profile = load_profile()
    req, steps = pd.read_parquet(req_path), pd.read_parquet(steps_path)
    l_floor = floor_length(profile)
    azure, agent = no_reuse_table(req, l_floor), agent_table(req, steps)
    by_wait = lost_by_wait(req, profile)
    write_parquet(agent, args.results / "agent_kinds.parquet")
    write_parquet(by_wait, args.results / "agent_later_by_wait.parquet")
    text = markdown(l_floor, azure, agent, by_wait)
    (args.results / "fairway_losses.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
