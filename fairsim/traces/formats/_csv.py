"""What the CSV readers (Azure, BurstGPT) share: the header's columns found by name, rows of the
wrong shape refused by line, and counts parsed with ``int()``'s rules.

A row's line is the file's (``csv.reader.line_num``: blank lines counted); a row with a value
beyond the header's fields is refused (field ``<row>``: a comma inside a value, as in ``4,808``,
would shift the columns), an empty one (a trailing comma) is only empty; a row ``csv``
refuses (a field over its 131,072 characters: an unclosed quote) is refused at the line it
begins (field ``<row>``); a short row's missing fields are None, which the reader refuses where
it reads them (``MISSING_FIELD``).
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from fairsim.compiled import compiled_twin
from fairsim.errors import TraceFormatError
from fairsim.traces.formats._common import GZIP_CUT_SHORT, OBSERVED_OUTPUT, Collector, open_binary, text_lines
from fairsim.traces.trace import Trace

COMPILED_MODULE = "fairsim.traces.formats._csv_c"
"""The plain rows' compiled twin (built at install by ``setup.py``; ``compiled_plain``)."""

MISSING_FIELD = "missing (the row has fewer fields than the header)"


def count(value: str | None, path: str, line: int, column: str) -> int:
    """A count column's text as an int (``int()``'s rules: spaces, a sign, underscores).

    Raises:
        TraceFormatError: Not an integer (or the field is missing).
    """
    if value is None:
        raise TraceFormatError(path, line, column, MISSING_FIELD)
    try:
        return int(value)
    except ValueError:
        raise TraceFormatError(path, line, column, f"must be an integer, got {value!r}") from None


def first_line(head: Any) -> str:
    """The first line of a detection head's text, lower case; "" for none (an empty file, or one
    holding only a byte-order mark, whose text is empty)."""
    lines = head.text.splitlines() if head.data else []
    return lines[0].lower() if lines else ""


def positions(header: Sequence[str], columns: Sequence[str]) -> list[int] | None:
    """The positions of ``columns`` in a header row (names matched without regard to case or
    surrounding spaces); None where one is missing or named twice (``header_error`` says which)."""
    given = [str(f).strip().lower() for f in header]
    if any(given.count(c.lower()) != 1 for c in columns):
        return None
    return [given.index(c.lower()) for c in columns]


def header_error(name: str, header: Sequence[str], columns: Sequence[str]) -> TraceFormatError:
    """The error of a header ``positions`` refused: a column missing, or named twice (which of
    the two holds the values cannot be told; ``csv.DictReader`` would keep the last silently)."""
    given = [str(f).strip().lower() for f in header]
    for c in columns:
        at = [i + 1 for i, f in enumerate(given) if f == c.lower()]
        if len(at) > 1:
            return TraceFormatError(name, 1, c, f"named twice in the header (columns {at[0]} and {at[1]}): "
                                                "keep one")
    missing = [c for c in columns if c.lower() not in given]
    if not header:
        return TraceFormatError(name, 1, missing[0], "missing column (the file has no header line: it is empty)")
    shown = list(header[:6]) + ["..."] if len(header) > 6 else list(header)  # a JSON line splits into many
    return TraceFormatError(name, 1, missing[0], f"missing column (header: {shown})")


def read_plain(path: Path, fmt: str, columns: Sequence[str], block: Any, max_requests: int | None = None,
               labels: Callable[[list[str]], tuple[Sequence[int], Sequence[str]]] | None = None,
               **how: Any) -> Trace | None:
    """The reader's ``Trace`` of a file of plain rows, read by the compiled twin
    (``compiled_plain``), or None: no twin built, or a file it hands back to the Python path.
    Its requests are in arrival order with distinct ids, no ``after`` and text labels, so
    ``Collector.finish`` has nothing to check or sort."""
    kernel = compiled_twin(COMPILED_MODULE)
    plain = None if kernel is None else compiled_plain(kernel, path, columns, block, max_requests, labels, **how)
    if plain is None:
        return None
    requests, locations = plain
    return Trace(name=path.stem, source=str(path), requests=tuple(requests), skipped=(), absolute_time=True,
                 hash_block_size=block, format=fmt, warnings=(), locations=locations)


