"""Claude Code session traces (callanjfox/kv-cache-tester ``traces/``; agentic-coding-analysis
``docs/TRACE_FORMAT.md``).

One JSON document per session (not JSONL); ``--trace`` takes one file or a folder of them
(``*.json``, read in name order). Top level: ``id``, ``models``, ``block_size`` (64),
``hash_id_scope`` (``"local"``: ids are scoped to the file, so they are namespaced per file here;
``"global"``: shared across files), ``tool_tokens``, ``system_tokens``, ``requests``. A request:
``t`` (s from session start), ``type``, ``model``, ``in``, ``out`` (may be 0), ``hash_ids`` (one
chained id per *full* 64-token block), optional ``api_time``, ``ttft``, ``think_time`` (client
delay before this request), ``input_types``, ``output_types``, ``stop``. A sub-agent is
``{"type": "subagent", "t": spawn, "requests": [...]}``; its nested ``t`` restarts at 0 at the
spawn, and it runs beside its parent.

Mapping onto ``Request``:

- ``session_id``: the file's stem, for its sub-agents too: the file is one session whose start
  the replay chooses, and its sub-agents keep their spawn offsets within it. The label ``agent``
  says which agent sent a request: ``main`` or the sub-agent's JSON path (``requests[2]``).
- ``arrival_time``: offset from the session's start (``absolute_time=False``: session starts are
  chosen by the replay); a sub-agent's requests at ``spawn t + nested t``.
- Closed loop: ``after`` is the previous request of the same agent; ``delay_s`` is
  ``think_time`` when recorded, else ``t[n] - t[n-1] - api_time[n-1]`` (the trace's identity
  ``t[n] = t[n-1] + api_time[n-1] + think_time[n]``), else the gap ``t[n] - t[n-1]`` (warned). A
  sub-agent's first request follows the parent request before the spawn, released the recorded
  gap ``spawn t + nested t - (t + api_time of that parent request)`` after it finishes (its own
  ``think_time``, 0.0 in every public file, counts within the sub-agent and is not used: in
  ``trace_0277.json`` the first two gaps are 60.444 and 165.126 s). The parent's next request follows
  the sub-agent request that ended last (``t + api_time``) when the recording shows it started
  after that end (the parent waited for its sub-agents, as a blocking Task call does), released
  the recorded gap after that end; otherwise (a background sub-agent) it follows the parent's
  previous request. One ``after`` per request: with several sub-agents the one that ended last
  in the recording stands for all. ``docs/sessions.md`` compares this with the other readers.
- ``api_time`` and ``ttft`` are the recording's outputs: labels ``observed_api_time`` and
  ``observed_ttft`` (seconds), never inputs. ``type``, ``model``, ``stop`` are labels;
  ``input_types``/``output_types`` are labels joined by commas.
- Request ids and error locations are JSON paths: ``trace_0001.json: requests[3].requests[0]``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from fairsim.errors import TraceFormatError
from fairsim.io import plural, plural_have
from fairsim.traces.formats._common import (
    LONE_SURROGATE, SURROGATE_ESCAPE, Collector, Head, check_chained, full_block_ids, lone_surrogate,
    need_ids, need_int, need_number, open_binary, output_tokens, read_head)
from fairsim.traces.trace import ClosedLoopWarning, Trace
from fairsim.types import Request

NAME = "claude-code"
READS_FOLDERS = True
"""A folder is read too (``fairsim.traces.formats.TraceFormat.folders``)."""
DEFAULT_BLOCK = 64


def session_name(file: Path) -> str:
    """A session file's stem, its ``.gz`` dropped first, so ``s1.json`` and ``s1.json.gz`` give the
    same session and request ids (``s1``)."""
    return Path(file.name.removesuffix(".gz")).stem


#: ``"requests": [`` (a list; fairsim's own ``run.json`` has ``"requests": N``).
_REQUESTS_LIST = re.compile(r'"requests"\s*:\s*\[')
_REQUESTS_FIRST = re.compile(r'\{\s*"requests"\s*:\s*\[\s*\{')
_REQUEST_KEYS = tuple(re.compile(rf'"{key}"\s*:') for key in ("t", "in", "out"))
#: A folder is sniffed by at most this many of its ``*.json`` files (in name order).
SNIFF_FILES = 16


def sniff(head: Head) -> bool:
    """A folder holding ``*.json`` session documents (one among its first ``SNIFF_FILES`` is
    one: a folder of other JSON, such as fairsim's own ``--out`` results, is not), or a JSON
    document with ``requests`` and ``block_size`` / ``hash_id_scope`` near its start."""
    if head.is_dir:
        files = sorted(p for p in head.path.glob("*.json") if not p.name.endswith(".meta.json"))
        for path in files[:SNIFF_FILES]:
            try:
                if path.is_file() and sniff(read_head(path)):
                    return True
            except OSError:  # unreadable: not evidence either way
                continue
        return False
    rec = head.first_record
    if isinstance(rec, dict) and "requests" in rec:
        return isinstance(rec["requests"], list) and ("block_size" in rec or "hash_id_scope" in rec)
    # A document longer than the head, or one laid out over lines (``first_record`` is then a
    # later line's object, such as one request of the list): its start, read as text.
    text = head.text.lstrip()
    if not text.startswith("{") or _REQUESTS_LIST.search(text) is None:
        return False
    if '"block_size"' in text or '"hash_id_scope"' in text:
        return True
    # ``requests`` first and longer than the head (the document's other keys after it, as
    # ``json.dump`` of a dict built in that order writes them): its first request's own keys.
    return _REQUESTS_FIRST.match(text) is not None and all(k.search(text) for k in _REQUEST_KEYS)


class _Namespace:
    """Maps (scope, id) to small ints in order of first appearance (local ids per file)."""

    def __init__(self) -> None:
        self.ids: dict[tuple[str, int], int] = {}

    def map(self, scope: str, ids: list[int]) -> list[int]:
        out = []
        for h in ids:
            key = (scope, h)
            if key not in self.ids:
                self.ids[key] = len(self.ids)
            out.append(self.ids[key])
        return out


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        files = sorted(p for p in path.glob("*.json") if p.is_file() and not p.name.endswith(".meta.json"))
        if not files:
            raise ValueError(f"{path}: folder has no *.json Claude Code session files")
        return files
    return [path]


def read(path: str | Path, *, skip_bad: bool = False, hash_block_size: int | None = None) -> Trace:
    """Read one Claude Code session file or a folder of them.

    Raises:
        TraceFormatError: ``FILE: JSON.PATH: field 'NAME': reason`` (e.g.
            ``s.json: requests[3]: field 'in': missing``); a broken document names its line.
        ValueError: An empty folder; ``hash_block_size`` given and different from a file's
            ``block_size``.
    """
    path = Path(path)
    out = Collector(path, skip_bad)
    names = _Namespace()
    blocks = set()
    gaps = 0
    if path.is_dir():  # say what the folder holds besides sessions, rather than pass it by
        other = sorted(p.name for p in path.iterdir() if not p.name.startswith(".") and (
            not p.is_file() or not p.name.endswith(".json") or p.name.endswith(".meta.json")))
        if other:
            shown = ", ".join(other[:5]) + (f" and {len(other) - 5} more" if len(other) > 5 else "")
            out.warnings.append(f"{path}: read the *.json session files only; ignored {shown}")
    for file in _files(path):
        fname = str(file)
        try:
            with open_binary(file) as fh:
                text = fh.read().decode("utf-8-sig")
            doc = json.loads(text)
        except UnicodeDecodeError as exc:
            out.bad(TraceFormatError(fname, 1, "<json>", f"not UTF-8 text: {exc.reason}"))
            continue
        except json.JSONDecodeError as exc:
            out.bad(TraceFormatError(fname, exc.lineno, "<json>", f"not valid JSON: {exc.msg.removesuffix(' at')} (column {exc.colno})"))
            continue
        bad = lone_surrogate(doc) if SURROGATE_ESCAPE.search(text) else None
        if bad is not None:
            where, dot, key = bad.rpartition(".")
            out.bad(TraceFormatError(fname, where if dot else "(top level)", key, LONE_SURROGATE))
            continue
        if not isinstance(doc, dict) or not isinstance(doc.get("requests"), list):
            out.bad(TraceFormatError(fname, "(top level)", "requests", "missing or not a list"))
            continue
        try:
            block = need_int(doc.get("block_size", DEFAULT_BLOCK), fname, "(top level)", "block_size", 1)
            scope = doc.get("hash_id_scope", "local")
            if scope not in ("local", "global"):
                raise TraceFormatError(fname, "(top level)", "hash_id_scope", f"{scope!r}: need 'local' or 'global'")
        except TraceFormatError as exc:
            out.bad(exc)
            continue
        if hash_block_size is not None and hash_block_size != block:
            raise ValueError(f"{fname}: block_size is {block}; --hash-block-size {hash_block_size} contradicts it")
        blocks.add(block)
        ns = fname if scope == "local" else "<global>"
        gaps += _session(out, names, ns, file, doc["requests"], session_name(file), "", 0.0, None, block)[0]
    if len(blocks) > 1:
        raise ValueError(f"{path}: files use different block_size values {sorted(blocks)}")
    if out.stats["short_hash_ids"]:
        out.warnings.append(
            f"{path}: {plural_have(out.stats['short_hash_ids'], 'request')} fewer hash_ids than full "
            f"{block_note(blocks)} blocks (or none); their remaining blocks count as unique")
    if out.stats["subagents_in_session_time"]:
        out.warnings.append(
            f"{path}: {plural(out.stats['subagents_in_session_time'], 'sub-agent')} "
            f"{'gives its' if out.stats['subagents_in_session_time'] == 1 else 'give their'} requests' t in "
            "session time (every t at or after the spawn), not from the spawn; read as session time")
    if gaps:
        out.warnings.append(ClosedLoopWarning(
            f"{path}: {plural_have(gaps, 'request')} neither think_time nor the previous api_time; their "
            "closed-loop delay is the gap between recorded start times (an upper bound)"))
    sessions = len({r.session_id for r in out.requests})
    out.warnings.append(f"{path}: the format has no absolute time; arrival times are offsets from "
                        f"each session's start ({plural(sessions, 'session')})")
    block = blocks.pop() if blocks else (hash_block_size or DEFAULT_BLOCK)
    return out.finish(session_name(path) if path.is_file() else path.name, NAME, block, absolute_time=False)


def block_note(blocks: set[int]) -> str:
    """``"64-token"`` for the message (the files' block size)."""
    return "/".join(str(b) for b in sorted(blocks)) + "-token" if blocks else "hash"


def _session(out: Collector, names: _Namespace, ns: str, file: Path, items: list[Any],
             session: str, prefix: str, t0: float, parent: tuple[Request, float | None] | None,
             block: int) -> tuple[int, tuple[Request, float] | None]:
    """Add the requests of one (sub-)session.

    ``parent`` is the request a sub-agent's first request follows, with that request's api_time.

    Returns:
        How many delays fell back to the gap, and the request of this session (sub-agents
        included) whose recorded end (``t + api_time``) is latest, with that end, or None.
    """
    fname = str(file)
    prev = parent  # (request, its api_time or None)
    gaps = 0
    last_end: tuple[Request, float] | None = None
    join: tuple[Request, float] | None = None  # latest-ending sub-agent request since prev
    for i, item in enumerate(items):
        where = f"{prefix}requests[{i}]"
        try:
            if not isinstance(item, dict):
                raise TraceFormatError(fname, where, "<json>", "expected an object")
            if "t" not in item:
                raise TraceFormatError(fname, where, "t", "missing")
            t = need_number(item["t"], fname, where, "t", "seconds")
            if item.get("type") == "subagent":
                if not isinstance(item.get("requests"), list):
                    raise TraceFormatError(fname, where, "requests", "a subagent needs a list of requests")
                nested = [x.get("t") for x in item["requests"] if isinstance(x, dict)]
                nested = [x for x in nested if isinstance(x, (int, float)) and not isinstance(x, bool)]
                # Nested t restarts at 0 at the spawn (TRACES.md); some writers keep session
                # time instead, recognisable as every nested t at or after a spawn t > 0.
                session_time = bool(nested) and t > 0 and min(nested) >= t
                out.stats["subagents_in_session_time"] += session_time
                sub_gaps, sub_end = _session(out, names, ns, file, item["requests"], session,
                                             f"{where}.", t0 if session_time else t0 + t, prev, block)
                gaps += sub_gaps
                if sub_end is not None and (join is None or sub_end[1] > join[1]):
                    join = sub_end
                continue
            for key in ("in", "out"):
                if key not in item:
                    raise TraceFormatError(fname, where, key, "missing")
            prompt = need_int(item["in"], fname, where, "in", 1)
            labels: dict[str, Any] = {}
            output = output_tokens(item["out"], fname, where, "out", labels)
            ids = need_ids(item.get("hash_ids", []), fname, where, "hash_ids")
            if len(ids) > -(-prompt // block):
                raise TraceFormatError(fname, where, "hash_ids",
                                       f"has {len(ids)} ids but in={prompt} spans {-(-prompt // block)} "
                                       f"blocks of {block} tokens")
            check_chained(ids, fname, where, "hash_ids")
            # Fewer ids than full blocks: the identity of the leading blocks is known, the rest
            # is unique to the request (no id is invented).
            out.stats["short_hash_ids"] += len(ids) < prompt // block
            api = item.get("api_time")
            api = None if api is None else need_number(api, fname, where, "api_time", "seconds")
            ttft = item.get("ttft")
            ttft = None if ttft is None else need_number(ttft, fname, where, "ttft", "seconds")
            think = item.get("think_time")
            think = None if think is None else need_number(think, fname, where, "think_time", "seconds")
        except TraceFormatError as exc:
            out.bad(exc)
            continue
        for key in ("type", "model", "stop"):
            if isinstance(item.get(key), str):
                labels[key] = item[key]
        for key in ("input_types", "output_types"):
            if isinstance(item.get(key), list):
                labels[key] = ",".join(map(str, item[key]))
        if api is not None:
            labels["observed_api_time"] = api
        if ttft is not None:
            labels["observed_ttft"] = ttft
        arrival = t0 + t
        after, delay = None, 0.0
        if join is not None and arrival >= join[1]:
            # The recording shows this request waiting for its sub-agents (it starts after the
            # last of them ended): follow the one that ended last, after the recorded gap from
            # that end. Not think_time: it counts from this agent's own previous response.
            after, delay = join[0].request_id, arrival - join[1]
        elif prev is not None:
            p, p_api = prev
            if arrival < p.arrival_time:  # (unsorted requests: not clock jitter, which the clamp below takes)
                out.bad(TraceFormatError(fname, where, "t", f"starts at {arrival:.6g} s of the session, before the "
                                         f"request it follows ({p.request_id}, at {p.arrival_time:.6g} s); a "
                                         "session's requests are in time order"))
                continue
            after = p.request_id
            if think is not None and prev is not parent:
                delay = think  # the writer's own gap since this agent's previous response
            elif p_api is not None:
                # The recorded gap since the predecessor's end. A sub-agent's first request
                # measures it from the parent request before the spawn: its think_time (0 in
                # the public files, whatever the spawn offset) counts within the sub-agent.
                delay = max(0.0, arrival - p.arrival_time - p_api)
            else:
                delay = max(0.0, arrival - p.arrival_time)
                gaps += 1
        elif think is not None:
            delay = think
        rid = f"{session_name(file)}/{where}"
        labels["agent"] = prefix.rstrip(".") or "main"
        req = Request(rid, arrival, prompt, full_block_ids(names.map(ns, ids), prompt, block), block,
                      output, labels, session_id=session, after=after, delay_s=delay)
        out.add(req, where if file == out.path else f"{file.name}: {where}")
        prev = (req, api)
        join = None
        if api is not None and (last_end is None or arrival + api > last_end[1]):
            last_end = (req, arrival + api)
    if join is not None and (last_end is None or join[1] > last_end[1]):
        last_end = join
    return gaps, last_end

