"""``fairsim accept``: accept a policy on a trace's calm, burst and spike windows (a CI gate).

The Fairway paper's step 4: replay real traffic windows at their original timing and check both
targets per window (DESIGN.md, "Metrics"; the paper's targets):

- median TTFT <= ``MEDIAN_FACTOR`` x LPM's median (the candidate keeps hit-first's median);
- p99 TTFT <= ``P99_FACTOR`` x FCFS's p99 (and FCFS's tail);
- not starved: worst TTFT <= ``fairsim.metrics.STARVATION_FACTOR`` x its own p99.

Each window is simulated from ``warmup`` trace seconds before its start (so it opens with the queue and
cache the traffic before it leaves), with the same KV capacity for every window (sized on the
whole trace, as ``fairsim run``), and only requests arriving inside the window are scored.
Windows are in seconds of trace time, before ``--time-scale``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import sys
from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fairsim.analysis.load import Window, detect_windows, parse_windows, with_load
from fairsim.io import file_arg, path_arg, print_then_write
from fairsim.metrics import STARVATION_FACTOR
from fairsim.sim import EngineConfig, SimResult
from fairsim.types import Request

MEDIAN_FACTOR = 1.1
"""Median target: candidate median <= 1.1 x LPM's (the paper)."""
P99_FACTOR = 1.1
"""Tail target: candidate p99 <= 1.1 x FCFS's (the paper)."""
BASELINES = ("fcfs", "lpm")
OVERLOAD = 2.0
"""Window load (best-case busy seconds over the window's length, ``fairsim.analysis.load``) above
which ``accept`` warns that the replay is far beyond what the engine could serve (a profile or time
scale that does not fit the trace)."""


STATS = {"p50": "p50_s", "p99": "p99_s", "max": "max_s", "worst": "max_s"}
"""Target statistics (``window_stats`` keys): median, 99th percentile and worst TTFT of a window."""


@dataclass(frozen=True)
class Target:
    """One TTFT target of a window: ``stat <= factor x ref's stat`` (``ref`` a policy run at its
    defaults on the same window), or ``stat <= factor`` seconds when ``ref`` is None.

    Attributes:
        stat: A ``window_stats`` key: ``p50_s``, ``p99_s`` or ``max_s``.
        factor: Multiplier of the reference's statistic, or seconds.
        ref: Reference policy name, or None for an absolute bound.
    """

    stat: str
    factor: float
    ref: str | None

    def base(self, stats: dict[str, dict[str, Any]]) -> float:
        """What ``factor`` multiplies: the reference's statistic in ``stats`` (policy -> stats), or 1 s."""
        return 1.0 if self.ref is None else stats[self.ref][self.stat]

    def holds(self, candidate: dict[str, Any], stats: dict[str, dict[str, Any]]) -> bool:
        """``candidate[stat] <= factor x base``."""
        return candidate[self.stat] <= self.factor * self.base(stats)

    def label(self) -> str:
        """``p50 <= 1.1 x lpm`` or ``p50 <= 2 s``."""
        stat = self.stat.removesuffix("_s")
        return f"{stat} <= {self.factor:g} s" if self.ref is None else f"{stat} <= {self.factor:g} x {self.ref}"


ACCEPT_TARGETS = (Target("p50_s", MEDIAN_FACTOR, "lpm"), Target("p99_s", P99_FACTOR, "fcfs"))
"""``accept``'s two targets (the paper's); with no starvation, ``--targets accept`` of ``fairsim tune``."""


