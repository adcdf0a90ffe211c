"""RAGPulse (flashserve/RAGPulse ``data/``, arXiv 2511.12979).

``0_trace.jsonl`` holds requests: ``timestamp`` (seconds from the trace start, written as a
*string* of an integer; numbers are accepted too), ``input_length``, ``output_length``,
``session_id``, and ``hash_ids`` as an object of component lists in prompt order
``sys_prompt``, ``passages_ids``, ``history``, ``web_search``, ``user_input``. Each id is a
**content** id of a chunk (at most 512 tokens) whose length is in the side files beside it,
``1_sys_prompt.jsonl``, ``2_passages.jsonl``, ``3_history.jsonl``, ``4_user_input.jsonl``,
``5_web_search.jsonl``: ``{"<kind>_id": int, "token_length": int}``.

``--trace`` takes the data folder or its ``0_trace.jsonl``. Each request gets
``segments = ((id, length), ...)`` in prompt order, so the engine's block keys are built from the
exact (chunk, offset) spans each block covers, at any block size (``fairsim.sim.keys``). The few
template tokens by which ``input_length`` exceeds the chunks' sum are placed after the chunks, as
request-unique tokens (their position is not recorded; at the end they can never create a false
hit). Where the chunks hold more tokens than ``input_length`` (a truncated prompt), the spans
are cut at ``input_length`` and a warning counts them. ``block_hashes`` holds the same identity at 16-token blocks (vLLM's default block), as
small ints in order of first appearance, for tools that read only hashes.

Sessions: turns of a ``session_id`` in time order; the closed-loop think time is the gap to the
previous turn's arrival (the file does not record completions; an upper bound, warned).

Weeks: ``timestamp`` counts from the start of its trace (12:00:00, the RAGPulse README), so the
weeks of the data written one after another into one file make its time axis restart: a record
``RESTART_S`` or more earlier than the latest one before it starts a new *part*. Parts are
never overlaid on one time axis: a file with several parts is refused, naming each part's lines
and time span, unless ``part`` (``--trace-part N``, 1-based) chooses one, whose timestamps are
then rebased to its own first request. Within a part, records a little out of order (less than
``RESTART_S`` back) are sorted, and a warning counts them. A folder holding several trace files
(a week each) is refused too, naming them: give ``--trace`` the file of one week (the side files
beside it are read).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fairsim.errors import TraceFormatError
from fairsim.io import plural
from fairsim.traces.segments import segment_block_keys
from fairsim.traces.formats._common import (
    Collector, Head, iter_json_lines, need_int, need_number, output_tokens, read_head)
from fairsim.traces.trace import ClosedLoopWarning, Trace
from fairsim.types import Request

NAME = "ragpulse"
READS_FOLDERS = True
"""A folder is read too (``fairsim.traces.formats.TraceFormat.folders``)."""
BLOCK = 16
"""Block of the ``block_hashes`` view (the identity itself is token-exact)."""
TRACE_FILE = "0_trace.jsonl"
SIDE_FILES = ("1_sys_prompt.jsonl", "2_passages.jsonl", "3_history.jsonl", "4_user_input.jsonl",
              "5_web_search.jsonl")
ORDER = ("sys_prompt", "passages_ids", "history", "web_search", "user_input")
_KNOWN = {"timestamp", "input_length", "output_length", "hash_ids", "session_id", "request_id"}
RESTART_S = 3600.0
"""A record this many seconds (or more) earlier than the latest before it in the file starts a new
part: the time axis restarted (a new week). Records logged out of order are seconds apart; a
week's restart goes back by days."""
READS_PARTS = True
"""``read`` takes ``part`` (``--trace-part``; ``fairsim.traces.formats.TraceFormat.parts``)."""


def sniff(head: Head) -> bool:
    """A folder with ``0_trace.jsonl``, or a JSON line whose ``hash_ids`` is an object."""
    if head.is_dir:
        return (head.path / TRACE_FILE).is_file()
    rec = head.first_record
    return isinstance(rec, dict) and isinstance(rec.get("hash_ids"), dict)


