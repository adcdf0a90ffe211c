"""E7 - every registered ordering on every workload class: where each one wins.

Runs every registered policy (``fairsim.policies.policy_names()``: the paper's, the credit ones and
the engine orderings ``suf``, ``lpm-aging``, ``sjf-aging``, ``hrrn``, ``shortest-prefill-first``,
``dfs-weight``, ``lof``, ``lpm-sglang``) at its defaults (no parameter set per workload) on:

- E1: the spike window of ``sec-dyn1`` / ``sec-dyn2`` (subset ``spike`` of those cases);
- E2: the eleven scenarios (E2's full lengths, fewer seeds: ``SEEDS``);
- E3: the flood, reported over all requests and over its misses (subset ``misses``);
- E4: ``mixed`` split into prompts below / at least 4,096 tokens (subsets ``short`` / ``long``);
- E5: colocated prefill and decode (``mooncake-conversation`` at prefill-only ideal load 0.3 with
  its recorded outputs, ``sec-steady`` with E5's drawn outputs);
- the four public traces at three loads each: a ``LOAD_WINDOW``-request window (two windows per
  trace) scaled to ``fairsim run --target-load`` 0.7 / 1.0 / 1.3 (mean offered load, no reuse);
- closed-loop agent sessions (the generated ``agent`` scenario, default 40 sessions at 0.2/s and
  the overloaded 60 at 1/s) in both engine modes.

Per (case, subset, policy): requests, hit rate, TTFT p50 / p99 / max, the starvation flag (max > 3
x own p99), the count of requests waiting longer than FCFS's worst in the same case, and p50 / p99
/ max as ratios to FCFS's. Per (workload class, policy): geometric means of those ratios over the
class's cases and the number of starved cases. Writes ``table.parquet``, ``classes.parquet``,
``table.md``, ``requests.parquet`` (one row per request: the columns the analysis needs),
``steps-agent.parquet`` (the agent runs' step tables under ``STEP_POLICIES``), ``summary.json`` and
``e7_orderings.png`` into ``--out``.

Run: ``python -m experiments.e7_engine_orderings [--out results/e7] [--tiny] [--policies ...]``
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from experiments.common import (FULL, Timer, parser, pct, write_json, write_parquet)
from experiments.e5_colocated import CONVERSATION_LOAD, colocated_engine, with_outputs
from fairsim.costmodel import Profile, load_profile
from fairsim.metrics import STARVATION_FACTOR
from fairsim.policies import make_policy, policy_names
from fairsim.scenarios import A6000_KV_BLOCKS, Scenario, build_scenario
from fairsim.sim import EngineConfig, simulate
from fairsim.traces.offered import time_scale_for_load
from fairsim.traces.real import real_scenario
from fairsim.traces.shaping import scale_time

LONG_TOKENS = 4096
"""E4's split: a prompt of at least this many tokens is ``long``."""
LOADS = (0.7, 1.0, 1.3)
"""``--target-load`` values of the public-trace runs (mean offered load, no reuse)."""
LOAD_WINDOW = 1000
"""Requests per public-trace window in the load runs."""
LOAD_WINDOW_STEP_S = {"mooncake-synthetic": 500.0}
"""Trace seconds between two windows of one trace in the load runs (the seed picks one); 1,200 s
for a trace not named (``synthetic_trace.jsonl`` spans only 1,022 s)."""
AGENT = {"agent": {}, "agent-overloaded": {"num_sessions": 60, "session_rate_per_s": 1.0}}
"""Agent configurations (``experiments.agent_sessions.CONFIGS``)."""
CLASSES = {"reuse": "RAG with reuse", "chat": "chat traces (Mooncake)", "no-reuse": "no reuse (Azure)",
           "flood": "floods", "agent": "agent sessions"}
