"""Command-line options shared by the commands, and what they resolve to.

The option set of every simulating command (``add_common``: trace, window, scaling, replay,
engine config and KV capacity, profile, policy parameters, output) and the helpers that turn
those options into a run: the shaped requests (``load_requests``), the ``EngineConfig`` and its
capacity (``engine_config``, ``capacity_of``), the policies and their parameters
(``resolve_policies``, ``parse_params``, ``params_for``, ``check_policies``). The commands
(``fairsim.run``, ``fairsim.bench``, ``fairsim.accept``, ``fairsim.analysis.cli``,
``fairsim.live.cli``, ``fairsim.sweep``) resolve their options with
``fairsim.description.describe_run``, which calls these in one order of checks; this module
imports no command, so no command imports back the module that dispatches to it
(``fairsim.cli``).

Errors: a bad option or input raises ``ValueError`` naming the option (or the trace's file, line
and field); ``fairsim.cli.main`` reports it and exits 2.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import Any

from fairsim.costmodel import DEFAULT_PROFILE, Profile, load_profile
from fairsim.io import count_arg, name_arg, path_arg, plural
from fairsim.policies import make_policy, policy_names
from fairsim.policies.base import param_text
from fairsim.record import replace as record_replace
from fairsim.sim import EngineConfig, SimResult
from fairsim.traces import Trace, load_trace, scale_time, window
from fairsim.traces.shaping import nothing_in_window
from fairsim.traces.formats import prompt_field
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
        ValueError: An item without ``=``, or a key given twice with different values (which
            one was meant is not known).
    """
    out: dict[str, Any] = {}
    written: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--param {item!r}: expected KEY=VALUE or POLICY.KEY=VALUE")
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError:
            parsed = value
        except ValueError:  # a whole number past Python's int digit limit (4,300 digits)
            raise ValueError(f"--param {key}=<{len(value)} characters>: a whole number of more digits "
                             f"than Python reads (at most {sys.get_int_max_str_digits():,})") from None
        if key in out and value != written[key] and not _same_value(parsed, out[key]):
            raise ValueError(f"--param {key} given twice ({key}={written[key]}, then {key}={value}); give it once")
        out[key], written[key] = parsed, value
    return out


def _same_value(a: Any, b: Any) -> bool:
    """Whether two ``--param`` values say one thing: equal numbers (``8`` and ``8.0``), else equal
    values of one type (``true`` is not ``1``)."""
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (a, b))
    if not numbers:
        return type(a) is type(b) and a == b
    return a == b


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
        # identity, not ==: a default of 0 (``0 == False``) is shown; the word, not "defaults"
        if action.default is None or action.default is False or action.default == [] \
                or re.search(r"\bdefault\b", text):
            return text
        return super()._get_help_string(action)


RUN_OUT_HELP = "folder for requests-POLICY.parquet, steps-POLICY.parquet, summary.json, run.json"


def add_common(p: argparse.ArgumentParser, out_help: str = RUN_OUT_HELP, goodput: bool = True) -> None:
    """Options shared by every simulating command (``out_help``: what its ``--out`` holds;
    ``goodput`` False: a command that measures no goodput, whose ``--slo`` is refused with its
    reason, and not listed in its ``--help``)."""
    from fairsim.traces.formats import FORMATS

    p.add_argument("--trace", help="trace file or folder, any format of --trace-format "
                                   "(default: the embedded RAG input)")
    p.add_argument("--trace-format", default="auto", choices=("auto", *FORMATS),
                   help="trace format; auto detects it from the content (gzip by its magic bytes)")
    p.add_argument("--hash-block-size", type=count_arg, default=None, metavar="TOKENS",
                   help="tokens per hash id, for Mooncake-like files whose block is given out of band "
                        "(default: what the format or file records; Mooncake 512)")
    p.add_argument("--skip-bad", action="store_true", help="skip bad trace records, counting them")
    p.add_argument("--trace-part", type=int, default=None, metavar="N",
                   help="RAGPulse: read part N (1-based) of a trace file whose time axis restarts (a week "
                        "each); such a file is refused without it, never overlaid")
    p.add_argument("--profile", type=name_arg, default=DEFAULT_PROFILE,
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
    p.add_argument("--max-model-len", type=int, default=None, metavar="TOKENS",
                   help="vLLM max_model_len: a prompt of TOKENS or more is refused (or dropped with "
                        "--skip-long); the KV cache must hold one such request, as vLLM checks at "
                        "start-up (default: the profile's max_model_len)")
    p.add_argument("--skip-long", action="store_true",
                   help="drop and count requests whose prompt does not fit max_model_len (--max-model-len "
                        "or the profile's)")
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
                   help=("colocated and disaggregated: goodput = requests meeting these TTFT/TPOT SLOs "
                         "(seconds)") if goodput else argparse.SUPPRESS)
    p.add_argument("--window-start", type=float, default=0.0,
                   help="window start, seconds of trace time (before --time-scale)")
    p.add_argument("--window-end", type=float, default=None,
                   help="window end, seconds of trace time (before --time-scale)")
    p.add_argument("--max-requests", type=count_arg, default=None, help="keep the first N requests")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the generated default input when no --trace is given (0 = the shipped "
                        "file), of the session starts placed by --session-rate and of a router that samples "
                        "(dynamo-kv with temperature > 0)")
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


