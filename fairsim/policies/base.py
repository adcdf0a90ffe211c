"""The ``Policy`` protocol and helpers shared by every ordering.

A policy is pure: it sees ``QueuedRequest`` snapshots and a clock and returns an order. It never
imports simpy, vllm or the simulator, so the same object runs in the simulator and in the live
vLLM hook (DESIGN.md rule 1). Optional capabilities are discovered by attribute (``getattr``):

- ``on_admitted(admitted, now)``: feedback of the requests the engine admitted this step, in
  admission order (k-LPM's turn counter).
- ``skips_misfits = True``: a request that does not fit is skipped instead of stopping admission
  (Preble). Default False: head-of-line stop, as vLLM.
- ``admission_limit``: after ``order()``, the engine considers at most this many requests from the
  front of the order this step (``None`` = no limit; Preble admits only from one group).
- ``eviction_hook``: a block-pool eviction chooser (PEEK protection, RAGCache PGDSF); protocol
  and implementations in ``fairsim.policies.eviction``. Simulator-only: the live hook keeps
  vLLM's LRU and must refuse (or say so) rather than approximate.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from fairsim.types import QueuedRequest


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
            waiting: Snapshots of all waiting requests, built at the start of the step.
            now: Current time in seconds (the engine's clock; same clock as ``arrival_time``).

        Returns:
            A permutation of ``waiting``: nothing added, nothing dropped.
        """
        ...


def arrival_key(r: QueuedRequest) -> tuple[float, str]:
    """Deterministic tie-break used by every policy: earlier ``arrival_time``, then ``request_id``."""
    return (r.arrival_time, r.request_id)
