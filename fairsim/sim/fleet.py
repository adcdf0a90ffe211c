"""A fleet: ``N`` engines behind a router, in one SimPy environment (``--instances N``).

Each instance is its own ``Engine`` (its own block pool and its own ordering-policy object). The
fleet owns the trace's arrival process (``fairsim.sim.arrivals.Arrivals``, open or closed loop);
when a request is released the router (``fairsim.routers``) picks its instance, at the release
time, from every instance's state at that time, and the request joins that instance's inbox. An
engine takes its inbox's due requests into its waiting queue at the start of its next step, as a
lone engine takes its releases, so one instance behind any router is today's engine, table for
table (``tests/test_fleet.py``).

Time: the engines advance together. Each yields to SimPy at every step end (a lone engine yields
only when idle); a release is routed by a wake-up event at its time, scheduled ``URGENT`` so it
runs before any engine's step at the same time, and again by each engine before its step (a
closed-loop turn released at a step's end). The router sees an engine mid-step as it was at the
step's start plus the step's admissions and allocations; the step's completions count at its end.
Two engines' events at the very same time run in SimPy's order (deterministic).

One exception, for speed: a prefill-only engine runs its steps that are one full-budget chunk of
its first running request (``Engine._chunk_burst``: nothing can be admitted or finish in them) as
one run, yielding at its end; the run stops before the fleet's next queued release, so a release
known in advance sees the engine at its time. A closed-loop turn released by *another* engine's
completion during such a run sees this engine at the run's end (its cache and KV usage a few chunks
ahead), and if routed here joins the waiting queue at the run's end: no step of the run could have
admitted it, only the ``waiting`` column of those steps leaves it out.

Colocated instances are ``DecodeFastEngine``s (``fast_decode``): they yield between a step's
allocations and its completions as ``Engine`` does, and run pure decode steps as one stretch only
while those steps start before the next pending SimPy event (no release can be routed to them, and
nothing they do is seen, before it), so their tables are the step-by-step fleet's
(``tests/test_fleet_speed.py``).

Cost: at most one SimPy event per engine step (per run of chunk steps, per decode stretch); none
where the step's end is before every pending event anyway (``FleetMember.advance``).
"""

from __future__ import annotations

import gc
import heapq
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import simpy
from simpy.core import URGENT

from fairsim.costmodel import Profile
from fairsim.errors import EngineInvariantError
from fairsim.gcpause import collect_before_run, paused
from fairsim.policies.base import Policy
from fairsim.routers.base import InstanceView, RouteRequest, Router
from fairsim.sim.arrivals import Arrivals, resolve_replay
from fairsim.sim.capacity import resolve_capacity
from fairsim.sim.config import EngineConfig
from fairsim.sim.engine import Engine, make_lives
from fairsim.sim.result import Columns, SimResult
from fairsim.types import Request

#: Columns the fleet adds to the request table (after the engine's).
FLEET_REQUEST_COLUMNS = ("instance", "router_cached_tokens")


@dataclass(frozen=True)
class FleetResult(SimResult):
    """A fleet run: ``requests``/``steps`` are the fleet-wide tables (every instance's rows, with
    an ``instance`` column; requests in trace order (arrival, id), steps instance by instance),
    ``instances`` each instance's own ``SimResult`` (its rows only, its own step numbers).

    ``requests.router_cached_tokens``: the prefix the router counted as cached on the chosen
    instance when it routed the request (exact routers: the cache then; SGLang's: its tree; none:
    0), beside ``cached_tokens``, the hit the engine found at admission.
    """

    instances: tuple[SimResult, ...] = ()
    router: str = ""


class _Inbox:
    """The arrival process one engine of a fleet sees (the interface ``Engine._loop`` reads of
    ``Arrivals``): the requests routed to it, as a ``(release_s, request_id, request, live)``
    min-heap, and the fleet's count of what is still to be released."""

    def __init__(self, fleet: Fleet, index: int) -> None:
        self.fleet = fleet
        self.index = index
        self.heap: list[tuple[float, str, Request, Any]] = []

    def __len__(self) -> int:
        return len(self.heap) + len(self.fleet.arrivals)

    def next_time(self) -> float | None:
        return self.heap[0][0] if self.heap else None

    def pop_due(self, now: float) -> list[tuple[float, Request, Any]]:
        out = []
        heap = self.heap
        while heap and heap[0][0] <= now:
            t, _, req, live = heapq.heappop(heap)
            out.append((t, req, live))
        return out

    def finished(self, request_id: str, t: float) -> None:
        self.fleet.finished(self.index, request_id, t)


