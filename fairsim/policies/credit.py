"""Helpers shared by the policies that carry credit across steps (DRR, VTC, DLPM, Fairway-carry).

Two rules make them behave the same in the simulator and in the live hook:

- **Charges are taken at order time.** ``on_admitted`` may receive snapshots built at the start
  of the step or after admission (when the request's own blocks are already cached and
  ``uncached_len`` has shrunk to ~1). A policy therefore charges the ``uncached_len``
  (``max(1, L - h)``) of the snapshot it ordered, remembered by ``request_id``; a request it did
  not order (a preempted request the engine resumes ahead of the order) is not charged.
- **State advances as far as the engine admitted.** ``order()`` simulates the policy over the
  whole queue on scratch state and logs its state changes (``Replay``); ``on_admitted`` applies
  the logged changes up to the last admitted request of that order, so the state after a step
  is the state the policy would have after serving exactly the admitted requests.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

from fairsim.types import QueuedRequest


class Replay:
    """A log of state assignments made while building one order, replayable up to a position.

    The policy simulates itself on scratch copies of its state dicts and, for every assignment,
    calls ``log(real_dict, key, value)`` with the *real* dict it mirrors; ``placed(r)`` marks that
    ``r`` was placed next, after the assignments logged so far. ``commit(k)`` performs the
    assignments logged up to the ``k``-th placement (its own included): the real state becomes
    the scratch state right after the first ``k`` requests of the order were placed.
    """

    def __init__(self) -> None:
        self._changes: list[tuple[dict, Hashable, Any]] = []
        self._marks: list[int] = []
        self.ids: list[str] = []
        #: Number of ``commit(k)`` calls with ``k > 0`` so far: the real state changed (a fast
        #: path's caches of scratch results are valid while it stays the same).
        self.applied = 0

    def log(self, target: dict, key: Hashable, value: Any) -> None:
        """Record ``target[key] = value`` (performed only by ``commit``)."""
        self._changes.append((target, key, value))

    def placed(self, r: QueuedRequest) -> None:
        """Mark ``r`` as the next request of the order."""
        self.ids.append(r.request_id)
        self._marks.append(len(self._changes))

    def admitted_prefix(self, admitted: Sequence[QueuedRequest]) -> int:
        """How many leading requests of the logged order are among ``admitted``."""
        got = {a.request_id for a in admitted}
        k = 0
        for rid in self.ids:
            if rid not in got:
                break
            k += 1
        return k

    def commit(self, k: int) -> None:
        """Apply the changes made while placing the first ``k`` requests; forget the log."""
        if k > 0:
            for target, key, value in self._changes[: self._marks[k - 1]]:
                target[key] = value
            self.applied += 1
        self._changes.clear()
        self._marks.clear()
        self.ids.clear()


def order_time_charges(waiting: Sequence[QueuedRequest]) -> dict[str, int]:
    """``request_id -> uncached_len`` of the snapshots being ordered (the charge at admission)."""
    return {r.request_id: r.uncached_len for r in waiting}