def parse_targets(text: str, option: str = "--targets") -> tuple[list[Target], bool]:
    """``"p50<=1.1xlpm,max<=2xfcfs,no-starvation"`` -> ``(targets, no_starvation)``.

    Items: ``STAT<=FxPOLICY`` (STAT one of p50, p99, max or worst; POLICY run at its defaults),
    ``STAT<=Ns`` (seconds), ``no-starvation`` (worst <= ``STARVATION_FACTOR`` x own p99), or
    ``accept`` (``ACCEPT_TARGETS`` and no starvation). A reference policy is checked by the caller.

    Raises:
        ValueError: A malformed item, a factor that is not a finite number > 0, a statistic or
            ``no-starvation`` given twice (``accept`` holds both), or no target; the message
            names ``option`` and the item.
    """
    import math
    import re

    targets: list[Target] = []
    starvation = None  # the item that asked for no starvation (accept holds it too)
    for item in (s.strip() for s in text.split(",")):
        if item in ("accept", "no-starvation"):
            if starvation is not None:
                twice = "accept" if item == starvation == "accept" else "no-starvation"
                held = " (accept includes it)" if twice != "accept" and "accept" in (item, starvation) else ""
                raise ValueError(f"{option} {text}: {twice} given more than once{held}")
            targets += ACCEPT_TARGETS if item == "accept" else []
            starvation = item
            continue
        m = re.fullmatch(r"(\w+)\s*<=\s*([0-9.eE+-]+)\s*(?:x\s*(\S+)|(s))", item)
        if m is None or m.group(1) not in STATS:
            raise ValueError(f"{option} {item!r}: expected STAT<=FxPOLICY (e.g. p99<=1.1xfcfs), STAT<=Ns "
                             f"(e.g. p50<=2s), no-starvation or accept; STAT one of {', '.join(STATS)}")
        try:
            factor = float(m.group(2))
        except ValueError:
            factor = float("nan")
        if not (factor > 0 and math.isfinite(factor)):
            raise ValueError(f"{option} {item!r}: need a finite factor > 0, got {m.group(2)!r}")
        targets.append(Target(STATS[m.group(1)], factor, m.group(3)))
    twice = sorted({t.stat for t in targets if sum(u.stat == t.stat for u in targets) > 1})
    if twice:
        raise ValueError(f"{option} {text}: {', '.join(s.removesuffix('_s') for s in twice)} given more than once")
    if not targets and starvation is None:
        raise ValueError(f"{option} {text}: no target given")
    return targets, starvation is not None


@dataclass(frozen=True)
class WindowVerdict:
    """The targets of one window.

    Attributes:
        window: The window (trace seconds).
        stats: Policy name -> ``{"requests", "p50_s", "p99_s", "max_s", "starved", "hit_rate"}``
            over the requests arriving in the window.
        median_ok, p99_ok, starvation_ok: The three targets.
    """

    window: Window
    stats: dict[str, dict[str, Any]]
    candidate: str
    median_ok: bool
    p99_ok: bool
    starvation_ok: bool

    @property
    def ok(self) -> bool:
        """Every target holds."""
        return self.median_ok and self.p99_ok and self.starvation_ok


def window_stats(result: SimResult, scored: set[str]) -> dict[str, Any]:
    """TTFT p50 / p99 / max (s), starvation and hit rate of the ``scored`` requests."""
    t = result.requests[result.requests["request_id"].isin(scored)]
    ttft = t["ttft_s"].to_numpy(dtype=np.float64)
    p50, p99 = (float(v) for v in np.percentile(ttft, [50, 99]))
    mx = float(ttft.max())
    return {"requests": int(ttft.size), "p50_s": p50, "p99_s": p99, "max_s": mx,
            "starved": bool(mx > STARVATION_FACTOR * p99),
            "hit_rate": float(t["cached_tokens"].sum() / t["prompt_tokens"].sum())}


def clip_to_trace(windows: Sequence[Window], requests: Sequence[Request]) -> list[Window]:
    """``--windows`` cut at the trace's end: a window reaching past the last arrival ends just after
    it (with a warning), so its load is over time the trace covers, not over empty seconds.

    Raises:
        ValueError: A window in which no request arrives (checked here, before any window is
            simulated; ``iter_verdicts`` would stop at it after the windows before it).
    """
    if not requests:
        return list(windows)
    arrivals = sorted(r.arrival_time for r in requests)
    last = arrivals[-1]
    for w in windows:
        if bisect_left(arrivals, w.start_s) == bisect_left(arrivals, w.end_s):
            raise ValueError(f"--windows {w.name}:{w.start_s:g}-{w.end_s:g}: window {w.name} "
                             f"[{w.start_s:g}, {w.end_s:g}) trace s holds no request (the trace's "
                             f"arrivals run from {arrivals[0]:g} to {last:g} trace s)")
    end = math.nextafter(last, math.inf)  # the last arrival inside the half-open window
    out = []
    for w in windows:
        if w.end_s > end and w.start_s <= last:
            print(f"fairsim: warning: --windows {w.name}:{w.start_s:g}-{w.end_s:g}: the trace's last "
                  f"arrival is at {last:g} trace s; the window is cut there (its load is over "
                  f"{w.start_s:g}-{last:g} trace s)", file=sys.stderr)
            w = dataclasses.replace(w, end_s=end)
        out.append(w)
    return out


