"""BlockPool: exact eviction order, hits, reference counts."""

import pytest

from fairsim.sim.block_pool import BlockPool


class TestEvictionOrder:
    """LRU free queue, deepest block of a finished request evicted first."""

    def test_free_deepest_first_then_allocate_evicts_tail(self):
        pool = BlockPool(4)
        blocks = pool.allocate(3)  # ids 0,1,2 from the front of the free queue
        assert blocks == [0, 1, 2]
        for b, key in zip(blocks, ["a", "ab", "abc"]):
            pool.cache(b, key)
        pool.free(reversed(blocks))  # request finished: tail (2) first
        # Free queue: 3 (never used), then 2, 1, 0.
        assert pool.free_queue() == [3, 2, 1, 0]
        got = pool.allocate(2)  # takes 3, then evicts 2 ("abc")
        assert got == [3, 2]
        assert pool.num_evictions == 1
        assert not pool.is_cached("abc") and pool.is_cached("ab")
        assert pool.lookup_prefix(["a", "ab", "abc"], 3) == [0, 1]

    def test_touch_removes_from_free_queue(self):
        pool = BlockPool(3)
        b = pool.allocate(1)[0]
        pool.cache(b, "x")
        pool.free([b])
        assert pool.num_free == 3
        pool.touch([b])
        assert pool.num_free == 2 and pool.ref_cnt[b] == 1
        assert pool.allocate(2) == [1, 2]  # b is protected while referenced
        pool.free([b])
        assert pool.free_queue() == [b]

    def test_hit_capped(self):
        pool = BlockPool(4)
        for b, k in zip(pool.allocate(3), "pqr"):
            pool.cache(b, k)
        assert pool.count_prefix(list("pqr"), 2) == 2
        assert pool.count_prefix(list("pxr"), 3) == 1

    def test_overallocate_raises(self):
        with pytest.raises(ValueError, match="only 2 free"):
            BlockPool(2).allocate(3)


class TestKeylessBlocksReusedFirst:
    """Freed blocks without a hash go to the front of the free queue (vLLM ``free_blocks``)."""

    def test_keyless_to_front_hashed_to_back(self):
        pool = BlockPool(5)
        blocks = pool.allocate(3)  # 0, 1, 2; a request whose last block (2) is partial
        pool.cache(0, "a")
        pool.cache(1, "ab")
        pool.free(reversed(blocks))  # deepest first: 2 (keyless), 1, 0
        # vLLM prepends keyless 2 (LIFO reuse), appends hashed 1 then 0 behind 3, 4.
        assert pool.free_queue() == [2, 3, 4, 1, 0]
        assert pool.allocate(1) == [2] and pool.num_evictions == 0


class TestBulkPaths:
    """``cache_blocks`` / bulk eviction in ``allocate``: the per-block effects, in order."""

    def test_cache_blocks_equals_per_block_cache(self):
        keys = ["a", "ab", "a", "abc"]  # a duplicate key: reported once
        bulk, single = BlockPool(6), BlockPool(6)
        events_bulk, events_single = [], []
        bulk.on_key_change, single.on_key_change = events_bulk.append, events_single.append
        blocks = bulk.allocate(4)
        assert single.allocate(4) == blocks == [0, 1, 2, 3]
        bulk.cache_blocks(blocks, keys, 1, 4)
        for j in range(1, 4):
            single.cache(blocks[j], keys[j])
        assert events_bulk == events_single == ["ab", "a", "abc"]
        assert bulk.block_key == single.block_key == [None, "ab", "a", "abc", None, None]
        assert bulk.num_cached == 3
        assert bulk.lookup_prefix(["a", "ab", "abc"], 3) == [2, 1, 3]

    def test_cache_blocks_rejects_a_cached_block(self):
        from fairsim.errors import EngineInvariantError

        pool = BlockPool(2)
        a, b = pool.allocate(2)
        pool.cache(b, "x")
        with pytest.raises(EngineInvariantError, match="block 1 is already cached"):
            pool.cache_blocks([a, b], ["y", "z"], 0, 2)
        assert pool.is_cached("y") and not pool.is_cached("z")

    def test_watched_filters_callbacks_and_journal_records_every_key(self):
        pool = BlockPool(3)
        events = []
        pool.on_key_change = events.append
        pool.watched = {"b": None}
        pool.journal = {}
        blocks = pool.allocate(3)
        pool.cache_blocks(blocks, ["a", "b", "c"], 0, 3)
        assert events == ["b"]
        assert pool.journal == {"a": False, "b": False, "c": False}
        pool.journal = {}
        pool.free(reversed(blocks))  # free queue: c, b, a
        assert pool.allocate(2) == [2, 1]  # evicts "c" then "b"
        assert events == ["b", "b"]
        assert pool.journal == {"c": True, "b": True}
        assert pool.num_evictions == 2 and pool.num_cached == 1 and pool.is_cached("a")


def test_admit_hand_computed():
    # Blocks of 2 tokens. A 4-token prompt: no hit, one chunk of 4 takes blocks 0 and 1 and
    # caches both; the same prefix plus a 5th token hits them both (cap (5 - 1) // 2 = 2), its
    # chunk of 1 (the budget) takes block 2, which is not full; a 10-block prompt misfits.
    pool = BlockPool(4)
    assert pool.admit(("a", "b"), 1, 2, 4, 10, 2) == ([0, 1], 0, 4, 2)
    assert pool.admit(("a", "b"), 2, 3, 5, 1, 2) == ([0, 1, 2], 2, 1, 2)
    assert pool.ref_cnt == [2, 2, 1, 0] and pool.num_free == 1
    assert pool.admit(("x",), 0, 10, 20, 8, 2) == 0  # the hit (0 blocks), nothing changed
    assert pool.ref_cnt == [2, 2, 1, 0] and pool.num_free == 1
