"""Expand a sweep spec into runs, validating every grid point before the first run.

``expand`` checks the spec's structure (``fairsim.sweep.spec``), then everything a run needs:
the profile loads; every policy grid point builds with ``make_policy``; every engine point is a
valid ``EngineConfig``; every scenario point builds (for every seed); every trace point (a file
or folder) is loaded, shaped and sized by the code its run uses, which is ``fairsim run``'s
(``fairsim.sweep.tracerun``); and for every workload x engine point the KV cache holds the
longest prompt (``fairsim.sweep.engine.check_capacity``: under ``mode = "disaggregated"``
each side's cache). Any problem raises ``SweepSpecError`` naming the spec
file and key path, so a sweep never stops halfway on a bad input.
"""

from __future__ import annotations

import itertools
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from fairsim.errors import SweepSpecError
from fairsim.sweep.engine import (CAPACITY_KEYS, DISAGG_KEYS, check_capacity, check_fleet_input, check_value,
                                  engine_fields, fleet_point, run_engine)
from fairsim.sweep.runspec import RunSpec, code_identity, file_sha256, run_id, trace_sha256
from fairsim.sweep.spec import SweepSpec, parse_spec
from fairsim.sweep.tracerun import load_trace_input, spec_terms, trace_engine
from fairsim.sweep.workload import scenario_workload, trace_requests

USER_ERRORS = (ValueError, TypeError, ArithmeticError)
"""What a builder raises for bad parameters (a wrong type fails as ``TypeError`` deep inside)."""


