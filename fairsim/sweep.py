"""Parameter sweeps: expand a grid, run it on local processes or Ray, resume, summarise.

A spec file (TOML, or YAML when PyYAML is installed) names scenarios, policies with optional
parameter grids, seeds and an optional engine grid; ``expand`` turns it into one ``RunSpec`` per
combination (scenarios x seeds x policy-parameter points x engine points). Each run is simulated
independently and written as ``OUT/runs/RUN_ID.parquet`` (its request table; the step table goes
to ``OUT/steps/RUN_ID.parquet`` first). Both are written atomically (tmp file + rename), and the
request file is written last, so its presence means the run is complete: a restarted sweep skips
it. ``OUT/summary.parquet`` and ``summary.csv`` hold one row per run, recomputed from the run
files. Example spec (TOML)::

    out = "results/sweep-demo"      # optional; --out overrides
    seeds = [0, 1]
    profile = "a6000-llama3.1-8b-vllm-prior"   # optional

    [[scenarios]]
    name = "rag"                     # fairsim.scenarios name
    params = { num_requests = 300 }  # optional builder / generator parameters

    [[policies]]
    name = "fcfs"

    [[policies]]
    name = "fairway"
    grid = { fast_weight = [2, 4, 8], slo_multiplier = [3] }

    [engine]                         # optional grid over EngineConfig fields
    kv_fraction = [0.2, 0.3]

Shorthands: ``scenarios = ["rag", "mixed"]`` and ``policies = ["fcfs", "lpm"]``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

RUNS_DIR = "runs"
STEPS_DIR = "steps"


@dataclass(frozen=True)
class RunSpec:
    """One point of a sweep (JSON-serialisable fields only, so it travels to any worker)."""

    run_id: str
    """Stable id: scenario, seed, policy and a hash of the full configuration."""
    scenario: str
    scenario_params: dict[str, Any]
    seed: int
    policy: str
    policy_params: dict[str, Any]
    engine: dict[str, Any]
    """``EngineConfig`` field overrides (on top of the scenario's engine settings)."""
    profile: str | None


def load_spec(path: str | Path) -> dict[str, Any]:
    """Read a sweep spec (``.toml``, or ``.yaml``/``.yml``).

    Raises:
        ValueError: Another file type, invalid TOML/YAML, or YAML without PyYAML installed.
        FileNotFoundError: ``path`` does not exist.
    """
    path = Path(path)
    text = path.read_text()
    if path.suffix == ".toml":
        import tomllib

        return tomllib.loads(text)
    if path.suffix in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError:
            raise ValueError(f"{path}: YAML specs need PyYAML (pip install pyyaml), or use TOML") from None
        try:
            return yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise ValueError(f"{path}: not valid YAML: {exc}") from None
    raise ValueError(f"{path}: sweep spec must be .toml, .yaml or .yml")


def _grid(grid: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Cartesian product of ``{key: [values]}`` (a scalar value is one point), in key order."""
    if not grid:
        return [{}]
    keys = list(grid)
    values = [v if isinstance(v, list) else [v] for v in grid.values()]
    return [dict(zip(keys, combo)) for combo in itertools.product(*values)]


def _entries(items: Any, what: str) -> list[dict[str, Any]]:
    if not items:
        raise ValueError(f"sweep spec needs at least one entry in '{what}'")
    out = []
    for item in items:
        if isinstance(item, str):
            item = {"name": item}
        if not isinstance(item, dict) or "name" not in item:
            raise ValueError(f"'{what}' entry {item!r}: need a name (string or table with 'name')")
        out.append(item)
    return out


def run_id(scenario: str, seed: int, policy: str, config: dict[str, Any]) -> str:
    """``SCENARIO-sSEED-POLICY-HASH8``; the hash covers the full canonical JSON configuration."""
    digest = hashlib.sha1(json.dumps(config, sort_keys=True).encode()).hexdigest()[:8]
    return f"{scenario}-s{seed}-{policy}-{digest}"


def expand(spec: dict[str, Any]) -> list[RunSpec]:
    """Every run of ``spec``: scenarios x seeds x policy-parameter points x engine points.

    Raises:
        ValueError: A missing section, an unknown policy or scenario name, or two identical runs.
    """
    from fairsim.policies import policy_names
    from fairsim.scenarios import scenario_names

    unknown_keys = set(spec) - {"out", "seeds", "profile", "scenarios", "policies", "engine", "name"}
    if unknown_keys:
        raise ValueError(f"unknown sweep spec keys {sorted(unknown_keys)}; known: out, seeds, "
                         "profile, scenarios, policies, engine, name")
    seeds = spec.get("seeds", [0])
    seeds = seeds if isinstance(seeds, list) else [seeds]
    scenarios = _entries(spec.get("scenarios"), "scenarios")
    policies = _entries(spec.get("policies"), "policies")
    for p in policies:
        if p["name"] not in policy_names():
            raise ValueError(f"unknown policy {p['name']!r}; known: {', '.join(policy_names())}")
    for s in scenarios:
        if s["name"] not in scenario_names(include_sessions=True):
            known = ", ".join(scenario_names(include_sessions=True))
            raise ValueError(f"unknown scenario {s['name']!r}; known: {known}")
    runs: list[RunSpec] = []
    for sc, seed, pol, eng in itertools.product(scenarios, seeds, policies, _grid(spec.get("engine"))):
        for params in _grid(pol.get("grid")):
            params = {**pol.get("params", {}), **params}
            config = {"scenario": sc["name"], "scenario_params": sc.get("params", {}),
                      "seed": int(seed), "policy": pol["name"], "policy_params": params,
                      "engine": eng, "profile": spec.get("profile")}
            runs.append(RunSpec(run_id(sc["name"], int(seed), pol["name"], config),
                                sc["name"], dict(sc.get("params", {})), int(seed), pol["name"],
                                params, eng, spec.get("profile")))
    ids = [r.run_id for r in runs]
    if len(set(ids)) != len(ids):
        raise ValueError("the sweep spec lists the same run twice; remove the duplicate entry")
    return runs


def execute(run: RunSpec) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Simulate one run; returns its ``(requests, steps)`` tables with run columns added.

    Deterministic: the same ``RunSpec`` gives identical tables on any worker.
    """
    from fairsim.costmodel import load_profile
    from fairsim.policies import make_policy
    from fairsim.sim import simulate
    from fairsim.scenarios import build_scenario

    profile = load_profile(run.profile) if run.profile else load_profile()
    scenario = build_scenario(run.scenario, profile, run.seed, **run.scenario_params)
    engine = scenario.engine
    if run.engine:
        base = dataclasses.asdict(engine)
        if "kv_fraction" in run.engine or "kv_blocks" in run.engine:
            base.update(kv_fraction=None, kv_blocks=None)
        engine = type(engine)(**{**base, **run.engine})
    result = simulate(scenario.requests, make_policy(run.policy, profile, **run.policy_params),
                      profile, engine)
    cols = {"run_id": run.run_id, "scenario": run.scenario, "seed": run.seed,
            "policy": run.policy, "params": json.dumps(run.policy_params, sort_keys=True),
            "engine": json.dumps(run.engine, sort_keys=True), "kv_blocks": result.kv_blocks}
    return result.requests.assign(**cols), result.steps.assign(**cols)


def _atomic_parquet(df: pd.DataFrame, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    df.to_parquet(tmp, index=False)
    os.replace(tmp, path)  # atomic on POSIX: readers see the old state or the whole file


def write_run(out: Path, run: RunSpec, requests: pd.DataFrame, steps: pd.DataFrame) -> None:
    """Write a finished run: the step table first, then the request table (the completion mark)."""
    _atomic_parquet(steps, out / STEPS_DIR / f"{run.run_id}.parquet")
    _atomic_parquet(requests, out / RUNS_DIR / f"{run.run_id}.parquet")


def is_done(out: Path, run: RunSpec) -> bool:
    """True when the run's request file exists (written last and atomically)."""
    return (out / RUNS_DIR / f"{run.run_id}.parquet").is_file()


def run_local(todo: Sequence[RunSpec], out: Path, workers: int | None = None,
              progress: bool = True) -> list[str]:
    """Run ``todo`` on ``workers`` local processes (1: in this process), writing as each finishes.

    Returns:
        The run ids computed, in completion order.
    """
    from tqdm import tqdm

    workers = workers or os.cpu_count() or 1
    done: list[str] = []
    with tqdm(total=len(todo), desc="sweep", unit="run", disable=not progress or None) as bar:
        if workers == 1:
            for run in todo:
                write_run(out, run, *execute(run))
                done.append(run.run_id)
                bar.update(1)
            return done
        from concurrent.futures import ProcessPoolExecutor, as_completed

        with ProcessPoolExecutor(max_workers=workers) as pool:
            futures = {pool.submit(execute, run): run for run in todo}
            for fut in as_completed(futures):
                run = futures[fut]
                write_run(out, run, *fut.result())
                done.append(run.run_id)
                bar.update(1)
    return done


def run_ray(todo: Sequence[RunSpec], out: Path, address: str | None = None,
            workers: int | None = None, progress: bool = True) -> list[str]:
    """Run ``todo`` as Ray tasks (one CPU each); the driver writes each result as it arrives.

    Connects to ``address`` (e.g. ``"auto"`` or ``"ray://host:10001"``), or reuses an initialised
    Ray, or starts a local one with ``workers`` CPUs. Workers get this checkout's folder on
    ``PYTHONPATH`` (``runtime_env``) so they import the same fairsim code as the driver.

    Raises:
        ImportError: Ray is not installed (``pip install "fairsim[ray]"``).
    """
    try:
        import ray
    except ImportError:
        raise ImportError("the ray executor needs Ray: pip install 'fairsim[ray]'") from None
    from tqdm import tqdm

    started = False
    if not ray.is_initialized():
        root = str(Path(__file__).resolve().parents[1])
        env = {"env_vars": {"PYTHONPATH": os.pathsep.join(
            p for p in (root, os.environ.get("PYTHONPATH", "")) if p)}}
        kwargs: dict[str, Any] = {"runtime_env": env, "log_to_driver": False}
        if address:
            ray.init(address=address, **kwargs)
        else:
            ray.init(num_cpus=workers or os.cpu_count(), include_dashboard=False, **kwargs)
        started = True
    try:
        task = ray.remote(num_cpus=1)(execute)
        pending = {task.remote(run): run for run in todo}
        done: list[str] = []
        with tqdm(total=len(todo), desc="sweep[ray]", unit="run", disable=not progress or None) as bar:
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1)
                run = pending.pop(ready[0])
                write_run(out, run, *ray.get(ready[0]))
                done.append(run.run_id)
                bar.update(1)
        return done
    finally:
        if started:
            ray.shutdown()


def summarize_runs(out: Path, runs: Iterable[RunSpec]) -> pd.DataFrame:
    """One row per finished run (config + ``fairsim.metrics.summarize``), from the run files."""
    from fairsim.metrics import summarize

    rows = []
    for run in runs:
        if not is_done(out, run):
            continue
        req = pd.read_parquet(out / RUNS_DIR / f"{run.run_id}.parquet")
        steps_path = out / STEPS_DIR / f"{run.run_id}.parquet"
        steps = pd.read_parquet(steps_path) if steps_path.is_file() else None
        rows.append({"run_id": run.run_id, "scenario": run.scenario, "seed": run.seed,
                     "policy": run.policy,
                     "params": json.dumps(run.policy_params, sort_keys=True),
                     "engine": json.dumps(run.engine, sort_keys=True),
                     "kv_blocks": int(req["kv_blocks"].iloc[0]), **summarize(req, steps)})
    return pd.DataFrame(rows)


def run_sweep(spec: dict[str, Any], out: Path, executor: str = "local", workers: int | None = None,
              address: str | None = None, progress: bool = True,
              log: Callable[[str], Any] = print) -> pd.DataFrame:
    """Expand ``spec``, run what is not done yet, write and return the summary table.

    Raises:
        ValueError: A bad spec or an unknown executor.
    """
    if executor not in ("local", "ray"):
        raise ValueError(f"executor {executor!r}: use 'local' or 'ray'")
    runs = expand(spec)
    out.mkdir(parents=True, exist_ok=True)
    (out / "spec.json").write_text(json.dumps(spec, indent=2, sort_keys=True, default=str) + "\n")
    for stale in [*out.glob(f"{RUNS_DIR}/.*.tmp"), *out.glob(f"{STEPS_DIR}/.*.tmp")]:
        stale.unlink()  # a write cut short by a kill; its run is not done and runs again
    todo = [r for r in runs if not is_done(out, r)]
    log(f"sweep: {len(runs)} runs, {len(runs) - len(todo)} already done, {len(todo)} to run "
        f"({executor})")
    if todo:
        if executor == "ray":
            computed = run_ray(todo, out, address, workers, progress)
        else:
            computed = run_local(todo, out, workers, progress)
        log("computed: " + " ".join(computed))
    summary = summarize_runs(out, runs)
    _atomic_parquet(summary, out / "summary.parquet")
    summary.to_csv(out / "summary.csv", index=False)
    log(f"summary: {out / 'summary.parquet'} ({len(summary)} runs)")
    return summary


def add_parser(sub: Any) -> None:
    """Register ``fairsim sweep`` on the CLI's subparsers."""
    p = sub.add_parser("sweep", help="run a grid of policies x parameters x seeds x scenarios")
    p.add_argument("spec", type=Path, help="sweep spec (.toml, .yaml or .yml)")
    p.add_argument("--out", type=Path, default=None,
                   help="output folder (default: the spec's 'out', else results/sweep-SPECNAME)")
    p.add_argument("--executor", choices=("local", "ray"), default="local")
    p.add_argument("--address", default=None, help="Ray cluster address (with --executor ray)")
    p.add_argument("--workers", type=int, default=None,
                   help="local processes, or CPUs of a Ray started here (default: all cores)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def cmd_sweep(args: Any) -> int:
    """``fairsim sweep``: run the spec; print the summary's headline columns."""
    spec = load_spec(args.spec)
    out = args.out or Path(spec.get("out") or f"results/sweep-{args.spec.stem}")
    try:
        summary = run_sweep(spec, out, args.executor, args.workers, args.address,
                            progress=not args.no_progress)
    except ImportError as exc:  # --executor ray without Ray installed
        print(f"fairsim: error: {exc}", file=sys.stderr)
        return 2
    cols = ["run_id", "ttft_p50_s", "ttft_p99_s", "ttft_max_s", "hit_rate"]
    if len(summary):
        print(summary[cols].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    sys.stdout.flush()
    return 0
