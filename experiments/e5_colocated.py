"""E5 - colocated prefill and decode: does Fairway's advantage hold when decodes share the budget?

Every policy runs each workload twice on the same requests: ``prefill-only`` (the paper's node:
a request ends with its first token) and ``colocated`` (prefill and decode share each step's
2,048-token budget; a request decodes to its output length; KV grows and preemption happens;
``fairsim.sim`` colocated mode). Workloads:

- ``mooncake-conversation``: the real conversation trace with its recorded output lengths, six
  disjoint 600-request windows, time-scaled to a prefill-only load of ``CONVERSATION_LOAD`` on the
  profile (decode adds work on top, so the colocated engine is busier at the same arrivals).
  The SEC workloads keep E2's rates (loaded, but stable colocated too).
- ``sec-steady`` and ``sec-dyn1`` (calm/burst/spike): the SEC-filing Q&A generator, whose requests
  carry no output length; E5 draws one per request from a log-normal with median
  ``OUTPUT_MEDIAN`` tokens and sigma ``OUTPUT_SIGMA``, clipped to 1..``OUTPUT_MAX`` (numpy
  ``default_rng`` seeded by the scenario seed, so both modes and all policies see the same
  lengths).

KV capacity: the scenario's own (E2's), raised where needed so that every request's prompt plus
output fits (``colocated_engine``). Reported per (workload, mode, policy): TTFT p50/p99, and in
colocated mode TPOT p50/p99, E2E p99, goodput under ``SLO`` and preemptions.

Run: ``python -m experiments.e5_colocated [--out results/e5] [--tiny] [--policies ...]``
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence

import numpy as np
import pandas as pd

from experiments.common import (PAPER_POLICIES, Timer, build_all, parser, pct, setup, write_json,
                                write_parquet)
from fairsim import figures
from fairsim.metrics import meets_slo
from fairsim.policies import make_policy
from fairsim.scenarios import Scenario
from fairsim.sim import EngineConfig, simulate
from fairsim.sim.keys import blocks_for
from fairsim.types import Request

CONVERSATION_LOAD = 0.3
"""Prefill-only offered load the conversation windows are scaled to. Decode comes on top (the
trace's answers average hundreds of tokens): at 0.3 the colocated engine is stable (FCFS TTFT of
the first and last 100 requests of a window agree), at 0.5 its queue grows through the window."""
OUTPUT_MEDIAN = 128
OUTPUT_SIGMA = 0.8
OUTPUT_MAX = 1024
"""Generated output lengths of the SEC workloads (tokens): log-normal median, sigma, cap."""
SLO = {"ttft": 10.0, "tpot": 0.1}
"""Goodput SLOs (seconds): TTFT <= 10 s and TPOT <= 100 ms."""
SCENARIOS = {
    "mooncake-conversation": {"load": CONVERSATION_LOAD},
    "sec-steady": {"duration_s": 1800.0},
    "sec-dyn1": {"calm_s": 600.0, "burst_s": 600.0},
}
"""Full runs: workload parameters on top of the scenario defaults."""
E5_REPLICAS = {"mooncake-conversation": 6, "sec-steady": 4, "sec-dyn1": 4}
"""Seeds per workload in the full runs (fewer than E2's for the SEC traces: every run is done
twice, and colocated runs take more steps)."""
TINY = {"sec-steady": {"duration_s": 120.0}}
MODES = ("prefill-only", "colocated")


def with_outputs(requests: Sequence[Request], seed: int) -> list[Request]:
    """``requests`` with log-normal output lengths (see the module docstring), deterministic in ``seed``."""
    rng = np.random.default_rng(1000 + seed)
    draw = np.exp(np.log(OUTPUT_MEDIAN) + OUTPUT_SIGMA * rng.standard_normal(len(requests)))
    lengths = np.clip(np.rint(draw), 1, OUTPUT_MAX).astype(int)
    return [dataclasses.replace(r, output_len=int(o)) for r, o in zip(requests, lengths)]


def colocated_engine(engine: EngineConfig, requests: Sequence[Request]) -> EngineConfig:
    """``engine`` in colocated mode, its KV raised to two of the largest prompt + output if smaller."""
    bs = engine.block_size or requests[0].hash_block_size
    need = 2 * max(blocks_for(r.prompt_len + r.output_len - 1, bs) for r in requests)
    kv = engine.kv_blocks if engine.kv_blocks is None or engine.kv_blocks >= need else need
    return dataclasses.replace(engine, mode="colocated", kv_blocks=kv)


def run_mode(scenario: Scenario, seed: int, policy: str, profile, mode: str) -> pd.DataFrame:
    """Per-request table of one run, with ``scenario``, ``seed``, ``policy`` and ``mode`` columns."""
    engine = colocated_engine(scenario.engine, scenario.requests) if mode == "colocated" else scenario.engine
    result = simulate(scenario.requests, make_policy(policy, profile), profile, engine)
    return result.requests.assign(scenario=scenario.name, seed=seed, policy=policy, mode=mode)


def summary_table(requests: pd.DataFrame) -> pd.DataFrame:
    """Figures per (scenario, mode, policy); decode columns NaN in prefill-only mode."""
    rows = []
    for (sc, mode, pol), g in requests.groupby(["scenario", "mode", "policy"], sort=False):
        row = {"scenario": sc, "mode": mode, "policy": pol, "requests": len(g),
               "ttft_p50_s": pct(g["ttft_s"], 50), "ttft_p99_s": pct(g["ttft_s"], 99),
               "ttft_max_s": float(g["ttft_s"].max()), "preemptions": int(g["preemptions"].sum())}
        if mode == "colocated":
            tpot = g["tpot_s"].dropna()
            row.update(tpot_p50_s=pct(tpot, 50), tpot_p99_s=pct(tpot, 99),
                       e2e_p99_s=pct(g["e2e_s"], 99), goodput_share=float(meets_slo(g, SLO).mean()))
        rows.append(row)
    return pd.DataFrame(rows)


def main(argv: Sequence[str] | None = None) -> int:
    """Run E5; write tables, ``summary.json`` and figures to ``--out``."""
    args = parser(__doc__.splitlines()[0], "results/e5").parse_args(argv)
    profile, policies = setup(args, PAPER_POLICIES)
    plan = TINY if args.tiny else SCENARIOS
    with Timer("e5_colocated"):
        parts = []
        for name, params in plan.items():
            seeds = [0] if args.tiny else list(range(E5_REPLICAS[name]))
            for scenario, seed in zip(build_all(name, profile, seeds, **params), seeds):
                if name.startswith("sec"):
                    scenario = dataclasses.replace(scenario, requests=with_outputs(scenario.requests, seed))
                for pol in policies:
                    for mode in MODES:
                        parts.append(run_mode(scenario, seed, pol, profile, mode))
        requests = pd.concat(parts, ignore_index=True)
        table = summary_table(requests)
        out = args.out
        write_parquet(requests, out / "requests.parquet")
        write_parquet(table, out / "e5.parquet")
        summary: dict = {}
        for r in table.to_dict("records"):
            summary.setdefault(r["scenario"], {}).setdefault(r["mode"], {})[r["policy"]] = {
                k: v for k, v in r.items() if k not in ("scenario", "mode", "policy")}
        write_json({"slo": SLO, "results": summary}, out / "summary.json")
        for sc in plan:
            sub = table[table["scenario"] == sc]
            figures.save(figures.bars(sub, "mode", "ttft_p99_s", "policy",
                                      title=f"E5 {sc}: p99 TTFT, prefill-only vs colocated",
                                      ylabel="TTFT p99 (s)"), out / f"e5_{sc}.png")
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