class FleetMember:
    """What ``Engine`` reads of its fleet (``Engine(member=...)``)."""

    def __init__(self, fleet: Fleet, index: int) -> None:
        self.fleet = fleet
        self.index = index
        self.arrivals = _Inbox(fleet, index)
        self.all_keys = fleet.all_keys
        self.wake: simpy.Event | None = None

    def advance(self, t: float) -> bool:
        """Move the SimPy clock to ``t`` (s) without an event, when the engine's ``timeout(t -
        now)`` would be the very next event anyway; False (nothing changed): the engine must
        yield that timeout.

        The timeout would be scheduled at ``now + (t - now)`` (SimPy's float), NORMAL priority,
        after every pending event: it runs next exactly when that time is below every pending
        event's (``Environment.peek``), and then nothing else runs in between. Skipping it
        changes no decision and no time, only the cost: a SimPy event per step when the other
        engines are idle or far ahead."""
        env = self.fleet.env
        at = env.now + (t - env.now)
        if at < env.peek():
            env._now = at  # what Environment.step sets on taking the timeout
            return True
        return False

    def route_due(self, now: float) -> None:
        """Route every release due by ``now`` (s) (before this engine's step at ``now``)."""
        fleet = self.fleet
        heap = fleet.arrivals.heap
        if heap and heap[0][0] <= now:
            fleet.route_due(now)

    def idle(self, now: float):
        """Nothing to run: wait for a request routed here; return the clock of the engine's next
        loop, ``now + (release - now)`` as a lone engine's idle wait computes it."""
        heap = self.arrivals.heap
        while not heap:
            self.wake = self.fleet.env.event()
            yield self.wake
            self.wake = None
        t = heap[0][0]
        return now + (t - now)


class _Wake(simpy.events.Event):
    """A wake-up at ``delay`` from now, scheduled ahead of the engines' events at that time."""

    def __init__(self, env: simpy.Environment, delay: float, at: float) -> None:
        super().__init__(env)
        self._ok = True
        self._value = None
        self.at = at
        env.schedule(self, URGENT, delay)


