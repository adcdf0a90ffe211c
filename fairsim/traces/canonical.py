"""Write a trace in fairsim's canonical form: Mooncake-style JSONL plus a sidecar.

Each line is a Mooncake record (``timestamp`` ms, ``input_length``, ``output_length``,
``hash_ids`` with ``ceil(input_length / H)`` ids: the partial last block gets an id of its own,
as in Mooncake's files), so any tool that reads Mooncake reads it, plus ``request_id``, and where
present ``session_id``, ``after`` (the request this one waits for in closed loop) and ``delay``
(ms after ``after`` finishes; Dynamo's agentic field), ``segments`` (``[[content_id, tokens],
...]``, for traces with exact content spans such as RAGPulse: fairsim reads them back exact at any
block, other tools use ``hash_ids``), and one field per label. Blocks without a
recorded identity get fresh ids used nowhere else (they never hit).

The hash block size, whether time is absolute, the source file and its format go to the sidecar
``OUT.meta.json`` rather than a header line, because Mooncake readers take every line as a
request. fairsim's Mooncake reader reads the sidecar back, so ``load_trace(OUT)`` gives the same
requests.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from itertools import count
from pathlib import Path
from typing import Any

from fairsim import __version__
from fairsim.traces.formats._common import OBSERVED_OUTPUT
from fairsim.traces.formats.mooncake import sidecar_path
from fairsim.traces.segments import segment_block_keys
from fairsim.traces.trace import Trace

CANONICAL_KEYS = ("timestamp", "input_length", "output_length", "hash_ids", "request_id",
                  "session_id", "after", "delay", "segments")


def _ms(seconds: float) -> int | float:
    ms = round(seconds * 1000.0, 3)
    return int(ms) if ms == int(ms) else ms


#: Hash ids are unsigned 64-bit integers in Dynamo's and AIPerf's readers (and vLLM's block hashes).
U64_MAX = 2**64 - 1


def _fresh_ids(ids_of: list[list[int]]) -> Iterator[int]:
    """Ids used by no request: counting up from the largest id used, and once that would pass
    ``U64_MAX`` (a trace of u64 hashes, such as Dynamo's), the smallest ids not used."""
    top = max((h for ids in ids_of for h in ids), default=-1)
    yield from range(top + 1, U64_MAX + 1)
    used = {h for ids in ids_of for h in ids}
    yield from (k for k in count() if k not in used)


def write_canonical(trace: Trace, out: str | Path, *, block_size: int | None = None) -> dict[str, Any]:
    """Write ``trace`` to ``out`` (gzip when ``out`` ends with ``.gz``) and ``out.meta.json``.

    Args:
        trace: Any loaded trace.
        out: Output path.
        block_size: For traces with exact ``segments`` (RAGPulse): the hash block to write them
            at (default 16, vLLM's default block; exact at that size). Other traces keep their
            own hash block, and a different ``block_size`` is refused.

    Returns:
        The sidecar's content.

    Raises:
        ValueError: Mixed hash block sizes, a ``block_size`` for a trace without segments that
            differs from its hash block, a label named like a canonical field.
    """
    out = Path(out)
    reqs = trace.requests
    has_segments = any(r.segments for r in reqs)
    if has_segments:
        block = block_size or 16
    else:
        sizes = {r.hash_block_size for r in reqs} | ({trace.hash_block_size} if trace.hash_block_size else set())
        if len(sizes) > 1:
            raise ValueError(f"{trace.source}: mixes hash block sizes {sorted(sizes)}")
        block = sizes.pop() if sizes else 512
        if block_size is not None and block_size != block:
            raise ValueError(f"--block-size {block_size}: only traces with exact segments (RAGPulse) "
                             f"can be written at another block; this one's hash block is {block}")
    small: dict[int, int] = {}
    ids_of = []
    for r in reqs:
        if r.segments:
            ids = [small.setdefault(k, len(small)) for k in segment_block_keys(r.segments, block)]
        else:
            ids = list(r.block_hashes)
        ids_of.append(ids)
    fresh = _fresh_ids(ids_of)
    opener = gzip.open if out.name.endswith(".gz") else open
    with opener(out, "wt", encoding="utf-8") as fh:
        for r, ids in zip(reqs, ids_of):
            need = -(-r.prompt_len // block)
            extra = need - len(ids)
            ids = ids + [next(fresh) for _ in range(extra)]
            labels = dict(r.labels)
            output = 0 if labels.pop(OBSERVED_OUTPUT, None) == 0 else r.output_len
            row: dict[str, Any] = {"timestamp": _ms(r.arrival_time), "input_length": r.prompt_len,
                                   "output_length": output, "hash_ids": ids, "request_id": r.request_id}
            if r.session_id is not None:
                row["session_id"] = r.session_id
            if r.after is not None:
                row["after"] = r.after
                row["delay"] = _ms(r.delay_s)
            if r.segments:
                row["segments"] = [list(x) for x in r.segments]
            for key, value in labels.items():
                if key.startswith("_"):
                    continue  # private generator bookkeeping (e.g. _hash_ids)
                if key in CANONICAL_KEYS:
                    raise ValueError(f"{trace.source}: label {key!r} collides with a canonical field")
                row[key] = value
            fh.write(json.dumps(row) + "\n")
    meta = {"canonical": "fairsim/mooncake-jsonl", "hash_block_size": block,
            "absolute_time": trace.absolute_time, "requests": len(reqs), "source": trace.source,
            "source_format": trace.format, "skipped_records": len(trace.skipped),
            "warnings": list(trace.warnings), "fairsim_version": __version__}
    sidecar_path(out).write_text(json.dumps(meta, indent=2) + "\n")
    return meta
