"""The sweep summary: one row per run of the spec, named by its parameters, with its status.

Columns: ``run_id``, ``status`` (``ok``, ``failed`` or ``not run`` for a sweep cut short),
``error`` (the failed run's ``Type: message``), the run's parameters (``RunSpec.parameters``:
``scenario``, ``trace``, ``seed``, ``policy``, ``scenario.KEY``, ``trace.KEY``, ``policy.KEY``,
``engine.KEY``), ``params`` and ``engine`` (the same as JSON text), ``profile``,
``profile_sha256``, ``fairsim_version``, ``kv_blocks``, ``block_size``, ``kv_tokens`` (blocks x
block size: the run's effective cache), then ``fairsim.metrics.summarize``'s figures (NaN for a
run without results); a fleet run (``engine.instances``/``engine.router``) adds
``router_hit_rate`` and ``load_imbalance`` (``fleet_figures``); a ``mode = "disaggregated"`` run
``router_hit_rate``, the held and transfer times, ``held_requests`` and each side's load
imbalance (``disagg_figures``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from fairsim.sweep.runs import RUNS_DIR, STEPS_DIR, atomic_parquet, atomic_text, failure, is_done
from fairsim.sweep.runspec import RunSpec

PARAMETER_PREFIXES = ("scenario.", "trace.", "policy.", "engine.")


def status_of(out: Path, run: RunSpec) -> tuple[str, str | None]:
    """``("ok", None)``, ``("failed", error)`` or ``("not run", None)`` from the run's files."""
    if is_done(out, run):
        return "ok", None
    error = failure(out, run)
    return ("failed", error) if error is not None else ("not run", None)


def summarize_runs(out: Path, runs: Iterable[RunSpec]) -> pd.DataFrame:
    """One row per run of ``runs`` (module docstring), read back from the run files.

    Raises:
        OSError: A run file cannot be read.
    """
    from fairsim.metrics import summarize

    rows = []
    for run in runs:
        status, error = status_of(out, run)
        row = {"run_id": run.run_id, "status": status, "error": error, **run.parameters(),
               "params": json.dumps(run.policy_params, sort_keys=True),
               "engine": json.dumps(run.engine, sort_keys=True), "profile": run.profile,
               "profile_sha256": run.profile_sha256, "fairsim_version": run.code["version"]}
        if status == "ok":
            req = pd.read_parquet(out / RUNS_DIR / f"{run.run_id}.parquet")
            steps_path = out / STEPS_DIR / f"{run.run_id}.parquet"
            steps = pd.read_parquet(steps_path) if steps_path.is_file() else None
            kv_blocks, block_size = int(req["kv_blocks"].iloc[0]), int(req["block_size"].iloc[0])
            row.update(kv_blocks=kv_blocks, block_size=block_size, kv_tokens=kv_blocks * block_size,
                       **summarize(req, steps))
            if run.engine.get("mode") == "disaggregated":
                row.update(disagg_figures(req, steps, run.engine["prefill_instances"],
                                          run.engine["decode_instances"]))
            elif "instance" in req:
                row.update(fleet_figures(req, steps, run.engine["instances"]))
            if "tpot_s" in req:  # a colocated run: its decode figures too, but ITL (it needs the
                # token gaps, which a sweep does not store: no column rather than an empty one)
                from fairsim.metrics import decode_summary

                row.update({k: v for k, v in decode_summary(req, None).items() if not k.startswith("itl_")})
                if steps is not None and "decode_tokens" in steps:
                    row["decode_tokens"] = int(steps["decode_tokens"].sum())
        rows.append(row)
    table = tidy_parameters(pd.DataFrame(rows))
    if len(table):
        for col in ("kv_blocks", "block_size", "kv_tokens", "requests", "steps", "evictions",
                    "preemptions"):
            if col in table:
                table[col] = table[col].astype("Int64")
    return table


def fleet_figures(requests: pd.DataFrame, steps: pd.DataFrame | None, instances: int) -> dict[str, float]:
    """A fleet run's ``router_hit_rate`` and ``load_imbalance``, as ``fairsim run`` reports them
    (``fairsim.cli_fleet.fleet_summary``), from its stored tables.

    ``router_hit_rate``: the prefix the router counted as cached on the chosen instance over the
    prompt tokens; ``load_imbalance``: the busiest instance's busy time (the sum of its step
    durations) over the mean of all ``instances`` (an instance without steps counts 0).
    """
    prompt = float(requests["prompt_tokens"].sum())
    hit = float(requests["router_cached_tokens"].sum()) / prompt if prompt else float("nan")
    busy = [0.0] * instances
    if steps is not None:
        for k, value in steps.groupby("instance")["duration_s"].sum().items():
            busy[int(k)] = float(value)
    mean = sum(busy) / instances
    return {"router_hit_rate": hit, "load_imbalance": max(busy) / mean if mean > 0 else float("nan")}


def disagg_figures(requests: pd.DataFrame, steps: pd.DataFrame | None, prefill: int,
                   decode: int) -> dict[str, float]:
    """A ``mode = "disaggregated"`` run's figures, as ``fairsim run`` reports them
    (``fairsim.cli_disagg.disagg_summary``), from its stored tables.

    ``router_hit_rate`` (the prefill side's router, as ``fleet_figures``), ``held_p50_s``,
    ``held_p99_s`` (a request's prefill end to its decode-side blocks), ``held_requests``
    (requests a decode engine refused at a step start), ``transfer_p50_s``, ``transfer_p99_s``,
    ``prefill_load_imbalance`` and ``decode_load_imbalance`` (each side's busiest instance's busy
    time over its mean; NaN without a step table).
    """
    import numpy as np

    held = requests["held_s"].to_numpy(dtype=np.float64)
    moved = requests["transfer_s"].to_numpy(dtype=np.float64)
    out = {"held_p50_s": float(np.percentile(held, 50)), "held_p99_s": float(np.percentile(held, 99)),
           "held_requests": int(requests["decode_held"].sum()),
           "transfer_p50_s": float(np.percentile(moved, 50)), "transfer_p99_s": float(np.percentile(moved, 99))}
    by_role = {role: steps[steps["role"] == role] if steps is not None else None for role in ("prefill", "decode")}
    out["router_hit_rate"] = fleet_figures(requests, by_role["prefill"], prefill)["router_hit_rate"]
    for role, n in (("prefill", prefill), ("decode", decode)):
        out[f"{role}_load_imbalance"] = fleet_figures(requests, by_role[role], n)["load_imbalance"]
    return out


def tidy_parameters(table: pd.DataFrame) -> pd.DataFrame:
    """Parameter columns as nullable pandas types, so a missing value (a seed of a trace run, a
    parameter another policy lacks) stays empty instead of turning integers into floats."""
    cols = parameter_columns(table)
    if cols:
        table[cols] = table[cols].convert_dtypes()
    front = [c for c in ("run_id", "status", "error") if c in table]
    rest = [c for c in table.columns if c not in front and c not in cols]
    return table[front + cols + rest]


def parameter_columns(table: pd.DataFrame) -> list[str]:
    """The summary's parameter columns (``scenario``, ``trace``, ``seed``, ``policy``, ``X.KEY``)."""
    return [c for c in table.columns if c in ("scenario", "trace", "seed", "policy")
            or c.startswith(PARAMETER_PREFIXES)]


def write_summary(out: Path, table: pd.DataFrame) -> None:
    """``OUT/summary.parquet`` and ``OUT/summary.csv``, each written atomically."""
    atomic_parquet(table, out / "summary.parquet")
    atomic_text(table.to_csv(index=False), out / "summary.csv")
