"""Shared parts of the trace readers: opening (gzip by magic bytes), JSON lines, field checks,
and the per-trace checks every format gets (duplicate ids, label types, ``after`` references).

Nothing here knows a particular format; each reader module uses these helpers and keeps its own
field names.
"""

from __future__ import annotations

import gzip
import io
import json
import math
import re
import zlib
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from operator import attrgetter
from pathlib import Path
from typing import IO, Any

from fairsim.compiled import compiled_twin
from fairsim.errors import TraceFormatError
from fairsim.record import field, record
from fairsim.traces.trace import Trace
from fairsim.types import Request

GZIP_MAGIC = b"\x1f\x8b"
"""The first two bytes of a gzip stream (RFC 1952, section 2.3.1)."""

_BOM = b"\xef\xbb\xbf"  # UTF-8's byte order mark, which "utf-8-sig" drops at a line's start

HEAD_BYTES = 64 * 1024
"""How much of a file (decompressed) the format sniffers see, at least."""

FIRST_LINE_MAX = 256 * 1024 * 1024
"""Longest first line read whole for sniffing (a one-line JSON session document can be MBs)."""

OBSERVED_OUTPUT = "observed_output_length"
"""Label recording an output length of 0 in the file (the request itself gets ``output_len=1``:
vLLM always samples at least one token, the one that ends the prefill)."""

GZIP_CUT_SHORT = ("the gzip stream ends before its end-of-stream marker (the file was cut short); "
                  "this line and any after it are lost")
"""The error of a gzip file cut short (a download that stopped), at the first line it loses."""


@record(frozen=True)
class Head:
    """What a format's ``sniff`` sees of a path.

    Attributes:
        path: The path given by the user.
        is_dir: True for a folder (Claude Code session folders, RAGPulse data folders).
        data: The first ``HEAD_BYTES`` bytes, gunzipped when the file starts with the gzip magic,
            extended to the end of the first line when that is longer (up to
            ``FIRST_LINE_MAX``); empty for a folder.
        first_record: The first non-blank line decoded as JSON; where it does not parse (a record
            cut short, a stray byte), the next line of the head that is a JSON object; None when
            neither is there (a CSV file's, whose readers sniff ``text``).
    """

    path: Path
    is_dir: bool
    data: bytes
    first_record: Any = None

    @property
    def text(self) -> str:
        """``data`` as text (undecodable bytes replaced)."""
        return self.data.decode("utf-8-sig", errors="replace")


def open_binary(path: Path) -> IO[bytes]:
    """Open ``path`` for reading bytes, decompressing gzip when its first bytes are the magic.

    The suffix is not consulted: a ``.jsonl`` that is gzip-compressed reads, and so does a
    ``.gz`` that is not.
    """
    fh = path.open("rb")
    try:
        magic = fh.read(6)
        fh.seek(0)
    except io.UnsupportedOperation:  # a pipe (``<(cmd)``, a FIFO): readers read a file twice
        fh.close()
        raise OSError(f"{path}: a pipe or stream, which fairsim cannot read twice (the format's check "
                      "reads its head first): write it to a file") from None
    if magic[:2] == GZIP_MAGIC:
        return gzip.GzipFile(fileobj=fh, mode="rb")  # type: ignore[return-value]
    for start, kind in _OTHER_COMPRESSION:
        if magic.startswith(start) and (kind != "bzip2" or magic[3:4].isdigit()):  # BZh1..BZh9
            fh.close()
            raise OSError(f"{path}: compressed with {kind}; fairsim reads plain text or gzip: decompress it first")
    return fh


#: Magic numbers of the compressions fairsim does not read (said so, rather than "not UTF-8").
_OTHER_COMPRESSION = ((b"\xfd7zXZ\x00", "xz"), (b"BZh", "bzip2"), (b"\x28\xb5\x2f\xfd", "zstd"),
                      (b"PK\x03\x04", "zip"))


def json_where(exc: json.JSONDecodeError, line: str) -> str:
    """Where in a one-record line ``json.loads`` stopped: ``at character N`` (1-based), or ``the
    line ends early`` for a record cut short (a truncated download)."""
    if exc.pos >= len(line.rstrip("\r\n")):
        return "the line ends early"
    return f"at character {exc.pos + 1}"