def window_requests(requests: Sequence[Request], w: Window, warmup_s: float,
                    time_scale: float) -> tuple[list[Request], set[str]]:
    """Requests of ``[start - warmup, end)`` rebased to 0 and time-scaled, and the ids scored
    (those arriving in ``[start, end)``).

    A closed-loop turn whose predecessor arrived before the cut is sent at its own timestamp, as
    ``fairsim run --window-start`` sends it (``fairsim.traces.sessions.detach_cut``)."""
    from fairsim.traces.sessions import detach_cut

    t0 = max(0.0, w.start_s - warmup_s)
    sub, _ = detach_cut([r for r in requests if t0 <= r.arrival_time < w.end_s], requests)
    scored = {r.request_id for r in sub if r.arrival_time >= w.start_s}
    return ([dataclasses.replace(r, arrival_time=(r.arrival_time - t0) * time_scale) for r in sub],
            scored)


def iter_verdicts(requests: Sequence[Request], windows: Sequence[Window], candidate: str,
                  run: Callable[[str, list[Request]], SimResult], warmup_s: float | None = None,
                  time_scale: float = 1.0,
                  on_result: Callable[[Window, str, SimResult, set[str]], None] | None = None,
                  ) -> Iterator[WindowVerdict]:
    """Simulate FCFS, LPM and ``candidate`` on every window and check the targets, yielding each
    window's verdict as soon as its runs are done (so an interrupted ``accept`` keeps them).

    Args:
        requests: The trace, arrival times in trace seconds.
        windows: Windows in trace seconds.
        candidate: Policy under test.
        run: ``run(policy, requests) -> SimResult`` (same engine and capacity for every call).
        warmup_s: Trace seconds replayed before each window; None = the window's own length.
        time_scale: Arrival-time multiplier applied after cutting.
        on_result: Called with every result and the ids scored in its window (the rest are its
            warm-up), for tables and figures.

    Raises:
        ValueError: A window with no request in it.
    """
    names = list(dict.fromkeys([*BASELINES, candidate]))
    for w in windows:
        warm = (w.end_s - w.start_s) if warmup_s is None else warmup_s
        sub, scored = window_requests(requests, w, warm, time_scale)
        if not scored:
            raise ValueError(f"window {w.name} [{w.start_s:g}, {w.end_s:g}) trace s holds no request")
        stats = {}
        for name in names:
            res = run(name, sub)
            stats[name] = window_stats(res, scored)
            if on_result is not None:
                on_result(w, name, res, scored)
        c = stats[candidate]
        median, tail = ACCEPT_TARGETS
        yield WindowVerdict(
            window=dataclasses.replace(w, requests=len(scored)), stats=stats, candidate=candidate,
            median_ok=median.holds(c, stats), p99_ok=tail.holds(c, stats),
            starvation_ok=not c["starved"])


def evaluate(*args: Any, **kwargs: Any) -> list[WindowVerdict]:
    """Every window's verdict: ``list(iter_verdicts(...))``, same arguments."""
    return list(iter_verdicts(*args, **kwargs))


