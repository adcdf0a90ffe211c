"""Azure LLM inference traces (Azure/AzurePublicDataset; Splitwise, Patel et al., ISCA 2024).

CSV ``TIMESTAMP,ContextTokens,GeneratedTokens``; ``TIMESTAMP`` is a date-time with up to 7
fractional digits (2023: ``2023-11-16 18:17:03.9799600``) and, in the 2024 week-long traces, a
zone (``2024-05-10 00:00:00.009930+00:00``); ISO 8601 with ``T`` or ``Z`` is read too. Column
names are matched without regard to case or surrounding spaces. There is **no prefix identity**: no request has hash blocks, so every request
is a cache miss (nothing is invented). Arrival times are rebased so the first request arrives at
0 s and rounded to whole ms, as the other public traces store time. A ``GeneratedTokens`` of 0 becomes ``output_len=1`` with the label ``observed_output_length``.
"""

from __future__ import annotations

import re
from pathlib import Path

from fairsim.errors import TraceFormatError
from fairsim.traces.fastreq import make_request
from fairsim.traces.formats._common import Collector, Head, output_tokens
from fairsim.traces.formats._csv import MISSING_FIELD, count, first_line, read_plain, rows
from fairsim.traces.trace import Trace

NAME = "azure"
BLOCK = 512
"""Nominal hash block of the (empty) identity; only the default engine block follows from it."""
COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
PROMPT_FIELD = "ContextTokens"
"""The column of the prompt length (``fairsim.traces.formats.prompt_field``)."""


def sniff(head: Head) -> bool:
    """The first line is a CSV header naming the three columns (any case), not a JSON object
    holding them (Azure rows written as JSON lines are no Azure CSV: the reader would look for a
    header)."""
    first = first_line(head)
    return all(c.lower() in first for c in COLUMNS) and not first.lstrip().startswith("{")


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
        # Here, not at the top: only the Python path parses dates (``_csv_c`` reads plain files).
        from datetime import datetime, timezone

        self._datetime, self._utc = datetime, timezone.utc
        self._whole: str | None = None
        self._seconds = 0.0

    def __call__(self, stamp: str) -> float:
        """As ``parse_time``. Raises ``ValueError``: not such a date-time."""
        m = _STAMP.fullmatch(stamp.strip())
        if m is None:
            raise ValueError(stamp)
        whole = m[1] + (m[3] or "")
        if whole != self._whole:
            when = self._datetime.fromisoformat(whole)
            if when.tzinfo is None:
                when = when.replace(tzinfo=self._utc)
            self._seconds = when.timestamp()
            self._whole = whole
        return self._seconds + float("0." + (m[2] or "0"))


def read(path: str | Path, *, skip_bad: bool = False, hash_block_size: int | None = None,
         max_requests: int | None = None) -> Trace:
    """Read an Azure CSV.

    Args:
        path: The file (plain or gzip).
        skip_bad: Skip bad rows instead of raising.
        hash_block_size: Ignored except as the nominal block (the file has no identity).
        max_requests: Stop after this many good rows (for quick windows of large files).

    A file of plain rows only (those of the public traces) is read by the compiled twin
    (``fairsim/traces/formats/_csv_c.pyx``) where it is built: the same requests
    (``tests/test_csv_compiled.py``). Any other file is read here.

    Raises:
        TraceFormatError: A missing column (line 1), a row with a value beyond the header's
            fields (field ``<row>``) or without one of the three, an unparsable timestamp or
            count (a byte that is not UTF-8 makes its field unparsable), a ``ContextTokens``
            below 1, a timestamp lower than the previous row's (both named), a gzip stream cut
            short (field ``<gzip>``, at the first line lost; with ``skip_bad`` the rows before
            it are kept).
        OSError: A broken gzip stream.
    """
    path = Path(path)
    name = str(path)
    stem = path.stem
    block = hash_block_size or BLOCK
    plain = read_plain(path, NAME, COLUMNS, block, max_requests)
    if plain is not None:
        return plain
    out = Collector(path, skip_bad)
    t0 = None
    previous = previous_stamp = previous_line = None
    stamp_seconds = _Stamps()
    for line, (stamp, context, generated), _ in rows(path, COLUMNS, out):
        try:
            if stamp is None:
                raise TraceFormatError(name, line, "TIMESTAMP", MISSING_FIELD)
            try:
                t = stamp_seconds(stamp)
            except ValueError:
                raise TraceFormatError(name, line, "TIMESTAMP", f"cannot parse {stamp!r}") from None
            prompt = count(context, name, line, "ContextTokens")
            gen = count(generated, name, line, "GeneratedTokens")
            if prompt < 1:
                raise TraceFormatError(name, line, "ContextTokens", f"{prompt}: need >= 1")
            labels: dict = {}
            if gen < 1:  # 0 becomes 1 with the label, a negative count is refused
                gen = output_tokens(gen, name, line, "GeneratedTokens", labels)
            if previous is not None and t < previous:
                raise TraceFormatError(name, line, "TIMESTAMP", f"decreases: {stamp.strip()!r} is earlier than "
                                       f"the previous row's {previous_stamp!r} (line {previous_line})")
        except TraceFormatError as exc:
            out.bad(exc)
            continue
        previous, previous_stamp, previous_line = t, stamp.strip(), line
        if t0 is None:
            t0 = t
        out.add(make_request(f"{stem}:{line}", round(max(0.0, t - t0), 3), prompt,
                             (), block, gen, labels, None, None, 0.0, ()), line)
        if max_requests is not None and len(out.requests) >= max_requests:
            break
    return out.finish(stem, NAME, block)