def _read_upto(fh: IO[bytes], n: int) -> bytes:
    """Up to ``n`` bytes of ``fh``; a gzip stream cut short (``EOFError``) gives what came before
    the cut (``iter_json_lines`` reports the cut itself at its line)."""
    parts: list[bytes] = []
    got = 0
    try:
        while got < n:
            part = fh.read1(n - got)  # one read at a time: a cut loses none of the earlier ones
            if not part:
                break
            parts.append(part)
            got += len(part)
    except EOFError:
        pass
    return b"".join(parts)


def read_head(path: Path) -> Head:
    """The ``Head`` of ``path`` (a file or a folder).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        OSError: A broken gzip stream (the message names the file).
    """
    path = Path(path)
    if path.is_dir():
        return Head(path, True, b"", None)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such trace file or folder")
    try:
        with open_binary(path) as fh:
            data = _read_upto(fh, HEAD_BYTES)
            # A first record longer than the head (a long hash_ids list, a one-line JSON
            # document): read on to the end of that line so it can be decoded.
            while b"\n" not in data.lstrip() and len(data) < FIRST_LINE_MAX:
                more = _read_upto(fh, HEAD_BYTES * 16)
                if not more:
                    break
                data += more
    except PermissionError:
        raise OSError(f"{path}: cannot read: permission denied") from None
    except (gzip.BadGzipFile, zlib.error) as exc:
        raise OSError(f"{path}: cannot read (broken gzip stream?): {exc}") from None
    except OSError as exc:
        raise OSError(str(exc) if str(exc).startswith(f"{path}:") else f"{path}: cannot read: {exc}") from None
    first, seen = None, False
    for raw in data.splitlines():
        if raw.strip():
            if seen and not raw.removeprefix(_BOM).lstrip().startswith(b"{"):
                # Not a JSON object (a CSV row): no decode, whose failure costs more than a
                # row's read (a CSV's 64 KiB head is ~1,800 rows, 9 ms of a light run).
                continue
            try:
                record = json.loads(raw.decode("utf-8-sig"))
            except (UnicodeDecodeError, json.JSONDecodeError):
                record = None
            if not seen:
                first, seen = record, True
                if record is not None or raw.strip() in (b"{", b"["):  # (a pretty-printed document's start)
                    break
            elif isinstance(record, dict) and record:
                # The first line is a broken record (cut short, a stray byte): the format is told
                # from the next whole one, and its reader names the broken line (or --skip-bad).
                first = record
                break
    return Head(path, False, data, first)


_DIGITS_TO_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_DIGITS = b"0" * 19
_ZEROS = re.compile(rb"0+")
_INT64_MIN, _UINT64_MAX = -2**63, 2**64 - 1


def _orjson_safe(raw: bytes) -> bool:
    """False when ``raw`` may hold an integer outside ``orjson``'s int64/uint64 range, which it
    would read as a float (the standard library keeps it an int).

    Only a run of 19+ digits can be one; such runs are found in ``raw.translate(_DIGITS_TO_ZERO)``
    with ``bytes.find`` (a tenth of the cost of a regex search over the line) and checked as
    integers (with a ``-`` in front, negative). A run inside a string or among a float's digits
    is checked too, which can only send a line to the standard library needlessly. Dynamo's u64
    hashes are in range: their lines keep ``orjson``.
    """
    zeros = raw.translate(_DIGITS_TO_ZERO)
    at = zeros.find(_LONG_DIGITS)
    while at >= 0:
        end = _ZEROS.match(zeros, at).end()
        if end - at > 20:  # beyond 2**64 - 1 (20 digits); never int() it (4300-digit limit)
            return False
        start = at - 1 if at and raw[at - 1] == 45 else at  # 45: "-"
        if not _INT64_MIN <= int(raw[start:end]) <= _UINT64_MAX:
            return False
        at = zeros.find(_LONG_DIGITS, end)
    return True


def orjson_safe_check() -> Callable[[bytes], bool]:
    """``_orjson_safe``, or its compiled twin (``_mooncake_c.orjson_safe``: the same answers)
    where it is built."""
    kernel = compiled_twin("fairsim.traces.formats._mooncake_c")
    return getattr(kernel, "orjson_safe", None) or _orjson_safe


