"""One resolved run description from the command-line options, in one order of checks.

Every simulating command (``run``, ``compare``, ``bench``, ``analyze``, ``accept``, ``replay``,
and a ``sweep``'s trace runs) turns its options (``fairsim.options.add_common``) into a
``RunDescription`` with ``describe_run`` and works from that: the shaped requests, window and
time scale, the engine config and its KV capacity, the profile, the policies and the parameters
each is built with, the output folders and the replay mode.

Order of checks (``describe_run``), cheapest first, so that of several bad options the user is
told first about the one that costs nothing to check, and nothing is read or simulated before
every option is known good:

1. options: the engine options (``--budget``, ``--max-num-seqs``, ``--block-size``, the KV
   capacity options; vLLM's rule ``max_num_seqs <= budget``), ``--slo`` (and that it needs
   ``--mode colocated``), ``--param`` syntax, the shaping options (``--seed``, ``--hash-block-size``, the
   window, ``--time-scale``, ``--think-scale``, ``--session-rate``, ``--max-model-len``) and
   ``--load-window``;
2. outputs: the policies' table files do not collide (``policy_files``), ``--out`` and
   ``--plots`` are (or can become) writable folders;
3. profile: ``--profile`` loaded, its KV capacity the default of the engine config;
4. policies: each ``POLICY.KEY`` parameter scoped to a policy run, each policy built once with
   its parameters;
5. trace: read and shaped (``fairsim.options.load_requests``: window, max_model_len, sessions,
   time scale or ``--target-load``);
6. capacity: the KV capacity in blocks resolved on the shaped requests.

A command checks its own options (those ``add_common`` does not add: ``accept --warmup``,
``bench --repeat``, ...) before it calls ``describe_run``, and merges a positional ``TRACE``
into ``--trace`` before those (``merge_trace_arg``).

Errors: ``ValueError`` (``CapacityError`` included) naming the option, or the trace's file,
line and field; ``OSError`` for an unusable output folder; ``fairsim.cli.main`` reports either
and exits 2. This module imports no command module.
"""

from __future__ import annotations

import argparse
import enum
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from fairsim.costmodel import Profile
from fairsim.options import check_policies, params_for
from fairsim.record import record, replace as record_replace
from fairsim.sim import EngineConfig
from fairsim.traces import Trace
from fairsim.types import Request


class Needs(enum.IntEnum):
    """How far ``describe_run`` resolves; each stage includes the ones before it (options,
    outputs and profile are always resolved)."""

    POLICIES = 1
    """Up to the policies: nothing read but the profile (``bench --tile`` tiles the trace itself)."""
    TRACE = 2
    """And the trace, read and shaped (a sweep sizes the engine from its own spec)."""
    CAPACITY = 3
    """And the KV capacity in blocks on the shaped requests (every command that simulates)."""


@record(frozen=True)
class RunDescription:
    """What the options of one command resolve to (``describe_run``).

    Attributes:
        profile: The cost-model profile (``--profile``).
        config: Engine settings from the options, with the profile's KV capacity (``kv_tokens``)
            where no ``--kv-tokens``/``--kv-blocks``/``--kv-fraction`` is given.
        capacity_source: Where the KV capacity comes from, in words
            (``fairsim.sim.capacity.with_profile_capacity``).
        policies: The policies run, in order (empty for ``analyze``).
        params: ``--param`` as parsed (``fairsim.options.parse_params``), scoped keys as written.
        policy_params: Policy name -> the parameters it is built with.
        slo: ``--slo`` as parsed (seconds; empty without it).
        out, plots: The output folders (checked writable), or None.
        format: ``--format`` (``table`` or ``json``).
        window_start_s, window_end_s, max_requests: The window kept, seconds of trace time
            before the time scale, and the most requests kept.
        trace: The trace as read (its warnings included), or None below ``Needs.TRACE``.
        requests: The shaped requests sorted by arrival, or None below ``Needs.TRACE``; arrival
            times in seconds after ``time_scale`` when ``scaled``, else in trace seconds
            (``accept`` and ``analyze`` cut windows in trace time and scale after).
        scaled: Whether ``requests`` are already multiplied by ``time_scale``.
        time_scale: The factor of the arrival times: ``--time-scale``, or the one
            ``--target-load`` resolved to on the requests kept when ``target_load`` is set.
        target_load: ``--target-load`` as given, or None.
        replay: ``"open"`` or ``"closed"`` once the trace is read (the default resolved from its
            sessions), else ``--replay`` as given.
        think_scale: ``--think-scale``.
        session_rate: Session starts per second (``--session-rate``, or the default placed for a
            trace without absolute time), or None.
        block_size, kv_blocks: The KV block size (tokens) and capacity (blocks) the run uses, or
            None below ``Needs.CAPACITY``.
    """

    profile: Profile
    config: EngineConfig
    capacity_source: str
    policies: tuple[str, ...]
    params: dict[str, Any]
    policy_params: dict[str, dict[str, Any]]
    slo: dict[str, float]
    out: Path | None
    plots: Path | None
    format: str
    window_start_s: float
    window_end_s: float | None
    max_requests: int | None
    trace: Trace | None = None
    requests: list[Request] | None = None
    scaled: bool = True
    time_scale: float = 1.0
    target_load: float | None = None
    replay: str | None = None
    think_scale: float = 1.0
    session_rate: float | None = None
    block_size: int | None = None
    kv_blocks: int | None = None


