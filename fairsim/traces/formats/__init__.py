"""Trace readers, one module per public format, behind one registry.

``FORMATS`` maps a format name to its ``TraceFormat``: ``sniff(head) -> bool`` says from the
*content* (never the suffix; gzip is detected by its magic bytes) whether a path is in that
format, and ``read(path, *, skip_bad=False, hash_block_size=None) -> Trace`` reads it. Detection
tries the formats in registry order, most specific first, and the first match wins.

Adding a format: write ``fairsim/traces/formats/NAME.py`` with ``NAME``, ``sniff`` and ``read``
(use the helpers in ``_common.py`` so errors name file, line and field), add one line to
``FORMATS`` below, a fixture in ``tests/data/formats/`` and a row in docs/traces.md's formats table.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from fairsim.record import record, replace as record_replace
from fairsim.traces.formats import azure, bailian, burstgpt, claude_code, dynamo, mooncake, ragpulse
from fairsim.errors import TraceFormatError
from fairsim.traces.formats._common import Head, open_binary, read_head
from fairsim.traces.trace import Trace


@record(frozen=True)
class TraceFormat:
    """One reader of the registry.

    Attributes:
        name: The ``--trace-format`` name.
        sniff: True when a ``Head`` (first 64 KiB, decompressed, and the first JSON record) is
            in this format.
        read: ``read(path, *, skip_bad=False, hash_block_size=None) -> Trace``.
        summary: One line for ``--help`` and the README.
        folders: True when ``read`` takes a folder too.
        parts: True when ``read`` takes ``part``: the format's files may hold several time axes
            one after another (RAGPulse weeks), and ``part`` chooses one.
        prompt_field: The file's name of a record's prompt length, for messages about it.
        supersedes: Formats whose sniff this format's files pass too, but which would misread
            them (Bailian rows look like Mooncake's, with seconds for milliseconds): a file of
            this format is never pointed at them, and reading it as one of them warns.
    """

    name: str
    sniff: Callable[[Head], bool]
    read: Callable[..., Trace]
    summary: str
    folders: bool = False
    parts: bool = False
    prompt_field: str = "input_length"
    supersedes: tuple[str, ...] = ()


def _fmt(module, summary: str) -> TraceFormat:
    """The module's reader; ``READS_FOLDERS = True`` in a module that reads a folder too,
    ``READS_PARTS = True`` in one whose ``read`` takes ``part``, ``PROMPT_FIELD`` where its
    records name the prompt length other than ``input_length``, ``SUPERSEDES`` the formats it
    supersedes (``TraceFormat.supersedes``)."""
    return TraceFormat(module.NAME, module.sniff, module.read, summary, getattr(module, "READS_FOLDERS", False),
                       getattr(module, "READS_PARTS", False), getattr(module, "PROMPT_FIELD", "input_length"),
                       getattr(module, "SUPERSEDES", ()))


FORMATS: dict[str, TraceFormat] = {f.name: f for f in (
    _fmt(dynamo, "Dynamo request traces: request_end events, u64 replay hashes, agent sessions"),
    _fmt(ragpulse, "RAGPulse: content ids + side files, exact prefix identity at any block"),
    _fmt(bailian, "Qwen-Bailian: 16-token chained hash_ids, parent_chat_id sessions"),
    _fmt(claude_code, "Claude Code session JSON (a file or a folder): 64-token ids, sub-agents"),
    _fmt(mooncake, "Mooncake JSONL: timestamp ms, hash_ids (ceil or floor count), Dynamo agentic rows"),
    _fmt(azure, "Azure CSV TIMESTAMP,ContextTokens,GeneratedTokens: no prefix identity"),
    _fmt(burstgpt, "BurstGPT CSV Timestamp,Model,Request tokens,Response tokens,...: no prefix identity"),
)}
"""Registry, in detection order."""


def prompt_field(format: str) -> str:
    """The field that holds a record's prompt length in ``format``'s files (``input_length``
    for a name not registered, such as a generated trace's)."""
    fmt = FORMATS.get(format)
    return "input_length" if fmt is None else fmt.prompt_field


def detect(path: str | Path) -> str:
    """The name of the format of ``path``, from its content.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: No format recognises it (the message lists the formats).
    """
    head = read_head(Path(path))
    for fmt in FORMATS.values():
        if fmt.sniff(head):
            return fmt.name
    if head.is_dir:
        raise ValueError(_unknown_folder(Path(path)))
    if not head.data.strip():
        raise ValueError(f"{path}: no requests in the trace: {_why_no_data(Path(path))}")
    hint = _known_lookalike(head)
    if hint is not None:
        raise ValueError(f"{path}: {hint}")
    broken = _broken_first_record(head)
    if broken is not None:
        raise ValueError(f"{path}: {broken}; no other record in its first {len(head.data):,} bytes to tell the format "
                         f"from: give --trace-format (one of: {', '.join(FORMATS)})")
    raise ValueError(
        f"{path}: cannot tell the trace format of this file from its content; give "
        f"--trace-format (one of: {', '.join(FORMATS)}). Expected e.g. Mooncake JSONL lines "
        '{"timestamp": ms, "input_length": N, "output_length": N, "hash_ids": [...]}')


def _broken_first_record(head: Head) -> str | None:
    """Why the head's first line is no record, where it is a JSON object that does not parse
    (with the gzip stream's cut where that is why), else None."""
    for number, raw in enumerate(head.data.splitlines(), 1):
        if raw.strip():
            if not raw.lstrip().startswith(b"{"):
                return None
            try:
                json.loads(raw.decode("utf-8-sig"))
                return None
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                why = f"line {number} is not valid JSON ({exc})"
                if _cut_short(head.path):
                    why += ": the gzip stream ends there, cut short (the download stopped?)"
                return why
    return None


def _why_no_data(path: Path) -> str:
    """Why a file gave no data: empty (or blank), or a gzip stream cut short before any."""
    if _cut_short(path):
        return "a gzip stream cut short before its first line (the download stopped?)"
    return "the file is empty"


def _cut_short(path: Path) -> bool:
    """True for a gzip stream that ends before its end-of-stream marker."""
    try:
        with open_binary(path) as fh:
            while fh.read(1 << 16):
                pass
    except EOFError:
        return True
    return False


def _folder_formats() -> str:
    return " or ".join(f.name for f in FORMATS.values() if f.folders)


def _unknown_folder(path: Path) -> str:
    """Why a folder is no trace: only some formats read folders; name what its files are (or
    the trace a fairsim ``--out`` folder ran, from its ``run.json``)."""
    ran = _results_of(path)
    if ran is not None:
        return (f"{path}: is a fairsim --out folder (results, not a trace); its run.json names the trace "
                f"it ran: {ran}")
    looks: dict[str, str] = {}
    subfolders = [c for c in sorted(path.iterdir())[:64] if c.is_dir() and not c.name.startswith(".")]
    folders = [f"{c.name} ({f.name})" for c in subfolders for f in FORMATS.values()
               if f.folders and f.sniff(read_head(c))][:8]
    if folders:  # e.g. one RAGPulse data folder a week: each its own time axis
        return (f"{path}: is no trace folder itself; its subfolders look like trace folders: "
                f"{', '.join(folders)}; give one of them to --trace (fairsim does not overlay them on one "
                f"time axis)")
    for child in sorted(path.iterdir())[:64]:
        if child.is_file() and not child.name.startswith("."):
            try:
                head = read_head(child)
            except OSError:
                continue
            name = next((f.name for f in FORMATS.values() if f.sniff(head)), None)
            if name is not None:
                looks.setdefault(name, child.name)
    said = (f"; its files look like {', '.join(f'{k} (e.g. {v})' for k, v in looks.items())}: give one "
            f"file to --trace, or join them into one file in time order") if looks else ""
    return (f"{path}: a folder is read only as {_folder_formats()} (see docs/traces.md's formats table), and "
            f"this one is neither{said}")


def _results_of(path: Path) -> str | None:
    """The ``trace`` that ``path/run.json`` names when ``path`` is a fairsim ``--out`` folder
    (``fairsim.run.write_run_info``), else None."""
    try:
        info = json.loads((path / "run.json").read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    trace = info.get("trace") if isinstance(info, dict) else None
    return trace if isinstance(trace, str) and isinstance(info.get("policies"), list) else None


def _known_lookalike(head: Head) -> str | None:
    """A message for files that are often mistaken for traces, else None."""
    if head.data.startswith(b"version https://git-lfs.github.com/spec/"):
        return ("is a Git LFS pointer, not the trace itself: fetch the file's content (git lfs pull in "
                "its repository, or download the file) and give that")
    rec = head.first_record
    if isinstance(rec, dict) and rec.get("type") in ("user", "assistant", "summary", "system") and (
            "sessionId" in rec or "uuid" in rec or "leafUuid" in rec):
        return ("looks like a Claude Code transcript (~/.claude/projects/*.jsonl), which records no "
                "prefix identity; the claude-code format is the session documents with per-request "
                "token counts and hash_ids (kv-cache-tester traces; docs/traces.md's formats table)")
    return None


def _read(fmt: TraceFormat, path: str | Path, skip_bad: bool, hash_block_size: int | None,
          part: int | None) -> Trace:
    """``fmt.read`` with ``part`` passed to the readers that take it.

    Raises:
        ValueError: ``part`` given to a format whose files have one time axis.
    """
    if part is None:
        return fmt.read(path, skip_bad=skip_bad, hash_block_size=hash_block_size)
    if not fmt.parts:
        takes = " or ".join(f.name for f in FORMATS.values() if f.parts)
        raise ValueError(f"--trace-part {part}: {path} is a {fmt.name} trace, which has one time axis; "
                         f"--trace-part chooses a part (a week) of {takes} files")
    return fmt.read(path, skip_bad=skip_bad, hash_block_size=hash_block_size, part=part)


def read_trace(path: str | Path, format: str = "auto", *, skip_bad: bool = False,
               hash_block_size: int | None = None, part: int | None = None) -> Trace:
    """Read ``path`` with the named reader, or the detected one (``format="auto"``).

    ``part`` (``--trace-part``, 1-based) chooses one part of a file whose time axis restarts
    (RAGPulse weeks; ``TraceFormat.parts``).

    Raises:
        ValueError: Unknown format name, undetectable content, a bad ``hash_block_size``, a
            ``part`` for a format without parts, or one the file does not have.
        TraceFormatError: A bad record (file, line or JSON path, field), unless ``skip_bad``.
        FileNotFoundError: ``path`` does not exist.
    """
    if hash_block_size is not None and hash_block_size < 1:
        raise ValueError(f"--hash-block-size {hash_block_size}: need >= 1 token")
    if part is not None and part < 1:
        raise ValueError(f"--trace-part {part}: need a part number >= 1")
    if format == "auto":
        return _read_naming_others(detect(path), True, path, skip_bad, hash_block_size, part)
    elif format not in FORMATS:
        raise ValueError(f"--trace-format {format!r}: unknown; known: auto, {', '.join(FORMATS)}")
    elif not Path(path).exists():
        raise FileNotFoundError(f"{path}: no such trace file or folder")
    elif Path(path).is_dir() and not FORMATS[format].folders:
        raise ValueError(f"{path}: is a folder; --trace-format {format} reads one file (folders are read "
                         f"only as {_folder_formats()})")
    return _read_naming_others(format, False, path, skip_bad, hash_block_size, part)


def _read_naming_others(format: str, detected: bool, path: str | Path, skip_bad: bool,
                        hash_block_size: int | None, part: int | None) -> Trace:
    """``_read`` with reader ``format``; a refused record's error names the other readers the
    content fits (``detected``: the format came from the content, which may fit several; else
    it was named, and a file in that format has a bad record, not the wrong reader).

    Raises:
        TraceFormatError: As ``_read``, its reason extended where another reader fits.
    """
    try:
        trace = _read(FORMATS[format], path, skip_bad, hash_block_size, part)
    except TraceFormatError as exc:
        try:
            head = read_head(Path(path))
        except OSError:
            raise exc from None
        lookalike = None if detected else _known_lookalike(head)  # (detection named it already)
        if lookalike is not None:  # a Git LFS pointer, a transcript: no record of it is the cause
            raise ValueError(f"{path}: {lookalike}") from None
        better = _superseding(format, head)
        own = FORMATS[format].sniff(head)
        if not detected and own and not better:
            raise  # the file is in the format asked for: the record itself is bad
        # A format this one supersedes fits its files too (Bailian rows pass Mooncake's sniff):
        # named only where the content is not this format's.
        others = [f.name for f in FORMATS.values() if f.name != format and f.sniff(head)
                  and (not own or f.name not in FORMATS[format].supersedes)]
        others.sort(key=lambda name: name not in better)
        if not others:
            raise
        said = (f"detected from the content; it also looks like {' or '.join(others)}: give --trace-format "
                f"{others[0]} to read it so" if detected else
                f"as --trace-format asked; the content looks like {' or '.join(others)}: give --trace-format "
                f"{others[0]} (or auto)")
        raise TraceFormatError(exc.path, exc.line, exc.field, f"{exc.reason} [read as {format}, {said}]") from None
    except ValueError as exc:  # a whole-file refusal (no record to name): the same hint, when named
        if detected:
            raise
        try:
            head = read_head(Path(path))
        except OSError:
            raise exc from None
        if FORMATS[format].sniff(head):
            raise
        others = [f.name for f in FORMATS.values() if f.name != format and f.sniff(head)]
        if not others:
            raise
        raise ValueError(f"{exc} [read as {format}, as --trace-format asked; the content looks like "
                         f"{' or '.join(others)}: give --trace-format {others[0]} (or auto)]") from None
    if not detected and any(format in f.supersedes for f in FORMATS.values()):  # (else no head to read)
        better = _superseding(format, read_head(Path(path)))
        if better:
            warning = (f"{path}: read as {format}, as --trace-format asked, but the content is {better[0]}'s "
                       f"(which {format} misreads): give --trace-format {better[0]} (or auto)")
            trace = record_replace(trace, warnings=(*trace.warnings, warning))
    return trace


def _superseding(format: str, head: Head) -> list[str]:
    """The formats the content ``head`` fits that supersede ``format`` (``TraceFormat.supersedes``)."""
    return [f.name for f in FORMATS.values() if format in f.supersedes and f.sniff(head)]


__all__ = ["FORMATS", "TraceFormat", "detect", "prompt_field", "read_trace"]
