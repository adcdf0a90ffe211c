"""``fairsim`` subcommands that drive a live vLLM engine: replay, equivalence, fidelity, hook-overhead.

The parsers import nothing from vLLM; each command imports it when it runs.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from fairsim.io import count_arg, file_arg, name_arg, path_arg, strict_json

#: Commands added to the ``fairsim`` parser by ``add_live_commands``.
LIVE_COMMANDS = ("replay", "equivalence", "fidelity", "hook-overhead")
#: Profile measured on this project's CPU machine with the tiny Llama (``fairsim calibrate``).
CPU_PROFILE = "cpu-tiny-llama-vllm-measured"


def _engine_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scheduler", choices=("sync", "async"), default="sync",
                   help="hook class: PolicyScheduler (sync, CPU) or AsyncPolicyScheduler (GPU)")
    p.add_argument("--model", default=None, help="model folder/name (default: the shipped tiny Llama, dummy weights)")
    p.add_argument("--load-format", default=None, help="vLLM load_format (default dummy for the tiny Llama, auto otherwise)")


def add_live_commands(sub: Any, add_common: Any) -> None:
    """Add the live subcommands to the ``fairsim`` subparsers ``sub``."""
    from fairsim.options import HelpFormatter  # --help shows each default, as run's does
    from fairsim.policies import policy_names

    rep = sub.add_parser("replay", help="replay a trace against a live vLLM engine", formatter_class=HelpFormatter)
    rep.add_argument("--engine", choices=("vllm",), required=True, help="the live engine (vllm)")
    rep.add_argument("--policy", default="fairway", help=f"one of: {', '.join(policy_names())}")
    rep.add_argument("--virtual", action="store_true",
                     help="virtual clock (decision-equivalence mode) instead of real time")
    rep.add_argument("--record", type=file_arg, default=None,
                     help="the hook writes every request the engine sees to this trace file "
                          "(canonical JSONL + PATH.meta.json; fairsim/live/recorder.py)")
    # --mode and --slo are refused with their reason (run_live_command): not offered in --help.
    add_common(rep, goodput=False)
    rep._option_string_actions["--mode"].help = argparse.SUPPRESS  # noqa: SLF001 (as analyze's --param)
    # the CPU backend's block (describe_run's live_block_size below), not the trace's hash block
    rep._option_string_actions["--block-size"].help = "tokens per KV block (default 128)"  # noqa: SLF001
    _engine_options(rep)

    eq = sub.add_parser("equivalence", help="compare simulator and vLLM decisions per request",
                        formatter_class=HelpFormatter)
    eq.add_argument("--policies", default="fcfs,lpm,fairway", help="comma-separated policies the hook accepts")
    eq.add_argument("--requests", type=int, default=200, help="requests in the generated trace")
    eq.add_argument("--rate", type=float, default=8.0,
                    help="arrival rate, requests/s (virtual time); with --sessions: session starts/s")
    eq.add_argument("--sessions", type=int, default=0,
                    help="N > 0: a closed-loop agent trace of N sessions (with sub-agents) instead "
                         "of the RAG trace; --requests is then unused")
    eq.add_argument("--kv-blocks", type=int, default=48, help="usable KV blocks of 128 tokens")
    eq.add_argument("--seed", type=int, default=1, help="seed of the generated trace")
    eq.add_argument("--profile", type=name_arg, default="a6000-llama3.1-8b-vllm-prior",
                    help="profile giving step times on the virtual clock")
    eq.add_argument("--out", type=path_arg, help="write equivalence-POLICY.csv tables here")
    eq.add_argument("--mode", choices=("prefill-only", "colocated"), default="prefill-only",
                    help="colocated: requests decode to their output length on both sides; "
                         "preemptions are compared too")
    eq.add_argument("--max-output", type=int, default=None,
                    help="colocated: output lengths drawn uniformly from 1..N tokens (default 256)")
    eq.add_argument("--max-num-seqs", type=count_arg, default=16,
                    help="most running requests, both sides (1 to the 2048-token step budget, as vLLM requires)")

    fid = sub.add_parser("fidelity", help="TTFT p50/p99 of the simulator vs a real-time vLLM replay",
                         formatter_class=HelpFormatter)
    fid.add_argument("--policies", default="fcfs,lpm,fairway", help="comma-separated policies the hook accepts")
    fid.add_argument("--requests", type=int, default=60, help="requests in the generated trace")
    fid.add_argument("--rate", type=float, default=2.0, help="arrival rate, requests/s (wall time)")
    fid.add_argument("--kv-blocks", type=int, default=48, help="usable KV blocks of 128 tokens")
    fid.add_argument("--seed", type=int, default=1, help="seed of the generated trace")
    fid.add_argument("--profile", type=name_arg, default=CPU_PROFILE, help="profile of this engine (measured)")
    fid.add_argument("--out", type=path_arg, help="write the live and simulated tables and fidelity.json here")
    fid.add_argument("--mode", choices=("prefill-only", "colocated"), default="prefill-only",
                     help="colocated: requests decode to their output length; TPOT is compared too")
    fid.add_argument("--max-output", type=int, default=None,
                     help="colocated: output lengths drawn uniformly from 1..N tokens (default 64)")

    ov = sub.add_parser("hook-overhead", help="time the hook's reordering next to the engine's step",
                        formatter_class=HelpFormatter)
    ov.add_argument("--policies", default="fcfs,lpm,fairway",
                    help="comma-separated policy names, or all (every registered policy the hook accepts)")
    ov.add_argument("--sizes", default="10,100,1000", help="waiting-queue lengths")
    ov.add_argument("--profile", type=name_arg, default="a6000-llama3.1-8b-vllm-prior",
                    help="profile giving the policies their T_idle")
    ov.add_argument("--steps", type=int, default=20,
                    help="engine steps timed per policy and size (the median and p90 are over them)")


def _write_live(out: Path, name: str, result: Any) -> None:
    from fairsim.io import atomic_to_parquet, file_stem

    out.mkdir(parents=True, exist_ok=True)
    atomic_to_parquet(result.requests, out / f"requests-{file_stem(name)}.parquet")
    atomic_to_parquet(result.steps, out / f"steps-{file_stem(name)}.parquet")


def _check_first(args: argparse.Namespace) -> None:
    """Before any work: the options of a live command not made by ``add_common``, ``--out``
    writable (``replay``: checked by ``fairsim.description.describe_run``, after its options),
    vLLM installed (``fairsim.deps``)."""
    from fairsim.deps import require
    from fairsim.io import check_writable_dir

    import math

    for option, attr in (("--requests", "requests"), ("--kv-blocks", "kv_blocks")):
        value = getattr(args, attr, None)
        if args.command in ("equivalence", "fidelity") and value is not None and value < 1:
            raise ValueError(f"{option} {value}: need an integer >= 1")
    rate = getattr(args, "rate", None)
    if rate is not None and not (math.isfinite(rate) and rate > 0):
        raise ValueError(f"--rate {rate}: need a finite arrival rate > 0 requests/s")
    if args.command in ("equivalence", "fidelity"):
        _check_comparison(args)
    if args.command == "hook-overhead":
        try:
            names, sizes = _overhead_lists(args)
        except ValueError:
            raise ValueError(f"--sizes {args.sizes!r}: need comma-separated integers >= 1") from None
        if min(sizes) < 1:
            raise ValueError(f"--sizes {args.sizes!r}: need comma-separated integers >= 1")
        from fairsim.live.overhead import MAX_WAITING

        if max(sizes) > MAX_WAITING:
            raise ValueError(f"--sizes {args.sizes!r}: at most {MAX_WAITING:,} waiting requests (the "
                             f"engine's KV cache holds 3 blocks per waiting request: about 4 GiB for "
                             f"10,000)")
        if args.steps < 1:
            raise ValueError(f"--steps {args.steps}: need an integer >= 1")
        from fairsim.options import check_named_once

        check_named_once("--sizes", args.sizes, sizes)
        if "all" in names:  # --policies is not "all" itself here
            raise ValueError(f"--policies {args.policies}: 'all' stands alone (every policy the hook accepts)")
        _check_profile_and_policies(args, names)
    if args.command != "replay" and getattr(args, "out", None) is not None:  # replay's: describe_run
        check_writable_dir(args.out)
    if getattr(args, "record", None) is not None:  # before the engine starts, named
        from fairsim.io import check_writable_file

        check_writable_file(args.record, "--record")
    require("vllm")


def _check_profile_and_policies(args: argparse.Namespace, names: list[str]) -> None:
    """``--profile`` loads, and ``--policies`` (``names``) names each policy once and each builds
    as the hook will build it (``fairsim.live.settings.build_policy``), so an unknown name or
    parameter, or a policy the hook refuses, is named before any engine starts."""
    from fairsim.options import check_named_once
    from fairsim.costmodel import load_profile

    try:
        load_profile(args.profile)
    except ValueError as exc:
        raise ValueError(f"--profile {args.profile}: {exc}") from None
    if not all(names):
        raise ValueError(f"--policies {args.policies!r}: need comma-separated policy names")
    check_named_once("--policies", args.policies, names)
    if getattr(args, "out", None) is not None:  # file names through file_stem: none may coincide
        from fairsim.io import check_file_stems

        check_file_stems(names, "equivalence-{}.csv" if args.command == "equivalence" else "requests-live-{}.parquet")
    for name in names:
        check_hook_policy("--policies", name, args.profile)


def check_hook_policy(option: str, name: str, profile: str, params: dict[str, Any] | None = None) -> None:
    """Build policy ``name`` as the live hook will, before an engine starts: one the hook refuses
    (Preble's admission, PEEK's eviction, PGDSF) or a bad parameter is named now.

    Raises:
        ValueError: Naming ``option`` and the policy, with the hook's reason.
    """
    from fairsim.live.settings import build_policy

    try:
        build_policy({"policy": name, "profile": profile, **({"params": params} if params is not None else {})})
    except ValueError as exc:
        raise ValueError(f"{option} {name}: {exc}") from None


def _check_comparison(args: argparse.Namespace) -> None:
    """``equivalence`` and ``fidelity``: every option checked before a trace is made or an engine
    starts (``--max-output`` only with ``--mode colocated``, where it is resolved to its default:
    256 for equivalence, 64 for fidelity)."""
    if getattr(args, "sessions", 0) < 0:
        raise ValueError(f"--sessions {args.sessions}: need >= 0 (0 = the RAG trace)")
    seqs = getattr(args, "max_num_seqs", None)
    if seqs is not None and seqs < 1:
        raise ValueError(f"--max-num-seqs {seqs}: need an integer >= 1")
    from fairsim.live.engine import LiveConfig

    budget = LiveConfig().budget_tokens  # equivalence runs both sides at LiveConfig's step budget
    if seqs is not None and seqs > budget:
        raise ValueError(f"--max-num-seqs {seqs}: need at most {budget}, the step budget of both sides "
                         f"(vLLM requires max_num_seqs <= max_num_batched_tokens)")
    if args.mode == "colocated":
        if args.max_output is None:
            args.max_output = 256 if args.command == "equivalence" else 64
        if args.max_output < 1:
            raise ValueError(f"--max-output {args.max_output}: need an integer >= 1 token")
    elif args.max_output is not None:
        raise ValueError(f"--max-output {args.max_output}: output lengths are drawn in --mode "
                         f"colocated only (prefill-only requests end with their first token)")
    _check_profile_and_policies(args, [v.strip() for v in args.policies.split(",")])


def _overhead_lists(args: argparse.Namespace) -> tuple[list[str], list[int]]:
    """``hook-overhead``'s ``--policies`` (``all``: ``hook_policies()``) and ``--sizes`` as lists
    (ValueError: a size not an int)."""
    from fairsim.live.settings import hook_policies

    names = hook_policies() if args.policies.strip() == "all" else [v.strip() for v in args.policies.split(",")]
    return names, [int(v) for v in args.sizes.split(",")]


def cmd_replay(args: argparse.Namespace) -> int:
    """``fairsim replay --engine vllm``."""
    from fairsim.description import describe_run
    from fairsim.live.engine import LiveConfig
    from fairsim.live.replay import replay_realtime, replay_virtual
    from fairsim.metrics import ttft_summary

    # vLLM's CPU backend wants a block of a multiple of 32: 128 unless --block-size says.
    desc = describe_run(args, policies=[args.policy], live_block_size=128, fit_longest_prompt=True)
    profile, trace, requests, block, kv_blocks = desc.profile, desc.trace, desc.requests, desc.block_size, desc.kv_blocks
    params = desc.policy_params[args.policy]
    check_hook_policy("--policy", args.policy, args.profile, params)  # before the engine starts
    cfg = LiveConfig(policy=args.policy, params=params, profile=args.profile,
                     budget_tokens=args.budget, max_num_seqs=args.max_num_seqs, block_size=block,
                     kv_blocks=kv_blocks, scheduler=args.scheduler,
                     record=None if args.record is None else str(args.record),
                     **_model_kwargs(args))
    print(f"replay {trace.name}: {len(requests)} requests, policy {args.policy}, profile {profile.name}, "
          f"{kv_blocks} KV blocks of {block} tokens ({kv_blocks * block:,} tokens), "
          f"{'virtual clock' if args.virtual else f'real time x{args.time_scale}'}", file=sys.stderr)
    from fairsim.options import replay_line

    print(replay_line(args), file=sys.stderr)
    sessions = {"replay": args.replay, "think_scale": args.think_scale}
    if args.virtual:
        result = replay_virtual(requests, cfg, profile, **sessions)
    else:  # load_requests already scaled the arrival times
        result = replay_realtime(requests, cfg, time_scale=1.0, **sessions)
    summary = ttft_summary(result.requests)
    summary["hit_rate"] = float(result.requests["cached_tokens"].sum() / result.requests["prompt_tokens"].sum())
    summary["steps"] = int(len(result.steps))
    summary["policy_errors"] = result.policy_errors
    summary["mode"] = result.mode
    summary["replay"] = args.replay
    rows = {args.policy: summary}
    if args.out is not None:
        from fairsim.io import atomic_write_text

        _write_live(args.out, args.policy, result)
        atomic_write_text(args.out / "summary.json", strict_json(rows) + "\n")
    if args.format == "json":
        print(strict_json(rows))
    else:
        print(" ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in summary.items()))
    if result.policy_errors:  # every table and figure above is written and printed first
        from fairsim.errors import StatusError

        raise StatusError(f"replay: policy {args.policy} failed in the hook in {result.policy_errors} of "
                          f"{len(result.steps)} steps, where the hook kept vLLM's order, so these figures "
                          f"measure that fallback, not the policy (its error is logged above)", 1)
    return 0


def _model_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if getattr(args, "model", None):
        out["model"] = args.model
        out["load_format"] = args.load_format or "auto"
    elif getattr(args, "load_format", None):
        out["load_format"] = args.load_format
    return out


def cmd_equivalence(args: argparse.Namespace) -> int:
    """``fairsim equivalence``: the decision-equivalence figure per policy."""
    from fairsim.costmodel import load_profile
    from fairsim.live.engine import LiveConfig
    from fairsim.live.equivalence import compare, equivalence_trace, session_trace

    from fairsim.live.equivalence import equivalence_trace_colocated

    profile = load_profile(args.profile)
    colocated = args.mode == "colocated"
    if args.sessions:
        requests = session_trace(args.sessions, seed=args.seed, session_rate_per_s=args.rate)
        print(f"closed-loop agent trace: {args.sessions} sessions, {len(requests)} requests")
    elif colocated:
        requests = equivalence_trace_colocated(args.requests, seed=args.seed, rate_per_s=args.rate,
                                               max_output=args.max_output)
    else:
        requests = equivalence_trace(args.requests, seed=args.seed, rate_per_s=args.rate)
    print(f"{'policy':8} {'identical':>9} {'requests':>8} {'sim evictions':>13} {'sim preemptions':>15}")
    worst = 1.0
    for name in [s.strip() for s in args.policies.split(",") if s.strip()]:
        eq = compare(requests, name, profile, LiveConfig(kv_blocks=args.kv_blocks, max_num_seqs=args.max_num_seqs),
                     profile_ref=args.profile, colocated=colocated)
        worst = min(worst, eq.fraction_identical)
        print(f"{name:8} {100 * eq.fraction_identical:8.1f}% {len(eq.table):8d} {eq.evictions:13d} "
              f"{eq.preemptions:15d}")
        diff = eq.first_difference()
        if diff is not None:
            print(f"  first difference: {diff.to_dict()}")
        if args.out is not None:
            from fairsim.io import atomic_to_csv, file_stem

            atomic_to_csv(eq.table, args.out / f"equivalence-{file_stem(name)}.csv")
    return 0


def cmd_fidelity(args: argparse.Namespace) -> int:
    """``fairsim fidelity``: simulate with the CPU profile, replay live in real time, compare TTFT.

    Prints per policy TTFT p50/p99 of both and their relative error ``(sim - vllm) / vllm``, and
    the median relative error of the profile's predicted step time against each measured live step
    (``step err``): it separates cost-model error from queueing effects.
    """
    from fairsim.costmodel import load_profile
    from fairsim.live.engine import LiveConfig
    from fairsim.live.equivalence import equivalence_trace
    from fairsim.live.replay import replay_realtime
    from fairsim.metrics import ttft_summary
    from fairsim.policies import make_policy
    from fairsim.sim import EngineConfig, simulate

    from fairsim.live.equivalence import equivalence_trace_colocated

    profile = load_profile(args.profile)
    colocated = args.mode == "colocated"
    if colocated:
        requests = equivalence_trace_colocated(args.requests, seed=args.seed, rate_per_s=args.rate,
                                               max_output=args.max_output)
    else:
        requests = equivalence_trace(args.requests, seed=args.seed, rate_per_s=args.rate)
    rows = {}
    print(f"{'policy':8} {'sim p50':>8} {'vllm p50':>8} {'err p50':>8} {'sim p99':>8} {'vllm p99':>8} "
          f"{'err p99':>8} {'step err':>8}" + ("   (TTFT; TPOT below)" if colocated else ""))
    for name in [s.strip() for s in args.policies.split(",") if s.strip()]:
        sim = simulate(requests, make_policy(name, profile), profile,
                       EngineConfig(budget_tokens=profile.budget_tokens, max_num_seqs=16,
                                    block_size=128, kv_blocks=args.kv_blocks, mode=args.mode))
        live = replay_realtime(requests, LiveConfig(policy=name, profile=args.profile,
                                                    budget_tokens=profile.budget_tokens,
                                                    max_num_seqs=16, kv_blocks=args.kv_blocks),
                               colocated=colocated)
        s, v = ttft_summary(sim.requests), ttft_summary(live.requests)
        row = {"sim_p50_s": s["ttft_p50_s"], "vllm_p50_s": v["ttft_p50_s"],
               "sim_p99_s": s["ttft_p99_s"], "vllm_p99_s": v["ttft_p99_s"]}
        row["rel_err_p50"] = (row["sim_p50_s"] - row["vllm_p50_s"]) / row["vllm_p50_s"]
        row["rel_err_p99"] = (row["sim_p99_s"] - row["vllm_p99_s"]) / row["vllm_p99_s"]
        st = live.steps
        if colocated:
            pred = [profile.step_time_colocated(t, p, r, dn, dc) for t, p, r, dn, dc in
                    zip(st["tokens"], st["pair_tokens"], st["requests"], st["decode_tokens"],
                        st["decode_context_tokens"])]
        else:
            pred = [profile.step_time_from_sums(t, p, r) for t, p, r in zip(st["tokens"], st["pair_tokens"], st["requests"])]
        errs = [(pv - m) / m for pv, m in zip(pred, st["duration_s"])]
        row["step_time_rel_err_median"] = float(sorted(errs)[len(errs) // 2]) if errs else float("nan")
        rows[name] = row
        print(f"{name:8} {row['sim_p50_s']:8.3f} {row['vllm_p50_s']:8.3f} {100 * row['rel_err_p50']:+7.1f}% "
              f"{row['sim_p99_s']:8.3f} {row['vllm_p99_s']:8.3f} {100 * row['rel_err_p99']:+7.1f}% "
              f"{100 * row['step_time_rel_err_median']:+7.1f}%")
        if colocated:
            import numpy as np

            for side, table in (("sim", sim.requests), ("vllm", live.requests)):
                tpot = table["tpot_s"].dropna().to_numpy(dtype=float)
                row[f"{side}_tpot_p50_s"], row[f"{side}_tpot_p99_s"] = (float(v) for v in np.percentile(tpot, [50, 99]))
            for q in ("p50", "p99"):
                row[f"tpot_rel_err_{q}"] = (row[f"sim_tpot_{q}_s"] - row[f"vllm_tpot_{q}_s"]) / row[f"vllm_tpot_{q}_s"]
            print(f"{'  TPOT':8} {row['sim_tpot_p50_s']:8.4f} {row['vllm_tpot_p50_s']:8.4f} "
                  f"{100 * row['tpot_rel_err_p50']:+7.1f}% {row['sim_tpot_p99_s']:8.4f} "
                  f"{row['vllm_tpot_p99_s']:8.4f} {100 * row['tpot_rel_err_p99']:+7.1f}%")
        if args.out is not None:
            from fairsim.io import atomic_to_parquet, file_stem

            _write_live(args.out, f"live-{name}", live)
            atomic_to_parquet(sim.requests, args.out / f"requests-sim-{file_stem(name)}.parquet")
    if args.out is not None:
        from fairsim.io import atomic_write_text

        atomic_write_text(args.out / "fidelity.json", strict_json(rows) + "\n")
    return 0


def cmd_hook_overhead(args: argparse.Namespace) -> int:
    """``fairsim hook-overhead``: reorder time per step with N waiting vs the engine's step time."""
    from fairsim.live.overhead import measure_overhead

    policies, sizes = _overhead_lists(args)
    print(f"{'policy':16} {'waiting':>7} {'unchanged ms':>12} {'changed ms':>10} {'p90 ms':>7} {'cold ms':>9} "
          f"{'admit/step':>10} {'arrive/step':>11} {'lookups':>8} {'engine step ms':>14} {'share':>7}", flush=True)

    def show(r: dict) -> None:  # each row once measured: Ctrl-C keeps those already printed
        print(f"{r['policy']:16} {r['waiting']:7d} {1e3 * r['reorder_s']:12.3f} {1e3 * r['changed_s']:10.3f} "
              f"{1e3 * r['changed_p90_s']:7.3f} {1e3 * r['reorder_cold_s']:9.3f} {r['admitted_per_step']:10.1f} {r['arrived_per_step']:11.1f} "
              f"{r['lookups_per_step']:8.1f} {1e3 * r['step_s']:14.1f} {100 * r['changed_s'] / r['step_s']:6.2f}%", flush=True)

    rows = measure_overhead(policies, sizes, args.profile, steps=args.steps, on_row=show)
    failed = [f"{r['policy']} in {r['policy_errors']} hook calls at {r['waiting']} waiting"
              for r in rows if r["policy_errors"]]
    if failed:
        from fairsim.errors import StatusError

        raise StatusError("hook-overhead: a policy failed in the hook, which kept vLLM's order, so its "
                          "row times that fallback, not the policy: " + ", ".join(failed)
                          + " (its error is logged above)", 1)
    return 0


def run_live_command(args: argparse.Namespace) -> int:
    """Dispatch a command named in ``LIVE_COMMANDS``."""
    if args.command not in ("equivalence", "fidelity") and (getattr(args, "mode", "prefill-only") != "prefill-only"
                                          or getattr(args, "slo", None)):
        raise ValueError(f"--mode/--slo: '{args.command}' drives the live engine prefill-only "
                         f"(max_tokens=1); colocated mode: run, compare, bench, equivalence, fidelity")
    _check_first(args)
    t0 = time.perf_counter()
    handler = {"replay": cmd_replay, "equivalence": cmd_equivalence, "fidelity": cmd_fidelity,
               "hook-overhead": cmd_hook_overhead}[args.command]
    rc = handler(args)
    print(f"({args.command} took {time.perf_counter() - t0:.1f} s)", file=sys.stderr)
    return rc