def merge_trace_arg(args: argparse.Namespace) -> None:
    """The positional ``TRACE`` (``analyze``, ``accept``) and ``--trace`` name the same thing;
    refuse two different ones.

    Raises:
        ValueError: Two different traces given.
    """
    pos = getattr(args, "trace_path", None)
    if pos is not None:
        if args.trace is not None and args.trace != pos:
            raise ValueError(f"two traces given: {pos} and --trace {args.trace}")
        args.trace = pos


def describe_run(args: argparse.Namespace, *, needs: Needs = Needs.CAPACITY, policies: Sequence[str] = (),
                 params_of: Callable[[str, dict[str, Any]], dict[str, Any]] = params_for,
                 policy_files: bool = False, trace_time: bool = False, live_block_size: int | None = None,
                 fit_longest_prompt: bool = False, profile: Profile | None = None) -> RunDescription:
    """Check and resolve the options of ``args`` (``add_common``'s) in the order of the module
    docstring, up to ``needs``.

    ``args`` is updated as ``fairsim.options.load_requests`` updates it (``replay``,
    ``session_rate``, ``time_scale``, ``skipped_long``), for the code that reads the options
    after (``run.json``, ``pre_run_load``).

    Args:
        args: The parsed options.
        needs: How far to resolve (``Needs``).
        policies: The policies the command runs, in order.
        params_of: ``(name, params) -> the parameters policy name is built with``; default
            ``fairsim.options.params_for`` (the unscoped ones and its own ``POLICY.KEY`` ones).
        policy_files: The command writes one table per policy into ``--out``: refuse two
            policies whose file names would coincide (``fairsim.io.check_file_stems``).
        trace_time: Leave the arrivals in trace time (``load_in_trace_time``; the description's
            ``time_scale`` is the factor to apply after).
        live_block_size: The block size of a live vLLM engine when ``--block-size`` is not
            given (the trace's hash block is the simulator's default, not vLLM's).
        fit_longest_prompt: Live replay: when the default KV fraction gives less than the
            longest prompt (no capacity given), size the cache to the longest prompt, said on
            stderr, rather than refuse.
        profile: The profile, already loaded (a sweep's, from its spec), instead of ``--profile``.

    Raises:
        ValueError: A bad option, policy, parameter or trace, or a cache too small
            (``CapacityError``), naming the option or the file, line and field.
        OSError: ``--out`` or ``--plots`` cannot be written.
    """
    params, slo, config = _check_options(args, live_block_size)  # 1. options
    _check_outputs(args, policies, policy_files)  # 2. outputs
    profile, config, source = _with_profile(args, config, profile)  # 3. profile
    from_file = getattr(args, "config_policy", None)
    from_file = None if from_file is None else (from_file, str(args.policy_config))
    policy_params = check_policies(list(policies), profile, params, params_of, from_file)  # 4. policies
    desc = RunDescription(
        profile=profile, config=config, capacity_source=source, policies=tuple(policies), params=params,
        policy_params=policy_params, slo=slo, out=getattr(args, "out", None), plots=getattr(args, "plots", None),
        format=getattr(args, "format", "table"), window_start_s=args.window_start, window_end_s=args.window_end,
        max_requests=args.max_requests, target_load=getattr(args, "target_load", None),
        replay=args.replay, think_scale=args.think_scale, session_rate=args.session_rate,
        time_scale=args.time_scale)
    if needs < Needs.TRACE:
        return desc
    desc = _with_trace(args, desc, trace_time)  # 5. trace
    if needs < Needs.CAPACITY:
        return desc
    block_size, kv_blocks = _capacity(args, desc, fit_longest_prompt)  # 6. capacity
    return record_replace(desc, block_size=block_size, kv_blocks=kv_blocks)