"""Workload classes: key -> name in the tables."""
SEEDS = {"sec-dyn1": 6, "sec-dyn2": 6, "sec-steady": 3, "multihop": 2, "mixed": 2, "rag": 1, "flood": 2,
         "mooncake-conversation": 6, "mooncake-synthetic": 4, "azure-code": 6, "azure-conv": 6,
         "e5-conversation": 3, "e5-sec-steady": 1, "load": 2, "agent": 4}
"""Seeds per case in the default run, sized for a shared 2-core machine (E2 runs more)."""

Builder = Callable[[Profile, int], Scenario]


@dataclass(frozen=True)
class Case:
    """One workload: how to build it per seed, which class it belongs to, what to report.

    Attributes:
        name: Case name (a table row).
        experiment: ``E1``..``E5``, ``loads`` or ``agent`` (E2 cases also serve E1/E3/E4 subsets).
        klass: A key of ``CLASSES``.
        build: ``(profile, seed) -> Scenario``.
        seeds: Seeds to run (pooled in the statistics).
        mode: ``prefill-only`` or ``colocated``.
        subsets: Extra row subsets: name -> (experiment, request filter).
    """

    name: str
    experiment: str
    klass: str
    build: Builder
    seeds: tuple[int, ...]
    mode: str = "prefill-only"
    subsets: dict[str, tuple[str, Callable[[pd.DataFrame], pd.Series]]] = field(default_factory=dict)


def _scenario(name: str, **params) -> Builder:
    return lambda profile, seed: build_scenario(name, profile, seed, **params)


def _with_outputs(name: str, **params) -> Builder:
    def build(profile: Profile, seed: int) -> Scenario:
        sc = build_scenario(name, profile, seed, **params)
        return dataclasses.replace(sc, requests=with_outputs(sc.requests, seed))
    return build


def _at_target_load(trace: str, target: float, max_requests: int) -> Builder:
    """A window of a public trace at ``fairsim run --target-load target`` (no reuse counted)."""
    def build(profile: Profile, seed: int) -> Scenario:
        requests = real_scenario(trace, profile, 1.0, start_s=seed * LOAD_WINDOW_STEP_S.get(trace, 1200.0),
                                 max_requests=max_requests, max_prompt_tokens=32768)
        scale = time_scale_for_load(requests, profile, EngineConfig().budget_tokens, target)
        return Scenario(trace, scale_time(requests, scale), EngineConfig(kv_blocks=A6000_KV_BLOCKS))
    return build


SPIKE = {"spike": ("E1", lambda r: r["window"] == "spike")}
MIXED = {"short": ("E4", lambda r: r["prompt_tokens"] < LONG_TOKENS),
         "long": ("E4", lambda r: r["prompt_tokens"] >= LONG_TOKENS)}
FLOOD = {"misses": ("E3", lambda r: r["klass"] == "miss")}


def full_cases() -> list[Case]:
    """The default plan (module docstring); lengths from ``common.FULL``, seeds from ``SEEDS``."""
    def seeds(key: str) -> tuple[int, ...]:
        return tuple(range(SEEDS[key]))

    classes = {"sec-dyn1": "reuse", "sec-dyn2": "reuse", "sec-steady": "reuse", "multihop": "reuse",
               "mixed": "reuse", "rag": "reuse", "flood": "flood", "mooncake-conversation": "chat",
               "mooncake-synthetic": "chat", "azure-code": "no-reuse", "azure-conv": "no-reuse"}
    subsets = {"sec-dyn1": SPIKE, "sec-dyn2": SPIKE, "mixed": MIXED, "flood": FLOOD}
    cases = [Case(name, "E2", klass, _scenario(name, **FULL.get(name, {})), seeds(name),
                  subsets=subsets.get(name, {})) for name, klass in classes.items()]
    cases += [Case("e5-conversation", "E5", "chat",
                   _scenario("mooncake-conversation", load=CONVERSATION_LOAD), seeds("e5-conversation"),
                   mode="colocated"),
              Case("e5-sec-steady", "E5", "reuse", _with_outputs("sec-steady", duration_s=1800.0),
                   seeds("e5-sec-steady"), mode="colocated")]
    for trace in ("mooncake-conversation", "mooncake-synthetic", "azure-code", "azure-conv"):
        for load in LOADS:
            cases.append(Case(f"{trace}@{load:g}", "loads", classes[trace],
                              _at_target_load(trace, load, LOAD_WINDOW), seeds("load")))
    for name, params in AGENT.items():
        for mode in ("prefill-only", "colocated"):
            cases.append(Case(f"{name}/{mode}", "agent", "agent", _scenario("agent", **params),
                              seeds("agent"), mode=mode))
    return cases


