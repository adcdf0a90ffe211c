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
import io
import json
import math
from collections.abc import Iterator, Sequence
from itertools import count
from pathlib import Path
from typing import IO, Any

from fairsim import __version__
from fairsim.errors import TraceFormatError
from fairsim.io import atomic_write, atomic_write_text
from fairsim.traces.formats._common import OBSERVED_OUTPUT
from fairsim.traces.formats.mooncake import sidecar_path
from fairsim.traces.segments import segment_block_keys
from fairsim.traces.trace import Trace
from fairsim.types import Request

CANONICAL_KEYS = ("timestamp", "input_length", "output_length", "hash_ids", "request_id",
                  "session_id", "after", "delay", "segments")


def _ms(seconds: float) -> int | float:
    """``seconds`` in milliseconds, as a number that reads back as ``seconds`` to the bit where
    a double does: the Mooncake reader takes ``ms / 1000.0``, so the product's double or one of
    its two neighbours on each side that divides back exactly (about 2 values in 100 have none,
    where the doubles near ``1000 x`` are further apart than those near ``x``: the product
    itself, then one unit in the last place off). Written as an int where integral (``json`` writes the shortest
    digits that read back as the double)."""
    ms = seconds * 1000.0
    if ms / 1000.0 != seconds and math.isfinite(ms):
        up = down = ms
        for _ in range(2):
            up, down = math.nextafter(up, math.inf), math.nextafter(down, -math.inf)
            if up / 1000.0 == seconds:
                ms = up
                break
            if down / 1000.0 == seconds:
                ms = down
                break
    return int(ms) if ms.is_integer() and abs(ms) < 2**53 else ms


#: Hash ids are unsigned 64-bit integers in Dynamo's and AIPerf's readers (and vLLM's block hashes).
U64_MAX = 2**64 - 1


def _fresh_ids(ids_of: list[list[int]]) -> Iterator[int]:
    """Ids used by no request: counting up from the largest id used in ``0..U64_MAX``, and once
    that would pass ``U64_MAX`` (a trace of u64 hashes, such as Dynamo's), the smallest ids not
    used."""
    top = max((h for ids in ids_of for h in ids if 0 <= h <= U64_MAX), default=-1)
    yield from range(top + 1, U64_MAX + 1)
    used = {h for ids in ids_of for h in ids}
    yield from (k for k in count() if k not in used)


def write_canonical(trace: Trace, out: str | Path, *, block_size: int | None = None) -> dict[str, Any]:
    """Write ``trace`` to ``out`` (gzip when ``out`` ends with ``.gz``) and ``out.meta.json``.

    Each file is written to a temporary file next to it and renamed into place, and the trace is
    checked before either is written: a refused trace leaves an earlier ``out`` as it was. Hash
    ids outside ``0..2**64-1`` (fairsim's readers take any integer; Dynamo's and AIPerf's need
    unsigned 64-bit) are written as fresh ids, one per distinct id, so the same blocks are shared;
    the sidecar's ``remapped_hash_ids`` counts them.

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
            differs from its hash block.
        TraceFormatError: A label named like a canonical field (a ``ValueError`` naming the
            request where the trace does not record where it was read).
        OutputError: A file cannot be written (``fairsim.io.atomic_write``).
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
    for r in reqs:  # before anything is written: a refused trace leaves OUT as it was
        for key in r.labels:
            if key in CANONICAL_KEYS:
                _refuse_label(trace, r.request_id, key)
    small: dict[int, int] = {}
    ids_of = []
    for r in reqs:
        if r.segments:
            ids = [small.setdefault(k, len(small)) for k in segment_block_keys(r.segments, block)]
        else:
            ids = list(r.block_hashes)
        ids_of.append(ids)
    fresh = _fresh_ids(ids_of)
    remapped = _remap_outside_u64(ids_of, fresh)

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as raw:
            # gzip's header names OUT, not the temporary file (GzipFile drops the ``.gz``)
            binary = gzip.GzipFile(filename=out.name, mode="wb", fileobj=raw) if out.name.endswith(".gz") else raw
            with io.TextIOWrapper(binary, encoding="utf-8", newline="\n") as fh:
                _write_rows(fh, reqs, ids_of, block, fresh)

    atomic_write(out, write)
    meta = {"canonical": "fairsim/mooncake-jsonl", "hash_block_size": block,
            "absolute_time": trace.absolute_time, "requests": len(reqs), "source": trace.source,
            "source_format": trace.format, "skipped_records": len(trace.skipped),
            "warnings": list(trace.warnings), "fairsim_version": __version__}
    if remapped:
        meta["remapped_hash_ids"] = remapped
    atomic_write_text(sidecar_path(out), json.dumps(meta, indent=2) + "\n")
    return meta


def _refuse_label(trace: Trace, request_id: str, key: str) -> None:
    """Raise for a label named like a canonical field, naming the record where it was read."""
    why = (f"collides with a canonical field of the converted file ({', '.join(CANONICAL_KEYS)}); "
           "rename it in the source")
    where = trace.locations.get(request_id)
    if where is not None:
        raise TraceFormatError(trace.source, where, key, why)
    raise ValueError(f"{trace.source}: request {request_id!r}: label {key!r} {why}")


def _remap_outside_u64(ids_of: list[list[int]], fresh: Iterator[int]) -> int:
    """Give every hash id outside ``0..U64_MAX`` (fairsim's readers take any integer) a fresh id,
    the same one wherever it occurs, so the written ids are unsigned 64-bit and the requests share
    exactly the blocks they shared. Returns how many distinct ids were remapped."""
    new: dict[int, int] = {}
    for ids in ids_of:
        for i, h in enumerate(ids):
            if not 0 <= h <= U64_MAX:
                if h not in new:
                    new[h] = next(fresh)
                ids[i] = new[h]
    return len(new)


def _write_rows(fh: IO[str], reqs: Sequence[Request], ids_of: list[list[int]], block: int,
                fresh: Iterator[int]) -> None:
    """One JSON line per request (module docstring); partial last blocks get ids from ``fresh``."""
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
            if not key.startswith("_"):  # private generator bookkeeping (e.g. _hash_ids)
                row[key] = value
        fh.write(json.dumps(row) + "\n")