def format_verdicts(verdicts: Sequence[WindowVerdict]) -> str:
    """The printed tables: per window and policy, then the targets per window."""
    rows = [["window", "span, trace s", "requests", "load", "policy", "p50 s", "p99 s", "max s",
             "hit rate", "starved"]]
    for v in verdicts:
        w = v.window
        for name, s in v.stats.items():
            rows.append([w.name, f"{w.start_s:g}-{round(w.end_s, 9):g}", str(s["requests"]),  # (a cut end: +1 ulp)
                         "n/a" if np.isnan(w.load) else f"{w.load:.2f}", name, f"{s['p50_s']:.3f}",
                         f"{s['p99_s']:.3f}", f"{s['max_s']:.3f}", f"{s['hit_rate']:.3f}",
                         "yes" if s["starved"] else "no"])
    checks = [["window", f"p50 <= {MEDIAN_FACTOR:g} x LPM", f"p99 <= {P99_FACTOR:g} x FCFS",
               f"max <= {STARVATION_FACTOR:g} x p99", "verdict"]]
    for v in verdicts:
        s, lpm, fcfs = v.stats[v.candidate], v.stats["lpm"], v.stats["fcfs"]
        mark = lambda ok: "ok" if ok else "FAIL"  # noqa: E731
        checks.append([
            v.window.name,
            f"{s['p50_s']:.3f} vs {MEDIAN_FACTOR * lpm['p50_s']:.3f} {mark(v.median_ok)}",
            f"{s['p99_s']:.3f} vs {P99_FACTOR * fcfs['p99_s']:.3f} {mark(v.p99_ok)}",
            f"{s['max_s']:.3f} vs {STARVATION_FACTOR * s['p99_s']:.3f} {mark(v.starvation_ok)}",
            "pass" if v.ok else "FAIL"])
    return _table(rows) + "\n\n" + _table(checks)


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(wd) for c, wd in zip(r, widths)).rstrip() for r in rows)


def add_accept_command(sub: argparse._SubParsersAction, add_common: Callable, fmt: type) -> None:
    """Register ``fairsim accept``."""
    from fairsim.analysis.cli import retitle
    from fairsim.policies import policy_names

    p = sub.add_parser("accept", formatter_class=fmt,
                       help="check a policy against the paper's targets on calm/burst/spike "
                            "windows; exit 0 when all hold, 1 when not")
    p.add_argument("trace_path", metavar="TRACE", nargs="?",
                   help="trace file (same as --trace; default: the embedded RAG input)")
    p.add_argument("--policy", help=f"candidate policy: one of {', '.join(policy_names())} (or --policy-config)")
    p.add_argument("--policy-config", type=file_arg, metavar="FILE",
                   help="the candidate policy and its parameters as fairsim tune writes them")
    p.add_argument("--windows", default="auto",
                   help="'auto' (calm, burst, spike from the offered load) or "
                        "NAME:START-END,... in seconds of trace time")
    p.add_argument("--window-length", type=float, default=None,
                   help="length of auto windows, trace seconds (default 60, or a third of a shorter trace, "
                        "or less where three disjoint windows need it)")
    p.add_argument("--warmup", type=float, default=None,
                   help="trace seconds replayed before each window, not scored (default: the window's length)")
    p.add_argument("--plots", type=path_arg, help="folder for the figures (per window and overall)")
    p.add_argument("--engine", choices=("sim", "vllm"), default="sim",
                   help="sim: the simulator; vllm: replay each window live against a vLLM engine "
                        "with the fairsim hook, in real time")
    p.add_argument("--scheduler", choices=("sync", "async"), default="sync",
                   help="--engine vllm: PolicyScheduler (sync, CPU) or AsyncPolicyScheduler (GPU)")
    p.add_argument("--model", default=None,
                   help="--engine vllm: model folder/name (default: the shipped tiny Llama, dummy weights)")
    p.add_argument("--load-format", default=None,
                   help="--engine vllm: vLLM load_format (default dummy for the tiny Llama, auto otherwise)")
    add_common(p, goodput=False)  # --slo refused: accept checks TTFT targets
    retitle(p, "--out", "folder for accept.json and requests-WINDOW-POLICY.parquet")
    retitle(p, "--format", "table for people, json for scripts (the verdicts)")
    retitle(p, "--block-size", "tokens per KV block, any size (default: the trace's hash block; 128 with "
                               "--engine vllm, as fairsim replay)")
    retitle(p, "--param", "candidate policy parameter KEY=VALUE, or POLICY.KEY=VALUE for fcfs/lpm (repeatable)")


