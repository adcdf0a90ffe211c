"""The ``Trace`` container returned by loaders and generators."""

from __future__ import annotations

from dataclasses import dataclass, field

from fairsim.errors import TraceFormatError
from fairsim.types import Request


@dataclass(frozen=True)
class Trace:
    """A list of requests plus where they came from.

    Attributes:
        name: Short name (file stem or generator name).
        source: File path or generator description.
        requests: Requests in file order (non-decreasing arrival time).
        skipped: Records skipped by ``skip_bad`` loading, each with file, line, field and reason.
    """

    name: str
    source: str
    requests: tuple[Request, ...]
    skipped: tuple[TraceFormatError, ...] = field(default=())

    def __len__(self) -> int:
        return len(self.requests)
