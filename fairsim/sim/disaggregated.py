"""Disaggregated prefill and decode (``--mode disaggregated``): ``P`` prefill engines behind a
router, ``D`` decode engines, and the KV moving between them over a link.

Built from the existing parts, not forked from them:

- **Prefill side**: a ``Fleet`` (``fairsim.sim.fleet``) of ``P`` prefill-only engines behind the
  router, each with its own ordering-policy object: the ordering under study runs here, as on the
  paper's prefill node. A request's prefill ends with its last prompt chunk (that engine's one
  output token is not the user's: vLLM's disaggregated proxy sends the prefill with
  ``max_tokens=1`` and streams the decode instance's tokens, so does fairsim).
- **KV pinned on the prefill side**: when the prefill ends, its blocks are pinned (one more
  reference, ``BlockPool.touch``) so the engine's own free leaves them held; they are freed, deepest
  first, when the transfer ends. vLLM's ``NixlConnector`` does the same (``request_finished``
  returns ``delay_free_blocks``; the decode side reads the blocks and notifies, then the prefill
  side frees them). A prefill engine whose queue head does not fit because of pinned blocks waits
  for a release (``PrefillMember.wait_for_blocks``).
- **Decode instance**: chosen when the prefill ends, among the ``D`` decode engines, as the one
  with the fewest active KV blocks (blocks in use plus the prompt blocks of requests handed to it
  and not yet given blocks); ties: the lowest index. That is Dynamo's decode routing in
  disaggregated mode (its KV cost with ``overlap_score_weight = 0``: active blocks only; docs
  "Disaggregated Serving"); vLLM's example proxies go round robin. Choosing at prefill end, and
  the tie rule, are ours.
- **Decode admission** (vLLM ``Scheduler.schedule`` with a KV connector, ``WAITING_FOR_REMOTE_KVS``):
  at a decode engine's step start, handed-over requests are given blocks in hand-over order
  (first in, first out) while ``max_num_seqs`` leaves room and the whole prompt fits
  (``blocks_for(L)`` minus its local prefix hit, the engine's own admission gate); the first that
  does not fit stops the rest (head of line) and they are **held**: their KV stays pinned on the
  prefill side. A request given blocks starts its transfer then: ``L - h`` tokens (``h`` = its
  local prefix hit on the decode engine, whose blocks NIXL does not transfer), taking
  ``(L - h) x kv_bytes_per_token / link bandwidth`` seconds (``KVLink``). At the first step start
  after the transfer it joins the running set (if ``max_num_seqs`` allows) with ``L - 1`` tokens
  computed: vLLM's ``_update_waiting_for_remote_kv`` sets ``num_computed_tokens = L - 1`` when the
  whole prompt was loaded, so the first decode-side step computes the last prompt token and samples
  the first token. From there the decode engine is the colocated ``Engine`` (vLLM's rules:
  decodes one token a step, blocks grow, the newest running request is preempted when the pool is
  short and later recomputes its prompt and tokens locally, as vLLM does after a preemption).
  Decode engines order their (preempted) waiting requests first come, first served (vLLM's
  default).
- **User-facing times**: TTFT = the decode engine's first token - release (arrival in open
  loop), so TTFT = prefill wait and compute + held + transfer + the first decode-side step. TPOT,
  ITL and E2E are the decode engine's; a closed-loop follower is released when the request's last
  token is produced.

The cost of a link is one number per run: no contention between transfers sharing a link and no
per-layer overlap with compute (vLLM transfers whole blocks after the prefill; layer-wise
pipelining is not modelled). The prefill side's pinned blocks are held for the hold and the
transfer.
"""

from __future__ import annotations

import heapq
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from fairsim.costmodel import Profile
from fairsim.gcpause import collect_before_run
from fairsim.errors import CapacityError, EngineInvariantError
from fairsim.policies.base import Policy
from fairsim.routers.base import Router
from fairsim.sim.capacity import resolve_capacity
from fairsim.sim.config import EngineConfig
from fairsim.sim.engine import Engine, _Live, decode_request_columns, make_lives
from fairsim.sim.fleet import Fleet, FleetMember, FleetResult, run_reporting_policy_failure
from fairsim.sim.keys import blocks_for
from fairsim.sim.result import Columns, SimResult
from fairsim.types import Request