def iter_json_lines(path: Path, split: Callable[[bytes], tuple[bytes, Any] | None] | None = None,
                    field: str = "hash_ids",
                    scan: Callable[[bytes], tuple[Any, ...] | None] | None = None) -> Iterator[tuple[int, Any]]:
    """Yield ``(line_number, decoded JSON object or TraceFormatError)`` for each record line.

    Blank lines at the end of the file are accepted (RAGPulse files end with several); a blank
    line followed by more records is an error on the blank line. A byte-order mark on line 1 is
    accepted. A line that is valid JSON but not an object is an error too (every JSONL format
    here has one object a line). Errors are yielded, not raised, so a reader can skip them
    (``skip_bad``).

    Each line is parsed by ``orjson`` (several times faster than ``json``, the trace read is the
    largest fixed cost of a run). Whatever ``orjson`` refuses or could read differently
    from the standard library (a non-object, a blank line, a byte-order mark, NaN/Infinity, lone
    surrogates, invalid UTF-8, an integer beyond 64 bits: ``_orjson_safe``) is parsed by
    ``json`` as before, so records, values and error messages are those of ``json.loads``.

    A gzip file cut short yields its complete lines, then an error at the line after them.

    ``split`` (a compiled scanner, e.g. ``_chain_c.split_ids``) may take a line's long integer
    array ``field`` from its bytes: ``(rest, values)``, ``rest`` the line with that array written
    ``[]``. ``rest`` is parsed instead of the line, and where its top-level ``field`` is that empty
    array, ``values`` (e.g. an ``array('q')``) is put in its place; anything else (None, a
    ``rest`` that is not an object, a ``field`` that is not the placeholder) parses the line as
    above.

    ``scan`` (a compiled reader of a format's common record, e.g. ``_chain_c.RowScanner``) may
    take a whole line first: a tuple it returns is yielded in place of the record (what the
    format's checks would make of it), after the blank-line check; None goes on as above.
    """
    import orjson  # here, not at import: a CSV trace never pays its start-up (~5 ms)

    blank_line = line_no = 0
    name = str(path)
    loads = orjson.loads
    fast_error = orjson.JSONDecodeError
    digits, long_digits, safe = _DIGITS_TO_ZERO, _LONG_DIGITS, orjson_safe_check()
    # The compiled check is one pass over the bytes, True at once for a line without a run of
    # 19+ digits: the translate-and-find test before it only spares the Python check that pass
    # (a Dynamo row, whose every line has such runs, paid both).
    whole = safe is not _orjson_safe
    try:
        with open_binary(path) as fh:
            for line_no, raw in enumerate(fh, start=1):
                if scan is not None:
                    rec = scan(raw)
                    if rec is not None:
                        if blank_line:
                            yield blank_line, TraceFormatError(name, blank_line, "<json>", "empty line before more records")
                            blank_line = 0
                        yield line_no, rec
                        continue
                rec = None
                got = split(raw) if split is not None else None
                if got is not None:
                    rest, values = got
                    if (safe(rest) if whole else long_digits not in rest.translate(digits) or safe(rest)):
                        try:
                            rec = loads(rest)
                        except fast_error:
                            pass
                    if type(rec) is dict and type(rec.get(field)) is list and not rec[field]:
                        rec[field] = values  # the placeholder: the array as read from the bytes
                    else:
                        rec = None
                if rec is None and (safe(raw) if whole else long_digits not in raw.translate(digits) or safe(raw)):
                    try:
                        rec = loads(raw)
                    except fast_error:
                        pass
                if type(rec) is dict:
                    if blank_line:
                        yield blank_line, TraceFormatError(name, blank_line, "<json>", "empty line before more records")
                        blank_line = 0
                    yield line_no, rec
                    continue
                try:
                    text = raw.decode("utf-8-sig" if line_no == 1 else "utf-8")
                except UnicodeDecodeError as exc:
                    yield line_no, TraceFormatError(name, line_no, "<json>", f"not UTF-8 text: {exc.reason}")
                    continue
                if not text.strip():
                    blank_line = blank_line or line_no
                    continue
                if blank_line:
                    yield blank_line, TraceFormatError(name, blank_line, "<json>", "empty line before more records")
                    blank_line = 0
                try:
                    rec = json.loads(text)
                except json.JSONDecodeError as exc:
                    # (a message such as "Invalid control character at" ends where its position went)
                    yield line_no, TraceFormatError(name, line_no, "<json>",
                                                    f"not valid JSON: {exc.msg.removesuffix(' at')} "
                                                    f"({json_where(exc, text)})")
                    continue
                except (ValueError, RecursionError) as exc:  # beyond Python's int digits or nesting
                    yield line_no, TraceFormatError(name, line_no, "<json>", f"cannot be read: {exc}")
                    continue
                if not isinstance(rec, dict):
                    yield line_no, TraceFormatError(name, line_no, "<json>",
                                                    f"expected an object, got {type(rec).__name__}")
                    continue
                bad = lone_surrogate(rec)
                if bad is not None:
                    yield line_no, TraceFormatError(name, line_no, bad, LONE_SURROGATE)
                    continue
                yield line_no, rec
    except EOFError:  # a gzip file cut short (a download that stopped): the lines before it stand
        yield line_no + 1, TraceFormatError(name, line_no + 1, "<gzip>", GZIP_CUT_SHORT)
    except (gzip.BadGzipFile, zlib.error) as exc:
        raise OSError(f"{path}: broken gzip stream: {exc}") from None