def compiled_plain(kernel: Any, path: Path, columns: Sequence[str], block: Any, max_requests: int | None,
                   labels: Callable[[list[str]], tuple[Sequence[int], Sequence[str]]] | None = None,
                   **how: Any) -> tuple[list, dict[str, int]] | None:
    """``kernel.plain_requests`` over the file's body, or None: a header it does not take (a
    quote, a carriage return inside it, a byte outside ASCII, a missing column, a problem
    ``labels`` raises), a row it does not take, or a file it cannot read to the end (a broken or
    cut gzip stream), which the reader's Python path then reads and reports as it always does.

    Args:
        kernel: ``fairsim.traces.formats._csv_c``.
        columns: The time, prompt and output columns.
        labels: ``header -> (positions, names)`` of the columns kept as text labels.
        how: ``seconds``, ``rebase`` (``_csv_c.plain_requests``).
    """
    if type(block) is not int or block < 1:
        return None  # Request refuses it: the Python path says so
    try:
        with open_binary(path) as fh:
            header = fh.readline()
            if header.startswith(b"\xef\xbb\xbf"):  # utf-8-sig: text_lines drops the byte-order mark
                header = header[3:]
            header = header[:-1] if header.endswith(b"\n") else header
            header = header[:-1] if header.endswith(b"\r") else header
            if not header.isascii() or any(c in header for c in (b'"', b"\r", b"\0")):
                return None
            fields = header.decode("ascii").split(",")
            where = positions(fields, columns)
            if where is None:
                return None
            label_at, label_names = ((), ()) if labels is None else labels(fields)
            return kernel.plain_requests(fh, *where, len(fields), path.stem, block, max_requests, OBSERVED_OUTPUT,
                                         label_at=tuple(label_at), label_names=tuple(label_names), **how)
    except (OSError, EOFError, zlib.error, TraceFormatError):
        return None


def rows(path: Path, columns: Sequence[str], out: Collector,
         optional: Callable[[list[str]], Sequence[int]] | None = None
         ) -> Iterator[tuple[int, list[str | None], list[str | None]]]:
    """The rows of a CSV file with a header naming ``columns``, as ``(line, values, extras)``:
    ``values`` the row's fields of ``columns`` in their order, ``extras`` those at the positions
    ``optional(header)`` gives (None where the row is short); ``optional`` may raise a
    ``TraceFormatError`` about the header.

    A row of the wrong shape goes to ``out.bad`` (module docstring) and is not yielded; so does a
    gzip stream cut short (field ``<gzip>``, at the first line lost: the rows before it stand).

    Raises:
        TraceFormatError: A column of ``columns`` missing or named twice (line 1).
        OSError: A broken gzip stream.
    """
    import csv  # here: a run on another format does not import it at start-up

    name = str(path)
    with text_lines(path) as fh:
        reader = csv.reader(fh)
        try:
            try:
                header = next(reader, [])
            except csv.Error as exc:  # the header itself: nothing can be read without it
                raise TraceFormatError(name, reader.line_num, "<header>", f"not a CSV header: {exc}") from None
            # The header as written may differ in case or spaces (" ContextTokens", "timestamp").
            where = positions(header, columns)
            if where is None:
                raise header_error(name, header, columns)
            more = list(optional(header)) if optional is not None else []
            top = max(where)
            while True:
                begins = reader.line_num + 1
                try:
                    row = next(reader)
                except StopIteration:
                    break
                except csv.Error as exc:
                    # csv's own refusal (a field over its 131,072-character limit, e.g. an
                    # unclosed quote swallowing the lines after it): named at the line the row
                    # begins; it is bad, and csv reads on after it
                    ends = reader.line_num
                    span = f" (lines {begins} to {ends}: an unclosed quote?)" if ends > begins else ""
                    out.bad(TraceFormatError(name, begins, "<row>", f"not a CSV row{span}: {exc}"))
                    continue
                if not row:
                    continue
                line = reader.line_num
                if len(row) > len(header) and any(f.strip() for f in row[len(header):]):
                    # the values may have shifted: not read as if they had not (empty extra fields,
                    # as a trailing comma makes, are only empty)
                    out.bad(TraceFormatError(name, line, "<row>", f"{len(row)} fields where the header has "
                                             f"{len(header)} (a comma inside a value?)"))
                    continue
                if len(row) > top:
                    values: list[str | None] = [row[i] for i in where]
                else:
                    values = [row[i] if i < len(row) else None for i in where]
                yield line, values, [row[i] if i < len(row) else None for i in more]
        except EOFError:  # a gzip file cut short (a download that stopped): the rows before it stand
            out.bad(TraceFormatError(name, reader.line_num + 1, "<gzip>", GZIP_CUT_SHORT))
        except (gzip.BadGzipFile, zlib.error) as exc:
            raise OSError(f"{path}: broken gzip stream: {exc}") from None
