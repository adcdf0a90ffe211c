"""The arrival process of a replay: open loop (timestamps) or closed loop (sessions).

Open loop: every request is released at its ``arrival_time``. Closed loop (the replay used by
AIPerf, Dynamo's mocker, BLIS and LLMServingSim for sessions; ``../shared/design/TRACES.md``,
"What replay must respect"): a request with ``after = None`` (a session's first turn, or an
independent request) is released at its ``arrival_time``; a request with ``after = X`` is released
at ``finish(X) + delay_s * think_scale``, where ``finish(X)`` is when ``X``'s last token was
produced *in this replay*. Several requests may follow one (sub-agents beside their parent).

Both the simulator (``fairsim.sim.engine``) and the live replay (``fairsim.live.replay``) drive the
same ``Arrivals`` object, so their release times are computed by the same float operations and the
decision-equivalence check holds for session traces.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from itertools import islice
from collections.abc import Iterable, Mapping, Sequence
from typing import Generic, TypeVar

from fairsim.errors import EngineInvariantError, SessionError, record_where
from fairsim.types import Request

T = TypeVar("T")

#: Replay modes: ``open`` keeps timestamps, ``closed`` sends a turn when its predecessor finished.
REPLAY_MODES = ("open", "closed")


def has_sessions(requests: Iterable[Request]) -> bool:
    """True when any request waits for another (``after`` set): closed loop is the default then."""
    return any(r.after is not None for r in requests)


def resolve_replay(requests: Sequence[Request], replay: str | None) -> str:
    """The replay mode to use: ``replay`` itself, or (``None``) closed where the trace has sessions.

    Raises:
        ValueError: ``replay`` is not ``"open"``, ``"closed"`` or ``None``.
    """
    if replay is None:
        return "closed" if has_sessions(requests) else "open"
    if replay not in REPLAY_MODES:
        raise ValueError(f"--replay {replay!r}: use one of {', '.join(REPLAY_MODES)}")
    return replay


def check_sessions(requests: Sequence[Request], source: str | None = None,
                   locations: Mapping[str, int | str] | None = None) -> None:
    """Refuse ``after`` links that closed-loop replay cannot follow.

    Args:
        requests: The trace's requests.
        source: The trace file; with it the message starts with it (and the request's line or
            JSON path from ``locations``, ``Trace.locations``).

    Raises:
        SessionError: A request whose ``after`` names no request of ``requests``, or a cycle of
            ``after`` links (named in order, each waiting for the next: ``a -> b -> a``).
    """
    def where(rid: str) -> str:
        return "" if source is None else f"{record_where(source, (locations or {}).get(rid))}: "

    by_id = {r.request_id: r for r in requests}
    for r in requests:
        if r.after is not None and r.after not in by_id:
            raise SessionError(f"{where(r.request_id)}request {r.request_id!r}: 'after' names {r.after!r}, "
                               f"which is not in the trace (was it cut by --window-start/--max-requests?)")
    # Each request has at most one 'after', so the links form a functional graph: walk each chain
    # once, colouring nodes (0 = new, 1 = on the current walk, 2 = known to reach a root).
    state: dict[str, int] = {}
    for r in requests:
        walk: list[str] = []
        rid: str | None = r.request_id
        while rid is not None and state.get(rid, 0) == 0:
            state[rid] = 1
            walk.append(rid)
            rid = by_id[rid].after
        if rid is not None and state[rid] == 1:
            cycle = walk[walk.index(rid):] + [rid]
            raise SessionError(f"{where(cycle[0])}'after' links form a cycle (each request waits for the "
                               f"next), so none of them can be sent: " + " -> ".join(cycle))
        for w in walk:
            state[w] = 2


def in_release_order(entries: Sequence[tuple]) -> bool:
    """True when the queue entries ``(release_s, request_id, ...)`` strictly increase (request ids
    are unique, so a comparison never reaches the third item) and no time is NaN (tuples compare
    an identical NaN as equal, so NaNs are refused first): a heap would release them in this
    order."""
    if any(e[0] != e[0] for e in entries):  # NaN
        return False
    return all(map(tuple.__lt__, entries, islice(entries, 1, None)))


class Arrivals(Generic[T]):
    """Releases requests to a waiting queue, in (release time, ``request_id``) order.

    Args:
        requests: The trace, each paired with the caller's per-request item (the engine's state
            object, or the request itself), as ``[(request, item)]``.
        replay: ``"open"`` or ``"closed"`` (see the module docstring).
        think_scale: Closed loop only: multiplies every ``delay_s`` (>= 0; 0 sends a turn as soon
            as its predecessor finished, 2 doubles think and tool times).

    Ordering: a min-heap keyed by ``(release_s, request_id)``; ids are unique, so ties never fall
    through to the items and the order is deterministic. In open loop nothing is queued after the
    start, so where ``requests`` come in that order already (strictly increasing ``(arrival_time,
    request_id)``: the engine's ``make_lives`` sorts them so) the queue is a ``deque`` in that
    order, popped from the left in O(1) instead of a heap pop's O(log n) tuple comparisons
    (measured: 12,031 heap pops of the conversation trace took 10-25 ms, the deque 0.4 ms). Both
    release the same requests in the same order: a heap of strictly increasing keys pops them
    in increasing order. Input out of that order (or with a NaN time, which compares false) keeps
    the heap.

    Raises:
        ValueError: A bad ``replay`` or ``think_scale``; duplicate request ids.
        SessionError: Closed loop only, from ``check_sessions``.
    """

    def __init__(self, requests: Sequence[tuple[Request, T]], replay: str = "open",
                 think_scale: float = 1.0) -> None:
        if replay not in REPLAY_MODES:
            raise ValueError(f"replay={replay!r}: use one of {', '.join(REPLAY_MODES)}")
        if not (think_scale >= 0 and math.isfinite(think_scale)):
            raise ValueError(f"--think-scale {think_scale}: need a finite factor >= 0")
        reqs = [r for r, _ in requests]
        if len({r.request_id for r in reqs}) != len(reqs):
            raise ValueError("request ids must be unique within a trace")
        self.replay = replay
        self.think_scale = think_scale
        #: The queued releases, ``(release_s, request_id, request, item)``: a min-heap (list) or,
        #: open loop with the requests in release order, a ``deque`` in that order (class
        #: docstring). The same object for the whole run; read-only outside this class: its
        #: first item is the next release, so ``heap[0][0] <= now`` says a ``pop_due(now)``
        #: would release something, without a call (the engine's step loop).
        self._heap: list[tuple[float, str, Request, T]] | deque[tuple[float, str, Request, T]] = []
        # closed loop: predecessor id -> [(request, item)] waiting for it to finish
        self._followers: dict[str, list[tuple[Request, T]]] = {}
        self._held = 0
        #: Requests ``finished`` so far (all modes).
        self.finished_count = 0
        #: Closed loop: the ids that finished (a second finish would queue a follower twice, so
        #: ``finished`` refuses one). Open loop keeps none: a finish queues nothing there, and a
        #: map over the whole trace cost a cache miss per request on long traces.
        self._finished: set[str] | None = set() if replay == "closed" else None
        if replay == "closed":
            check_sessions(reqs)
        if replay == "open":
            entries = [(req.arrival_time, req.request_id, req, item) for req, item in requests]
            if in_release_order(entries):
                self._heap = deque(entries)
            else:
                for entry in entries:
                    heapq.heappush(self._heap, entry)
        else:
            for req, item in requests:
                if req.after is not None:
                    self._followers.setdefault(req.after, []).append((req, item))
                    self._held += 1
                else:
                    heapq.heappush(self._heap, (req.arrival_time, req.request_id, req, item))
        self.heap = self._heap

    def __len__(self) -> int:
        """Requests not yet released (queued for a time, or held for a predecessor)."""
        return len(self._heap) + self._held

    def next_time(self) -> float | None:
        """Release time (s) of the next queued request; ``None`` when none is queued (requests
        held for an unfinished predecessor are not queued yet)."""
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now: float) -> list[tuple[float, Request, T]]:
        """Release every queued request whose release time is ``<= now`` (s), in ``(release time,
        request_id)`` order (the heap's, or the deque's, which is the same: class docstring).

        Returns:
            ``[(release_s, request, item)]``; ``release_s`` is the release time itself (<= now).
        """
        out = []
        heap = self._heap
        in_order = heap.__class__ is deque  # (class docstring: the same order as the heap's)
        while heap and heap[0][0] <= now:
            t, _, req, item = heap.popleft() if in_order else heapq.heappop(heap)
            out.append((t, req, item))
        return out

    def finished(self, request_id: str, t: float) -> None:
        """Request ``request_id`` produced its last token at ``t`` (s): queue its followers at
        ``t + delay_s * think_scale``. The one call an engine makes when a request finishes.

        Raises:
            EngineInvariantError: Closed loop: ``request_id`` finished before.
        """
        self.finished_count += 1
        done = self._finished
        if done is None:  # open loop: nothing follows a request
            return
        if request_id in done:
            raise EngineInvariantError(f"request {request_id!r} finished twice")
        done.add(request_id)
        for req, item in self._followers.pop(request_id, ()):
            self._held -= 1
            release = t + req.delay_s * self.think_scale
            heapq.heappush(self._heap, (release, req.request_id, req, item))
