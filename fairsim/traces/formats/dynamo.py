"""Dynamo request traces (ai-dynamo/dynamo ``DYN_REQUEST_TRACE``; schema ``dynamo.request.trace.v1``).

gzip JSONL of events. Rows whose ``event_type`` (top level, or under ``event``) is
``request_end`` carry ``request`` (top level, or under ``event``): ``request_received_ms`` (Unix
ms: the arrival; rows are written at *completion*, so they are sorted by it), ``input_tokens``,
``output_tokens``, ``cached_tokens``, ``ttft_ms``, ``total_time_ms``, ``queue_depth``, worker ids,
and ``replay{trace_block_size, input_length, input_sequence_hashes}``: unsigned 64-bit chained
hashes, parsed as integers (never floats). ``agent_context{session_id, parent_session_id}`` links
turns into sessions and sub-agents to their parent. Other event types are not requests and are
passed over.

Mapping: arrival = ``request_received_ms`` rebased to the first arrival; prompt length =
``replay.input_length`` (else ``input_tokens``). Closed loop: ``after`` is the session's previous
turn (by arrival), ``delay_s`` = this arrival - that turn's completion (``event_time_unix_ms`` of
its ``request_end``, else arrival + ``total_time_ms``; clamped at 0); a sub-agent's first turn
follows its parent session's latest turn that arrived before it, the same way. A parent's turn
that arrived after every sub-agent spawned since its previous turn had completed (their own
sub-agents included) waited for them: it follows the sub-agent request that completed last,
``delay_s`` = its arrival - that completion; otherwise (a sub-agent still running: in the
background) it follows its own previous turn. The Claude Code reader applies the same rule
(``docs/sessions.md``). ``cached_tokens``,
``ttft_ms``, ``total_time_ms``, ``queue_depth`` and the worker ids are the recording's outputs: labels with the
``observed_`` prefix, never inputs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fairsim.compiled import compiled_twin
from fairsim.errors import TraceFormatError
from fairsim.io import plural, plural_have
from fairsim.traces.formats._common import (
    Collector, Head, check_chained, check_hash_count, full_block_ids, iter_json_lines, need_ids, need_int,
    need_number, output_tokens)
from fairsim.traces.trace import ClosedLoopWarning, Trace
from fairsim.types import Request

NAME = "dynamo"
COMPILED_MODULE = "fairsim.traces.formats._mooncake_c"
"""The optional extension with ``distinct_u64_ids`` (built at install by ``setup.py``)."""
DEFAULT_BLOCK = 16
SCHEMA = "dynamo.request.trace.v1"
_OBSERVED = ("cached_tokens", "ttft_ms", "total_time_ms", "queue_depth")
_WORKER = ("prefill_worker_id", "decode_worker_id", "worker_id")


def _event_type(rec: dict[str, Any]) -> Any:
    ev = rec.get("event")
    return rec.get("event_type", ev.get("event_type") if isinstance(ev, dict) else None)


def _request(rec: dict[str, Any]) -> Any:
    if "request" in rec:
        return rec["request"]
    ev = rec.get("event")
    return ev.get("request") if isinstance(ev, dict) else None


def _field(rec: dict[str, Any], req: dict[str, Any], name: str) -> Any:
    """``name`` at the top level, else under ``event``, else under ``request``."""
    ev = rec.get("event")
    for where in (rec, ev if isinstance(ev, dict) else {}, req):
        if where.get(name) is not None:
            return where[name]
    return None


def sniff(head: Head) -> bool:
    """A JSON object line with the Dynamo schema, or an event carrying ``request_received_ms``."""
    rec = head.first_record
    if not isinstance(rec, dict):
        return False
    if rec.get("schema") == SCHEMA:
        return True
    req = _request(rec)
    return _event_type(rec) is not None and isinstance(req, dict) and "request_received_ms" in req


def read(path: str | Path, *, skip_bad: bool = False, hash_block_size: int | None = None) -> Trace:
    """Read a Dynamo request trace (gzip or plain JSONL).

    Raises:
        TraceFormatError: Naming file, line and field (``request.replay.input_sequence_hashes``
            with a float or a count that fits no block, a missing ``request_received_ms``, ...).
    """
    path = Path(path)
    name = str(path)
    out = Collector(path, skip_bad)
    rows = []
    blocks = set()
    others = 0  # JSON objects that are not request_end events
    no_identity = 0  # request_end rows without replay hashes
    schemas: dict[str, int] = {}  # other schema versions named by request_end rows: count
    kernel = compiled_twin(COMPILED_MODULE)  # (its distinct_u64_ids)
    for line, rec in iter_json_lines(path):
        try:
            if isinstance(rec, TraceFormatError):
                raise rec
            if _event_type(rec) != "request_end":
                others += 1
                continue
            req = _request(rec)
            if not isinstance(req, dict):
                raise TraceFormatError(name, line, "request", "missing on a request_end event")
            if rec.get("schema", SCHEMA) != SCHEMA:  # (a later version may move or rename fields)
                key = str(rec["schema"])
                schemas[key] = schemas.get(key, 0) + 1
            if "request_received_ms" not in req:
                raise TraceFormatError(name, line, "request.request_received_ms", "missing")
            arrival_ms = need_number(req["request_received_ms"], name, line, "request.request_received_ms", "ms")
            replay = req.get("replay") if isinstance(req.get("replay"), dict) else {}
            if "input_length" in replay:
                prompt = need_int(replay["input_length"], name, line, "request.replay.input_length", 1)
            elif "input_tokens" in req:
                prompt = need_int(req["input_tokens"], name, line, "request.input_tokens", 1)
            else:
                raise TraceFormatError(name, line, "request.input_tokens", "missing (and no replay.input_length)")
            labels: dict[str, Any] = {}
            if "output_tokens" not in req:
                raise TraceFormatError(name, line, "request.output_tokens", "missing")
            output = output_tokens(req["output_tokens"], name, line, "request.output_tokens", labels)
            block = hash_block_size or DEFAULT_BLOCK
            if "trace_block_size" in replay:
                block = need_int(replay["trace_block_size"], name, line, "request.replay.trace_block_size", 1)
                if hash_block_size is not None and hash_block_size != block:
                    raise TraceFormatError(name, line, "request.replay.trace_block_size",
                                           f"{block} contradicts --hash-block-size {hash_block_size}")
            ids: list[int] = []
            if "input_sequence_hashes" in replay:
                seq = replay["input_sequence_hashes"]
                # Where built, one C pass tells a list of distinct 64-bit ints, which need_ids
                # and check_chained take as it is; anything else gets their checks and messages.
                plain = kernel is not None and type(seq) is list and kernel.distinct_u64_ids(seq)
                ids = seq if plain else need_ids(seq, name, line, "request.replay.input_sequence_hashes")
                check_hash_count(len(ids), prompt, block, name, line, "request.replay.input_sequence_hashes")
                if not plain:
                    check_chained(ids, name, line, "request.replay.input_sequence_hashes")
            done_ms = _field(rec, req, "event_time_unix_ms")
            if done_ms is not None:
                done_ms = need_number(done_ms, name, line, "event_time_unix_ms", "ms")
                if done_ms < arrival_ms:  # (a later turn's think time would run from it)
                    raise TraceFormatError(name, line, "event_time_unix_ms",
                                           f"{done_ms:.15g} ms is before the request arrived "
                                           f"(request.request_received_ms {arrival_ms:.15g} ms): a request_end "
                                           "comes at or after its arrival")
            if done_ms is None and isinstance(req.get("total_time_ms"), (int, float)):
                done_ms = arrival_ms + req["total_time_ms"]
            for key in _OBSERVED:
                if req.get(key) is not None:
                    need_number(req[key], name, line, f"request.{key}", "units")
                    labels[f"observed_{key}"] = req[key]
            worker = req.get("worker") if isinstance(req.get("worker"), dict) else req
            for key in _WORKER:
                if worker.get(key) is not None:
                    labels[f"observed_{key}"] = str(worker[key])
            ctx = _field(rec, req, "agent_context")
            ctx = ctx if isinstance(ctx, dict) else {}
            session = ctx.get("session_id")
            parent = ctx.get("parent_session_id")
        except TraceFormatError as exc:
            out.bad(exc)
            continue
        blocks.add(block)
        no_identity += "input_sequence_hashes" not in replay
        rid = req.get("request_id")
        rows.append((arrival_ms, line, None if rid is None else str(rid), prompt, ids, block, output,
                     labels, None if session is None else str(session),
                     None if parent is None else str(parent), done_ms))
    if not rows and others and not out.skipped:
        raise ValueError(f"{path}: no request_end events found in {others} JSON records (a Dynamo trace "
                         f"has one per request, with \"event_type\": \"request_end\"); if the file is in another "
                         f"format, name it with --trace-format")
    if len(blocks) > 1:
        raise ValueError(f"{path}: rows use different trace_block_size values {sorted(blocks)}")
    block = blocks.pop() if blocks else (hash_block_size or DEFAULT_BLOCK)
    rows.sort(key=lambda r: (r[0], r[1]))
    t0 = rows[0][0] if rows else 0.0
    ends = _session_ends(rows, path.stem)
    last: dict[str, tuple[Request, float | None]] = {}
    spawned: dict[str, list[str]] = {}  # session -> its sub-agent sessions spawned since its last turn
    made: set[str] = set()
    line_of: dict[str, int] = {}
    gaps = orphans = 0
    for arrival_ms, line, rid, prompt, ids, _, output, labels, session, parent, done_ms in rows:
        if rid is not None and rid in line_of:  # before linking: a repeat would follow itself
            out.bad(TraceFormatError(name, line, "request.request_id", f"{rid!r} duplicates line {line_of[rid]}"))
            continue
        if rid is not None:
            line_of[rid] = line
        prev = last.get(session) if session is not None else None
        join = None
        if prev is None and parent is not None and parent in last:
            prev = last[parent]  # a sub-agent's first turn: it follows its parent's latest turn
            spawned.setdefault(parent, []).append(session)
        elif prev is None and parent is not None:
            orphans += 1  # its parent has no turn before it (not in the file, later, or itself)
        elif prev is not None:
            join = _join(spawned.pop(session, []), ends, made, arrival_ms)
        after, delay = None, 0.0
        if join is not None:
            # The recording shows this turn waiting for its sub-agents (it arrived after the last
            # of them completed): it follows the one that completed last, after the gap.
            after, delay = join[1], (arrival_ms - join[0]) / 1000.0
        elif prev is not None:
            p, p_done = prev
            after = p.request_id
            p_done_s = (p_done - t0) / 1000.0 if p_done is not None else p.arrival_time
            gaps += p_done is None
            delay = max(0.0, (arrival_ms - t0) / 1000.0 - p_done_s)
        req = Request(rid or f"{path.stem}:{line}", (arrival_ms - t0) / 1000.0, prompt,
                      full_block_ids(ids, prompt, block), block, output, labels, session_id=session,
                      after=after, delay_s=delay)
        if session is not None:
            last[session] = (req, done_ms)
        made.add(req.request_id)
        out.add(req, line)
    if gaps:
        out.warnings.append(ClosedLoopWarning(
            f"{path}: {plural(gaps, 'turn')} {'follows' if gaps == 1 else 'follow'} a request with no completion "
            "time (no event_time_unix_ms or request.total_time_ms): the think time is taken as the gap to "
            "that request's arrival (an upper bound)"))
    if orphans:
        out.warnings.append(
            f"{path}: {plural(orphans, 'sub-agent turn')} {'names' if orphans == 1 else 'name'} an "
            "agent_context.parent_session_id with no turn arriving before it (not in the file, later, or its "
            "own session); each starts on its own, at its recorded arrival")
    if schemas:
        named = ", ".join(f"{k!r} ({plural(n, 'row')})" for k, n in sorted(schemas.items()))
        out.warnings.append(
            f"{path}: request_end rows name the schema {named}, not {SCHEMA!r}, the one fairsim "
            f"reads: they were read with its fields (docs/traces.md); check that their fields mean the same")
    if no_identity:
        out.warnings.append(
            f"{path}: {plural_have(no_identity, 'request')} no request.replay.input_sequence_hashes: they have no "
            f"prefix identity, so none of their blocks is ever a cache hit (nothing is invented)")
    return out.finish(path.stem, NAME, block)


def _session_ends(rows: list[tuple], stem: str) -> dict[str, tuple[float, str]]:
    """Each session's latest recorded completion (ms) with its request id, its own sub-agents'
    sessions included (a sub-agent is done when the agents it spawned are). Rows without a
    completion time count as unknown: a session with such a row has no end here."""
    own: dict[str, tuple[float, str] | None] = {}
    children: dict[str, list[str]] = {}
    for arrival_ms, line, rid, *_, session, parent, done_ms in rows:
        if session is None:
            continue
        if parent is not None and parent != session and session not in own:
            children.setdefault(parent, []).append(session)
        if done_ms is None or own.get(session, ()) is None:
            own[session] = None
        else:
            end = (done_ms, rid or f"{stem}:{line}")
            own[session] = max(own.get(session) or end, end)
    ends: dict[str, tuple[float, str]] = {}

    def end_of(session: str, seen: frozenset[str]) -> tuple[float, str] | None:
        if session in ends:
            return ends[session]
        parts = [own.get(session)] + [end_of(c, seen | {session}) for c in children.get(session, ())
                                      if c not in seen]
        if any(p is None for p in parts):
            return None
        ends[session] = max(parts)
        return ends[session]

    for session in own:
        end_of(session, frozenset())
    return ends


def _join(children: list[str], ends: dict[str, tuple[float, str]], made: set[str],
          arrival_ms: float) -> tuple[float, str] | None:
    """The sub-agent request that completed last among ``children`` (completion ms, id) when a
    parent turn arriving at ``arrival_ms`` started after it (the parent waited), else None (no
    sub-agents, one without a recorded end, or one still running: background sub-agents)."""
    if not children or any(c not in ends for c in children):
        return None
    latest = max(ends[c] for c in children)
    return latest if latest[0] <= arrival_ms and latest[1] in made else None