def tiny_cases() -> list[Case]:
    """Seconds-long plan for tests: generated workloads only (no trace files needed)."""
    return [Case("rag", "E2", "reuse", _scenario("rag", num_requests=150), (0,)),
            Case("flood", "E2", "flood", _scenario("flood", num_miss=4, num_flood=120), (0,), subsets=FLOOD),
            Case("agent/prefill-only", "agent", "agent", _scenario("agent", num_sessions=8), (0,)),
            Case("agent/colocated", "agent", "agent", _scenario("agent", num_sessions=8), (0,),
                 mode="colocated")]


KEEP = ["request_id", "arrival_s", "released_s", "prompt_tokens", "cached_tokens", "first_scheduled_s", "ttft_s",
        "queue_delay_s", "finish_s", "session_id", "after", "turn", "klass", "window"]
"""Per-request columns kept in ``requests.parquet`` (those a trace lacks are left out), plus
``case``, ``seed``, ``policy`` and ``ideal_cached_tokens`` (``ideal_cached``)."""
STEP_POLICIES = ("fcfs", "lpm", "fairway", "hrrn", "suf")
"""Policies whose agent-run step tables go to ``steps-agent.parquet`` (for the Fairway analysis)."""
STEP_KEEP = ["step", "start_s", "duration_s", "tokens", "decode_tokens", "waiting", "running",
             "kv_blocks_used", "kv_blocks_cached", "evictions", "preemptions"]


def ideal_cached(req: pd.DataFrame, blocks: dict[str, tuple], block_tokens: int) -> np.ndarray:
    """Per row of one run's request table: the tokens an unbounded prefix cache would hit.

    That is the longest prefix of the request's hash blocks that a request sent before it carried,
    in the run's own order of sending (``released_s``: closed loop sends a turn after its
    predecessor), at most ``prompt - 1`` tokens (the engine computes the last one). It bounds the
    engine's hit only when requests are admitted in the order they were sent: a request overtaken
    by a later one that shares its prefix can hit more (299 of E7's 2.64 million rows, one of them
    in the agent runs)."""
    seen: set = set()
    out = np.zeros(len(req), dtype=np.int64)
    order = np.argsort(req["released_s"].to_numpy(), kind="stable")
    ids, prompts = req["request_id"].to_numpy(), req["prompt_tokens"].to_numpy()
    for i in order:
        own = blocks[ids[i]]
        n = 0
        while n < len(own) and own[n] in seen:
            n += 1
        out[i] = min(n * block_tokens, prompts[i] - 1)
        seen.update(own)
    return out


def run_case(case: Case, policies: Sequence[str], profile: Profile) -> Iterator[tuple[pd.DataFrame, pd.DataFrame]]:
    """``(requests, steps)`` of every (seed, policy) run of ``case``, with ``case``/``seed``/``policy``."""
    for seed in case.seeds:
        scenario = case.build(profile, seed)
        engine = (colocated_engine(scenario.engine, scenario.requests) if case.mode == "colocated"
                  else scenario.engine)
        blocks = {r.request_id: tuple(r.block_hashes) for r in scenario.requests}
        block_tokens = scenario.requests[0].hash_block_size
        for pol in policies:
            result = simulate(scenario.requests, make_policy(pol, profile), profile, engine)
            req = result.requests
            req = req[[c for c in KEEP if c in req.columns]].assign(
                case=case.name, seed=seed, policy=pol, ideal_cached_tokens=ideal_cached(req, blocks, block_tokens))
            yield req, result.steps.assign(case=case.name, seed=seed, policy=pol)