DEFAULT_KV_LINK_GBPS = 400.0
"""Default KV link bandwidth, Gbit/s: one 400 Gb/s NDR InfiniBand port (ConnectX-7) per GPU, as in
NVIDIA's DGX H100/H200 systems (eight ConnectX-7 400 Gb/s ports for eight GPUs). A profile's
``kv_bytes_per_token`` is per GPU (divided by tensor parallelism), and each GPU sends its own
shard over its own port, so the per-GPU bytes over one port's bandwidth is the transfer time."""


MAX_TRANSFER_S_PER_TOKEN = 1.0
"""The slowest link the commands take, seconds per token of KV (1,000 s per 1,000 tokens:
131,072 bytes per token at 1 Mbit/s). Real links are about a thousand times faster; beyond it a
long trace's transfers push the clock to where a float no longer resolves a step."""


@dataclass(frozen=True)
class KVLink:
    """The link a request's KV crosses from a prefill to a decode engine.

    Attributes:
        bytes_per_token: KV bytes per token per GPU (``2 x layers x kv_heads x head_dim x dtype
            bytes / TP``; a profile's ``kv_capacity.kv_bytes_per_token``), > 0.
        gbps: Bandwidth, Gbit/s (1e9 bits per second), > 0.

    Raises:
        ValueError: A value that is not a finite number > 0.
    """

    bytes_per_token: float
    gbps: float = DEFAULT_KV_LINK_GBPS

    def __post_init__(self) -> None:
        for name in ("bytes_per_token", "gbps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not (isinstance(value, (int, float)) and 0 < value < float("inf")):
                raise ValueError(f"{name}={value!r}: need a finite number > 0")

    def seconds(self, tokens: int) -> float:
        """Transfer time of ``tokens`` tokens' KV, seconds: ``tokens x bytes x 8 / (gbps x 1e9)``."""
        return tokens * self.bytes_per_token * 8.0 / (self.gbps * 1e9)


@dataclass(frozen=True)
class DisaggregatedResult(FleetResult):
    """A disaggregated run: ``requests`` one row per request in trace order (prefill-side columns,
    ``instance`` = the prefill instance, and the decode-side columns named in
    ``DECODE_REQUEST_COLUMNS``; ``ttft_s``/``first_token_s``/``finish_s``/``e2e_s``/``tpot_s`` are
    the decode side's, where the user sees them); ``steps`` every prefill then every decode
    instance's steps with ``instance``, ``role`` (``prefill``/``decode``), ``held`` and
    ``transferring``; ``token_gaps`` the decode side's; ``instances`` the prefill instances' own
    results and ``decode_instances`` the decode instances'."""

    decode_instances: tuple[SimResult, ...] = ()
    link: KVLink | None = None


#: Columns the disaggregated mode adds to the request table (after the fleet's).
DECODE_REQUEST_COLUMNS = ("decode_instance", "prefill_done_s", "kv_alloc_s", "held_s", "decode_held", "transfer_tokens",
                          "transfer_s", "kv_ready_s", "decode_cached_tokens", "decode_preemptions")


class PrefillMember(FleetMember):
    """A prefill engine's view of the fleet, which can also wait for its pinned blocks.

    Attributes:
        pinned: Requests whose prefill ended here and whose blocks are still pinned (held or
            transferring); ``Engine._loop`` waits (``wait_for_blocks``) instead of failing when
            it can schedule nothing while some are.
    """

    def __init__(self, fleet: Fleet, index: int) -> None:
        super().__init__(fleet, index)
        self.pinned = 0

    def wait_for_blocks(self):
        """Wait until pinned blocks are freed or a request is routed here; the clock then."""
        env = self.fleet.env
        self.wake = env.event()
        yield self.wake
        self.wake = None
        return env.now


class DecodeMember:
    """What a decode ``Engine`` reads of the disaggregated fleet (its ``member``): its own arrival
    process (requests never enter its waiting queue: ``heap`` stays empty), the hand-over queue
    (``held``), the transfers in flight (``transfers``) and the transferred requests waiting for a
    ``max_num_seqs`` slot (``ready``). ``route_due`` runs at each of its step starts."""

    def __init__(self, fleet: DisaggregatedFleet, index: int) -> None:
        self.fleet = fleet
        self.index = index
        self.arrivals = self
        self.all_keys = fleet.decode_keys
        self.heap: list = []  # the engine's release heap: always empty (see route_due)
        self.held: deque[_Live] = deque()
        self.marked = 0  # leading held requests already recorded as refused (fleet.refused)
        self.held_blocks = 0  # prompt blocks of the held requests (the router's active blocks)
        self.transfers: list[tuple[float, int, _Live]] = []  # (ready_s, row, live) min-heap
        self.ready: deque[_Live] = deque()
        self.wake: Any = None
        self.engine: Engine | None = None

    # -- the arrival-process interface ``Engine._loop`` reads ------------------------------------
    def __len__(self) -> int:
        return len(self.held) + len(self.transfers) + len(self.ready) + self.fleet.not_handed_over

    def next_time(self) -> float | None:  # used by a lone engine only
        return None

    def pop_due(self, now: float) -> list:
        return []

    def finished(self, request_id: str, t: float) -> None:
        self.fleet.decode_finished(request_id, t)

    # -- the fleet-member interface ---------------------------------------------------------------
    #: Skip a step's timeout when it would be the fleet's next event anyway (as a prefill member).
    advance = FleetMember.advance

    def route_due(self, now: float) -> None:
        """At a step start ``now`` (s): transferred requests join the running set, then held
        requests are given blocks and start their transfers (module docstring)."""
        engine = self.engine
        running = engine._running
        max_seqs = engine.config.max_num_seqs
        transfers = self.transfers
        while transfers and transfers[0][0] <= now:
            self.ready.append(heapq.heappop(transfers)[2])
        while self.ready and len(running) < max_seqs:
            live = self.ready.popleft()
            L = live.req.prompt_len
            # vLLM caches the loaded blocks, then recomputes the last prompt token for its logits.
            engine._cache_blocks(live, L)
            live.computed = L - 1
            running.append(live)
        pool = engine.pool
        bs = engine.block_size
        while self.held and len(running) < max_seqs:
            live = self.held[0]
            hit = pool.lookup_prefix(live.keys, live.max_hit_blocks)
            if live.num_prompt_blocks - len(hit) + pool.num_evictable(hit) > pool.num_free:
                break  # head of line: it and those behind it stay held
            self.held.popleft()
            self.marked = max(0, self.marked - 1)
            self.held_blocks -= live.num_prompt_blocks
            pool.touch(hit)
            live.blocks = hit + pool.allocate(live.num_prompt_blocks - len(hit))
            live.num_cached_blocks = len(hit)
            h = len(hit) * bs
            live.cached_at_admission = h
            self.fleet.start_transfer(self, live, h, now)
        held = self.held
        for i in range(self.marked, len(held)):  # refused at this step start: no blocks or no slot
            self.fleet.refused[held[i].index] = True
        self.marked = len(held)

    @property
    def pinned(self) -> int:
        """Requests given blocks here whose KV is still moving: their blocks are taken, so a
        preempted request that does not fit waits for a transfer's end (``wait_for_blocks``)
        instead of ``Engine._loop`` reporting a step that scheduled nothing as a bug."""
        return len(self.transfers)

    def wait_for_blocks(self):
        """Nothing can be scheduled while transfers hold blocks: wait for the next transfer's end
        (its request then runs and frees blocks when it finishes) or a hand-over; the clock then."""
        return self.idle(self.fleet.env.now)

    def idle(self, now: float):
        """Nothing runs here: wait for a hand-over or the next transfer's end; the clock then."""
        env = self.fleet.env
        wake = self.wake = env.event()
        if not self.transfers:
            yield wake
            self.wake = None
            return env.now
        ready = self.transfers[0][0]
        yield wake | env.timeout(max(0.0, ready - env.now))
        self.wake = None
        # At the transfer's end: its own time (env.now + (ready - env.now) may round below it).
        return env.now if wake.triggered else ready


class DisaggregatedFleet(Fleet):
    """``P`` prefill engines behind ``router`` and ``D`` decode engines (module docstring).

    Args:
        requests: The trace.
        policies: One fresh ordering-policy object per prefill instance.
        router: The prefill side's router (``fairsim.routers.make_router``).
        decode_policies: One fresh policy object per decode instance (FCFS: it orders only
            preempted requests, which go first anyway).
        profile: Cost model of both sides.
        link: The KV link (``KVLink``).
        config: Engine settings of both sides, any mode (the prefill side runs it prefill-only,
            the decode side colocated); its KV capacity is the prefill side's, resolved once for
            the whole trace by ``prefill_capacity_mode``'s rule.
        decode_kv_blocks: The decode engines' own capacity in blocks (of ``config``'s block
            size); default: the prefill side's.
        replay, think_scale, name, router_name: As ``Fleet``'s.

    Raises:
        CapacityError: A request's prompt and output do not fit one decode engine's KV cache.
        As ``Fleet``.
    """

    member_class = PrefillMember

    def __init__(self, requests: Sequence[Request], policies: Sequence[Policy], router: Router,
                 decode_policies: Sequence[Policy], profile: Profile, link: KVLink,
                 config: EngineConfig = EngineConfig(), *, decode_kv_blocks: int | None = None,
                 replay: str | None = None, think_scale: float = 1.0, name: str | None = None,
                 router_name: str | None = None) -> None:
        block_size, kv_blocks = resolve_capacity(requests, replace(config, mode=prefill_capacity_mode(
            config, decode_kv_blocks)))
        prefill = replace(config, mode="prefill-only", block_size=block_size, kv_blocks=kv_blocks,
                          kv_tokens=None, kv_fraction=None)
        decode = replace(prefill, mode="colocated", kv_blocks=decode_kv_blocks or kv_blocks)
        check_decode_fits(requests, block_size, decode.kv_blocks)
        super().__init__(requests, policies, router, profile, prefill, replay=replay, think_scale=think_scale,
                         name=name, router_name=router_name)
        self.link = link
        self.decode_config = decode
        self.decode_lives = make_lives(requests, block_size, True)
        self.decode_keys = [live.keys for live in self.decode_lives]
        self.not_handed_over = len(self.decode_lives)
        self.decode_members = [DecodeMember(self, j) for j in range(len(decode_policies))]
        self.decode_engines = [Engine((), policy, profile, decode, replay=self.replay, fast_order=False,
                                      name=name, member=member)
                               for policy, member in zip(decode_policies, self.decode_members)]
        for engine, member in zip(self.decode_engines, self.decode_members):
            engine.env = self.env
            member.engine = engine
        n = len(self.lives)
        self.decode_of = [-1] * n
        self.prefill_done = [float("nan")] * n
        self.kv_alloc = [float("nan")] * n
        self.kv_ready = [float("nan")] * n
        self.transfer_tokens = [0] * n
        self.refused = [False] * n  # held at a decode step start for want of blocks or a slot
        self._pins: dict[int, tuple[int, list[int]]] = {}  # row -> (prefill instance, blocks)

    # -- the hand-over ---------------------------------------------------------------------------
    def finished(self, k: int, request_id: str, t: float) -> None:
        """Prefill instance ``k`` finished ``request_id``'s prefill at ``t`` (called before the
        engine frees its blocks): pin them, leave the router's counts, hand it to a decode engine."""
        live = self._by_id[request_id]
        self._unroute(k, live, t)
        engine = self.engines[k]
        engine.pool.touch(live.blocks)  # one more reference: the engine's free leaves them held
        self._pins[live.index] = (k, list(live.blocks))
        self.members[k].pinned += 1
        self.prefill_done[live.index] = t
        self._hand_over(self.decode_lives[live.index])

    def _hand_over(self, live: _Live) -> None:
        """Queue ``live`` on the decode engine with the fewest active blocks (lowest index on ties)."""
        members = self.decode_members
        j = min(range(len(members)), key=lambda j: (members[j].engine.pool.num_used + members[j].held_blocks, j))
        member = members[j]
        self.decode_of[live.index] = j
        self.not_handed_over -= 1
        live.released_s = self.env.now
        member.engine._all.append(live)
        member.held.append(live)
        member.held_blocks += live.num_prompt_blocks
        if member.wake is not None and not member.wake.triggered:
            member.wake.succeed()

    def start_transfer(self, member: DecodeMember, live: _Live, cached: int, now: float) -> None:
        """``live`` got its blocks on ``member``'s engine at ``now``: its ``L - cached`` tokens'
        KV moves; when it ends the prefill side frees its pinned blocks."""
        i = live.index
        tokens = live.req.prompt_len - cached
        ready = now + self.link.seconds(tokens)
        self.kv_alloc[i] = now
        self.kv_ready[i] = ready
        self.transfer_tokens[i] = tokens
        heapq.heappush(member.transfers, (ready, i, live))
        self.env.timeout(max(0.0, ready - self.env.now)).callbacks.append(lambda _ev, i=i: self._unpin(i))

    def _unpin(self, i: int) -> None:
        """The transfer of row ``i`` ended: free its pinned prefill blocks (deepest first)."""
        k, blocks = self._pins.pop(i)
        self.engines[k].pool.free(reversed(blocks))
        member = self.members[k]
        member.pinned -= 1
        if member.wake is not None and not member.wake.triggered:
            member.wake.succeed()

    def decode_finished(self, request_id: str, t: float) -> None:
        """The request's last token at ``t``: release its closed-loop followers."""
        self.arrivals.finished(request_id, t)
        self._schedule_wake()

    # -- the run ---------------------------------------------------------------------------------
    def run(self) -> DisaggregatedResult:
        """Simulate until every request has its last token; the tables (``DisaggregatedResult``)."""
        import pandas  # noqa: F401  (the token-gap table; not inside the timed run)

        import gc

        wall0 = time.perf_counter()
        gc.freeze()
        try:
            self._schedule_wake()
            for engine in self.engines + self.decode_engines:
                self.env.process(engine._loop())
            self.env.run()
            unfinished = [live.req.request_id for live in self.decode_lives if live.finish_s is None]
            if unfinished:
                raise EngineInvariantError(f"{len(unfinished)} requests never finished decoding, "
                                           f"first {unfinished[0]!r}")
            if self._pins:
                raise EngineInvariantError(f"{len(self._pins)} prefill KV pins never released")
            return self._disaggregated_result(time.perf_counter() - wall0)
        finally:
            gc.unfreeze()

    def _disaggregated_result(self, wall_s: float) -> DisaggregatedResult:
        prefill = self._result(wall_s)
        decode_parts = []
        for engine in self.decode_engines:
            engine._all.sort(key=lambda live: live.index)
            decode_parts.append(SimResult(requests=engine._request_table(), steps=engine._step_table(),
                                          policy=engine.policy_name, kv_blocks=engine.kv_blocks,
                                          block_size=engine.block_size, wall_time_s=wall_s))
        rows = np.asarray([r for e in self.decode_engines for r in e._gap_rows], dtype=np.int64)
        gaps_s = np.asarray([g for e in self.decode_engines for g in e._gap_s], dtype=np.float64)
        order = np.argsort(rows, kind="stable")
        import pandas as pd

        gaps = pd.DataFrame({"request_row": rows[order], "itl_s": gaps_s[order]})
        return DisaggregatedResult(
            requests=self._requests_table(prefill.columns("requests")), steps=self._steps_table(prefill, decode_parts),
            token_gaps=gaps, policy=prefill.policy, kv_blocks=self.kv_blocks, block_size=self.block_size,
            wall_time_s=wall_s, instances=prefill.instances, router=self.router_name,
            decode_instances=tuple(decode_parts), link=self.link)

    def _requests_table(self, prefill: Columns) -> Columns:
        """The prefill fleet's rows with the decode side's times (module docstring)."""
        cols = dict(prefill.columns)
        lives = self.decode_lives
        released = cols["released_s"]
        first = [live.first_token_s for live in lives]
        finish = [live.finish_s for live in lives]
        cols["first_token_s"] = first
        cols["ttft_s"] = [f - r for f, r in zip(first, released)]
        cols["finish_s"] = finish
        cols["finish_step"] = [live.finish_step for live in lives]  # the decode instance's step
        cols["preemptions"] = [p + live.preemptions for p, live in zip(cols["preemptions"], lives)]
        cols.update(decode_request_columns(lives, released))
        cols["decode_instance"] = list(self.decode_of)
        cols["prefill_done_s"] = list(self.prefill_done)
        cols["kv_alloc_s"] = list(self.kv_alloc)
        cols["held_s"] = [a - d for a, d in zip(self.kv_alloc, self.prefill_done)]
        cols["decode_held"] = list(self.refused)
        cols["transfer_tokens"] = list(self.transfer_tokens)
        cols["transfer_s"] = [r - a for r, a in zip(self.kv_ready, self.kv_alloc)]
        cols["kv_ready_s"] = list(self.kv_ready)
        cols["decode_cached_tokens"] = [live.cached_at_admission for live in lives]
        cols["decode_preemptions"] = [live.preemptions for live in lives]
        return Columns(cols)

    def _steps_table(self, prefill: FleetResult, decode_parts: list[SimResult]) -> Columns:
        """Every prefill then every decode instance's steps, with ``role``, ``held`` and
        ``transferring`` counted at each step's start (after every event at that time)."""
        merged: dict[str, list] = {c: list(v) for c, v in prefill.columns("steps").columns.items()}
        pre_inst = np.asarray(merged.get("instance", []), dtype=np.int64)
        merged["role"] = ["prefill"] * len(pre_inst)
        for j, part in enumerate(decode_parts):
            cols = part.columns("steps").columns
            for c in merged:
                if c not in ("instance", "role"):
                    merged[c].extend(cols.get(c, []))
            n = len(part.columns("steps"))
            merged["instance"].extend([j] * n)
            merged["role"].extend(["decode"] * n)
        start = np.asarray(merged.get("start_s", []), dtype=np.float64)
        inst = np.asarray(merged["instance"], dtype=np.int64)
        decode = np.asarray([r == "decode" for r in merged["role"]], dtype=bool)
        done = np.asarray(self.prefill_done)
        alloc = np.asarray(self.kv_alloc)
        ready = np.asarray(self.kv_ready)
        prefill_of = np.asarray(self.instance_of)
        decode_of = np.asarray(self.decode_of)
        held = np.zeros(len(start), dtype=np.int64)
        moving = np.zeros(len(start), dtype=np.int64)
        for role_is_decode, owner in ((False, prefill_of), (True, decode_of)):
            for k in np.unique(inst[decode == role_is_decode]):
                rows = np.flatnonzero((inst == k) & (decode == role_is_decode))
                mine = owner == k
                s = start[rows]
                held[rows] = _open_at(done[mine], alloc[mine], s)
                moving[rows] = _open_at(alloc[mine], ready[mine], s)
        merged["held"] = held.tolist()
        merged["transferring"] = moving.tolist()
        return Columns(merged)


def _open_at(begin: np.ndarray, end: np.ndarray, at: np.ndarray) -> np.ndarray:
    """How many intervals ``[begin, end)`` contain each time of ``at``."""
    return (np.searchsorted(np.sort(begin), at, side="right")
            - np.searchsorted(np.sort(end), at, side="right"))


def prefill_capacity_mode(config: EngineConfig, decode_kv_blocks: int | None) -> str:
    """The rule the prefill side's KV capacity is resolved by (``resolve_capacity``'s ``mode``).

    A prefill engine holds prompts only (``prefill-only``: each prompt must fit). When the decode
    side shares its size (no ``decode_kv_blocks``) and ``config`` gives no capacity at all, the
    default sizing makes room for each prompt and output (``colocated``), as a colocated engine's,
    so that the decode side it sizes can hold every request.
    """
    explicit = any(v is not None for v in (config.kv_blocks, config.kv_tokens, config.kv_fraction))
    return "colocated" if decode_kv_blocks is None and not explicit else "prefill-only"


def check_decode_fits(requests: Sequence[Request], block_size: int, decode_kv_blocks: int) -> None:
    """Refuse a decode engine that cannot hold one request's prompt and output.

    Raises:
        CapacityError: Naming the request that needs the most blocks (the first of them), its
            blocks and the capacity (so raising the capacity to that need is enough).
    """
    worst = max(requests, key=lambda r: r.prompt_len + r.output_len, default=None)
    if worst is None:
        return
    need = blocks_for(worst.prompt_len + worst.output_len - 1, block_size)
    if need > decode_kv_blocks:
        raise CapacityError(
            f"the decode side is too small for request {worst.request_id!r}: its prompt and output "
            f"({worst.prompt_len:,} + {worst.output_len:,} tokens, of which the last generated one is never "
            f"cached: {worst.prompt_len + worst.output_len - 1:,}) need {need} KV blocks of {block_size} "
            f"tokens, a decode instance holds {decode_kv_blocks}")


def simulate_disaggregated(requests: Sequence[Request], policies: Sequence[Policy], router: Router,
                           decode_policies: Sequence[Policy], profile: Profile, link: KVLink,
                           config: EngineConfig = EngineConfig(), *, decode_kv_blocks: int | None = None,
                           replay: str | None = None, think_scale: float = 1.0, name: str | None = None,
                           router_name: str | None = None) -> DisaggregatedResult:
    """Replay ``requests`` through ``len(policies)`` prefill and ``len(decode_policies)`` decode
    engines (``DisaggregatedFleet``).

    Raises:
        As ``DisaggregatedFleet`` and ``fairsim.sim.simulate`` (a policy's failure is reported as
        there).
    """
    collect_before_run(len(requests))  # (earlier runs' state, fairsim/gcpause.py)
    return run_reporting_policy_failure(
        lambda: DisaggregatedFleet(requests, policies, router, decode_policies, profile, link, config,
                                   decode_kv_blocks=decode_kv_blocks, replay=replay, think_scale=think_scale,
                                   name=name, router_name=router_name), policies, name)
