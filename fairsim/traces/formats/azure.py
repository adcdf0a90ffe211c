"""Azure LLM inference traces (Azure/AzurePublicDataset; Splitwise, Patel et al., ISCA 2024).

CSV ``TIMESTAMP,ContextTokens,GeneratedTokens``; ``TIMESTAMP`` is a date-time with up to 7
fractional digits (2023: ``2023-11-16 18:17:03.9799600``) and, in the 2024 week-long traces, a
zone (``2024-05-10 00:00:00.009930+00:00``); ISO 8601 with ``T`` or ``Z`` is read too. Column
names are matched without regard to case or surrounding spaces. There is **no prefix identity**: no request has hash blocks, so every request
is a cache miss (nothing is invented). Arrival times are rebased so the first request arrives at
0 s and rounded to whole ms, as the other public traces store time. A ``GeneratedTokens`` of 0 becomes ``output_len=1`` with the label ``observed_output_length``.
"""

from __future__ import annotations

import csv
import re
from datetime import datetime, timezone
from pathlib import Path

from fairsim.errors import TraceFormatError
from fairsim.traces.fastreq import make_request
from fairsim.traces.formats._common import Collector, Head, output_tokens, text_lines
from fairsim.traces.trace import Trace

NAME = "azure"
BLOCK = 512
"""Nominal hash block of the (empty) identity; only the default engine block follows from it."""
COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


def sniff(head: Head) -> bool:
    """The first line is a CSV header naming the three columns (any case)."""
    first = head.text.splitlines()[0].lower() if head.data else ""
    return all(c.lower() in first for c in COLUMNS)


#: Date and time to the second (or minute), an optional fraction of any length, an optional zone.
_STAMP = re.compile(r"(\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2})?)(?:\.(\d+))?(Z|[+-]\d{2}(?::?\d{2})?)?")


def parse_time(stamp: str) -> float:
    """A ``TIMESTAMP`` -> POSIX seconds; the fraction (any number of digits: the 2023 traces
    have 7, the 2024 ones 6 before ``+00:00``) is added as a float, so no digit is cut.

    ``2023-11-16 18:17:03.9799600``, ``2024-05-10 00:00:00.009930+00:00``,
    ``2023-11-16T18:17:03.979Z``. A time without a zone is taken as UTC, so results do not
    depend on the machine's zone.

    Raises:
        ValueError: Not such a date-time.
    """
    return _Stamps()(stamp)


class _Stamps:
    """``parse_time`` for a file's rows in order: rows within one second (most of a busy trace)
    share its date-time, so the last one's POSIX seconds are kept (the same float, not parsed
    again) and the fraction is added to them."""

    def __init__(self) -> None:
        self._whole: str | None = None
        self._seconds = 0.0

    def __call__(self, stamp: str) -> float:
        """As ``parse_time``. Raises ``ValueError``: not such a date-time."""
        m = _STAMP.fullmatch(stamp.strip())
        if m is None:
            raise ValueError(stamp)
        whole = m[1] + (m[3] or "")
        if whole != self._whole:
            when = datetime.fromisoformat(whole)
            if when.tzinfo is None:
                when = when.replace(tzinfo=timezone.utc)
            self._seconds = when.timestamp()
            self._whole = whole
        return self._seconds + float("0." + (m[2] or "0"))


def _count(value: str | None, path: str, line: int, column: str) -> int:
    """A count column's text as an int (``int()``'s rules: spaces, a sign, underscores).

    Raises:
        TraceFormatError: Not an integer (or the field is missing).
    """
    try:
        return int(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise TraceFormatError(path, line, column, f"must be an integer, got {value!r}") from None


def read(path: str | Path, *, skip_bad: bool = False, hash_block_size: int | None = None,
         max_requests: int | None = None) -> Trace:
    """Read an Azure CSV.

    Args:
        path: The file (plain or gzip).
        skip_bad: Skip bad rows instead of raising.
        hash_block_size: Ignored except as the nominal block (the file has no identity).
        max_requests: Stop after this many good rows (for quick windows of large files).

    Raises:
        TraceFormatError: A missing column (line 1), an unparsable timestamp or count, a
            ``ContextTokens`` below 1, a timestamp lower than the previous row's.
    """
    path = Path(path)
    name = str(path)
    stem = path.stem
    block = hash_block_size or BLOCK
    out = Collector(path, skip_bad)
    t0 = None
    previous = None
    stamp_seconds = _Stamps()
    with text_lines(path) as fh:
        reader = csv.reader(fh)
        header = next(reader, [])
        # The header as written may differ in case or spaces (" ContextTokens", "timestamp").
        given = [str(f).strip().lower() for f in header]
        missing = [c for c in COLUMNS if c.lower() not in given]
        if missing:
            raise TraceFormatError(name, 1, missing[0], f"missing column (header: {header or None})")
        # csv.DictReader's rules, by position (a dict per row cost more than the row's checks):
        # the last of equal names wins, a short row's missing fields are None, empty rows are
        # skipped. A row's line is the file's (``line_num``: blank lines counted).
        where = [max(i for i, f in enumerate(given) if f == c.lower()) for c in COLUMNS]
        i_time, i_context, i_generated = where
        top = max(where)
        for row in reader:
            if not row:
                continue
            line = reader.line_num
            if len(row) > top:  # (a short row's missing fields are None, below)
                stamp, context, generated = row[i_time], row[i_context], row[i_generated]
            else:
                stamp, context, generated = [row[i] if i < len(row) else None for i in where]
            try:
                try:
                    t = stamp_seconds(stamp or "")
                except ValueError:
                    raise TraceFormatError(name, line, "TIMESTAMP", f"cannot parse {stamp!r}") from None
                prompt = _count(context, name, line, "ContextTokens")
                gen = _count(generated, name, line, "GeneratedTokens")
                if prompt < 1:
                    raise TraceFormatError(name, line, "ContextTokens", f"{prompt}: need >= 1")
                labels: dict = {}
                if gen < 1:  # 0 becomes 1 with the label, a negative count is refused
                    gen = output_tokens(gen, name, line, "GeneratedTokens", labels)
                if previous is not None and t < previous:
                    raise TraceFormatError(name, line, "TIMESTAMP", "decreases: earlier than the previous row")
            except TraceFormatError as exc:
                out.bad(exc)
                continue
            previous = t
            if t0 is None:
                t0 = t
            out.add(make_request(f"{stem}:{line}", round(max(0.0, t - t0), 3), prompt,
                                 (), block, gen, labels, None, None, 0.0, ()), line)
            if max_requests is not None and len(out.requests) >= max_requests:
                break
    return out.finish(stem, NAME, block)
