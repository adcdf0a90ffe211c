"""BurstGPT traces (HPMLL/BurstGPT; Wang et al., "BurstGPT: A Real-world Workload Dataset to
Optimize LLM Serving Systems", arXiv 2401.17644): ChatGPT and GPT-4 requests served on Azure.

CSV ``Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type`` (the release's
``BurstGPT_1.csv``, ``BurstGPT_without_fails_1.csv``, ...; column names matched without regard to
case or surrounding spaces):

- ``Timestamp``: seconds from the collection's first midnight (a number, whole or not); kept as
  the arrival, to the ms, not rebased (the first request of ``BurstGPT_1.csv`` arrives at 5 s).
  Rows are replayed in time order; rows out of it are counted in a warning, not refused.
- ``Request tokens`` is the prompt (at least 1), ``Response tokens`` the output; a response of 0
  (the release's failed requests) becomes ``output_len=1`` with the label
  ``observed_output_length`` (``_common.output_tokens``).
- ``Model`` and ``Log Type`` (``Conversation log`` or ``API log``) become the labels ``model``
  and ``log_type``; ``Total tokens`` (request plus response) is not read; any other column
  (the authors announce ``Session ID`` and ``Elapsed time``) is kept as a text label named in
  lower case with ``_`` for spaces, ``trace_`` before a name fairsim's trace files use
  (``Session ID``: ``trace_session_id``; a label, not a session link).

There is **no prefix identity**: no request has hash blocks, so every request is a cache miss
(nothing is invented), as in the Azure traces.
"""

from __future__ import annotations

from pathlib import Path

from fairsim.errors import TraceFormatError
from fairsim.sim.label_columns import PREFIX
from fairsim.traces.fastreq import make_request
from fairsim.traces.formats._common import OBSERVED_OUTPUT, Collector, Head, not_utf8, output_tokens
from fairsim.traces.formats._csv import MISSING_FIELD, count, first_line, read_plain, rows
from fairsim.traces.trace import Trace

NAME = "burstgpt"
BLOCK = 512
"""Nominal hash block of the (empty) identity; only the default engine block follows from it."""
COLUMNS = ("Timestamp", "Request tokens", "Response tokens")
PROMPT_FIELD = "Request tokens"
"""The column of the prompt length (``fairsim.traces.formats.prompt_field``)."""
NOT_READ = ("Total tokens",)
"""Columns derived from the read ones, left out of the labels."""
LABELS = {"model": "model", "log type": "log_type"}
"""Label names of the columns the release has (lower-case column name -> label)."""


def sniff(head: Head) -> bool:
    """The first line is a CSV header naming ``Timestamp``, ``Request tokens`` and ``Response
    tokens`` (any case), not a JSON object holding them."""
    first = first_line(head)
    return all(c.lower() in first for c in COLUMNS) and not first.lstrip().startswith("{")


def _seconds(text: str | None, path: str, line: int) -> float:
    """A ``Timestamp`` as finite seconds >= 0.

    Raises:
        TraceFormatError: Missing, not a number, not finite, or negative.
    """
    if text is None:
        raise TraceFormatError(path, line, "Timestamp", MISSING_FIELD)
    try:
        t = float(text)
    except ValueError:
        raise TraceFormatError(path, line, "Timestamp", f"must be a number of seconds, got {text!r}") from None
    if not 0.0 <= t < float("inf"):  # (NaN fails too)
        raise TraceFormatError(path, line, "Timestamp",
                               f"must be a finite number of seconds >= 0, got {text.strip()!r}")
    return t


