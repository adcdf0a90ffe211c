"""The ``fairsim`` command line: ``run``, ``compare``, ``bench``; live ``replay``, ``calibrate``, ...

Every command reads a trace (default: the embedded RAG input), shapes its load, simulates it under
one or more policies, and prints a table or JSON. Errors in the input exit with status 2 and a
message naming the file, line and field; results already computed are kept (written to ``--out``
as each policy finishes).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fairsim import __version__
from fairsim.costmodel import DEFAULT_PROFILE, Profile, load_profile
from fairsim.policies import make_policy, policy_names
from fairsim.sim import EngineConfig, SimResult, simulate
from fairsim.traces import RagSpec, Trace, generate_rag, load_trace, offered_load, scale_time, window
from fairsim.types import Request


def parse_params(items: Sequence[str]) -> dict[str, Any]:
    """``["fast_weight=8", "fair_lane=false"]`` -> ``{"fast_weight": 8, "fair_lane": False}``.

    Values are read as JSON when they parse (numbers, true/false), else kept as strings. A key
    may be scoped to one policy as ``POLICY.KEY`` (``fairway.fast_weight=8``); scoped keys are
    kept as written and resolved by ``params_for``.

    Raises:
        ValueError: An item without ``=``.
    """
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--param {item!r}: expected KEY=VALUE or POLICY.KEY=VALUE")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def params_for(name: str, params: dict[str, Any]) -> dict[str, Any]:
    """The parameters of policy ``name``: unscoped keys plus its own ``NAME.KEY`` ones."""
    out = {k: v for k, v in params.items() if "." not in k}
    prefix = f"{name}."
    out.update({k[len(prefix):]: v for k, v in params.items() if k.startswith(prefix)})
    return out


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows defaults, except empty ones and those the help text already states."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.default in (None, [], False) or "default" in text:
            return text
        return super()._get_help_string(action)


def add_common(p: argparse.ArgumentParser) -> None:
    """Options shared by every simulating command."""
    p.add_argument("--trace", help="Mooncake JSONL trace (default: the embedded RAG input)")
    p.add_argument("--skip-bad", action="store_true", help="skip bad trace records, counting them")
    p.add_argument("--profile", default=DEFAULT_PROFILE,
                   help="cost-model profile: shipped name or JSON path")
    p.add_argument("--budget", type=int, default=2048,
                   help="step token budget, tokens (vLLM max_num_batched_tokens)")
    p.add_argument("--max-num-seqs", type=int, default=256,
                   help="most requests running at once (vLLM max_num_seqs)")
    p.add_argument("--block-size", type=int, default=None,
                   help="tokens per KV block (default: the trace's hash block, 512)")
    cap = p.add_mutually_exclusive_group()
    cap.add_argument("--kv-blocks", type=int, help="KV cache capacity in blocks")
    cap.add_argument("--kv-fraction", type=float,
                     help="KV capacity as a fraction of the trace's reusable content (default 0.3)")
    p.add_argument("--mode", choices=("prefill-only", "colocated"), default="prefill-only",
                   help="prefill-only: a request ends with its first token (the paper's node); "
                        "colocated: it decodes to the trace's output_length on the same engine")
    p.add_argument("--slo", default=None, metavar="ttft=S,tpot=S",
                   help="colocated: goodput = requests meeting these TTFT/TPOT SLOs (seconds)")
    p.add_argument("--time-scale", type=float, default=1.0,
                   help="multiply arrival times by S (>1 stretches the trace, lowering the load)")
    p.add_argument("--window-start", type=float, default=0.0,
                   help="window start, seconds of trace time (before --time-scale)")
    p.add_argument("--window-end", type=float, default=None,
                   help="window end, seconds of trace time (before --time-scale)")
    p.add_argument("--max-requests", type=int, default=None, help="keep the first N requests")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the generated default input when no --trace is given (0 = the shipped file)")
    p.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                   help="policy parameter, e.g. fast_weight=8, or fairway.fast_weight=8 for one policy (repeatable)")
    p.add_argument("--out", type=Path,
                   help="folder for requests-POLICY.parquet, steps-POLICY.parquet, summary.json, run.json")
    p.add_argument("--format", choices=("table", "json"), default="table",
                   help="table for people, json (one object keyed by policy) for scripts")


def build_parser() -> argparse.ArgumentParser:
    """The ``fairsim`` argument parser."""
    parser = argparse.ArgumentParser(prog="fairsim", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"fairsim {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    fmt = HelpFormatter
    run = sub.add_parser("run", help="simulate one policy", formatter_class=fmt)
    run.add_argument("--policy", default="fairway", help=f"one of: {', '.join(policy_names())}")
    add_common(run)
    cmp = sub.add_parser("compare", help="simulate several policies on the same input, side by side",
                         formatter_class=fmt)
    cmp.add_argument("--policies", default="fcfs,lpm,fairway",
                     help="comma-separated policy names, or 'all' (every registered policy but the "
                          "generic klpm, which klpm4 covers)")
    add_common(cmp)
    bench = sub.add_parser("bench", help="speed and peak memory per policy (one process each)",
                           formatter_class=fmt)
    bench.add_argument("--policies", default="fcfs,lpm,fairway",
                       help="comma-separated policy names, or 'all'")
    add_common(bench)
    # Live vLLM commands (replay, equivalence, fidelity, hook-overhead) and calibrate; their
    # modules import vLLM only when a command runs.
    from calibration.cli import add_calibrate_command
    from fairsim.live.cli import add_live_commands

    add_live_commands(sub, add_common)
    add_calibrate_command(sub)
    from fairsim.sweep import add_parser as add_sweep_parser

    add_sweep_parser(sub)
    return parser


def load_requests(args: argparse.Namespace) -> tuple[Trace, list[Request]]:
    """Load and shape the trace named by the options."""
    if args.seed < 0:
        raise ValueError(f"--seed {args.seed}: need an integer >= 0")
    if args.trace is not None and args.seed != 0:
        raise ValueError("--seed only seeds the generated default input; it has no effect with --trace")
    if args.trace is None and args.seed != 0:
        trace = generate_rag(RagSpec(seed=args.seed))
    else:
        trace = load_trace(args.trace, skip_bad=args.skip_bad)
    if not trace.requests:
        raise ValueError(f"{trace.source}: no valid requests in the trace")
    if trace.skipped:
        print(f"fairsim: skipped {len(trace.skipped)} bad records of {trace.source}; first: "
              f"{trace.skipped[0]}", file=sys.stderr)
    requests = window(list(trace.requests), args.window_start, args.window_end, args.max_requests)
    requests = scale_time(requests, args.time_scale)
    if not requests:
        raise ValueError("no requests left after --window-start/--window-end/--max-requests")
    return trace, requests


def engine_config(args: argparse.Namespace) -> EngineConfig:
    """``EngineConfig`` from the options."""
    return EngineConfig(budget_tokens=args.budget, max_num_seqs=args.max_num_seqs,
                        block_size=args.block_size, kv_blocks=args.kv_blocks,
                        kv_fraction=args.kv_fraction, mode=args.mode)


def resolve_policies(spec: str) -> list[str]:
    """``"fcfs,lpm"`` -> names; ``"all"`` -> every registered policy."""
    names = policy_names(include_generic=False) if spec == "all" else [s.strip() for s in spec.split(",") if s.strip()]
    if not names:
        raise ValueError("no policies given")
    return names


def check_policies(names: list[str], profile: Profile, params: dict[str, Any]) -> None:
    """Fail fast, before any long run, on a bad policy name or parameter.

    Raises:
        ValueError: An unknown policy, a parameter it rejects, or a ``POLICY.KEY`` parameter
            scoped to a policy that is not being run.
    """
    for key in params:
        scope = key.partition(".")[0] if "." in key else None
        if scope is not None and scope not in names:
            raise ValueError(f"--param {key}: policy {scope!r} is not among those run ({', '.join(names)})")
    for name in names:
        make_policy(name, profile, **params_for(name, params))


def run_one(name: str, requests: list[Request], profile: Profile, config: EngineConfig,
            params: dict[str, Any], show_progress: bool = True) -> SimResult:
    """Simulate ``requests`` under policy ``name`` with a progress bar after 2 s."""
    from tqdm import tqdm

    policy = make_policy(name, profile, **params)
    with tqdm(total=len(requests), desc=name, unit="req", delay=2.0, leave=False,
              disable=not show_progress or None) as bar:
        return simulate(requests, policy, profile, config, progress=bar.update)


def write_tables(out: Path, name: str, result: SimResult) -> None:
    """Write ``requests-NAME.parquet`` and ``steps-NAME.parquet`` atomically (tmp + rename)."""
    out.mkdir(parents=True, exist_ok=True)
    for kind, table in (("requests", result.requests), ("steps", result.steps)):
        final = out / f"{kind}-{name}.parquet"
        tmp = final.with_suffix(".parquet.tmp")
        table.to_parquet(tmp, index=False)
        tmp.replace(final)


def format_table(rows: dict[str, dict[str, Any]]) -> str:
    """Plain-text side-by-side table of per-policy summaries (plus decode columns, colocated)."""
    cols = [("requests", "requests", "{:d}"), ("ttft_p50_s", "p50 s", "{:.3f}"),
            ("ttft_p90_s", "p90 s", "{:.3f}"), ("ttft_p99_s", "p99 s", "{:.3f}"),
            ("ttft_max_s", "max s", "{:.3f}"), ("hit_rate", "hit rate", "{:.3f}"),
            ("sim_time_s", "sim s", "{:.1f}"), ("wall_time_s", "wall s", "{:.2f}")]
    first = next(iter(rows.values()), {})
    if "tpot_p50_s" in first:
        from fairsim.cli_colocated import DECODE_COLUMNS

        cols[-2:-2] = [c for c in DECODE_COLUMNS if c[0] in first]
    header = ["policy"] + [c[1] for c in cols]
    body = [[name] + [fmt.format(s[key]) for key, _, fmt in cols] for name, s in rows.items()]
    widths = [max(len(r[i]) for r in [header] + body) for i in range(len(header))]
    lines = ["  ".join(v.rjust(w) if i else v.ljust(w) for i, (v, w) in enumerate(zip(r, widths)))
             for r in [header] + body]
    return "\n".join(lines)


def cmd_simulate(args: argparse.Namespace, names: list[str]) -> int:
    """``run`` / ``compare``: simulate each policy, print a table or JSON."""
    from fairsim.metrics import summarize

    from fairsim.metrics import parse_slo

    profile = load_profile(args.profile)
    config = engine_config(args)
    slo = parse_slo(args.slo)
    if slo and config.mode != "colocated":
        raise ValueError("--slo needs --mode colocated (prefill-only runs have no TPOT)")
    params = parse_params(args.param)
    check_policies(names, profile, params)
    trace, requests = load_requests(args)
    load = offered_load(requests, profile)
    info = f"trace {trace.name}: {load.describe()}"
    print(info, file=sys.stderr if args.format == "json" else sys.stdout)
    rows: dict[str, dict[str, Any]] = {}
    for name in names:
        result = run_one(name, requests, profile, config, params_for(name, params))
        summary = summarize(result.requests, result.steps)
        if result.token_gaps is not None:
            from fairsim.cli_colocated import colocated_summary

            summary.update(colocated_summary(result, slo))
        summary["wall_time_s"] = result.wall_time_s
        summary["kv_blocks"] = result.kv_blocks
        summary["block_size"] = result.block_size
        rows[name] = summary
        if args.out is not None:
            write_tables(args.out, name, result)
    if args.format == "json":
        print(json.dumps(rows, indent=2))
    else:
        print(format_table(rows))
        if config.mode == "colocated":
            from fairsim.cli_colocated import format_groups

            groups = format_groups(rows)
            if groups:
                print(groups)
    if args.out is not None:
        (args.out / "summary.json").write_text(json.dumps(rows, indent=2) + "\n")
        write_run_info(args.out, args, trace, names, load)
    return 0


def write_run_info(out: Path, args: argparse.Namespace, trace: Trace, names: list[str], load: Any) -> None:
    """``run.json``: what produced the tables in ``out`` (input, shaping, engine, policies)."""
    info = {
        "trace": trace.source, "policies": names, "params": parse_params(args.param),
        "profile": args.profile, "budget_tokens": args.budget, "max_num_seqs": args.max_num_seqs,
        "block_size": args.block_size, "kv_blocks": args.kv_blocks, "kv_fraction": args.kv_fraction,
        "mode": args.mode, "slo": args.slo, "time_scale": args.time_scale, "window_start_s": args.window_start,
        "window_end_s": args.window_end, "max_requests": args.max_requests, "seed": args.seed,
        "offered_load": load.describe(), "fairsim_version": __version__,
    }
    (out / "run.json").write_text(json.dumps(info, indent=2) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``fairsim`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "run":
            return cmd_simulate(args, [args.policy])
        if args.command == "compare":
            return cmd_simulate(args, resolve_policies(args.policies))
        if args.command == "bench":
            from fairsim.bench import cmd_bench

            return cmd_bench(args, resolve_policies(args.policies))
        from fairsim.live.cli import LIVE_COMMANDS, run_live_command

        if args.command in LIVE_COMMANDS:
            return run_live_command(args)
        if args.command == "calibrate":
            from calibration.cli import cmd_calibrate

            return cmd_calibrate(args)
        if args.command == "sweep":
            from fairsim.sweep import cmd_sweep

            return cmd_sweep(args)
    except (ValueError, OSError) as exc:  # bad input or an unusable path: message, no traceback
        print(f"fairsim: error: {exc}", file=sys.stderr)
        return 2
    parser.error(f"unknown command {args.command}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
