"""Mooncake JSONL (kvcache-ai/Mooncake ``FAST25-release/``; also Dynamo, AIPerf, vLLM ``bench``).

One object a line: ``timestamp`` (ms from trace start), ``input_length``, ``output_length``,
``hash_ids`` (chained ids of ``hash_block_size``-token blocks, 512 in Mooncake's files). Both
``len(hash_ids) == ceil(input_length / H)`` (the partial last block has an id, dropped here: a
partial block is never a hit) and ``floor(...)`` are accepted. A record without ``hash_ids``
(optional in AIPerf's trace format) has no prefix identity: none of its blocks is a hit, as in the
Azure traces, and a warning counts such records. AIPerf's ``text_input`` (the prompt as text) is
refused with its reason: without the model's tokenizer it has no token count.

Also read (TRACES.md): Dynamo's agentic rows ``session_id`` (rows of a session are its turns in
order), ``delay`` / ``delay_ms`` (ms after the previous turn of the session *completes*, in place
of or beside a ``timestamp``), ``request_id``; a file with no ``timestamp`` at all (optional in
AIPerf's format) has no absolute time: sessions start as ``--session-rate`` draws them, and a row
without a ``delay`` either is sent as its turn comes (delay 0, as AIPerf sends it); the aliases
``input_tokens``, ``output_tokens``, ``created_time`` (ms, like ``timestamp``); fairsim's canonical ``after`` (the request this one
waits for), ``segments`` (exact content spans, written for RAGPulse traces) and the sidecar ``FILE.meta.json`` that ``fairsim convert`` writes (hash block size,
whether time is absolute). Any other field becomes a label.

The hash block is, in order: the ``hash_block_size`` argument (``--hash-block-size``), the
sidecar's, 512; if 512 does not fit every record's id count but exactly one of 16, 32, ..., 2048
does, that one is used and a warning says so.
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import Any

from fairsim.compiled import compiled_twin
from fairsim.errors import TraceFormatError
from fairsim.io import plural_have
from fairsim.traces.formats._common import (
    _INT_ONLY,
    Collector, Head, _orjson_safe, check_chained, check_hash_count, first_of, iter_json_lines,
    need_ids, need_int, need_number, open_binary, output_tokens)
from fairsim.traces.fastreq import make_request
from fairsim.traces.trace import ClosedLoopWarning, Trace
from fairsim.types import Request

NAME = "mooncake"
DEFAULT_BLOCK = 512
CANDIDATE_BLOCKS = (16, 32, 64, 128, 256, 512, 1024, 2048)
"""Hash block sizes tried when the count of ``hash_ids`` does not fit 512 (powers of two, as
vLLM block sizes and every public trace's hash block are)."""

_TIME = ("timestamp", "created_time")
_INPUT = ("input_length", "input_tokens")
_OUTPUT = ("output_length", "output_tokens")
_DELAY = ("delay", "delay_ms")
_KNOWN = set(_TIME + _INPUT + _OUTPUT + _DELAY) | {"hash_ids", "request_id", "session_id", "after", "segments"}


def sniff(head: Head) -> bool:
    """A JSON object line with an input length (or AIPerf's ``text_input``, refused by the reader
    with its reason) and ``hash_ids`` as a list, or no ``hash_ids`` but a time or a delay."""
    rec = head.first_record
    if not isinstance(rec, dict) or (first_of(rec, _INPUT) is None and "text_input" not in rec):
        return False
    if "hash_ids" in rec:
        return isinstance(rec["hash_ids"], list)
    return first_of(rec, _TIME) is not None or first_of(rec, _DELAY) is not None


def sidecar_path(path: Path) -> Path:
    """``FILE.meta.json`` beside ``FILE`` (written by ``fairsim convert``)."""
    return path.with_name(path.name + ".meta.json")


#: Said where a sidecar cannot be read: a file that is not one (a trace converted to a name
#: ending ``.meta.json``) is read as one only by its name.
_AS_SIDECAR = (" (read as the sidecar of {0}, the FILE.meta.json that fairsim convert writes beside FILE; "
               "move it away or rename it if it is not {0}'s)")


def read_sidecar(path: Path) -> dict[str, Any]:
    """The sidecar's JSON object, or ``{}`` when there is none.

    Raises:
        TraceFormatError: The sidecar exists but is not a JSON object with a valid
            ``hash_block_size``.
    """
    side = sidecar_path(path)
    if not side.is_file():
        return {}
    try:
        meta = json.loads(side.read_text(encoding="utf-8-sig"))  # (a byte-order mark, as the traces)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TraceFormatError(str(side), 1, "<json>", f"not valid JSON: {exc}{_AS_SIDECAR.format(path.name)}") from None
    if not isinstance(meta, dict):
        raise TraceFormatError(str(side), 1, "<json>", f"expected a JSON object{_AS_SIDECAR.format(path.name)}")
    if "hash_block_size" in meta:
        need_int(meta["hash_block_size"], str(side), 1, "hash_block_size", 1)
    if "requests" in meta:
        need_int(meta["requests"], str(side), 1, "requests", 0)
    return meta


def check_sidecar_count(path: Path, meta: dict[str, Any], records: int) -> None:
    """Refuse a sidecar whose ``requests`` is not the file's number of records: one left beside
    a file written again since ``fairsim convert`` wrote both, whose block size and time origin
    would then be taken for the new file's without a word.

    Raises:
        TraceFormatError: Naming the sidecar's ``requests`` field.
    """
    said = meta.get("requests")
    if said is not None and said != records:
        raise TraceFormatError(str(sidecar_path(path)), 1, "requests",
                               f"says {said} requests, but {path} holds {records} records: a sidecar left from "
                               f"another file? (fairsim convert writes both; remove it, or convert again)")


class _Row:
    __slots__ = ("line", "ts_ms", "delay_ms", "prompt_len", "output_len", "ids", "request_id",
                 "session_id", "after", "labels", "segments")


def _pick(rec: dict[str, Any], names: tuple[str, str], path: str, line: int) -> tuple[str, Any] | None:
    """``first_of(rec, names, path, line)`` for a pair of aliases, without building a list per call
    (the per-line hot path of a large trace; ``first_of`` raises on both present)."""
    a, b = names
    if a in rec:
        if b in rec:
            first_of(rec, names, path, line)  # raises: both aliases given
        return a, rec[a]
    if b in rec:
        return b, rec[b]
    return None


_PLAIN = frozenset({"timestamp", "input_length", "output_length", "hash_ids"})
"""The fields of a plain Mooncake row (the public traces have these and no others)."""
_IDENT = frozenset({"request_id", "session_id", "after"})
"""Fields a plain row may add and still take the quick check, as strings (``fairsim convert``
writes ``request_id``, and ``session_id``/``after`` for sessions)."""

_INF = float("inf")
_INT_AS_FLOAT = 2**1023  # an int below it converts to a float (larger ones: need_number says so)


def _parse(rec: dict[str, Any], path: str, line: int) -> _Row:
    row = _Row()
    row.line = line
    keys = rec.keys()
    if keys == _PLAIN or (_PLAIN < keys and keys - _PLAIN <= _IDENT):
        # The common row, checked in one expression; anything it does not accept as is (a bad or
        # unusual value, an identity that is not a string) goes through the field-by-field checks
        # below, which name the field. (A string identity is kept as is there too.)
        ts, n, out, ids = rec["timestamp"], rec["input_length"], rec["output_length"], rec["hash_ids"]
        get = rec.get
        rid, sid, after = get("request_id"), get("session_id"), get("after")
        if (type(n) is int and n >= 1 and type(out) is int and out >= 1
                and (type(ts) is float and 0 <= ts < _INF or type(ts) is int and 0 <= ts < _INT_AS_FLOAT)
                and type(ids) is list and set(map(type, ids)) <= _INT_ONLY
                and (rid is None or type(rid) is str) and (sid is None or type(sid) is str)
                and (after is None or type(after) is str and after != rid)):  # (a self-link: named below)
            row.ts_ms = float(ts)
            row.delay_ms = None
            row.prompt_len = n
            row.output_len = out
            row.labels = {}
            row.ids = ids
            row.request_id, row.session_id, row.after = rid, sid, after
            row.segments = ()
            return row
    t = _pick(rec, _TIME, path, line)
    row.ts_ms = None if t is None else need_number(t[1], path, line, t[0], "ms")
    d = _pick(rec, _DELAY, path, line)
    row.delay_ms = None if d is None else need_number(d[1], path, line, d[0], "ms")
    inp = _pick(rec, _INPUT, path, line)
    if inp is None:
        if "text_input" in rec:
            raise TraceFormatError(path, line, "text_input", "a prompt given as text has no token count "
                                   "here (fairsim has no tokenizer); give input_length in tokens")
        raise TraceFormatError(path, line, "input_length", "missing")
    row.prompt_len = need_int(inp[1], path, line, inp[0], 1)
    out = _pick(rec, _OUTPUT, path, line)
    if out is None:
        raise TraceFormatError(path, line, "output_length", "missing")
    row.labels = {k: v for k, v in rec.items() if k not in _KNOWN}
    row.output_len = output_tokens(out[1], path, line, out[0], row.labels)
    # No hash_ids (AIPerf makes them optional): no prefix identity, every block a miss.
    row.ids = None if "hash_ids" not in rec else need_ids(rec["hash_ids"], path, line, "hash_ids")
    get = rec.get
    ident = []
    for key in ("request_id", "session_id", "after"):
        value = get(key)
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, (str, int)):
                raise TraceFormatError(path, line, key, f"must be a string or an integer, got {value!r}")
            value = str(value)
        ident.append(value)
    row.request_id, row.session_id, row.after = ident
    if row.after is not None and row.after == row.request_id:  # (Request refuses it too, naming no field)
        raise TraceFormatError(path, line, "after", f"names the request itself ({row.after!r})")
    row.segments = _segments(get("segments"), path, line, row.prompt_len)
    return row


