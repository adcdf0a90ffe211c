"""Execute one run and keep its outcome on disk: result tables, or the error that stopped it.

Layout of a sweep folder ``OUT``:

- ``OUT/runs/RUN_ID.parquet``: the run's request table, written last: its presence means done.
- ``OUT/steps/RUN_ID.parquet``: the run's step table (written first).
- ``OUT/failed/RUN_ID.json``: ``{"run_id", "error", "traceback", "run"}`` of a run that raised;
  removed when the run later succeeds (a resumed sweep retries failed runs).

Every file is written to a temporary name in the same folder and renamed (``fairsim.io.atomic_write``,
atomic on POSIX), so a kill never leaves a half-written file under a final name.
"""

from __future__ import annotations

import json
import traceback
from pathlib import Path
from typing import Any

import pandas as pd

from fairsim.io import atomic_to_parquet, atomic_write_text
from fairsim.sweep.runspec import RunSpec, code_identity, file_sha256, trace_sha256

RUNS_DIR = "runs"
STEPS_DIR = "steps"
FAILED_DIR = "failed"


class StaleInputError(ValueError):
    """A profile or data file changed between planning a run and executing it."""


def _check_unchanged(path: str, sha: str, what: str, digest: Any = file_sha256) -> None:
    if digest(path) != sha:
        raise StaleInputError(f"{what} {path} changed after the sweep was planned; run the sweep "
                              "again to plan it with the new content")


def execute(run: RunSpec) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Simulate one run; returns its ``(requests, steps)`` tables with run columns added.

    A trace run is the ``fairsim run`` of the same options (``fairsim.sweep.tracerun``): the
    same loading and shaping, KV capacity, replay mode and simulation. Deterministic: the same
    ``RunSpec`` gives identical tables on any worker. The profile and
    any data file are checked against the content hashes in the run id, and the worker's fairsim
    code against the planner's, so a result is never stored under an id it does not match.

    Raises:
        StaleInputError: The profile, trace or data file, or fairsim's code, differs from what
            the run id was computed from.
        ValueError: The simulation refuses the input (e.g. ``CapacityError``).
    """
    from fairsim.run import run_one
    from fairsim.costmodel import load_profile
    from fairsim.sweep.engine import fleet_of, run_engine
    from fairsim.sweep.tracerun import load_trace_input, trace_engine
    from fairsim.sweep.workload import scenario_workload

    if code_identity() != run.code:
        raise StaleInputError(f"this worker runs fairsim {code_identity()}, the sweep was planned "
                              f"with {run.code}; use the same fairsim code on every worker")
    _check_unchanged(run.profile_path, run.profile_sha256, "profile")
    profile = load_profile(run.profile_path)
    replay, think_scale = None, 1.0
    if run.kind == "trace":
        if run.trace is None:
            raise RuntimeError(f"run {run.run_id}: a trace run without trace settings (a bug)")
        inp = load_trace_input(run.trace, profile)  # `fairsim run`'s loading and shaping
        _check_unchanged(run.trace["path"], run.trace["sha256"], "trace",
                         lambda p: trace_sha256(p, run.trace.get("format", "auto")))
        requests = inp.requests
        engine, _ = trace_engine(inp, run.engine, profile)  # `fairsim run`'s capacity
        replay, think_scale = inp.args.replay, inp.args.think_scale
        seed = inp.args.seed  # `fairsim run`'s --seed (a sampling router's)
    else:
        requests, base = scenario_workload(run.scenario, run.scenario_params, run.seed or 0, profile)
        engine = run_engine(base, run.engine, requests)
        seed = run.seed or 0
    for path, sha in run.inputs.items():  # a scenario's data files, a user policy's module
        _check_unchanged(path, sha, "data file")
    result = run_one(run.policy, requests, profile, engine, run.policy_params, show_progress=False,
                     replay=replay, think_scale=think_scale, fleet=fleet_of(run.engine, seed))
    cols = {"run_id": run.run_id, "scenario": run.scenario,
            "seed": run.seed if run.seed is not None else float("nan"), "policy": run.policy,
            "params": json.dumps(run.policy_params, sort_keys=True),
            "engine": json.dumps(run.engine, sort_keys=True), "kv_blocks": result.kv_blocks,
            "block_size": result.block_size}
    return result.requests.assign(**cols), result.steps.assign(**cols)


def execute_safely(run: RunSpec) -> tuple[str, Any, Any]:
    """``execute`` that never raises an ``Exception``: ``("ok", requests, steps)`` or
    ``("failed", "Type: message", traceback text)``. Used by the workers, so one failing run
    is recorded and the others go on."""
    try:
        return ("ok", *execute(run))
    except Exception as exc:  # recorded per run and reported by the sweep, never swallowed
        return "failed", f"{type(exc).__name__}: {exc}", traceback.format_exc()


def atomic_parquet(df: pd.DataFrame, path: Path) -> None:
    """``df.to_parquet(path)`` atomically, creating the run folder (``fairsim.io.atomic_write``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_to_parquet(df, path)


def atomic_text(text: str, path: Path) -> None:
    """Write ``text`` to ``path`` atomically, creating its folder (``fairsim.io.atomic_write``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, text)


def write_run(out: Path, run: RunSpec, requests: pd.DataFrame, steps: pd.DataFrame) -> None:
    """Write a finished run: the step table first, then the request table (the completion mark)."""
    atomic_parquet(steps, out / STEPS_DIR / f"{run.run_id}.parquet")
    atomic_parquet(requests, out / RUNS_DIR / f"{run.run_id}.parquet")
    (out / FAILED_DIR / f"{run.run_id}.json").unlink(missing_ok=True)


def write_failure(out: Path, run: RunSpec, error: str, trace: str) -> None:
    """Record a run that raised: ``OUT/failed/RUN_ID.json``."""
    record = {"run_id": run.run_id, "error": error, "traceback": trace, "run": run.to_json()}
    atomic_text(json.dumps(record, indent=2, sort_keys=True) + "\n",
                out / FAILED_DIR / f"{run.run_id}.json")


def is_done(out: Path, run: RunSpec) -> bool:
    """True when the run's request file exists (written last and atomically)."""
    return (out / RUNS_DIR / f"{run.run_id}.parquet").is_file()


def failure(out: Path, run: RunSpec) -> str | None:
    """The recorded error of a failed run, or None."""
    path = out / FAILED_DIR / f"{run.run_id}.json"
    if not path.is_file():
        return None
    return str(json.loads(path.read_text(encoding="utf-8")).get("error", "unknown error"))


def remove_partial_files(out: Path) -> int:
    """Delete temporary files left by a write cut short (a kill); returns how many."""
    stale = [*out.glob(f"{RUNS_DIR}/.*.tmp"), *out.glob(f"{STEPS_DIR}/.*.tmp"),
             *out.glob(f"{FAILED_DIR}/.*.tmp"), *out.glob(".*.tmp")]
    for path in stale:
        path.unlink(missing_ok=True)
    return len(stale)