def grid_points(grid: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Cartesian product of ``{key: [values]}`` in key order (``{}`` -> one empty point)."""
    keys = list(grid)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(grid[k] for k in keys))]


def _point(values: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in values.items()) or "no parameters"


def _missing(s: SweepSpec, text: str) -> str:
    """Why ``text`` is not a readable file (or trace folder), with a hint when it sits next to the
    spec instead."""
    path = Path(text).expanduser()
    if path.is_dir():
        return f"{text!r} is a folder, not a file"
    why = f"no such file {text!r} (relative paths are read from the current folder, {Path.cwd()})"
    spec_dir = Path(s.source).parent
    if not path.is_absolute() and Path(s.source).is_file() and (spec_dir / path).exists() \
            and spec_dir.resolve() != Path.cwd().resolve():
        why += f"; there is one next to the spec: give {str(spec_dir / path)!r}"
    return why


def _resolve_profile(s: SweepSpec) -> tuple[str, Path, Any]:
    from fairsim.costmodel import DEFAULT_PROFILE, PROFILE_DIR, load_profile

    text = s.profile or DEFAULT_PROFILE
    try:
        profile = load_profile(text)
    except ValueError as exc:
        if text.endswith(".json") and not Path(text).is_file():
            raise s.error("profile", _missing(s, text)) from None
        raise s.error("profile", str(exc)) from None
    path = Path(text) if Path(text).is_file() else PROFILE_DIR / f"{text}.json"
    return text, path.resolve(), profile


def _policy_inputs(name: str) -> dict[str, str]:
    """``{source file: sha256}`` of a user policy ``package.module:Class`` (``{}`` for a registered
    name), so that editing the policy's module changes the ids of its runs."""
    import inspect

    from fairsim.policies.user import is_user_spec, load_user_class

    if not is_user_spec(name):
        return {}
    try:
        source = inspect.getsourcefile(load_user_class(name))
    except TypeError:  # a class without a Python source file (built in C)
        source = None
    return {} if source is None else {str(Path(source).resolve()): file_sha256(Path(source))}


def _check_policies(s: SweepSpec, profile: Any) -> list[tuple[str, str, dict[str, Any]]]:
    """Every ``(where, policy, params)`` of the spec's policy entries x grid points, each built
    once. Names are registered policies or user classes ``package.module:Class`` (imported here,
    so an import error is named before the first run).

    Raises:
        SweepSpecError: An unknown name, a user class that does not import, a bad parameter.
    """
    from fairsim.policies import make_policy, policy_names
    from fairsim.policies.user import is_user_spec

    out = []
    for entry in s.policies:
        if entry.name not in policy_names() and not is_user_spec(entry.name):
            raise s.error(f"{entry.where}.name", f"unknown policy {entry.name!r}; known: "
                                                 f"{', '.join(policy_names())}, or a class of your own "
                                                 f"as package.module:Class")
        if is_user_spec(entry.name):
            try:
                _policy_inputs(entry.name)
            except (ValueError, OSError) as exc:
                raise s.error(f"{entry.where}.name", str(exc)) from None
        for point in grid_points(entry.grid):
            params = {**entry.params, **point}
            try:
                make_policy(entry.name, profile, **params)
            except USER_ERRORS as exc:
                where = f"{entry.where}.grid ({_point(point)})" if point else f"{entry.where}.params"
                raise s.error(where, f"{type(exc).__name__}: {exc}" if not isinstance(exc, ValueError)
                              else str(exc)) from None
            out.append((entry.where, entry.name, params))
    return out


def _check_engine(s: SweepSpec) -> list[dict[str, Any]]:
    from fairsim.sim.config import EngineConfig

    fields = engine_fields()
    for key, values in s.engine.items():
        if key not in fields:
            raise s.error(f"engine.{key}", f"unknown key; expected {', '.join(fields)}")
        for i, value in enumerate(values):
            why = check_value(key, fields[key], value)
            if why:
                raise s.error(f"engine.{key}" + (f"[{i}]" if len(values) > 1 else ""), why)
    given = [k for k in CAPACITY_KEYS if k in s.engine]
    if len(given) > 1:
        raise s.error(f"engine.{given[1]}", f"give one KV capacity key of {', '.join(CAPACITY_KEYS)}, "
                                            f"not {' and '.join(given)}")
    sizes = set(s.engine.get("block_size", []))
    if "kv_blocks" in s.engine and len(sizes) > 1:
        raise s.error("engine.kv_blocks", f"with several block sizes {sorted(sizes)} a block count "
                      "gives each a different cache size in tokens; give engine.kv_tokens instead")
    if "decode_kv_blocks" in s.engine and len(sizes) > 1:
        # No decode_kv_tokens key (run has no --decode-kv-tokens): the decode side's size in tokens
        # is kept the same only by leaving it to the prefill side's, or by one block size per spec.
        raise s.error("engine.decode_kv_blocks", f"with several block sizes {sorted(sizes)} a block count "
                      "gives each a different decode cache size in tokens; leave decode_kv_blocks out (each "
                      "decode engine then has the prefill side's cache, which engine.kv_tokens keeps the same "
                      "in tokens) or sweep one block_size per spec")
    points = []
    modes = set(s.engine.get("mode", []))
    mixed = "disaggregated" in modes and len(modes) > 1
    for point in grid_points(s.engine):
        if mixed:  # mode = [..., "disaggregated"]: each mode's runs take the keys that apply to it
            other = ("instances",) if point.get("mode") == "disaggregated" else DISAGG_KEYS
            point = {k: v for k, v in point.items() if k not in other}
        static = {k: v for k, v in point.items() if k in EngineConfig.__dataclass_fields__}
        if static.get("mode") == "disaggregated":  # both sides' settings, run colocated (run_engine)
            static["mode"] = "colocated"
        try:
            EngineConfig(**static)
            point = fleet_point(point)
        except USER_ERRORS as exc:
            raise s.error(f"engine ({_point(point)})", str(exc)) from None
        if point not in points:  # router_params of other routers cut away: the same run once
            points.append(point)
    # A table for a router no run uses would be dropped unseen (fairsim run refuses a --router-param
    # its router does not take): refused, naming it.
    used = sorted({point["router"] for point in points if point.get("router")})
    tables = s.engine.get("router_params", [])
    for i, table in enumerate(tables):
        for name in table:
            if name not in used:
                raise s.error("engine.router_params" + (f"[{i}]" if len(tables) > 1 else ""),
                              f"router_params.{name}: no run of this spec uses router {name!r} (its runs use "
                              f"{', '.join(used) or 'no router'}), so these parameters would be ignored; add "
                              f"{name!r} to engine.router or leave its table out")
    return points


def _check_capacity(s: SweepSpec, where: str, requests: list, base: Any,
                    engines: list[dict[str, Any]], profile: Any) -> None:
    for point in engines:
        try:
            check_capacity(point, requests, run_engine(base, point, requests), profile)
            check_fleet_input(point, requests)
        except USER_ERRORS as exc:
            at = f"{where}, engine ({_point(point)})" if point else where
            raise s.error(at, str(exc)) from None


def _scenario_inputs(name: str) -> dict[str, str]:
    """Data files a scenario reads, with their content hashes (the real-trace scenarios)."""
    from fairsim.traces.real import REAL_TRACES, traces_dir

    if name not in REAL_TRACES:
        return {}
    path = (traces_dir() / REAL_TRACES[name]).resolve()
    return {str(path): file_sha256(path)}


def _check_arrival_range(requests: list[Any], scale: float | None, source: str) -> None:
    """The arrival-range checks of ``fairsim run`` (``fairsim.options.load_requests``) on a shaped trace.

    Raises:
        ValueError: The last arrival, or (sessions, replayed closed loop) a turn's earliest
            release (``fairsim.sim.release``), beyond ``MAX_ARRIVAL_S`` (1e9 s).
    """
    from fairsim.options import MAX_ARRIVAL_S
    from fairsim.sim.arrivals import has_sessions
    from fairsim.sim.release import check_release_times

    if has_sessions(requests):  # the sweep's runs use the engine's default replay: closed here
        check_release_times(requests, 1.0, MAX_ARRIVAL_S, source)
    last = max((r.arrival_time for r in requests), default=0.0)
    if not last <= MAX_ARRIVAL_S:
        what = f"time_scale {scale:g}" if scale is not None else f"{source} (its parameters)"
        raise ValueError(f"{what}: the last arrival is at {last:.6g} s, beyond "
                         f"{MAX_ARRIVAL_S:.0e} s, where float64 time cannot resolve 1 us steps; "
                         f"use a smaller factor or a shorter window")


def _workloads(s: SweepSpec, profile: Any, engines: list[dict[str, Any]]) -> Iterable[dict[str, Any]]:
    """One dict of ``RunSpec`` workload fields per scenario point x seed and trace x shaping.

    A trace point is loaded, shaped and sized by the functions its run uses
    (``fairsim.sweep.tracerun``: ``fairsim run``'s own code), so what passes here runs.
    """
    from fairsim.scenarios import scenario_names
    from fairsim.sim.keys import mapping_loss

    for entry in s.scenarios:
        if entry.name not in scenario_names(include_sessions=True):
            raise s.error(f"{entry.where}.name", f"unknown scenario {entry.name!r}; known: "
                                                 f"{', '.join(scenario_names(include_sessions=True))}")
        try:
            inputs = _scenario_inputs(entry.name)
        except OSError as exc:
            raise s.error(f"{entry.where}.name", str(exc)) from None
        for point in grid_points(entry.grid):
            params = {**entry.params, **point}
            for seed in s.seeds:
                where = f"{entry.where} (seed {seed}" + (f", {_point(point)})" if point else ")")
                try:
                    requests, base = scenario_workload(entry.name, params, seed, profile)
                    _check_arrival_range(requests, None, f"scenario {entry.name!r}")
                except (*USER_ERRORS, OSError) as exc:
                    raise s.error(where, str(exc)) from None
                _check_capacity(s, where, requests, base, engines, profile)
                yield {"scenario": entry.name, "kind": "scenario", "scenario_params": params,
                       "trace": None, "seed": seed, "inputs": inputs, "where": entry.where}
    for entry in s.traces:
        path = Path(entry.path).expanduser()
        if not path.exists():
            raise s.error(f"{entry.where}.path", _missing(s, entry.path))
        try:  # read once as the file or folder it is, so its own errors name the path
            sha = trace_sha256(path, entry.format)
            trace_requests(str(path), entry.format)
        except (ValueError, OSError) as exc:
            raise s.error(f"{entry.where}.path", spec_terms(str(exc))) from None
        notes: list[str] = []
        for scale, (start, end), cap in itertools.product(entry.time_scales, entry.windows,
                                                          entry.max_requests):
            trace = {"path": str(path.resolve()), "sha256": sha, "time_scale": scale,
                     "window_start_s": start, "window_end_s": end, "max_requests": cap}
            if entry.format != "auto":
                trace["format"] = entry.format
            if entry.skip_long:
                trace["skip_long"] = True
            where = f"{entry.where} (time_scale={scale}, window=[{start}, {end}), max_requests={cap})"
            try:  # what the run itself does (fairsim.sweep.runs.execute)
                inp = load_trace_input(trace, profile)
            except (ValueError, OSError) as exc:
                raise s.error(where, spec_terms(str(exc))) from None
            reader = {f"fairsim: warning: {w}" for w in inp.trace.warnings}  # alike for every point
            for note in inp.notes:  # what `fairsim run` says: the reader's once, a point's with it
                text = spec_terms(note.removeprefix("fairsim: "))
                line = f"{entry.where if note in reader else where}: {text}"
                if line not in notes:
                    notes.append(line)
            for point in engines:
                at = f"{where}, engine ({_point(point)})" if point else where
                try:
                    config, _ = trace_engine(inp, point, profile)
                    check_capacity(point, inp.requests, config, profile)
                    check_fleet_input(point, inp.requests)
                except USER_ERRORS as exc:
                    raise s.error(at, spec_terms(str(exc))) from None
                loss = mapping_loss(inp.requests, config.block_size) if config.block_size else None
                if loss and f"{at}: warning: {spec_terms(loss)}" not in notes:  # run's warning
                    notes.append(f"{at}: warning: {spec_terms(loss)}")
            yield {"scenario": entry.name, "kind": "trace", "scenario_params": {}, "trace": trace,
                   "seed": None, "inputs": {}, "where": entry.where}
        for line in notes:
            print(f"fairsim: {s.source}: {line}", file=sys.stderr)


def expand(spec: dict[str, Any] | SweepSpec, source: str = "sweep spec") -> list[RunSpec]:
    """Every run of ``spec``, validated: workloads x policy points x engine points.

    Workloads are every scenario point (``params`` + a ``grid`` point) for every seed, then every
    trace file for every shaping combination (seeds do not apply to a file).

    Args:
        spec: A spec dict (``load_spec``) or an already parsed ``SweepSpec``.
        source: The spec's file name, for messages.

    Returns:
        The runs, in expansion order.

    Raises:
        SweepSpecError: Any invalid key, value or grid point (module docstring), or two entries
            that give the same run.
    """
    s = spec if isinstance(spec, SweepSpec) else parse_spec(spec, source)
    profile_text, profile_path, profile = _resolve_profile(s)
    profile_sha = file_sha256(profile_path)
    policies = _check_policies(s, profile)
    pol_inputs = {name: _policy_inputs(name) for _, name, _ in policies}
    engines = _check_engine(s)
    code = code_identity()
    runs: list[RunSpec] = []
    seen: dict[str, str] = {}
    for work in _workloads(s, profile, engines):
        for pol_where, policy, params in policies:
            for eng in engines:
                config = {k: v for k, v in work.items() if k != "where"}
                config["inputs"] = {**config["inputs"], **pol_inputs[policy]}
                config.update(policy=policy, policy_params=params, engine=eng,
                              profile=profile_text, profile_path=str(profile_path),
                              profile_sha256=profile_sha, code=code)
                rid = run_id(config)
                here = f"{work['where']} x {pol_where}"
                if rid in seen:
                    raise SweepSpecError(f"{s.source}: {here}: gives the same run as {seen[rid]} "
                                         f"({rid}); remove the duplicate entry")
                seen[rid] = here
                runs.append(RunSpec(run_id=rid, **config))
    return runs
