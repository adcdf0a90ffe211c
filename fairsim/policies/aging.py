"""Orderings serving engines ship against starvation: shortest-uncached-first, LPM and SJF with aging.

- ``ShortestUncachedFirst`` (``suf``): TensorRT-LLM ``SchedulerConfig.context_scheduling_policy =
  shortest_uncached_first`` with ``context_starvation_iterations``.
- ``LPMAging`` (``lpm-aging``): SGLang's ``lpm`` with ``--lpm-aging-tokens-per-pass`` (PRs #31723,
  #33210).
- ``SJFAging`` (``sjf-aging``): SGLang's ``sjf`` with ``--sjf-aging-tokens-per-s`` (PR #30806).

Full specifications, sources and the choices that are ours: docs/policies.md, "Orderings the
serving engines ship". Two of them count *waiting passes*; the count is defined once here
(``WaitingPasses``) from what both engines supply under the policy contract
(``fairsim/policies/base.py``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

from fairsim.policies.space import FloatRange, IntRange
from fairsim.policies.base import param_text
from fairsim.types import QueuedRequest


class WaitingPasses:
    """How many scheduling passes each waiting request has waited, from the policy contract alone.

    A *pass* is a scheduling step that admitted at least one request: one ``on_admitted`` call
    (contract rule 3). ``waited(q) = passes - passes_at_first_sight(q)``, where the first sight
    is the first ``order()`` call (or fast-path ``add``) that shows the request. So a request
    shown in a pass that admitted others, and not admitted itself, has waited one pass more.

    Why admitting steps and not ``order()`` calls: the simulator calls ``order()`` only in steps
    that can admit, the live hook in every step with a waiting request (contract rule 1), so a
    count of calls would differ between the engines; ``on_admitted`` comes from both in the same
    steps. The first sight is the same in both too: between a request's arrival and the
    simulator's first ``order()`` showing it no step admits (a step that can admit a waiting
    request calls ``order()``), so the pass count there equals the one at the hook's first sight.
    Repeated ``order()`` calls with no ``on_admitted`` between change nothing (the first sight is
    kept, ``setdefault``). SGLang counts every prefill-scheduling pass instead, also those that
    admit nothing (a full batch); here such a step does not age the queue (ours).

    State: the pass counter and ``request_id -> pass count at first sight``; an entry goes when
    its request is admitted (a request aborted while waiting in the live hook keeps its entry).
    """

    def __init__(self) -> None:
        self.passes = 0
        self.first: dict[str, int] = {}

    def seen_at(self, q: QueuedRequest) -> int:
        """Pass count at ``q``'s first sight (recorded now if this is it)."""
        return self.first.setdefault(q.request_id, self.passes)

    def waited(self, q: QueuedRequest) -> int:
        """Passes ``q`` has waited since its first sight (>= 0)."""
        return self.passes - self.seen_at(q)

    def admitted(self, admitted: Sequence[QueuedRequest]) -> None:
        """One more pass; the admitted requests stop being counted."""
        self.passes += 1
        for q in admitted:
            self.first.pop(q.request_id, None)


#: Largest aging rate (tokens per pass, tokens per second). The keys add the aging term to token
#: counts (``N x passes - h``, ``c + a x arrival_time``); at 1e6 and arrivals within fairsim's
#: 1e9 s the term stays below 2**53, where a float still resolves one token, so two requests of
#: the same age keep their order by tokens. Beyond it that order was silently lost (at 1e20 every
#: such tie went by arrival). Ours.
AGING_MAX = 1e6


