"""LPM: longest prefix match first (SGLang ``--schedule-policy lpm``)."""

from __future__ import annotations

from collections.abc import Sequence

from fairsim.policies.base import arrival_key, param_text
from fairsim.types import QueuedRequest
from fairsim.policies.space import Choice

SGLANG_SORT_LIMIT = 128
"""SGLang stops prefix-sorting above this many waiting requests (``_determine_active_policy``)."""

SGLANG_DEDUP_TOKENS = 32
"""SGLang's in-batch thresholds: requests with ``h <= 32`` that share ``>= 32`` tokens with an
earlier queued request are deprioritized (``IN_BATCH_PREFIX_CACHING_*_THRESHOLD``)."""


class LPM:
    """Longest prefix match.

    Ordering contract: descending cached prefix ``h`` (``cached_len``); ties by earlier
    ``arrival_time``, then ``request_id``. Stateless by default.

    Source: SGLang's ``SchedulePolicy`` with ``lpm`` (POLICIES.md "LPM"). SGLang's stable sort keeps
    the previous step's order among equal ``h``; we break ties by arrival instead so the order is a
    function of the current queue alone.

    Optional SGLang-fidelity switches (off by default):

    - ``sglang_sort_limit``: above 128 waiting requests, do not re-sort: keep the previous step's
      order (of the requests still waiting) and append new arrivals at the back in arrival order
      (SGLang switches to its no-op FCFS there). State: the previous order's request ids.
    - ``sglang_dedup``: in-batch de-duplication. Walking the queue in arrival order, a request with
      ``h <= 32`` tokens that shares ``>= 32`` prefix tokens with an earlier walked request that
      kept its place goes last (deprioritized ones keep arrival order among themselves). Shared
      tokens are measured in whole blocks (``QueuedRequest.block_keys``/``block_size``): a
      partial block of shared tokens is not seen, so with 512-token blocks "shares >= 32 tokens"
      reads "shares the first block". Without block keys in the snapshot nothing is moved.
      Not applied above 128 waiting requests when ``sglang_sort_limit`` is on (SGLang skips it).

    Args:
        sglang_sort_limit: Keep the previous order above 128 waiting requests.
        sglang_dedup: SGLang's in-batch prefix de-duplication.

    Raises:
        ValueError: A switch that is not a bool.
    """

    name = "lpm"
    # fairsim tune: SGLang's two switches, both of which change the order.
    search_space = {"sglang_sort_limit": Choice((False, True)), "sglang_dedup": Choice((False, True))}

    def __init__(self, *, sglang_sort_limit: bool = False, sglang_dedup: bool = False) -> None:
        for key, value in (("sglang_sort_limit", sglang_sort_limit), ("sglang_dedup", sglang_dedup)):
            if not isinstance(value, bool):
                raise ValueError(f"LPM {key}={param_text(value)}: need true or false")
        self.sglang_sort_limit = sglang_sort_limit
        self.sglang_dedup = sglang_dedup
        self._previous: dict[str, int] = {}

    def order(self, waiting: Sequence[QueuedRequest], now: float) -> list[QueuedRequest]:
        """Return ``waiting`` sorted by longest cached prefix first (a permutation of the input)."""
        if self.sglang_sort_limit and len(waiting) > SGLANG_SORT_LIMIT:
            prev = self._previous
            known = sorted((r for r in waiting if r.request_id in prev),
                           key=lambda r: prev[r.request_id])
            new = sorted((r for r in waiting if r.request_id not in prev), key=arrival_key)
            out = known + new
        elif self.sglang_dedup:
            out = self._dedup_order(waiting)
        else:
            out = self._plain_order(waiting)
        if self.sglang_sort_limit:
            self._previous = {r.request_id: i for i, r in enumerate(out)}
        return out

    def incremental_order(self):
        """Fast path (``fairsim.policies.incremental``): keys kept sorted across steps; with
        ``sglang_sort_limit`` SGLang's kept order (``fairsim.policies.sglang.KeptOrder``); ``None``
        (no fast path) with ``sglang_dedup`` alone."""
        if self.sglang_sort_limit:
            from fairsim.policies.sglang import KeptOrder
            return KeptOrder(self._dedup_order if self.sglang_dedup else self._plain_order, clock_free=True)
        if self.sglang_dedup:
            return None
        from fairsim.policies.incremental import SortedKeyOrder, longest_key
        return SortedKeyOrder(longest_key)

    @staticmethod
    def _plain_order(waiting: Sequence[QueuedRequest]) -> list[QueuedRequest]:
        return sorted(waiting, key=lambda r: (-r.cached_len, r.arrival_time, r.request_id))

    def _dedup_order(self, waiting: Sequence[QueuedRequest]) -> list[QueuedRequest]:
        seen: set[tuple] = set()
        keep: list[QueuedRequest] = []
        last: list[QueuedRequest] = []
        for r in sorted(waiting, key=arrival_key):
            if r.cached_len <= SGLANG_DEDUP_TOKENS and r.block_size > 0:
                m = -(-SGLANG_DEDUP_TOKENS // r.block_size)  # blocks covering 32 tokens
                if len(r.block_keys) >= m:
                    prefix = tuple(r.block_keys[:m])
                    if prefix in seen:
                        last.append(r)
                        continue
                    seen.add(prefix)
            keep.append(r)
        keep.sort(key=lambda r: (-r.cached_len, r.arrival_time, r.request_id))
        return keep + last
