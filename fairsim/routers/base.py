"""What a router sees and decides: the contract of ``fairsim.routers``.

A router picks, for each released request, the instance (engine) of a fleet that serves it
(``fairsim.sim.fleet``). It is asked at the request's release time, with every instance's state
at that time, and answers with an index ``0..N-1``. A router is one module with one class,
registered by name in ``fairsim.routers.registry`` (as ordering policies are in
``fairsim.policies.registry``).

What a router may read of an instance (``InstanceView``) is explicit, because real routers differ
exactly there:

* exact engine state: ``cached_blocks`` (the instance's prefix cache, as a router fed by KV events
  without lag sees it: Dynamo's ``KvIndexer``, llm-d's precise prefix scorer; for every instance
  at once, ``cached_prefixes``), ``waiting`` and
  ``kv_usage`` (the engine's own counters, as scraped metrics without lag);
* router-side bookkeeping, which a real router keeps itself: ``in_flight`` (requests routed and
  not finished), ``active_blocks`` and ``outstanding_tokens`` (see ``InstanceView``);
* nothing else: an approximate router (SGLang's) keeps its own model of the caches.
"""

from __future__ import annotations

import json
from collections.abc import Container, Hashable, Sequence
from typing import Any

from fairsim.types import Request


class RouteRequest:
    """A request as a router sees it at its release.

    Attributes:
        request: The trace's request.
        keys: The block keys of its prompt's full blocks of ``block_size`` tokens, in order
            (``fairsim.sim.keys.engine_block_keys``: equal keys = equal content and prefix).
        block_size: Tokens per block.
        prompt_blocks: Blocks the prompt occupies, the last one partial or not
            (``ceil(L / block_size)``).
        overlaps: ``None``, or each instance's leading ``keys`` cached when the request was routed
            (set by the first ``cached_prefixes`` call, which the routers with an exact view make;
            the fleet reuses it for the chosen instance). As of the routing time only.
    """

    __slots__ = ("request", "keys", "block_size", "prompt_blocks", "overlaps")

    def __init__(self, request: Request, keys: tuple[Hashable, ...], block_size: int) -> None:
        self.request = request
        self.keys = keys
        self.block_size = block_size
        self.prompt_blocks = -(-request.prompt_len // block_size)
        self.overlaps: list[int] | None = None


class InstanceView:
    """One instance of the fleet as routers see it (read-only; the fleet updates it).

    Attributes:
        index: The instance's number, ``0..N-1``.
        in_flight: Requests routed here that have not finished (router-side count; SGLang's
            worker ``load``).
        active_blocks: Blocks of the prompts routed here and not finished, ``ceil(L / block)``
            each (router-side; Dynamo's active blocks, without its sharing of common prefixes).
        outstanding_tokens: Prompt tokens routed here and not finished, less the prefix each had
            cached here when it was routed (router-side; counted whole until the request finishes,
            not as its chunks are computed).
    """

    __slots__ = ("index", "_engine", "in_flight", "active_blocks", "outstanding_tokens")

    def __init__(self, index: int, engine: Any) -> None:
        self.index = index
        self._engine = engine
        self.in_flight = 0
        self.active_blocks = 0
        self.outstanding_tokens = 0

    def cached_blocks(self, keys: Sequence[Hashable], limit: int | None = None) -> int:
        """Exact: leading ``keys`` cached on this instance now (at most ``limit`` of them).
        A router asking it of every instance calls ``cached_prefixes`` instead (the same counts)."""
        return self._engine.pool.count_prefix(keys, len(keys) if limit is None else limit)

    @property
    def hit_table(self) -> Container[Hashable]:
        """Exact: the keys cached (hittable) on this instance now, for ``key in`` tests only."""
        return self._engine.pool.hit_table

    @property
    def waiting(self) -> int:
        """Exact: requests waiting on this instance (queued, preempted, or routed and not yet
        taken in by its next step)."""
        engine = self._engine
        return len(engine._waiting) + len(engine._preempted) + len(engine._arrivals.heap)

    @property
    def running(self) -> int:
        """Exact: requests running on this instance."""
        return len(self._engine._running)

    @property
    def kv_usage(self) -> float:
        """Exact: fraction of this instance's KV blocks held by requests (vLLM's KV usage)."""
        pool = self._engine.pool
        return pool.num_used / pool.num_blocks

    @property
    def cached_total(self) -> int:
        """Exact: blocks cached (hittable) on this instance."""
        return self._engine.pool.num_cached


class Router:
    """Base class of routers.

    Attributes:
        name: The registered name.
        needs: What the trace must carry: ``"sessions"`` (``session_id``), ``"hashes"`` (block
            hashes or segments: prefix identity). ``fairsim.routers.registry.check_trace``.
        view: How it sees caches: ``"none"``, ``"exact"`` or ``"approximate"``.
        source: The public rule it follows.
    """

    name = "router"
    needs: tuple[str, ...] = ()
    view = "none"
    source = ""

    def __init__(self, num_instances: int, *, seed: int = 0, kv_blocks: int = 0) -> None:
        self.num_instances = num_instances
        self.seed = seed
        self.kv_blocks = kv_blocks

    @property
    def samples(self) -> bool:
        """Whether its choices draw on its seeded generator (then ``--seed`` changes a run)."""
        return False

    def choose(self, req: RouteRequest, instances: Sequence[InstanceView], now: float) -> int:
        """The instance for ``req``, released at ``now`` (s). Called once per request, in release
        order; a router keeps whatever state it needs across calls."""
        raise NotImplementedError

    def finished(self, req: RouteRequest, instance: int, now: float) -> None:
        """``req`` finished on ``instance`` at ``now`` (s). Default: nothing to do."""


def cached_prefixes(req: RouteRequest, instances: Sequence[InstanceView]) -> list[int]:
    """Exact: each instance's leading ``req.keys`` cached now, ``[inst.cached_blocks(req.keys)
    for inst in instances]``, computed on the first call for ``req`` and kept in ``req.overlaps``
    (``instances``: the whole fleet, in index order, as ``Router.choose`` gets it).

    Why not ``cached_blocks`` per instance: the KV-aware routers ask for every instance on every
    request, and a method call and a copy of the keys per instance was most of the router's
    cost; this walks each instance's hit table directly. Why not one walk over a map key ->
    instances holding it: keeping that map costs a Python step at every block cached or evicted
    on any instance (hundreds of thousands per run), more than the walks it saves, which stop at
    each instance's first missing key (docs/performance.md, "Fleets")."""
    out = req.overlaps
    if out is None:
        out = req.overlaps = leading_runs(req.keys, [inst.hit_table for inst in instances])
    return out


def leading_runs(keys: Sequence[Hashable], tables: Sequence[Container]) -> list[int]:
    """For each table, how many of ``keys`` from the first are in it (the prefix it holds, in
    blocks). One call per request for all tables: routing runs it for every request."""
    out = []
    for table in tables:
        n = 0
        for key in keys:
            if key not in table:
                break
            n += 1
        out.append(n)
    return out


def lowest(values: Sequence[float]) -> int:
    """Index of the smallest value, the first one on a tie (our deterministic tie-break: the
    public routers pick at random among ties)."""
    best = 0
    for i in range(1, len(values)):
        if values[i] < values[best]:
            best = i
    return best


def highest(values: Sequence[float]) -> int:
    """Index of the largest value, the first one on a tie."""
    best = 0
    for i in range(1, len(values)):
        if values[i] > values[best]:
            best = i
    return best


def check_param(router: str, key: str, value: Any, ok: bool, need: str) -> None:
    """Refuse a router parameter, naming the option: ``--router-param KEY=VALUE: need ...``
    (a value read as a JSON string says so: ``"2"`` is not the number 2)."""
    if not ok:
        given = value if isinstance(value, str) else json.dumps(value)  # as written: true, not True
        got = f", got the string {value!r}" if isinstance(value, str) else ""
        raise ValueError(f"--router-param {key}={given} (router {router!r}): need {need}{got}")


def number(value: Any) -> bool:
    """A real number (not a bool), finite."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value \
        and abs(value) != float("inf")


#: Largest router weight (``dynamo-kv``'s ``overlap_weight``, ``llm-d``'s weights; ours). Only a
#: weight's ratio to the other terms matters, and from about 1e15 on the other terms are lost to
#: rounding (``1e300 * blocks + load == 1e300 * blocks``): the router no longer weighs load at all.
WEIGHT_MAX = 1e6
WEIGHT_NEED = f"a finite number from 0 to {WEIGHT_MAX:g} (only the weights' ratios matter)"


def weight(value: Any) -> bool:
    """A router weight: a number from 0 to ``WEIGHT_MAX``."""
    return number(value) and 0 <= value <= WEIGHT_MAX