def _check_options(args: argparse.Namespace,
                   live_block_size: int | None) -> tuple[dict[str, Any], dict[str, float], EngineConfig]:
    """Stage 1: the options alone, no file read. Returns the parsed ``--param`` and ``--slo``
    and the engine config from the options (no capacity from the profile yet)."""
    from fairsim.metrics import parse_slo
    from fairsim.options import check_shaping_options, engine_config, parse_params
    from fairsim.traces.offered import check_load_window

    config = engine_config(args)
    if live_block_size is not None and config.block_size is None:
        # vLLM's CPU backend wants a multiple of 32; the live engine's default, not the trace's.
        config = record_replace(config, block_size=live_block_size)
    slo = parse_slo(getattr(args, "slo", None))
    if slo and config.mode != "colocated":
        raise ValueError("--slo needs --mode colocated or --mode disaggregated (prefill-only runs have no TPOT)")
    params = parse_params(args.param)
    check_shaping_options(args)
    check_load_window(args.load_window)
    return params, slo, config


#: The files each command writes in ``--out`` whatever its policies (a folder of one of these
#: names is refused before any work; ``fairsim.io.check_writable_dir``).
OUT_FILES = {"run": ("summary.json", "run.json"), "compare": ("summary.json", "run.json"),
             "bench": ("bench.json",), "accept": ("accept.json",),
             "analyze": ("analysis.json", "report.md", "load.png", "spread.png", "hit_curve.png")}


def _check_outputs(args: argparse.Namespace, policies: Sequence[str], policy_files: bool) -> None:
    """Stage 2: ``--out`` and ``--plots`` created and test-written before any work."""
    from fairsim.io import check_file_stems, check_writable_dir, file_stem

    out, plots = getattr(args, "out", None), getattr(args, "plots", None)
    if out is not None:
        files = list(OUT_FILES.get(getattr(args, "command", None), ()))
        if policy_files:
            check_file_stems(list(policies))
            files += [f"{kind}-{file_stem(p)}.parquet" for p in policies for kind in ("requests", "steps")]
            warn_earlier_tables(args, Path(out), set(files))
        check_writable_dir(out, files=files)
    if plots is not None:
        check_writable_dir(plots, "--plots")


def warn_earlier_tables(args: argparse.Namespace, out: Path, written: set[str],
                        about: str = "summary.json and run.json") -> None:
    """Warn (``run.json``'s ``warnings`` too) when ``out`` holds policy tables this run does not
    write (``written``: the names it does): an earlier run's, left beside the files named in
    ``about``, which will describe this run only (files of the same name are overwritten)."""
    from fairsim.options import warn

    if not out.is_dir():
        return
    earlier = sorted(p.name for kind in ("requests", "steps") for p in out.glob(f"{kind}-*.parquet")
                     if p.name not in written)
    if earlier:
        shown = ", ".join(earlier[:4]) + (f" and {len(earlier) - 4} more" if len(earlier) > 4 else "")
        warn(args, f"--out {out} holds {len(earlier)} table{'s' if len(earlier) != 1 else ''} this run does "
                   f"not write ({shown}), from an earlier run: {about} will describe this run only; give an "
                   f"empty folder to keep them apart")


def _with_profile(args: argparse.Namespace, config: EngineConfig,
                  profile: Profile | None) -> tuple[Profile, EngineConfig, str]:
    """Stage 3: the profile, and the config with its KV capacity where the options set none."""
    from fairsim.costmodel import load_profile
    from fairsim.sim.capacity import with_profile_capacity

    profile = profile if profile is not None else load_profile(args.profile)
    config, source = with_profile_capacity(config, profile)
    return profile, config, source


def _with_trace(args: argparse.Namespace, desc: RunDescription, trace_time: bool) -> RunDescription:
    """Stage 5: the trace read and shaped as the options say."""
    from fairsim.options import load_in_trace_time, load_requests

    if trace_time:
        trace, requests, scale = load_in_trace_time(args, desc.profile)
    else:
        trace, requests = load_requests(args, desc.profile)
        scale = args.time_scale
    return record_replace(desc, trace=trace, requests=requests, scaled=not trace_time, time_scale=scale,
                               replay=args.replay, session_rate=args.session_rate)


def _capacity(args: argparse.Namespace, desc: RunDescription, fit_longest_prompt: bool) -> tuple[int, int]:
    """Stage 6: ``(block_size, kv_blocks)`` on the shaped requests (``capacity_of``)."""
    from fairsim.errors import CapacityError
    from fairsim.options import capacity_of

    config = desc.config
    try:
        return capacity_of(desc.requests, config, args)
    except CapacityError:
        if not fit_longest_prompt or config.kv_blocks is not None or config.kv_tokens is not None:
            raise
        # A short window has little reusable content; never size the cache below one prompt.
        kv_blocks = max(-(-(r.prompt_len + 1) // config.block_size) for r in desc.requests)
        print(f"replay: the KV fraction gives less than the longest prompt; using {kv_blocks} blocks",
              file=sys.stderr)
        return config.block_size, kv_blocks
