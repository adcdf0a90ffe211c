"""``fairsim sweep``: plan (validate everything), lock the folder, run what is missing, summarise."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from fairsim.io import plural
from fairsim.sweep.args import EXECUTORS, add_parser  # noqa: F401 (re-exported)
from fairsim.sweep.executors import Outcome, run_local, run_ray
from fairsim.sweep.lock import SweepLock
from fairsim.sweep.plan import expand
from fairsim.sweep.runs import FAILED_DIR, atomic_text, remove_partial_files, write_failure, write_run
from fairsim.sweep.runspec import RunSpec
from fairsim.sweep.spec import SweepSpec, load_spec, parse_spec
from fairsim.sweep.summary import (parameter_columns, status_of, summarize_runs, tidy_parameters,
                                   write_summary)

def plan_table(out: Path, runs: list[RunSpec]) -> pd.DataFrame:
    """One row per run: ``run_id``, ``status`` (``done``, ``failed`` or ``to run`` in ``out``) and
    the run's parameters (``RunSpec.parameters``); what ``--dry-run`` prints."""
    label = {"ok": "done", "failed": "failed", "not run": "to run"}
    rows = [{"run_id": r.run_id, "status": label[status_of(out, r)[0]], **r.parameters()}
            for r in runs]
    return tidy_parameters(pd.DataFrame(rows))


def check_run_options(executor: str, workers: int | None, address: str | None) -> None:
    """The bounds of the options that say where runs go, checked with or without ``--dry-run``.

    Raises:
        ValueError: An unknown ``--executor``, ``--workers`` below 1, or ``--address`` without
            ``--executor ray``, naming the option.
    """
    if executor not in EXECUTORS:
        raise ValueError(f"--executor {executor!r}: use 'local' or 'ray'")
    if workers is not None and workers < 1:
        raise ValueError(f"--workers {workers}: need >= 1")
    if address is not None and executor != "ray":
        raise ValueError(f"--address {address}: only used with --executor ray")


def run_sweep(spec: dict[str, Any] | SweepSpec, out: Path, executor: str = "local",
              workers: int | None = None, address: str | None = None, progress: bool = True,
              log: Callable[[str], Any] = print, source: str = "sweep spec") -> pd.DataFrame:
    """Validate ``spec``, then run what ``out`` does not hold yet; write and return the summary.

    Every run is planned and validated before the folder is touched (``fairsim.sweep.plan``).
    The folder is locked for the whole sweep. A run that raises is recorded in
    ``OUT/failed/RUN_ID.json`` and the summary (``status = "failed"``, ``error``), and the
    other runs go on; a later sweep retries it. On Ctrl-C while runs go on the summary of the
    finished runs is written before the interruption propagates (the ``KeyboardInterrupt`` then
    has ``summary_written = True``; one landing while the summary is written has not).

    Args:
        spec: Spec dict (``load_spec``) or ``SweepSpec``.
        out: Output folder.
        executor: ``"local"`` (processes) or ``"ray"``.
        workers: Local processes (1: in this process), or CPUs of a Ray started here.
        address: Ray cluster address.
        progress: Show a progress bar.
        log: Where progress lines go.
        source: The spec's file name, for messages.

    Returns:
        The summary table (``fairsim.sweep.summary``), one row per run of the spec.

    Raises:
        SweepSpecError: An invalid spec (nothing has run).
        SweepLockedError: Another sweep is running in ``out``.
        ValueError: An unknown executor or ``workers < 1``.
        OSError: ``out`` is not writable (before any run) or a write fails (names the file).
        ImportError: ``executor="ray"`` without Ray.
    """
    check_run_options(executor, workers, address)
    if executor == "ray":
        from fairsim.deps import require

        require("ray")  # checked before planning, not after
    runs = expand(spec, source)
    raw = spec.raw if isinstance(spec, SweepSpec) else spec
    with SweepLock(out):
        from fairsim.io import check_writable_dir
        from fairsim.sweep.runs import RUNS_DIR, STEPS_DIR

        check_writable_dir(out, files=("spec.json", "summary.parquet", "summary.csv"),
                           folders=(RUNS_DIR, STEPS_DIR, FAILED_DIR))  # before the first run
        atomic_text(json.dumps(raw, indent=2, sort_keys=True, default=str) + "\n", out / "spec.json")
        remove_partial_files(out)  # writes cut short by a kill; their runs are not done
        todo = [r for r in runs if status_of(out, r)[0] != "ok"]
        log(f"sweep: {plural(len(runs), 'run')}, {len(runs) - len(todo)} already done, {len(todo)} to run "
            f"({executor})")
        computed: list[str] = []
        failed: list[str] = []
        gone: list[BrokenPipeError] = []  # stdout's reader left (`| head`) once runs had begun

        def say(line: str) -> None:
            """``log``, but a reader of stdout that left stops neither the runs nor the summary:
            the BrokenPipeError is raised once the summary is written."""
            if not gone:
                try:
                    log(line)
                except BrokenPipeError as exc:
                    gone.append(exc)

        def on_result(run: RunSpec, outcome: Outcome) -> None:
            if outcome[0] == "ok":
                write_run(out, run, outcome[1], outcome[2])
                computed.append(run.run_id)
            else:
                write_failure(out, run, outcome[1], outcome[2])
                failed.append(run.run_id)
                say(f"run {run.run_id} failed: {outcome[1]}")

        try:
            if executor == "ray" and todo:
                run_ray(todo, on_result, address, workers, progress)
            elif todo:
                run_local(todo, on_result, workers, progress)
        except KeyboardInterrupt as stop:
            write_summary(out, summarize_runs(out, runs))
            stop.summary_written = True  # (a second Ctrl-C while writing raises a new one, without it)
            raise
        if computed:
            say("computed: " + " ".join(computed))
        if failed:
            say("failed: " + " ".join(failed))
        # A Ctrl-C here (every run finished, the summary being read back and written) leaves no
        # summary of this sweep: the KeyboardInterrupt carries no ``summary_written``.
        summary = summarize_runs(out, runs)
        write_summary(out, summary)
    say(f"summary: {out / 'summary.parquet'} ({plural(len(summary), 'run')}, "
        f"{int((summary['status'] == 'failed').sum()) if len(summary) else 0} failed)")
    if gone:
        raise gone[0]  # exit 141, quietly (fairsim.cli), once every run and the summary are written
    return summary


