"""Named errors for expected bad-input conditions.

Each error subclasses a built-in so callers can catch ``ValueError`` generically (the attrs
``exceptions.py`` pattern). Broken internal invariants use ``assert`` instead.
"""

from __future__ import annotations


class TraceFormatError(ValueError):
    """A trace record is malformed.

    Raised by the trace loaders for a line that is not valid JSON/CSV, a missing or mistyped field,
    a negative or zero length, a ``hash_ids`` list inconsistent with ``input_length``, a duplicate
    id, a label whose type differs from earlier records, or a timestamp lower than the previous
    record's. The message reads ``FILE:LINE: field 'NAME': why`` for line-based files and
    ``FILE: JSON.PATH: field 'NAME': why`` (e.g. ``s.json: requests[3]: field 'in': ...``) for
    JSON documents.

    Attributes:
        path: The trace file.
        line: 1-based line number in that file (int), or the JSON path of the record (str).
        field: The offending field name (``"<json>"`` when the line does not parse).
    """

    def __init__(self, path: str, line: int | str, field: str, reason: str) -> None:
        self.path = str(path)
        self.line = line
        self.field = field
        self.reason = reason
        where = f"{self.path}:{line}" if isinstance(line, int) else f"{self.path}: {line}"
        super().__init__(f"{where}: field '{field}': {reason}")

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
