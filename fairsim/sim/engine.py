"""SimPy model of a vLLM-v1-style chunked-prefill engine with a prefix cache.

SimPy time is seconds. The step loop is a SimPy process function; it keeps the clock itself (a
step ends at ``now + duration``, the float SimPy's ``timeout(duration)`` gives), so a step
costs no event. A fleet member (``fairsim.sim.fleet``) runs it as a process of the fleet's
environment and yields to it at step ends and when idle. A lone engine is its own only process:
nothing else could run between its steps, so ``Engine.run`` drives the loop directly, with no
SimPy environment (and ``simpy`` is not imported: its import reads its version from the
installed metadata, 15-35 ms of a short run's start-up). The clock, and so every table, is the
same either way (the same floats: ``now + duration``). Released
requests are drained from the arrival process (``fairsim.sim.arrivals``: open loop =
timestamps, closed loop = a turn is released when its predecessor finished plus its think time)
at the start of every step, so a request released exactly at a step's start time is waiting for
that step - a fixed, deterministic order, (release time, request_id), with no same-time event
races.

Each step (``vllm/v1/core/sched/scheduler.py``, ``Scheduler.schedule``):

1. Running requests first, in admission order, each taking ``min(remaining, budget left)`` tokens.
   Their new blocks are allocated per chunk; if the pool is short, the latest-admitted running
   request is preempted (blocks freed, progress reset, put back at the front of waiting) until
   the chunk fits or the request itself was preempted.
2. If nothing was preempted: waiting requests, preempted ones first (in their order), then the
   rest in the policy's order (computed at the start of the step, before step 1, from the cache
   as it was then: vLLM's hook reorders the queue before ``Scheduler.schedule``). ``order()`` is
   called only in steps where a waiting request could be admitted (stateful orders such as
   Preble's group pointer advance once per such step). For each, the
   prefix hit ``h`` is looked up now (leading full blocks, capped at ``L - 1`` tokens), the
   chunk is ``min(L - h, budget left)``, and admission needs free-or-evictable blocks for the
   *whole* remaining prompt (vLLM's ``scheduler_reserve_full_isl``; only the chunk's blocks are
   allocated). On a misfit admission stops for the step (head-of-line), unless the policy
   ``skips_misfits``. ``order()`` must return a permutation (``check_permutation``); the
   admitted requests go to ``on_admitted`` as their start-of-step snapshots (policy contract,
   ``fairsim/policies/base.py``).
3. Blocks become hittable as soon as they are scheduled (vLLM caches them inside
   ``allocate_slots``), so a later request in the same step can hit them.
4. The step lasts ``Profile.step_time`` of its batch. A request whose last prompt token was
   computed finishes at the step's end (prefill-only node: one output token); TTFT = that time
   minus release (= arrival in open loop). Its blocks are freed deepest first, and the arrival
   process is told it finished (``_request_finished``: closed-loop followers are queued).

Colocated mode (``EngineConfig.mode == "colocated"``, DESIGN.md "Colocated mode"): the same loop
with vLLM's uniform token accounting. A request holds ``num_tokens = L + g`` tokens (``g`` generated
so far) of which ``computed`` are in KV; every step gives it ``min(num_tokens - computed, budget
left)`` (a decoding request: exactly 1). When a step brings ``computed`` to ``num_tokens`` a token is
sampled at the step's end (``g += 1``; the first one is the TTFT token, measured from the release); the request finishes when
``g == output_len``. So it computes ``L + output_len - 1`` tokens in all. A preempted request keeps
``g`` and recomputes all ``L + g`` tokens later (prefix hit capped at ``L + g - 1``; admission needs
blocks for all of them). Full blocks of generated tokens are cached under keys unique to the
request (``("unique", id, j)``, as ``engine_block_keys``): the trace hashes prompt blocks only, so
only the request itself (after a preemption) can hit them. Steps are costed by
``Profile.step_time_colocated`` (decode terms and the weight-read floor).
"""

from __future__ import annotations

import gc
import math
import os
import time
from collections import deque
from itertools import chain, islice
from operator import attrgetter
from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from fairsim import interrupt
from fairsim.compiled import PURE_PYTHON_ENV, compiled_twin
from fairsim.costmodel import Profile
from fairsim.errors import EngineInvariantError, PolicyContractError
from fairsim.policies.base import Policy, check_permutation, checked_admission_limit
from fairsim.policies.failure import policy_name
from fairsim.sim.arrivals import Arrivals, resolve_replay
from fairsim.policies.clients import client_of_request
from fairsim.policies.incremental import fast_path_of
from fairsim.sim.pool_choice import block_pool_kind, compiled_module, new_block_pool
from fairsim.sim.capacity import resolve_capacity
from fairsim.sim.config import EngineConfig
from fairsim.sim.lazy_hits import NO_KEY, LazyHits, compiled_watch_class, watching
from fairsim.sim.label_columns import label_columns
from fairsim.sim.result import Columns, SimResult
from fairsim.sim.steplog import STEP_COLUMNS, StepLog
from fairsim.sim.keys import blocks_for, engine_block_keys, generated_block_keys
from fairsim.types import QueuedRequest, Request

if TYPE_CHECKING:  # the token-gap DataFrame of a fleet's or disaggregated run's parts
    import pandas as pd

_handle_of = attrgetter("handle")  # a snapshot's engine request (QueuedRequest.handle)

#: The step loop moves the objects it created so far (snapshots, batches, policy state) out of the
#: cyclic GC's generations every ``FREEZE_EVERY_MASK + 1`` steps (``gc.freeze``, O(1)), as
#: ``Engine.run`` does for the trace at the start: under overload tens of thousands of live
#: snapshots made each full collection longer, and cost per request grew with the trace length
#: (measured: FCFS on the conversation trace at ``--tile 3``, native rate: full collections took
#: 1.4 s of 2.9 s CPU; 0.15 s with this and the tables built before unfreezing). The run itself
#: makes no cyclic garbage (checked with ``gc.collect()`` after runs of the nine non-Fairway
#: policies); a policy's is collected once ``Engine.run`` unfreezes. Every 64 steps rather than
#: 256: between two freezes a Fairway-family run allocated more than the collector's 700-object
#: threshold, so young collections ran that found nothing to free (0 objects in every one) and
#: cost 1-1.5 % of the run's CPU (conversation trace, native rate: fairway 41 collections, 14 ms;
#: fairway-deadline 53, 12 ms; lpm 35, 7.5 ms; every 64 steps: 0, 10 (1.3 ms) and 0).
FREEZE_EVERY_MASK = 63
FREEZE_SHIFT = 6  # log2(FREEZE_EVERY_MASK + 1)


