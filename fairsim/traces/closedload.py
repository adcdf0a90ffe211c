"""Offered load of a closed-loop replay: its bound before the run, what it delivered after.

In closed-loop replay (``fairsim.sim.arrivals``) a turn with ``after = X`` is sent at
``finish(X) + delay_s * think_scale``; only a session's first turn (``after = None``, or a turn
whose predecessor was cut by the window) is sent at its ``arrival_time``. So ``--time-scale``
moves only the session starts, and the load the replay offers depends on when turns finish, which
only the run knows. Two figures replace the open-loop offered load (``fairsim.traces.offered``):

- Before the run, an upper bound: each turn sent as early as it can be, the instant its
  predecessor was sent plus its scaled think time (``fairsim.sim.release.earliest_releases``)::

      release_0(r) = s · a(root(r)) + D(r),   D(r) = think_scale · Σ delay_s along r's chain

  The first send is the earliest session start ``s · a_min`` in both the bound and any run, and
  every real send is at or after its ``release_0``, so the real span is at least the bound's span
  and (same requests, same busy time) the delivered load is at most the bound's load.
- After the run, the load delivered: ``fairsim.traces.offered.offered_load`` of the requests
  re-timed to the send times the run recorded (``released_s``).

``--target-load X`` in closed loop picks the time scale ``s`` at which the bound's mean load is
``X``: its span ``span(s) = max_r (s · u_r + D(r))`` with ``u_r = a(root(r)) − a_min`` is
piecewise linear and non-decreasing in ``s``, so ``span(s) = busy / X`` is solved exactly by
``s = min over u_r > 0 of (busy / X − D(r)) / u_r`` when ``busy / X > max_r D(r)``. A larger
target cannot be reached by moving the starts (``span(0) = max_r D(r)``, the think times of the
longest session): ``--think-scale`` can; starts at one instant cannot be spread by a time scale:
``--session-rate`` can.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from fairsim.costmodel import Profile
from fairsim.traces.fastreq import with_arrival
from fairsim.traces.offered import OfferedLoad, busy_time, offered_load, prefill_work
from fairsim.traces.sessions import chain_offsets
from fairsim.types import Request

BOUND_WHAT = ("offered load, closed loop, at most (each turn sent the instant the turn it follows was "
              "sent, plus its think time; a turn that waits is sent later, lowering the load)")
"""What the pre-run figures of a closed-loop replay are (``OfferedLoad.describe``)."""


def delivered_what(policy: str) -> str:
    """What the post-run figures are: the load the replay under ``policy`` delivered."""
    return f"load delivered under {policy} (closed loop, from the send times of the run)"


def zero_wait(requests: Sequence[Request], think_scale: float) -> list[Request]:
    """``requests`` re-timed to their earliest closed-loop send ``a + D`` (``chain_offsets``),
    sorted by that time: the sends of an engine that finished each turn the instant it was sent."""
    offsets = chain_offsets(requests, think_scale)
    out = [with_arrival(r, sum(offsets[r.request_id])) for r in requests]
    out.sort(key=lambda r: (r.arrival_time, r.request_id))
    return out


def closed_loop_bound(requests: Sequence[Request], profile: Profile, budget_tokens: int, window_s: float,
                      think_scale: float, colocated: bool = False) -> OfferedLoad:
    """The offered load of ``zero_wait(requests)``: at least the load any closed-loop replay of
    ``requests`` delivers (module docstring). Raises as ``offered_load``."""
    return offered_load(zero_wait(requests, think_scale), profile, budget_tokens, window_s, colocated)


def delivered_load(requests: Sequence[Request], released_s: Mapping[str, float], profile: Profile,
                   budget_tokens: int, window_s: float, colocated: bool = False) -> OfferedLoad:
    """The offered load of ``requests`` sent at ``released_s`` (request id -> send time, s: a
    run's ``released_s`` column).

    Raises:
        ValueError: A request without a send time (the run did not send it), or as ``offered_load``.
    """
    missing = [r.request_id for r in requests if r.request_id not in released_s]
    if missing:
        raise ValueError(f"{len(missing)} requests were never sent by the replay (first: {missing[0]!r})")
    return offered_load([with_arrival(r, float(released_s[r.request_id])) for r in requests],
                        profile, budget_tokens, window_s, colocated)


def closed_loop_time_scale(requests: Sequence[Request], profile: Profile, budget_tokens: int, target: float,
                           think_scale: float, colocated: bool = False) -> float:
    """The ``--time-scale`` at which the closed-loop bound of ``requests`` has mean load ``target``
    (no reuse; module docstring).

    Args:
        requests: The requests to replay, in trace time (windowed, not yet scaled).
        target: The ``--target-load``.
        think_scale: The ``--think-scale``.

    Raises:
        ValueError: ``target`` not a finite number > 0, or a target no time scale reaches; the
            message names ``--target-load`` and the option that can reach it (``--think-scale``,
            ``--session-rate``, ``--replay open``).
    """
    if not (target > 0 and target < float("inf")):
        raise ValueError(f"--target-load {target:g}: need a finite load > 0")
    work = prefill_work(requests, budget_tokens, ideal_reuse=False, profile=profile, colocated=colocated)
    busy = float(busy_time(profile, budget_tokens, work.new_tokens.sum(), work.pairs.sum(), work.chunks.sum(),
                           work.decode_tokens.sum(), work.decode_s.sum()))
    offsets = chain_offsets(requests, think_scale)
    starts = sorted({a for a, _ in offsets.values()})
    a_min = starts[0]
    longest = max(d for _, d in offsets.values())
    span = busy / target
    scales = [(span - d) / (a - a_min) for a, d in offsets.values() if a > a_min]
    if span > longest and scales:
        return min(scales)
    raise ValueError(unreachable_message(target, busy, longest, len(starts), think_scale,
                                         sessions=sum(1 for r in requests if r.after is None
                                                      or r.after not in offsets)))


def unreachable_message(target: float, busy_s: float, longest_s: float, start_times: int, think_scale: float,
                        sessions: int) -> str:
    """Why no time scale gives ``--target-load target`` in closed loop, and what can.

    Args:
        busy_s: Best-case busy seconds of all requests (cold).
        longest_s: The largest ``D``: scaled think/tool seconds along the longest chain.
        start_times: Distinct session start times.
        think_scale: The ``--think-scale`` in use.
        sessions: First turns (sessions, and turns sent at their own time).
    """
    head = (f"--target-load {target:g}: closed-loop replay sends a turn when the turn it follows finished "
            f"plus its think time, so a time scale moves only the session starts")
    if start_times == 1:
        what = ("this trace has one session" if sessions == 1
                else f"the {sessions} sessions all start at one instant")
        levers = [] if sessions == 1 else ["--session-rate R to start the sessions as a Poisson process "
                                           "of R sessions/s (--target-load then scales those starts)"]
        if longest_s > 0:
            levers.append(f"--think-scale to scale the {longest_s:.6g} s of think/tool times of the "
                          f"longest session")
        levers.append("--replay open to send every turn at its timestamp")
        return f"{head}; {what}, so no time scale changes when anything is sent. Use " + ", or ".join(levers)
    most = busy_s / longest_s
    return (head + f"; the think/tool times of the longest session alone take {longest_s:.6g} s"
            + (f" (at --think-scale {think_scale:g})" if think_scale != 1 else "")
            + f", so even with every session starting at once and no turn waiting the replay offers at "
              f"most load {most:.3g}. Use a target below {most:.3g}, --think-scale below "
              f"{think_scale * most / target:.3g} (think/tool times shortened to reach {target:g}), "
              f"or --replay open (every turn at its timestamp)")
