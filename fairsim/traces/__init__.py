"""Traces: load (every public format, ``formats/``), generate (RAG default input), and shape load.

No engine imports here (DESIGN.md layering).
"""

import dataclasses
from pathlib import Path

from fairsim.traces.formats import FORMATS, detect, read_trace
from fairsim.traces.mooncake import load_mooncake
from fairsim.traces.rag import DEFAULT_RAG_PATH, RagSpec, generate_rag, write_mooncake
from fairsim.traces.shaping import OfferedLoad, offered_load, scale_time, window
from fairsim.traces.trace import Trace
from fairsim.traces.flood import FloodSpec, generate_flood
from fairsim.traces.loadshape import LoadShape, Phase, calm_burst_spike, poisson
from fairsim.traces.mixed import MixedSpec, generate_mixed
from fairsim.traces.multihop import MultiHopSpec, generate_multihop
from fairsim.traces.sec import SecSpec, dynamic_sec_traces, generate_sec


def load_trace(path: str | Path | None = None, format: str = "auto", *, skip_bad: bool = False,
               hash_block_size: int | None = None) -> Trace:
    """Load a trace file or folder, or the embedded default RAG input when ``path`` is None.

    Args:
        path: The trace (any format of ``fairsim.traces.formats.FORMATS``; gzip is read by its
            magic bytes).
        format: ``"auto"`` (detect from the content) or a format name.
        skip_bad: Skip bad records (``Trace.skipped``) instead of raising.
        hash_block_size: Tokens per hash id for Mooncake-like files whose block is given out of
            band (default: what the format or the file records).

    Raises:
        TraceFormatError: A bad record (file, line or JSON path, field), unless ``skip_bad``.
        ValueError: An unknown format or content no reader recognises.
        FileNotFoundError: ``path`` does not exist.
    """
    if path is None:
        trace = load_mooncake(DEFAULT_RAG_PATH, skip_bad=skip_bad)
        return dataclasses.replace(trace, name="rag-default")
    return read_trace(path, format, skip_bad=skip_bad, hash_block_size=hash_block_size)


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
