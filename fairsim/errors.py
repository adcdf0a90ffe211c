"""Named errors for expected bad-input conditions.

Each error subclasses a built-in so callers can catch ``ValueError`` generically (the attrs
``exceptions.py`` pattern). The command line (``fairsim.cli.main``) maps them to exit statuses:

- ``ValueError`` and its subclasses here (bad input: a trace, profile, option or output path) ->
  ``fairsim: error: MESSAGE``, exit 2;
- ``RuntimeError`` subclasses here are bugs, exit 1 (traceback only with ``--debug``):
  ``EngineInvariantError`` in fairsim (``fairsim: internal error (a bug in fairsim ...)``);
  ``PolicyError`` (an exception escaping a policy's ``order()``/``on_admitted()``:
  ``fairsim: error in policy 'NAME' (CLASS): TYPE: message``) and ``PolicyContractError`` (a bad
  order, the message names the policy) in the policy.

Broken internal invariants raise ``EngineInvariantError`` rather than ``assert``, which
``python -O`` removes.
"""

from __future__ import annotations


def record_where(path: str, line: int | str | None) -> str:
    """Where a trace record was read, as error messages name it: ``FILE:LINE`` for a line number,
    ``FILE: JSON.PATH`` for a record of a JSON document (``s.json: requests[3]``), ``FILE`` when
    neither is known."""
    if isinstance(line, int) and not isinstance(line, bool):
        return f"{path}:{line}"
    return f"{path}: {line}" if line else str(path)


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
        super().__init__(f"{record_where(self.path, line)}: field '{field}': {reason}")

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


class OutputError(ValueError):
    """An output path (``--out``) cannot be used, or writing a result file failed.

    Raised by ``fairsim.io`` before any work (the folder or file is not writable: it is a file, a
    folder, read-only, or under a missing parent that cannot be created) and when an atomic write
    fails (disk full, permission lost). The message names the option (when known) and the file.

    Attributes:
        path: The output file or folder.
    """

    def __init__(self, path: object, reason: str, option: str | None = None) -> None:
        self.path = str(path)
        self.reason = reason
        self.option = option
        where = f"{option} {self.path}" if option else self.path
        super().__init__(f"{where}: {reason}")

    def __reduce__(self):
        return (type(self), (self.path, self.reason, self.option))


class EngineInvariantError(RuntimeError):
    """An internal invariant of the simulator broke: a bug in fairsim, not bad input.

    Raised by the engine and the block pool where ``assert`` was used before (asserts vanish under
    ``python -O``). The message says which invariant and with which values.
    """


class PolicyContractError(RuntimeError):
    """A policy broke the policy contract (``fairsim/policies/base.py``).

    Raised by ``check_permutation`` when ``order()`` returned something other than a permutation of
    the waiting snapshots it was given (a duplicate, a missing or a foreign entry). The simulator
    lets it propagate (the run stops with this message); the live vLLM hook logs the same message
    and keeps vLLM's order for that step.
    """


class SweepSpecError(ValueError):
    """A sweep spec is unreadable or invalid (``fairsim.sweep``).

    Raised before the first run for a TOML/YAML syntax error (``FILE:LINE``), an unknown key, a
    value of the wrong type, or a grid point its policy, scenario, trace or ``EngineConfig``
    refuses. The message reads ``FILE: KEY.PATH: why`` (e.g. ``spec.toml: policies[1].grd:
    unknown key; expected name, params, grid``).
    """


class SweepLockedError(ValueError):
    """Another sweep holds the output folder's lock (one sweep per folder at a time)."""


class PromptTooLongError(ValueError):
    """A prompt does not fit the model's context: ``prompt_len >= max_model_len``.

    vLLM rejects such a request at submission (``_validate_prompt_len`` in
    ``vllm/v1/engine/input_processor.py``: a prompt longer than ``max_model_len``, or exactly as long,
    which leaves no room for an output token). The message names the trace file and line (or the
    request id for a generated trace), the prompt length, the limit and ``--skip-long``.
    """


class SessionError(ValueError):
    """The session links of a trace cannot be replayed closed-loop.

    Raised before a run when a request's ``after`` names a request that is not in the trace, or
    when ``after`` links form a cycle (no turn of it could ever be sent). The message names the
    request ids involved.
    """


class PolicyError(RuntimeError):
    """An exception escaped a policy's ``order()`` or ``on_admitted()`` during a simulation.

    Not bad input to fairsim and not a bug in fairsim: the policy's own code failed (a team's
    ``--policy package.module:Class``, or a registered one). ``fairsim.cli.main`` prints the
    message with exit status 1 (the traceback, through the policy's code, with ``--debug``). The
    original exception is chained as ``__cause__``.

    The message reads ``error in policy 'NAME' (CLASS): TYPE: message``, then ``(at FILE, line
    N)`` where the exception was raised in code outside fairsim and the standard library (the
    team's module: ``fairsim.policies.failure.raised_at``).

    Attributes:
        policy: The policy's name (``--policy`` value or its ``name`` attribute).
        policy_class: The policy's class name.
        where: ``"FILE, line N"`` of the innermost such frame, or None.
    """

    def __init__(self, policy: str, policy_class: str, exc_type: str, message: str,
                 where: str | None = None) -> None:
        self.policy = policy
        self.policy_class = policy_class
        self.exc_type = exc_type
        self.message = message
        self.where = where
        at = f" (at {where})" if where else ""
        super().__init__(f"error in policy {policy!r} ({policy_class}): {exc_type}: {message}{at}")

    def __reduce__(self):
        return (type(self), (self.policy, self.policy_class, self.exc_type, self.message, self.where))


class StatusError(RuntimeError):
    """A command failed in a way that has its own exit status, kept apart from bad input.

    ``fairsim.cli.main`` prints the message and exits with ``status``. Raised by ``fairsim bench``
    for a ``fairsim run`` child that failed (its own error lines and status: 2 bad input, 1 a
    policy's error or a broken contract), after the policies that finished are printed and
    written; by ``fairsim hook-overhead`` when a policy failed inside the hook (status 1), after
    every row is printed; and by ``fairsim replay`` likewise, after its figures are printed and
    its tables written.

    Attributes:
        status: The exit status to give.
    """

    def __init__(self, message: str, status: int) -> None:
        self.status = status
        super().__init__(message)
