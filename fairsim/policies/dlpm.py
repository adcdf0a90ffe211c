"""DLPM: deficit longest prefix match (Cao et al., "Locality-aware Fair Scheduling in LLM Serving")."""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence

from fairsim.policies.clients import client_key
from fairsim.policies.credit import Replay
from fairsim.policies.drr import check_quantum
from fairsim.types import QueuedRequest
from fairsim.policies.space import IntRange


def _lpm_key(r: QueuedRequest) -> tuple[int, float, str]:
    return (-r.cached_len, r.arrival_time, r.request_id)


class DLPM:
    """LPM order, but a client may only be served while its deficit is positive.

    Ordering contract (docs/POLICIES-more.md "DLPM"):

    - Each client (``fairsim.policies.clients.client_key``) has a deficit ``q_u`` (tokens).
    - Passes over the not-yet-placed requests in LPM order (descending ``cached_len``, then
      arrival, then ``request_id``): a request whose client has ``q_u > 0`` is placed and
      ``q_u -= charge``, ``charge = max(1, L - h)`` (``uncached_len``).
    - When a pass places nothing (every backlogged client has ``q_u <= 0``), every backlogged
      client gets ``q_u += quantum`` (as many quanta at once as the first client needs to become
      positive) and the passes resume.
    - A client with no waiting request leaves and its deficit is reset to 0 (DRR's rule): the
      reset is logged with the placement of its last waiting request, so a client that
      admissions empty leaves then, and one refilled before the next ``order()`` starts from 0.
    - The real deficits advance only through the requests the engine admitted
      (``fairsim.policies.credit``).

    Guarantee (DLPM's): between two refills each backlogged client is served at most
    ``quantum + max charge`` uncached tokens, so no client falls behind another backlogged
    client by more than ``2 x (quantum + max charge)`` over any interval.

    Source: Cao et al., arXiv 2501.14312, Algorithm "DLPM" (deficit counters refilled by a
    quantum ``Q`` when no backlogged client has a positive deficit, LPM order among the clients
    with credit). Our choices: the charge is uncached prompt tokens (the paper charges tokens
    with a weight for cached input; a hit costs no prefill here), quantum 2,048 tokens (one
    step's budget), the reset of idle clients, the client labels above.

    Args:
        quantum: Tokens added to each backlogged client's deficit per refill (>= 1, ``drr.MIN_QUANTUM``).

    Raises:
        ValueError: ``quantum`` is not a finite number >= 1.
    """

    name = "dlpm"
    search_space = {"quantum": IntRange(128, 65536, log=True)}  # fairsim tune: tokens per refill
    clock_free_order = True  # same snapshots, no on_admitted since: same order (base.py)

    def __init__(self, quantum: float = 2048) -> None:
        self.quantum = check_quantum("DLPM", quantum)
        self.deficit: dict[Hashable, float] = {}
        self._replay = Replay()

    def order(self, waiting: Sequence[QueuedRequest], now: float) -> list[QueuedRequest]:
        """LPM passes gated by positive deficits (a permutation of ``waiting``)."""
        self._replay.commit(0)
        active = {client_key(r) for r in waiting}
        for u in list(self.deficit):
            if u not in active:
                del self.deficit[u]
        real, log, q = self.deficit, self._replay.log, self.quantum
        d = {u: real.get(u, 0.0) for u in active}
        rest = sorted(waiting, key=_lpm_key)
        unplaced = Counter(client_key(r) for r in waiting)
        out: list[QueuedRequest] = []
        while rest:
            keep: list[QueuedRequest] = []
            for r in rest:
                u = client_key(r)
                if d[u] > 0:
                    d[u] -= r.uncached_len
                    log(real, u, d[u])
                    unplaced[u] -= 1
                    if not unplaced[u]:  # its queue empties here: it leaves, deficit reset
                        log(real, u, 0.0)
                    self._replay.placed(r)
                    out.append(r)
                else:
                    keep.append(r)
            if len(keep) == len(rest):
                backlogged = {client_key(r) for r in keep}
                m = min(int(-d[u] // q) + 1 for u in backlogged)
                for u in backlogged:
                    d[u] += m * q
                    log(real, u, d[u])
            rest = keep
        return out

    def incremental_order(self):
        """Fast path (``fairsim.policies.incremental``): per-client LPM queues and the clients
        with credit kept sorted across steps (``fairsim.policies.credit_fast.DLPMOrder``)."""
        from fairsim.policies.credit_fast import DLPMOrder
        return DLPMOrder(self)

    def on_admitted(self, admitted: Sequence[QueuedRequest], now: float) -> None:
        """Advance the deficits through the admitted prefix of the last order."""
        self._replay.commit(self._replay.admitted_prefix(admitted))
