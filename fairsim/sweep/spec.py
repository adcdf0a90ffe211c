"""Read and check the structure of a sweep spec (keys, types), before anything runs.

``load_spec`` parses a TOML or YAML file (syntax errors name the file and line);
``parse_spec`` checks every key and value type and returns a ``SweepSpec``. What needs the rest
of fairsim (policy and scenario names, ``EngineConfig`` values, trace files) is checked by
``fairsim.sweep.plan`` when it expands the grid. Every problem raises ``SweepSpecError`` naming
the spec file and the key path, e.g. ``spec.toml: policies[1].grd: unknown key; expected name,
params, grid``.

Spec keys (docs/sweeps.md documents them for users):

- ``out`` (string), ``name`` (string, a label), ``profile`` (shipped name or JSON path),
  ``seeds`` (integer >= 0 or a list of them; default ``[0]``).
- ``scenarios``: list of names or tables ``{name, params, grid}``.
- ``traces``: list of tables ``{path, name, time_scale, window, max_requests}``; ``time_scale``
  and ``max_requests`` may be lists, ``window`` a ``[start_s, end_s]`` pair or a list of pairs
  (one run per value).
- ``policies``: list of names or tables ``{name, params, grid}``.
- ``engine``: table of ``EngineConfig`` fields (plus ``kv_tokens``), each a value or a list.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fairsim.errors import SweepSpecError
from fairsim.policies.space import same_value_key

TOP_KEYS = ("out", "name", "profile", "seeds", "scenarios", "traces", "policies", "engine")
ENTRY_KEYS = ("name", "params", "grid")
TRACE_KEYS = ("path", "name", "format", "time_scale", "window", "max_requests", "skip_long")


@dataclass(frozen=True)
class Entry:
    """A scenario or policy of the spec.

    Attributes:
        name: Registered scenario or policy name.
        params: Fixed parameters (JSON values).
        grid: ``{parameter: [values]}``; one run per point of the cartesian product.
        where: Key path in the spec, for messages (``"policies[1]"``).
    """

    name: str
    params: dict[str, Any]
    grid: dict[str, list[Any]]
    where: str


@dataclass(frozen=True)
class TraceEntry:
    """A trace file of the spec, with its load-shaping values (one run per combination).

    Attributes:
        path: The file or folder as written in the spec (relative paths: from the current
            folder), anything ``fairsim run --trace`` reads.
        name: Label used in run ids and tables (default: the file name without suffix).
        format: ``fairsim run --trace-format``: ``"auto"`` (detect from the content) or a name
            of ``fairsim.traces.formats.FORMATS``.
        time_scales: Arrival-time factors (> 0; > 1 stretches the trace, lowering the load).
        windows: ``(start_s, end_s)`` pairs of trace time, seconds, ``end_s`` None = to the end.
        max_requests: Request caps (None = all).
        skip_long: ``fairsim run --skip-long``: drop (and count) prompts that do not fit the
            profile's ``max_model_len`` instead of refusing the trace.
        where: Key path in the spec (``"traces[0]"``).
    """

    path: str
    name: str
    format: str
    time_scales: list[float]
    windows: list[tuple[float, float | None]]
    max_requests: list[int | None]
    skip_long: bool
    where: str


@dataclass(frozen=True)
class SweepSpec:
    """A structurally valid sweep spec (``parse_spec``'s result).

    Attributes:
        source: The spec file (or ``"sweep spec"`` for a spec given as a dict), for messages.
        out: Output folder from the spec, or None.
        name: Free label, or None.
        profile: Profile name or path, or None (the default profile).
        seeds: Workload seeds (integers >= 0, no repeats), applied to scenarios.
        scenarios: Scenario entries.
        traces: Trace-file entries.
        policies: Policy entries.
        engine: ``{EngineConfig field: [values]}``; one run per point.
        raw: The spec as read, for ``spec.json``.
    """

    source: str
    out: str | None
    name: str | None
    profile: str | None
    seeds: list[int]
    scenarios: list[Entry]
    traces: list[TraceEntry]
    policies: list[Entry]
    engine: dict[str, list[Any]]
    raw: dict[str, Any] = field(repr=False)

    def error(self, where: str, reason: str) -> SweepSpecError:
        """A ``SweepSpecError`` reading ``SOURCE: WHERE: REASON``."""
        return SweepSpecError(f"{self.source}: {where}: {reason}")


def load_spec(path: str | Path) -> dict[str, Any]:
    """Read a sweep spec file (``.toml``, or ``.yaml``/``.yml`` with PyYAML installed).

    Returns:
        The spec as a dict (not yet checked; see ``parse_spec``).

    Raises:
        SweepSpecError: A missing or unreadable file, another suffix, a TOML/YAML syntax error
            (``FILE:LINE: ...``), a YAML spec without PyYAML, or a document that is not a table.
    """
    path = Path(path)
    if path.suffix not in (".toml", ".yaml", ".yml"):
        raise SweepSpecError(f"{path}: sweep spec must be .toml, .yaml or .yml")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SweepSpecError(f"{path}: no such sweep spec file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SweepSpecError(f"{path}: cannot read the sweep spec: {exc}") from None
    if path.suffix == ".toml":
        import tomllib

        try:
            data: Any = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            msg = str(exc)
            m = re.search(r"\(at line (\d+), column (\d+)\)", msg)
            where = f"{path}:{m.group(1)}" if m else str(path)
            raise SweepSpecError(f"{where}: not valid TOML: {msg}") from None
    else:
        try:
            import yaml
        except ImportError:
            raise SweepSpecError(f"{path}: YAML specs need PyYAML (pip install pyyaml), or "
                                 "write the spec in TOML") from None
        try:
            data = yaml.load(text, Loader=_unique_keys_loader(yaml))
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
            problem = getattr(exc, "problem", None) or str(exc)
            raise SweepSpecError(f"{where}: not valid YAML: {problem}") from None
        data = {} if data is None else data
    if not isinstance(data, dict):
        raise SweepSpecError(f"{path}: a sweep spec is a table of keys (out, seeds, scenarios, "
                             f"policies, ...), not a {type(data).__name__}")
    return data


def _unique_keys_loader(yaml: Any) -> Any:
    """PyYAML's safe loader refusing a key given twice in one mapping (PyYAML keeps the last
    silently; TOML refuses it), so a spec's second ``policies:`` is not dropped without a word."""

    class UniqueKeys(yaml.SafeLoader):
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            if isinstance(node, yaml.MappingNode):
                first: dict[Any, Any] = {}
                for key_node, _ in node.value:
                    if key_node.tag == "tag:yaml.org,2002:merge":  # ``<<: *base`` merges, not a key
                        continue
                    key = self.construct_object(key_node, deep=True)
                    try:
                        earlier = first.setdefault(key, key_node)
                    except TypeError:  # an unhashable key: PyYAML's own error follows
                        continue
                    if earlier is not key_node:
                        raise yaml.constructor.ConstructorError(
                            None, None, f"key {key!r} given twice (first at line {earlier.start_mark.line + 1})",
                            key_node.start_mark)
            return super().construct_mapping(node, deep=deep)

    return UniqueKeys


