"""Load Mooncake-format JSONL traces (kvcache-ai/Mooncake ``FAST25-release/traces``).

One request per line: ``{"timestamp": ms, "input_length": tokens, "output_length": tokens,
"hash_ids": [...]}``; ``hash_ids`` are prefix hashes of 512-token blocks, one per started block
(``len(hash_ids) == ceil(input_length / 512)``). The last block is partial when ``input_length`` is
not a multiple of 512 and is then not cacheable, so its id is dropped. Any other field of a record
(e.g. ``doc_id``, ``klass`` in fairsim's generated traces) becomes a label.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from fairsim.errors import TraceFormatError
from fairsim.traces.trace import Trace
from fairsim.types import Request

MOONCAKE_BLOCK_TOKENS = 512
_KNOWN = ("timestamp", "input_length", "output_length", "hash_ids")


def _int_field(rec: dict[str, Any], name: str, path: str, line: int, minimum: int) -> int:
    if name not in rec:
        raise TraceFormatError(path, line, name, "missing")
    value = rec[name]
    if isinstance(value, bool) or not isinstance(value, int):
        raise TraceFormatError(path, line, name, f"must be an integer, got {value!r}")
    if value < minimum:
        kind = "negative" if value < 0 else "too small"
        raise TraceFormatError(path, line, name, f"{kind}: {value} (need >= {minimum})")
    return value


def parse_record(
    rec: Any, path: str, line: int, previous_ms: float, block_tokens: int = MOONCAKE_BLOCK_TOKENS
) -> Request:
    """Validate one decoded JSON record and build its ``Request``.

    Args:
        rec: The decoded JSON value of the line.
        path: File name for error messages.
        line: 1-based line number.
        previous_ms: Timestamp of the previous accepted record (ms); timestamps must not decrease.
        block_tokens: Tokens per ``hash_ids`` entry.

    Raises:
        TraceFormatError: Naming ``path:line`` and the field.
    """
    if not isinstance(rec, dict):
        raise TraceFormatError(path, line, "<json>", f"expected an object, got {type(rec).__name__}")
    if "timestamp" not in rec:
        raise TraceFormatError(path, line, "timestamp", "missing")
    ts = rec["timestamp"]
    if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not math.isfinite(ts):
        raise TraceFormatError(path, line, "timestamp", f"must be a number of ms, got {ts!r}")
    if ts < 0:
        raise TraceFormatError(path, line, "timestamp", f"negative: {ts}")
    if ts < previous_ms:
        raise TraceFormatError(
            path, line, "timestamp", f"decreases: {ts} ms after {previous_ms} ms on an earlier line"
        )
    prompt_len = _int_field(rec, "input_length", path, line, 1)
    output_len = _int_field(rec, "output_length", path, line, 1)
    if "hash_ids" not in rec:
        raise TraceFormatError(path, line, "hash_ids", "missing")
    hash_ids = rec["hash_ids"]
    if not isinstance(hash_ids, list) or not all(
        isinstance(h, int) and not isinstance(h, bool) for h in hash_ids
    ):
        raise TraceFormatError(path, line, "hash_ids", "must be a list of integers")
    expected = -(-prompt_len // block_tokens)
    if len(hash_ids) != expected:
        raise TraceFormatError(
            path, line, "hash_ids",
            f"has {len(hash_ids)} ids but input_length={prompt_len} spans {expected} blocks of "
            f"{block_tokens} tokens",
        )
    labels = {k: v for k, v in rec.items() if k not in _KNOWN}
    return Request(
        request_id=str(rec.get("request_id", f"{Path(path).stem}:{line}")),
        arrival_time=ts / 1000.0,
        prompt_len=prompt_len,
        block_hashes=tuple(hash_ids[: prompt_len // block_tokens]),  # partial last block: no hash
        hash_block_size=block_tokens,
        output_len=output_len,
        labels={k: v for k, v in labels.items() if k != "request_id"},
    )


def sidecar_block(path: Path) -> int:
    """The hash block of ``PATH.meta.json`` (canonical traces, ``fairsim record``), else 512.

    Raises:
        TraceFormatError: A sidecar that is not JSON or has no positive integer ``hash_block_size``.
    """
    side = path.with_name(path.name + ".meta.json")
    if not side.is_file():
        return MOONCAKE_BLOCK_TOKENS
    try:
        meta = json.loads(side.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TraceFormatError(str(side), 1, "<json>", f"not valid JSON: {exc}") from None
    block = meta.get("hash_block_size", MOONCAKE_BLOCK_TOKENS) if isinstance(meta, dict) else None
    if isinstance(block, bool) or not isinstance(block, int) or block < 1:
        raise TraceFormatError(str(side), 1, "hash_block_size", f"need an integer >= 1, got {block!r}")
    return block


def load_mooncake(path: str | Path, *, skip_bad: bool = False) -> Trace:
    """Read a Mooncake JSONL trace.

    Args:
        path: The ``.jsonl`` file.
        skip_bad: If True, a bad record is skipped and kept in ``Trace.skipped`` (with its line,
            field and reason) instead of raising; a skipped record does not move the
            non-decreasing-timestamp reference.

    Returns:
        A ``Trace`` with arrival times in seconds from the trace's own time zero (not rebased).

    Raises:
        TraceFormatError: ``FILE:LINE: field 'NAME': reason`` for the first bad record
            (broken JSON, missing field, wrong type, negative length, decreasing timestamp,
            inconsistent ``hash_ids``), unless ``skip_bad``.
        FileNotFoundError: ``path`` does not exist.
        ValueError: ``path`` is a directory.
    """
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{path}: is a directory, expected a Mooncake .jsonl file")
    block = sidecar_block(path)
    requests: list[Request] = []
    skipped: list[TraceFormatError] = []
    previous_ms = 0.0
    blank_line = 0  # first blank line not yet followed by a record (blank lines at the end are fine)
    with path.open("rb") as fh:
        for line_no, raw in enumerate(fh, start=1):
            try:
                try:
                    # utf-8-sig: a byte-order mark on the first line is not an error.
                    text = raw.decode("utf-8-sig" if line_no == 1 else "utf-8")
                except UnicodeDecodeError as exc:
                    raise TraceFormatError(str(path), line_no, "<json>", f"not UTF-8 text: {exc.reason}") from None
                if not text.strip():
                    blank_line = blank_line or line_no
                    continue
                if blank_line:
                    line, blank_line = blank_line, 0
                    raise TraceFormatError(str(path), line, "<json>", "empty line before more records")
                try:
                    rec = json.loads(text)
                except json.JSONDecodeError as exc:
                    raise TraceFormatError(str(path), line_no, "<json>", f"not valid JSON: {exc.msg}") from None
                req = parse_record(rec, str(path), line_no, previous_ms, block)
            except TraceFormatError as exc:
                if not skip_bad:
                    raise
                skipped.append(exc)
                continue
            previous_ms = rec["timestamp"]
            requests.append(req)
    return Trace(name=path.stem, source=str(path), requests=tuple(requests), skipped=tuple(skipped))
