"""Shared plumbing of the experiments: policy lists, runs, tables, output files.

Every experiment is ``python -m experiments.eN_... [--out DIR] [--tiny] [--policies a,b]``; it
writes ``requests.parquet`` (one row per request, all runs), ``steps.parquet``, its summary tables
(Parquet and ``summary.json``) and PNG figures into ``--out`` (default ``results/eN``).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fairsim.costmodel import Profile, load_profile
from fairsim.policies import make_policy, policy_names
from fairsim.sim import simulate
from fairsim.scenarios import Scenario

PAPER_POLICIES = ["fcfs", "lpm", "klpm4", "klpm8", "ragcache", "preble", "peek", "fairway"]
"""Policies of the paper's comparisons; names not registered yet are skipped with a note."""
CREDIT_POLICIES = ["drr", "vtc", "dlpm", "fairway-carry", "fairway-plus", "fairway-patience",
                   "fairway-deadline"]
"""Policies beyond the paper: baselines carrying credit across steps and the Fairway
variants whose protection of the oldest request persists across steps."""
ALL_POLICIES = PAPER_POLICIES + CREDIT_POLICIES
"""Default policy list of E1-E3: the paper's and the credit-carrying ones."""
TINY_POLICIES = ["fcfs", "lpm", "fairway"]
"""Policies of the ``--tiny`` configurations (fixed, so the golden summaries stay stable)."""
BASELINE_EXCLUDE = ("fairway",)
"""Name prefixes that are not baselines (Fairway and its variants)."""

FULL: dict[str, dict[str, Any]] = {
    # Same scenario definitions and rates as fairsim/scenarios.py; only the lengths grow.
    "sec-dyn1": {"calm_s": 600.0, "burst_s": 600.0},  # the spike stays 60 s
    "sec-dyn2": {"calm_s": 600.0, "burst_s": 600.0},
    "sec-steady": {"duration_s": 1800.0},
    "multihop": {"duration_s": 1800.0},
    "mixed": {"duration_s": 1800.0},
    "rag": {"num_requests": 6000},  # 20 minutes at RagSpec's 5 requests/s
    "flood": {"num_flood": 6000},  # 300 s of flood at 20 requests/s
    # Real traces: the scenario's own 600-request windows at ideal load 0.8 (more windows below).
    "mooncake-synthetic": {"window_step_s": 250.0},  # the file holds four disjoint windows at 250 s
}
"""Scenario parameters of the full (non ``--tiny``) runs, on top of the scenario's defaults."""
REPLICAS: dict[str, int] = {
    "sec-dyn1": 20, "sec-dyn2": 20, "sec-steady": 8, "multihop": 8, "mixed": 8, "rag": 8,
    "flood": 8, "mooncake-conversation": 6, "mooncake-synthetic": 4, "azure-code": 6,
    "azure-conv": 6,
}
"""Seeds per scenario in the full runs (seeds ``0..n-1``; for a real trace the seed picks a
disjoint window: six fit in each file, four in the shorter ``synthetic_trace.jsonl``).
Statistics pool the requests of all seeds."""


def split_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """``"NAME@KEY=VALUE+KEY=VALUE"`` -> ``(NAME, params)``: a registered policy with parameters,
    for ablations on the command line (``--policies fairway-deadline@lookahead=none``); values are
    read as ``fairsim --param`` reads them (JSON when they parse, else strings).

    Raises:
        ValueError: A parameter without ``=``.
    """
    from fairsim.options import parse_params

    name, _, rest = spec.partition("@")
    return name, (parse_params(rest.split("+")) if rest else {})


def available(names: Sequence[str]) -> list[str]:
    """The registered subset of ``names`` (``NAME@...`` specs by their name), printing a note for
    each one skipped."""
    known = set(policy_names())
    missing = [n for n in names if split_spec(n)[0] not in known]
    if missing:
        print(f"note: skipping policies not registered in this build: {', '.join(missing)}",
              file=sys.stderr)
    return [n for n in names if split_spec(n)[0] in known]


def is_baseline(name: str) -> bool:
    """True for a policy Fairway is compared against (not Fairway or one of its variants)."""
    return not name.startswith(BASELINE_EXCLUDE)


