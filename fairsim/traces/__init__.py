"""Traces: load (Mooncake JSONL), generate (RAG default input), and shape load.

No engine imports here (DESIGN.md layering).
"""

from fairsim.traces.mooncake import load_mooncake
from fairsim.traces.rag import DEFAULT_RAG_PATH, RagSpec, generate_rag, write_mooncake
from fairsim.traces.shaping import OfferedLoad, offered_load, scale_time, window
from fairsim.traces.trace import Trace
from fairsim.traces.flood import FloodSpec, generate_flood
from fairsim.traces.loadshape import LoadShape, Phase, calm_burst_spike, poisson
from fairsim.traces.mixed import MixedSpec, generate_mixed
from fairsim.traces.multihop import MultiHopSpec, generate_multihop
from fairsim.traces.sec import SecSpec, dynamic_sec_traces, generate_sec


def load_trace(path: str | None = None, *, skip_bad: bool = False) -> Trace:
    """Load a trace file, or the embedded default RAG input when ``path`` is None.

    Raises:
        TraceFormatError: A bad record (file:line:field), unless ``skip_bad``.
        ValueError: A CSV or compressed file (only Mooncake JSONL is read here), a directory.
    """
    if path is None:
        trace = load_mooncake(DEFAULT_RAG_PATH, skip_bad=skip_bad)
        return Trace("rag-default", trace.source, trace.requests, trace.skipped)
    if str(path).lower().endswith((".csv", ".gz", ".zst", ".xz", ".parquet")):
        raise ValueError(f"{path}: unsupported trace format (expected Mooncake JSONL: one JSON "
                         f"object per line with timestamp, input_length, output_length, hash_ids)")
    return load_mooncake(path, skip_bad=skip_bad)


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
