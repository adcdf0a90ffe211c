"""``BlockPool.grow_chunks`` (the prefill-only chunk burst's pool work in one call) against the
per-chunk calls it replaces: ``allocate`` then ``cache_blocks`` for each chunk, in order.

Everything observable must match: the blocks taken, the lookup table, the free queue, the
counters, the journal, and the sequence of ``on_key_change`` callbacks together with what the
pool answered for that key when it was called (the lazy-hits callback reads ``is_cached``).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from fairsim.errors import EngineInvariantError
from fairsim.policies.eviction import ProtectWaitingHits
from fairsim.sim.block_pool import BlockPool
from fairsim.sim.hooked_pool import HookedBlockPool


def _prepared(num_blocks: int, history: list[tuple[int, list[int]]], hooked: bool) -> BlockPool:
    """A pool after some requests were cached and freed (keys from a small alphabet, so keys
    repeat: duplicate blocks, and keys the burst both evicts and caches)."""
    pool = HookedBlockPool(num_blocks, ProtectWaitingHits()) if hooked else BlockPool(num_blocks)
    for n, keys in history:
        n = min(n, pool.num_free)
        blocks = pool.allocate(n)
        for b, key in zip(blocks, keys):
            if pool.block_key[b] is None:
                pool.cache(b, key)
        pool.free(reversed(blocks))
    return pool


def _observed(pool: BlockPool) -> list[tuple]:
    calls: list[tuple] = []
    pool.on_key_change = lambda key: calls.append((key, pool.is_cached(key)))
    pool.watched = None
    pool.journal = {}
    return calls


def _state(pool: BlockPool) -> tuple:
    return (pool.free_queue(), list(pool.ref_cnt), list(pool.block_key),
            dict(pool._cached), {k: list(v) for k, v in pool._more.items()}, list(pool._cached),
            pool.num_evictions, pool.num_cached, pool.num_used, dict(pool.journal), list(pool.journal))


def _per_chunk(pool: BlockPool, blocks: list[int], keys, start: int, needs, stops):
    rows = []
    for need, stop in zip(needs, stops):
        evictions0 = pool.num_evictions
        if need:
            blocks.extend(pool.allocate(need))
        if stop > start:
            pool.cache_blocks(blocks, keys, start, stop)
            start = stop
        rows.append((pool.num_used, pool.num_cached, pool.num_evictions - evictions0))
    return rows


class TestHandComputed:
    def test_two_chunks_evict_then_cache(self):
        # 4 blocks: 0 and 1 cached as "a", "b" and free (LRU: 2, 3 never used first, then 1, 0).
        pool = BlockPool(4)
        for b, key in zip(pool.allocate(2), "ab"):
            pool.cache(b, key)
        pool.free([1, 0])
        assert pool.free_queue() == [2, 3, 1, 0]
        calls = _observed(pool)
        blocks: list[int] = []
        # Chunk 1 takes blocks 2, 3 and caches "x"; chunk 2 takes 1 (evicting "b"), caches "y", "b".
        used, cached, evicted = pool.grow_chunks(blocks, ("x", "y", "b"), 0, [2, 1], [1, 3])
        assert blocks == [2, 3, 1]
        assert (used, cached, evicted) == ([2, 3], [3, 4], [0, 1])
        # "b" stopped being hittable (evicted) and became hittable again in the same chunk.
        assert calls == [("x", True), ("b", False), ("y", True), ("b", True)]
        assert pool.journal == {"x": False, "b": True, "y": False}
        assert pool.free_queue() == [0] and pool.lookup_prefix(["a"], 1) == [0]

    def test_short_of_blocks_changes_nothing(self):
        pool = BlockPool(3)
        before = (pool.free_queue(), list(pool.ref_cnt))
        with pytest.raises(ValueError, match="cannot allocate 4 blocks: only 3 free"):
            pool.grow_chunks([], ("a",), 0, [2, 2], [1, 1])
        assert (pool.free_queue(), list(pool.ref_cnt)) == before

    def test_a_cached_block_is_an_invariant_error(self):
        pool = BlockPool(2)
        blocks = pool.allocate(1)
        pool.cache(blocks[0], "a")
        with pytest.raises(EngineInvariantError, match="already cached"):
            pool.grow_chunks(blocks, ("a", "b"), 0, [1], [2])


chunk_plans = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), min_size=1, max_size=8)


@settings(max_examples=200, deadline=None)
@given(num_blocks=st.integers(1, 24),
       history=st.lists(st.tuples(st.integers(0, 8), st.lists(st.sampled_from("abcdefgh"), max_size=8)),
                        max_size=6),
       keys=st.lists(st.sampled_from("abcdefghij"), min_size=0, max_size=24),
       plan=chunk_plans, hooked=st.booleans())
def test_same_as_per_chunk_calls(num_blocks, history, keys, plan, hooked):
    keys = tuple(keys)
    needs, stops, n, stop = [], [], 0, 0
    for need, grow in plan:  # stops: non-decreasing, within the blocks held and the keys
        n += need
        stop = min(max(stop, stop + grow), n, len(keys))
        needs.append(need)
        stops.append(stop)
    one, each = _prepared(num_blocks, history, hooked), _prepared(num_blocks, history, hooked)
    if sum(needs) > one.num_free:
        with pytest.raises(ValueError):
            one.grow_chunks([], keys, 0, needs, stops)
        return
    calls_one, calls_each = _observed(one), _observed(each)
    blocks_one: list[int] = []
    blocks_each: list[int] = []
    got = one.grow_chunks(blocks_one, keys, 0, needs, stops)
    want = _per_chunk(each, blocks_each, keys, 0, needs, stops)
    assert list(zip(*got)) == want
    assert blocks_one == blocks_each
    assert calls_one == calls_each
    assert _state(one) == _state(each)


@settings(max_examples=200, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from(["alloc", "cache", "free"]), st.integers(0, 5),
                              st.sampled_from("abcd")), max_size=40))
def test_lookup_returns_the_first_block_still_cached(ops):
    """Keys cached on several blocks (vLLM does not de-duplicate): a lookup returns the earliest
    cached block of those still holding the key, and the key stays hittable until its last
    block is evicted. The model: a list of blocks per key in caching order."""
    pool = BlockPool(6)
    model: dict[str, list[int]] = {}
    held: list[int] = []
    for op, n, key in ops:
        if op == "alloc" and pool.num_free:
            got = pool.allocate(min(max(n, 1), pool.num_free))
            for b in got:  # evicted blocks leave their key's list
                for blocks in model.values():
                    if b in blocks:
                        blocks.remove(b)
            held += got
        elif op == "cache":
            fresh = [b for b in held if pool.block_key[b] is None]
            if fresh:
                pool.cache(fresh[n % len(fresh)], key)
                model.setdefault(key, []).append(fresh[n % len(fresh)])
        elif op == "free" and held:
            pool.free([held.pop(n % len(held))])
        for k in "abcd":
            first = model.get(k) or []
            assert pool.lookup_prefix([k], 1) == first[:1]
            assert pool.is_cached(k) == bool(first)
    assert pool.num_cached == sum(len(v) for v in model.values())
