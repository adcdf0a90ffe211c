"""LPM: longest prefix match first (SGLang ``--schedule-policy lpm``)."""

from __future__ import annotations

from collections.abc import Sequence

from fairsim.types import QueuedRequest


class LPM:
    """Longest prefix match.

    Ordering contract: descending cached prefix ``h`` (``cached_len``); ties by earlier
    ``arrival_time``, then ``request_id``. Stateless.

    Source: SGLang's ``SchedulePolicy`` with ``lpm`` (POLICIES.md "LPM"). SGLang's stable sort keeps
    the previous step's order among equal ``h``; we break ties by arrival instead so the order is a
    function of the current queue alone. SGLang's fidelity switches (no re-sort above 128 waiting,
    in-batch de-duplication) are not part of this class.
    """

    name = "lpm"

    def order(self, waiting: Sequence[QueuedRequest], now: float) -> list[QueuedRequest]:
        """Return ``waiting`` sorted by longest cached prefix first (a permutation of the input)."""
        return sorted(waiting, key=lambda r: (-r.cached_len, r.arrival_time, r.request_id))