def check_shaping_options(args: argparse.Namespace) -> None:
    """The bounds of the options that load and shape a trace, checked without reading it, so a
    command that does long work first (``bench --tile``) refuses a bad option at once.

    Raises:
        ValueError: A bad ``--seed``, ``--hash-block-size``, ``--window-start``/``--window-end``/
            ``--max-requests``, ``--time-scale``, ``--think-scale``, ``--session-rate`` or
            ``--max-model-len``, naming the option.
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
    check_max_model_len(getattr(args, "max_model_len", None))


LONG_CONTEXT_PROFILE, LONG_CONTEXT_TOKENS = "h200-qwen2.5-7b-1m-vllm-prior", 1_010_000
"""The shipped long-context prior and its max_model_len (``fairsim/profiles/build_long_context_prior.py``)."""

MAX_MODEL_LEN_LIMIT = 2**31 - 1
MIN_MODEL_LEN = 2  # a prompt must be shorter than max_model_len and leave one token to generate
"""Largest ``--max-model-len`` accepted, tokens: vLLM keeps token positions in int32."""


def check_max_model_len(tokens: int | None) -> None:
    """Refuse a ``--max-model-len`` below 2 tokens (a prompt must be shorter than it and leave one
    token to generate; ``Profile`` has the same bound) or above ``MAX_MODEL_LEN_LIMIT``.

    Raises:
        ValueError: Naming the option and the bounds.
    """
    if tokens is not None and not MIN_MODEL_LEN <= tokens <= MAX_MODEL_LEN_LIMIT:
        raise ValueError(f"--max-model-len {tokens}: need an integer number of tokens from {MIN_MODEL_LEN} to "
                         f"{MAX_MODEL_LEN_LIMIT:,}")


def warn(args: argparse.Namespace, message: str) -> None:
    """Print ``fairsim: warning: MESSAGE`` on stderr and keep it for ``run.json``'s ``warnings``
    (``args.run_warnings``, beside the trace reader's)."""
    print(f"fairsim: warning: {message}", file=sys.stderr)
    if getattr(args, "run_warnings", None) is None:
        args.run_warnings = []
    args.run_warnings.append(message)


def model_len_limit(args: argparse.Namespace, profile: Profile) -> tuple[int | None, str]:
    """``(max_model_len, how to name it)``: ``--max-model-len`` when given (a warning when above the
    profile's, the model's documented context), else the profile's (None: no limit known)."""
    given = getattr(args, "max_model_len", None)
    if given is None:
        return profile.max_model_len, f"max_model_len of profile {profile.name}"
    if profile.max_model_len is not None and given > profile.max_model_len:
        hint = (f"; a long-context profile: {LONG_CONTEXT_PROFILE} ({LONG_CONTEXT_TOKENS:,} tokens)"
                if profile.max_model_len < LONG_CONTEXT_TOKENS else "")
        warn(args, f"--max-model-len {given:,} is above the max_model_len of profile {profile.name} "
             f"({profile.max_model_len:,} tokens; for a shipped profile, the model's documented context): "
             f"vLLM refuses a length past the model's context unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1, and "
             f"the model's output past it is not guaranteed{hint}")
    return given, f"--max-model-len {given:,}"


def check_kv_holds_max_model_len(args: argparse.Namespace, block_size: int, kv_blocks: int) -> None:
    """Refuse a ``--max-model-len`` that one request cannot fill in the KV cache, as vLLM refuses
    to start (``vllm/v1/core/kv_cache_utils.py``, ``check_enough_kv_cache_memory``: the cache must
    hold ``cdiv(max_model_len, block_size)`` blocks, ``FullAttentionSpec.max_memory_usage_bytes``).

    Raises:
        ValueError: Naming ``--max-model-len``, the capacity and the largest length that fits.
    """
    tokens = getattr(args, "max_model_len", None)
    if tokens is None:
        return
    need = -(-tokens // block_size)
    if need > kv_blocks:
        fits = kv_blocks * block_size
        shorter = f"--max-model-len {fits:,} or less, or " if fits >= MIN_MODEL_LEN else ""
        s = lambda n: "" if n == 1 else "s"  # noqa: E731
        raise ValueError(
            f"--max-model-len {tokens:,}: one request of that length needs {need:,} KV block{s(need)} of "
            f"{block_size} token{s(block_size)}, but the KV cache holds {kv_blocks:,} ({fits:,} token{s(fits)}); "
            f"vLLM refuses to start so. Use {shorter}a larger cache (--kv-tokens, --kv-blocks, or a profile "
            f"with more KV memory)")


def read_trace(args: argparse.Namespace) -> Trace:
    """The trace the options name, unshaped: ``--trace``'s file (``--trace-format``,
    ``--skip-bad``, ``--hash-block-size``, ``--trace-part``), the generated RAG input of ``--seed`` N (N > 0)
    without ``--trace``, else the embedded default input.

    Raises:
        ValueError: A bad trace (``fairsim.traces``: file, line and field named).
    """
    if args.trace is None and getattr(args, "trace_part", None) is not None:
        raise ValueError(f"--trace-part {args.trace_part}: needs --trace (a RAGPulse file of several weeks)")
    if args.trace is None and args.seed != 0:
        from fairsim.traces.rag import RagSpec, generate_rag

        return generate_rag(RagSpec(seed=args.seed))
    return load_trace(args.trace, args.trace_format, skip_bad=args.skip_bad, hash_block_size=args.hash_block_size,
                      part=args.trace_part)


def parse_router_params(items: Sequence[str]) -> dict[str, Any]:
    """``--router-param KEY=VALUE`` items as ``parse_params`` reads them (a router's keys are not
    scoped by policy).

    Raises:
        ValueError: An item without ``=``, or a key given twice with different values, named as
            ``--router-param``.
    """
    try:
        return parse_params(items)
    except ValueError as exc:
        raise ValueError(str(exc).replace("--param", "--router-param").replace(" or POLICY.KEY=VALUE", "")) from None


def router_samples(args: argparse.Namespace) -> bool:
    """Whether ``--router`` (with its ``--router-param``) samples, so that ``--seed`` seeds it.

    False without ``--router`` or with parameters the router refuses: ``fleet_spec`` and
    ``disagg_spec`` report those before any trace is read."""
    from fairsim.routers import make_router

    router = getattr(args, "router", None)
    if router is None:
        return False
    try:
        return make_router(router, 1, parse_router_params(getattr(args, "router_param", [])), kv_blocks=1).samples
    except ValueError:
        return False


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
    if args.trace is not None and args.seed != 0 and args.session_rate is None and not router_samples(args):
        raise ValueError(f"--seed {args.seed}: seeds the generated default input, the session starts of "
                         f"--session-rate and a router that samples (--router dynamo-kv --router-param "
                         f"temperature=T, T > 0); none of them is used with this --trace")
    kept = window(requests, args.window_start, args.window_end, args.max_requests)
    if not kept:
        raise ValueError(nothing_in_window(requests, args.window_start, args.window_end))
    limit, limit_name = model_len_limit(args, profile)
    kept, dropped = drop_too_long(kept, limit, trace.source, getattr(args, "skip_long", False),
                                  limit_name, trace.locations, prompt_field(trace.format))
    args.skipped_long = len(dropped)
    if dropped:
        print(f"fairsim: --skip-long dropped {plural(len(dropped), 'request')} with prompts of {limit:,} tokens or "
              f"more ({limit_name}); first: {dropped[0].request_id!r}", file=sys.stderr)
        if not kept:
            raise ValueError(f"--skip-long: every request kept has a prompt of {limit:,} tokens or more")
    if getattr(args, "mode", None) == "colocated":
        from fairsim.traces.limits import cap_outputs

        kept, capped = cap_outputs(kept, limit)
        if capped:
            given = "the profile's max_model_len" if getattr(args, "max_model_len", None) is None else "--max-model-len"
            n = len(capped)
            warn(args, f"{plural(n, 'request')} ask{'s' if n == 1 else ''} for more output than {given} "
                 f"({limit:,} tokens) leaves after the prompt: decoded to prompt + output = "
                 f"{limit:,} tokens, as vLLM finishes them (length-capped); first: {capped[0].request_id!r}")
    if args.replay == "closed" and not any(r.after is not None for r in kept):
        if any(r.after is not None for r in requests):  # linked turns, none of them kept
            windowed = bool(args.window_start or args.window_end is not None or args.max_requests is not None)
            cut = " and ".join(([] if args.skipped_long and not windowed
                                else ["--window-start/--window-end/--max-requests"])
                               + (["--skip-long"] if args.skipped_long else []))
            warn(args, f"{'--replay closed' if getattr(args, 'replay_given', True) else 'closed-loop replay'}: "
                 f"no request kept follows another (the turns that follow one were cut by {cut}), so "
                 f"every request is sent at its own timestamp, as in open loop")
        else:
            warn(args, "--replay closed: no request of this trace follows another, so every request "
                 "is sent at its own timestamp, as in open loop")
    elif args.replay == "open" and args.think_scale != 1:
        warn(args, f"--think-scale {args.think_scale:g} has no effect in open loop (requests "
             f"arrive at their timestamps); it scales the think times of --replay closed")
    if args.replay == "closed":
        kept, detached = detach_cut(kept, requests)
        if detached:
            sent = "is sent at its own arrival time" if detached == 1 else "are sent at their own arrival times"
            print(f"fairsim: {plural(detached, 'turn')} whose predecessor is outside the window (or dropped) "
                  f"{sent}", file=sys.stderr)
    target = getattr(args, "target_load", None)
    if target is not None:
        args.time_scale = target_time_scale(args, kept, profile)
    elif args.replay == "closed" and args.time_scale != 1:
        warn_scale_moves_nothing(args, kept)
    requests = scale_time(kept, args.time_scale)
    check_scaled_arrivals(args, trace, kept, requests)
    trace = add_mapping_warning(trace, requests, args.block_size)
    shaped = session_rate_warning(args, trace)
    if shaped is not None:  # said with the reader's warnings, once every check passed
        trace = record_replace(trace, warnings=(*trace.warnings, shaped))
    if args.replay == "open" and trace.warnings:  # (no think time is used in open loop)
        from fairsim.traces.trace import ClosedLoopWarning

        trace = record_replace(trace, warnings=tuple(w for w in trace.warnings
                                                     if not isinstance(w, ClosedLoopWarning)))
    for warning in trace.warnings:
        print(f"fairsim: warning: {warning}", file=sys.stderr)
    return trace, requests


def check_scaled_arrivals(args: argparse.Namespace, trace: Trace, kept: Sequence[Request],
                          requests: Sequence[Request]) -> None:
    """Refuse arrival times that ``args.time_scale`` (or ``--target-load``'s scale, or
    ``--session-rate``'s starts) make unusable: ``requests`` are ``kept`` (trace time, sorted)
    scaled. In closed loop the turns' earliest releases are checked too. ``load_requests`` calls
    it on the run's requests; ``load_in_trace_time`` (accept, analyze, tune: arrivals scaled
    after their windows are cut) on the whole trace at the scale it resolved.

    Raises:
        ValueError: A last arrival (or release) beyond ``MAX_ARRIVAL_S``, or a span of arrivals
            squeezed under ``MIN_SPAN_S``, naming the option (or record) that set them.
    """
    if args.replay == "closed":  # before the last-arrival check, to name the record and field
        from fairsim.sim.release import check_release_times

        last_start = max((r.arrival_time for r in requests if r.after is None), default=0.0)
        placed = getattr(args, "target_load", None) is not None or args.time_scale != 1 or args.session_rate is not None
        starts = (_time_origin(args, trace, kept[-1], "a larger --target-load", "a smaller --time-scale",
                               "a larger --session-rate", "") if placed else None)
        if last_start <= MAX_ARRIVAL_S:
            check_release_times(requests, args.think_scale, MAX_ARRIVAL_S, trace.source, trace.locations,
                                starts)
        elif args.session_rate is not None:  # the starts it drew, named before the turns' delays
            where, fix = starts
            raise ValueError(f"{where}: the last session starts at {last_start:.6g} s, beyond "
                             f"{MAX_ARRIVAL_S:.0e} s, where float64 time cannot resolve 1 us steps; use {fix}")
        # (else a session starts past the limit by itself: the last-arrival check below names what
        # placed it, --time-scale, --target-load or the record, not a later turn's think time)
    last = requests[-1].arrival_time if requests else 0.0
    if not last <= MAX_ARRIVAL_S:
        first = kept[0].arrival_time
        own = ("a shorter window (--window-end)" if not first > 0 or not kept[-1].arrival_time - first <= MAX_ARRIVAL_S
               # (epoch timestamps: a window's start is its time zero)
               else f"--window-start {first:.17g}, which counts arrival times from the first one")
        if kept[-1].arrival_time > MAX_ARRIVAL_S and args.session_rate is None:
            # The trace's own times are past the limit: no option that scales them is to blame.
            where, fix, last = _record_origin(trace, kept[-1]), own, kept[-1].arrival_time
        else:
            where, fix = _time_origin(args, trace, kept[-1], "a larger --target-load", "a smaller --time-scale",
                                      "a larger --session-rate", own)
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


def load_in_trace_time(args: argparse.Namespace, profile: Profile) -> tuple[Trace, list[Request], float]:
    """``load_requests`` with the arrivals left in trace time, and the time scale the options ask
    for: ``--time-scale``, or the one ``--target-load`` resolves to on the requests kept (said on
    stderr as ``fairsim run`` says it). For ``accept`` and ``analyze``, which cut windows and bins
    in trace time and scale the arrivals after.

    Raises:
        ValueError: A ``--time-scale`` that is not a finite factor > 0, or as ``load_requests``.
    """
    scale, target = args.time_scale, getattr(args, "target_load", None)
    if not (scale > 0 and math.isfinite(scale)):
        raise ValueError(f"--time-scale {scale}: need a finite factor > 0")
    args.time_scale, args.target_load = 1.0, None
    try:
        trace, requests = load_requests(args, profile)
    finally:
        args.time_scale, args.target_load = scale, target
    if target is not None:
        scale = args.time_scale = target_time_scale(args, requests, profile)
    elif args.replay == "closed" and scale != 1:
        warn_scale_moves_nothing(args, requests)
    if scale != 1:  # the windows and the FCFS simulation run at this scale: refused as fairsim run refuses it
        check_scaled_arrivals(args, trace, requests, scale_time(requests, scale))
    return trace, requests, scale


def target_time_scale(args: argparse.Namespace, requests: Sequence[Request], profile: Profile) -> float:
    """The time scale that gives ``--target-load`` on ``requests`` (trace time), said on stderr:
    the mean offered load in open loop (``fairsim.traces.offered``), the bound of the load offered
    in closed loop (``fairsim.traces.closedload``: a time scale moves only the session starts).

    Raises:
        ValueError: A bad target, or one no time scale reaches (naming the option that can).
    """
    target, colocated = args.target_load, getattr(args, "mode", None) == "colocated"
    if args.replay == "closed":
        from fairsim.traces.closedload import closed_loop_time_scale

        scale = _reachable(target, closed_loop_time_scale(requests, profile, args.budget, target, args.think_scale,
                                                          colocated))
        print(f"fairsim: --target-load {target:g}: time scale {scale:.6g} (closed loop: it scales the session "
              f"starts so that the load offered is {target:g} if every turn finished the instant it was sent; "
              f"the load delivered is lower when turns wait; run and compare print it after each run)", file=sys.stderr)
        return scale
    from fairsim.traces.offered import time_scale_for_load

    scale = _reachable(target, time_scale_for_load(requests, profile, args.budget, target, colocated=colocated))
    print(f"fairsim: --target-load {target:g}: time scale {scale:.6g}", file=sys.stderr)
    return scale


def _reachable(target: float, scale: float) -> float:
    """``scale``, or ``ValueError`` naming ``--target-load`` where the time scale it needs left the
    float range (a target of 5e-324 needs an infinite one; it was then refused as --time-scale inf)."""
    if not 0 < scale < math.inf:
        raise ValueError(f"--target-load {target:g}: the time scale it needs is {scale:g}, outside the float range; "
                         f"give a larger --target-load")
    return scale


def warn_scale_moves_nothing(args: argparse.Namespace, requests: Sequence[Request]) -> None:
    """Closed loop: warn that ``--time-scale`` changes nothing when every first turn of
    ``requests`` starts at one instant (a time scale moves only the session starts)."""
    ids = {r.request_id for r in requests}
    starts = {r.arrival_time for r in requests if r.after is None or r.after not in ids}
    if len(starts) == 1:
        warn(args, f"--time-scale {args.time_scale:g} changes nothing here: in closed loop a turn "
             f"is sent when the turn it follows finished plus its think time, and a time scale moves only "
             f"the session starts, which all fall at one instant; use --think-scale (think/tool times), "
             f"--session-rate (session starts) or --replay open")


def _time_origin(args: argparse.Namespace, trace: Trace, request: Request, *fixes: str) -> tuple[str, str]:
    """What set the arrival times an error is about, and the matching remedy of ``fixes``
    (for ``--target-load``, ``--time-scale``, ``--session-rate``, the trace's own times): the
    option that scaled or placed them, else the record of ``request`` (file and line)."""
    target = getattr(args, "target_load", None)
    if target is not None:
        return f"--target-load {target:g} (time scale {args.time_scale:.6g})", fixes[0]
    if args.time_scale != 1:
        return f"--time-scale {args.time_scale}", fixes[1]
    if getattr(args, "session_rate", None) is not None:
        return f"--session-rate {args.session_rate:g} (the session starts it draws)", fixes[2]
    return _record_origin(trace, request), fixes[3]


def _record_origin(trace: Trace, request: Request) -> str:
    """``FILE:LINE: arrival time of request 'ID'``: the record that set ``request``'s arrival."""
    from fairsim.errors import record_where
    from fairsim.traces.limits import LINE_LABEL

    line = trace.locations.get(request.request_id, request.labels.get(LINE_LABEL))
    return f"{record_where(trace.source, line)}: arrival time of request {request.request_id!r}"


def add_mapping_warning(trace: Trace, requests: list[Request], block_size: int | None) -> Trace:
    """``trace`` with the warning of ``fairsim.sim.keys.mapping_loss`` added when
    ``--block-size`` and the hash block neither divide the other."""
    from fairsim.sim.keys import mapping_loss

    loss = mapping_loss(requests, block_size) if block_size else None
    return record_replace(trace, warnings=trace.warnings + (loss,)) if loss else trace


def shape_sessions(args: argparse.Namespace, trace: Trace) -> list[Request]:
    """Resolve ``--replay``/``--session-rate`` for ``trace`` (stored back on ``args``) and place
    session starts where asked or needed; return the requests sorted by arrival.

    Raises:
        ValueError: A bad ``--session-rate`` (``--think-scale`` is checked by ``check_shaping_options``).
        SessionError: Closed loop: an ``after`` naming an unknown request, or a cycle.
    """
    from fairsim.sim.arrivals import check_sessions, resolve_replay
    from fairsim.traces.sessions import DEFAULT_SESSION_RATE, place_sessions

    if not hasattr(args, "replay_given"):  # (a second load of the same args, bench's, keeps the first answer)
        args.replay_given = args.replay is not None
    args.replay = resolve_replay(trace.requests, args.replay)
    if args.replay == "closed":
        check_sessions(trace.requests, trace.source, trace.locations)  # named error before any long work
    requests = sorted(trace.requests, key=attrgetter("arrival_time", "request_id"))  # no Python frame per request
    # Formats without absolute time (Claude Code sessions) give offsets from the session start.
    if not getattr(trace, "absolute_time", True) and args.session_rate is None:
        args.session_rate = DEFAULT_SESSION_RATE
        args.session_rate_default = True  # (session_rate_warning says the starts are drawn)
    if args.session_rate is not None:
        requests = place_sessions(requests, args.session_rate, args.seed)
    return requests


def session_rate_warning(args: argparse.Namespace, trace: Trace) -> str | None:
    """What ``--session-rate`` does to a trace with timestamps whose requests follow none (each
    is a session of one turn, so every arrival is drawn anew), or where the trace has no
    absolute times and the default rate placed its sessions; else None."""
    if getattr(args, "session_rate_default", False):
        return (f"{trace.source}: the trace records no absolute arrival times (a Mooncake file with no "
                f"'timestamp' in any record, or sessions timed from their own start): sessions start as "
                f"a Poisson process of {args.session_rate:g}/s (the default --session-rate), seed "
                f"{args.seed}, drawn, not read from the trace")
    if args.session_rate is None or not getattr(trace, "absolute_time", True):
        return None
    if any(r.after is not None for r in trace.requests):
        return None
    return (f"--session-rate {args.session_rate:g}: no request of this trace follows another, so each is a "
            f"session of one turn, and every arrival is drawn anew (a Poisson process of "
            f"{args.session_rate:g}/s), not the trace's timestamps")


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
        ValueError: A ``--max-model-len`` whose one request the cache cannot hold
            (``check_kv_holds_max_model_len``).
    """
    from fairsim.errors import CapacityError
    from fairsim.sim.capacity import resolve_capacity

    try:
        block_size, kv_blocks = resolve_capacity(requests, config)
    except CapacityError as exc:
        raise CapacityError(_option_names(str(exc), args)) from None
    check_kv_holds_max_model_len(args, block_size, kv_blocks)
    return block_size, kv_blocks


def resolve_policies(spec: str, include_generic: bool = False) -> list[str]:
    """``"fcfs,lpm"`` -> names; ``"all"`` -> every registered policy (``include_generic``: with
    the generic ``klpm``, which ``compare`` leaves out as ``klpm4``'s twin and ``tune`` searches,
    its ``k`` being searchable).

    Raises:
        ValueError: No name, an empty one (``fcfs,``), or a name given twice (``--policies``
            names the option).
    """
    names = policy_names(include_generic=include_generic) if spec == "all" else [s.strip() for s in spec.split(",")]
    if not any(names):
        raise ValueError(f"--policies {spec!r}: no policies given; name them separated by commas, e.g. "
                         f"fcfs,lpm, or all")
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


def check_policies(names: Sequence[str], profile: Profile, params: dict[str, Any],
                   params_of: Callable[[str, dict[str, Any]], dict[str, Any]] = params_for,
                   from_file: tuple[str, str] | None = None) -> dict[str, dict[str, Any]]:
    """Fail fast, before any long run, on a bad policy name or parameter: build each policy of
    ``names`` once with ``params_of(name, params)`` (default: its unscoped and its own
    ``POLICY.KEY`` parameters). ``from_file``: ``(policy, path)`` of a ``--policy-config``
    whose parameters are among them; that policy's refusal names the file.

    Returns:
        Policy name -> the parameters it is built with.

    Raises:
        ValueError: An unknown policy, a parameter it rejects, or a ``POLICY.KEY`` parameter
            scoped to a policy that is not being run.
    """
    for key in params:
        scope = param_scope(key)
        if scope is not None and scope not in names:
            raise ValueError(f"--param {key}: policy {scope!r} is not among those run ({', '.join(names)})")
    own = {name: params_of(name, params) for name in names}
    for name in names:
        try:
            make_policy(name, profile, **own[name])
        except ValueError as exc:  # a value the policy refuses: name the option it came from
            message = str(exc)
            if from_file is not None and from_file[0] == name:
                raise ValueError(f"--policy-config {from_file[1]}: {message}") from None
            if own[name] and "--param" not in message and not message.startswith("policy "):
                given = " ".join(f"{k}={param_text(v)}" for k, v in own[name].items())
                raise ValueError(f"--param ({given}) of policy {name!r}: {message}") from None
            loose = _loose_param(name, names, own[name], params, message)
            if loose is not None:  # an unscoped --param meant for another of the policies run
                k, other = loose
                raise ValueError(f"{message}; --param {k}={param_text(params[k])} goes to every policy "
                                 f"run: give it to one as --param {other}.{k}={param_text(params[k])}") from None
            raise
    return own


def _loose_param(name: str, names: Sequence[str], given: dict[str, Any], params: dict[str, Any],
                 message: str) -> tuple[str, str] | None:
    """``(key, policy)``: an unscoped ``--param`` key that policy ``name`` refused as unknown (its
    "bad parameters" message) and that ``policy``, another of those run (``names``), takes: the
    one it was meant for. None if there is none."""
    from fairsim.policies.registry import accepted_params

    if not message.startswith(f"policy {name!r}: bad parameters"):
        return None
    accepted = accepted_params(name)
    for k in given:
        if k in params and param_scope(k) is None and k not in accepted:
            for other in names:
                if other != name and k in accepted_params(other):
                    return k, other
    return None


def policy_params(name: str, params: dict[str, Any], added: str | None = None) -> dict[str, Any]:
    """``params_for``, except for ``added`` (compare's baseline run on top of ``--policies``):
    only its own ``NAME.KEY`` parameters, as the unscoped ones were given for the policies named."""
    return scoped_params(name, params) if name == added else params_for(name, params)


def pre_run_load(args: argparse.Namespace, requests: Sequence[Request], profile: Profile) -> tuple[Any, str]:
    """``(OfferedLoad, what it is)`` of the shaped ``requests`` before a run: the offered load in
    open loop; in closed loop its upper bound (``fairsim.traces.closedload``: the load depends on
    when turns finish, measured after the run by ``delivered_of``)."""
    from fairsim.traces.offered import offered_load

    colocated = getattr(args, "mode", None) == "colocated"
    if args.replay == "closed":
        from fairsim.traces.closedload import BOUND_WHAT, closed_loop_bound

        return (closed_loop_bound(requests, profile, args.budget, args.load_window, args.think_scale, colocated),
                BOUND_WHAT)
    return offered_load(requests, profile, args.budget, args.load_window, colocated), "offered load"


def delivered_of(args: argparse.Namespace, requests: Sequence[Request], profile: Profile, result: SimResult) -> Any:
    """The ``OfferedLoad`` a closed-loop run delivered: ``requests`` at the send times it recorded."""
    from fairsim.traces.closedload import delivered_load

    cols = result.columns("requests")
    sent = dict(zip(cols.as_list("request_id"), cols.as_list("released_s")))
    return delivered_load(requests, sent, profile, args.budget, args.load_window,
                          getattr(args, "mode", None) == "colocated")


def delivered_figures(load: Any) -> dict[str, float | None]:
    """The summary keys of a closed-loop run's delivered load (``OfferedLoad``): mean load cold and
    after ideal reuse, busiest-window load, and the span of the send times (s)."""
    figures = load.to_dict()
    return {"delivered_load": figures["load"], "delivered_ideal_load": figures["ideal_load"],
            "delivered_peak_load": figures["peak_load"], "delivered_span_s": figures["span_s"]}


def replay_line(args: argparse.Namespace) -> str:
    """One line saying how requests are sent (after ``load_requests`` resolved the options)."""
    if args.replay == "open":
        line = "replay: open loop (requests arrive at their timestamps"
    else:
        line = (f"replay: closed loop (a turn is sent when the turn it follows finished + its "
                f"think time x{args.think_scale:g}; TTFT and queue delay from that send time")
    if args.session_rate is not None:
        line += f"; sessions start as a Poisson process of {args.session_rate:g}/s, seed {args.seed}"
    if args.replay == "closed" and args.time_scale != 1:
        line += f"; time scale {args.time_scale:.6g} applied to the session starts only"
    return line + ")"