class _Labels:
    """The header's columns kept as labels (module docstring): ``positions(header)`` for
    ``_csv.rows``, then ``names``, their label names in the same order."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.names: list[str] = []
        self.columns: list[str] = []  # the same columns as written

    def of(self, header: list[str]) -> tuple[list[int], list[str]]:
        """``(positions, names)`` (``_csv.read_plain``'s ``labels``)."""
        return self.positions(header), self.names

    def positions(self, header: list[str]) -> list[int]:
        """Raises ``TraceFormatError`` (line 1): two columns that give one label name, one that
        gives ``observed_output_length`` (the reader's own label), or a column name that is not
        UTF-8."""
        # (here: canonical imports the Mooncake reader, which this package imports first)
        from fairsim.traces.canonical import CANONICAL_KEYS

        skip = {c.lower() for c in COLUMNS + NOT_READ}
        at, first = [], {}
        for i, column in enumerate(header):
            key = str(column).strip().lower()
            if not key or key in skip:
                continue
            label = LABELS.get(key, "_".join(key.split()))
            if label in CANONICAL_KEYS:
                # A field of fairsim's own trace files (a "Session ID" column): trace_NAME, as the
                # request table writes a label named like one of its columns, so convert can write it
                label = PREFIX + label
            if not_utf8(key):  # the label's name: the tables could not be written
                shown = str(column).strip().encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
                raise TraceFormatError(self.path, 1, shown, "a column name that is not UTF-8 text (it would "
                                       "name a label): rename it")
            if label == OBSERVED_OUTPUT:  # set by the reader on a failed request (Response tokens 0)
                raise TraceFormatError(self.path, 1, str(column).strip(),
                                       f"gives the label {label!r}, which holds the Response tokens of 0 "
                                       "of a failed request: rename it")
            if label in first:  # both positions named, as for a column the reader reads (_csv.rows)
                j, other = first[label]
                if other == key:
                    raise TraceFormatError(self.path, 1, str(column).strip(),
                                           f"named twice in the header (columns {j + 1} and {i + 1}): keep one")
                raise TraceFormatError(self.path, 1, str(column).strip(),
                                       f"column {i + 1} gives the label {label!r}, as column {j + 1} does: "
                                       "rename one")
            first[label] = (i, key)
            at.append(i)
            self.names.append(label)
            self.columns.append(str(column).strip())
        return at


def read(path: str | Path, *, skip_bad: bool = False, hash_block_size: int | None = None) -> Trace:
    """Read a BurstGPT CSV (module docstring).

    Args:
        path: The file (plain or gzip).
        skip_bad: Skip bad rows instead of raising.
        hash_block_size: Ignored except as the nominal block (the file has no identity).

    A file of plain rows in time order (those of the release) is read by the compiled twin
    (``fairsim/traces/formats/_csv_c.pyx``) where it is built: the same requests
    (``tests/test_csv_compiled.py``). Any other file is read here.

    Returns:
        The ``Trace``: requests ``STEM:LINE`` (the header is line 1) in arrival order.

    Raises:
        TraceFormatError: A missing column (line 1), a row with a value beyond the header's
            fields (field ``<row>``) or without one of the three, a timestamp that is not a
            finite number >= 0, a count that is not an integer, a ``Request tokens`` below 1 or
            a negative ``Response tokens``, two label columns with one name, a label's bytes (or
            its column's name) that are not UTF-8; a gzip stream cut short (field ``<gzip>``; with
            ``skip_bad`` the rows before it are kept).
        OSError: A broken gzip stream.
    """
    path = Path(path)
    name = str(path)
    stem = path.stem
    block = hash_block_size or BLOCK
    plain = read_plain(path, NAME, COLUMNS, block, labels=_Labels(name).of, seconds=True, rebase=False)
    if plain is not None:
        return plain
    out = Collector(path, skip_bad)
    kept = _Labels(name)
    names = kept.names  # (filled when the header is read)
    late = 0
    previous = None
    for line, (stamp, request, response), extras in rows(path, COLUMNS, out, kept.positions):
        try:
            t = _seconds(stamp, name, line)
            prompt = count(request, name, line, "Request tokens")
            gen = count(response, name, line, "Response tokens")
            if prompt < 1:
                raise TraceFormatError(name, line, "Request tokens", f"{prompt}: need >= 1")
            labels: dict = {}
            for label, column, value in zip(names, kept.columns, extras):
                if value is not None and value.strip():
                    if not_utf8(value):
                        raise TraceFormatError(name, line, column, f"not UTF-8 text: {value.strip()!r}")
                    labels[label] = value.strip()
            if gen < 1:  # 0 (a failed request) becomes 1 with the label, a negative count is refused
                gen = output_tokens(gen, name, line, "Response tokens", labels)
        except TraceFormatError as exc:
            out.bad(exc)
            continue
        if previous is not None and t < previous:
            late += 1
        previous = t if previous is None else max(previous, t)
        out.add(make_request(f"{stem}:{line}", round(t, 3), prompt, (), block, gen, labels, None, None, 0.0, ()),
                line)
    if late:
        out.warnings.append(f"{path}: {late:,} row(s) arrive before an earlier row; replayed in time order")
    return out.finish(stem, NAME, block)
