"""Command-line parts of ``fairsim analyze`` (registered by ``fairsim/cli.py``)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

from fairsim.analysis.order_reuse import DEFAULT_REUSE_THRESHOLD
from fairsim.analysis.spread import DEFAULT_SPREAD_THRESHOLD

OVERLOAD = 2.0
"""Offered load after ideal reuse (``fairsim.traces.offered``) above which ``analyze`` warns (as
``fairsim accept``)."""


def retitle(p: argparse.ArgumentParser, option: str, help_text: str) -> None:
    """Replace the help of an option added by the shared ``add_common``."""
    p._option_string_actions[option].help = help_text  # noqa: SLF001 - argparse has no public setter


def add_analyze_command(sub: argparse._SubParsersAction, add_common: Callable, fmt: type) -> None:
    """Register ``fairsim analyze``."""
    p = sub.add_parser("analyze", formatter_class=fmt,
                       help="measure a trace: does ordering matter (queue work spread, prefix cache under FCFS vs LPM), prefix-hit bound, "
                            "LRU hit rate by capacity, offered load over time")
    p.add_argument("trace_path", metavar="TRACE", nargs="?",
                   help="trace file (same as --trace; default: the embedded RAG input)")
    add_common(p, goodput=False)  # --slo refused: analyze measures the trace
    # Refused with a message if given (analyze runs FCFS and LPM at their defaults): not offered.
    p._option_string_actions["--param"].help = argparse.SUPPRESS  # noqa: SLF001 (as retitle)
    retitle(p, "--out", "folder for report.md, analysis.json, load.png, spread.png, hit_curve.png")
    retitle(p, "--format", "table: a few lines for people; json: analysis.json on stdout")
    p.add_argument("--spread-threshold", type=float, default=DEFAULT_SPREAD_THRESHOLD,
                   help="work spread (x) at and above which ordering matters")
    p.add_argument("--reuse-threshold", type=float, default=DEFAULT_REUSE_THRESHOLD,
                   help="uncached prompt tokens of FCFS over those of LPM (x) at the run's KV capacity "
                        "at and above which ordering matters (the prefix cache thrashes in arrival order)")
    p.add_argument("--window-length", type=float, default=None,
                   help="length of the busiest windows, s (default 60, or a third of a shorter trace)")
    p.add_argument("--bin", type=float, default=None,
                   help="offered-load bin width, s (default: a sixth of the window length)")


def cmd_analyze(args: argparse.Namespace) -> int:
    """Run ``fairsim analyze``; returns the exit status."""
    from fairsim.analysis.analyze import analyze, format_text, spread_from_recorded, write_report
    from fairsim.description import describe_run, merge_trace_arg
    from fairsim.errors import record_where
    from fairsim.io import print_then_write
    from fairsim.options import pre_run_load
    from fairsim.traces import scale_time

    merge_trace_arg(args)
    if getattr(args, "slo", None):
        raise ValueError("--slo: analyze measures the trace (spread, reuse, load); goodput against an "
                         "SLO is in run/compare (--mode colocated --slo ...)")
    if args.param:
        raise ValueError("--param: analyze runs only FCFS and LPM with their defaults; it takes no "
                         "policy parameters")
    for option, value in (("--window-length", args.window_length), ("--bin", args.bin)):
        if value is not None and not (0 < value < float("inf")):
            raise ValueError(f"{option} {value}: need a finite number of seconds > 0")
    if not (1 < args.spread_threshold < float("inf")):  # before the trace is read
        raise ValueError(f"--spread-threshold {args.spread_threshold}: need a finite factor > 1")
    if not (1 < args.reuse_threshold < float("inf")):
        raise ValueError(f"--reuse-threshold {args.reuse_threshold}: need a finite factor > 1")
    # Bins and windows in trace time, as accept; a bad KV size named as its option, before any work.
    desc = describe_run(args, trace_time=True)
    profile, config, trace, requests, scale = desc.profile, desc.config, desc.trace, desc.requests, desc.time_scale
    load, load_what = pre_run_load(args, scale_time(requests, scale), profile)  # the figures of fairsim run
    offered = load.describe(load_what, "s" if scale == 1 else "simulated s")  # its windows are in trace s
    redrawn = desc.session_rate is not None  # (--session-rate: the arrivals are not the recording's)
    # (a spread read from the recorded scheduling times is the recording's, not a simulated backlog)
    if load.span_s > 0 and load.ideal_load > OVERLOAD and not spread_from_recorded(requests, scale, redrawn):
        print(f"fairsim: warning: offered load {load.ideal_load:.1f} x the cold capacity of profile "
              f"{args.profile} even after ideal prefix reuse: the FCFS queue grows through the "
              f"whole trace and the spread measures that backlog. Use your engine's profile "
              f"(fairsim calibrate) or --time-scale.", file=sys.stderr)
    an = analyze(requests, profile, config, trace.name, offered,
                 threshold=args.spread_threshold, window_s=args.window_length, bin_s=args.bin,
                 time_scale=scale, replay=args.replay, think_scale=args.think_scale,
                 reuse_threshold=args.reuse_threshold,
                 clock_offset_s=args.window_start,  # the window's arrivals start at 0
                 arrivals_redrawn=redrawn,
                 where=lambda r: record_where(trace.source, trace.locations.get(r.request_id))
                 if r.request_id in trace.locations else f"{trace.source}: request {r.request_id!r}")
    def show() -> None:
        if args.format == "json":
            print(an.summary_json())
        else:
            scaled = f" (time scale {scale:.6g})" if scale != 1 else ""
            print(f"trace {trace.label}{scaled}: {offered}")
            print(format_text(an))
        sys.stdout.flush()

    def write() -> None:  # (analysis.json before the figures, as write_report does)
        if args.out is not None:
            paths = write_report(an, Path(args.out))
            print(f"wrote {', '.join(str(p) for p in paths)}", file=sys.stderr)

    gone = print_then_write(show, write)
    if gone is not None:
        raise gone  # exit 141, quietly (fairsim.cli), once the files are written
    return 0