def _check_number(policy: str, key: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not 0 <= value <= AGING_MAX:
        why = (" (beyond, the aging term rounds away the token counts it is added to)"
               if isinstance(value, (int, float)) and not isinstance(value, bool) and value > AGING_MAX else "")
        raise ValueError(f"{policy} {key}={param_text(value)}: need a number from 0 to {AGING_MAX:g}{why}")


def uncached_key(q: QueuedRequest) -> tuple[int, float, str]:
    """Shortest-uncached-first's key: fewest uncached tokens ``c``, ties by arrival, then id."""
    return (q.uncached_len, q.arrival_time, q.request_id)


class ShortestUncachedFirst:
    """TensorRT-LLM's ``shortest_uncached_first`` context scheduling, with its starvation guard.

    Ordering contract: requests that have waited ``starvation_iterations`` passes or more
    (``WaitingPasses``) come first, most passes waited first (ties by arrival, then
    ``request_id``); then the others by ascending uncached tokens ``c`` (``uncached_len``), ties
    by arrival, then ``request_id``. ``starvation_iterations=None`` (TensorRT-LLM's default): no
    guard, plain shortest-uncached-first.

    Source: TensorRT-LLM ``SchedulerConfig`` (LLM API reference, release 1.4.0rc4,
    https://nvidia.github.io/TensorRT-LLM/1.4.0rc4/llm-api/reference/SchedulerConfig.html):
    ``context_scheduling_policy`` 'fcfs' (arrival order) or 'shortest_uncached_first' (fewest
    prompt tokens not covered by reusable KV cache first); ``context_starvation_iterations``, an
    integer > 0 or None. The implementing source was not found in the public code we could read,
    so these choices are ours: what a starved request gets (the front of the queue, most passes
    first), what an iteration is (a pass that admitted, ``WaitingPasses``; TensorRT-LLM counts
    its scheduler iterations), ties by arrival.

    Args:
        starvation_iterations: Passes after which a waiting request goes to the front (an integer
            >= 1), or ``None`` for no guard.

    Raises:
        ValueError: ``starvation_iterations`` is neither ``None`` nor an integer >= 1.
    """

    name = "suf"
    clock_free_order = True  # order() ignores now; a repeated call keeps the first sights (base.py)

    search_space = {"starvation_iterations": IntRange(1, 4096, log=True)}  # fairsim tune (none: its default trial)

    def __init__(self, starvation_iterations: int | None = None) -> None:
        k = starvation_iterations
        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
            raise ValueError(f"suf starvation_iterations={param_text(k)}: need an integer >= 1, or null for no guard")
        self.starvation_iterations = k
        self.waiting = WaitingPasses()

    def _starved(self, q: QueuedRequest) -> bool:
        return self.starvation_iterations is not None and self.waiting.waited(q) >= self.starvation_iterations

    def age_key(self, q: QueuedRequest) -> tuple[int, float, str]:
        """Starved requests' key: earliest first sight (most passes waited), arrival, id."""
        return (self.waiting.seen_at(q), q.arrival_time, q.request_id)

    def order(self, waiting: Sequence[QueuedRequest], now: float) -> list[QueuedRequest]:
        """Starved requests first (most passes waited first), then fewest uncached tokens first."""
        starved = sorted((q for q in waiting if self._starved(q)), key=self.age_key)
        rest = sorted((q for q in waiting if not self._starved(q)), key=uncached_key)
        return starved + rest

    def on_admitted(self, admitted: Sequence[QueuedRequest], now: float) -> None:
        """One more pass waited by the requests still waiting (``WaitingPasses``)."""
        self.waiting.admitted(admitted)

    def incremental_order(self):
        """Fast path (``fairsim.policies.incremental``): one lane by first sight, one by ``c``."""
        from fairsim.policies.incremental import Lanes, SortedKeyOrder

        if self.starvation_iterations is None:
            return SortedKeyOrder(uncached_key)
        return Lanes(self._combine, SortedKeyOrder(self.age_key), SortedKeyOrder(uncached_key))

    def _combine(self, now: float, by_sight: Any, by_uncached: Any) -> Iterator[QueuedRequest]:
        # The starved are a prefix of the first-sight lane (seen at or before passes - K).
        last = self.waiting.passes - self.starvation_iterations
        seen_at = self.waiting.seen_at
        for q in by_sight.iter_order(now):
            if seen_at(q) > last:
                break
            yield q
        for q in by_uncached.iter_order(now):
            if seen_at(q) > last:
                yield q


class LPMAging:
    """SGLang's ``lpm`` with anti-starvation aging (``--lpm-aging-tokens-per-pass``).

    Ordering contract: descending ``h + N x waited`` (``cached_len``; ``waited`` from
    ``WaitingPasses``; ``N = aging_tokens_per_pass``), ties by arrival, then ``request_id``.
    Computed as ascending ``N x passes_at_first_sight - h``: the same order (``N x passes`` is
    common to every request), a key that does not change between passes (the fast path keeps it
    sorted). ``N = 0`` is LPM.

    Source: SGLang PR #31723 (open; issue #31954) and PR #33210 (open): the lpm sort key becomes
    ``-(num_matched_prefix_tokens + N * waiting_passes)``, ``N`` set by
    ``--lpm-aging-tokens-per-pass`` (default 0). Here it is this policy's ``--param
    aging_tokens_per_pass``. Ours: what a pass is (``WaitingPasses``); ties by arrival (SGLang's
    stable sort keeps the previous order); SGLang's FCFS fallback above 128 waiting requests and
    its in-batch de-duplication are not applied (``lpm`` has them as switches), so aging is seen
    alone.

    Args:
        aging_tokens_per_pass: ``N``, prefix tokens credited per pass waited (>= 0).

    Raises:
        ValueError: ``aging_tokens_per_pass`` is not a number from 0 to ``AGING_MAX``.
    """

    name = "lpm-aging"
    clock_free_order = True  # order() ignores now; a repeated call keeps the first sights (base.py)

    search_space = {"aging_tokens_per_pass": FloatRange(1.0, 65536.0, log=True)}  # fairsim tune

    def __init__(self, aging_tokens_per_pass: float = 256) -> None:
        _check_number("lpm-aging", "aging_tokens_per_pass", aging_tokens_per_pass)
        self.aging_tokens_per_pass = aging_tokens_per_pass
        self.waiting = WaitingPasses()

    def key(self, q: QueuedRequest) -> tuple[float, float, str]:
        """``(N x passes_at_first_sight - h, arrival_time, request_id)``, ascending."""
        return (self.aging_tokens_per_pass * self.waiting.seen_at(q) - q.cached_len, q.arrival_time, q.request_id)

    def order(self, waiting: Sequence[QueuedRequest], now: float) -> list[QueuedRequest]:
        """Return ``waiting`` by descending ``h + N x waited`` (a permutation of the input)."""
        return sorted(waiting, key=self.key)

    def on_admitted(self, admitted: Sequence[QueuedRequest], now: float) -> None:
        """One more pass waited by the requests still waiting (``WaitingPasses``)."""
        self.waiting.admitted(admitted)

    def incremental_order(self):
        """Fast path (``fairsim.policies.incremental``): the static key kept sorted, with lazy
        hits (``LazyKeyOrder``: a falling hit only raises the key)."""
        from fairsim.policies.incremental import LazyKeyOrder
        return LazyKeyOrder(self.key)


class SJFAging:
    """SGLang's ``sjf`` schedule policy: shortest uncached job first, aged by the time waited.

    Ordering contract: ascending ``c - a x (now - arrival_time)`` (``c = uncached_len``,
    ``a = aging_tokens_per_s``), ties by arrival, then ``request_id``. Computed as ascending
    ``c + a x arrival_time``: the same order (``a x now`` is common to every request) with a key
    that does not depend on ``now``, so ``order()`` and the fast path compare the same floats.
    Stateless. ``a = 0`` is shortest-uncached-first without a guard (``suf``).

    Source: SGLang PR #30806 (closed, not merged): ``--schedule-policy sjf`` sorts the waiting
    queue by ``(input_len - num_matched_prefix_tokens) - sjf_aging_tokens_per_s * time_waited``.
    Ours: ``time_waited = now - arrival_time`` (the time in the waiting queue; in closed-loop
    replay from the request's release), ``c`` capped at >= 1 as every snapshot's, ties by arrival.

    Args:
        aging_tokens_per_s: ``a``, uncached tokens forgiven per second waited (>= 0).

    Raises:
        ValueError: ``aging_tokens_per_s`` is not a number from 0 to ``AGING_MAX``.
    """

    name = "sjf-aging"
    clock_free_order = True  # the key ignores now; stateless (base.py)

    search_space = {"aging_tokens_per_s": FloatRange(1.0, 10000.0, log=True)}  # fairsim tune

    def __init__(self, aging_tokens_per_s: float = 50) -> None:
        _check_number("sjf-aging", "aging_tokens_per_s", aging_tokens_per_s)
        self.aging_tokens_per_s = aging_tokens_per_s

    def key(self, q: QueuedRequest) -> tuple[float, float, str]:
        """``(c + a x arrival_time, arrival_time, request_id)``, ascending."""
        return (q.uncached_len + self.aging_tokens_per_s * q.arrival_time, q.arrival_time, q.request_id)

    def order(self, waiting: Sequence[QueuedRequest], now: float) -> list[QueuedRequest]:
        """Return ``waiting`` by ascending aged uncached length (a permutation of the input)."""
        return sorted(waiting, key=self.key)

    def incremental_order(self):
        """Fast path (``fairsim.policies.incremental``): the static key kept sorted, with lazy
        hits (``LazyKeyOrder``: a falling hit only raises the key)."""
        from fairsim.policies.incremental import LazyKeyOrder
        return LazyKeyOrder(self.key)
