"""A block pool whose eviction choice is delegated to a policy's eviction hook.

``BlockPool`` stays the exact vLLM LRU pool and its ``allocate`` hot path is untouched; the engine
builds a ``HookedBlockPool`` only when the policy exposes an ``eviction_hook`` (RAGCache's optional
PGDSF; PEEK's soft protection where the compiled pool is not in use - where it is, that pool makes
PEEK's choice itself, and this class with ``ProtectWaitingHits`` is its reference:
``fairsim.sim.pool_choice.new_block_pool``). The hook protocol is documented in
``fairsim.policies.eviction``. This is a simulator-only departure from vLLM (DESIGN.md rule 2).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import Any

from fairsim.errors import EngineInvariantError, PolicyContractError
from fairsim.sim.block_pool import BlockPool


def _noop(*args: Any) -> None:
    return None


class HookedBlockPool(BlockPool):
    """``BlockPool`` whose ``allocate(n)`` takes the free blocks chosen by ``hook.select``.

    Everything else (lookups, reference counts, the free queue itself) is ``BlockPool``'s; the
    hook only decides *which* free blocks an allocation takes, and is told about caching, hits,
    frees and evictions through its optional ``on_*`` methods.

    Args:
        num_blocks: Usable blocks (>= 1).
        hook: An eviction hook (see ``fairsim.policies.eviction``) with at least ``select``.

    Raises:
        ValueError: ``num_blocks < 1``, or a hook without a ``select(pool, n)`` method.
    """

    def __init__(self, num_blocks: int, hook: Any) -> None:
        super().__init__(num_blocks)
        if not callable(getattr(hook, "select", None)):
            raise ValueError(f"eviction hook {hook!r} needs a select(pool, n) method")
        self.hook = hook
        self._on_cache = getattr(hook, "on_cache", _noop)
        self._on_touch = getattr(hook, "on_touch", _noop)
        self._on_free = getattr(hook, "on_free", _noop)
        self._on_evict = getattr(hook, "on_evict", _noop)
        bind = getattr(hook, "bind", None)
        if bind is not None:
            bind(self)
        # A hook without an on_* method (PEEK's protection has none) leaves that operation to
        # BlockPool's own method: no wrapper and no no-op call per block on the hot path.
        for name, methods in (("on_cache", ("cache", "cache_blocks")), ("on_touch", ("touch",)),
                              ("on_free", ("free",)), ("on_evict", ("_evict",))):
            if not hasattr(hook, name):
                for method in methods:
                    setattr(self, method, getattr(super(), method))

    def allocate(self, n: int) -> list[int]:
        """Take the ``n`` free blocks the hook selects, evicting cached ones.

        Raises:
            ValueError: Fewer than ``n`` free blocks (the caller must check ``num_free`` first).
        """
        free = self._free
        if n > len(free):
            raise ValueError(f"cannot allocate {n} blocks: only {len(free)} free")
        if n <= 0:
            return []
        out = self.hook.select(self, n)
        if not isinstance(out, (list, tuple)):  # (a team's hook: its mistake, named as such)
            raise PolicyContractError(f"eviction hook {type(self.hook).__name__}.select(pool, {n}) returned "
                                      f"{type(out).__name__}, not a list of {n} free block ids "
                                      "(fairsim/policies/eviction.py)")
        if len(out) != n or len(set(out)) != n:
            raise EngineInvariantError(f"eviction hook selected {out} for {n} blocks: need {n} distinct blocks")
        for b in out:
            del free[b]  # KeyError here = the hook picked a block that is not free (a hook bug)
        if self._on_evict is _noop:
            self._claim(out)  # no eviction observer: BlockPool's inlined evictions
            return out
        ref = self.ref_cnt
        for b in out:
            key = self.block_key[b]
            if key is not None:
                self._evict(b, key)
            ref[b] = 1
        return out

    def _evict(self, block_id: int, key: Hashable) -> None:
        super()._evict(block_id, key)
        self._on_evict(block_id, key)

    def touch(self, block_ids: Iterable[int]) -> None:
        """``BlockPool.touch``, then tell the hook about each hit block."""
        block_ids = list(block_ids)
        super().touch(block_ids)
        for b in block_ids:
            self._on_touch(b)

    def cache(self, block_id: int, key: Hashable) -> None:
        """``BlockPool.cache``, then tell the hook."""
        super().cache(block_id, key)
        self._on_cache(block_id, key)

    def cache_blocks(self, block_ids: Sequence[int], keys: Sequence[Hashable], start: int, stop: int) -> None:
        """``cache`` per block (the hook hears each block right after it is cached)."""
        cache = self.cache
        for j in range(start, stop):
            cache(block_ids[j], keys[j])

    def grow_chunks(self, blocks: list[int], keys: Sequence[Hashable], start: int,
                    needs: Sequence[int], stops: Sequence[int]) -> tuple[list[int], list[int], list[int]]:
        """``BlockPool.grow_chunks`` as the per-chunk calls themselves (``allocate``, then
        ``cache_blocks``): the hook chooses each chunk's blocks from the queue as that chunk
        finds it, and hears each operation.

        Raises:
            ValueError: Fewer than ``sum(needs)`` free blocks (nothing is changed then).
        """
        if sum(needs) > len(self._free):
            raise ValueError(f"cannot allocate {sum(needs)} blocks: only {len(self._free)} free")
        used_after: list[int] = []
        cached_after: list[int] = []
        evicted_in: list[int] = []
        for need, stop in zip(needs, stops):
            evictions0 = self.num_evictions
            if need > 0:
                blocks.extend(self.allocate(need))
            if stop > start:
                self.cache_blocks(blocks, keys, start, stop)
                start = stop
            used_after.append(self.num_used)
            cached_after.append(self.num_cached)
            evicted_in.append(self.num_evictions - evictions0)
        return used_after, cached_after, evicted_in

    def free(self, block_ids: Iterable[int]) -> None:
        """``BlockPool.free``, then tell the hook which blocks joined the free queue (in order)."""
        block_ids = list(block_ids)
        super().free(block_ids)
        ref = self.ref_cnt
        for b in block_ids:
            if ref[b] == 0:
                self._on_free(b)
