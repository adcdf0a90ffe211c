"""Markdown tables of the credit-carrying policies from finished E1-E3 runs.

Reads ``results/e1_spike``, ``results/e2_scenarios``, ``results/e3_flood`` (the folders of
``python -m experiments.eN_... --out results/eN_...``) and, optionally, ``fairsim compare
--format json`` outputs of the conversation trace; prints the tables of experiments/README.md
("Beyond the paper") and checks the new variants' targets: never starved in E2 or the flood,
worst TTFT <= 1.25 x FCFS's where FCFS does not starve, median within 10% of ``fairway``'s, all
six E1 targets on both SEC traces.

Run: ``python -m experiments.credit_report [--results results] [--conv SCALE=FILE ...]``
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

VARIANTS = ("fairway-carry", "fairway-plus", "fairway-patience", "fairway-deadline")
WORST_SLACK = 1.25
MEDIAN_SLACK = 1.10


def _row(name: str, p50: float, p99: float, worst: float, starved: bool) -> str:
    return f"| {name} | {p50:.2f} | {p99:.2f} | {worst:.2f} | {'**yes**' if starved else 'no'} |"


def check(rows: pd.DataFrame, where: str) -> list[str]:
    """Target misses of the new variants in one scenario (rows: policy, p50, p99, max, starved)."""
    out = []
    by = rows.set_index("policy")
    for v in VARIANTS:
        if v not in by.index:
            continue
        r = by.loc[v]
        if r["starved"]:
            out.append(f"{where}: {v} starved")
        if "fcfs" in by.index and not by.loc["fcfs", "starved"] and r["max"] > WORST_SLACK * by.loc["fcfs", "max"]:
            out.append(f"{where}: {v} worst {r['max']:.2f} > 1.25 x FCFS {by.loc['fcfs', 'max']:.2f}")
        if "fairway" in by.index and r["p50"] > MEDIAN_SLACK * by.loc["fairway", "p50"]:
            out.append(f"{where}: {v} median {r['p50']:.2f} > 1.1 x fairway {by.loc['fairway', 'p50']:.2f}")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Print the Markdown tables and the list of target misses."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results", type=Path, default=Path("results"))
    p.add_argument("--conv", nargs="*", default=[], help="SCALE=FILE of `fairsim compare --format json`")
    args = p.parse_args(argv)
    misses: list[str] = []
    e2 = pd.read_parquet(args.results / "e2_scenarios" / "p99.parquet").rename(
        columns={"ttft_p50_s": "p50", "ttft_p99_s": "p99", "ttft_max_s": "max"})
    tables = [(f"E2 {sc}", g) for sc, g in e2.groupby("scenario", sort=False)]
    for scale_file in args.conv:
        scale, file = scale_file.split("=", 1)
        d = json.loads(Path(file).read_text())
        tables.append((f"conversation x{scale}", pd.DataFrame(
            [{"policy": k, "p50": v["ttft_p50_s"], "p99": v["ttft_p99_s"], "max": v["ttft_max_s"],
              "starved": v["starved"]} for k, v in d.items()])))
    policies = list(dict.fromkeys(p for _, g in tables for p in g["policy"]))
    print("TTFT p50 / p99 / worst (s); **bold** = starved (worst > 3 x p99)\n")
    print("| scenario | " + " | ".join(policies) + " |")
    print("|---|" + "---|" * len(policies))
    for where, g in tables:
        by = g.set_index("policy")
        cells = []
        for pol in policies:
            if pol not in by.index:
                cells.append("–")
                continue
            r = by.loc[pol]
            cell = f"{r['p50']:.2f} / {r['p99']:.2f} / {r['max']:.1f}"
            cells.append(f"**{cell}**" if r["starved"] else cell)
        print(f"| {where.removeprefix('E2 ')} | " + " | ".join(cells) + " |")
        misses += check(g, where)
    print()
    e3 = pd.read_parquet(args.results / "e3_flood" / "flood.parquet")
    print("## E3 flood (worst miss TTFT, miss median, contended flood median; s)\n")
    print("| config | policy | worst miss | miss p50 | flood p50 | contended flood p50 |\n|---|---|---|---|---|---|")
    for r in e3.itertuples():
        print(f"| {r.config} | {r.policy} | {r.miss_worst_ttft_s:.2f} | {r.miss_p50_s:.2f} | "
              f"{r.flood_p50_s:.2f} | {r.flood_contended_p50_s:.2f} |")
    for cfg, g in e3.groupby("config", sort=False):
        by = g.set_index("policy")
        for v in VARIANTS:
            if v in by.index and by.loc[v, "miss_worst_ttft_s"] > WORST_SLACK * by.loc["fcfs", "miss_worst_ttft_s"]:
                misses.append(f"E3 {cfg}: {v} worst miss {by.loc[v, 'miss_worst_ttft_s']:.2f} > 1.25 x FCFS "
                              f"{by.loc['fcfs', 'miss_worst_ttft_s']:.2f}")
    t = pd.read_parquet(args.results / "e1_spike" / "targets.parquet")
    w = pd.read_parquet(args.results / "e1_spike" / "windows.parquet")
    print("\n## E1 (p50 / p99 per window, s; targets: p50 <= 1.1 x LPM's, p99 <= 1.1 x FCFS's)\n")
    for sc, g in w.groupby("scenario", sort=False):
        print(f"### {sc}\n\n| policy | calm | burst | spike | targets met (of 6) |\n|---|---|---|---|---|")
        met = t[t["scenario"] == sc].set_index("policy")["targets_met"]
        for pol, h in g.groupby("policy", sort=False):
            cells = {x.window: f"{x.ttft_p50_s:.2f} / {x.ttft_p99_s:.2f}" for x in h.itertuples()}
            print(f"| {pol} | {cells.get('calm')} | {cells.get('burst')} | {cells.get('spike')} | {met[pol]} |")
            if pol in VARIANTS and met[pol] < 6:
                missed = [f"{x.window} {'p50' if not x.median_target_met else 'p99'}" for x in h.itertuples()
                          if not (x.median_target_met and x.p99_target_met)]
                misses.append(f"E1 {sc}: {pol} meets {met[pol]} of 6 ({', '.join(missed)})")
        print()
    print("## Target misses of the new variants\n")
    print("\n".join(f"- {m}" for m in misses) or "- none")
    return 0


if __name__ == "__main__":
    sys.exit(main())
