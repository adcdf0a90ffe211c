"""``fairsim run`` and ``fairsim compare``: simulate one policy, or several side by side, on the
same shaped input, and print a table or JSON; ``--out`` gets each policy's tables, ``summary.json``
and ``run.json``. ``run_one`` and ``write_tables`` also serve ``accept`` and ``sweep``.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fairsim import __version__, interrupt
from fairsim.costmodel import Profile
from fairsim.deployment_options import one_engine
from fairsim.gcpause import paused
from fairsim.errors import OutputError
from fairsim.io import atomic_write, atomic_write_text, file_stem, print_then_write, strict_json
from fairsim.options import delivered_figures, delivered_of, parse_params, policy_params, pre_run_load, replay_line
from fairsim.policies import make_policy
from fairsim.sim import EngineConfig, SimResult, simulate
from fairsim.traces import Trace
from fairsim.types import Request

if TYPE_CHECKING:  # a fleet's modules are imported only when one is asked for (start-up time)
    from fairsim.cli_fleet import FleetSpec


def run_one(name: str, requests: list[Request], profile: Profile, config: EngineConfig,
            params: dict[str, Any], show_progress: bool = True, *, replay: str | None = None,
            think_scale: float = 1.0, fleet: FleetSpec | None = None) -> SimResult:
    """Simulate ``requests`` under policy ``name`` with a progress bar after 2 s (``replay`` and
    ``think_scale``: see ``fairsim.sim.Engine``); on ``fleet`` (``--instances``/``--router``,
    ``fairsim.cli_fleet``) when one is given, a ``FleetResult`` then."""
    if fleet is not None:
        return fleet.run(name, requests, profile, config, params, replay=replay, think_scale=think_scale)
    policy = make_policy(name, profile, **params)
    # Errors name the policy as the user gave it (a team's class may call itself "fcfs").
    with progress_bar(name, len(requests), show_progress) as progress:
        return simulate(requests, policy, profile, config, progress=progress, replay=replay,
                        think_scale=think_scale, name=name)


@contextlib.contextmanager
def progress_bar(name: str, total: int, show: bool = True) -> Iterator[Callable[[int], Any] | None]:
    """``simulate``'s ``progress``: a bar of ``total`` requests labelled ``name``, drawn after 2 s,
    on stderr when it is a terminal; ``None`` (no bar) otherwise or when not ``show``."""
    if not show or not sys.stderr.isatty():  # tqdm(disable=None) would not draw either
        yield None
        return
    from tqdm import tqdm

    with tqdm(total=total, desc=name, unit="req", delay=2.0, leave=False) as bar:
        yield bar.update


def write_tables(out: Path, name: str, result: SimResult, engine: dict[str, Any] | None = None,
                 scored: Any = None, policy: str | None = None) -> None:
    """Write ``requests-NAME.parquet`` and ``steps-NAME.parquet`` atomically (``fairsim.io``);
    ``NAME`` is the policy name through ``fairsim.io.file_stem`` (``mypol:Rev`` -> ``mypol_Rev``).

    ``engine`` (profile, KV capacity, block size) is stored as JSON in the Parquet schema
    metadata under the key ``fairsim``, with ``policy`` (default ``name``; ``accept`` names its
    files ``WINDOW-POLICY`` and gives the policy alone). ``scored`` (``accept``: one bool per
    request row) adds the requests table's ``scored`` column.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    out.mkdir(parents=True, exist_ok=True)
    requests = result.requests if scored is None else result.requests.assign(scored=scored)
    for kind, frame in (("requests", requests), ("steps", result.steps)):
        table = pa.Table.from_pandas(frame, preserve_index=False)
        if engine is not None:
            meta = dict(table.schema.metadata or {})
            meta[b"fairsim"] = json.dumps({"policy": name if policy is None else policy, **engine}).encode()
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
    if "ttft_p50_ratio" in first:  # compare --baseline (fairsim/ratios.py)
        from fairsim.ratios import RATIO_COLUMNS

        cols[5:5] = RATIO_COLUMNS
    if "tpot_p50_s" in first:
        from fairsim.cli_colocated import DECODE_COLUMNS

        cols[-2:-2] = [c for c in DECODE_COLUMNS if c[0] in first]
    header = ["policy"] + [c[1] for c in cols]
    show = {True: "yes", False: "no"}

    def cell(value: Any, fmt: Any) -> str:
        # A figure that does not exist (None/NaN: e.g. TPOT when no request decoded twice) is n/a.
        if value is None or (isinstance(value, float) and value != value):
            return "n/a"
        return fmt(value) if callable(fmt) else fmt.format(value)

    body = [[name] + [show[s[key]] if key == "starved" else cell(s[key], fmt)
                      for key, _, fmt in cols] for name, s in rows.items()]
    widths = [max(len(r[i]) for r in [header] + body) for i in range(len(header))]
    lines = ["  ".join(v.rjust(w) if i else v.ljust(w) for i, (v, w) in enumerate(zip(r, widths)))
             for r in [header] + body]
    if "ratio_baseline" in first:
        lines.append(f"p50 x, p99 x, max x: TTFT over {first['ratio_baseline']}'s (--baseline)")
    return "\n".join(lines)