def cmd_accept(args: argparse.Namespace) -> int:
    """Run ``fairsim accept``: 0 when every target holds in every window, 1 when one fails."""
    import pandas as pd

    from fairsim.description import describe_run, merge_trace_arg
    from fairsim.options import params_for, parse_params, pre_run_load, scoped_params
    from fairsim.run import run_one, write_tables
    from fairsim.traces import scale_time

    from fairsim.policy_config import apply_policy_config

    merge_trace_arg(args)
    apply_policy_config(args, "accept")
    if args.policy is None:
        raise ValueError("accept needs the candidate policy: --policy NAME or --policy-config FILE")
    if getattr(args, "slo", None):
        raise ValueError("--slo: accept checks its TTFT targets against FCFS and LPM; goodput against "
                         "an SLO is in run/compare (--mode colocated --slo ...)")
    if args.warmup is not None and not args.warmup >= 0:
        raise ValueError(f"--warmup {args.warmup}: need >= 0 s")
    if args.engine == "vllm":  # (before the trace is read and any accept.json is written)
        from fairsim.deps import require

        require("vllm")
    given = None if args.windows == "auto" else parse_windows(args.windows)
    if given is not None and args.window_length is not None:
        raise ValueError(f"--window-length {args.window_length:g}: it sizes --windows auto's windows; "
                         f"--windows {args.windows} gives them")

    def own_params(name: str, params: dict[str, Any]) -> dict[str, Any]:
        # The candidate takes every unscoped --param; FCFS and LPM only their POLICY.KEY ones.
        return params_for(name, params) if name == args.policy else scoped_params(name, params)

    desc = describe_run(args, policies=list(dict.fromkeys([*BASELINES, args.policy])), params_of=own_params,
                        trace_time=True,  # windows cut in trace time, scaled after
                        live_block_size=128 if args.engine == "vllm" else None)  # as fairsim replay
    profile, base, trace, requests, scale = desc.profile, desc.config, desc.trace, desc.requests, desc.time_scale
    block_size, kv_blocks = desc.block_size, desc.kv_blocks
    colocated = base.mode == "colocated"
    windows = (detect_windows(requests, profile, args.window_length, budget_tokens=base.budget_tokens,
                              colocated=colocated) if given is None else clip_to_trace(given, requests))
    if given is None and args.window_length is None:
        from fairsim.analysis.load import default_window_s

        t = [r.arrival_time for r in requests]
        first, used = default_window_s(max(t) - min(t)), windows[0].end_s - windows[0].start_s
        if used < first * (1 - 1e-9):
            print(f"accept: windows of {used:.6g} trace s: three disjoint ones of {first:.6g} s do not fit beside "
                  f"this trace's busiest (--window-length sets the length)", file=sys.stderr)
    windows = [with_load(requests, profile, w, scale, base.budget_tokens, colocated) for w in windows]
    config = dataclasses.replace(base, block_size=block_size, kv_blocks=kv_blocks,
                                 kv_fraction=None, kv_tokens=None)
    load, load_what = pre_run_load(args, scale_time(requests, scale), profile)  # the figures of fairsim run
    info = (f"trace {trace.label}: {load.describe(load_what, 'simulated s')}; "
            f"time scale {scale:g} (simulated s = trace s x {scale:g}; windows in trace s); KV cache {kv_blocks} blocks of {block_size} tokens; "
            f"engine {'vLLM (live, real time)' if args.engine == 'vllm' else 'simulator'}")
    print(info, file=sys.stderr if args.format == "json" else sys.stdout)
    overloaded = [w.name for w in windows if w.load > OVERLOAD]
    if overloaded:
        print(f"fairsim: warning: offered load above {OVERLOAD:g} x the cold capacity of profile "
              f"{args.profile} in {', '.join(overloaded)}: queues grow through the whole window "
              f"whatever the order. Use your engine's profile (fairsim calibrate) or --time-scale "
              f"to replay at a load the engine was sized for.", file=sys.stderr)

    # A candidate named like a baseline (lpm, fcfs) with parameters the baseline does not take
    # (unscoped --param, or --policy-config's) is another policy: it runs beside the default
    # baseline as NAME-candidate, or its targets would compare it with itself.
    candidate = args.policy
    policy_of = {name: name for name in BASELINES}
    params_of = {name: desc.policy_params[name] for name in BASELINES}
    if candidate in BASELINES:
        typed = scoped_params(candidate, parse_params(getattr(args, "param_typed", args.param)))
        if typed != desc.policy_params[candidate]:
            candidate = f"{args.policy}-candidate"
            params_of[args.policy] = typed
            print(f"accept: the candidate {args.policy} has parameters of its own "
                  f"({', '.join(f'{k}={v!r}' for k, v in desc.policy_params[args.policy].items())}): it runs as "
                  f"{candidate!r} beside the {args.policy} baseline", file=sys.stderr)
    policy_of[candidate], params_of[candidate] = args.policy, desc.policy_params[args.policy]
    if args.out is not None:
        from fairsim.description import warn_earlier_tables
        from fairsim.io import file_stem

        warn_earlier_tables(args, args.out, {f"{kind}-{file_stem(f'{w.name}-{name}')}.parquet" for w in windows
                                             for name in policy_of for kind in ("requests", "steps")}, "accept.json")

    def run(name: str, sub: list[Request]) -> SimResult:
        own = params_of[name]
        if args.engine == "vllm":
            from fairsim.live.cli import _model_kwargs
            from fairsim.live.engine import LiveConfig
            from fairsim.live.replay import replay_realtime

            live = LiveConfig(policy=policy_of[name], params=own, profile=args.profile,
                              budget_tokens=args.budget, max_num_seqs=args.max_num_seqs,
                              block_size=block_size, kv_blocks=kv_blocks, scheduler=args.scheduler,
                              **_model_kwargs(args))
            return replay_realtime(sub, live, time_scale=1.0)  # already scaled
        return run_one(policy_of[name], sub, profile, config, own, replay=args.replay, think_scale=args.think_scale)

    results: dict[str, dict[str, SimResult]] = {}

    def keep(w: Window, name: str, res: SimResult, scored: set[str]) -> None:
        results.setdefault(w.name, {})[name] = res
        if args.out is not None:  # every request replayed; `scored`: in the window, not its warm-up
            engine = {"profile": profile.name, "kv_tokens": kv_blocks * block_size, "kv_blocks": kv_blocks,
                      "block_size": block_size, "window": w.name, "time_scale": scale}
            write_tables(args.out, f"{w.name}-{name}", res, engine,
                         scored=res.requests["request_id"].isin(scored).to_numpy(), policy=name)

    verdicts: list[WindowVerdict] = []
    try:
        for verdict in iter_verdicts(requests, windows, candidate, run, args.warmup, scale, keep):
            verdicts.append(verdict)
    except BaseException as exc:
        # Ctrl-C or an error in a later window: keep what finished, as fairsim compare does (the
        # windows' rows printed, accept.json marked partial), then report as usual.
        payload = accept_payload(verdicts, windows, trace, args, base, scale, block_size, kv_blocks, candidate)
        if verdicts and not isinstance(exc, BrokenPipeError):
            with contextlib.suppress(OSError):  # stdout gone too: the files and the error remain
                print_verdicts(payload, verdicts, args)
                print(f"fairsim: the output above holds the {len(verdicts)} of {len(windows)} windows that "
                      f"finished ({', '.join(v.window.name for v in verdicts)})", file=sys.stderr)
        if args.out is not None:  # even with no window finished: pass null tells CI it did not run
            with contextlib.suppress(OSError):  # an unusable --out: its own error is the one raised
                write_accept_json(args.out, payload)
        raise
    ok = all(v.ok for v in verdicts)
    payload = accept_payload(verdicts, windows, trace, args, base, scale, block_size, kv_blocks, candidate)
    def write() -> None:
        if args.out is not None:
            write_accept_json(args.out, payload)

    gone = print_then_write(lambda: print_verdicts(payload, verdicts, args), write)
    if args.plots is not None:
        from fairsim.figures import save, window_bars
        from fairsim.run_plots import write_run_plots

        from fairsim.io import file_stem

        for wname, by_policy in results.items():  # (the window's name as in --out's tables: 'a/b' names no folder)
            write_run_plots(args.plots, by_policy, prefix=f"{file_stem(wname)}-", title=wname)
        scored = []
        for v in verdicts:
            for name, res in results[v.window.name].items():
                t0 = max(0.0, v.window.start_s - (v.window.end_s - v.window.start_s
                                                  if args.warmup is None else args.warmup))
                r = res.requests
                keep_rows = r["arrival_s"] >= (v.window.start_s - t0) * scale
                scored.append(r[keep_rows].assign(policy=name, window=v.window.name))
        save(window_bars(pd.concat(scored, ignore_index=True), title=f"TTFT per window ({args.policy})"),
             args.plots / "windows.png")
    if gone is not None:
        raise gone  # exit 141, quietly (fairsim.cli), once the files are written
    return 0 if ok else 1