def lone_surrogate(value: Any, path: str = "") -> str | None:
    """The JSON path (``request_id``, ``extra.tags[1]``) of the first string in a decoded JSON
    value, keys included, that holds a lone UTF-16 surrogate (a ``\\ud800`` escape without its
    pair), else None.

    ``json.loads`` takes such an escape, but the string is no Unicode text: it cannot be written
    as UTF-8, so a request id, session id or label holding one would fail only when the tables
    are written, after the simulation. (``orjson`` refuses such a line, so only the records read
    by the standard library are walked.)
    """
    if isinstance(value, str):
        return path if not_utf8(value) else None
    if isinstance(value, dict):
        for key, item in value.items():
            at = f"{path}.{key}" if path else key
            if not_utf8(key):
                return at
            if isinstance(item, (str, list, dict)):
                found = lone_surrogate(item, at)
                if found is not None:
                    return found
    elif isinstance(value, list):
        for i, item in enumerate(value):
            if isinstance(item, (str, list, dict)):
                found = lone_surrogate(item, f"{path}[{i}]")
                if found is not None:
                    return found
    return None


def not_utf8(text: str) -> bool:
    """Whether ``text`` holds a lone surrogate (a ``\\ud800`` escape without its pair, or a byte
    that was not UTF-8 read with ``surrogateescape``), which UTF-8 text, and so the tables,
    cannot hold."""
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
"""A JSON escape of a UTF-16 surrogate (paired or not): a text without one has no lone surrogate."""
LONE_SURROGATE = ("holds a lone UTF-16 surrogate escape (e.g. \\ud800 without its pair), which is "
                  "no Unicode character and cannot be written out as UTF-8 text")


def first_of(rec: dict[str, Any], names: Sequence[str], path: str | None = None,
             where: int | str = 0) -> tuple[str, Any] | None:
    """``(name, value)`` of the one of ``names`` (field aliases) present in ``rec``, else None.

    Raises:
        TraceFormatError: With ``path``: two aliases are both present (the record would say two
            things; neither is taken silently). Without ``path`` (sniffing) the first one wins.
    """
    present = [name for name in names if name in rec]
    if len(present) > 1 and path is not None:
        raise TraceFormatError(path, where, present[1], f"given together with '{present[0]}' (aliases "
                               "of one field); give one")
    return (present[0], rec[present[0]]) if present else None


def need_int(value: Any, path: str, where: int | str, name: str, minimum: int) -> int:
    """``value`` as an int >= ``minimum``.

    Integral floats (``12.0``) are refused: a token count written as a float is a broken file.

    Raises:
        TraceFormatError: Naming the field.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise TraceFormatError(path, where, name, f"must be an integer, got {value!r}")
    if value < minimum:
        kind = "negative" if value < 0 else "too small"
        raise TraceFormatError(path, where, name, f"{kind}: {value} (need >= {minimum})")
    return value


def need_number(value: Any, path: str, where: int | str, name: str, unit: str) -> float:
    """``value`` as a finite number >= 0 (``unit`` names it in the message).

    Raises:
        TraceFormatError: Naming the field.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TraceFormatError(path, where, name, f"must be a number of {unit}, got {value!r}")
    try:
        number = float(value)
    except OverflowError:  # an integer beyond the float range
        raise TraceFormatError(path, where, name, f"must be a number of {unit}, got an integer of "
                               f"{len(str(abs(value)))} digits (too large)") from None
    if not math.isfinite(number):
        raise TraceFormatError(path, where, name, f"must be a number of {unit}, got {value!r}")
    if value < 0:
        raise TraceFormatError(path, where, name, f"negative: {value}")
    return number


