"""E2 - tail latency across 11 scenarios: TTFT p99 per policy, best baseline, starvation flags.

For each scenario: every policy's TTFT p50/p99/max; ``starved`` when the worst TTFT exceeds
3 x the policy's own p99 (the paper's criterion, ``fairsim.metrics.STARVATION_FACTOR``); the best
baseline = the non-starving baseline (not Fairway or a variant) with the lowest p99; and Fairway's
p99 relative to it (negative = Fairway lower). Full runs use the longer workloads and several
seeds per scenario of ``common.FULL`` / ``common.REPLICAS``; the statistics pool the seeds'
requests (``p99_by_seed`` keeps each seed's own p99).

Run: ``python -m experiments.e2_scenarios [--out results/e2] [--tiny] [--policies ...]``
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import pandas as pd

from experiments.common import (ALL_POLICIES, FULL, Timer, build_all, is_baseline, parser,
                                replicas, run_all_seeds, setup, write_json, write_parquet)
from fairsim import figures
from fairsim.metrics import summarize
from fairsim.scenarios import scenario_names

TINY = {  # three small generated scenarios (no real-trace files needed)
    "rag": {"num_requests": 150},
    "mixed": {"duration_s": 40.0},
    "flood": {"num_miss": 4, "num_flood": 120},
}


def best_baselines(table: pd.DataFrame) -> pd.DataFrame:
    """Per scenario: best non-starving baseline, its p99, Fairway's p99 and the relative gap."""
    rows = []
    for sc, g in table.groupby("scenario", sort=False):
        base = g[g["policy"].map(is_baseline) & ~g["starved"]]
        best = base.loc[base["ttft_p99_s"].idxmin()] if len(base) else None
        fw = g[g["policy"] == "fairway"]
        fw_p99 = float(fw["ttft_p99_s"].iloc[0]) if len(fw) else float("nan")
        row = {"scenario": sc, "best_baseline": None if best is None else best["policy"],
               "best_baseline_p99_s": float("nan") if best is None else float(best["ttft_p99_s"]),
               "fairway_p99_s": fw_p99,
               "fairway_starved": bool(fw["starved"].iloc[0]) if len(fw) else None,
               "starved_policies": ",".join(g.loc[g["starved"], "policy"])}
        row["fairway_vs_best_pct"] = 100.0 * (fw_p99 / row["best_baseline_p99_s"] - 1.0)
        rows.append(row)
    return pd.DataFrame(rows)


def main(argv: Sequence[str] | None = None) -> int:
    """Run E2; write tables, ``summary.json`` and figures to ``--out``."""
    args = parser(__doc__.splitlines()[0], "results/e2").parse_args(argv)
    profile, policies = setup(args, ALL_POLICIES)
    plan = TINY if args.tiny else {name: FULL.get(name, {}) for name in scenario_names()}
    keys = ("requests", "ttft_p50_s", "ttft_p99_s", "ttft_max_s", "hit_rate", "starved")
    with Timer("e2_scenarios"):
        reqs, rows, seed_rows = [], [], []
        for name, params in plan.items():
            seeds = replicas(name, args.tiny)
            scenarios = build_all(name, profile, seeds, **params)
            for pol in policies:
                r, s = run_all_seeds(scenarios, seeds, pol, profile)
                reqs.append(r)
                summ = summarize(r)
                rows.append({"scenario": name, "policy": pol, **{k: summ[k] for k in keys}})
                for seed, g in r.groupby("seed", sort=False):
                    one = summarize(g)
                    seed_rows.append({"scenario": name, "policy": pol, "seed": seed,
                                      **{k: one[k] for k in keys}})
        requests = pd.concat(reqs, ignore_index=True)
        table = pd.DataFrame(rows)
        best = best_baselines(table)
        out = args.out
        write_parquet(requests, out / "requests.parquet")
        write_parquet(table, out / "p99.parquet")
        write_parquet(pd.DataFrame(seed_rows), out / "p99_by_seed.parquet")
        write_parquet(best, out / "best_baseline.parquet")
        summary = {sc: {"policies": {r.policy: {"p50_s": r.ttft_p50_s, "p99_s": r.ttft_p99_s,
                                                "max_s": r.ttft_max_s, "starved": r.starved}
                                     for r in g.itertuples()}}
                   for sc, g in table.groupby("scenario", sort=False)}
        for r in best.itertuples():
            summary[r.scenario].update(best_baseline=r.best_baseline,
                                       fairway_vs_best_pct=r.fairway_vs_best_pct)
        write_json(summary, out / "summary.json")
        figures.save(figures.bars(table, "scenario", "ttft_p99_s", "policy",
                                  title="E2: TTFT p99 per scenario", ylabel="TTFT p99 (s)",
                                  log_y=True), out / "e2_p99.png")
        norm = table.merge(best[["scenario", "best_baseline_p99_s"]], on="scenario")
        norm["p99_vs_best"] = norm["ttft_p99_s"] / norm["best_baseline_p99_s"]
        figures.save(figures.bars(norm, "scenario", "p99_vs_best", "policy",
                                  title="E2: p99 / best non-starving baseline's p99",
                                  ylabel="relative p99"), out / "e2_p99_relative.png")
    print(table.pivot(index="scenario", columns="policy", values="ttft_p99_s")
          .reindex(list(plan)).to_string(float_format=lambda v: f"{v:.2f}"))
    print(best.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