def cmd_simulate(args: argparse.Namespace, names: list[str]) -> int:
    """``run`` / ``compare``: simulate each policy, print a table or JSON."""
    from fairsim.description import Needs, describe_run
    from fairsim.metrics import summarize
    from fairsim.sim.capacity import describe_capacity

    # --mode disaggregated (fairsim/cli_disagg.py; it sets args.mode to colocated for shaping), else
    # --instances/--router (fairsim/cli_fleet.py); None: the single engine (neither module imported).
    disagg = fleet = None
    if not one_engine(args):
        from fairsim.cli_disagg import disagg_spec
        from fairsim.cli_fleet import fleet_spec

        disagg = disagg_spec(args)
        fleet = disagg or fleet_spec(args)
    # describe_run reads the trace: its long-lived objects, no garbage cycles; frozen until the
    # first Engine.run ends (it unfreezes; so does an error before it, below). fairsim/gcpause.py.
    with paused(freeze=True):
        added = getattr(args, "baseline_added", None)  # compare's baseline, not among --policies
        desc = describe_run(args, policies=names, policy_files=True,  # fails fast on a too-small cache
                            params_of=lambda name, params: policy_params(name, params, added),
                            needs=Needs.TRACE if disagg is not None else Needs.CAPACITY)
        profile, config, slo = desc.profile, desc.config, desc.slo
        trace, requests, block_size, kv_blocks = desc.trace, desc.requests, desc.block_size, desc.kv_blocks
        if disagg is not None:  # each side's cache: a prefill engine holds prompts, a decode engine whole requests
            block_size, kv_blocks = disagg.capacity(requests, config, args)
            disagg.link(profile)  # refused (no bytes per token, too slow) before any line is printed
        engine = {"profile": profile.name, "kv_tokens": kv_blocks * block_size, "kv_blocks": kv_blocks,
                  "block_size": block_size, "kv_capacity_source": desc.capacity_source}
        load, load_what = pre_run_load(args, requests, profile)
        if fleet is not None:
            from fairsim.cli_fleet import check_fleet_trace

            check_fleet_trace(fleet, requests, trace.source)
    rows: dict[str, dict[str, Any]] = {}
    baseline = getattr(args, "baseline", None)  # compare only (fairsim/ratios.py)
    if baseline is not None:
        from fairsim.ratios import add_ratios

    def shown(of: dict[str, dict[str, Any]] | None = None) -> dict[str, dict[str, Any]]:
        of = rows if of is None else of
        return of if baseline is None else add_ratios(of, baseline)
    # A policy whose figures are computed but whose tables could not be written (a full disk):
    # printed with the finished ones, not in summary.json or run.json (whose policies have tables).
    unwritten: dict[str, dict[str, Any]] = {}
    results: dict[str, SimResult] = {}
    delivered_loads: dict[str, dict[str, Any]] = {}  # closed loop: per policy (run.json)
    try:  # from here on: the except below unfreezes (even a print to a closed stdout)
        stream = sys.stderr if args.format == "json" else sys.stdout
        scaled = f" (time scale {desc.time_scale:.6g})" if desc.time_scale != 1 else ""
        print(f"trace {trace.label}{scaled}: {load.describe(load_what)}", file=stream)
        print(describe_capacity(profile.name, block_size, kv_blocks, desc.capacity_source), file=stream)
        print(replay_line(args), file=stream)
        if disagg is not None:
            print(disagg.describe(profile), file=stream)
        for name in names:
            result = run_one(name, requests, profile, config, desc.policy_params[name],
                             replay=desc.replay, think_scale=desc.think_scale, fleet=fleet)
            if getattr(args, "plots", None) is not None:
                results[name] = result
            # Columns, not DataFrames: pandas is imported only to write --out tables (start-up).
            summary = summarize(result.columns("requests"), result.columns("steps"))
            if result.columns("token_gaps") is not None:  # read as built: no pandas
                from fairsim.cli_colocated import colocated_summary

                summary.update(colocated_summary(result, slo))
            if args.replay == "closed":
                from fairsim.traces.closedload import delivered_what

                delivered = delivered_of(args, requests, profile, result)
                print(f"{delivered.describe(delivered_what(name))}", file=stream)
                summary.update(delivered_figures(delivered))
                delivered_loads[name] = delivered.to_dict()
            if disagg is not None:
                from fairsim.cli_disagg import disagg_summary

                summary.update(disagg_summary(result))
            elif fleet is not None:
                from fairsim.cli_fleet import fleet_summary

                summary.update(fleet_summary(result))
            summary["wall_time_s"] = result.wall_time_s
            summary["profile"] = profile.name
            summary["kv_tokens"] = result.kv_blocks * result.block_size
            summary["kv_blocks"] = result.kv_blocks
            summary["block_size"] = result.block_size
            # A Ctrl-C from here until the row is kept is recorded and raised after it, so a policy
            # whose tables are written is always among the finished ones (fairsim/interrupt.py).
            raising, interrupt.RAISE = interrupt.RAISE, False
            try:
                if args.out is not None:
                    try:
                        write_tables(args.out, name, result, engine)
                    except OutputError:
                        unwritten[name] = summary
                        raise
                rows[name] = summary  # only once its tables are written
            finally:
                interrupt.RAISE = raising
            if raising:
                interrupt.check()
    except BaseException as exc:
        gc.unfreeze()  # paused(freeze=True) above, when no Engine.run unfroze it
        # Ctrl-C or an error in a later policy: keep what finished (printed; its tables are
        # written, and summary.json and run.json list the finished policies), then report as usual.
        printed = {**rows, **unwritten}
        if printed and not isinstance(exc, BrokenPipeError):
            with contextlib.suppress(OSError):  # stdout gone too: the files and the error remain
                print_rows(shown(printed), args.format, config.mode == "colocated")
                lost = (f"; {', '.join(unwritten)}: its tables were not written (the error below), so it is "
                        "not in summary.json or run.json" if unwritten and args.out is not None else "")
                print(f"fairsim: the output above holds the {len(printed)} of {len(names)} policies that "
                      f"finished ({', '.join(printed)}){lost}", file=sys.stderr)
        if args.out is not None and rows:
            atomic_write_text(args.out / "summary.json", strict_json(shown()) + "\n")
            write_run_info(args.out, args, trace, list(rows), load, engine, load_what, delivered_loads, profile)
        raise
    def write() -> None:
        # The tables' companions before the figures: a Ctrl-C or a failure while drawing leaves
        # every result written.
        if args.out is not None:
            atomic_write_text(args.out / "summary.json", strict_json(shown()) + "\n")
            write_run_info(args.out, args, trace, names, load, engine, load_what, delivered_loads, profile)

    gone = print_then_write(lambda: print_rows(shown(), args.format, config.mode == "colocated"), write)
    if results:
        from fairsim.run_plots import write_run_plots

        write_run_plots(args.plots, results, title=trace.name, slo=slo)
        if disagg is not None:
            from fairsim.cli_disagg import write_disagg_figure

            write_disagg_figure(args.plots, results, trace.name)
        elif fleet is not None:
            from fairsim.cli_fleet import write_fleet_figure

            write_fleet_figure(args.plots, results, trace.name)
        if config.mode == "colocated" and not slo:
            print("fairsim: note: --plots drew no goodput.png: goodput needs --slo ttft=S,tpot=S",
                  file=sys.stderr)
    if gone is not None:
        raise gone  # exit 141, quietly (fairsim.cli), once the files are written
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
    if any("per_instance" in s for s in rows.values()):
        from fairsim.cli_fleet import format_instances

        print(format_instances(rows))
    if any(s.get("mode") == "disaggregated" for s in rows.values()):
        from fairsim.cli_disagg import format_disaggregated

        print(format_disaggregated(rows))
    sys.stdout.flush()


