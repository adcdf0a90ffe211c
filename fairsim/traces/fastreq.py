"""Building many ``Request`` objects fast: the trace readers and time shaping (a run's fixed cost).

``Request`` is a frozen slotted record (``fairsim.record``, a dataclass to the standard library);
its ``__init__`` sets each field through ``object.__setattr__`` and then runs ``__post_init__``
(the checks). ``make_request`` does the
same with the slots' own setters, at about half the cost, and runs the same ``__post_init__``, so
the object, its validation and its error messages are those of ``Request(...)``. A trace read
and a ``--time-scale`` each build one request per record.
"""

from __future__ import annotations

from typing import Any

from fairsim.types import Request

_new = object.__new__
(_set_id, _set_arrival, _set_prompt, _set_hashes, _set_block, _set_output, _set_labels, _set_session,
 _set_after, _set_delay, _set_segments) = (Request.__dict__[name].__set__ for name in Request.__slots__)
# Request.__slots__ lists the fields in dataclass order (tests/test_fixed_cost.py checks it).


def make_request(request_id: str, arrival_time: float, prompt_len: int, block_hashes: tuple[int, ...],
                 hash_block_size: int, output_len: int, labels: dict[str, Any], session_id: str | None,
                 after: str | None, delay_s: float, segments: tuple[tuple[int, int], ...]) -> Request:
    """``Request(...)`` with every field given, in field order (see ``fairsim.types.Request``).

    Raises:
        ValueError: What ``Request.__post_init__`` raises (a bad length, time or link).
    """
    out = _new(Request)
    _set_id(out, request_id)
    _set_arrival(out, arrival_time)
    _set_prompt(out, prompt_len)
    _set_hashes(out, block_hashes)
    _set_block(out, hash_block_size)
    _set_output(out, output_len)
    _set_labels(out, labels)
    _set_session(out, session_id)
    _set_after(out, after)
    _set_delay(out, delay_s)
    _set_segments(out, segments)
    out.__post_init__()
    return out


def with_arrival(r: Request, arrival_time: float) -> Request:
    """``dataclasses.replace(r, arrival_time=arrival_time)`` (the other fields shared, as
    ``replace`` shares them, ``labels`` included).

    ``r`` passed ``__post_init__`` when it was built and only the arrival changes, so only the
    arrival's check runs again (the same message): a ``--time-scale`` rebuilds every request.

    Raises:
        ValueError: ``arrival_time < 0`` (``Request.__post_init__``'s message).
    """
    if arrival_time < 0:
        raise ValueError(f"request {r.request_id!r}: arrival_time={arrival_time}, need >= 0 s")
    out = _new(Request)
    _set_id(out, r.request_id)
    _set_arrival(out, arrival_time)
    _set_prompt(out, r.prompt_len)
    _set_hashes(out, r.block_hashes)
    _set_block(out, r.hash_block_size)
    _set_output(out, r.output_len)
    _set_labels(out, r.labels)
    _set_session(out, r.session_id)
    _set_after(out, r.after)
    _set_delay(out, r.delay_s)
    _set_segments(out, r.segments)
    return out
