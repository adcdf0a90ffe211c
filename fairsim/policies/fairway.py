"""Fairway: a Fast lane (cache reuse + relative wait) and a Fair lane (arrival) merged by work."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Literal

from fairsim.policies.base import WEIGHT_MAX, WEIGHT_MIN, arrival_key, param_text
from fairsim.types import QueuedRequest
from fairsim.policies.space import FloatRange

#: Bounds of ``slo_floor`` (s) and of ``slo_multiplier`` (our own): a subnormal floor sent
#: ``wait / SLO`` past the float range (the Fast lane's buckets took its logarithm of infinity),
#: and 1e300 made Fairway-deadline's deadlines in nanoseconds infinite; patience under a
#: microsecond or over 1e9 s (about 32 years) is none a team would give.
SLO_FLOOR_MIN_S, SLO_MAX = 1e-6, 1e9


class Fairway:
    """Two virtual lanes over one waiting queue, merged by per-lane work charges.

    Ordering contract (POLICIES.md "Fairway", recomputed from scratch every step; no state kept
    across steps):

    1. Fast lane: descending ``s = h / c + wait / SLO`` with ``SLO = max(slo_floor,
       slo_multiplier * T_idle(L))`` seconds, ``T_idle`` taken at the full prompt length ``L``.
       Ties by earlier arrival, then ``request_id``.
    2. Fair lane: ascending ``arrival_time`` (ties by ``request_id``).
    3. Merge: ``fast_ledger = fast_weight * c(front of Fast)``, ``fair_ledger = fair_weight *
       c(front of Fair)``; the lane with the smaller ledger places its first not-yet-placed
       request (tie -> Fast) and adds ``weight * c`` of that request to its ledger.

    Consequence (quarter-work bound): with ``o`` the oldest request and ``A`` the requests placed
    before it, ``sum(c(A)) <= fair_weight / fast_weight * c(o) + max(c(A))``.

    Args:
        idle_prefill_time: ``T_idle(L)``: seconds to prefill a cold ``L``-token prompt alone on an
            idle engine (``Profile.idle_prefill_time``).
        fast_weight: Work charge multiplier of the Fast lane (> 0). Paper default 4.
        fair_weight: Work charge multiplier of the Fair lane (> 0). Paper default 1.
        slo_multiplier: Patience multiplier on ``T_idle`` (0 to ``SLO_MAX``). Paper default 3.
        slo_floor: Minimum patience in seconds (``SLO_FLOOR_MIN_S`` to ``SLO_MAX``). Paper default 1.0.
        wait_mode: ``"relative"`` (wait / SLO, the paper) or ``"absolute"`` (SLO = ``slo_floor``
            for every request; ablation ``fairway-abswait``).
        fair_lane: False drops the Fair lane (Fast lane order only; ablation ``fairway-nofair``).

    Raises:
        ValueError: On a non-number or non-finite weight/multiplier/floor, a non-positive weight
            or floor, a negative multiplier, a non-bool ``fair_lane`` or an unknown ``wait_mode``.
    """

    name = "fairway"
    # fairsim tune's search (fairsim/policies/space.py): the paper's three parameters (4, 3, 1 s
    # are its fixed setting); fair_weight stays 1, since only fast_weight / fair_weight matters.
    search_space = {
        "fast_weight": FloatRange(1.0, 32.0, log=True),
        "slo_multiplier": FloatRange(0.25, 30.0, log=True),
        "slo_floor": FloatRange(0.05, 20.0, log=True),
    }

    def __init__(
        self,
        idle_prefill_time: Callable[[int], float],
        *,
        fast_weight: float = 4.0,
        fair_weight: float = 1.0,
        slo_multiplier: float = 3.0,
        slo_floor: float = 1.0,
        wait_mode: Literal["relative", "absolute"] = "relative",
        fair_lane: bool = True,
    ) -> None:
        for key, value in (("fast_weight", fast_weight), ("fair_weight", fair_weight),
                           ("slo_multiplier", slo_multiplier), ("slo_floor", slo_floor)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"Fairway {key}={param_text(value)}: need a finite number")
        if not isinstance(fair_lane, bool):
            raise ValueError(f"Fairway fair_lane={param_text(fair_lane)}: need true or false")
        if not fast_weight > 0 or not fair_weight > 0:
            raise ValueError(
                f"Fairway weights must be > 0, got fast_weight={fast_weight}, "
                f"fair_weight={fair_weight}"
            )
        for key, value in (("fast_weight", fast_weight), ("fair_weight", fair_weight)):
            if not WEIGHT_MIN <= value <= WEIGHT_MAX:
                raise ValueError(f"Fairway {key}={param_text(value)}: need a weight from {WEIGHT_MIN:g} to {WEIGHT_MAX:g} "
                                 f"(only fast_weight / fair_weight matters; beyond these the lanes' work charges, "
                                 f"weight x tokens summed over a run, overflow or lose their digits)")
        if not SLO_FLOOR_MIN_S <= slo_floor <= SLO_MAX:
            raise ValueError(f"Fairway slo_floor must be from {SLO_FLOOR_MIN_S:g} to {SLO_MAX:g} s, got {slo_floor}")
        if not 0 <= slo_multiplier <= SLO_MAX:
            raise ValueError(f"Fairway slo_multiplier must be from 0 to {SLO_MAX:g}, got {slo_multiplier}")
        if wait_mode not in ("relative", "absolute"):
            raise ValueError(f"Fairway wait_mode must be 'relative' or 'absolute', got {wait_mode!r}")
        self.idle_prefill_time = idle_prefill_time
        self.fast_weight = float(fast_weight)
        self.fair_weight = float(fair_weight)
        self.slo_multiplier = float(slo_multiplier)
        self.slo_floor = float(slo_floor)
        self.wait_mode = wait_mode
        self.fair_lane = fair_lane
        # SLO depends only on L; memoise per instance (never on the class: STYLE.md 2.9).
        self._slo_by_len: dict[int, float] = {}

    def slo(self, prompt_len: int) -> float:
        """Patience of a request with ``prompt_len`` tokens, in seconds."""
        slo = self._slo_by_len.get(prompt_len)
        if slo is None:
            if self.wait_mode == "absolute":
                slo = self.slo_floor
            else:
                slo = max(self.slo_floor, self.slo_multiplier * self.idle_prefill_time(prompt_len))
            self._slo_by_len[prompt_len] = slo
        return slo

    def fast_score(self, r: QueuedRequest, now: float) -> float:
        """Fast-lane score ``h / max(c, 1) + wait / SLO`` (higher is served first)."""
        return r.cached_len / max(r.uncached_len, 1) + (now - r.arrival_time) / self.slo(r.prompt_len)

    def _fast_keys(self, waiting: Sequence[QueuedRequest], now: float) -> list[tuple[float, float, str]]:
        # Inlined fast_score: this runs for every waiting request every step.
        slo = self.slo
        return [
            (-(r.cached_len / max(r.uncached_len, 1) + (now - r.arrival_time) / slo(r.prompt_len)),
             r.arrival_time, r.request_id)
            for r in waiting
        ]

    def fast_lane(self, waiting: Sequence[QueuedRequest], now: float) -> list[QueuedRequest]:
        """The Fast lane alone: descending score, ties by arrival then ``request_id``."""
        keys = self._fast_keys(waiting, now)
        return [waiting[x] for x in sorted(range(len(waiting)), key=keys.__getitem__)]

    def incremental_order(self):
        """Fast path (``fairsim.policies.incremental``): vectorised Fast-lane scores, lazy merge."""
        from fairsim.policies.incremental import fairway_order
        return fairway_order(self)

    def order(self, waiting: Sequence[QueuedRequest], now: float) -> list[QueuedRequest]:
        """Merge the Fast and Fair lanes by work charges (a permutation of ``waiting``)."""
        if not self.fair_lane or len(waiting) <= 1:
            return self.fast_lane(waiting, now)
        n = len(waiting)
        # Lanes hold indices into `waiting`, so equal snapshots stay distinct.
        fast = sorted(range(n), key=self._fast_keys(waiting, now).__getitem__)
        fair = sorted(range(n), key=[arrival_key(r) for r in waiting].__getitem__)
        work = [r.uncached_len for r in waiting]
        fast_w, fair_w = self.fast_weight, self.fair_weight
        return charge_merge(waiting, fast, fair, work, fast_w, fair_w,
                            fast_w * work[fast[0]], fair_w * work[fair[0]])


def charge_merge(waiting: Sequence[QueuedRequest], fast: Sequence[int], fair: Sequence[int],
                 work: Sequence[int], fast_w: float, fair_w: float, fast_ledger: float,
                 fair_ledger: float, carried: float = 0.0, oldest: int | None = None) -> list[QueuedRequest]:
    """Fairway's merge of two lane orders by work charges (POLICIES.md, "Fairway").

    Each pick is charged ``weight x work`` (uncached tokens) to its lane's ledger; the lane with
    the smaller ledger picks next (a tie goes to Fast), skipping what the other lane placed.

    Args:
        waiting: The requests; ``fast`` and ``fair`` are permutations of their indices.
        work: Uncached tokens per index.
        fast_w, fair_w: Lane weights (charge per uncached token).
        fast_ledger, fair_ledger: Starting ledgers, weight x tokens (the paper pre-charges each
            lane's head).
        carried: Extra Fast-lane charge until ``oldest`` (an index) is placed, then taken off
            (``fairway-carry``'s debt; 0 for the paper's merge).

    Returns:
        ``waiting`` in merged order (a permutation).
    """
    n = len(waiting)
    placed = [False] * n
    out: list[QueuedRequest] = []
    i = j = 0
    for _ in range(n):
        if fast_ledger <= fair_ledger:  # tie -> Fast
            while placed[fast[i]]:
                i += 1
            x = fast[i]
            fast_ledger += fast_w * work[x]
        else:
            while placed[fair[j]]:
                j += 1
            x = fair[j]
            fair_ledger += fair_w * work[x]
        placed[x] = True
        out.append(waiting[x])
        if x == oldest:  # past the oldest: the debt only ever moves the oldest forward
            fast_ledger -= carried
            carried = 0.0
    return out
