"""Reading a kept order whose stored snapshots lazy hits may have made stale."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from fairsim.types import QueuedRequest


def resolve_stale(items: dict[str, QueuedRequest], stale: set[str],
                  resolve: Callable[[QueuedRequest], QueuedRequest]) -> Iterator[QueuedRequest]:
    """``items``' snapshots in their order, each whose id is in ``stale`` replaced (in ``items``
    too) by ``resolve``'s, this step's (``fairsim.sim.lazy_hits``), and unmarked as it is reached.

    Used by ``StaleArrivalOrder`` (Preble's lanes) and SGLang's ``KeptOrder``: a value change
    only, so the iteration over ``items`` stays valid."""
    for rid, q in items.items():
        if rid in stale:
            stale.discard(rid)
            q = items[rid] = resolve(q)
        yield q