def _chunk_lengths(folder: Path) -> tuple[dict[int, int], list[str]]:
    """Content id -> token length from the side files (missing side files are listed)."""
    lengths: dict[int, int] = {}
    where: dict[int, str] = {}
    missing = []
    for fname in SIDE_FILES:
        path = folder / fname
        if not path.is_file():
            missing.append(fname)
            continue
        for line, rec in iter_json_lines(path):
            if isinstance(rec, TraceFormatError):
                raise rec
            if "token_length" not in rec:
                raise TraceFormatError(str(path), line, "token_length", "missing")
            keys = [k for k in rec if k != "token_length" and k.endswith("id")]
            if len(keys) > 1:  # prefer the file's own kind (2_passages.jsonl: passages_id), hash_id
                kind = fname.split("_", 1)[1].removesuffix(".jsonl")
                keys = [k for k in keys if k.startswith(kind) or k == "hash_id"][:1] or keys
            if len(keys) != 1:
                raise TraceFormatError(str(path), line, "<id>", f"expected one '<kind>_id' field, got {sorted(rec)}")
            cid = need_int(rec[keys[0]], str(path), line, keys[0], 0)
            n = need_int(rec["token_length"], str(path), line, "token_length", 0)
            if cid in lengths and lengths[cid] != n:
                raise TraceFormatError(str(path), line, "token_length",
                                       f"id {cid} has {n} tokens here but {lengths[cid]} at {where[cid]}")
            lengths[cid] = n
            where[cid] = f"{fname}:{line}"
    return lengths, missing


def _trace_files(folder: Path) -> list[str]:
    """Names of the RAGPulse trace files in ``folder`` (``*.jsonl*`` records with a ``hash_ids``
    object; the side files excluded)."""
    names = []
    for child in sorted(folder.iterdir()):
        if child.is_file() and ".jsonl" in child.name and child.name not in SIDE_FILES:
            try:
                if sniff(read_head(child)):
                    names.append(child.name)
            except OSError:
                continue
    return names


def read(path: str | Path, *, skip_bad: bool = False, hash_block_size: int | None = None,
         part: int | None = None) -> Trace:
    """Read a RAGPulse data folder (or its ``0_trace.jsonl`` with the side files beside it).

    Args:
        hash_block_size: Block of the ``block_hashes`` view (default 16); the segments stay exact.
        part: Which part (1-based) of a file whose time axis restarts (a week each); None for a
            file of one part.

    Raises:
        TraceFormatError: Naming file, line and field, e.g. ``0_trace.jsonl:7: field
            'hash_ids.passages_ids[2]': content id 99 is in no side file``.
        ValueError: No side file found; a folder holding several trace files; a file of several
            parts without ``part``, or a ``part`` it does not have.
    """
    path = Path(path)
    if path.is_dir():
        found = _trace_files(path)
        if len(found) > 1:
            raise ValueError(
                f"{path}: holds {len(found)} RAGPulse trace files ({', '.join(found)}), a week each in the "
                f"public data; fairsim does not overlay weeks on one time axis: give --trace one of them "
                f"(e.g. {path / found[-1]}; the side files beside it are read)")
    trace_file = path / TRACE_FILE if path.is_dir() else path
    folder = trace_file.parent
    name = str(trace_file)
    lengths, missing = _chunk_lengths(folder)
    if len(missing) == len(SIDE_FILES):
        raise ValueError(f"{folder}: no RAGPulse side files ({', '.join(SIDE_FILES)}) beside {trace_file.name}")
    block = hash_block_size or BLOCK
    out = Collector(trace_file, skip_bad)
    if missing:
        out.warnings.append(f"{folder}: side files {', '.join(missing)} are missing; ids that only they "
                            "define are bad records")
    rows = []
    cut = 0
    for line, rec in iter_json_lines(trace_file):
        try:
            if isinstance(rec, TraceFormatError):
                raise rec
            for key in ("timestamp", "input_length", "output_length", "hash_ids"):
                if key not in rec:
                    raise TraceFormatError(name, line, key, "missing")
            ts = rec["timestamp"]
            if isinstance(ts, str):
                try:
                    ts = float(ts)
                except ValueError:
                    raise TraceFormatError(name, line, "timestamp", f"not a number of seconds: {ts!r}") from None
            ts = need_number(ts, name, line, "timestamp", "seconds")
            prompt = need_int(rec["input_length"], name, line, "input_length", 1)
            labels: dict[str, Any] = {k: v for k, v in rec.items() if k not in _KNOWN}
            output = output_tokens(rec["output_length"], name, line, "output_length", labels)
            comps = rec["hash_ids"]
            if not isinstance(comps, dict):
                raise TraceFormatError(name, line, "hash_ids", "must be an object of component id lists")
            segments = []
            for comp in [c for c in ORDER if c in comps] + [c for c in comps if c not in ORDER]:
                ids = comps[comp]
                if not isinstance(ids, list):
                    raise TraceFormatError(name, line, f"hash_ids.{comp}", "must be a list of ids")
                for i, cid in enumerate(ids):
                    fld = f"hash_ids.{comp}[{i}]"
                    cid = need_int(cid, name, line, fld, 0)
                    if cid not in lengths:
                        raise TraceFormatError(name, line, fld, f"content id {cid} is in no side file" + (
                            f" (missing from {folder}: {', '.join(missing)})" if missing else ""))
                    if lengths[cid]:
                        segments.append((cid, lengths[cid]))
            if sum(n for _, n in segments) > prompt:
                segments = _cut(segments, prompt)
                cut += 1
            session = rec.get("session_id")
        except TraceFormatError as exc:
            out.bad(exc)
            continue
        rid = rec.get("request_id")
        rows.append((ts, line, prompt, output, tuple(segments), labels,
                     None if session is None else str(session), None if rid is None else str(rid)))
    parts = _split_parts(rows)
    rows, label = _choose_part(parts, part, trace_file, out.warnings)
    late = sum(b[0] < a[0] for a, b in zip(rows, rows[1:]))
    if late:
        out.warnings.append(f"{trace_file}: {late} records have a timestamp earlier than the record "
                            f"before them (by less than {RESTART_S:g} s); read in timestamp order")
    rows.sort(key=lambda r: (r[0], r[1]))
    t0 = rows[0][0] if rows else 0.0
    small: dict[int, int] = {}
    last: dict[str, Request] = {}
    gaps = 0
    for ts, line, prompt, output, segments, labels, session, rid in rows:
        ids = tuple(small.setdefault(k, len(small)) for k in segment_block_keys(segments, block))
        prev = last.get(session) if session is not None else None
        after, delay = None, 0.0
        if prev is not None:
            after, delay = prev.request_id, max(0.0, ts - t0 - prev.arrival_time)
            gaps += 1
        req = Request(rid or f"{trace_file.stem}:{line}", ts - t0, prompt, ids, block, output, labels,
                      session_id=session, after=after, delay_s=delay, segments=segments)
        if session is not None:
            last[session] = req
        out.add(req, line)
    if cut:
        out.warnings.append(
            f"{trace_file}: the chunks of {cut} requests hold more tokens than their input_length; "
            "their segments are cut at input_length (the prompt as sent; identity kept for its tokens)")
    if gaps:
        out.warnings.append(ClosedLoopWarning(
            f"{trace_file}: think time of {plural(gaps, 'follow-up turn')} taken as the gap to the previous "
            "turn's arrival (an upper bound: the file does not record when that turn finished)"))
    return out.finish((folder.name if path.is_dir() else trace_file.stem) + label, NAME, block)