def _segments(value: Any, path: str, line: int, prompt_len: int) -> tuple[tuple[int, int], ...]:
    """fairsim's canonical ``segments``: ``[[content_id, tokens], ...]`` (exact identity)."""
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(x, list) and len(x) == 2 for x in value):
        raise TraceFormatError(path, line, "segments", "must be a list of [content_id, tokens] pairs")
    out = tuple((need_int(c, path, line, "segments", 0), need_int(n, path, line, "segments", 1))
                for c, n in value)
    if sum(n for _, n in out) > prompt_len:
        raise TraceFormatError(path, line, "segments", f"hold more than input_length={prompt_len} tokens")
    return out


def _fits(block: int, row: _Row) -> bool:
    return row.ids is None or len(row.ids) in (-(-row.prompt_len // block), row.prompt_len // block)


def _loads(line: bytes) -> Any:
    """``orjson.loads``, imported at the first line the compiled scanner hands to it (~5 ms of
    start-up that a file of plain rows, scanned from its bytes, does not pay)."""
    import orjson

    return orjson.loads(line)


def _compiled_plain(kernel: Any, path: Path, block: Any) -> tuple[list[Request], dict[str, int], int] | None:
    """``kernel.plain_requests`` over the file's lines, or None: a row it does not take, or a
    file it cannot read to the end (a broken or cut gzip stream), which the Python path then
    reads and reports as it always does."""
    try:
        with open_binary(path) as fh:
            return kernel.plain_requests(fh, _loads, getattr(kernel, "orjson_safe", _orjson_safe), path.stem, block)
    except (OSError, EOFError, zlib.error):
        return None


def read(path: str | Path, *, skip_bad: bool = False, hash_block_size: int | None = None) -> Trace:
    """Read a Mooncake JSONL file (plain or gzip).

    Args:
        path: The file.
        skip_bad: Skip bad records (kept in ``Trace.skipped``) instead of raising.
        hash_block_size: Tokens per ``hash_ids`` entry, when the file's is not 512 and has no
            sidecar.

    Returns:
        A ``Trace`` in arrival order. Arrival times are seconds from the file's time zero (not
        rebased). A row with only a ``delay`` arrives at its predecessor's arrival plus the delay
        (its closed-loop send time is the predecessor's *finish* plus the delay). When no row
        has a timestamp, ``absolute_time`` is False and each session starts at 0.

    A file of plain rows only (the four fields of the public traces, values ``_parse`` takes at
    once) is read by the compiled twin (``fairsim/traces/formats/_mooncake_c.pyx``) where it is
    built: the same requests (``tests/test_mooncake_compiled.py``). Any other file is read here.

    Raises:
        TraceFormatError: ``FILE:LINE: field 'NAME': reason`` for the first bad record (broken
            JSON, missing field, wrong type, negative length, a timestamp lower than the
            previous one, a ``hash_ids`` count that fits no block, a duplicate ``request_id``,
            a label changing type, an ``after`` naming no request), unless ``skip_bad``.
        ValueError: ``path`` is a folder.
    """
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{path}: is a directory, expected a Mooncake .jsonl file")
    name = str(path)
    meta = read_sidecar(path)
    out = Collector(path, skip_bad)
    kernel = compiled_twin("fairsim.traces.formats._mooncake_c")
    if kernel is not None:
        # A file of plain rows only (the public traces): the compiled twin builds the same
        # requests; at any other row it gives None and the Python path below reads the file.
        plain = _compiled_plain(kernel, path, hash_block_size or meta.get("hash_block_size"))
        if plain is not None:  # in arrival order, distinct ids, no labels, no after: nothing to check
            requests, locations, block = plain
            check_sidecar_count(path, meta, len(requests))
            # every row has a timestamp: absolute time unless the sidecar says otherwise (or no row)
            return Trace(name=path.stem, source=name, requests=tuple(requests), skipped=(),
                         absolute_time=bool(meta.get("absolute_time", bool(requests))), hash_block_size=block,
                         format=NAME, warnings=(), locations=locations)
    rows: list[_Row] = []
    previous_ms = 0.0
    records = 0
    for line, rec in iter_json_lines(path):
        records += 1
        try:
            if isinstance(rec, TraceFormatError):
                raise rec
            row = _parse(rec, name, line)
            if row.ts_ms is not None and row.ts_ms < previous_ms:
                raise TraceFormatError(name, line, "timestamp",
                                       f"decreases: {rec.get('timestamp', rec.get('created_time'))} ms "
                                       f"after {previous_ms:g} ms on an earlier line")
        except TraceFormatError as exc:
            out.bad(exc)
            continue
        if row.ts_ms is not None:
            previous_ms = row.ts_ms
        rows.append(row)

    check_sidecar_count(path, meta, records)
    block = hash_block_size or meta.get("hash_block_size")
    if block is None:
        block = DEFAULT_BLOCK
        # _fits(block, r) for every row, without a call per row (the per-row hot path).
        if not all(r.ids is None or len(r.ids) in (-(-r.prompt_len // block), r.prompt_len // block)
                   for r in rows):
            fits = [b for b in CANDIDATE_BLOCKS if all(_fits(b, r) for r in rows)]
            if len(fits) == 1:
                block = fits[0]
                out.warnings.append(
                    f"{path}: hash_ids counts fit {block}-token hash blocks, not Mooncake's 512; "
                    f"using {block} (set --hash-block-size to override)")
    absolute = bool(meta.get("absolute_time", any(r.ts_ms is not None for r in rows)))

    last_of_session: dict[str, Request] = {}
    made: dict[str, Request] = {}  # (without timestamps only: the requests by id, for ``after``)
    gaps = 0
    no_identity = 0
    lone_delays = 0  # delays on rows that follow no request (a session's first turn, a row of no session)
    stem = path.stem
    add = out.add
    # Equal lengths share one int object: a trace has a few thousand distinct prompt and output
    # lengths, and every snapshot of a waiting request holds both (``QueuedRequest``), so the
    # engine touches a few thousand objects that stay in the cache, not a cold one per request
    # (docs/performance.md, item 4). (Small ints are shared by CPython already.)
    same_length = {}.setdefault
    for row in rows:
        ids, prompt_len = row.ids, same_length(row.prompt_len, row.prompt_len)
        if ids is None:
            no_identity += 1
            ids = row.ids = []
            full = 0
        else:
            full = prompt_len // block
        n_ids = len(ids)
        # check_hash_count and check_chained, called only to raise (the per-row hot path).
        if (n_ids != full and n_ids != -(-prompt_len // block) and row.ids) or len(set(ids)) != n_ids:
            try:
                check_hash_count(n_ids, prompt_len, block, name, row.line, "hash_ids")
                check_chained(ids, name, row.line, "hash_ids")
            except TraceFormatError as exc:
                out.bad(exc)
                continue
        if row.ts_ms is None and row.delay_ms is None and absolute:
            # (With no timestamp anywhere, such a row is AIPerf's: sent as its turn comes, delay 0.)
            out.bad(TraceFormatError(name, row.line, "timestamp", "missing (and no delay), where other records "
                                     "give a timestamp"))
            continue
        prev = last_of_session.get(row.session_id) if row.session_id is not None else None
        if row.after is not None and row.ts_ms is None and not absolute:
            # No time anywhere: a row placed by its ``after`` arrives its delay after that request
            # (one named further down the file is not known yet: placed as a first turn).
            prev = made.get(row.after, prev)
        after = row.after if row.after is not None else (prev.request_id if prev else None)
        lone_delays += after is None and row.delay_ms is not None
        delay_s = 0.0
        if row.delay_ms is not None:
            delay_s = row.delay_ms / 1000.0
        elif prev is not None and row.ts_ms is not None:
            delay_s = max(0.0, row.ts_ms / 1000.0 - prev.arrival_time)
            gaps += 1
        if row.ts_ms is not None:
            arrival = row.ts_ms / 1000.0
        elif prev is not None:
            arrival = prev.arrival_time + delay_s
        elif not absolute:
            arrival = 0.0
        else:
            out.bad(TraceFormatError(name, row.line, "timestamp",
                                     "missing on a session's first turn (only later turns may give just a delay)"))
            continue
        try:
            # Request(...) and full_block_ids, without the per-call overhead (the per-row hot path).
            req = make_request(row.request_id or f"{stem}:{row.line}", arrival, prompt_len,
                               tuple(ids[:full]), block, same_length(row.output_len, row.output_len),
                               row.labels, row.session_id,
                               after, delay_s, row.segments)
        except ValueError as exc:
            out.bad(TraceFormatError(name, row.line, "<record>", str(exc)))
            continue
        if row.session_id is not None:
            last_of_session[row.session_id] = req
        if not absolute:
            made[req.request_id] = req
        add(req, row.line)
    if no_identity:
        out.warnings.append(
            f"{path}: {plural_have(no_identity, 'record')} no hash_ids: no prefix identity, so none of "
            f"their blocks is ever a cache hit (nothing is invented)")
    if lone_delays:
        follow = "follows" if lone_delays == 1 else "follow"
        out.warnings.append(
            f"{path}: {plural_have(lone_delays, 'record')} a delay but {follow} no turn (a session's first turn, or "
            "a record without session_id): a delay counts from the turn a record follows, so theirs is not "
            "used (the session starts at its timestamp, or as --session-rate places it)")
    if gaps:
        out.warnings.append(ClosedLoopWarning(
            f"{path}: {plural_have(gaps, 'session turn')} a timestamp but no delay; their think time is taken "
            "as the gap to the previous turn's arrival (an upper bound: the file does not record "
            "when that turn finished)"))
    return out.finish(path.stem, NAME, block, absolute_time=absolute)
