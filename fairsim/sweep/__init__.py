"""Parameter sweeps: validate a grid, run it on local processes or Ray, resume, summarise.

A spec file (TOML, or YAML with PyYAML) names scenarios and/or traces (files or folders, each
point run as the ``fairsim run`` of the same options: ``tracerun``), policies with
optional parameter grids, seeds and an optional engine grid. ``expand`` validates all of it and
turns it into one ``RunSpec`` per combination (workloads x policy points x engine points);
``run_sweep`` runs what the output folder does not hold yet and writes the summary. Example::

    out = "results/sweep-demo"      # optional; --out overrides
    seeds = [0, 1]
    profile = "a6000-llama3.1-8b-vllm-prior"   # optional

    [[scenarios]]
    name = "rag"                     # fairsim.scenarios name
    params = { num_requests = 300 }  # optional builder / generator parameters

    [[traces]]
    path = "../shared/data/traces/conversation_trace.jsonl"
    max_requests = 500
    time_scale = [1.0, 2.0]

    [[policies]]
    name = "fcfs"

    [[policies]]
    name = "fairway"
    grid = { fast_weight = [2, 4, 8], slo_multiplier = [3] }

    [engine]                         # optional grid over EngineConfig fields (+ kv_tokens)
    block_size = [16, 128]

Modules: ``spec`` (read, check keys and types), ``plan`` (expand and validate every point),
``runspec`` (``RunSpec`` and run ids), ``engine`` (per-run engine settings and capacity),
``tracerun`` (a trace point through ``fairsim run``'s loading, shaping and sizing),
``workload`` (a run's requests), ``runs`` (execute one run, its files), ``executors`` (local
processes, Ray), ``lock`` (one sweep per folder), ``summary``, ``command`` (the CLI).
"""

import importlib
from typing import Any

# Exports are imported on first use (PEP 562), so ``fairsim`` builds its parser without pandas
# (start-up time); ``from fairsim.sweep import run_sweep`` works as before.
_EXPORTS = {
    "add_parser": "fairsim.sweep.args", "cmd_sweep": "fairsim.sweep.command",
    "plan_table": "fairsim.sweep.command", "run_sweep": "fairsim.sweep.command",
    "run_local": "fairsim.sweep.executors", "run_ray": "fairsim.sweep.executors",
    "expand": "fairsim.sweep.plan", "FAILED_DIR": "fairsim.sweep.runs",
    "RUNS_DIR": "fairsim.sweep.runs", "STEPS_DIR": "fairsim.sweep.runs",
    "execute": "fairsim.sweep.runs", "is_done": "fairsim.sweep.runs",
    "write_run": "fairsim.sweep.runs", "RunSpec": "fairsim.sweep.runspec",
    "run_id": "fairsim.sweep.runspec", "SweepSpec": "fairsim.sweep.spec",
    "load_spec": "fairsim.sweep.spec", "parse_spec": "fairsim.sweep.spec",
    "summarize_runs": "fairsim.sweep.summary",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'fairsim.sweep' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
