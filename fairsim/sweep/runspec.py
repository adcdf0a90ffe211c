"""One run of a sweep (``RunSpec``) and its id, which covers everything its result depends on.

A run id is ``WORKLOAD[-sSEED]-POLICY-HASH``; ``HASH`` (12 hex digits of SHA-256) covers the
canonical JSON of: the workload (scenario name and parameters, or the trace's *content* hash,
every file of a trace folder included: ``trace_sha256``, and its shaping), the seed, the policy
and its parameters, the engine overrides, the profile file's *content* hash, the content hash
of any data file the scenario reads, fairsim's version and a digest of fairsim's source code.
So a resumed sweep reuses a result only when nothing it was computed from has changed; an edited
profile, trace or policy gives a new id and a new run.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import fairsim


@dataclass(frozen=True)
class RunSpec:
    """One point of a sweep (JSON-serialisable fields only, so it travels to any worker).

    Attributes:
        run_id: Stable id (module docstring).
        scenario: The workload's name: a ``fairsim.scenarios`` name, or the trace's label.
        kind: ``"scenario"`` or ``"trace"``.
        scenario_params: Scenario builder parameters (empty for a trace).
        trace: For a trace run: ``path`` (absolute; a file or folder), ``format`` (only when
            not ``auto``), ``skip_long`` (only when true), ``sha256`` (``trace_sha256``), ``time_scale``,
            ``window_start_s``, ``window_end_s`` (None = to the end), ``max_requests`` (None =
            all); else None.
        seed: Workload seed (None for a trace run: a file has no seed).
        policy: Policy name.
        policy_params: Policy parameters.
        engine: The ``[engine]`` overrides of this run (on top of the workload's settings).
        profile: Profile as written in the spec (shipped name or path).
        profile_path: The profile file read (absolute).
        profile_sha256: SHA-256 of that file's bytes.
        inputs: ``{absolute path: sha256}`` of data files the scenario reads (real traces).
        code: ``fairsim.__version__`` and the source digest (``code_digest``).
    """

    run_id: str
    scenario: str
    kind: str
    scenario_params: dict[str, Any]
    trace: dict[str, Any] | None
    seed: int | None
    policy: str
    policy_params: dict[str, Any]
    engine: dict[str, Any]
    profile: str
    profile_path: str
    profile_sha256: str
    inputs: dict[str, str]
    code: dict[str, str]

    def to_json(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict."""
        return asdict(self)

    def parameters(self) -> dict[str, Any]:
        """The run's parameters, one column each, for tables and ``--dry-run``.

        ``scenario``, ``trace`` (path), ``seed``, ``policy``, then ``scenario.KEY``,
        ``trace.time_scale`` / ``trace.window_start_s`` / ``trace.window_end_s`` /
        ``trace.max_requests`` (and ``trace.format``, ``trace.skip_long`` when given),
        ``policy.KEY`` and
        ``engine.KEY`` for every value the run sets.
        """
        out: dict[str, Any] = {"scenario": self.scenario,
                               "trace": self.trace["path"] if self.trace else None,
                               "seed": self.seed, "policy": self.policy}
        out.update({f"scenario.{k}": _cell(v) for k, v in self.scenario_params.items()})
        if self.trace:
            out.update({f"trace.{k}": self.trace[k] for k in
                        ("format", "time_scale", "window_start_s", "window_end_s", "max_requests",
                         "skip_long")
                        if k in self.trace})
        out.update({f"policy.{k}": _cell(v) for k, v in self.policy_params.items()})
        out.update({f"engine.{k}": _cell(v) for k, v in self.engine.items()})
        return out


def _cell(value: Any) -> Any:
    """Lists and tables as JSON text, so every parameter fits one table cell."""
    return json.dumps(value, sort_keys=True) if isinstance(value, (list, dict)) else value


def file_sha256(path: str | Path) -> str:
    """SHA-256 hex digest of a file's bytes (read in 1 MiB chunks).

    Raises:
        OSError: The file cannot be read.
    """
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def trace_sha256(path: str | Path, format: str = "auto") -> str:
    """SHA-256 hex digest of everything a trace reader reads at ``path`` (``fairsim run --trace``).

    A file: its bytes (``file_sha256``), and for a RAGPulse trace file also the side files beside
    it that the reader reads (``fairsim.traces.formats.ragpulse.SIDE_FILES``; ``format`` as
    ``--trace-format``, ``"auto"``: detected from the content). A folder (Claude Code sessions,
    a RAGPulse data folder): every regular file directly in it (the folder readers read no
    subfolder, so a sweep's output folder kept inside does not count), as the SHA-256 of the
    sorted lines ``NAME NUL FILE_SHA256``, so editing, adding, removing or renaming a file
    changes it.

    Raises:
        OSError: A file cannot be read.
    """
    path = Path(path)
    if path.is_dir():
        files = sorted((p for p in path.iterdir() if p.is_file()), key=lambda p: p.name)
        return _listing_sha256([(p.name, p) for p in files])
    from fairsim.traces.formats import detect, ragpulse

    try:
        side = (detect(path) if format == "auto" else format) == ragpulse.NAME
    except ValueError:  # no format recognised: the reader refuses it, the bytes stand for it
        side = False
    if not side:
        return file_sha256(path)
    files = [(path.name, path)] + [(name, path.parent / name) for name in ragpulse.SIDE_FILES
                                   if (path.parent / name).is_file()]
    return _listing_sha256(files)


def _listing_sha256(files: list[tuple[str, Path]]) -> str:
    h = hashlib.sha256()
    for name, file in files:
        h.update(f"{name}\0{file_sha256(file)}\n".encode())
    return h.hexdigest()


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """SHA-256 (16 hex digits) over every ``.py`` file of the installed ``fairsim`` package.

    Any change to fairsim's code (a policy, the engine, a generator) changes every run id, so a
    resumed sweep never mixes results of two code versions.
    """
    root = Path(fairsim.__file__).resolve().parent
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def code_identity() -> dict[str, str]:
    """``{"version": fairsim.__version__, "source": code_digest()}``."""
    return {"version": fairsim.__version__, "source": code_digest()}


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._") or "run"


def run_id(config: dict[str, Any]) -> str:
    """The id of the run described by ``config`` (``RunSpec`` fields but ``run_id``).

    ``WORKLOAD-sSEED-POLICY-HASH12`` (``WORKLOAD-POLICY-HASH12`` for a trace run); the hash
    covers ``config``'s canonical JSON minus the absolute paths (content hashes stand for them,
    so a moved file keeps its results).
    """
    hashed = {k: v for k, v in config.items() if k not in ("profile_path", "profile")}
    if hashed.get("trace"):
        hashed["trace"] = {k: v for k, v in hashed["trace"].items() if k != "path"}
    hashed["inputs"] = sorted(config.get("inputs", {}).values())
    digest = hashlib.sha256(json.dumps(hashed, sort_keys=True).encode()).hexdigest()[:12]
    seed = f"-s{config['seed']}" if config.get("seed") is not None else ""
    return f"{_safe(config['scenario'])}{seed}-{_safe(config['policy'])}-{digest}"