def case_tables(case: Case, policies: Sequence[str], profile: Profile, parts: Path,
                resume: bool) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """``(requests, steps)`` of a case (steps only for agent cases, only ``STEP_POLICIES``),
    written to ``parts`` as they finish so that ``--resume`` can skip a finished case."""
    stem = case.name.replace("/", "_")
    req_path, steps_path = parts / f"{stem}-requests.parquet", parts / f"{stem}-steps.parquet"
    agent = case.experiment == "agent"
    if resume and req_path.is_file() and (steps_path.is_file() or not agent):
        requests = pd.read_parquet(req_path)
        if set(requests["policy"]) == set(policies):
            print(f"  {case.name}: reused {req_path}", file=sys.stderr)
            return requests, pd.read_parquet(steps_path) if agent else None
    with Timer(f"  {case.name} ({len(case.seeds)} seeds)"):
        runs = list(run_case(case, policies, profile))
    requests = pd.concat([r for r, _ in runs], ignore_index=True)
    write_parquet(requests, req_path)
    if not agent:
        return requests, None
    steps = pd.concat([s[STEP_KEEP + ["case", "seed", "policy"]] for _, s in runs
                       if s["policy"].iloc[0] in STEP_POLICIES], ignore_index=True)
    write_parquet(steps, steps_path)
    return requests, steps


def stats(g: pd.DataFrame) -> dict:
    """Requests, hit rate, TTFT p50 / p99 / max (s) and the starvation flag of one run's rows."""
    p99, worst = pct(g["ttft_s"], 99), float(g["ttft_s"].max())
    return {"requests": len(g), "hit_rate": float(g["cached_tokens"].sum() / g["prompt_tokens"].sum()),
            "p50_s": pct(g["ttft_s"], 50), "p99_s": p99, "max_s": worst,
            "starved": bool(worst > STARVATION_FACTOR * p99)}


def case_rows(case: Case, requests: pd.DataFrame) -> list[dict]:
    """Table rows of one case: subset ``all`` plus the case's subsets, every policy."""
    rows = []
    parts = {"all": (case.experiment, None), **case.subsets}
    for subset, (experiment, keep) in parts.items():
        sub = requests if keep is None else requests[keep(requests)]
        fcfs_worst = float(sub.loc[sub["policy"] == "fcfs", "ttft_s"].max()) if (sub["policy"] == "fcfs").any() else np.nan
        for pol, g in sub.groupby("policy", sort=False):
            rows.append({"experiment": experiment, "class": case.klass, "case": case.name, "mode": case.mode,
                         "subset": subset, "policy": pol, **stats(g),
                         "ideal_hit_rate": float(g["ideal_cached_tokens"].sum() / g["prompt_tokens"].sum()),
                         "beyond_fcfs_worst": int((g["ttft_s"] > fcfs_worst).sum())})
    return rows


def add_ratios(table: pd.DataFrame, baseline: str = "fcfs") -> pd.DataFrame:
    """``p50_x``, ``p99_x``, ``max_x``: each figure over ``baseline``'s in the same (case, subset)
    (NaN when the baseline did not run)."""
    base = table[table["policy"] == baseline].set_index(["case", "subset"])
    out = table.copy()
    for col in ("p50", "p99", "max"):
        ref = out.set_index(["case", "subset"]).index.map(base[f"{col}_s"].to_dict().get)
        out[f"{col}_x"] = out[f"{col}_s"].to_numpy() / np.asarray(ref, dtype=float)
    return out


