"""Qwen-Bailian usage traces (alibaba-edu/qwen-bailian-usagetraces-anon, ATC'25).

JSONL: ``chat_id``, ``parent_chat_id`` (-1 for a first turn), ``timestamp`` (float seconds),
``input_length``, ``output_length``, ``type`` (text/image/search/file), ``turn``, ``hash_ids``
(salted SipHash over **16-token** blocks, remapped to ints).

The ids are re-chained: block ``j`` is identified by the sequence ``hash_ids[0..j]`` (interned to
small ints in order of first appearance). For chained ids (TRACES.md) this changes nothing in
which blocks are equal; if the ids hash each block's content alone (as the dataset README's
"apply SipHash to each block" can be read), it restores prefix identity: a block is a hit only
after an identical prefix, as in vLLM.

Sessions: ``parent_chat_id`` links a turn to the one it follows; a session is named by its
first turn's ``chat_id``. The closed-loop think time of a turn is the gap from its parent's
arrival (the file does not record when the parent finished, so this is an upper bound; a warning
says so). A turn whose parent is not in the file (a sampled trace) starts its own session.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from pathlib import Path

from fairsim.compiled import compiled_twin
from fairsim.errors import TraceFormatError
from fairsim.io import plural
from fairsim.traces.formats._common import (
    Collector, Head, check_hash_count, iter_json_lines, need_ids, need_int,
    need_number, output_tokens)
from fairsim.traces.formats.mooncake import DEFAULT_BLOCK as MOONCAKE_BLOCK
from fairsim.traces.fastreq import make_request
from fairsim.traces.trace import ClosedLoopWarning, Trace

NAME = "bailian"
#: Its rows pass Mooncake's sniff (``timestamp``, ``input_length``, ``hash_ids``) but are misread
#: by it: seconds as milliseconds, 16-token ids as 512-token ones, sessions dropped.
SUPERSEDES = ("mooncake",)
COMPILED_MODULE = "fairsim.traces.formats._chain_c"
"""The optional extension with the compiled ``chain_ids`` (built at install by ``setup.py``)."""
BLOCK = 16
_KNOWN = ("chat_id", "parent_chat_id", "timestamp", "input_length", "output_length", "hash_ids")
"""Required fields, checked in this order (so the first missing one is always the same)."""


def sniff(head: Head) -> bool:
    """A JSON object line with ``chat_id`` and ``hash_ids``, unless its id count fits Mooncake's
    512-token blocks and not Bailian's 16 (a Mooncake row whose labels are named ``chat_id``: the
    Mooncake reader takes it). ``parent_chat_id`` is not required here: a Bailian file without it
    is this reader's to refuse, naming the field, where the Mooncake reader would take its
    seconds for milliseconds and drop its sessions."""
    rec = head.first_record
    if not (isinstance(rec, dict) and {"chat_id", "hash_ids"} <= rec.keys()):
        return False
    n, ids = rec.get("input_length"), rec["hash_ids"]
    if type(n) is not int or not isinstance(ids, list):
        return True  # the reader names the field
    return not (_fits(len(ids), n, MOONCAKE_BLOCK) and not _fits(len(ids), n, BLOCK))


def _fits(n_ids: int, prompt_len: int, block: int) -> bool:
    """``check_hash_count``'s rule, as a test: ``ceil`` or ``floor(prompt_len / block)`` ids."""
    return n_ids in (-(-prompt_len // block), prompt_len // block)


def _compact(ids: list[int]) -> Sequence[int]:
    """``ids`` as 64-bit integers (``array('q')``: 8 bytes an id, not a Python int's 32 until
    they are named), or as given where one does not fit."""
    try:
        return array("q", ids)
    except OverflowError:
        return ids


def chain_ids(id_lists: list[Sequence[int]]) -> list[tuple[int, ...]]:
    """Each request's ids re-chained (module docstring): block ``j`` is named by the pair (name
    of block ``j - 1``, ``ids[j]``), names handed out as ``0, 1, 2, ...`` in order of first
    appearance over ``id_lists`` in order. The compiled twin (``_chain_c.chain_ids``: the same
    names, to the int) where it is built and every id fits 64 bits.

    Args:
        id_lists: Each request's hash ids (ints: lists, tuples or ``array('q')``), in the order
            its requests are built.

    Returns:
        One tuple of names per request, each as long as its ids.
    """
    kernel = compiled_twin(COMPILED_MODULE)
    if kernel is not None:
        named = kernel.chain_ids(id_lists)
        if named is not None:
            return named
    chain: dict[tuple[int, int], int] = {}
    out = []
    for ids in id_lists:
        names, parent = [], -1
        for h in ids:
            parent = chain.setdefault((parent, h), len(chain))
            names.append(parent)
        out.append(tuple(names))
    return out


def read(path: str | Path, *, skip_bad: bool = False, hash_block_size: int | None = None) -> Trace:
    """Read a Bailian JSONL file (plain or gzip).

    Arrival times are seconds from the first request (rebased). ``type`` and ``turn`` are kept as
    labels.

    Raises:
        TraceFormatError: Naming file, line and field (missing or mistyped field, a ``hash_ids``
            count that fits no ``hash_block_size``-token block, a duplicate ``chat_id``).
    """
    path = Path(path)
    name = str(path)
    block = hash_block_size or BLOCK
    out = Collector(path, skip_bad)
    rows = []
    chat_line: dict[int, int] = {}
    kernel = compiled_twin(COMPILED_MODULE)
    # Where built, a plain row is checked on its bytes (the kernel's RowScanner: the tuple these
    # checks make of it) and any other line's ids are read from its bytes into an array('q')
    # (split_ids): the ids need_ids and _compact would make from the parsed list.
    split = scan = None
    if kernel is not None:
        import orjson
        split, scan = kernel.split_ids, kernel.RowScanner(block, orjson.loads)
    for line, rec in iter_json_lines(path, split, scan=scan):
        try:
            if type(rec) is tuple:  # a plain row, checked (RowScanner): only a duplicate to find
                chat, parent, ts, prompt, output, ids, labels = rec
                if chat in chat_line:
                    raise TraceFormatError(name, line, "chat_id", f"{chat} duplicates line {chat_line[chat]}")
                chat_line[chat] = line
                rows.append((line, chat, parent, ts, prompt, output, ids, labels))
                continue
            if isinstance(rec, TraceFormatError):
                raise rec
            for key in _KNOWN:
                if key not in rec:
                    raise TraceFormatError(name, line, key, "missing")
            chat = need_int(rec["chat_id"], name, line, "chat_id", 0)
            if chat in chat_line:
                raise TraceFormatError(name, line, "chat_id", f"{chat} duplicates line {chat_line[chat]}")
            parent = need_int(rec["parent_chat_id"], name, line, "parent_chat_id", -1)
            ts = need_number(rec["timestamp"], name, line, "timestamp", "seconds")
            prompt = need_int(rec["input_length"], name, line, "input_length", 1)
            labels = {k: v for k, v in rec.items() if k not in _KNOWN}
            output = output_tokens(rec["output_length"], name, line, "output_length", labels)
            ids = rec["hash_ids"]
            if type(ids) is not array:  # (an array: split_ids' own, of non-negative 64-bit ints)
                ids = _compact(need_ids(ids, name, line, "hash_ids"))
            check_hash_count(len(ids), prompt, block, name, line, "hash_ids")
        except TraceFormatError as exc:
            out.bad(exc)
            continue
        chat_line[chat] = line
        rows.append((line, chat, parent, ts, prompt, output, ids, labels))
    t0 = min((r[3] for r in rows), default=0.0)
    arrival_of: dict[int, float] = {}  # chat -> its request's arrival (s from t0), once accepted
    session_of: dict[int, str] = {}
    orphans = gaps = 0
    first_row, refused = {}, set()
    for row in rows:
        first_row.setdefault(row[1], row)
    accepted = []  # (line, request fields but the ids, the ids of its full blocks), in order
    for line, chat, parent, ts, prompt, output, ids, labels in sorted(rows, key=lambda r: r[3]):
        after = None
        delay = 0.0
        if parent >= 0 and parent not in arrival_of and parent in first_row:
            # The parent is in the file but not before this turn: itself, later, or a cycle.
            p_line, _, _, p_ts = first_row[parent][:4]
            if parent == chat:
                why = "names the turn itself"
            elif parent in refused:  # only with --skip-bad
                why = f"names chat {parent} (line {p_line}), skipped as a bad record"
            else:
                why = (f"names chat {parent} (line {p_line}, timestamp {p_ts:g} s), which does not "
                       f"arrive before this turn (timestamp {ts:g} s); a parent must come first")
            refused.add(chat)
            out.bad(TraceFormatError(name, line, "parent_chat_id", f"{parent}: {why}"))
            continue
        if parent >= 0 and parent in arrival_of:
            after = str(parent)
            delay = max(0.0, ts - t0 - arrival_of[parent])
            session = session_of[parent]
            gaps += 1
        else:
            orphans += parent >= 0
            session = str(chat)
        session_of[chat] = session
        arrival_of[chat] = ts - t0
        accepted.append((line, (str(chat), ts - t0, prompt), (output, labels, session, after, delay),
                         ids[: prompt // block]))  # the full blocks' ids (a partial block is never a hit)
    # The ids are named in the order of the requests built (arrival), as they were one by one.
    named = chain_ids([a[3] for a in accepted])
    made = None if kernel is None else kernel.requests_of(accepted, named, block)
    if made is not None:  # (the same objects, their fields written into their slots)
        out.requests.extend(made)
        out.where.extend([a[0] for a in accepted])
    else:
        for (line, head, tail, _), hashes in zip(accepted, named):
            out.add(make_request(*head, hashes, block, *tail, ()), line)
    if gaps:
        out.warnings.append(ClosedLoopWarning(
            f"{path}: think time of {plural(gaps, 'follow-up turn')} taken as the gap to the parent turn's "
            "arrival (an upper bound: the file does not record when the parent finished)"))
    if orphans:
        out.warnings.append(f"{path}: {plural(orphans, 'turn')} {'names' if orphans == 1 else 'name'} a "
                            "parent_chat_id not in the file; "
                            "each starts its own session")
    return out.finish(path.stem, NAME, block)