_INT_ONLY = frozenset({int})


def need_ids(value: Any, path: str, where: int | str, name: str) -> list[int]:
    """A list of integer hash ids. Strings of decimal digits (u64 hashes written as text) are
    parsed as integers; floats never are (a float loses bits of a 64-bit hash).

    Raises:
        TraceFormatError: Naming the field.
    """
    if not isinstance(value, list):
        raise TraceFormatError(path, where, name, f"must be a list of integers, got {type(value).__name__}")
    if set(map(type, value)) <= _INT_ONLY:  # the common case, checked at C speed (bool is not int here)
        return list(value)
    out = []
    for i, h in enumerate(value):
        if isinstance(h, int) and not isinstance(h, bool):
            out.append(h)
        elif isinstance(h, str) and h.isdigit():
            out.append(int(h))
        else:
            raise TraceFormatError(path, where, name, f"entry {i} is {h!r}, not an integer")
    return out


def output_tokens(value: Any, path: str, where: int | str, name: str, labels: dict[str, Any]) -> int:
    """The request's ``output_len`` from a recorded output length.

    0 is accepted (a request that ended at its first token, or an aborted one): the request gets
    1, since vLLM samples at least one token, and the 0 is kept as the label
    ``observed_output_length``.

    Raises:
        TraceFormatError: Not an integer, or negative.
    """
    n = need_int(value, path, where, name, 0)
    if n == 0:
        labels[OBSERVED_OUTPUT] = 0
        return 1
    return n