def class_table(table: pd.DataFrame) -> pd.DataFrame:
    """Per (class, policy), over the subset-``all`` rows: geometric-mean ratios to FCFS, cases,
    starved cases and requests beyond FCFS's worst."""
    rows = []
    whole = table[table["subset"] == "all"]
    for (klass, pol), g in whole.groupby(["class", "policy"], sort=False):
        rows.append({"class": klass, "policy": pol, "cases": len(g),
                     **{f"{c}_x": float(np.exp(np.log(g[f"{c}_x"]).mean())) for c in ("p50", "p99", "max")},
                     "hit_rate": float(g["hit_rate"].mean()), "starved_cases": int(g["starved"].sum()),
                     "beyond_fcfs_worst": int(g["beyond_fcfs_worst"].sum())})
    return pd.DataFrame(rows)


def markdown(table: pd.DataFrame, classes: pd.DataFrame) -> str:
    """``table.md``: the class summary, then one table per (case, subset)."""
    lines = ["# E7: every ordering, every workload", "",
             "Ratios are to FCFS in the same case (geometric mean over a class's cases); "
             "`starved` = worst > 3 x own p99; `>fcfs max` = requests waiting longer than FCFS's worst.", ""]
    for klass, g in classes.groupby("class", sort=False):
        lines += [f"## {CLASSES.get(klass, klass)} ({int(g['cases'].iloc[0])} cases)", "",
                  "| policy | p50 / FCFS | p99 / FCFS | max / FCFS | hit rate | starved cases | >fcfs max |",
                  "|---|---|---|---|---|---|---|"]
        for r in g.sort_values("p50_x").itertuples():
            lines.append(f"| {r.policy} | {r.p50_x:.2f} | {r.p99_x:.2f} | {r.max_x:.2f} | {r.hit_rate:.2f} "
                         f"| {r.starved_cases} | {r.beyond_fcfs_worst} |")
        lines.append("")
    for (case, subset), g in table.groupby(["case", "subset"], sort=False):
        head = g.iloc[0]
        lines += [f"### {case} [{subset}] ({head['experiment']}, {head['mode']}, {int(head['requests'])} requests)", "",
                  "| policy | p50 s | p99 s | max s | p50 x | p99 x | max x | hit | starved | >fcfs max |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for r in g.itertuples():
            lines.append(f"| {r.policy} | {r.p50_s:.2f} | {r.p99_s:.2f} | {r.max_s:.1f} | {r.p50_x:.2f} | "
                         f"{r.p99_x:.2f} | {r.max_x:.2f} | {r.hit_rate:.2f} | {'yes' if r.starved else ''} | "
                         f"{r.beyond_fcfs_worst} |")
        lines.append("")
    return "\n".join(lines)


ENGINE_ORDERINGS = ("suf", "lpm-aging", "sjf-aging", "hrrn", "shortest-prefill-first", "dfs-weight",
                    "lof", "lpm-sglang")
"""The orderings serving engines ship (SGLang, TensorRT-LLM): orange in the figure."""


def family(policy: str) -> str:
    """Colour of a policy in the figure: Fairway and its variants, engine orderings, credit, paper."""
    if policy.startswith("fairway"):
        return "tab:green"
    if policy in ENGINE_ORDERINGS:
        return "tab:orange"
    if policy in ("drr", "drr-dynamo", "vtc", "dlpm"):
        return "tab:purple"
    return "tab:blue"


def figure(classes: pd.DataFrame):
    """One panel per class: each policy's median / FCFS's against its worst / FCFS's (log axes;
    colour = family, a cross = starved in at least one of the class's cases). Floods use the p99
    instead of the median: a flood's median is a cached flood request's, the same for every order."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    keys = list(dict.fromkeys(classes["class"]))
    cols = min(3, len(keys))
    rows = -(-len(keys) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.2 * cols, 5.4 * rows), squeeze=False)
    for ax, klass in zip(axes.flat, keys):
        g = classes[classes["class"] == klass]
        x = "p99" if klass == "flood" else "p50"
        for r in g.itertuples():
            ax.scatter(getattr(r, f"{x}_x"), r.max_x, s=28, color=family(r.policy),
                       marker="x" if r.starved_cases else "o")
            ax.annotate(r.policy, (getattr(r, f"{x}_x"), r.max_x), fontsize=6.5, xytext=(3, 2), textcoords="offset points",
                        color=family(r.policy))
        ax.axhline(1.0, color="grey", lw=0.5)
        ax.axvline(1.0, color="grey", lw=0.5)
        ax.set_xscale("log")
        ax.set_yscale("log")
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_locator(LogLocator(base=10, subs=tuple(range(1, 10))))
            axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            axis.set_minor_formatter(NullFormatter())
        ax.set_title(f"{CLASSES.get(klass, klass)} ({int(g['cases'].iloc[0])} cases)", fontsize=10)
        ax.set_xlabel(f"TTFT {x} / FCFS's (geometric mean over cases)")
        ax.tick_params(labelsize=7)
        ax.set_ylabel("worst TTFT / FCFS's")
    for ax in list(axes.flat)[len(keys):]:
        ax.axis("off")
    fig.suptitle("E7: lower left wins; green = Fairway family, orange = engine orderings, purple = credit, "
                 "blue = paper baselines; x = starved in some case", fontsize=10)
    fig.tight_layout()
    return fig


def main(argv: Sequence[str] | None = None) -> int:
    """Run E7; write the tables, the figure and ``summary.json`` to ``--out``."""
    p = parser(__doc__.splitlines()[0], "results/e7")
    p.add_argument("--cases", default=None, help="comma-separated case names to run (default: all)")
    p.add_argument("--resume", action="store_true",
                   help="reuse the per-case tables an earlier run left in OUT/parts (same code and policies)")
    args = p.parse_args(argv)
    profile = load_profile(args.profile) if args.profile else load_profile()
    policies = ([s.strip() for s in args.policies.split(",") if s.strip()] if args.policies
                else policy_names())
    unknown = sorted(set(policies) - set(policy_names()))
    if unknown:
        raise SystemExit(f"--policies: unknown {', '.join(unknown)}; known: {', '.join(policy_names())}")
    cases = tiny_cases() if args.tiny else full_cases()
    if args.cases:
        wanted = [c.strip() for c in args.cases.split(",")]
        known = {c.name for c in cases}
        if missing := [c for c in wanted if c not in known]:
            raise SystemExit(f"--cases: unknown {', '.join(missing)}; known: {', '.join(sorted(known))}")
        cases = [c for c in cases if c.name in wanted]
    with Timer("e7_engine_orderings"):
        reqs, agent_steps, rows = [], [], []
        for case in cases:
            requests, steps = case_tables(case, policies, profile, args.out / "parts", args.resume)
            reqs.append(requests)
            if steps is not None:
                agent_steps.append(steps)
            rows += case_rows(case, requests)
        table = add_ratios(pd.DataFrame(rows))
        classes = class_table(table)
    out = args.out
    write_parquet(table, out / "table.parquet")
    write_parquet(classes, out / "classes.parquet")
    write_parquet(pd.concat(reqs, ignore_index=True), out / "requests.parquet")
    if agent_steps:
        write_parquet(pd.concat(agent_steps, ignore_index=True), out / "steps-agent.parquet")
    (out / "table.md").write_text(markdown(table, classes) + "\n")
    write_json({"policies": policies, "cases": {c.name: {"experiment": c.experiment, "class": c.klass,
                                                          "mode": c.mode, "seeds": list(c.seeds)} for c in cases},
                "classes": classes.to_dict(orient="records")}, out / "summary.json")
    from fairsim import figures
    figures.save(figure(classes), out / "e7_orderings.png")
    print(classes.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