def accept_payload(verdicts: Sequence[WindowVerdict], windows: Sequence[Window], trace: Any,
                   args: argparse.Namespace, base: EngineConfig, scale: float, block_size: int,
                   kv_blocks: int, candidate: str | None = None) -> dict[str, Any]:
    """``accept.json``'s content: the run's settings and every finished window's verdict.

    ``partial`` is true when fewer windows finished than were planned (Ctrl-C, or an error in a
    later window); ``pass`` is then ``null`` (the verdict over every window is unknown) and
    ``unfinished_windows`` names the windows left out. ``candidate_row``: the candidate's key in
    each window's ``stats`` (``candidate``, the policy, unless it is a baseline's name with
    parameters of its own: ``NAME-candidate``).
    """
    partial = len(verdicts) < len(windows)
    done = {v.window.name for v in verdicts}
    candidate = args.policy if candidate is None else candidate
    return {"trace": trace.source, "candidate": args.policy, "candidate_row": candidate,
            "engine": args.engine, "mode": base.mode,
            "time_scale": scale, "kv_blocks": kv_blocks, "block_size": block_size,
            "pass": None if partial else all(v.ok for v in verdicts),
            "partial": partial, "unfinished_windows": [w.name for w in windows if w.name not in done],
            "targets": {"median_vs_lpm": MEDIAN_FACTOR, "p99_vs_fcfs": P99_FACTOR,
                        "starvation_max_vs_own_p99": STARVATION_FACTOR},
            "windows": [{**_window_json(v.window), "stats": v.stats, "median_ok": v.median_ok,
                         "p99_ok": v.p99_ok, "starvation_ok": v.starvation_ok, "pass": v.ok}
                        for v in verdicts]}


