"""The ``Trace`` container returned by loaders and generators."""

from __future__ import annotations


from fairsim.errors import TraceFormatError
from fairsim.record import field, record
from fairsim.types import Request


class ClosedLoopWarning(str):
    """A reader's warning that concerns closed-loop replay only: a think time it had to
    approximate (the gap between recorded arrivals, an upper bound). Under ``--replay open``
    requests arrive at their timestamps and no think time is used, so ``load_requests``
    (``fairsim/options.py``) leaves such a warning out there; it is a plain ``str`` otherwise."""

    __slots__ = ()


@record(frozen=True)
class Trace:
    """A list of requests plus where they came from.

    Attributes:
        name: Short name (file stem or generator name).
        source: File path or generator description.
        requests: Requests in file order (non-decreasing arrival time).
        skipped: Records skipped by ``skip_bad`` loading, each with file, line, field and reason.
        absolute_time: False when the format has no absolute time (Claude Code sessions): each
            ``arrival_time`` is then the offset from its *session's* start, and session start
            times must be chosen by the replay (``--session-rate``).
        hash_block_size: Tokens per hash block the format records (None for generated traces
            built by hand or a format without prefix identity).
        format: Name of the reader that produced the trace (``fairsim.traces.formats``).
        locations: ``request_id`` -> where the request was read (1-based line, or a JSON path
            such as ``s.json: requests[3]``), for checks made after loading (``max_model_len``).
        warnings: What the reader had to approximate or invent, one sentence each (printed on
            stderr and written to ``run.json``); a ``ClosedLoopWarning`` only under closed loop.
    """

    name: str
    source: str
    requests: tuple[Request, ...]
    skipped: tuple[TraceFormatError, ...] = field(default=())
    absolute_time: bool = True
    hash_block_size: int | None = None
    format: str = ""
    warnings: tuple[str, ...] = ()
    locations: dict[str, int | str] = field(default_factory=dict, compare=False, repr=False)

    def __len__(self) -> int:
        return len(self.requests)

    @property
    def label(self) -> str:
        """``NAME (FORMAT format)`` for a trace read from a file, else ``NAME``: the reader in use
        is always printed, so a file taken for another format than meant is seen at once."""
        return f"{self.name} ({self.format} format)" if self.format else self.name

    def skipped_summary(self, first: int = 3) -> str | None:
        """``"skipped N bad records of SOURCE; first: REASON; REASON; ..."`` or None when none
        were skipped (the reasons name file, line and field)."""
        if not self.skipped:
            return None
        reasons = "; ".join(str(e) for e in self.skipped[:first])
        more = f" (and {len(self.skipped) - first} more)" if len(self.skipped) > first else ""
        n = len(self.skipped)
        return f"skipped {n} bad record{'' if n == 1 else 's'} of {self.source}; first: {reasons}{more}"
