"""PEEK: rank by prefill time saved by the cache; protect the blocks the next requests would hit."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from fairsim.policies.eviction import ProtectWaitingHits
from fairsim.policies.base import param_text
from fairsim.types import QueuedRequest
from fairsim.policies.space import Choice

_ROUNDED_LIMIT = 100_000  # differences whose rounding the fast path keeps (bounds memory)


class PEEK:
    """Cache-aware ranking by prefill time saved, with soft block protection.

    Ordering contract (POLICIES.md "PEEK"): descending ``saved = T_idle(L) - T(c | h)`` seconds,
    where ``T_idle(L)`` is the idle prefill time of the full prompt cold and ``T(c | h)`` the time
    to compute the ``c`` remaining tokens on top of ``h`` cached ones, both from the cost-model
    profile, rounded to 1 ns so float noise between the two is a tie. The registered ``peek``
    takes ``T_idle(L) = T(L | 0)`` from the same step model, so a cold request saves exactly 0
    (the profile's ``T_idle`` table differs from the model by interpolation error). Ties by earlier
    ``arrival_time``, then ``request_id``. No ordering state across steps.

    Soft protection (simulator option, on by default): the policy's ``eviction_hook`` is a
    ``ProtectWaitingHits``; when an allocation must evict, LRU free blocks that no request among
    the first ``max_num_seqs`` waiting requests (in this order) would hit go first, protected ones
    (LRU) only if still short. It never deadlocks. The live vLLM hook cannot protect blocks (it
    only reorders) and must say so.

    Source: no public source defines PEEK precisely; this is fairsim's specification
    (POLICIES.md), stated here so results can be read against it.

    Args:
        idle_prefill_time: ``T_idle(L)`` in seconds (``Profile.idle_prefill_time``).
        prefill_time: ``T(c | h)`` in seconds (``Profile.prefill_time(new_tokens, cached_tokens)``).
        protect: Soft block protection on (default) or off (plain LRU).

    Raises:
        ValueError: ``protect`` is not a bool.
    """

    name = "peek"
    search_space = {"protect": Choice((False, True))}  # fairsim tune: protecting eviction on or off

    def __init__(
        self,
        idle_prefill_time: Callable[[int], float],
        prefill_time: Callable[[int, int], float],
        *,
        protect: bool = True,
    ) -> None:
        if not isinstance(protect, bool):
            raise ValueError(f"PEEK protect={param_text(protect)}: need true or false")
        self.idle_prefill_time = idle_prefill_time
        self.prefill_time = prefill_time
        self.eviction_hook = ProtectWaitingHits() if protect else None

    def saved(self, r: QueuedRequest) -> float:
        """Prefill time the cache saves this request: ``T_idle(L) - T(c | h)``, seconds.

        Not memoised: the registered ``peek`` is given ``costmodel.PrefillTimes`` (O(1) per
        call), and a memo of ``(c, h)`` pairs does not hit (22,707 distinct pairs in 22,727 calls
        on the conversation trace)."""
        idle = self.idle_prefill_time(r.prompt_len)
        cost = self.prefill_time(r.uncached_len, r.cached_len)
        # Quantised to 1 ns: T_idle and T(c | h) come from different computations (a table and
        # the step model), so a cold request's saving is 0 up to float noise (~1e-16 s); without
        # rounding that noise, not arrival, would break ties among cold requests.
        return round(idle - cost, 9)

    def order(self, waiting: Sequence[QueuedRequest], now: float) -> list[QueuedRequest]:
        """Return ``waiting`` by descending time saved (a permutation of the input)."""
        return sorted(waiting, key=lambda r: (-self.saved(r), r.arrival_time, r.request_id))

    def incremental_order(self):
        """Fast path (``fairsim.policies.incremental``): the saving is a function of the snapshot,
        so the keys are kept sorted across steps, the first ``max_num_seqs`` (what the protection
        reads) in a sorted list and the rest in a heap (``fairsim.policies.peek_order``; its
        compiled twin ``fairsim.policies._credit_c.CompiledHeadHeapOrder`` where built, the
        Python class being the reference, chosen with ``FAIRSIM_PURE_PYTHON=1``)."""
        from fairsim.policies.compiled_twins import compiled_twin
        from fairsim.policies.peek_order import HeadHeapOrder

        idle_time, prefill_time = self.idle_prefill_time, self.prefill_time
        # round(x, 9) of each difference seen: a pure function, and a costly one (decimal
        # rounding), of few distinct arguments (624 differences in 17,730 keys on the
        # conversation trace). 0.0 and -0.0 share an entry: they compare equal, so the order is one.
        rounded: dict[float, float] = {}

        def key(r: QueuedRequest) -> tuple[float, float, str]:
            # ``(-self.saved(r), arrival_time, request_id)`` with ``saved`` inlined (one call per
            # snapshot the engine adds); a subclass overriding ``saved`` gets no fast path
            # (``incremental.MIRRORED``), so the two cannot differ.
            x = idle_time(r.prompt_len) - prefill_time(r.uncached_len, r.cached_len)
            saved = rounded.get(x)
            if saved is None:
                if len(rounded) >= _ROUNDED_LIMIT:
                    rounded.clear()
                saved = rounded[x] = round(x, 9)
            return (-saved, r.arrival_time, r.request_id)

        compiled = compiled_twin("CompiledHeadHeapOrder")  # its compiled twin, where built
        return HeadHeapOrder(key) if compiled is None else compiled(key)
