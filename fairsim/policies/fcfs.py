"""FCFS: vLLM's default waiting-queue order."""

from __future__ import annotations

from collections.abc import Sequence

from fairsim.policies.base import arrival_key
from fairsim.types import QueuedRequest


class FCFS:
    """First come, first served.

    Ordering contract: ascending ``arrival_time``, ties by ``request_id``. The prefix cache affects
    cost, never order. Stateless. Source: vLLM ``FCFSRequestQueue``
    (``vllm/v1/core/sched/request_queue.py``); POLICIES.md "FCFS".
    """

    name = "fcfs"
    search_space: dict = {}  # nothing to search (fairsim tune)
    uses_prefix_hits = False  # the order reads no h: the live hook skips the prefix lookups
    clock_free_order = True  # same snapshots, no on_admitted since: same order (base.py)

    def order(self, waiting: Sequence[QueuedRequest], now: float) -> list[QueuedRequest]:
        """Return ``waiting`` sorted oldest first (a permutation of the input)."""
        return sorted(waiting, key=arrival_key)

    def incremental_order(self):
        """Fast path (``fairsim.policies.incremental``): the waiting queue in arrival order."""
        from fairsim.policies.incremental import ArrivalOrder
        return ArrivalOrder()