def _window_json(w: Window) -> dict[str, Any]:
    """A window's fields for ``accept.json``: an undefined load (``with_load``'s NaN) is ``null``."""
    out = dataclasses.asdict(w)
    if not math.isfinite(out["load"]):
        out["load"] = None
    return out


def write_accept_json(out: Path, payload: dict[str, Any]) -> None:
    """``OUT/accept.json`` (written whole or not at all)."""
    from fairsim.io import atomic_write_text

    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "accept.json", json.dumps(payload, indent=2) + "\n")


def print_verdicts(payload: dict[str, Any], verdicts: Sequence[WindowVerdict], args: argparse.Namespace) -> None:
    """The result on stdout: ``payload`` (``accept.json``'s content) as JSON (``--format json``),
    else the tables of ``verdicts`` and a one-line result (unfinished when ``payload`` is partial)."""
    if args.format == "json":
        print(json.dumps(payload, indent=2))
    else:
        print(format_verdicts(verdicts))
        met = sum(v.ok for v in verdicts)
        if payload["partial"]:
            print(f"\n{args.policy}: unfinished ({met} of the {len(verdicts)} windows that finished meet "
                  f"every target; not run: {', '.join(payload['unfinished_windows'])})")
        else:
            print(f"\n{args.policy}: {'PASS' if payload['pass'] else 'FAIL'} ({met} of {len(verdicts)} "
                  f"windows meet every target)")
    sys.stdout.flush()
