"""Fairway-carry and Fairway-plus: Fairway whose protection of the oldest request persists across steps."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from fairsim.policies.base import arrival_key, param_text
from fairsim.policies.fairway import Fairway, charge_merge
from fairsim.types import QueuedRequest


class FairwayCarry(Fairway):
    """Fairway with a carried Fast-lane charge ahead of the oldest request (docs/POLICIES-more.md).

    Ordering contract, on top of ``Fairway`` (same Fast and Fair lanes, same weights):

    - **Carry.** ``o`` = the oldest waiting request (``arrival_time``, then ``request_id``).
      ``debt`` = the uncached work (order-time ``max(1, L - h)``) of the requests the engine
      admitted, in steps since ``o`` became the oldest, ahead of ``o`` (``on_admitted``); it
      resets to 0 when a different request is the oldest. The merge adds ``fast_weight x debt`` to
      the Fast lane's ledger until ``o`` is placed, then takes it off again, so everything after
      ``o`` is merged exactly as in ``Fairway``.
    - **fast_first** (``fairway-plus``): the Fast lane's ledger is not pre-charged with its front
      request (the paper's merge pre-charges both lanes with their fronts): the Fast lane may place
      a request while its charges so far, debt included, do not exceed the Fair lane's. With
      requests of similar size the paper's merge gives the first place to the Fair lane unless
      the Fast front is ``fast_weight / fair_weight`` times cheaper; under a long queue (the
      paper's limitation 1) that is FCFS for most of what a 2,048-token step admits. Here the
      first place alternates between the lanes.
    - **wait_cap** (off by default; ``--param wait_cap=1`` on ``fairway-carry``): the Fast lane's
      wait term becomes ``min(wait / SLO, wait_cap)``, so under overload the hit ratio keeps
      deciding the Fast lane. Measured: it lowers the spike median but gets the worst request
      flagged as starving in three E2 scenarios, so no named variant uses it.

    Cross-step bound (proved in docs/POLICIES-more.md; property test over engine runs in
    tests/test_fairway_carry.py): with ``A`` the requests the engine admits ahead of ``o`` from
    the step ``o`` becomes the oldest until its admission (resumed preempted requests excluded),
    ``sum(c(A)) <= fair_weight / fast_weight * max_t c_t(o) + max(c(A))``, ``c_t(o)`` being
    ``o``'s uncached work in the snapshots of those steps. It holds for a request of any length;
    the paper's per-step bound does not carry across steps (a 12k-token miss waits for its own
    ``wait / SLO`` to win).

    Args:
        idle_prefill_time: ``T_idle(L)`` in seconds (``Profile.idle_prefill_time``).
        fast_first: Do not pre-charge the Fast lane with its front (``fairway-plus`` fixes true).
        wait_cap: Cap on ``wait / SLO`` in the Fast score (``None``: no cap, as the paper).
        **fairway: The ``Fairway`` parameters (``fast_weight``, ``fair_weight``,
            ``slo_multiplier``, ``slo_floor``, ``wait_mode``).

    Raises:
        ValueError: As ``Fairway``; ``fair_lane=False`` (there is no oldest to protect without the
            Fair lane); a non-bool ``fast_first``; a ``wait_cap`` that is not a number >= 0.
    """

    name = "fairway-carry"
    search_space = Fairway.search_space  # fairsim tune: Fairway's three parameters

    def __init__(
        self,
        idle_prefill_time: Callable[[int], float],
        *,
        fast_first: bool = False,
        wait_cap: float | None = None,
        **fairway: object,
    ) -> None:
        super().__init__(idle_prefill_time, **fairway)  # type: ignore[arg-type]
        if not self.fair_lane:
            raise ValueError("Fairway-carry needs the Fair lane (fair_lane=true)")
        if not isinstance(fast_first, bool):
            raise ValueError(f"Fairway-carry fast_first={param_text(fast_first)}: need true or false")
        if wait_cap is not None and (isinstance(wait_cap, bool) or not isinstance(wait_cap, (int, float))
                                     or not math.isfinite(wait_cap) or wait_cap < 0):
            raise ValueError(f"Fairway-carry wait_cap={param_text(wait_cap)}: need a finite number >= 0, or null for no cap")
        self.fast_first = fast_first
        self.wait_cap = None if wait_cap is None else float(wait_cap)
        self.oldest: str | None = None
        self.debt = 0.0
        self._work: dict[str, int] = {}

    def fast_score(self, r: QueuedRequest, now: float) -> float:
        """``h / max(c, 1) + min(wait / SLO, wait_cap)`` (no cap when ``wait_cap`` is None)."""
        wait = (now - r.arrival_time) / self.slo(r.prompt_len)
        if self.wait_cap is not None:
            wait = min(wait, self.wait_cap)
        return r.cached_len / max(r.uncached_len, 1) + wait

    def _fast_keys(self, waiting: Sequence[QueuedRequest], now: float) -> list[tuple[float, float, str]]:
        if self.wait_cap is None:
            return super()._fast_keys(waiting, now)
        score = self.fast_score
        return [(-score(r, now), r.arrival_time, r.request_id) for r in waiting]

    def order(self, waiting: Sequence[QueuedRequest], now: float) -> list[QueuedRequest]:
        """Merge the lanes with the carried debt ahead of the oldest (a permutation of ``waiting``)."""
        n = len(waiting)
        self._work = {r.request_id: r.uncached_len for r in waiting}
        if n == 0:
            return []
        fair = sorted(range(n), key=[arrival_key(r) for r in waiting].__getitem__)
        o = fair[0]
        if waiting[o].request_id != self.oldest:
            self.oldest, self.debt = waiting[o].request_id, 0.0
        if n == 1:
            return list(waiting)
        fast = sorted(range(n), key=self._fast_keys(waiting, now).__getitem__)
        work = [r.uncached_len for r in waiting]
        fast_w, fair_w = self.fast_weight, self.fair_weight
        carried = fast_w * self.debt
        fast_ledger = (0.0 if self.fast_first else fast_w * work[fast[0]]) + carried
        return charge_merge(waiting, fast, fair, work, fast_w, fair_w, fast_ledger, fair_w * work[o],
                            carried, o)

    def incremental_order(self):
        """Fast path (``fairsim.policies.incremental``): as ``Fairway``'s, with the carried debt."""
        from fairsim.policies.incremental import fairway_carry_order
        return fairway_carry_order(self)

    def on_admitted(self, admitted: Sequence[QueuedRequest], now: float) -> None:
        """Add the order-time ``max(1, L - h)`` of requests admitted ahead of the oldest to ``debt``."""
        for a in admitted:
            if a.request_id == self.oldest:
                self.oldest, self.debt = None, 0.0  # admitted: the next oldest starts from 0
                return
            charge = self._work.get(a.request_id)
            if charge is not None:
                self.debt += charge