def _kind(value: Any) -> str:
    import datetime

    if isinstance(value, (datetime.date, datetime.time)):
        return f"a {type(value).__name__} ({value.isoformat()})"
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
            list: "a list", dict: "a table"}.get(type(value), type(value).__name__)


class _Checker:
    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, where: str, reason: str) -> SweepSpecError:
        return SweepSpecError(f"{self.source}: {where}: {reason}")

    def keys(self, table: dict[str, Any], known: tuple[str, ...], where: str) -> None:
        for key in table:
            if key not in known:
                path = f"{where}.{key}" if where else str(key)
                raise self.fail(path, f"unknown key; expected {', '.join(known)}")

    def table(self, value: Any, where: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(where, f"expected a table, got {_kind(value)} {value!r}")
        for key in value:
            if not isinstance(key, str):
                raise self.fail(where, f"key {key!r} is not a string")
        return value

    def string(self, value: Any, where: str) -> str:
        if not isinstance(value, str) or not value:
            raise self.fail(where, f"expected a non-empty string, got {_kind(value)} {value!r}")
        return value

    def json_value(self, value: Any, where: str) -> Any:
        """A JSON-like value (what a run id hashes); NaN/inf and dates are refused."""
        if isinstance(value, float) and not math.isfinite(value):
            raise self.fail(where, f"{value} is not a finite number")
        if isinstance(value, (str, int, float, bool)) or value is None:
            return value
        if isinstance(value, list):
            return [self.json_value(v, f"{where}[{i}]") for i, v in enumerate(value)]
        if isinstance(value, dict):
            return {k: self.json_value(v, f"{where}.{k}") for k, v in self.table(value, where).items()}
        raise self.fail(where, f"{_kind(value)} is not allowed (use numbers, strings, "
                               "booleans, lists or tables)")

    def axis(self, value: Any, where: str) -> list[Any]:
        """A grid axis: a list (one run per value, at least one) or a single value."""
        value = self.json_value(value, where)
        if isinstance(value, list):
            if not value:
                raise self.fail(where, "empty list: a grid axis needs at least one value")
            # A value listed twice (4 and 4.0 included: one simulation) would be one point run
            # twice or once, not the grid asked for; refused as a repeated seed is.
            if len(set(map(same_value_key, value))) < len(value):
                raise self.fail(where, f"{json.dumps(value)}: a value is listed twice")
            return value
        return [value]

    def boolean(self, value: Any, where: str) -> bool:
        if not isinstance(value, bool):
            raise self.fail(where, f"expected true or false, got {_kind(value)} {value!r}")
        return value

    def integer(self, value: Any, where: str, minimum: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(where, f"expected an integer >= {minimum}, got {_kind(value)} {value!r}")
        if value < minimum:
            raise self.fail(where, f"{value}: expected an integer >= {minimum}")
        return value

    def number(self, value: Any, where: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise self.fail(where, f"expected a finite number, got {_kind(value)} {value!r}")
        return float(value)

    def items(self, value: Any, where: str, required: str, allowed: Any,
              expected: str) -> list[tuple[str, dict]]:
        """A list of tables, each as ``(where, table)``: a lone string or table is a list of one,
        a string is ``{required: string}``; unknown keys and a missing ``required`` are refused."""
        if isinstance(value, (str, dict)):
            value = [value]
        if not isinstance(value, list):
            raise self.fail(where, f"expected {expected}, got {_kind(value)}")
        out = []
        for i, item in enumerate(value):
            at = f"{where}[{i}]"
            item = self.table({required: item} if isinstance(item, str) else item, at)
            self.keys(item, allowed, at)
            if required not in item:
                raise self.fail(at, f"missing key '{required}'")
            out.append((at, item))
        return out

    def entries(self, value: Any, where: str) -> list[Entry]:
        out = []
        for at, item in self.items(value, where, "name", ENTRY_KEYS, "a list of names or tables"):
            name = self.string(item["name"], f"{at}.name")
            params = self.json_value(self.table(item.get("params", {}), f"{at}.params"), f"{at}.params")
            grid_in = self.table(item.get("grid", {}), f"{at}.grid")
            grid = {k: self.axis(v, f"{at}.grid.{k}") for k, v in grid_in.items()}
            for key in grid:
                if key in params:
                    raise self.fail(f"{at}.grid.{key}", "also given in params; give it in one place")
            out.append(Entry(name, params, grid, at))
        return out

    def traces(self, value: Any, where: str) -> list[TraceEntry]:
        out = []
        for at, item in self.items(value, where, "path", TRACE_KEYS, "a list of tables with a path"):
            path = self.string(item["path"], f"{at}.path")
            name = self.string(item.get("name", Path(path).name.split(".")[0] or path), f"{at}.name")
            fmt = self.string(item.get("format", "auto"), f"{at}.format")
            from fairsim.traces.formats import FORMATS

            if fmt != "auto" and fmt not in FORMATS:
                raise self.fail(f"{at}.format", f"unknown format {fmt!r}; known: auto, {', '.join(FORMATS)}")
            scales = []
            for j, v in enumerate(self.axis(item.get("time_scale", 1.0), f"{at}.time_scale")):
                s = self.number(v, f"{at}.time_scale[{j}]")
                if not s > 0:
                    raise self.fail(f"{at}.time_scale[{j}]", f"{v}: need a factor > 0")
                scales.append(s)
            caps = [None if v is None else self.integer(v, f"{at}.max_requests[{j}]", 1)
                    for j, v in enumerate(self.axis(item.get("max_requests"), f"{at}.max_requests"))]
            skip_long = self.boolean(item.get("skip_long", False), f"{at}.skip_long")
            out.append(TraceEntry(path, name, fmt, scales, self.windows(item.get("window"), f"{at}.window"),
                                  caps, skip_long, at))
        return out

    def windows(self, value: Any, where: str) -> list[tuple[float, float | None]]:
        """``[start, end]`` or a list of such pairs; ``end`` may be omitted (``[start]``)."""
        if value is None:
            return [(0.0, None)]
        value = self.json_value(value, where)
        nested = isinstance(value, list) and bool(value) and all(isinstance(v, list) for v in value)
        pairs = value if nested else [value]
        out = []
        for j, pair in enumerate(pairs):
            at = f"{where}[{j}]" if nested else where
            if not isinstance(pair, list) or len(pair) not in (1, 2):
                raise self.fail(at, f"expected [start_s, end_s] (seconds of trace time), got {pair!r}")
            start = self.number(pair[0], at)
            end = self.number(pair[1], at) if len(pair) == 2 else None
            if start < 0 or (end is not None and end <= start):
                raise self.fail(at, f"window [{start}, {end}) is empty or negative")
            out.append((start, end))
        return out


def parse_spec(data: dict[str, Any], source: str = "sweep spec") -> SweepSpec:
    """Check a spec's keys and value types; return it normalised.

    Args:
        data: The spec (``load_spec``'s result, or a dict built in Python).
        source: What to call the spec in messages (its file name).

    Raises:
        SweepSpecError: An unknown key at any level, a value of the wrong type, a non-finite
            number, no policy, no scenario or trace, a seed that is not an integer >= 0, or a
            repeated seed.
    """
    c = _Checker(source)
    data = c.table(data, "(top level)")
    c.keys(data, TOP_KEYS, "")
    out = c.string(data["out"], "out") if "out" in data else None
    name = c.string(data["name"], "name") if "name" in data else None
    profile = c.string(data["profile"], "profile") if "profile" in data else None
    raw_seeds = data.get("seeds", [0])
    raw_seeds = raw_seeds if isinstance(raw_seeds, list) else [raw_seeds]
    if not raw_seeds:
        raise c.fail("seeds", "empty list; give at least one seed (default [0])")
    seeds = [c.integer(s, f"seeds[{i}]", 0) for i, s in enumerate(raw_seeds)]
    if len(set(seeds)) != len(seeds):
        raise c.fail("seeds", f"{seeds}: a seed is listed twice")
    scenarios = c.entries(data["scenarios"], "scenarios") if "scenarios" in data else []
    traces = c.traces(data["traces"], "traces") if "traces" in data else []
    if not scenarios and not traces:
        raise c.fail("(top level)", "nothing to run: give at least one entry in 'scenarios' or 'traces'")
    if "policies" not in data:
        raise c.fail("(top level)", "missing key 'policies' (a list of policy names or tables)")
    policies = c.entries(data["policies"], "policies")
    if not policies:
        raise c.fail("policies", "empty list; give at least one policy")
    engine_in = c.table(data.get("engine", {}), "engine")
    engine = {k: c.axis(v, f"engine.{k}") for k, v in engine_in.items()}
    return SweepSpec(source, out, name, profile, seeds, scenarios, traces, policies, engine, data)
