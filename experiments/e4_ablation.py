"""E4 - ablation: relative vs absolute wait, with and without the Fair lane.

Fairway's four combinations of ``wait_mode`` (relative: ``wait / SLO(L)``; absolute: wait in
seconds) and ``fair_lane`` (on/off), with FCFS and LPM for reference, on the mixed-length
scenario and the two dynamic SEC traces. TTFT p50/p99 are reported separately for short and long
prompts: a prompt is "long" when it has at least ``LONG_TOKENS`` tokens.

Run: ``python -m experiments.e4_ablation [--out results/e4] [--tiny] [--policies ...]``
(``--policies`` limits the reference baselines; the four Fairway variants always run.)
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import pandas as pd

from experiments.common import (FULL, Timer, available, build_all, parser, pct, replicas,
                                run_all_seeds, setup, write_json, write_parquet)
from fairsim import figures

LONG_TOKENS = 4096
"""Prompts of at least this many tokens count as long (mixed: short <= 2,048 < 6,144 <= long)."""
VARIANTS = {  # label -> (policy, params)
    "fairway": ("fairway", {}),
    "abs-wait": ("fairway", {"wait_mode": "absolute"}),
    "no-fair-lane": ("fairway", {"fair_lane": False}),
    "abs-wait+no-fair-lane": ("fairway", {"wait_mode": "absolute", "fair_lane": False}),
}
SCENARIOS = {name: FULL[name] for name in ("mixed", "sec-dyn1", "sec-dyn2")}
"""Full runs: E2's workloads and seeds (``common.FULL``, ``common.REPLICAS``), requests pooled."""
TINY = {"mixed": {"duration_s": 40.0}}


def length_table(requests: pd.DataFrame) -> pd.DataFrame:
    """TTFT p50/p99 of short and long prompts per (scenario, variant)."""
    df = requests.assign(length=(requests["prompt_tokens"] >= LONG_TOKENS).map({True: "long", False: "short"}))
    rows = []
    for (sc, pol, length), g in df.groupby(["scenario", "policy", "length"], sort=False):
        rows.append({"scenario": sc, "policy": pol, "length": length, "requests": len(g),
                     "ttft_p50_s": pct(g["ttft_s"], 50), "ttft_p99_s": pct(g["ttft_s"], 99),
                     "ttft_max_s": float(g["ttft_s"].max())})
    return pd.DataFrame(rows).sort_values(["scenario", "length", "policy"], kind="stable").reset_index(drop=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Run E4; write tables, ``summary.json`` and figures to ``--out``."""
    args = parser(__doc__.splitlines()[0], "results/e4").parse_args(argv)
    profile, refs = setup(args, ["fcfs", "lpm"])
    refs = [r for r in refs if not r.startswith("fairway")]
    plan = TINY if args.tiny else SCENARIOS
    runs = {**{r: (r, {}) for r in refs}, **VARIANTS}
    available([p for p, _ in VARIANTS.values()])
    with Timer("e4_ablation"):
        reqs = []
        for name, params in plan.items():
            seeds = replicas(name, args.tiny)
            scenarios = build_all(name, profile, seeds, **params)
            for label, (pol, kw) in runs.items():
                reqs.append(run_all_seeds(scenarios, seeds, pol, profile, label=label, **kw)[0])
        requests = pd.concat(reqs, ignore_index=True)
        table = length_table(requests)
        out = args.out
        write_parquet(requests, out / "requests.parquet")
        write_parquet(table, out / "ablation.parquet")
        summary: dict = {}
        for r in table.itertuples():
            summary.setdefault(r.scenario, {}).setdefault(r.policy, {})[r.length] = {
                "p50_s": r.ttft_p50_s, "p99_s": r.ttft_p99_s, "requests": r.requests}
        write_json(summary, out / "summary.json")
        for sc in plan:
            sub = table[table["scenario"] == sc]
            figures.save(figures.bars(sub, "length", "ttft_p99_s", "policy",
                                      title=f"E4 {sc}: p99 TTFT of short and long prompts",
                                      ylabel="TTFT p99 (s)"), out / f"e4_{sc}.png")
    print(table.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