def write_run_info(out: Path, args: argparse.Namespace, trace: Trace, names: list[str], load: Any,
                   engine: dict[str, Any] | None = None, load_what: str = "offered load",
                   delivered: dict[str, dict[str, Any]] | None = None, profile: Any = None) -> None:
    """``run.json``: what produced the tables in ``out`` (input, shaping, engine, policies).

    The options as given, plus ``engine`` (the profile, KV capacity in tokens and blocks and the
    block size actually simulated), the offered-load figures before the run (``load``, described
    as ``load_what``: in closed loop an upper bound) and, in closed loop, ``delivered_load``: the
    figures of the load each policy's run delivered (policy -> ``OfferedLoad.to_dict()``). A
    fleet's run (``--instances``/``--router``) adds ``instances``, ``router`` and ``router_params``;
    a ``--mode disaggregated`` run its deployment (``DisaggSpec.run_info``: the link as used,
    the bytes per token from ``profile``, loaded from ``args.profile`` when not given).
    ``block_pool`` says which LRU block pool the engines ran on (``"compiled"`` or ``"python"``,
    ``fairsim.sim.pool_choice.block_pool_kind``; PEEK's protection runs on it too, RAGCache's PGDSF
    eviction always on the Python hooked pool). ``bound_lines`` says which bound lines the
    Fairway family's Fast lane reads (``"compiled"`` or ``"numpy"``,
    ``fairsim.policies.fast_lane.bound_lines_kind``; the same decisions either way).
    """
    from fairsim.policies.fast_lane import bound_lines_kind
    from fairsim.sim.pool_choice import block_pool_kind

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
        "max_model_len": getattr(args, "max_model_len", None),
        "engine": engine, "offered_load": load.describe(load_what), "offered_load_figures": load.to_dict(),
        "delivered_load": delivered or None,
        "replay": args.replay, "think_scale": args.think_scale,
        "session_rate_per_s": args.session_rate, "fairsim_version": __version__,
        "trace_format": trace.format, "hash_block_size": trace.hash_block_size,
        "absolute_time": trace.absolute_time,
        "warnings": [*trace.warnings, *(getattr(args, "run_warnings", None) or ())],  # the reader's, then the run's
        "skipped_records": len(trace.skipped),
        "block_pool": block_pool_kind(),  # the engines' plain pool: "compiled" or "python"
        "bound_lines": bound_lines_kind(),  # the Fast lane's: "compiled" or "numpy"
    }
    disagg = getattr(args, "disaggregated", None)  # --mode disaggregated (fairsim.cli_disagg)
    fleet = None
    if disagg is None and not one_engine(args):
        from fairsim.cli_fleet import fleet_spec

        fleet = fleet_spec(args)
    if fleet is not None:  # --instances/--router (fairsim.cli_fleet); a lone engine's run.json is as before
        info.update(instances=fleet.instances, router=fleet.router, router_params=fleet.params)
    if disagg is not None:
        from fairsim.costmodel import load_profile

        info.update(disagg.run_info(profile or load_profile(args.profile)))
    atomic_write_text(out / "run.json", json.dumps(info, indent=2) + "\n")
