"""The ``Policy`` protocol, the policy contract, and helpers shared by every ordering.

A policy is pure: it sees ``QueuedRequest`` snapshots and a clock and returns an order. It never
imports simpy, vllm or the simulator, so the same object runs in the simulator and in the live
vLLM hook (DESIGN.md rule 1).

The policy contract (the one place it is written down; the simulator ``fairsim/sim/engine.py``
and the live hook ``fairsim/live/scheduler.py`` both follow it):

1. **When ``order(waiting, now)`` is called.** Once at the *start* of a scheduling step, before
   running requests take their chunks (vLLM's hook point is before ``Scheduler.schedule()``), with
   one fresh snapshot per *plainly waiting* request: waiting, never scheduled, not preempted.
   Preempted (and, live, otherwise blocked) requests are not shown: they keep their place at the
   front of the queue, in the engine's order. ``now`` is the engine's clock in seconds, the clock
   of ``arrival_time``. The simulator calls ``order()`` only in steps where a waiting request can
   be admitted (running chunks leave budget and ``max_num_seqs`` is not reached; PEEK: every step);
   the hook calls it in every step with a plainly waiting request. So ``order()`` must not keep
   state that changes the *decisions* of later calls merely because it was called (state that
   should advance per admission belongs in ``on_admitted``); policies that do (Preble's group
   pointer) need ``admission_limit`` and are simulator-only.
2. **What ``order()`` may return.** A permutation of ``waiting``: the same snapshot objects,
   each exactly once, nothing added or dropped (a list, or any ordered iterable: a tuple, a
   generator; not a set or a dict, whose order is not the policy's). Both engines check it
   with ``check_permutation``; a violation raises ``PolicyContractError`` with one message. The
   simulator stops the run with it; the hook logs it and keeps vLLM's order for that step.
3. **When ``on_admitted(admitted, now)`` is called** (optional method). After the step's
   admission loop, if at least one waiting request was admitted, with the *start-of-step*
   snapshots of the admitted requests (the objects handed to ``order()``; for a preempted request
   re-admitted this step, a snapshot taken at the start of the step too), in admission order, and
   the same ``now`` as that step's ``order()``. Not called in a step that admitted nothing. Its
   return value is ignored.
4. **State rules.** Snapshots are read-only and valid for one step (never keep ``handle``; keep
   ``request_id`` if you must remember a request). A policy must be deterministic: same
   snapshots, ``now`` and internal state -> same order (ties broken by ``arrival_key(q)``, the
   function below). One policy object serves one engine run (``make_policy`` builds a fresh one
   per run).
5. **The prefill-token counter** (SGLang's ``processed_tokens``, read by ``hrrn``). Each engine
   counts the prefill tokens it has scheduled: per step, every scheduled token except decode
   tokens (a request given exactly one token whose computed context already covers its prompt),
   so chunks of running prefills and recomputation after a preemption count, and in
   prefill-only mode every scheduled token does. The simulator adds each step's figure when the
   step is scheduled (``fairsim/sim/engine.py``, ``decode_fast.py``); the live hook adds it after
   vLLM's ``schedule()`` returns, from ``SchedulerOutput.num_scheduled_tokens`` and each
   request's context before the step (``fairsim/live/scheduler.py``). Both therefore show the
   same figure for the same sequence of batches. A snapshot carries the counter's value when its
   request joined the waiting queue (``QueuedRequest.arrival_prefill_tokens``); a policy with
   ``on_prefill_tokens(total)`` is told the current value once at the start of every step in
   which it is asked for an order (``order()`` or its fast path's ``iter_order()``), before it
   is asked, so ``total - q.arrival_prefill_tokens`` is the prefill work the engine did while
   ``q`` waited.

Optional capabilities, discovered by attribute (``getattr``):

- ``on_admitted(admitted, now)``: feedback of the requests admitted this step (rule 3; k-LPM's
  turn counter, Preble's group table).
- ``on_prefill_tokens(total)``: the engine's prefill-token counter before an order (rule 5;
  HRRN). Its return value is ignored.
- ``prefill_tokens_latest = True``: ``on_prefill_tokens`` only stores the count for the next
  order, so a step that reads no order may skip the call (HRRN; the colocated engine's skip of
  blocked admissions, ``fairsim.sim.decode_fast``).
- ``skips_misfits = True``: a request that does not fit is skipped instead of stopping admission
  (Preble). Default False: head-of-line stop, as vLLM.
- ``admission_limit``: after ``order()``, the engine considers at most this many requests from the
  front of the order this step (``None`` = no limit; Preble admits only from one group).
- ``uses_prefix_hits = False``: ``order()`` reads neither ``cached_len`` nor ``uncached_len``
  (FCFS, LOF); the live hook then skips the prefix-cache lookups and shows ``cached_len = 0``, and
  so does the simulator (its waiting requests watch no cache keys: ``Engine._hit_free``; not for a
  policy with PEEK's protection). Admission still reads the cache: the tables' hits are real.
- ``clock_free_order = True``: ``order()`` ignores ``now`` and changes state only as a repeated
  call would (its result and state after a second call with the same snapshots, with no
  ``on_admitted`` in between, are those of the first): the live hook then reuses the last order
  in a step whose plainly waiting snapshots are the same objects in the same order as the last
  order's output. Honoured only where ``order`` is defined by the class that sets it or a base.
- ``incremental_order()``: the simulator's fast path, the same order kept across steps and read
  lazily (``fairsim.policies.incremental``; ``order()`` stays the reference).
- ``eviction_hook``: a block-pool eviction chooser (PEEK protection, RAGCache PGDSF); protocol
  and implementations in ``fairsim.policies.eviction``. Simulator-only: the live hook keeps
  vLLM's LRU and must refuse (or say so) rather than approximate.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any, Protocol, runtime_checkable

from fairsim.errors import PolicyContractError
from fairsim.types import QueuedRequest

#: Bounds of a policy weight whose scale cancels out (Fairway's lane weights, VTC's
#: ``input_weight``; our own): within them the sums of weight x tokens over a run stay finite and
#: keep their digits; beyond, they overflowed (1e305) and the order silently became another's.
WEIGHT_MIN, WEIGHT_MAX = 1e-100, 1e100


@runtime_checkable
class Policy(Protocol):
    """Orders the waiting queue once per scheduling step.

    Attributes:
        name: Registered name (e.g. ``"fairway"``).
    """

    name: str

    def order(self, waiting: Sequence[QueuedRequest], now: float) -> list[QueuedRequest]:
        """Return ``waiting`` in the order the engine should try to admit it.

        Args:
            waiting: Snapshots of the plainly waiting requests, built at the start of the step
                (module docstring, rule 1); length n >= 1.
            now: Current time in seconds (the engine's clock; same clock as ``arrival_time``).

        Returns:
            A permutation of ``waiting``: the same n objects, nothing added, dropped or repeated
            (rule 2; checked by ``check_permutation``).
        """
        ...


def arrival_key(r: QueuedRequest) -> tuple[float, str]:
    """Deterministic tie-break used by every policy: earlier ``arrival_time``, then ``request_id``."""
    return (r.arrival_time, r.request_id)


def _ids(items: Iterable[Any], limit: int = 3) -> str:
    names = [repr(getattr(q, "request_id", q)) for q in items]
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def valid_admission_limit(limit: Any) -> bool:
    """Whether ``limit`` is an ``admission_limit`` the engines can take: ``None`` (no limit) or a
    whole number >= 1: an ``int`` or an integer type with ``__index__`` (numpy's ``int64``), not a
    bool."""
    if limit is None:
        return True
    if isinstance(limit, bool) or isinstance(limit, float):
        return False
    try:
        return operator.index(limit) >= 1
    except TypeError:
        return False


#: What ``admission_limit`` may be, for the messages that refuse another value.
ADMISSION_LIMIT_RULE = "it must be None (no limit) or a whole number of requests >= 1 (fairsim/policies/base.py)"


def checked_admission_limit(limit: Any, policy_name: str) -> int:
    """``limit``, a policy's ``admission_limit`` read by an engine at an ordering step (not
    ``None``: the engines ask only for a limit that is set; a policy may change it in ``order()``,
    as Preble does).

    Raises:
        PolicyContractError: Not a whole number >= 1 (a string, a float, 0 or less, a bool), which
            the engines cannot slice the order with; the message names the policy and the value.
    """
    if valid_admission_limit(limit):
        return operator.index(limit)  # (a plain int: numpy's int64 is one too)
    raise PolicyContractError(f"policy {policy_name!r}: admission_limit is {limit!r} "
                              f"({type(limit).__name__}); {ADMISSION_LIMIT_RULE}")


def param_text(value: Any) -> str:
    """A ``--param`` value as one types it, for messages: ``true``, ``false``, ``null`` (Python's
    ``True``/``False``/``None`` would be read back as strings and refused), a whole number of more
    than 40 digits by its length (``<a whole number of 401 digits>``), else its ``repr``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int) and len(digits := str(abs(value))) > 40:
        return f"<a whole number of {len(digits)} digits>"
    return repr(value)