def _split_parts(rows: list[tuple]) -> list[list[tuple]]:
    """``rows`` (file order; timestamp first) cut where the time axis restarts (``RESTART_S``)."""
    parts: list[list[tuple]] = []
    latest = None
    for row in rows:
        if latest is None or row[0] <= latest - RESTART_S:
            parts.append([])
            latest = row[0]
        parts[-1].append(row)
        latest = max(latest, row[0])
    return parts


def _describe(number: int, rows: list[tuple]) -> str:
    """``part 2: lines 4-6, timestamps 0-604603 s, 3 requests``."""
    lines = [r[1] for r in rows]
    stamps = [r[0] for r in rows]
    return (f"part {number}: lines {min(lines)}-{max(lines)}, timestamps {min(stamps):g}-{max(stamps):g} s, "
            f"{len(rows)} requests")


def _choose_part(parts: list[list[tuple]], part: int | None, trace_file: Path,
                 warnings: list[str]) -> tuple[list[tuple], str]:
    """The rows of the chosen part and the suffix of the trace's name (``-part2``, or empty).

    Raises:
        ValueError: Several parts and no ``part``; a ``part`` the file does not have.
    """
    if part is None and len(parts) <= 1:
        return (parts[0] if parts else []), ""
    listed = "; ".join(_describe(i, rows) for i, rows in enumerate(parts, start=1))
    if part is None:
        first = parts[1][0]
        raise ValueError(
            f"{trace_file}:{first[1]}: field 'timestamp': the time axis restarts here ({first[0]:g} s after "
            f"{max(r[0] for r in parts[0]):g} s on an earlier line): the file holds {len(parts)} parts, a week "
            f"each in the public data ({listed}); fairsim does not overlay them on one time axis: choose one "
            f"with --trace-part N")
    if not 1 <= part <= len(parts):
        raise ValueError(f"--trace-part {part}: {trace_file} has {len(parts)} part"
                         f"{'s' if len(parts) != 1 else ''} ({listed})")
    if len(parts) == 1:
        return parts[0], ""
    warnings.append(f"{trace_file}: read {_describe(part, parts[part - 1])} of {len(parts)} "
                    f"(--trace-part); its time starts at its first request")
    return parts[part - 1], f"-part{part}"


def _cut(segments: list[tuple[int, int]], tokens: int) -> list[tuple[int, int]]:
    """The leading ``tokens`` tokens of ``segments`` (the last span shortened)."""
    out = []
    for cid, n in segments:
        if tokens <= 0:
            break
        out.append((cid, min(n, tokens)))
        tokens -= n
    return out
