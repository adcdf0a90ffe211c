"""The ``fairsim`` command line: ``run``, ``compare``, ``bench``; live ``replay``, ``calibrate``, ...

Every command reads a trace (default: the embedded RAG input), shapes its load, simulates it under
one or more policies, and prints a table or JSON.

Error contract (``main``): bad input (a trace, profile, option or output path) -> ``fairsim: error:
...`` naming the file, line and field or the option, exit 2; a missing optional package -> the
``pip install`` extra to use, exit 2; Ctrl-C -> one line, results already written kept, exit 130;
anything else is a bug -> a short message with the exception, exit 1, and the traceback only
with ``fairsim --debug``.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import os
import re
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fairsim import __version__
from fairsim.costmodel import DEFAULT_PROFILE, Profile, load_profile
from fairsim.deps import MissingDependencyError, missing_message
from fairsim.errors import PolicyContractError, PolicyError, StatusError
from fairsim.gcpause import freeze_for_exit, paused
from fairsim.io import (atomic_write, atomic_write_text, check_file_stems, check_writable_dir, count_arg, file_stem,
                        path_arg, strict_json)
from fairsim.policies import make_policy, policy_names
from fairsim.sim import EngineConfig, SimResult, simulate
from fairsim.traces import Trace, load_trace, scale_time, window
from fairsim.traces.sessions import detach_cut
from fairsim.types import Request


#: Latest (scaled) arrival accepted, seconds (~32 years). float64 resolves 1.2e-7 s at 1e9 s, so
#: step times (>= 1e-6 s) and TTFTs keep their precision; beyond it they silently would not.
MAX_ARRIVAL_S = 1e9
#: Shortest span of arrivals (s) a time scale may make of a trace whose arrivals are not all at
#: one instant: under 1 us (the resolution ``MAX_ARRIVAL_S`` keeps) a factor is a mistake, not a
#: burst, and the offered-load figures would run to hundreds of digits.
MIN_SPAN_S = 1e-6


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


def param_scope(key: str) -> str | None:
    """The policy a ``--param`` key is scoped to: what stands before its last dot (a keyword
    never has one; a policy may, ``package.module:Class``), or ``None`` for an unscoped key."""
    scope, dot, _ = key.rpartition(".")
    return scope if dot else None


def scoped_params(name: str, params: dict[str, Any]) -> dict[str, Any]:
    """Only the ``NAME.KEY`` parameters of policy ``name``, as ``KEY``."""
    return {k.rpartition(".")[2]: v for k, v in params.items() if param_scope(k) == name}


def params_for(name: str, params: dict[str, Any]) -> dict[str, Any]:
    """The parameters of policy ``name``: unscoped keys plus its own ``NAME.KEY`` ones."""
    return {**{k: v for k, v in params.items() if param_scope(k) is None}, **scoped_params(name, params)}


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows defaults, except empty ones and those the help text already states."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.default in (None, [], False) or "default" in text:
            return text
        return super()._get_help_string(action)


RUN_OUT_HELP = "folder for requests-POLICY.parquet, steps-POLICY.parquet, summary.json, run.json"


def add_common(p: argparse.ArgumentParser, out_help: str = RUN_OUT_HELP) -> None:
    """Options shared by every simulating command (``out_help``: what its ``--out`` holds)."""
    from fairsim.traces.formats import FORMATS

    p.add_argument("--trace", help="trace file or folder, any format of --trace-format "
                                   "(default: the embedded RAG input)")
    p.add_argument("--trace-format", default="auto", choices=("auto", *FORMATS),
                   help="trace format; auto detects it from the content (gzip by its magic bytes)")
    p.add_argument("--hash-block-size", type=count_arg, default=None, metavar="TOKENS",
                   help="tokens per hash id, for Mooncake-like files whose block is given out of band "
                        "(default: what the format or file records; Mooncake 512)")
    p.add_argument("--skip-bad", action="store_true", help="skip bad trace records, counting them")
    p.add_argument("--profile", default=DEFAULT_PROFILE,
                   help="cost-model profile: shipped name or JSON path")
    p.add_argument("--budget", type=count_arg, default=2048,
                   help="step token budget, tokens (vLLM max_num_batched_tokens; 1 to 2^31-1)")
    p.add_argument("--max-num-seqs", type=count_arg, default=256,
                   help="most requests running at once (vLLM max_num_seqs; 1 to --budget, as vLLM requires)")
    p.add_argument("--block-size", type=count_arg, default=None,
                   help="tokens per KV block, any size (default: the trace's hash block)")
    cap = p.add_mutually_exclusive_group()
    cap.add_argument("--kv-tokens", type=count_arg,
                     help="KV cache capacity in tokens (default: the profile's kv_capacity)")
    cap.add_argument("--kv-blocks", type=count_arg, help="KV cache capacity in blocks")
    cap.add_argument("--kv-fraction", type=float,
                     help="KV capacity as a fraction of the trace's reusable content (the paper's "
                          "setting; the default for a profile without kv_capacity: 0.3)")
    p.add_argument("--skip-long", action="store_true",
                   help="drop and count requests whose prompt does not fit the profile's max_model_len")
    scale = p.add_mutually_exclusive_group()
    scale.add_argument("--time-scale", type=float, default=1.0,
                       help="multiply arrival times by S (>1 stretches the trace, lowering the load)")
    scale.add_argument("--target-load", type=float, default=None, metavar="X",
                       help="choose the time scale that gives mean offered load X (no reuse; the scale is printed)")
    p.add_argument("--load-window", type=float, default=60.0, metavar="S",
                   help="length of the busiest window in the offered-load line, seconds")
    p.add_argument("--mode", choices=("prefill-only", "colocated"), default="prefill-only",
                   help="prefill-only: a request ends with its first token (the paper's node); "
                        "colocated: it decodes to the trace's output_length on the same engine")
    p.add_argument("--slo", default=None, metavar="ttft=S,tpot=S",
                   help="colocated: goodput = requests meeting these TTFT/TPOT SLOs (seconds)")
    p.add_argument("--window-start", type=float, default=0.0,
                   help="window start, seconds of trace time (before --time-scale)")
    p.add_argument("--window-end", type=float, default=None,
                   help="window end, seconds of trace time (before --time-scale)")
    p.add_argument("--max-requests", type=count_arg, default=None, help="keep the first N requests")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the generated default input when no --trace is given (0 = the shipped "
                        "file), and of the session starts placed by --session-rate")
    p.add_argument("--replay", choices=("open", "closed"), default=None,
                   help="open: requests arrive at their timestamps; closed: a turn is sent when the "
                        "turn it follows finished in the simulation plus its think time (default: "
                        "closed where the trace has sessions)")
    p.add_argument("--think-scale", type=float, default=1.0, metavar="S",
                   help="closed loop: multiply think/tool times (delays after a finished turn) by S")
    p.add_argument("--session-rate", type=float, default=None, metavar="R",
                   help="start sessions as a seeded Poisson process of R sessions/s (default: "
                        "0.1 where the trace has no absolute time; otherwise keep its timestamps)")
    p.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                   help="policy parameter, e.g. fast_weight=8, or fairway.fast_weight=8 for one policy (repeatable)")
    p.add_argument("--out", type=path_arg, help=out_help)
    p.add_argument("--format", choices=("table", "json"), default="table",
                   help="table for people, json (one object keyed by policy) for scripts")


PLOTS_HELP = "folder for ttft_cdf.png, ttft_vs_arrival.png, queue_kv.png (fairsim/run_plots.py)"


#: Commands registered first; ``main`` builds a parser with only these when one of them is run.
CORE_COMMANDS = ("run", "compare", "bench")


class _CoreParseError(Exception):
    """A parse error of the core-only parser: ``main`` parses again with the full one."""


class _CoreParser(argparse.ArgumentParser):
    def error(self, message: str):  # noqa: D102 - argparse's hook
        raise _CoreParseError(message)


def build_parser(full: bool = True) -> argparse.ArgumentParser:
    """The ``fairsim`` argument parser.

    Args:
        full: Register every command. False: only ``CORE_COMMANDS``, without importing the other
            commands' modules (start-up of ``fairsim run``, issue 13); a parse error then raises
            ``_CoreParseError`` instead of exiting, so the caller can parse with the full parser.
    """
    cls = argparse.ArgumentParser if full else _CoreParser
    parser = cls(prog="fairsim", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"fairsim {__version__}")
    parser.add_argument("--debug", action="store_true",
                        help="on an internal error, print the full traceback (give it before the command)")
    sub = parser.add_subparsers(dest="command", required=True)
    fmt = HelpFormatter
    run = sub.add_parser("run", help="simulate one policy", formatter_class=fmt)
    run.add_argument("--policy", default="fairway",
                     help=f"one of: {', '.join(policy_names())}; or package.module:Class, a class of your own")
    add_common(run)
    run.add_argument("--plots", type=path_arg, help=PLOTS_HELP)
    cmp = sub.add_parser("compare", help="simulate several policies on the same input, side by side",
                         formatter_class=fmt)
    cmp.add_argument("--policies", default="fcfs,lpm,fairway",
                     help="comma-separated policy names, or 'all' (every registered policy but the "
                          "generic klpm, which klpm4 covers)")
    add_common(cmp)
    cmp.add_argument("--plots", type=path_arg, help=PLOTS_HELP)
    bench = sub.add_parser("bench", help="speed and peak memory per policy (one process each)",
                           formatter_class=fmt)
    bench.add_argument("--policies", default="fcfs,lpm,fairway",
                       help="comma-separated policy names, or 'all'")
    add_common(bench, out_help="folder for bench.json (every policy's figures; partial ones on Ctrl-C)")
    bench.add_argument("--compare", metavar="PATH",
                       help="also run this peer simulator (sched-sim's executable) on the same requests")
    bench.add_argument("--repeat", type=int, default=1, help="runs per policy; the median is kept")
    bench.add_argument("--tile", type=int, default=1, metavar="N",
                       help="concatenate N time-shifted copies of the trace")
    if not full:
        return parser
    # Live vLLM commands (replay, equivalence, fidelity, hook-overhead) and calibrate; their
    # modules import vLLM only when a command runs.
    from calibration.cli import add_calibrate_command
    from fairsim.live.cli import add_live_commands

    add_live_commands(sub, add_common)
    add_calibrate_command(sub)
    from fairsim.sweep import add_parser as add_sweep_parser

    add_sweep_parser(sub)
    from fairsim.convert import add_parser as add_convert_parser

    add_convert_parser(sub)
    from fairsim.analysis.cli import add_analyze_command

    add_analyze_command(sub, add_common, fmt)
    from fairsim.accept import add_accept_command

    add_accept_command(sub, add_common, fmt)
    return parser


def check_shaping_options(args: argparse.Namespace) -> None:
    """The bounds of the options that load and shape a trace, checked without reading it, so a
    command that does long work first (``bench --tile``) refuses a bad option at once.

    Raises:
        ValueError: A bad ``--seed``, ``--hash-block-size``, ``--window-start``/``--window-end``/
            ``--max-requests``, ``--time-scale``, ``--think-scale`` or ``--session-rate``, naming
            the option.
    """
    if args.seed < 0:
        raise ValueError(f"--seed {args.seed}: need an integer >= 0")
    if args.hash_block_size is not None and args.hash_block_size < 1:  # with or without --trace
        raise ValueError(f"--hash-block-size {args.hash_block_size}: need >= 1 token")
    for option, value in (("--window-start", args.window_start), ("--window-end", args.window_end)):
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise ValueError(f"{option} {value}: need a finite time >= 0 s")
    window([], args.window_start, args.window_end, args.max_requests)  # its own bounds
    if getattr(args, "target_load", None) is None:
        scale_time([], args.time_scale)  # its own bounds
    if not (args.think_scale >= 0 and args.think_scale < float("inf")):
        raise ValueError(f"--think-scale {args.think_scale}: need a finite factor >= 0")
    rate = getattr(args, "session_rate", None)
    if rate is not None and not (rate > 0 and math.isfinite(rate)):
        raise ValueError(f"--session-rate {rate}: need a finite rate > 0 sessions/s")


def read_trace(args: argparse.Namespace) -> Trace:
    """The trace the options name, unshaped: ``--trace``'s file (``--trace-format``,
    ``--skip-bad``, ``--hash-block-size``), the generated RAG input of ``--seed`` N (N > 0)
    without ``--trace``, else the embedded default input.

    Raises:
        ValueError: A bad trace (``fairsim.traces``: file, line and field named).
    """
    if args.trace is None and args.seed != 0:
        from fairsim.traces.rag import RagSpec, generate_rag

        return generate_rag(RagSpec(seed=args.seed))
    return load_trace(args.trace, args.trace_format, skip_bad=args.skip_bad, hash_block_size=args.hash_block_size)


def load_requests(args: argparse.Namespace, profile: Profile | None = None,
                  trace: Trace | None = None) -> tuple[Trace, list[Request]]:
    """Load and shape the trace named by the options (``trace``: the one ``read_trace(args)``
    already read, shaped instead of reading it again).

    Order: load, window (``--window-start/--window-end/--max-requests``), drop or refuse prompts
    that do not fit the profile's ``max_model_len`` (``--skip-long``), then scale time by
    ``--time-scale`` or by the scale that gives ``--target-load`` (``fairsim.traces.offered``).
    Sets ``args.time_scale`` to the scale used and ``args.skipped_long`` to the number dropped.

    Raises:
        ValueError: Bad options, an empty result, or (``PromptTooLongError``) a too-long prompt.
    """
    from fairsim.traces.limits import drop_too_long
    from fairsim.traces.offered import time_scale_for_load

    profile = profile or load_profile(args.profile)
    check_shaping_options(args)
    if trace is None:
        trace = read_trace(args)
    skipped = trace.skipped_summary()
    if skipped:
        print(f"fairsim: {skipped}", file=sys.stderr)
    if not trace.requests:
        raise ValueError(f"{trace.source}: no valid requests in the trace"
                         + (f" ({skipped})" if skipped else ""))
    requests = shape_sessions(args, trace)
    if args.trace is not None and args.seed != 0 and args.session_rate is None:
        raise ValueError("--seed seeds the generated default input and the session starts of "
                         "--session-rate; it has no effect with this --trace")
    kept = window(requests, args.window_start, args.window_end, args.max_requests)
    if not kept:
        raise ValueError("no requests left after --window-start/--window-end/--max-requests")
    limit = profile.max_model_len
    kept, dropped = drop_too_long(kept, limit, trace.source, getattr(args, "skip_long", False),
                                  f"max_model_len of profile {profile.name}", trace.locations)
    args.skipped_long = len(dropped)
    if dropped:
        print(f"fairsim: --skip-long dropped {len(dropped)} requests with prompts of {limit:,} tokens or "
              f"more (the profile's max_model_len); first: {dropped[0].request_id!r}", file=sys.stderr)
        if not kept:
            raise ValueError(f"--skip-long: every request kept has a prompt of {limit:,} tokens or more")
    if getattr(args, "mode", None) == "colocated":
        from fairsim.traces.limits import cap_outputs

        kept, capped = cap_outputs(kept, limit)
        if capped:
            print(f"fairsim: warning: {len(capped)} requests ask for more output than the profile's max_model_len "
                  f"({limit:,} tokens) leaves after their prompt; they decode to prompt + output = "
                  f"{limit:,} tokens, as vLLM finishes them (length-capped); first: {capped[0].request_id!r}",
                  file=sys.stderr)
    if args.replay == "closed" and not any(r.after is not None for r in kept):
        print("fairsim: warning: --replay closed: no request of this trace follows another, so every request "
              "is sent at its own timestamp, as in open loop", file=sys.stderr)
    elif args.replay == "open" and args.think_scale != 1:
        print(f"fairsim: warning: --think-scale {args.think_scale:g} has no effect in open loop (requests "
              f"arrive at their timestamps); it scales the think times of --replay closed", file=sys.stderr)
    if args.replay == "closed":
        kept, detached = detach_cut(kept, requests)
        if detached:
            print(f"fairsim: {detached} turns whose predecessor is outside the window (or dropped) are "
                  f"sent at their own arrival times", file=sys.stderr)
    target = getattr(args, "target_load", None)
    if target is not None:
        args.time_scale = time_scale_for_load(kept, profile, args.budget, target,
                                              colocated=getattr(args, "mode", None) == "colocated")
        print(f"fairsim: --target-load {target:g}: time scale {args.time_scale:.6g}", file=sys.stderr)
    requests = scale_time(kept, args.time_scale)
    if args.replay == "closed":  # before the last-arrival check, to name the record and field
        from fairsim.sim.release import check_release_times

        if args.session_rate is not None:  # the starts it drew, named before the turns' delays
            last_start = max((r.arrival_time for r in requests if r.after is None), default=0.0)
            if not last_start <= MAX_ARRIVAL_S:
                where, fix = _time_origin(args, trace, kept[-1], "a larger --target-load",
                                          "a smaller --time-scale", "a larger --session-rate", "")
                raise ValueError(f"{where}: the last session starts at {last_start:.6g} s, beyond "
                                 f"{MAX_ARRIVAL_S:.0e} s, where float64 time cannot resolve 1 us steps; use {fix}")
        check_release_times(requests, args.think_scale, MAX_ARRIVAL_S, trace.source, trace.locations)
    last = requests[-1].arrival_time if requests else 0.0
    if not last <= MAX_ARRIVAL_S:
        where, fix = _time_origin(args, trace, kept[-1], "a larger --target-load", "a smaller --time-scale",
                                  "a larger --session-rate", "a shorter window (--window-end)")
        raise ValueError(
            f"{where}: the last arrival is at {last:.6g} s, beyond "
            f"{MAX_ARRIVAL_S:.0e} s, where float64 time cannot resolve 1 us steps; use {fix}")
    span = kept[-1].arrival_time - kept[0].arrival_time
    if span > 0 and span * args.time_scale < MIN_SPAN_S:
        where, fix = _time_origin(args, trace, kept[-1], "a smaller --target-load", "a larger --time-scale",
                                  "a smaller --session-rate", "a larger --time-scale")
        raise ValueError(
            f"{where}: the trace's {span:.6g} s of arrivals would span {span * args.time_scale:.3g} s, "
            f"under {MIN_SPAN_S:.0e} s, finer than any engine step; use {fix}")
    trace = add_mapping_warning(trace, requests, args.block_size)
    for warning in trace.warnings:
        print(f"fairsim: warning: {warning}", file=sys.stderr)
    return trace, requests


def load_in_trace_time(args: argparse.Namespace, profile: Profile) -> tuple[Trace, list[Request], float]:
    """``load_requests`` with the arrivals left in trace time, and the time scale the options ask
    for: ``--time-scale``, or the one ``--target-load`` resolves to on the requests kept (said on
    stderr as ``fairsim run`` says it). For ``accept`` and ``analyze``, which cut windows and bins
    in trace time and scale the arrivals after.

    Raises:
        ValueError: A ``--time-scale`` that is not a finite factor > 0, or as ``load_requests``.
    """
    from fairsim.traces.offered import time_scale_for_load

    scale, target = args.time_scale, getattr(args, "target_load", None)
    if not (scale > 0 and math.isfinite(scale)):
        raise ValueError(f"--time-scale {scale}: need a finite factor > 0")
    args.time_scale, args.target_load = 1.0, None
    try:
        trace, requests = load_requests(args, profile)
    finally:
        args.time_scale, args.target_load = scale, target
    if target is not None:
        scale = args.time_scale = time_scale_for_load(requests, profile, args.budget, target,
                                                      colocated=getattr(args, "mode", None) == "colocated")
        print(f"fairsim: --target-load {target:g}: time scale {scale:.6g}", file=sys.stderr)
    return trace, requests, scale


def _time_origin(args: argparse.Namespace, trace: Trace, request: Request, *fixes: str) -> tuple[str, str]:
    """What set the arrival times an error is about, and the matching remedy of ``fixes``
    (for ``--target-load``, ``--time-scale``, ``--session-rate``, the trace's own times): the
    option that scaled or placed them, else the record of ``request`` (file and line)."""
    from fairsim.errors import record_where
    from fairsim.traces.limits import LINE_LABEL

    target = getattr(args, "target_load", None)
    if target is not None:
        return f"--target-load {target:g} (time scale {args.time_scale:.6g})", fixes[0]
    if args.time_scale != 1:
        return f"--time-scale {args.time_scale}", fixes[1]
    if getattr(args, "session_rate", None) is not None:
        return f"--session-rate {args.session_rate:g} (the session starts it draws)", fixes[2]
    line = trace.locations.get(request.request_id, request.labels.get(LINE_LABEL))
    return f"{record_where(trace.source, line)}: arrival time of request {request.request_id!r}", fixes[3]


def add_mapping_warning(trace: Trace, requests: list[Request], block_size: int | None) -> Trace:
    """``trace`` with the warning of ``fairsim.sim.keys.mapping_loss`` added when
    ``--block-size`` and the hash block neither divide the other."""
    import dataclasses

    from fairsim.sim.keys import mapping_loss

    loss = mapping_loss(requests, block_size) if block_size else None
    return dataclasses.replace(trace, warnings=trace.warnings + (loss,)) if loss else trace


def shape_sessions(args: argparse.Namespace, trace: Trace) -> list[Request]:
    """Resolve ``--replay``/``--session-rate`` for ``trace`` (stored back on ``args``) and place
    session starts where asked or needed; return the requests sorted by arrival.

    Raises:
        ValueError: A bad ``--session-rate`` (``--think-scale`` is checked by ``check_shaping_options``).
        SessionError: Closed loop: an ``after`` naming an unknown request, or a cycle.
    """
    from fairsim.sim.arrivals import check_sessions, resolve_replay
    from fairsim.traces.sessions import DEFAULT_SESSION_RATE, place_sessions

    args.replay = resolve_replay(trace.requests, args.replay)
    if args.replay == "closed":
        check_sessions(trace.requests, trace.source, trace.locations)  # named error before any long work
    requests = sorted(trace.requests, key=lambda r: (r.arrival_time, r.request_id))
    # Formats without absolute time (Claude Code sessions) give offsets from the session start.
    if not getattr(trace, "absolute_time", True) and args.session_rate is None:
        args.session_rate = DEFAULT_SESSION_RATE
    if args.session_rate is not None:
        requests = place_sessions(requests, args.session_rate, args.seed)
    return requests


ENGINE_OPTIONS = {"budget_tokens": "--budget", "max_num_seqs": "--max-num-seqs", "block_size": "--block-size",
                  "kv_blocks": "--kv-blocks", "kv_tokens": "--kv-tokens", "kv_fraction": "--kv-fraction"}
"""``EngineConfig`` field -> the command-line option that sets it (for error messages)."""


def engine_config(args: argparse.Namespace, profile: Profile | None = None) -> EngineConfig:
    """``EngineConfig`` from the options; with ``profile``, its KV capacity when none is given.

    Raises:
        ValueError: A value ``EngineConfig`` refuses, or ``--max-num-seqs`` above ``--budget``
            (vLLM's rule, ``fairsim.sim.config.check_vllm_scheduler``), naming the options.
    """
    from fairsim.sim.capacity import with_profile_capacity

    from fairsim.sim.config import check_vllm_scheduler

    try:
        config = EngineConfig(budget_tokens=args.budget, max_num_seqs=args.max_num_seqs,
                              block_size=args.block_size, kv_blocks=args.kv_blocks,
                              kv_tokens=getattr(args, "kv_tokens", None), kv_fraction=args.kv_fraction,
                              mode=getattr(args, "mode", "prefill-only"))
        check_vllm_scheduler(config.budget_tokens, config.max_num_seqs)
    except ValueError as exc:  # name the option the user typed, not the EngineConfig field
        raise ValueError(_option_names(str(exc))) from None
    return config if profile is None else with_profile_capacity(config, profile)[0]


def _option_names(message: str, args: argparse.Namespace | None = None) -> str:
    """``message`` with each ``EngineConfig`` field (``kv_tokens=100``) named as its option
    (``--kv-tokens 100``); with ``args``, a message that blames a ``kv_tokens`` that no
    ``--kv-tokens`` gave blames the profile's KV capacity (``with_profile_capacity``) instead."""
    if args is not None and getattr(args, "kv_tokens", None) is None:
        message = re.sub(r"^kv_tokens=(\d+)", r"the profile's KV capacity (\1 tokens)", message)
    for field, option in ENGINE_OPTIONS.items():
        message = message.replace(f"{field}=", f"{option} ")
    return message


def capacity_of(requests: Sequence[Request], config: EngineConfig,
                args: argparse.Namespace) -> tuple[int, int]:
    """``fairsim.sim.capacity.resolve_capacity`` for a command: ``(block_size, kv_blocks)``.

    Raises:
        CapacityError: As ``resolve_capacity``, naming the options of ``args`` (``--kv-tokens``)
            that set the capacity, not the ``EngineConfig`` fields.
    """
    from fairsim.errors import CapacityError
    from fairsim.sim.capacity import resolve_capacity

    try:
        return resolve_capacity(requests, config)
    except CapacityError as exc:
        raise CapacityError(_option_names(str(exc), args)) from None


def resolve_policies(spec: str) -> list[str]:
    """``"fcfs,lpm"`` -> names; ``"all"`` -> every registered policy.

    Raises:
        ValueError: No name, an empty one (``fcfs,``), or a name given twice (``--policies``
            names the option).
    """
    names = policy_names(include_generic=False) if spec == "all" else [s.strip() for s in spec.split(",")]
    if not any(names):
        raise ValueError("no policies given")
    if not all(names):  # "fcfs,,lpm" or "fcfs,": a name left out, or a comma too many
        raise ValueError(f"--policies {spec}: an empty name between commas; give names separated by "
                         f"single commas, e.g. fcfs,lpm")
    if "all" in names:  # spec is not "all" itself here
        raise ValueError(f"--policies {spec}: 'all' stands alone (every registered policy); name policies, or all")
    # One row per policy: a repeat would silently be one run.
    check_named_once("--policies", spec, names, "; give each policy once (bench --repeat N runs each N times)")
    return names


def check_named_once(option: str, value: str, items: Sequence[Any], hint: str = "") -> None:
    """Refuse a list option (``value``, as typed) that names an item more than once.

    Raises:
        ValueError: ``OPTION VALUE: 'x' given more than once`` (then ``hint``).
    """
    twice = sorted({str(x) for x in items if items.count(x) > 1})
    if twice:
        raise ValueError(f"{option} {value}: {', '.join(map(repr, twice))} given more than once{hint}")


def check_policies(names: list[str], profile: Profile, params: dict[str, Any]) -> None:
    """Fail fast, before any long run, on a bad policy name or parameter.

    Raises:
        ValueError: An unknown policy, a parameter it rejects, or a ``POLICY.KEY`` parameter
            scoped to a policy that is not being run.
    """
    for key in params:
        scope = param_scope(key)
        if scope is not None and scope not in names:
            raise ValueError(f"--param {key}: policy {scope!r} is not among those run ({', '.join(names)})")
    for name in names:
        make_policy(name, profile, **params_for(name, params))


def run_one(name: str, requests: list[Request], profile: Profile, config: EngineConfig,
            params: dict[str, Any], show_progress: bool = True, *, replay: str | None = None,
            think_scale: float = 1.0) -> SimResult:
    """Simulate ``requests`` under policy ``name`` with a progress bar after 2 s (``replay`` and
    ``think_scale``: see ``fairsim.sim.Engine``)."""
    policy = make_policy(name, profile, **params)
    # Errors name the policy as the user gave it (a team's class may call itself "fcfs").
    if not show_progress or not sys.stderr.isatty():  # tqdm(disable=None) would not draw either
        return simulate(requests, policy, profile, config, replay=replay, think_scale=think_scale, name=name)
    from tqdm import tqdm

    with tqdm(total=len(requests), desc=name, unit="req", delay=2.0, leave=False,
              disable=not show_progress or None) as bar:
        return simulate(requests, policy, profile, config, progress=bar.update, replay=replay,
                        think_scale=think_scale, name=name)


def write_tables(out: Path, name: str, result: SimResult, engine: dict[str, Any] | None = None) -> None:
    """Write ``requests-NAME.parquet`` and ``steps-NAME.parquet`` atomically (``fairsim.io``);
    ``NAME`` is the policy name through ``fairsim.io.file_stem`` (``mypol:Rev`` -> ``mypol_Rev``).

    ``engine`` (profile, KV capacity, block size) is stored as JSON in the Parquet schema
    metadata under the key ``fairsim``.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    out.mkdir(parents=True, exist_ok=True)
    for kind, frame in (("requests", result.requests), ("steps", result.steps)):
        table = pa.Table.from_pandas(frame, preserve_index=False)
        if engine is not None:
            meta = dict(table.schema.metadata or {})
            meta[b"fairsim"] = json.dumps({"policy": name, **engine}).encode()
            table = table.replace_schema_metadata(meta)
        atomic_write(out / f"{kind}-{file_stem(name)}.parquet", lambda tmp, table=table: pq.write_table(table, tmp))


def format_table(rows: dict[str, dict[str, Any]]) -> str:
    """Plain-text side-by-side table of per-policy summaries (plus decode columns, colocated)."""
    cols = [("requests", "requests", "{:d}"), ("ttft_p50_s", "p50 s", "{:.3f}"),
            ("ttft_p90_s", "p90 s", "{:.3f}"), ("ttft_p99_s", "p99 s", "{:.3f}"),
            ("ttft_max_s", "max s", "{:.3f}"), ("starved", "starved", "{}"),
            ("hit_rate", "hit rate", "{:.3f}"), ("kv_blocks", "KV blocks", "{:d}"),
            ("sim_time_s", "sim s", "{:.1f}"), ("wall_time_s", "wall s", "{:.2f}")]
    first = next(iter(rows.values()), {})
    if "tpot_p50_s" in first:
        from fairsim.cli_colocated import DECODE_COLUMNS

        cols[-2:-2] = [c for c in DECODE_COLUMNS if c[0] in first]
    header = ["policy"] + [c[1] for c in cols]
    show = {True: "yes", False: "no"}

    def cell(value: Any, fmt: str) -> str:
        # A figure that does not exist (None/NaN: e.g. TPOT when no request decoded twice) is n/a.
        if value is None or (isinstance(value, float) and value != value):
            return "n/a"
        return fmt.format(value)

    body = [[name] + [show[s[key]] if key == "starved" else cell(s[key], fmt)
                      for key, _, fmt in cols] for name, s in rows.items()]
    widths = [max(len(r[i]) for r in [header] + body) for i in range(len(header))]
    lines = ["  ".join(v.rjust(w) if i else v.ljust(w) for i, (v, w) in enumerate(zip(r, widths)))
             for r in [header] + body]
    return "\n".join(lines)


def cmd_simulate(args: argparse.Namespace, names: list[str]) -> int:
    """``run`` / ``compare``: simulate each policy, print a table or JSON."""
    from fairsim.metrics import summarize

    if args.out is not None:
        check_file_stems(names)
        check_writable_dir(args.out)
    if getattr(args, "plots", None) is not None:
        check_writable_dir(args.plots, "--plots")
    from fairsim.sim.capacity import describe_capacity, with_profile_capacity
    from fairsim.traces.offered import offered_load

    profile = load_profile(args.profile)
    config, cap_source = with_profile_capacity(engine_config(args), profile)
    from fairsim.metrics import parse_slo

    slo = parse_slo(args.slo)
    if slo and config.mode != "colocated":
        raise ValueError("--slo needs --mode colocated (prefill-only runs have no TPOT)")
    params = parse_params(args.param)
    check_policies(names, profile, params)
    # The trace's long-lived objects, no garbage cycles; frozen until the first Engine.run ends
    # (it unfreezes; so does an error before it, below). fairsim/gcpause.py.
    with paused(freeze=True):
        trace, requests = load_requests(args, profile)
        block_size, kv_blocks = capacity_of(requests, config, args)  # fails fast on a too-small cache
        engine = {"profile": profile.name, "kv_tokens": kv_blocks * block_size, "kv_blocks": kv_blocks,
                  "block_size": block_size, "kv_capacity_source": cap_source}
        load = offered_load(requests, profile, args.budget, args.load_window,
                            colocated=config.mode == "colocated")
    rows: dict[str, dict[str, Any]] = {}
    results: dict[str, SimResult] = {}
    try:  # from here on: the except below unfreezes (even a print to a closed stdout)
        stream = sys.stderr if args.format == "json" else sys.stdout
        scaled = f" (time scale {args.time_scale:.6g})" if args.time_scale != 1 else ""
        print(f"trace {trace.label}{scaled}: {load.describe()}", file=stream)
        print(describe_capacity(profile.name, block_size, kv_blocks, cap_source), file=stream)
        print(replay_line(args), file=stream)
        for name in names:
            result = run_one(name, requests, profile, config, params_for(name, params),
                             replay=args.replay, think_scale=args.think_scale)
            if getattr(args, "plots", None) is not None:
                results[name] = result
            # Columns, not DataFrames: pandas is imported only to write --out tables (issue 13).
            summary = summarize(result.columns("requests"), result.columns("steps"))
            if result.token_gaps is not None:
                from fairsim.cli_colocated import colocated_summary

                summary.update(colocated_summary(result, slo))
            summary["wall_time_s"] = result.wall_time_s
            summary["profile"] = profile.name
            summary["kv_tokens"] = result.kv_blocks * result.block_size
            summary["kv_blocks"] = result.kv_blocks
            summary["block_size"] = result.block_size
            if args.out is not None:
                write_tables(args.out, name, result, engine)
            rows[name] = summary  # only once its tables are written
    except BaseException as exc:
        gc.unfreeze()  # paused(freeze=True) above, when no Engine.run unfroze it
        # Ctrl-C or an error in a later policy: keep what finished (printed; its tables are
        # written, and summary.json and run.json list the finished policies), then report as usual.
        if rows and not isinstance(exc, BrokenPipeError):
            with contextlib.suppress(OSError):  # stdout gone too: the files and the error remain
                print_rows(rows, args.format, config.mode == "colocated")
                print(f"fairsim: the output above holds the {len(rows)} of {len(names)} policies that "
                      f"finished ({', '.join(rows)})", file=sys.stderr)
        if args.out is not None and rows:
            atomic_write_text(args.out / "summary.json", strict_json(rows) + "\n")
            write_run_info(args.out, args, trace, list(rows), load, engine)
        raise
    print_rows(rows, args.format, config.mode == "colocated")
    if results:
        from fairsim.run_plots import write_run_plots

        write_run_plots(args.plots, results, title=trace.name)
    if args.out is not None:
        atomic_write_text(args.out / "summary.json", strict_json(rows) + "\n")
        write_run_info(args.out, args, trace, names, load, engine)
    return 0


def print_rows(rows: dict[str, dict[str, Any]], fmt: str, colocated: bool) -> None:
    """``run``/``compare``'s output on stdout: the JSON object keyed by policy (``fmt`` ``json``)
    or the table, with the colocated groups' table below it in colocated mode."""
    if fmt == "json":
        print(strict_json(rows))
        return
    print(format_table(rows))
    if colocated:
        from fairsim.cli_colocated import format_groups

        groups = format_groups(rows)
        if groups:
            print(groups)
    sys.stdout.flush()


def write_run_info(out: Path, args: argparse.Namespace, trace: Trace, names: list[str], load: Any,
                   engine: dict[str, Any] | None = None) -> None:
    """``run.json``: what produced the tables in ``out`` (input, shaping, engine, policies).

    The options as given, plus ``engine`` (the profile, KV capacity in tokens and blocks and the
    block size actually simulated) and the offered-load figures.
    """
    info = {
        "trace": trace.source, "policies": names, "params": parse_params(args.param),
        "profile": args.profile, "budget_tokens": args.budget, "max_num_seqs": args.max_num_seqs,
        "block_size": args.block_size, "kv_blocks": args.kv_blocks, "kv_fraction": args.kv_fraction,
        "kv_tokens": getattr(args, "kv_tokens", None),
        "time_scale": args.time_scale, "target_load": getattr(args, "target_load", None),
        "window_start_s": args.window_start,
        "mode": args.mode, "slo": args.slo,
        "window_end_s": args.window_end, "max_requests": args.max_requests, "seed": args.seed,
        "skip_long": getattr(args, "skip_long", False), "skipped_long": getattr(args, "skipped_long", 0),
        "engine": engine, "offered_load": load.describe(), "offered_load_figures": load.to_dict(),
        "replay": args.replay, "think_scale": args.think_scale,
        "session_rate_per_s": args.session_rate, "fairsim_version": __version__,
        "trace_format": trace.format, "hash_block_size": trace.hash_block_size,
        "absolute_time": trace.absolute_time, "warnings": list(trace.warnings),
        "skipped_records": len(trace.skipped),
    }
    atomic_write_text(out / "run.json", json.dumps(info, indent=2) + "\n")


def replay_line(args: argparse.Namespace) -> str:
    """One line saying how requests are sent (after ``load_requests`` resolved the options)."""
    if args.replay == "open":
        line = "replay: open loop (requests arrive at their timestamps"
    else:
        line = (f"replay: closed loop (a turn is sent when the turn it follows finished + its "
                f"think time x{args.think_scale:g}; TTFT and queue delay from that send time")
    if args.session_rate is not None:
        line += f"; sessions start as a Poisson process of {args.session_rate:g}/s, seed {args.seed}"
    return line + ")"


def dispatch(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """Run the command named by ``args.command``; errors propagate to ``main``."""
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
    if args.command == "convert":
        from fairsim.convert import cmd_convert

        return cmd_convert(args)
    if args.command == "analyze":
        from fairsim.analysis.cli import cmd_analyze

        return cmd_analyze(args)
    if args.command == "accept":
        from fairsim.accept import cmd_accept

        return cmd_accept(args)
    parser.error(f"unknown command {args.command}")
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``fairsim`` console script; applies the error contract (module docstring).

    A Ctrl-C ends in exit 130 wherever it lands, the parsing included (building the full parser
    imports every command's module); an error raised after one (a library that turned the
    ``KeyboardInterrupt`` into an ``ImportError``) is reported as the interruption it is.

    Returns:
        The exit status: 0 success, 1 internal error (a bug), 2 bad input or a missing optional
        package, 3 a refused calibration fit, 130 interrupted (Ctrl-C).
    """
    from fairsim import interrupt

    interrupt.install()
    argv = sys.argv[1:] if argv is None else list(argv)
    debug = False
    try:
        parser, args = parse_command_line(argv)
        debug = bool(getattr(args, "debug", False))
        status = dispatch(parser, args)
        # Ctrl-C arrived in a finaliser after the last step; a command that returns 130 has
        # reported the interruption itself (sweep names its resumable folder), so not twice.
        if interrupt.REQUESTED and status != 130:
            raise KeyboardInterrupt
        return status
    except Exception as exc:  # noqa: BLE001 - classified below; KeyboardInterrupt is no Exception
        if interrupt.REQUESTED:
            return _interrupted(debug)
        return _error_status(exc, debug)
    except KeyboardInterrupt:
        return _interrupted(debug)


def parse_command_line(argv: list[str]) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    """The parser and the parsed options: a core command (``CORE_COMMANDS``) by the core-only
    parser, anything else, or a mistake, by the full one (which says it and exits 2)."""
    command = next((a for a in argv if not a.startswith("-")), None)
    try:
        if command not in CORE_COMMANDS:
            raise _CoreParseError(command)
        parser = build_parser(full=False)
        return parser, parser.parse_args(argv)
    except _CoreParseError:  # another command, or a mistake: the full parser says it
        parser = build_parser()
        return parser, parser.parse_args(argv)


def _interrupted(debug: bool) -> int:
    """Ctrl-C: ``fairsim.interrupt.MESSAGE``, exit 130 (the traceback first with ``--debug``)."""
    from fairsim import interrupt

    if debug:
        traceback.print_exc()
    return interrupt.report()


def _error_status(exc: Exception, debug: bool) -> int:
    """The message and exit status of an error a command raised (module docstring)."""

    def fail(message: str, status: int) -> int:
        if debug:
            traceback.print_exception(exc)
        print(f"fairsim: {message}", file=sys.stderr)
        return status

    if isinstance(exc, StatusError):  # its own status (a bench child's, a policy failing in the hook)
        return fail(str(exc), exc.status)
    if isinstance(exc, MissingDependencyError):
        return fail(f"error: {exc}", 2)
    if isinstance(exc, ImportError):  # an optional package missing deep inside a command
        hint = missing_message(exc.name or "")
        return fail(f"error: {hint}", 2) if hint is not None else _bug(exc, debug)
    if isinstance(exc, MemoryError):
        return fail("error: out of memory (MemoryError); use a smaller input (--max-requests, "
                    "--window-end) or KV cache (--kv-blocks/--kv-fraction)", 2)
    if isinstance(exc, BrokenPipeError):  # the reader of stdout left (`| head`): stop quietly, as `cat` does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no 2nd error at exit
        return 141  # 128 + SIGPIPE, the shell's status for a writer whose reader left
    if isinstance(exc, (ValueError, OSError)):  # bad input or an unusable path: message, no traceback
        return fail(f"error: {exc}", 2)
    if isinstance(exc, PolicyError):  # the policy's own code raised: name it, not "a bug in fairsim"
        return fail(f"{exc}" + ("" if debug else _DEBUG_HINT), 1)
    if isinstance(exc, PolicyContractError):  # the policy returned a bad order (message names it)
        return fail(f"error: policy contract broken (fairsim/policies/base.py): {exc}"
                    + ("" if debug else _DEBUG_HINT), 1)
    return _bug(exc, debug)  # anything else is a bug: say so, briefly


def program() -> int:
    """The ``fairsim`` program, ``fairsim.__main__.program`` (kept here for callers that import
    it from ``fairsim.cli``; the console script imports the light ``fairsim.__main__``, so that
    Ctrl-C is handled before this module's imports)."""
    from fairsim.__main__ import program as fairsim_program

    return fairsim_program()


_DEBUG_HINT = "\n(rerun with fairsim --debug ... for the traceback)"


def _bug(exc: BaseException, debug: bool) -> int:
    """Report an internal error (exit 1): the exception, and the traceback only with ``--debug``."""
    if debug:
        traceback.print_exception(exc)
    print(f"fairsim: internal error (a bug in fairsim, please report it): {type(exc).__name__}: {exc}"
          + ("" if debug else "\n(rerun with fairsim --debug ... for the traceback)"), file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
