"""Session placement and windowing for closed-loop traces (no engine imports).

A *session* here is one connected group of requests: linked by ``after`` (turns, sub-agents
spawned from a turn) or sharing a ``session_id``. An independent request is a session of one.

Formats with no absolute time (Claude Code session files: ``Trace.absolute_time`` is False) give
each request's ``arrival_time`` as its offset from its session's start, so session starts must be
chosen: ``place_sessions`` starts them as a seeded Poisson process (exponential gaps at a rate in
sessions/s; ``../shared/design/TRACES.md``, "Claude Code session traces").
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from fairsim.record import replace
from fairsim.types import Request

DEFAULT_SESSION_RATE = 0.1
"""Sessions/s used where the trace has no absolute time and ``--session-rate`` is not given: one
new session every 10 s on average (documented in docs/sessions.md; ``--session-rate`` overrides it)."""


def session_groups(requests: Sequence[Request]) -> list[list[Request]]:
    """Requests grouped into sessions (``after`` links and equal ``session_id`` join a group).

    Returns:
        Groups in order of (earliest ``arrival_time``, smallest ``request_id``); each group's
        requests in (``arrival_time``, ``request_id``) order. An ``after`` naming a request that
        is not in ``requests`` is ignored here (``fairsim.sim.arrivals.check_sessions`` names it).
    """
    parent: dict[str, str] = {r.request_id: r.request_id for r in requests}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(a: str, b: str) -> None:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)

    first_of_session: dict[str, str] = {}
    for r in requests:
        if r.after is not None and r.after in parent:
            union(r.request_id, r.after)
        if r.session_id is not None:
            other = first_of_session.setdefault(r.session_id, r.request_id)
            union(r.request_id, other)
    groups: dict[str, list[Request]] = {}
    for r in requests:
        groups.setdefault(find(r.request_id), []).append(r)
    out = [sorted(g, key=lambda r: (r.arrival_time, r.request_id)) for g in groups.values()]
    out.sort(key=lambda g: (g[0].arrival_time, g[0].request_id))
    return out


def place_sessions(requests: Sequence[Request], rate: float, seed: int = 0) -> list[Request]:
    """Start each session at the next time of a seeded Poisson process of ``rate`` sessions/s.

    The first session starts at 0 s; the gaps between session starts are exponential with mean
    ``1 / rate`` s (numpy ``default_rng(seed)``). Sessions take the start times in the order of
    ``session_groups``. Each request keeps its offset from its session's start (its
    ``arrival_time`` minus the session's earliest one), so with a trace that has absolute times
    this re-times session starts and keeps the time between turns.

    Args:
        requests: The trace.
        rate: Session starts per second (> 0).
        seed: Seed of the gaps (>= 0); same inputs and seed give the same times.

    Returns:
        The requests with new ``arrival_time`` (s), sorted by (``arrival_time``, ``request_id``).

    Raises:
        ValueError: ``rate`` not a finite number > 0, or a negative ``seed``.
    """
    if not (rate > 0 and math.isfinite(rate)):
        raise ValueError(f"--session-rate {rate}: need a finite rate > 0 sessions/s")
    if seed < 0:
        raise ValueError(f"--seed {seed}: need an integer >= 0")
    import numpy as np  # here: a run without --session-rate starts without numpy

    groups = session_groups(requests)
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, size=len(groups))
    starts = np.concatenate([[0.0], np.cumsum(gaps[1:])]) if len(groups) else np.zeros(0)
    out: list[Request] = []
    for group, start in zip(groups, starts):
        base = group[0].arrival_time
        out.extend(replace(r, arrival_time=float(start) + (r.arrival_time - base))
                   for r in group)
    out.sort(key=lambda r: (r.arrival_time, r.request_id))
    return out


def detach_cut(kept: Sequence[Request], full: Sequence[Request]) -> tuple[list[Request], int]:
    """Turns whose predecessor was cut away by a window become first turns.

    After ``--window-start``/``--window-end``/``--max-requests``, a kept request whose ``after``
    names a request of the full trace that was not kept is sent at its own ``arrival_time``
    (``after = None``, ``delay_s = 0``); its session and followers stay as they are. An ``after``
    naming a request that is in neither is left alone, for ``check_sessions`` to report.

    Returns:
        ``(requests, number detached)``.
    """
    kept_ids = {r.request_id for r in kept}
    full_ids = {r.request_id for r in full}
    out: list[Request] = []
    detached = 0
    for r in kept:
        if r.after is not None and r.after not in kept_ids and r.after in full_ids:
            out.append(replace(r, after=None, delay_s=0.0))
            detached += 1
        else:
            out.append(r)
    return out, detached


def chain_offsets(requests: Sequence[Request], think_scale: float) -> dict[str, tuple[float, float]]:
    """``request_id -> (a, D)``: the arrival time ``a`` of the first turn of the request's chain
    and ``D``, the sum of ``delay_s * think_scale`` along the chain (0 for a first turn), seconds.

    A request whose ``after`` is not among ``requests`` starts its own chain (as the replay sends
    it at its ``arrival_time``). The links are acyclic (``fairsim.sim.arrivals.check_sessions``).
    """
    by_id = {r.request_id: r for r in requests}
    out: dict[str, tuple[float, float]] = {}
    for r in requests:
        chain: list[Request] = []
        cur: Request | None = r
        while cur is not None and cur.request_id not in out:
            chain.append(cur)
            cur = by_id.get(cur.after) if cur.after is not None else None
        for q in reversed(chain):
            parent = out.get(q.after) if q.after is not None else None
            out[q.request_id] = ((q.arrival_time, 0.0) if parent is None
                                 else (parent[0], parent[1] + q.delay_s * think_scale))
    return out