def _show(table: pd.DataFrame, cols: list[str]) -> str:
    shown = table[cols].astype(object)
    shown = shown.where(shown.notna(), "-")
    return shown.to_string(index=False, formatters={
        c: (lambda v: v if isinstance(v, str) else f"{v:.3f}") for c in cols if c.endswith(("_s", "rate"))})


def cmd_sweep(args: Any) -> int:
    """``fairsim sweep``: 0 when every run succeeded, 1 when some failed (listed on stderr)."""
    check_run_options(args.executor, args.workers, args.address)  # --dry-run too: the same command line
    if args.executor == "ray":  # --dry-run too: it plans what this command line would run
        from fairsim.deps import require

        require("ray")
    source = str(args.spec)
    spec = parse_spec(load_spec(args.spec), source)
    out = args.out or Path(spec.out or f"results/sweep-{args.spec.stem}")
    if args.dry_run:
        table = plan_table(out, expand(spec, source))
        print(_show(table, list(table.columns)))
        print(f"{plural(len(table), 'run')}; {int((table['status'] == 'done').sum())} done in {out}")
        return 0
    try:
        summary = run_sweep(spec, out, args.executor, args.workers, args.address,
                            progress=not args.no_progress, source=source)
    except ImportError as exc:  # --executor ray without Ray installed
        print(f"fairsim: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as stop:
        # Say whether the summary was written: an interrupt that lands while it is being written
        # (after the last run, or a second Ctrl-C) leaves none for this sweep.
        written = ("summary written" if getattr(stop, "summary_written", False)
                   else "summary not written")
        print(f"fairsim: interrupted; the finished runs are kept in {out} ({written}); "
              "run the same command to resume", file=sys.stderr)
        return 130
    if len(summary):
        varying = [c for c in parameter_columns(summary)
                   if summary[c].astype(str).nunique(dropna=False) > 1 or c == "policy"]
        metrics = [c for c in ("ttft_p50_s", "ttft_p99_s", "ttft_max_s", "hit_rate") if c in summary]
        print(_show(summary, ["run_id", *varying, "status", *metrics]))
    failed = summary[summary["status"] == "failed"] if len(summary) else summary
    sys.stdout.flush()
    if len(failed):
        lines = "\n".join(f"  {r.run_id}: {r.error}" for r in failed.itertuples())
        print(f"fairsim: {len(failed)} of {len(summary)} runs failed (details in "
              f"{out / FAILED_DIR}/); run the same command again to retry them:\n{lines}",
              file=sys.stderr)
        return 1
    return 0