def plan_chunks(total: int, computed: int, budget: int, bs: int, num_blocks: int, free_left: int,
                stop: int, n_keys: int, now: float, limit: float,
                step_time: Callable[[int, float, int], float]) -> tuple[list[int], list[int], list[float],
                                                                        list[float], int, float, int]:
    """The chunks of a prefill-only burst (``Engine._chunk_burst``), each one full ``budget``
    chunk of one request, planned before the pool does their work.

    Chunks follow while more than ``budget`` tokens of ``total`` are left after ``computed``,
    the clock ``now`` is below ``limit`` (the next arrival) and no Ctrl-C was requested, and stop
    before one that needs more than ``free_left`` blocks. ``num_blocks`` is the request's blocks,
    ``stop`` its blocks cached, ``n_keys`` its block keys; each chunk takes
    ``step_time(budget, budget * (computed + budget / 2), 1)`` seconds.

    Returns:
        ``needs`` (blocks to allocate per chunk), ``stops`` (blocks cached after each), their
        start times and durations (s), then ``computed``, ``now`` and ``stop`` after them.
        ``fairsim.sim._block_pool_c.plan_chunks`` is the compiled twin (same results, to the
        bit: ``tests/test_block_pool_compiled.py``).
    """
    needs: list[int] = []
    stops: list[int] = []
    starts_s: list[float] = []
    durations: list[float] = []
    while total - computed > budget and now < limit and not interrupt.REQUESTED:
        end = computed + budget
        need = -(-end // bs) - num_blocks
        if need > 0:
            if need > free_left:
                break
            free_left -= need
            num_blocks += need
        else:
            need = 0
        full = end // bs
        if full > stop < n_keys:
            stop = full if full < n_keys else n_keys
        duration = step_time(budget, budget * (computed + budget / 2), 1)
        needs.append(need)
        stops.append(stop)
        starts_s.append(now)
        durations.append(duration)
        computed = end
        now = now + duration
    return needs, stops, starts_s, durations, computed, now, stop


def compiled_burst(profile: Profile) -> tuple[Any, tuple[float, ...]]:
    """The compiled ``plan_chunks`` and ``StepLog`` (the module ``fairsim.sim._block_pool_c``)
    and the profile's step-time coefficients ``(a_s, b_s_per_token, k_s_per_pair,
    d_s_per_request)``, where the compiled pool is in use (``block_pool_kind``) and the
    profile's step time is ``Profile.step_time_from_sums`` with float coefficients (the compiled
    plan does the same float operations in the same order); else ``(None, ())``: the Python
    ``plan_chunks`` and ``fairsim.sim.steplog.StepLog``."""
    if block_pool_kind() != "compiled" or type(profile).step_time_from_sums is not Profile.step_time_from_sums:
        return None, ()
    coefficients = (profile.a_s, profile.b_s_per_token, profile.k_s_per_pair, profile.d_s_per_request)
    if not all(type(c) is float for c in coefficients):
        return None, ()
    return compiled_module(), coefficients


class _LiveWaiting:
    """The fields of ``_Live`` that a *waiting* request's events read and write, laid out first.

    CPython places a class's ``__slots__`` in name order after its base's, so these twelve
    (the ``_watch_c.LIVE_FIELDS``: release, snapshot, watch, re-key, admission check) take the
    object's first 112 bytes, two or three 64-byte cache lines, where in one flat ``__slots__``
    they spread over all five lines of the object (alphabetical order put ``arrival_prefill``
    first and ``watched`` last). Under overload a request waits long enough for its object to
    leave the cache, and each event on it (a re-snapshot after a watched key changed, the order's
    read, its admission) then paid a miss per line touched (docs/performance.md, item 4).
    Only a layout: the fields are ``_Live``'s, set by its ``__init__``.
    """

    __slots__ = (
        "req", "keys", "max_hit_blocks", "computed", "snap", "released_s", "watched", "next_key",
        "partial", "last_snap", "client", "arrival_prefill",
    )


class _Live(_LiveWaiting):
    """Mutable engine-side state of one request (never shown to policies). The fields a waiting
    request's events touch are ``_LiveWaiting``'s (first in memory); these are read once it runs
    or finishes."""

    __slots__ = (
        "num_prompt_blocks", "blocks", "num_cached_blocks", "cached_at_admission",
        "first_scheduled_s", "first_scheduled_step", "finish_s", "finish_step", "preemptions",
        "preempted", "out_len", "generated", "first_token_s", "last_token_s", "discarded",
        "resume_cached", "index", "dec_seq", "dec_step", "dec_c0", "dec_g0",
    )

    def __init__(self, req: Request, keys: tuple[Hashable, ...], block_size: int,
                 out_len: int = 1) -> None:
        self.req = req
        self.keys = keys
        # vLLM caps the hit at L - 1 tokens so the last token is recomputed for its logits
        # (KVCacheManager.get_computed_blocks -> find_longest_cache_hit(max_length=L - 1)).
        # (inlined min and blocks_for: this runs once per request of the trace, at start-up)
        prompt_len = req.prompt_len
        cap = (prompt_len - 1) // block_size
        self.max_hit_blocks = cap if cap < len(keys) else len(keys)
        self.num_prompt_blocks = -(-prompt_len // block_size)
        self.computed = 0
        self.blocks: list[int] = []
        self.num_cached_blocks = 0
        self.cached_at_admission: int | None = None
        self.first_scheduled_s: float | None = None
        self.first_scheduled_step: int | None = None
        self.finish_s: float | None = None
        self.finish_step: int | None = None
        self.preemptions = 0
        self.preempted = False
        self.released_s: float | None = None  # when the request joined the waiting queue
        # Cached policy snapshot; None when a key this request could hit changed state.
        self.snap: QueuedRequest | None = None
        self.out_len = out_len  # tokens to generate (1 in prefill-only mode)
        self.generated = 0  # tokens sampled so far
        self.first_token_s: float | None = None
        self.last_token_s: float | None = None
        self.discarded = 0  # computed tokens dropped by preemptions (recomputed later)
        self.resume_cached = 0  # prefix-hit tokens at re-admissions after a preemption
        self.index = 0  # row in the request table (set by the engine)
        # Aggregated decode (``fairsim.sim.decode_fast``): while ``dec_seq`` is set, ``computed``
        # and ``generated`` are ``dec_c0``/``dec_g0`` plus the steps run since step ``dec_step``.
        self.dec_seq: int | None = None
        self.dec_step = 0
        self.dec_c0 = 0
        self.dec_g0 = 0
        self.watched = 0  # leading keys in the engine's watcher map (Engine._rewatch)
        # Lazy hits dropped it from some of those keys' watchers while it had no snapshot.
        self.partial = False
        self.last_snap: QueuedRequest | None = None  # the last snapshot built (Engine._make_snapshot)
        self.client = client_of_request(req, keys)  # QueuedRequest.client (fixed per request)
        self.arrival_prefill = 0  # the engine's prefill-token counter at release (contract rule 5)
        # The key whose caching can raise the hit of the last snapshot built while waiting
        # (``keys[hit]``; ``NO_KEY`` when that hit is already the largest): ``Engine._rewatch``.
        self.next_key: Hashable = NO_KEY


def decode_request_columns(lives: Sequence[_Live], released: Sequence[float]) -> dict[str, list]:
    """The request table's decode columns, one value per request of ``lives`` (after the run):
    ``output_tokens``, ``e2e_s`` (finish - release, s), ``tpot_s`` (vLLM's TPOT: (e2e - ttft) /
    (output_tokens - 1), s; NaN for one token), ``discarded_tokens`` and ``resume_cached_tokens``."""
    return {
        "output_tokens": [live.out_len for live in lives],
        "e2e_s": [live.finish_s - rel for live, rel in zip(lives, released)],
        "tpot_s": [(live.finish_s - live.first_token_s) / (live.out_len - 1) if live.out_len > 1
                   else float("nan") for live in lives],
        "discarded_tokens": [live.discarded for live in lives],
        "resume_cached_tokens": [live.resume_cached for live in lives],
    }


def make_lives(requests: Sequence[Request], block_size: int, colocated: bool) -> list[_Live]:
    """The engine-side state of ``requests``, sorted by (arrival, ``request_id``), each with its
    row ``index`` in that order. ``engine_block_keys``: every full block is hashed, as in vLLM
    (not only the trace's); colocated mode also keys the generated tokens' blocks.

    The compiled twin (``compiled_lives``: ``_live_c.new_lives``) builds the same states where
    it is built; the loop below is the reference."""
    ordered = sorted(requests, key=attrgetter("arrival_time", "request_id"))  # the same key tuples, no Python call
    bs = block_size
    twin = compiled_lives()
    if twin is not None:
        return twin.new_lives(ordered, bs, colocated, generated_block_keys if colocated else engine_block_keys,
                              client_of_request, NO_KEY)
    if colocated:
        lives = [_Live(r, generated_block_keys(r, bs), bs, r.output_len) for r in ordered]
    else:
        lives = [_Live(r, engine_block_keys(r, bs), bs) for r in ordered]
    for i, live in enumerate(lives):
        live.index = i
    return lives


def first_keys_unique(lives: Sequence[_Live]) -> bool:
    """Whether no two of ``lives`` share their first block key (a request without a full
    block has none), so no waiting request can ever have a prefix hit (``Engine._unwatched``).

    A hit is a run of leading blocks present in the cache, so it starts at the request's first
    block; a block is cached by the request that computes it, and a request computes blocks only
    once admitted, so a request that waits for the first time (``Engine._waiting``) hits a
    block another request computed. Stops at the first shared key: a trace with prefix reuse
    (a shared system prompt) shows one within its first requests."""
    seen: set[Hashable] = set()
    for live in lives:
        if live.keys:
            first = live.keys[0]
            if first in seen:
                return False
            seen.add(first)
    return True


def compiled_lives() -> Any:
    """``fairsim.sim._live_c`` bound to ``_Live`` (its slots' offsets: ``_live_c.bind``), or None
    where it is not built, ``FAIRSIM_PURE_PYTHON=1`` is set or ``_Live``'s slots are not the
    ones it writes: ``make_lives`` and ``Engine._request_table`` then run their Python loops."""
    global _LIVE_TWIN
    if os.environ.get(PURE_PYTHON_ENV) == "1":
        return None
    if _LIVE_TWIN is False:
        module = compiled_twin("fairsim.sim._live_c")
        _LIVE_TWIN = module if module is not None and module.bind(_Live) else None
    return _LIVE_TWIN


_LIVE_TWIN: Any = False  # compiled_lives' module once looked up (False: not yet)


def _table_columns(lives: list[_Live]) -> tuple[list, ...]:
    """The request table's columns read from ``lives``, in ``_live_c.TABLE_FIELDS``' order:
    ``req``, ``released_s``, ``first_token_s``, ``first_scheduled_s``, ``finish_s``,
    ``cached_at_admission``, ``first_scheduled_step``, ``finish_step``, ``preemptions``, then
    their requests' ``request_id``, ``arrival_time``, ``prompt_len``, ``session_id``, ``after``,
    ``labels``. One pass in C where ``compiled_lives`` is there and every state is an exact
    ``_Live`` (``_live_c.table_columns``); these comprehensions are the reference."""
    twin = compiled_lives()
    if twin is not None:
        try:
            return twin.table_columns(lives)
        except TypeError:  # a state of another class further on: the reference reads it
            pass
    reqs = [live.req for live in lives]
    return (reqs, [live.released_s for live in lives], [live.first_token_s for live in lives],
            [live.first_scheduled_s for live in lives], [live.finish_s for live in lives],
            [live.cached_at_admission for live in lives], [live.first_scheduled_step for live in lives],
            [live.finish_step for live in lives], [live.preemptions for live in lives],
            [r.request_id for r in reqs], [r.arrival_time for r in reqs], [r.prompt_len for r in reqs],
            [r.session_id for r in reqs], [r.after for r in reqs], [r.labels for r in reqs])


class Engine:
    """Chunked-prefill engine: its step loop is one SimPy process in a fleet, driven directly
    when it runs alone (see the module docstring).

    Args:
        requests: The trace, any order (sorted here by arrival, then ``request_id``).
        policy: Orders the waiting queue each step (``fairsim.policies``).
        profile: Cost model for step times.
        config: Engine settings.
        progress: Optional callable taking the number of requests finished in a step
            (e.g. ``tqdm.update``).
        replay: ``"open"`` (release at ``arrival_time``), ``"closed"`` (a request with ``after``
            is released when that request finished plus ``delay_s * think_scale``) or ``None``:
            closed where any request has ``after`` (``fairsim.sim.arrivals``).
        think_scale: Closed loop: multiplies ``delay_s`` (>= 0).
        fast_order: Use the policy's fast path (``incremental_order()``, see
            ``fairsim.policies.incremental``) when it has one: the waiting queue's order is kept
            across steps and read lazily up to the budget or the first misfit. False: call
            ``order()`` on every waiting snapshot each step (the reference; same decisions).
        fast_chunks: Prefill-only: run the steps in which the first running request has more
            than the budget left to compute (its chunk takes the whole budget, nobody can be
            admitted) in a tight loop (``_chunk_burst``; same tables). False: every step through
            ``_schedule`` (the reference).

    Raises:
        CapacityError, ValueError: See ``resolve_capacity``; duplicate request ids; a bad replay
            mode or think scale.
        SessionError: Closed loop: ``after`` names an unknown request, or the links form a cycle.
    """

    def __init__(
        self,
        requests: Sequence[Request],
        policy: Policy,
        profile: Profile,
        config: EngineConfig = EngineConfig(),
        progress: Callable[[int], Any] | None = None,
        *,
        replay: str | None = None,
        think_scale: float = 1.0,
        fast_order: bool = True,
        fast_chunks: bool = True,
        name: str | None = None,
        member: Any = None,
    ) -> None:
        ids = [r.request_id for r in requests]
        if len(set(ids)) != len(ids):
            raise ValueError("request ids must be unique within a trace")
        self.policy = policy
        self.policy_name = name if name is not None else policy_name(policy)
        self.profile = profile
        self.config = config
        self.block_size, self.kv_blocks = resolve_capacity(requests, config)
        # A policy that changes eviction (PEEK, RAGCache+PGDSF) hands the pool a strategy object;
        # without one the pool is the exact vLLM LRU BlockPool (DESIGN.md rule 2). Compiled where
        # it was built, PEEK's protection included (its hook declares the rule); other hooks get
        # the hooked pool, which subclasses the pure one (new_block_pool).
        hook = getattr(policy, "eviction_hook", None)
        self.pool = new_block_pool(self.kv_blocks, hook)
        self._burst_c, self._step_coefficients = compiled_burst(profile)
        self._protect = getattr(hook, "protect", None)
        self.progress = progress
        self.colocated = config.mode == "colocated"
        self.fast_chunks = fast_chunks and not self.colocated
        self.replay = resolve_replay(requests, replay)
        # Inter-token gaps (colocated): request index into self._all, gap seconds.
        self._gap_rows: list[int] = []
        self._gap_s: list[float] = []
        #: Fleet member (``fairsim.sim.fleet``): the fleet owns the requests and their arrival
        #: process, and hands this engine the ones routed to it; ``None`` for a lone engine.
        self._member = member
        if member is None:
            self._all = make_lives(requests, self.block_size, self.colocated)
            self._arrivals = Arrivals([(live.req, live) for live in self._all], self.replay, think_scale)
            if hook is not None and hasattr(hook, "attach"):
                hook.attach(self.block_size, [live.keys for live in self._all])
        else:
            self._all = []  # the requests routed here, in routing order (FleetMember.route)
            self._arrivals = member.arrivals
            if hook is not None and hasattr(hook, "attach"):
                hook.attach(self.block_size, member.all_keys)
        # The engine's per-request maps and sets are keyed by the ``_Live`` object itself (its
        # identity: ``_Live`` defines no ``__eq__``/``__hash__``), not by ``id(live)``: an id is a new
        # int per call, and its low four bits are the same for every state (aligned addresses),
        # so sets of ids probe colliding slots; an object's own hash is its address rotated.
        self._waiting: dict[_Live, _Live] = {}  # release order
        self._preempted: deque[_Live] = deque()  # front of waiting, vLLM prepend order
        self._running: list[_Live] = []  # admission order
        self._steps = self._burst_c.StepLog() if self._burst_c is not None else StepLog()
        # Which waiting requests may hit each key: a cached or evicted key invalidates only their
        # snapshots, so a step rebuilds few snapshots instead of one per waiting request.
        self._watchers: dict[Hashable, _Live | dict[_Live, _Live]] = {}  # key -> its watchers (``watching``)
        self.pool.on_key_change = self._key_changed
        self.pool.watched = self._watchers  # only keys some waiting request may hit call back
        self._skips_misfits = bool(getattr(policy, "skips_misfits", False))
        self._on_admitted = getattr(policy, "on_admitted", None)
        # Prefill tokens scheduled in all steps so far (policy contract rule 5; HRRN reads it).
        self.prefill_tokens = 0
        self._on_prefill_tokens = getattr(policy, "on_prefill_tokens", None)
        # Start-of-step snapshots, live -> snapshot, handed to on_admitted (policy contract).
        self._step_snaps: dict[_Live, QueuedRequest] = {}
        # Fast path: the policy's incremental order, fed with new and changed snapshots
        # (``_dirty``: waiting requests whose snapshot a cache event invalidated).
        self._inc = fast_path_of(policy, self.policy_name) if fast_order else None
        self._in_inc: set[_Live] = set()  # the waiting requests the fast path holds
        self._dirty: dict[_Live, _Live] = {}
        # PEEK's protected set (fast path): counts the events that can change the first
        # max_num_seqs of the order or their prefix hits (an arrival, a watched key's change, an
        # order re-key, an admission, a preemption); ``_admit_waiting`` rebuilds the set only
        # when it moved since the last build (``_protected_at``).
        self._order_changes = 0
        self._protected_at = -1
        # Kept up to date instead of rebuilt, where the hook takes changes (``update_runs``) and
        # the fast path says how its head changed (``head_changes``): live -> (live, its hit keys) for the
        # requests the set was built from, and the requests re-keyed since (their hits may differ).
        update = getattr(hook, "update_runs", None)
        self._protect_update = update if update is not None and hasattr(self._inc, "head_changes") else None
        self._protect_runs: dict[_Live, tuple[_Live, Sequence[Hashable]]] | None = None
        self._front_runs: list[Sequence[Hashable]] = []  # the preempted front's hits at the last build
        self._rekeyed: set[_Live] = set()
        #: Set by each ``_admit_waiting`` call: ``(request, its next key)`` when the first request
        #: it tried did not fit and nothing was admitted (the key after its prefix hit, ``NO_KEY``
        #: when the hit is at its cap), else None (``DecodeFastEngine`` skips later attempts).
        self.misfit: tuple[_Live, Hashable] | None = None
        #: Set by each ``_admit_waiting`` call that tried requests, where ``_record_misfits``
        #: (``DecodeFastEngine``, a policy that skips misfits): the next key of each request it
        #: tried that did not fit, in order; None when it tried none.
        self.misfits: list[Hashable] | None = None
        self._record_misfits = False
        # Lazy hits (a fast path with ``set_resolver``; fairsim.sim.lazy_hits): invalidated
        # snapshots are not rebuilt at the step's start but when the order reads them.
        # A policy whose order reads no prefix hit (``uses_prefix_hits = False``: FCFS, LOF) is
        # shown ``cached_len = 0``, as the live hook shows it, so no cache event can make its
        # snapshots stale: its requests watch no keys, nothing is re-snapshotted or re-keyed, and
        # lazy hits have nothing to do. Not with PEEK's protection (its staleness test counts the
        # changes of watched keys).
        self._hit_free = getattr(policy, "uses_prefix_hits", True) is False and self._protect is None
        # Where no two requests share their first block key (a trace without prefix ids, as
        # Azure's), no request waiting for its first admission can ever hit (``first_keys_unique``),
        # so its snapshot never goes stale: nothing is watched, and there are no lazy hits. A
        # preempted request waits apart (``_preempted``), is re-snapshotted at every step it can
        # be admitted in, and is never watched, so its hit on its own blocks is read as before.
        # Not with PEEK's protection (its staleness test counts the changes of watched keys) nor
        # in a fleet (an instance's requests are routed to it during the run).
        self._unwatched = self._hit_free or (self._protect is None and member is None
                                             and first_keys_unique(self._all))
        # The snapshot and watcher-map updates compiled where built (``fairsim/sim/_watch_c.pyx``;
        # the methods below are the reference, statement for statement); ``LazyHits`` takes its
        # ``key_changed`` and ``resolve`` too.
        watch_class = compiled_watch_class()
        self._watch_c = None if watch_class is None else watch_class(self, NO_KEY, QueuedRequest)
        if self._watch_c is not None:
            c = self._watch_c
            self._rewatch, self._drop, self._unwatch, self._snapshot, self._make_snapshot = (
                c.rewatch, c.drop, c.unwatch, c.snapshot, c.make_snapshot)
            self._checked = c.checked  # (``_watch_c.CheckedOrder``: the reference's items and errors)
        self._lazy = (LazyHits(self) if self._inc is not None and hasattr(self._inc, "set_resolver")
                      and not self._unwatched else None)
        # The end of each step compiled where ``_live_c`` is bound (``_live_c.Finisher``: the
        # states' slots read in C; ``_finish_batch`` below is the reference).
        lives_c = compiled_lives()
        if lives_c is not None:
            self._finish_batch = lives_c.Finisher(
                self, Engine._finish_batch, type(self)._request_finished is Engine._request_finished)
        # The SimPy environment of the fleet this engine is a member of (``fairsim.sim.fleet`` and
        # ``fairsim.sim.disaggregated`` set it); a lone engine has none (``run``).
        self.env = None

    # -- the step loop ---------------------------------------------------------------------------
    def run(self) -> SimResult:
        """Simulate until every request has finished; return the result tables."""
        if self.colocated:
            # The token-gap table needs numpy: imported before the clock starts, so the first
            # colocated run of a process does not count a one-off import as its simulation
            # (``wall_time_s``, bench's ``loop s``). Its tables are ``Columns``: pandas (0.25 s
            # of start-up) is imported only by a caller that asks for DataFrames.
            import numpy  # noqa: F401
        wall0 = time.perf_counter()
        # The trace and the per-request state live for the whole run: move them out of the
        # cyclic GC's generations, so its full collections do not rescan them (those scans grow
        # with the trace and made cost per request grow with its length).
        gc.freeze()
        try:
            # A lone engine is its own only process: its loop yields no SimPy event (a fleet
            # member's does, to the fleet's environment), so it runs to its end directly.
            for event in self._loop():
                raise EngineInvariantError(f"a lone engine's step loop yielded {event!r}")
            unfinished = [r.req.request_id for r in self._all if r.finish_s is None]
            if unfinished:
                raise EngineInvariantError(f"{len(unfinished)} requests never finished, first {unfinished[0]!r}")
            # The tables too are built before unfreezing: after it, every object of the run is in
            # the oldest generation, and building tables (a dict per request) would trigger full
            # collections over all of them.
            return SimResult(
                requests=self._request_table(),
                steps=self._step_table(),
                token_gaps=self._gap_columns() if self.colocated else None,
                policy=self.policy_name,
                kv_blocks=self.kv_blocks,
                block_size=self.block_size,
                wall_time_s=time.perf_counter() - wall0,
            )
        finally:
            gc.unfreeze()

    def _loop(self):
        # Attributes read every step are bound to locals (the loop runs once per step).
        # Most steps of a stable load are chunks of long prefills that admit nothing, so the
        # per-step work is kept to what such a step needs: no call for arrivals unless one is
        # due, a run of them in one ``_chunk_burst`` call (prefill-only), else one call to
        # schedule and one to finish the batch (``self._running`` is updated in place, so the
        # local stays valid), and no SimPy event: the clock is ``now``, advanced
        # as ``now + duration`` - the float SimPy's ``timeout(duration)`` would give; a fleet
        # member yields at each step and waits for its inbox when idle (``member.idle``), a
        # lone engine never yields (``run``; as ``DecodeFastEngine``).
        env = self.env
        arrivals = self._arrivals
        due = arrivals.heap  # (release_s, ...) queue, next release first: a step pops only when its head is due
        waiting = self._waiting
        preempted_q = self._preempted
        running = self._running
        pool = self.pool
        append_row = self._steps.add
        schedule = self._schedule
        finish_batch = self._finish_batch
        watch = self._watch
        timeout = env.timeout if env is not None else None
        progress = self.progress
        colocated = self.colocated
        step_time = (self.profile.step_time_colocated if colocated
                     else self.profile.step_time_from_sums)
        burst = self._chunk_burst if self.fast_chunks else None
        budget = self.config.budget_tokens
        # A fleet member (fairsim.sim.fleet) asks the router to route what is due before each
        # step, waits for its inbox when idle, and yields at every step so that the engines of
        # one SimPy environment advance together (the router sees each at the same time).
        member = self._member
        route_due = member.route_due if member is not None else None
        step = 0
        now = env.now if env is not None else 0.0
        # Preemptions of a step that scheduled nothing (below), counted in the next step's row.
        carried = 0
        while running or waiting or preempted_q or arrivals:
            if interrupt.REQUESTED:  # a Ctrl-C swallowed by a finaliser still stops the run
                raise KeyboardInterrupt
            if route_due is not None:
                route_due(now)
            if due and due[0][0] <= now:
                for released, _, live in arrivals.pop_due(now):
                    live.released_s = released
                    live.arrival_prefill = self.prefill_tokens
                    waiting[live] = live
                    watch(live)
            if member is not None and not (running or waiting or preempted_q):
                now = yield from member.idle(now)
                continue
            if not (running or waiting or preempted_q):
                nxt = arrivals.next_time()
                # Held turns wait for a request in the engine; none is, so one must be queued.
                if nxt is None:
                    raise EngineInvariantError(
                        f"at {now:.6f} s closed-loop turns are held but no request is queued or running")
                # A lone engine is its own only process: no event for the wait.
                now = now + (nxt - now)  # env.now after timeout(nxt - now)
                continue
            if burst is not None:
                live = running[0] if running else None
                # Most steps of a stable load: the first running request's chunk takes the whole
                # budget, so nothing else is scheduled or admitted (_schedule).
                if live is not None and live.req.prompt_len + live.generated - live.computed > budget:
                    first = step
                    now, step = burst(live, now, step)
                    if step != first:
                        if member is not None and not member.advance(now):
                            yield timeout(now - env.now)
                        continue
            num_waiting = len(waiting) + len(preempted_q)
            evictions0 = pool.num_evictions
            batch, preempted = schedule(now)
            if not batch:
                # Colocated: every running request was preempted by its own growth (vLLM then runs
                # a step with nothing scheduled and admits in the next one). It takes no time and
                # gets no row: its preemptions go into the next step's, at the same clock.
                if not preempted:
                    # A disaggregated prefill instance whose free blocks are pinned by finished
                    # prefills awaiting their KV transfer waits for a release, a decode instance
                    # whose blocks are taken by transfers in flight for a transfer's end
                    # (``fairsim.sim.disaggregated``); anywhere else this is a bug.
                    if member is not None and getattr(member, "pinned", 0):
                        now = yield from member.wait_for_blocks()
                        continue
                    raise EngineInvariantError(
                        f"step {step} at {now:.6f} s scheduled nothing although {num_waiting} requests "
                        f"wait and {len(running)} run")
                carried += preempted
                continue
            if carried:
                preempted += carried
                carried = 0
            new_tokens = 0
            pair_sum = 0.0
            decodes = 0
            if colocated:
                decode_ctx = 0
                for live, n, ctx in batch:
                    new_tokens += n
                    pair_sum += n * (ctx + n / 2)
                    if n == 1 and ctx >= live.req.prompt_len:  # one generated token: a decode
                        decodes += 1
                        decode_ctx += ctx
                duration = step_time(new_tokens, pair_sum, len(batch), decodes, decode_ctx)
            else:
                # Prefill-only: a scheduled request's context is below its prompt (a hit is capped
                # at L - 1 tokens), so nothing decodes.
                for live, n, ctx in batch:
                    new_tokens += n
                    pair_sum += n * (ctx + n / 2)
                duration = step_time(new_tokens, pair_sum, len(batch))
            self.prefill_tokens += new_tokens - decodes
            append_row(step, now, duration, new_tokens, decodes, len(batch), num_waiting, len(running),
                       pool.num_used, pool.num_cached, pool.num_evictions - evictions0, preempted)
            end = now + duration
            if member is not None and not member.advance(end):
                # The step's completions happen at its end, after the other engines' earlier events.
                yield timeout(end - env.now)
            finished = finish_batch(batch, step, now, end)
            if finished:
                running[:] = [r for r in running if r.finish_s is None]
                if progress is not None:
                    progress(finished)
            now = end
            step += 1
            if not step & FREEZE_EVERY_MASK:
                gc.freeze()

    def _chunk_burst(self, live: _Live, now: float, step: int) -> tuple[float, int]:
        """Run prefill-only steps whose batch is one full-budget chunk of ``live`` (the first
        running request); return the clock and the step number after them.

        Each is the step ``_schedule`` and ``_loop`` would run (same blocks allocated and cached
        in the same order, same step time from the same sums, same row): while ``live`` has more
        than the budget left to compute, its chunk takes the whole budget, so no other running
        request is scheduled, no waiting one can be admitted (the policy is not asked), and it
        finishes no prefill. Stops before a step at which an arrival is due (``_loop`` releases
        it; a fleet member also before the fleet's next queued release, ``fairsim.sim.fleet``),
        the last chunks (at most the budget left), or a Ctrl-C; and, defensively, before
        one that needs more blocks than are free (``_schedule`` would preempt; prefill-only
        admission reserves blocks for the whole remaining prompt, so this does not arise).
        The chunks are planned first (clock, blocks to allocate, blocks cached after each), then
        the pool does all of their work in one ``BlockPool.grow_chunks`` call (the per-chunk
        calls' effects, in their order) and the rows are appended at once.
        ``tests/test_chunk_burst.py`` compares the tables with ``fast_chunks=False``.
        """
        bs = self.block_size
        budget = self.config.budget_tokens
        step_time = self.profile.step_time_from_sums
        keys, blocks = live.keys, live.blocks
        n_keys = len(keys)
        total = live.req.prompt_len + live.generated
        computed = live.computed
        # Nothing is released, admitted or finished until the burst ends, so the arrival heaps'
        # heads stay put: the burst runs while the clock is below the earlier of them. A fleet
        # member also stops before the fleet's next release (fairsim.sim.fleet).
        due = self._arrivals.heap
        limit = due[0][0] if due else math.inf
        fleet_due = self._member.fleet.arrivals.heap if self._member is not None else None
        if fleet_due and fleet_due[0][0] < limit:
            limit = fleet_due[0][0]
        # The chunks first (clock, blocks to allocate, blocks cached after each), then the pool's
        # work for all of them in one call and the rows at once.
        start = live.num_cached_blocks
        if self._burst_c is not None:  # the compiled plan_chunks (same results)
            needs, stops, starts_s, durations, computed, now, stop = self._burst_c.plan_chunks(
                total, computed, budget, bs, len(blocks), self.pool.num_free, start, n_keys, now, limit,
                *self._step_coefficients, interrupt)
        else:
            needs, stops, starts_s, durations, computed, now, stop = plan_chunks(
                total, computed, budget, bs, len(blocks), self.pool.num_free, start, n_keys, now, limit,
                step_time)
        if not needs:
            return now, step
        used, cached, evicted = self.pool.grow_chunks(blocks, keys, start, needs, stops)
        live.computed = computed
        live.num_cached_blocks = stop
        self.prefill_tokens += budget * len(needs)
        num_waiting = len(self._waiting) + len(self._preempted)  # no release, no admission here
        num_running = len(self._running)
        after = step + len(needs)
        self._steps.add_burst(step, starts_s, durations, budget, num_waiting, num_running, used, cached, evicted)
        if step >> FREEZE_SHIFT != after >> FREEZE_SHIFT:  # crossed a multiple of the freeze period
            gc.freeze()
        return now, after

    def _schedule(self, now: float) -> tuple[list[tuple[_Live, int, int]], int]:
        """Pick this step's batch: ``[(request, new_tokens, context_tokens)]`` and #preemptions."""
        pool = self.pool
        bs = self.block_size
        config = self.config
        budget = config.budget_tokens
        max_seqs = config.max_num_seqs
        batch: list[tuple[_Live, int, int]] = []
        running = self._running
        preempted = 0
        # The policy orders the waiting queue at the START of the step, before running requests
        # take their chunks (which can evict or register blocks): vLLM's hook point is before
        # Scheduler.schedule(), so h is read from the cache as it was then. Found by the
        # decision-equivalence check (LPM/Fairway orders differed when a running chunk evicted).
        # Skip the order when no waiting request can be admitted this step (running chunks take
        # the whole budget, or max_num_seqs is reached): the order could not change a decision,
        # and long queues make it the simulator's hot spot. PEEK's block protection is refreshed
        # from the order only in steps that can admit too (_admit_waiting is not called).
        remaining = 0
        for r in running:
            remaining += r.req.prompt_len + r.generated - r.computed
            if remaining >= budget:
                break  # the running chunks take the whole budget: the rest cannot change that
        can_admit = remaining < budget and len(running) < max_seqs and bool(self._waiting or self._preempted)
        if can_admit:
            ordered = self._order_waiting(now)
            if self._on_admitted is not None:
                # Re-admitted preempted requests get start-of-step snapshots too (policy
                # contract); their snapshot is rebuilt, since their keys are not watched while
                # preempted.
                for live in self._preempted:
                    live.snap = None
                    self._step_snaps[live] = self._snapshot(live)
        for live in running:
            computed = live.computed
            n = live.req.prompt_len + live.generated - computed
            if n > budget:
                n = budget
            end = computed + n
            need = -(-end // bs) - len(live.blocks)  # blocks_for(end): a decode mostly needs 0
            if need > 0:
                victim = None
                while need > pool.num_free:
                    # vLLM preempts the latest-admitted running request (Scheduler.schedule).
                    victim = running.pop()
                    self._preempt(victim)
                    preempted += 1
                    if victim is live:
                        break
                if victim is live:
                    break
                live.blocks.extend(pool.allocate(need))
            full = end // bs
            start = live.num_cached_blocks
            if full > start < len(live.keys):  # a block became full: _cache_blocks inlined
                keys = live.keys
                if full > len(keys):
                    full = len(keys)
                pool.cache_blocks(live.blocks, keys, start, full)
                live.num_cached_blocks = full
            batch.append((live, n, computed))
            budget -= n
            if budget <= 0:
                break
        if preempted:
            return batch, preempted  # vLLM admits no waiting request in a step that preempted
        if can_admit and budget > 0:
            self._admit_waiting(now, budget, batch, ordered)
            if self._lazy is not None:
                self._lazy.end_step()
        return batch, 0

    def _order_waiting(self, now: float) -> list[_Live] | Iterator[_Live]:
        """The waiting requests (not preempted ones) in the policy's order, from step-start snapshots.

        With the policy's fast path (``self._inc``) an iterator read lazily by ``_admit_waiting``,
        else a list."""
        if not self._waiting:
            return []
        if self._on_prefill_tokens is not None:
            self._on_prefill_tokens(self.prefill_tokens)
        if self._inc is not None:
            return self._fast_order(now)
        snapshots = [self._snapshot(live) for live in self._waiting.values()]
        # (the policy gets a copy: one that pops from or clears the list it was given would
        # otherwise pass the check against that same list, dropping requests unnoticed)
        ordered = check_permutation(snapshots, self.policy.order(list(snapshots), now), self.policy_name)
        if self._on_admitted is not None:
            self._step_snaps = {q.handle: q for q in snapshots}
        limit = getattr(self.policy, "admission_limit", None)
        if limit is not None:
            ordered = ordered[:checked_admission_limit(limit, self.policy_name)]
        return [q.handle for q in ordered]

    def _fast_order(self, now: float) -> Iterator[_Live]:
        """Sync the fast path with this step's snapshots, then read its order lazily."""
        inc, held, waiting = self._inc, self._in_inc, self._waiting
        if self._lazy is not None:
            self._lazy.start_step()
        elif self._dirty:
            self._order_changes += 1
            if self._protect_update is not None:
                self._rekeyed.update(self._dirty)
            for key, live in self._dirty.items():
                if key in held and key in waiting:
                    inc.add(self._snapshot(live))
            self._dirty = {}
        # Newly released requests are at the end of ``waiting`` (release order); ``held`` is a
        # subset of its keys (a request leaves both at admission), so there are some only while
        # it is the smaller (most ordering steps release none: no scan then).
        if len(held) != len(waiting):
            new = []
            for key in reversed(waiting):
                if key in held:
                    break
                new.append(waiting[key])
            for live in reversed(new):
                inc.add(self._snapshot(live))
                held.add(live)
            if new:
                self._order_changes += 1
        if self._on_admitted is not None:  # (read by _admit_waiting for on_admitted only)
            self._step_snaps = {}
        ordered = self._checked(inc.iter_order(now), len(waiting))
        limit = getattr(self.policy, "admission_limit", None)
        return ordered if limit is None else islice(ordered, checked_admission_limit(limit, self.policy_name))

    def _checked(self, snaps: Iterator[QueuedRequest], n: int) -> Iterator[_Live]:
        """Lazy ``check_permutation``: each item a waiting snapshot, none twice, ``n`` in all.

        Runs once per item read (PEEK reads ``max_num_seqs`` items in every admitting step), so
        the lookups are bound once per order."""
        seen: set[_Live] = set()
        add = seen.add
        held = self._in_inc
        keep = self._step_snaps if self._on_admitted is not None else None
        for q in snaps:
            try:
                live = q.handle
            except AttributeError:  # not a snapshot: reported below as foreign
                live = None
            try:
                twice = live in seen
                foreign = not twice and live not in held
            except TypeError:  # an unhashable handle: no waiting request's
                twice, foreign = False, True
            # held: waiting _Live objects, so a held ``live`` has a ``snap``.
            if twice or foreign or live.snap is not q and live.snap is not None:
                name = self.policy_name
                raise PolicyContractError(
                    f"policy {name!r}: incremental_order() yielded "
                    f"{'a duplicate' if twice else 'a foreign or stale'} entry "
                    f"{getattr(q, 'request_id', q)!r}")
            add(live)
            if keep is not None:
                keep[live] = q
            yield live
        if len(seen) != n:
            name = self.policy_name
            raise PolicyContractError(
                f"policy {name!r}: incremental_order() yielded {len(seen)} of the {n} waiting requests")

    def _admit_waiting(self, now: float, budget: int, batch: list, ordered: list[_Live] | Iterator[_Live]) -> None:
        pool = self.pool
        bs = self.block_size
        max_seqs = self.config.max_num_seqs
        running = self._running
        self.misfit = None
        self.misfits = None
        if budget <= 0 or len(running) >= max_seqs:
            return
        if not (self._waiting or self._preempted):
            return
        misfits = self.misfits = [] if self._record_misfits else None
        # A copy of the preempted front: re-admitting one removes it from the deque.
        if not self._preempted:
            order = ordered  # the common case: no copy, no chain
        elif self._inc is not None:
            order = chain(list(self._preempted), ordered)
        else:
            order = list(self._preempted) + ordered
        if self._protect is not None and self._protect_stale():
            # PEEK: protect what the next max_num_seqs would hit.
            if self._protect_update is not None and self._lazy is None:
                front = list(islice(self._preempted, max_seqs))
                self._update_protected(front, max_seqs - len(front))
            else:
                rest = iter(order)
                head = list(islice(rest, max_seqs))
                order = chain(head, rest)
                self._protect([live.keys[:pool.count_prefix(live.keys, live.max_hit_blocks)]
                               for live in head])
                self._protect_runs = None  # the incremental state no longer matches the set
            self._protected_at = self._order_changes
        admitted: list[_Live] = []
        left: list[_Live] = []  # admitted from the waiting queue (fast path: removed after the loop)
        # The budget and max_num_seqs are checked after each admission, so a lazy order is not
        # read past the last request this step can admit.
        for live in order:
            if live.generated:
                # Resumed after a preemption: recompute prompt and generated tokens, hit capped at
                # num_tokens - 1 (vLLM: the request's num_tokens grew with its outputs).
                L = live.req.prompt_len + live.generated
                cap = min(len(live.keys), (L - 1) // bs)
                full_blocks = blocks_for(L, bs)
            else:
                L = live.req.prompt_len
                cap = live.max_hit_blocks
                full_blocks = live.num_prompt_blocks
            # The hit, the admission gate (the whole remaining prompt must fit:
            # scheduler_reserve_full_isl), the first chunk's blocks: BlockPool.admit.
            got = pool.admit(live.keys, cap, full_blocks, L, budget, bs)
            if got.__class__ is int:  # it does not fit; got: its hit in blocks
                if self._skips_misfits:
                    if misfits is not None:
                        misfits.append(live.keys[got] if got < cap else NO_KEY)
                    continue
                if not admitted:  # the first request misfits (DecodeFastEngine skips on it)
                    self.misfit = (live, live.keys[got] if got < cap else NO_KEY)
                break
            live.blocks, hit_blocks, n, live.num_cached_blocks = got
            h = hit_blocks * bs
            live.computed = h
            if live.cached_at_admission is None:
                live.cached_at_admission = h
            else:
                live.resume_cached += h
            self._order_changes += 1
            if live.preempted:
                live.preempted = False
                self._preempted.remove(live)
            else:
                del self._waiting[live]
                self._unwatch(live)
                left.append(live)
            running.append(live)
            batch.append((live, n, h))
            admitted.append(live)
            budget -= n
            if budget <= 0 or len(running) >= max_seqs:
                break
        if self._on_admitted is not None and admitted:
            snaps = self._step_snaps
            self._on_admitted([snaps[live] for live in admitted], now)
        if self._inc is not None:
            for live in left:
                self._inc.remove(live.req.request_id)
                self._in_inc.discard(live)

    def _update_protected(self, front: list[_Live], k: int) -> None:
        """PEEK's protected set for the first ``max_num_seqs`` of the admission order: the
        preempted requests in ``front``, then the fast path's first ``k``; changed instead of
        rebuilt: the hit keys of the requests that left the head or were re-keyed since the
        last build are taken out, those of the requests that entered it (or were re-keyed) put
        in (``update_runs`` keeps a count per key, so the set is the one a rebuild gives). Who
        entered and left comes from the fast path (``head_changes``: PEEK's ``peek_order.HeadHeapOrder``), at a cost
        that follows the changes, not ``max_num_seqs``. A waiting request's hit keys change
        only with its watched keys, which re-key it (``_rekeyed``, or ``_dirty`` when it changed
        after this step's order); a preempted request's keys are not watched, so its hit is
        read again at every build."""
        pool = self.pool
        runs = self._protect_runs
        first = runs is None  # the first build: head_changes gives the whole head as entered
        if first:
            runs = self._protect_runs = {}
        entered, left = self._inc.head_changes(k)
        removed = self._front_runs  # the last build's list, replaced below
        for q in left:
            removed.append(runs.pop(q.handle)[1])
        again = []
        for changed in (self._rekeyed, self._dirty) if self._dirty else (self._rekeyed,):
            for lid in changed:
                kept = runs.pop(lid, None)
                if kept is not None:
                    removed.append(kept[1])
                    again.append(kept[0])
        self._front_runs = [live.keys[:pool.count_prefix(live.keys, live.max_hit_blocks)] for live in front]
        added = list(self._front_runs)
        for live in chain(map(_handle_of, entered), again):
            run = live.keys[:pool.count_prefix(live.keys, live.max_hit_blocks)]
            runs[live] = (live, run)
            added.append(run)
        if first:
            self._protect(added)
        else:
            self._protect_update(removed, added)
        self._rekeyed = set()

    def _protect_stale(self) -> bool:
        """Whether PEEK's protected set must be rebuilt: always without the fast path, with lazy
        hits or with preempted requests at the front (their keys are not watched); else only
        when an event counted in ``_order_changes`` happened since the last build.

        Why that is exact: the set is the prefix-hit keys of the first ``max_num_seqs`` of the
        order. The fast path's order changes only by adds (arrivals, re-keyed snapshots) and
        removals (admissions), each counted. A waiting request's hit (``count_prefix``) changes
        only when one of its hit keys is evicted or the key after them is cached, and those are
        the keys it watches (``_rewatch``), whose change is counted (``_key_changed``); a
        request dirtied before the last build may watch too few keys until it is re-snapshotted,
        and that re-snapshot (at the next order, before any build) is counted too."""
        return (self._protected_at != self._order_changes or self._inc is None or self._lazy is not None
                or bool(self._preempted))

    def _snapshot(self, live: _Live) -> QueuedRequest:
        snap = live.snap
        if snap is None:
            h = 0 if self._hit_free else self.pool.count_prefix(live.keys, live.max_hit_blocks) * self.block_size
            snap = live.snap = self._make_snapshot(live, h, live.computed)
        return snap

    def _make_snapshot(self, live: _Live, h: int, computed: int) -> QueuedRequest:
        """The policy's view of ``live`` with a prefix hit of ``h`` tokens, ``computed`` done.

        A waiting request's watched keys follow the hit it shows (``_rewatch``; none for a
        policy shown no hits, ``_hit_free``, nor where no waiting request can hit,
        ``_unwatched``). The last
        snapshot built is given again when nothing in it changed (snapshots are immutable): under
        overload a shared block that is evicted and cached again drops the snapshots of every
        request that shares it, mostly to the same hit."""
        if live in self._waiting and not self._unwatched:
            self._rewatch(live, h // self.block_size)
        old = live.last_snap
        if (old is not None and old.cached_len == h and old.num_computed_tokens == computed
                and old.arrival_time == live.released_s
                and old.arrival_prefill_tokens == live.arrival_prefill):
            return old
        req = live.req
        snap = live.last_snap = QueuedRequest(
            req.request_id, live.released_s, req.prompt_len, h,
            max(1, req.prompt_len - h - computed), computed, live, live.keys,
            self.block_size, live.client, live.arrival_prefill, req.output_len,
        )
        return snap

    def _watch(self, live: _Live) -> None:
        """A request joined the waiting queue. Its keys are watched from its first snapshot on
        (``_rewatch``): before, no snapshot can go stale."""
        self._order_changes += 1
        live.watched = 0
        live.next_key = NO_KEY

    def _rewatch(self, live: _Live, hit_blocks: int) -> None:
        """Watch exactly the keys whose change can change a hit of ``hit_blocks`` leading blocks.

        The hit is the run of leading keys present in the cache (``BlockPool.count_prefix``, at
        most ``max_hit_blocks``), so it changes only when one of its own keys is evicted or the
        key right after it is cached: ``keys[:hit_blocks + 1]`` (capped at ``max_hit_blocks``).
        Keys further on cannot change it while that next key is missing; they are watched once a
        snapshot shows the longer hit. Under overload a waiting request's hit is mostly a few
        shared blocks, so this watches a few keys instead of its whole prompt (the watcher map
        and its updates were 10x the trace's size at ``--tile 10``). The snapshots
        invalidated are those whose hit changed, so the decisions are the same.
        """
        if hit_blocks < live.max_hit_blocks:
            w = hit_blocks + 1
            nk = live.keys[hit_blocks]
        else:
            w = live.max_hit_blocks
            nk = NO_KEY
        live.next_key = nk
        old = live.watched
        if live.partial:
            # Lazy hits dropped some of its keys while it had no snapshot: watch keys[:w] anew
            # (re-adding those still there changes nothing).
            live.partial = False
            if old > w:
                self._drop(live, live.keys[w:old])
            old = live.watched = 0
        if w == old:
            return
        if w > old:
            watchers = self._watchers
            get = watchers.get
            lid = live
            for key in live.keys[old:w]:
                bucket = get(key)
                if bucket is None:
                    watchers[key] = live  # a lone watcher is the bucket (``watching``)
                elif type(bucket) is dict:
                    bucket[lid] = live
                elif bucket is not live:
                    watchers[key] = {bucket: bucket, lid: live}
        else:
            self._drop(live, live.keys[w:old])
        live.watched = w

    def _drop(self, live: _Live, keys: Sequence[Hashable]) -> None:
        """Stop watching ``keys`` for ``live`` (where it is watched: a ``partial`` request is
        not on all of them); a key nobody watches leaves the map."""
        watchers = self._watchers
        lid = live
        for key in keys:
            bucket = watchers.get(key)
            if bucket is None:
                continue
            if type(bucket) is dict:
                if bucket.pop(lid, None) is not None and not bucket:
                    del watchers[key]
            elif bucket is lid:
                del watchers[key]

    def _unwatch(self, live: _Live) -> None:
        """The request left the waiting queue (admitted): drop its watched keys."""
        self._drop(live, live.keys[: live.watched])
        live.partial = False
        live.watched = 0
        live.next_key = NO_KEY

    def _key_changed(self, key: Hashable) -> None:
        """A key some waiting request may hit changed hittability (``BlockPool.watched`` filters
        the others out): its watchers' snapshots are rebuilt at the next order. With lazy hits
        ``LazyHits.key_changed`` takes this callback instead (``fairsim.sim.lazy_hits``)."""
        bucket = self._watchers[key]
        self._order_changes += 1
        if type(bucket) is not dict:  # a lone watcher (``watching``)
            bucket.snap = None
            if self._inc is not None:
                self._dirty[bucket] = bucket
            return
        for live in bucket.values():
            live.snap = None
        if self._inc is not None:
            self._dirty.update(bucket)

    def _cache_blocks(self, live: _Live, num_tokens: int) -> None:
        """Register newly full blocks with known content (vLLM ``cache_blocks`` at scheduling)."""
        full = num_tokens // self.block_size
        keys = live.keys
        if full > len(keys):
            full = len(keys)
        start = live.num_cached_blocks
        if full > start:
            self.pool.cache_blocks(live.blocks, keys, start, full)
            live.num_cached_blocks = full

    def _preempt(self, live: _Live) -> None:
        self.pool.free(reversed(live.blocks))
        live.discarded += live.computed
        live.blocks = []
        live.num_cached_blocks = 0
        live.computed = 0
        live.preemptions += 1
        live.preempted = True
        live.snap = None
        self._order_changes += 1
        self._preempted.appendleft(live)

    def _finish_batch(self, batch: list, step: int, start: float, end: float) -> int:
        """Step ``step`` ran from ``start`` to ``end`` (s): advance each scheduled request, sample
        the tokens due, finish requests; returns how many finished (still in ``_running``)."""
        finished = 0
        for live, n, _ in batch:
            if live.first_scheduled_s is None:
                live.first_scheduled_s = start
                live.first_scheduled_step = step
            live.computed += n
            if live.computed < live.req.prompt_len + live.generated:
                continue  # a chunk of a longer prefill: no token sampled
            # All tokens computed: one token is sampled at the step's end.
            live.generated += 1
            if live.first_token_s is None:
                live.first_token_s = end
            else:
                self._record_gap(live, step, end - live.last_token_s)
            live.last_token_s = end
            if live.generated >= live.out_len:
                self._request_finished(live, end, step)
                # Deepest block first, so the tail is evicted before the shared prefix.
                self.pool.free(reversed(live.blocks))
                live.blocks = []
                finished += 1
        return finished

    def _record_gap(self, live: _Live, step: int, gap_s: float) -> None:
        """An inter-token gap of ``live`` (s) ending at step ``step``'s end (colocated mode)."""
        self._gap_rows.append(live.index)
        self._gap_s.append(gap_s)

    def _request_finished(self, live: _Live, t: float, step: int) -> None:
        """``live`` produced its last token at ``t`` (s), in step ``step``: record it and release
        its closed-loop followers (``Arrivals.finished``). Prefill-only mode calls it at the end
        of the request's last prefill step; a decoding engine calls it at its last decode step."""
        live.finish_s = t
        live.finish_step = step
        self._arrivals.finished(live.req.request_id, t)

    # -- result tables ---------------------------------------------------------------------------
    def _request_table(self) -> Columns:
        """One row per request (``SimResult.requests``), built column by column (no per-row
        dicts: a 12,000-request run built 12,000 of them only to take them apart)."""
        lives = self._all
        if not lives:
            return Columns({})
        (reqs, released, first_token, first_sched, finish, cached, first_step, finish_step, preemptions,
         request_id, arrival, prompt, session, after, labels) = _table_columns(lives)
        cols: dict[str, list] = {
            "request_id": request_id,
            "arrival_s": arrival,
            "prompt_tokens": prompt,
            "cached_tokens": cached,
            "first_scheduled_s": first_sched,
            "first_token_s": first_token,
            "ttft_s": [t - rel for t, rel in zip(first_token, released)],
            "finish_s": finish,
            "queue_delay_s": [t - rel for t, rel in zip(first_sched, released)],
            "first_scheduled_step": first_step,
            "finish_step": finish_step,
            "preemptions": preemptions,
            "released_s": released,
            "session_id": session,
            "after": after,
        }
        if self.colocated:
            cols.update(decode_request_columns(lives, released))
        # Labels starting with "_" are private to generators (e.g. raw hash ids), not metrics.
        # A label named like a result column is written as trace_NAME (fairsim/sim/label_columns.py).
        label_keys = sorted({k for d in labels if d for k in d if not k.startswith("_")})
        for k, column in label_columns(label_keys):
            cols[column] = [r.labels.get(k) for r in reqs]
        return Columns(cols)

    def _step_table(self) -> Columns:
        return Columns.from_log(STEP_COLUMNS, self._steps.column, len(self._steps))


    def _gap_table(self) -> pd.DataFrame:
        """``SimResult.token_gaps`` as a DataFrame (a fleet's or disaggregated run's parts)."""
        return self._gap_columns().to_pandas()

    def _gap_columns(self) -> Columns:
        """The token-gap table (``SimResult.token_gaps``) as ``Columns``: ``request_row`` (int64)
        and ``itl_s`` (float64) arrays, grouped by request row, each request's gaps in token order."""
        import numpy as np

        rows = np.asarray(self._gap_rows, dtype=np.int64)
        order = np.argsort(rows, kind="stable")
        return Columns({
            "request_row": rows[order],
            "itl_s": np.asarray(self._gap_s, dtype=np.float64)[order],
        })