def check_permutation(waiting: Sequence[QueuedRequest], ordered: Any, policy_name: str) -> list[QueuedRequest]:
    """Check that ``ordered`` (what ``order(waiting, now)`` returned) is a permutation of ``waiting``.

    Entries are compared by identity: the policy must return the snapshot objects it was given.
    O(n) for n waiting requests. Used by the simulator and by the live hook, so both report a
    broken order with the same message.

    Args:
        waiting: The snapshots given to ``order()``.
        ordered: Its return value (a list, a tuple or an iterator; not a set or a mapping).
        policy_name: Named in the message.

    Returns:
        ``ordered`` as a list.

    Raises:
        PolicyContractError: ``ordered`` is not iterable, is a set or a mapping (no order of its
            own: ``set``, ``frozenset``, ``dict``), or has a duplicate, a missing or a foreign
            entry; the message names the policy and the first offending request ids.
    """
    # A set or a dict iterates in an order that is not the policy's (a set's follows the objects'
    # addresses): refused, where a list, a tuple or an iterator (a generator) keeps its order.
    if type(ordered) is not list and isinstance(ordered, (AbstractSet, Mapping)):
        raise PolicyContractError(
            f"policy {policy_name!r}: order() returned a {type(ordered).__name__}, which has no "
            f"order; return a list (or tuple) of the waiting requests")
    try:
        iterator = iter(ordered)
    except TypeError:
        hint = ""
        import inspect  # (here: a run does not import it, tests/test_record.py)

        if inspect.iscoroutine(ordered):  # an ``async def order``: close it, or Python warns
            ordered.close()               # "never awaited" with a path into fairsim at exit
            hint = " (order is an async def; the engines call it as a plain function)"
        raise PolicyContractError(
            f"policy {policy_name!r}: order() returned {type(ordered).__name__}, not a list of the "
            f"waiting requests{hint}") from None
    # (outside the try: a TypeError raised while iterating, in a generator order() or the
    # policy's own iterator, is the policy's error, not a return of the wrong kind)
    out = list(iterator)
    given = set(map(id, waiting))
    got = set(map(id, out))
    if len(out) == len(waiting) and got == given:
        return out
    seen: set[int] = set()
    duplicates = []
    foreign = []
    for q in out:
        if id(q) not in given:
            foreign.append(q)
        elif id(q) in seen:
            duplicates.append(q)
        seen.add(id(q))
    missing = [q for q in waiting if id(q) not in got]
    problems = []
    if duplicates:
        problems.append(f"duplicate {_ids(duplicates)}")
    if missing:
        problems.append(f"missing {_ids(missing)}")
    if foreign:
        problems.append(f"foreign {_ids(foreign)} (not one of the snapshots it was given)")
    raise PolicyContractError(
        f"policy {policy_name!r}: order() must return a permutation of the {len(waiting)} waiting "
        f"requests it was given, got {len(out)} entries: {'; '.join(problems)}")
