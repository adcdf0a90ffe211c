"""Traces: load (every public format, ``formats/``), generate (RAG default input), and shape load.

No engine imports here (DESIGN.md layering). The generators (RAG, flood, mixed, multi-hop, SEC,
load shapes) are imported on first use of their names (``from fairsim.traces import
generate_rag`` works as before): a ``fairsim run`` on a trace file needs none of them (start-up
time).
"""

import importlib
from pathlib import Path

from fairsim.record import replace
from fairsim.traces.formats import FORMATS, detect, read_trace
from fairsim.traces.mooncake import load_mooncake
from fairsim.traces.shaping import OfferedLoad, offered_load, scale_time, window
from fairsim.traces.trace import Trace

_LAZY = {
    **dict.fromkeys(("DEFAULT_RAG_PATH", "RagSpec", "generate_rag", "write_mooncake"), "rag"),
    **dict.fromkeys(("FloodSpec", "generate_flood"), "flood"),
    **dict.fromkeys(("LoadShape", "Phase", "calm_burst_spike", "poisson"), "loadshape"),
    **dict.fromkeys(("MixedSpec", "generate_mixed"), "mixed"),
    **dict.fromkeys(("MultiHopSpec", "generate_multihop"), "multihop"),
    **dict.fromkeys(("SecSpec", "dynamic_sec_traces", "generate_sec"), "sec"),
}
"""Name -> the ``fairsim.traces`` module defining it, imported on first access (PEP 562)."""


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


def load_trace(path: str | Path | None = None, format: str = "auto", *, skip_bad: bool = False,
               hash_block_size: int | None = None, part: int | None = None) -> Trace:
    """Load a trace file or folder, or the embedded default RAG input when ``path`` is None.

    Args:
        path: The trace (any format of ``fairsim.traces.formats.FORMATS``; gzip is read by its
            magic bytes).
        format: ``"auto"`` (detect from the content) or a format name.
        skip_bad: Skip bad records (``Trace.skipped``) instead of raising.
        hash_block_size: Tokens per hash id for Mooncake-like files whose block is given out of
            band (default: what the format or the file records).
        part: Which part (1-based) of a file whose time axis restarts (RAGPulse weeks); see
            ``fairsim.traces.formats.read_trace``.

    Raises:
        TraceFormatError: A bad record (file, line or JSON path, field), unless ``skip_bad``.
        ValueError: An unknown format or content no reader recognises, or an empty ``path``.
        FileNotFoundError: ``path`` does not exist.
        OSError: ``path``, or a file in it, cannot be read (named).
    """
    if path is None:
        if part is not None:
            raise ValueError(f"--trace-part {part}: needs --trace (a RAGPulse file of several weeks)")
        from fairsim.traces.rag import DEFAULT_RAG_PATH

        trace = load_mooncake(DEFAULT_RAG_PATH, skip_bad=skip_bad)
        return replace(trace, name="rag-default")
    if str(path) == "":  # an empty shell variable, not the current folder
        raise ValueError("the trace path is empty (--trace \"\")")
    try:
        return read_trace(path, format, skip_bad=skip_bad, hash_block_size=hash_block_size, part=part)
    except PermissionError as exc:  # a folder (or a file in one) this user may not read
        where = exc.filename if exc.filename is not None else path
        raise OSError(f"{path}: cannot read{f' {where}' if str(where) != str(path) else ''}: permission denied") from None


__all__ = [
    "FloodSpec",
    "LoadShape",
    "MixedSpec",
    "MultiHopSpec",
    "Phase",
    "SecSpec",
    "calm_burst_spike",
    "dynamic_sec_traces",
    "generate_flood",
    "generate_mixed",
    "generate_multihop",
    "generate_sec",
    "poisson",
    "DEFAULT_RAG_PATH",
    "FORMATS",
    "detect",
    "read_trace",
    "OfferedLoad",
    "RagSpec",
    "Trace",
    "generate_rag",
    "load_mooncake",
    "load_trace",
    "offered_load",
    "scale_time",
    "window",
    "write_mooncake",
]
