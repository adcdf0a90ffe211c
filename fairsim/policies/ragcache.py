"""RAGCache ordering: highest reuse ratio ``h / c`` first (optionally with PGDSF replacement)."""

from __future__ import annotations

from collections.abc import Sequence

from fairsim.policies.base import param_text
from fairsim.types import QueuedRequest
from fairsim.policies.space import Choice


class RAGCache:
    """Cache-aware reordering of RAGCache.

    Ordering contract (POLICIES.md "RAGCache ordering"): descending reuse ratio ``h / c``
    (cached prefix tokens over tokens still to compute, ``c >= 1``) - the first term of Fairway's
    Fast-lane score, with no wait term. Ties by earlier ``arrival_time``, then ``request_id``.
    Stateless.

    Source: Jin et al., "RAGCache: Efficient Knowledge Caching for Retrieval-Augmented
    Generation" (cache-aware reordering, and PGDSF replacement). The paper's reordering ranks by
    cached over computation length; POLICIES.md takes exactly ``h / c`` with the engine's ``c``.

    Optional (off by default): PGDSF cache replacement in the simulator (``pgdsf=True``), see
    ``fairsim.policies.eviction.PGDSFEviction``: priority ``Clock + Frequency x Cost / Size`` per
    cached block, the lowest-priority leaf evicted first. The live vLLM hook only reorders, so it
    cannot run this option.

    Args:
        prefill_time: ``T(c | h)`` in seconds (``Profile.prefill_time``); needed only with
            ``pgdsf=True`` (the recompute cost of a block given its prefix).
        pgdsf: Use PGDSF instead of LRU eviction in the simulator.

    Raises:
        ValueError: ``pgdsf=True`` without ``prefill_time``.
    """

    name = "ragcache"
    search_space = {"pgdsf": Choice((False, True))}  # fairsim tune: PGDSF eviction on or off

    def __init__(self, prefill_time=None, *, pgdsf: bool = False) -> None:
        if not isinstance(pgdsf, bool):
            raise ValueError(f"RAGCache pgdsf={param_text(pgdsf)}: need true or false")
        self.eviction_hook = None
        if pgdsf:
            if prefill_time is None:
                raise ValueError("RAGCache pgdsf=true needs the profile's prefill_time; build it "
                                 "with make_policy('ragcache', profile, pgdsf=True)")
            from fairsim.policies.eviction import PGDSFEviction

            self.eviction_hook = PGDSFEviction(prefill_time)

    def order(self, waiting: Sequence[QueuedRequest], now: float) -> list[QueuedRequest]:
        """Return ``waiting`` by descending ``h / c`` (a permutation of the input)."""
        return sorted(
            waiting,
            key=lambda r: (-r.cached_len / max(r.uncached_len, 1), r.arrival_time, r.request_id),
        )

    def incremental_order(self):
        """Fast path (``fairsim.policies.incremental``): ``h / c`` is a function of the snapshot,
        so the keys are kept sorted across steps."""
        from fairsim.policies.incremental import SortedKeyOrder
        return SortedKeyOrder(lambda r: (-r.cached_len / max(r.uncached_len, 1), r.arrival_time, r.request_id))
