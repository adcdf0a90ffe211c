"""Earliest closed-loop release times, to refuse out-of-range session timings before a run.

In closed-loop replay (``fairsim.sim.arrivals``) a turn with ``after = X`` is released at
``finish(X) + delay_s * think_scale``. ``finish(X)`` is known only once the simulation ran, but it
is never earlier than ``X``'s own release, so::

    earliest(r) = arrival_time(r)                              if r.after is None
    earliest(r) = earliest(r.after) + delay_s(r) * think_scale  otherwise

is a lower bound of every release time (the chain's root arrival plus the scaled think/tool times
along it). ``check_release_times`` refuses a trace whose bound passes a limit (``MAX_ARRIVAL_S`` of
``fairsim.cli``: past it float64 seconds no longer resolve a 1 us step, and a run would print a
made-up ``sim s`` and TTFT 0).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from fairsim.errors import record_where
from fairsim.types import Request


def earliest_releases(requests: Sequence[Request], think_scale: float) -> dict[str, float]:
    """``request_id -> earliest release time`` (s) under closed-loop replay (module docstring).

    Args:
        requests: The trace (``after`` links checked acyclic by ``check_sessions``; an ``after``
            naming a request outside ``requests`` counts as a root).
        think_scale: Factor on every ``delay_s`` (>= 0).

    Returns:
        The bound per request id; ``inf`` where the sum overflows float64.
    """
    from fairsim.traces.sessions import chain_offsets

    return {rid: a + d for rid, (a, d) in chain_offsets(requests, think_scale).items()}


def check_release_times(requests: Sequence[Request], think_scale: float, limit_s: float, source: str,
                        locations: Mapping[str, int | str] | None = None,
                        starts: tuple[str, str] | None = None) -> None:
    """Refuse a closed-loop trace whose earliest release of some turn is beyond ``limit_s``.

    Args:
        requests: The requests to replay closed loop (already windowed and time-scaled).
        think_scale: The ``--think-scale`` factor.
        limit_s: Latest release time accepted, seconds.
        source: The trace file, named in the message.
        locations: ``Trace.locations`` (request id -> line or JSON path), to name the record.
        starts: ``(option, remedy)`` where an option (``--time-scale``, ``--target-load``,
            ``--session-rate``) placed the session starts: the message names it with its remedy
            beside the delays' (a start near the limit is that option's doing, not the delay's).

    Raises:
        ValueError: The first follower turn (``after`` set; in trace order) whose bound is not
            ``<= limit_s`` (roots are released at their arrival times, which the caller checks); the
            message names its record and its delay (which the format derives from its own
            fields: ``delay``, ``t``, timestamps), and ``--think-scale`` when it is not 1.
    """
    from fairsim.traces.sessions import chain_offsets

    offsets = chain_offsets(requests, think_scale)
    for r in requests:
        start, delays = offsets[r.request_id]
        bound = start + delays
        if bound <= limit_s or r.after is None:  # a session root: the caller's arrival check
            continue
        where = record_where(source, (locations or {}).get(r.request_id))
        scaled = f" x --think-scale {think_scale:g}" if think_scale != 1 else ""
        shown = "overflows float64" if math.isinf(bound) else f"{bound:.6g} s"
        fix = "a smaller --think-scale" if think_scale != 1 else "smaller delays (or fix the record)"
        placed = ""
        if starts is not None:
            placed = f", placed by {starts[0]}"
            fix = f"{starts[1]} or {fix}"
        raise ValueError(
            f"{where}: request {r.request_id!r} (think/tool delay {r.delay_s:g} s{scaled}, from the "
            f"record's delay or time fields) "
            f"would be released closed loop at {shown} or later (its session's first arrival, "
            f"{start:.6g} s{placed}, plus the think/tool delays before it, {delays:.6g} s), beyond {limit_s:.0e} s, where float64 time cannot "
            f"resolve 1 us steps; use {fix}")
