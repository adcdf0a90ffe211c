"""Closed-loop agent sessions: TTFT p50 / p99 / worst and the starvation flag per policy.

The ``agent`` scenario (``fairsim/traces/agent.py``): sessions share a system prompt, each turn's
context grows by the previous answer and tool result, think/tool times are log-normal and some
turns fork sub-agents. Replayed closed-loop (a turn is sent when the turn it follows has finished
in the simulation, plus its think time), so a policy that delays one turn delays the whole
session. Two configurations: ``default`` (``AgentSpec``'s 40 sessions at 0.2 sessions/s) and
``overloaded`` (60 sessions at 1 session/s, docs/sessions.md); four seeds each,
pooled. The policies' client label is the request's ``session_id`` (docs/POLICIES-more.md).

Run: ``python -m experiments.agent_sessions [--out results/agent] [--tiny] [--policies ...]``
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import pandas as pd

from experiments.common import (ALL_POLICIES, Timer, build_all, parser, pct, run_all_seeds, setup,
                                write_json, write_parquet)
from fairsim.metrics import STARVATION_FACTOR

CONFIGS = {"default": {}, "overloaded": {"num_sessions": 60, "session_rate_per_s": 1.0}}
"""Scenario parameters on top of ``AgentSpec``'s defaults."""
SEEDS = [0, 1, 2, 3]


def agent_table(requests: pd.DataFrame) -> pd.DataFrame:
    """Per (config, policy): requests, TTFT p50 / p99 / max (s), starved (max > 3 x p99)."""
    rows = []
    for (cfg, pol), g in requests.groupby(["config", "policy"], sort=False):
        p99, worst = pct(g["ttft_s"], 99), float(g["ttft_s"].max())
        rows.append({"config": cfg, "policy": pol, "requests": len(g), "ttft_p50_s": pct(g["ttft_s"], 50),
                     "ttft_p99_s": p99, "ttft_max_s": worst, "starved": bool(worst > STARVATION_FACTOR * p99)})
    return pd.DataFrame(rows)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the agent sessions; write ``requests.parquet``, ``agent.parquet`` and ``summary.json``."""
    args = parser(__doc__.splitlines()[0], "results/agent").parse_args(argv)
    profile, policies = setup(args, ALL_POLICIES)
    seeds = [0] if args.tiny else SEEDS
    configs = {"default": {"num_sessions": 8}} if args.tiny else CONFIGS
    with Timer("agent_sessions"):
        reqs = []
        for cfg, params in configs.items():
            scenarios = build_all("agent", profile, seeds, **params)
            for pol in policies:
                r, _ = run_all_seeds(scenarios, seeds, pol, profile)
                reqs.append(r.assign(config=cfg))
        requests = pd.concat(reqs, ignore_index=True)
        table = agent_table(requests)
    write_parquet(requests, args.out / "requests.parquet")
    write_parquet(table, args.out / "agent.parquet")
    write_json({"agent": table.to_dict(orient="records")}, args.out / "summary.json")
    print(table.to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
