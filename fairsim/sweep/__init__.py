"""Parameter sweeps: validate a grid, run it on local processes or Ray, resume, summarise.

A spec file (TOML, or YAML with PyYAML) names scenarios and/or trace files, policies with
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
``workload`` (a run's requests), ``runs`` (execute one run, its files), ``executors`` (local
processes, Ray), ``lock`` (one sweep per folder), ``summary``, ``command`` (the CLI).
"""

from fairsim.sweep.command import add_parser, cmd_sweep, plan_table, run_sweep
from fairsim.sweep.executors import run_local, run_ray
from fairsim.sweep.plan import expand
from fairsim.sweep.runs import FAILED_DIR, RUNS_DIR, STEPS_DIR, execute, is_done, write_run
from fairsim.sweep.runspec import RunSpec, run_id
from fairsim.sweep.spec import SweepSpec, load_spec, parse_spec
from fairsim.sweep.summary import summarize_runs

__all__ = [
    "FAILED_DIR", "RUNS_DIR", "STEPS_DIR", "RunSpec", "SweepSpec", "add_parser", "cmd_sweep",
    "execute", "expand", "is_done", "load_spec", "parse_spec", "plan_table", "run_id",
    "run_local", "run_ray", "run_sweep", "summarize_runs", "write_run",
]
