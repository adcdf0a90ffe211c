"""E3 - flood stress test: a backlog of misses, then a stream of highly cached requests.

Per policy: the worst TTFT and worst queueing delay of a miss (how long the backlog can be
starved) and the median TTFT of the flood requests (what protecting the misses costs them).
Three configurations: the default flood (misses of 6,144-12,288 tokens, 6,000 flood requests =
300 s), ``short-misses`` (2,048-6,144 tokens), because a Fairway step places up to a quarter of
the oldest miss's work ahead of it: with misses above 4 x the 2,048-token budget that quarter
fills the whole step, and ``flood-75s`` (1,500 flood requests, the former default), to show how
the worst miss depends on how long the flood lasts. The flood median over all flood requests is
diluted by the flood requests that arrive after the misses are done, so the table also gives
``flood_contended_p50_s``: the median TTFT of the flood requests that arrived before the run's last
miss got its first token (what the flood pays while misses are present).

Run: ``python -m experiments.e3_flood [--out results/e3] [--tiny] [--policies ...]``
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import pandas as pd

from experiments.common import (ALL_POLICIES, FULL, Timer, build_all, parser, pct, replicas,
                                run_all_seeds, setup, write_json, write_parquet)
from fairsim import figures

CONFIGS = {"default": {}, "short-misses": {"miss_tokens": (2048, 6144)},
           "flood-75s": {"num_flood": 1500}}
"""Full runs: on top of ``common.FULL["flood"]`` (a 300 s flood), eight seeds each."""
TINY = {"default": {"num_miss": 4, "num_flood": 150}}


def flood_table(requests: pd.DataFrame) -> pd.DataFrame:
    """Per (config, policy): worst miss TTFT and queue delay, flood median and p99 TTFT (s)."""
    if "config" not in requests.columns:
        requests = requests.assign(config="default")
    if "seed" not in requests.columns:
        requests = requests.assign(seed=0)
    last_miss = (requests[requests["klass"] == "miss"].groupby(["config", "policy", "seed"])
                 ["first_token_s"].max().rename("last_miss_s"))
    requests = requests.join(last_miss, on=["config", "policy", "seed"])
    rows = []
    for (cfg, pol), g in requests.groupby(["config", "policy"], sort=False):
        miss = g[g["klass"] == "miss"]
        flood = g[g["klass"] == "flood"]
        contended = flood[flood["arrival_s"] < flood["last_miss_s"]]
        rows.append({"config": cfg, "policy": pol, "misses": len(miss), "floods": len(flood),
                     "miss_worst_ttft_s": float(miss["ttft_s"].max()),
                     "miss_worst_queue_s": float(miss["queue_delay_s"].max()),
                     "miss_p50_s": pct(miss["ttft_s"], 50),
                     "flood_p50_s": pct(flood["ttft_s"], 50), "flood_p99_s": pct(flood["ttft_s"], 99),
                     "flood_contended": len(contended),
                     "flood_contended_p50_s": pct(contended["ttft_s"], 50)})
    return pd.DataFrame(rows)


def main(argv: Sequence[str] | None = None) -> int:
    """Run E3; write tables, ``summary.json`` and figures to ``--out``."""
    args = parser(__doc__.splitlines()[0], "results/e3").parse_args(argv)
    profile, policies = setup(args, ALL_POLICIES)
    with Timer("e3_flood"):
        reqs, steps = [], []
        plan = TINY if args.tiny else {c: {**FULL["flood"], **p} for c, p in CONFIGS.items()}
        seeds = replicas("flood", args.tiny)
        for cfg, params in plan.items():
            scenarios = build_all("flood", profile, seeds, **params)
            scenario = scenarios[0]
            for pol in policies:
                r, s = run_all_seeds(scenarios, seeds, pol, profile)
                reqs.append(r.assign(config=cfg))
                steps.append(s.assign(config=cfg))
        requests = pd.concat(reqs, ignore_index=True)
        steps_df = pd.concat(steps, ignore_index=True)
        table = flood_table(requests)
        out = args.out
        write_parquet(requests, out / "requests.parquet")
        write_parquet(steps_df, out / "steps.parquet")
        write_parquet(table, out / "flood.parquet")
        summary: dict = {}
        for r in table.to_dict("records"):
            summary.setdefault(r["config"], {})[r["policy"]] = {
                k: v for k, v in r.items() if k not in ("config", "policy")}
        write_json(summary, out / "summary.json")
        long = table.melt(id_vars=["config", "policy"],
                          value_vars=["miss_worst_ttft_s", "flood_contended_p50_s"],
                          var_name="metric", value_name="seconds")
        long["metric"] = long["config"] + ": " + long["metric"]
        figures.save(figures.bars(long, "metric", "seconds", "policy",
                                  title="E3 flood: worst miss TTFT and contended flood median",
                                  ylabel="seconds"), out / "e3_flood.png")
        first = requests[requests["config"] == "default"]
        figures.save(figures.ttft_cdf(first, title="E3 flood (default): TTFT CDF"),
                     out / "e3_cdf.png")
        figures.save(figures.queue_and_kv(steps_df[(steps_df["config"] == "default")
                                                   & (steps_df["seed"] == 0)],
                                          kv_blocks=int(scenario.engine.kv_blocks or 0) or None,
                                          title="E3 flood (default, seed 0): queue and KV"),
                     out / "e3_queue_kv.png")
    print(table.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