def run(scenario: Scenario, policy: str, profile: Profile, label: str | None = None,
        **params: Any) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Simulate ``scenario`` under ``policy`` (a name or a ``NAME@KEY=VALUE+...`` spec, with
    ``params`` on top).

    Returns:
        ``(requests, steps)`` tables with added columns ``scenario`` and ``policy`` (``label``
        when given, e.g. an ablation variant's name; else ``policy`` as written).
    """
    name, spec_params = split_spec(policy)
    result = simulate(scenario.requests, make_policy(name, profile, **{**spec_params, **params}),
                      profile, scenario.engine)
    name = label or policy
    req = result.requests.assign(scenario=scenario.name, policy=name)
    steps = result.steps.assign(scenario=scenario.name, policy=name)
    return req, steps


def replicas(name: str, tiny: bool) -> list[int]:
    """Seeds to run scenario ``name`` with: ``[0]`` for ``--tiny``, else ``REPLICAS`` (default 1)."""
    return [0] if tiny else list(range(REPLICAS.get(name, 1)))


def build_all(name: str, profile: Profile, seeds: Sequence[int], **params: Any) -> list[Scenario]:
    """``build_scenario(name, profile, seed, **params)`` for every seed in ``seeds``."""
    from fairsim.scenarios import build_scenario
    return [build_scenario(name, profile, seed=s, **params) for s in seeds]


def run_all_seeds(scenarios: Sequence[Scenario], seeds: Sequence[int], policy: str, profile: Profile,
                  label: str | None = None, **params: Any) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``run`` on each replica of a scenario; tables concatenated with an added ``seed`` column."""
    reqs, steps = [], []
    for scenario, seed in zip(scenarios, seeds):
        r, s = run(scenario, policy, profile, label, **params)
        reqs.append(r.assign(seed=seed))
        steps.append(s.assign(seed=seed))
    return pd.concat(reqs, ignore_index=True), pd.concat(steps, ignore_index=True)


def pct(values: pd.Series | np.ndarray, q: float) -> float:
    """Percentile ``q`` (0-100) of ``values``, NaN when empty (numpy linear interpolation)."""
    arr = np.asarray(values, dtype=np.float64)
    return float(np.percentile(arr, q)) if arr.size else math.nan


def write_parquet(df: pd.DataFrame, path: Path) -> None:
    """Write ``df`` to ``path`` atomically (``fairsim.io.atomic_to_parquet``)."""
    from fairsim.io import atomic_to_parquet

    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_to_parquet(df, path)


def write_json(obj: Any, path: Path) -> None:
    """Write ``obj`` as sorted, indented JSON (floats rounded to 6 significant digits)."""
    def clean(x: Any) -> Any:
        if isinstance(x, dict):
            return {str(k): clean(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [clean(v) for v in x]
        if isinstance(x, (bool, np.bool_)):
            return bool(x)
        if isinstance(x, (int, np.integer)):
            return int(x)
        if isinstance(x, (float, np.floating)):
            return None if math.isnan(x) else float(f"{float(x):.6g}")
        return x

    from fairsim.io import atomic_write_text

    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(clean(obj), indent=2, sort_keys=True) + "\n")


def parser(description: str, default_out: str) -> argparse.ArgumentParser:
    """The common command line of an experiment."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--out", type=Path, default=Path(default_out), help="output folder")
    p.add_argument("--tiny", action="store_true",
                   help="tiny configuration (seconds; used by the golden tests)")
    p.add_argument("--policies", default=None,
                   help="comma-separated policy names (default: the paper's list)")
    p.add_argument("--profile", default=None, help="cost-model profile name or path")
    return p


def setup(args: argparse.Namespace, default: Sequence[str]) -> tuple[Profile, list[str]]:
    """Profile and policy list from the parsed options."""
    profile = load_profile(args.profile) if args.profile else load_profile()
    if args.policies:
        names = available([s.strip() for s in args.policies.split(",") if s.strip()])
    else:
        names = available(TINY_POLICIES if args.tiny else default)
    if not names:
        raise SystemExit("no registered policy to run")
    return profile, names


class Timer:
    """Prints the wall time of an experiment on exit."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __enter__(self) -> "Timer":
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.elapsed = time.perf_counter() - self.t0
        print(f"{self.name}: {self.elapsed:.1f} s wall", file=sys.stderr)
