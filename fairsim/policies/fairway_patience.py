"""Fairway-patience: Fairway whose cross-step protection of the oldest request starts at its patience."""

from __future__ import annotations

from collections.abc import Sequence

from fairsim.policies.base import arrival_key
from fairsim.policies.fairway_carry import FairwayCarry
from fairsim.types import QueuedRequest


class FairwayPatience(FairwayCarry):
    """``fairway-carry`` whose carried debt only accrues while the oldest request is past its patience.

    Ordering contract (docs/POLICIES-more.md "Fairway-patience"), on top of ``FairwayCarry`` (same
    lanes, weights and merge; ``fast_first`` off, as the paper's merge):

    - ``o`` = the oldest waiting request (``arrival_time``, then ``request_id``), ``SLO(o) =
      max(slo_floor, slo_multiplier x T_idle(L_o))`` seconds, the paper's patience.
    - **Armed** at a step with clock ``now`` iff ``now - arrival(o) > SLO(o)``. Wait only grows, so
      once armed ``o`` stays armed until it is admitted or leaves the queue.
    - While ``o`` is not armed the debt is 0 and the order is exactly the paper's ``fairway``.
    - While armed, ``debt`` = the order-time ``c = max(1, L - h)`` of the requests the engine admitted
      ahead of ``o`` in armed steps (``on_admitted``), and the merge adds ``fast_weight x debt`` to
      the Fast ledger until ``o`` is placed (``FairwayCarry``).

    Cross-step bound (proof in docs/POLICIES-more.md; property over engine runs in
    tests/test_fairway_patience.py): with ``A`` the requests admitted ahead of ``o`` from the first
    step at which ``o`` is the oldest and past its patience until its admission (resumed preempted
    requests excluded), ``sum(c(A)) <= fair_weight / fast_weight * max_t c_t(o) + max(c(A))``
    (the test allows one step's budget of slack, as for ``fairway-carry``).

    Args:
        idle_prefill_time: ``T_idle(L)`` in seconds (``Profile.idle_prefill_time``).
        **params: ``FairwayCarry``'s parameters (``fast_weight``, ``fair_weight``,
            ``slo_multiplier``, ``slo_floor``, ``wait_mode``, ``fast_first``, ``wait_cap``).

    Raises:
        ValueError: As ``FairwayCarry``.
    """

    name = "fairway-patience"
    search_space = FairwayCarry.search_space  # fairsim tune: Fairway's three parameters

    def __init__(self, idle_prefill_time, **params: object) -> None:
        super().__init__(idle_prefill_time, **params)  # type: ignore[arg-type]
        self.armed = False

    def arm(self, o: QueuedRequest, now: float) -> None:
        """Track the oldest request ``o`` at clock ``now`` (s): reset on a new oldest, debt 0 until armed."""
        if o.request_id != self.oldest:
            self.oldest, self.debt = o.request_id, 0.0
        self.armed = now - o.arrival_time > self.slo(o.prompt_len)
        if not self.armed:
            self.debt = 0.0

    def order(self, waiting: Sequence[QueuedRequest], now: float) -> list[QueuedRequest]:
        """The paper's merge; with the carried debt ahead of the oldest once it is past its patience."""
        if waiting:
            self.arm(min(waiting, key=arrival_key), now)
        return super().order(waiting, now)

    def on_admitted(self, admitted: Sequence[QueuedRequest], now: float) -> None:
        """Charge admissions ahead of the oldest only in armed steps; reset when the oldest is admitted."""
        if self.armed:
            super().on_admitted(admitted, now)
            return
        if any(a.request_id == self.oldest for a in admitted):
            self.oldest, self.debt = None, 0.0

    def incremental_order(self):
        """Fast path (``fairsim.policies.incremental``): ``fairway-carry``'s, armed at the patience."""
        from fairsim.policies.incremental import fairway_carry_order

        return fairway_carry_order(self, self.arm)