def check_hash_count(n_ids: int, prompt_len: int, block: int, path: str, where: int | str,
                     name: str) -> None:
    """Accept ``n_ids == ceil(prompt_len / block)`` (the partial last block has an id) or
    ``floor(...)`` (it has none); both conventions are in public files.

    Raises:
        TraceFormatError: Any other count.
    """
    if n_ids not in (-(-prompt_len // block), prompt_len // block):
        raise TraceFormatError(
            path, where, name,
            f"has {n_ids} ids but {prompt_len} tokens span {-(-prompt_len // block)} blocks of "
            f"{block} tokens ({prompt_len // block} full); wrong hash block size? "
            f"(--hash-block-size)")


def check_chained(ids: Sequence[int], path: str, where: int | str, name: str) -> None:
    """Refuse an id that stands at two positions of one prompt.

    Chained ids (Mooncake, Dynamo, Claude Code; ``../shared/design/TRACES.md``) name a block
    together with everything before it, so equal ids mean equal prefixes and one id cannot name
    two prefixes of different lengths. Ids that repeat are content hashes of single blocks.

    Raises:
        TraceFormatError: Naming the id and its first two positions.
    """
    if len(set(ids)) == len(ids):
        return
    first: dict[int, int] = {}
    for i, h in enumerate(ids):
        if h in first:
            raise TraceFormatError(
                path, where, name,
                f"id {h} stands at positions {first[h]} and {i}; this format's ids are chained (an "
                "id names its block together with everything before it), so one id cannot stand at "
                "two positions of a prompt. Ids that name a block's content alone must be chained "
                "first (id of block i = hash of ids 0..i)")
        first[h] = i


def full_block_ids(ids: Sequence[int], prompt_len: int, block: int) -> tuple[int, ...]:
    """The ids of the *full* blocks (a partial last block is never a cache hit)."""
    return tuple(ids[: prompt_len // block])


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


@record
class Collector:
    """Collects one trace's requests and bad records, then runs the whole-trace checks.

    Args:
        path: The file (or folder) read, for messages.
        skip_bad: Keep bad records in ``skipped`` instead of raising.
    """

    path: Path
    skip_bad: bool
    requests: list[Request] = field(default_factory=list)
    where: list[int | str] = field(default_factory=list)
    skipped: list[TraceFormatError] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    stats: Counter = field(default_factory=Counter)
    """Counts a reader keeps for its warnings (e.g. requests whose delay fell back to a gap)."""

    def bad(self, exc: TraceFormatError) -> None:
        """Record a bad record (``skip_bad``) or raise it."""
        if not self.skip_bad:
            raise exc
        self.skipped.append(exc)

    def add(self, request: Request, where: int | str) -> None:
        """Keep a good request and where it came from (line or JSON path)."""
        self.requests.append(request)
        self.where.append(where)

    def finish(self, name: str, fmt: str, hash_block_size: int | None, *,
               absolute_time: bool = True, sort: bool = True) -> Trace:
        """Check the collected requests as a whole and build the ``Trace``.

        Checks, each naming the file and both lines where two records are involved: duplicate
        ``request_id``; a label whose JSON type (number, string, bool, list, object) differs from
        the first record that has it; an ``after`` naming no request of the trace, or one that
        arrives after the request that follows it (a time reversal: the reader's links or the
        file's ``after``; Bailian refuses its own the same way). With
        ``skip_bad`` the later record of a pair is skipped instead.

        Requests are then sorted by arrival time (stable: file order breaks ties).
        """
        path = str(self.path)
        seen: dict[str, int | str] = {}
        kinds: dict[str, tuple[str, int | str]] = {}
        keep: list[tuple[Request, int | str]] = []
        locations: dict[str, int | str] = {}
        for req, where in zip(self.requests, self.where):
            try:
                if req.request_id in seen:
                    raise TraceFormatError(path, where, "request_id",
                                           f"{req.request_id!r} duplicates {_at(seen[req.request_id])}")
                labels = req.labels
                if labels:  # most records of the public traces have none (the per-request hot path)
                    for key, value in labels.items():
                        kind = _kind(value)
                        if kind == "null":
                            continue
                        first = kinds.get(key)
                        if first is not None and first[0] != kind:
                            raise TraceFormatError(path, where, key,
                                                   f"is a {kind}, but a {first[0]} at {_at(first[1])}; "
                                                   "a label must keep one type")
                    for key, value in labels.items():
                        if value is not None:
                            kinds.setdefault(key, (_kind(value), where))
            except TraceFormatError as exc:
                self.bad(exc)
                continue
            seen[req.request_id] = where
            keep.append((req, where))
        ids = {r.request_id for r, _ in keep}
        # A turn follows a request that arrived at or before it (its recorded start cannot come
        # before its predecessor's); only traces with links pay for the map.
        linked = any(r.after is not None for r, _ in keep)
        arrivals = {r.request_id: (r.arrival_time, w) for r, w in keep} if linked else {}
        while True:  # (a dropped request drops those that follow it, with --skip-bad: to a fixpoint)
            good = []
            dropped = False
            for req, where in keep:
                if req.after is not None:
                    try:
                        if req.after not in ids:
                            raise TraceFormatError(path, where, "after",
                                                   f"names {req.after!r}, which is not a request of the trace")
                        before_s, before_at = arrivals[req.after]
                        if before_s > req.arrival_time:
                            raise TraceFormatError(
                                path, where, "after",
                                f"this request (arrival {req.arrival_time:.6g} s) follows {req.after!r} "
                                f"({_at(before_at)}), which arrives later ({before_s:.6g} s); a turn follows a "
                                "request that started before it")
                    except TraceFormatError as exc:
                        self.bad(exc)
                        ids.discard(req.request_id)
                        dropped = True
                        continue
                good.append((req, where))
            if not dropped:
                break
            keep = good
        for req, where in good:
            locations[req.request_id] = where
        good = [req for req, _ in good]
        if sort:
            good.sort(key=attrgetter("arrival_time"))
        return Trace(name=name, source=path,
                     requests=tuple(good), skipped=tuple(self.skipped), absolute_time=absolute_time,
                     hash_block_size=hash_block_size, format=fmt, warnings=tuple(self.warnings),
                     locations=locations)


def _at(where: int | str) -> str:
    return f"line {where}" if isinstance(where, int) else str(where)


def text_lines(path: Path) -> io.TextIOWrapper:
    """``path`` as text lines (gzip by magic bytes), for CSV readers. Bytes that are not UTF-8
    come as lone surrogates (``surrogateescape``), so a field holding one fails its own check,
    naming its line and column, and a column the reader does not use is not refused."""
    return io.TextIOWrapper(open_binary(path), encoding="utf-8-sig", errors="surrogateescape", newline="")
