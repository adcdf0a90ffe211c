"""Named errors for expected bad-input conditions.

Each error subclasses a built-in so callers can catch ``ValueError`` generically (the attrs
``exceptions.py`` pattern). Broken internal invariants use ``assert`` instead.
"""

from __future__ import annotations


class TraceFormatError(ValueError):
    """A trace record is malformed.

    Raised by the trace loaders for a line that is not valid JSON/CSV, a missing or mistyped field,
    a negative or zero length, a ``hash_ids`` list inconsistent with ``input_length``, or a
    timestamp lower than the previous record's. The message reads ``FILE:LINE: field 'NAME': why``.

    Attributes:
        path: The trace file.
        line: 1-based line number in that file.
        field: The offending field name (``"<json>"`` when the line does not parse).
    """

    def __init__(self, path: str, line: int, field: str, reason: str) -> None:
        self.path = str(path)
        self.line = line
        self.field = field
        self.reason = reason
        super().__init__(f"{self.path}:{line}: field '{field}': {reason}")

    def __reduce__(self):
        # Picklable with its four arguments, so it crosses process boundaries (fairsim bench,
        # sweeps) intact instead of breaking the worker pool.
        return (type(self), (self.path, self.line, self.field, self.reason))


class ProfileError(ValueError):
    """A cost-model profile file is missing, unreadable or does not match the schema.

    The message names the file and the offending key.
    """


class CapacityError(ValueError):
    """The KV cache is too small for a request in the trace to ever be admitted.

    vLLM would reject such a request at submission; the simulator refuses to start instead of
    looping forever. The message names the request, the blocks it needs and the capacity.
    """


class SessionError(ValueError):
    """The session links of a trace cannot be replayed closed-loop.

    Raised before a run when a request's ``after`` names a request that is not in the trace, or
    when ``after`` links form a cycle (no turn of it could ever be sent). The message names the
    request ids involved.
    """