class Fleet:
    """``N`` engines behind ``router`` (see the module docstring).

    Args:
        requests: The trace.
        policies: One fresh ordering-policy object per instance (``make_policy`` per instance).
        router: A fresh router (``fairsim.routers.make_router``).
        profile, config, replay, think_scale, fast_order, name: As ``Engine``'s; every instance
            gets the same ``config`` (its KV capacity resolved once, for the whole trace).

    Raises:
        As ``Engine``.
    """

    #: What each engine reads of the fleet (``fairsim.sim.disaggregated`` gives its prefill
    #: engines a member that can also wait for pinned blocks).
    member_class: type[FleetMember] = FleetMember

    def __init__(self, requests: Sequence[Request], policies: Sequence[Policy], router: Router, profile: Profile,
                 config: EngineConfig = EngineConfig(), progress: Callable[[int], Any] | None = None, *,
                 replay: str | None = None, think_scale: float = 1.0, fast_order: bool = True,
                 name: str | None = None, router_name: str | None = None, fast_decode: bool = True) -> None:
        from dataclasses import replace

        from fairsim.sim.decode_fast import DecodeFastEngine

        block_size, kv_blocks = resolve_capacity(requests, config)
        config = replace(config, block_size=block_size, kv_blocks=kv_blocks, kv_tokens=None, kv_fraction=None)
        self.config = config
        self.router = router
        self.router_name = router_name or router.name
        self.env = simpy.Environment(initial_time=0.0)
        self.lives = make_lives(requests, block_size, config.mode == "colocated")
        self.all_keys = [live.keys for live in self.lives]
        self.members = [self.member_class(self, k) for k in range(len(policies))]
        self.replay = resolve_replay(requests, replay)
        # The engines get no requests of their own (the fleet routes them; capacity and replay
        # mode are resolved above, once for the trace).
        engine_type = DecodeFastEngine if fast_decode and config.mode == "colocated" else Engine
        self.engines = [engine_type((), policy, profile, config, progress, replay=self.replay,
                                    think_scale=think_scale, fast_order=fast_order, name=name, member=member)
                        for policy, member in zip(policies, self.members)]
        for engine in self.engines:
            engine.env = self.env
        self.arrivals = Arrivals([(live.req, live) for live in self.lives], self.replay, think_scale)
        self.views = [InstanceView(k, engine) for k, engine in enumerate(self.engines)]
        self.block_size = block_size
        self.kv_blocks = kv_blocks
        n = len(self.lives)
        self.instance_of = [-1] * n
        self.router_cached = [0] * n
        self._route_req: list[RouteRequest | None] = [None] * n
        self._routed_cached = [0] * n  # tokens cached on the chosen instance when routed (exact)
        self._by_id = {live.req.request_id: live for live in self.lives}
        self._wake_at = float("inf")

    # -- routing ---------------------------------------------------------------------------------
    def _schedule_wake(self) -> None:
        """Make sure a wake-up is pending at the next queued release."""
        heap = self.arrivals.heap
        if heap and heap[0][0] < self._wake_at:
            t = heap[0][0]
            self._wake_at = t
            ev = _Wake(self.env, max(0.0, t - self.env.now), t)
            ev.callbacks.append(self._woken)

    def _woken(self, ev: _Wake) -> None:
        if ev.at == self._wake_at:
            self._wake_at = float("inf")
        self.route_due(ev.at)

    def route_due(self, now: float) -> None:
        """Route every release due by ``now`` (s), in (release time, id) order."""
        for t, req, live in self.arrivals.pop_due(now):
            self._route(live, t)
        self._schedule_wake()

    def _route(self, live: Any, t: float) -> None:
        bs = self.block_size
        keys = live.keys[: live.req.prompt_len // bs]
        rreq = RouteRequest(live.req, keys, bs)
        views = self.views
        k = self.router.choose(rreq, views, t)
        if not (isinstance(k, int) and 0 <= k < len(views)):
            raise EngineInvariantError(f"router {self.router_name!r} chose instance {k!r} of {len(views)}")
        view = views[k]
        overlaps = rreq.overlaps  # the router's exact view of every instance, if it took one
        if overlaps is None:
            cached = view.cached_blocks(live.keys, live.max_hit_blocks) * bs
        else:
            # The same count: rreq.keys are live.keys' first L // bs and max_hit_blocks <= L // bs.
            cached = min(overlaps[k], live.max_hit_blocks) * bs
        i = live.index
        self.instance_of[i] = k
        self._routed_cached[i] = cached
        self.router_cached[i] = self._router_view(rreq, k, cached)
        self._route_req[i] = rreq
        view.in_flight += 1
        view.active_blocks += rreq.prompt_blocks
        view.outstanding_tokens += live.req.prompt_len - cached
        self.engines[k]._all.append(live)
        member = self.members[k]
        heapq.heappush(member.arrivals.heap, (t, live.req.request_id, live.req, live))
        if member.wake is not None and not member.wake.triggered:
            member.wake.succeed()

    def _router_view(self, rreq: RouteRequest, k: int, exact_tokens: int) -> int:
        """The cached prefix (tokens) the router counted on instance ``k``."""
        view = self.router.view
        if view == "exact":
            return exact_tokens
        if view == "approximate":
            # Its own model of the caches: what it matched on the chosen instance before routing.
            return getattr(self.router, "last_match_blocks", 0) * rreq.block_size
        return 0

    def finished(self, k: int, request_id: str, t: float) -> None:
        """A request finished on instance ``k`` at ``t``: release its closed-loop followers and
        update the router's bookkeeping."""
        self.arrivals.finished(request_id, t)
        self._unroute(k, self._by_id[request_id], t)
        self._schedule_wake()

    def _unroute(self, k: int, live: Any, t: float) -> None:
        """``live`` left instance ``k`` at ``t``: drop it from the router's counts of ``k``."""
        view = self.views[k]
        rreq = self._route_req[live.index]
        view.in_flight -= 1
        view.active_blocks -= rreq.prompt_blocks
        view.outstanding_tokens -= live.req.prompt_len - self._routed_cached[live.index]
        self.router.finished(rreq, k, t)

    # -- the run ---------------------------------------------------------------------------------
    def run(self) -> FleetResult:
        """Simulate until every request has finished; the fleet-wide and per-instance tables."""
        if self.config.mode == "colocated":
            import pandas  # noqa: F401  (as Engine.run: not inside the timed run)
        wall0 = time.perf_counter()
        gc.freeze()
        try:
            self._schedule_wake()
            for engine in self.engines:
                self.env.process(engine._loop())
            self.env.run()
            unfinished = [live.req.request_id for live in self.lives if live.finish_s is None]
            if unfinished:
                raise EngineInvariantError(f"{len(unfinished)} requests never finished, first {unfinished[0]!r}")
            return self._result(time.perf_counter() - wall0)
        finally:
            gc.unfreeze()

    def _result(self, wall_s: float) -> FleetResult:
        colocated = self.config.mode == "colocated"
        parts = []
        global_gaps = []
        for k, engine in enumerate(self.engines):
            engine._all.sort(key=lambda live: live.index)
            gaps = None
            if colocated:
                import numpy as np

                # The engine's gap table names requests by their trace row (live.index): the
                # fleet-wide table keeps it, the instance's own counts its rows.
                gaps = engine._gap_table()
                global_gaps.append(gaps)
                rows = np.fromiter((live.index for live in engine._all), dtype=np.int64, count=len(engine._all))
                gaps = gaps.assign(request_row=np.searchsorted(rows, gaps["request_row"].to_numpy()))
            parts.append(SimResult(requests=engine._request_table(), steps=engine._step_table(), token_gaps=gaps,
                                   policy=engine.policy_name, kv_blocks=engine.kv_blocks,
                                   block_size=engine.block_size, wall_time_s=wall_s))
        requests = self._fleet_requests(parts)
        steps = self._fleet_steps(parts)
        gaps = None
        if colocated:
            import pandas as pd

            # A request's gaps are on one instance, in token order: a stable sort by row keeps it.
            gaps = pd.concat(global_gaps, ignore_index=True).sort_values("request_row", kind="stable",
                                                                        ignore_index=True)
        first = self.engines[0]
        return FleetResult(requests=requests, steps=steps, token_gaps=gaps, policy=first.policy_name,
                           kv_blocks=self.kv_blocks, block_size=self.block_size, wall_time_s=wall_s,
                           instances=tuple(parts), router=self.router_name)

    def _fleet_requests(self, parts: list[SimResult]) -> Columns:
        """Every instance's request rows in trace order, plus ``FLEET_REQUEST_COLUMNS``.

        Column by column: an instance's rows are its requests in trace order (``engine._all``
        sorted by ``live.index``), so a column is the instances' columns laid end to end, then
        taken in trace order (a gather in C, ``map(list.__getitem__, ...)``; the values stay the
        engine's Python objects, so the DataFrame infers the same dtypes). The columns are the
        first instance's with rows (a column another instance lacks is ``None`` there)."""
        names: list[str] | None = None
        tables = []
        position: list[int] = []  # trace row -> row in the instances' rows laid end to end
        for engine, part in zip(self.engines, parts):
            cols = part.columns("requests").columns
            if not cols:
                continue
            if names is None:
                names = list(cols)
            tables.append((cols, len(engine._all)))
            position.extend(live.index for live in engine._all)
        merged: dict[str, list] = {}
        if names is not None:
            row_of = [0] * len(position)
            for row, index in enumerate(position):
                row_of[index] = row
            for c in names:
                stacked: list = []
                for cols, count in tables:
                    stacked.extend(cols.get(c, [None] * count))
                merged[c] = list(map(stacked.__getitem__, row_of))
        merged["instance"] = list(self.instance_of)
        merged["router_cached_tokens"] = list(self.router_cached)
        return Columns(merged)

    def _fleet_steps(self, parts: list[SimResult]) -> Columns:
        """Every instance's step rows, instance by instance, plus ``instance``."""
        merged: dict[str, list] = {}
        instance: list[int] = []
        for k, part in enumerate(parts):
            cols = part.columns("steps").columns
            for c, values in cols.items():
                merged.setdefault(c, []).extend(values)
            instance.extend([k] * len(part.columns("steps")))
        merged["instance"] = instance
        return Columns(merged)


def simulate_fleet(requests: Sequence[Request], policies: Sequence[Policy], router: Router, profile: Profile,
                   config: EngineConfig = EngineConfig(), progress: Callable[[int], Any] | None = None, *,
                   replay: str | None = None, think_scale: float = 1.0, fast_order: bool = True,
                   name: str | None = None, router_name: str | None = None, fast_decode: bool = True) -> FleetResult:
    """Replay ``requests`` through a fleet of ``len(policies)`` engines behind ``router``
    (``fast_decode``: colocated instances are ``DecodeFastEngine``s, else the step-by-step
    ``Engine``, the reference; the same tables).

    Raises:
        As ``fairsim.sim.simulate`` (a policy's failure is reported as there).
    """
    collect_before_run(len(requests))  # (earlier runs' state, fairsim/gcpause.py)
    return run_reporting_policy_failure(
        lambda: Fleet(requests, policies, router, profile, config, progress, replay=replay,
                      think_scale=think_scale, fast_order=fast_order, name=name, router_name=router_name,
                      fast_decode=fast_decode), policies, name)


def run_reporting_policy_failure(build: Callable[[], Fleet], policies: Sequence[Policy],
                                 name: str | None) -> FleetResult:
    """``build()`` (with the collector paused) and then ``run()`` the fleet, with an exception
    raised inside an engine's ordering policy reported as a lone engine reports it
    (``fairsim.policies.failure.policy_failure``: the policy named, its traceback kept); building
    included (the engines call a policy's eviction hook's ``bind()``/``attach()``), where the
    policies are named ``name``, as the fleet names its engines. Any other exception propagates
    unchanged."""
    fleet = None
    try:
        with paused(freeze=True):
            fleet = build()
        return fleet.run()
    except (Exception, SystemExit) as exc:
        from fairsim.policies.failure import policy_failure

        engines = ([(e.policy, e.policy_name, e._inc) for e in fleet.engines] if fleet is not None
                   else [(policy, name, None) for policy in policies])
        for policy, policy_name, fast_path in engines:
            found = policy_failure(exc, policy, policy_name, fast_path)
            if found is not None:
                raise found[0] from found[1]
        raise
