"""Preble's local (single-GPU) scheduler: ten hit-ratio groups served round-robin from the top."""

from __future__ import annotations

from collections.abc import Sequence

from fairsim.policies.base import arrival_key
from fairsim.types import QueuedRequest

NUM_GROUPS = 10
"""Hit-ratio groups: group ``g`` holds ratios in ``(g / 10, (g + 1) / 10]`` (group 0 also 0)."""

PER_GROUP_QUOTA = 10
"""Group ``g`` may admit at most ``(g + 1) * PER_GROUP_QUOTA`` requests in one step."""


def hit_group(cached_len: int, prompt_len: int) -> int:
    """Preble group of a request: 0 for a zero hit ratio, else ``ceil(10 * h / L) - 1``.

    Computed in integers, so a ratio of exactly ``g / 10`` lands in group ``g - 1``.
    """
    if cached_len <= 0:
        return 0
    return min(NUM_GROUPS - 1, -(-NUM_GROUPS * cached_len // prompt_len) - 1)


class Preble:
    """Preble's priority-group scheduler (``fcfs-mpq`` heuristic), one engine.

    Ordering contract (POLICIES.md "Preble local scheduler"):

    - Each request is put in one of 10 groups by its hit ratio ``h / L`` when this policy first
      sees it (``hit_group``); it never changes group, even if its cache hit changes later.
    - A pointer starts at group 9. Each step, walking down from the pointer (9, 8, ..., 0, 9, ...)
      the first non-empty group ``g`` is served and the pointer moves to ``g - 1`` (mod 10).
    - The order starts with group ``g`` in arrival order (ties by ``request_id``), followed by every
      other request (groups 9..0, each in arrival order) only to keep ``order()`` a permutation:
      ``admission_limit`` is set to ``min(|g|, (g + 1) * 10)``, so the engine considers only the
      first ``(g + 1) * 10`` requests of group ``g`` and nothing outside it this step.
    - ``skips_misfits = True``: a request that does not fit in the KV cache is skipped and the
      next one is tried (Preble's scheduler does not block on the head of the queue, unlike vLLM).

    State across steps: the pointer and each waiting request's group (dropped once the request
    is admitted, via ``on_admitted``).

    Choices where the source is ambiguous (stated by POLICIES.md or made here): the cap of
    ``(g + 1) * 10`` counts requests *considered* in arrival order; a skipped misfit is not
    replaced by a later member of the group. ``h`` is the engine's cached prefix (full blocks,
    capped at ``L - 1``). The multi-GPU router (E2) is not part of this class.

    Source: Srivatsa et al., "Preble: Efficient Distributed Prompt Scheduling for LLM Serving",
    ICLR 2025, and its single-GPU ``fcfs-mpq`` local scheduler heuristic.
    """

    name = "preble"
    search_space: dict = {}  # nothing to search (fairsim tune)
    skips_misfits = True

    def __init__(self) -> None:
        self.pointer = NUM_GROUPS - 1
        self.admission_limit: int | None = None
        self._group: dict[str, int] = {}

    def group_of(self, r: QueuedRequest) -> int:
        """The request's group, fixed the first time it is seen."""
        g = self._group.get(r.request_id)
        if g is None:
            g = self._group[r.request_id] = hit_group(r.cached_len, r.prompt_len)
        return g

    def order(self, waiting: Sequence[QueuedRequest], now: float) -> list[QueuedRequest]:
        """Serve one group this step (see the class docstring); a permutation of ``waiting``."""
        groups: list[list[QueuedRequest]] = [[] for _ in range(NUM_GROUPS)]
        for r in waiting:
            groups[self.group_of(r)].append(r)
        if not waiting:
            self.admission_limit = 0
            return []
        g = self.pointer
        while not groups[g]:
            g = (g - 1) % NUM_GROUPS
        self.pointer = (g - 1) % NUM_GROUPS
        served = sorted(groups[g], key=arrival_key)
        self.admission_limit = min(len(served), (g + 1) * PER_GROUP_QUOTA)
        rest = [r for grp in range(NUM_GROUPS - 1, -1, -1) if grp != g
                for r in sorted(groups[grp], key=arrival_key)]
        return served + rest

    def incremental_order(self):
        """Fast path (``fairsim.policies.incremental``): one arrival-ordered lane per group."""
        from fairsim.policies.incremental import PrebleOrder
        return PrebleOrder(self, NUM_GROUPS, PER_GROUP_QUOTA)

    def on_admitted(self, admitted: Sequence[QueuedRequest], now: float) -> None:
        """Forget the groups of admitted requests (their group is never needed again)."""
        for r in admitted:
            self._group.pop(r.request_id, None)
