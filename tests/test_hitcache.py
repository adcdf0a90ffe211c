"""The live hook's hit cache gives the hit a fresh lookup would, with far fewer lookups.

A stand-in for vLLM's block pool (its hash map's ``insert``/``pop`` are what ``HitCache`` watches;
``vllm/v1/core/block_pool.py``) lets random cache and evict sequences run without vLLM.
"""

from __future__ import annotations

import random
from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from fairsim.live.hitcache import HitCache

BS = 4
GROUP = b"\x00\x00\x00\x00"


class HashMap:
    """``BlockHashToBlockMap``'s two mutators and a lookup, keys = hash + 4-byte group id."""

    def __init__(self) -> None:
        self.cache: dict[bytes, int] = {}

    def insert(self, key, block):
        self.cache[key] = block

    def pop(self, key, block_id):
        return self.cache.pop(key, None)

    def get_one_block(self, key):
        return self.cache.get(key)

    def __len__(self):
        return len(self.cache)


class UnitaryKVCacheCoordinator:
    def __init__(self) -> None:
        self.block_pool = SimpleNamespace(cached_block_hash_to_block=HashMap())
        self.single_type_managers = [FullAttentionManager()]
        self.block_size = BS


class FullAttentionManager:
    use_eagle = False


def _request(rid, hashes, tokens):
    return SimpleNamespace(request_id=rid, block_hashes=list(hashes), num_tokens=tokens)


def _lookup(pool):
    def lookup(req):
        cap = (req.num_tokens - 1) // BS
        n = 0
        for h in req.block_hashes[:cap]:
            if pool.cached_block_hash_to_block.get_one_block(h + GROUP) is None:
                break
            n += 1
        return n * BS

    return lookup


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 100_000))
def test_cached_hits_equal_fresh_lookups(seed):
    rng = random.Random(seed)
    coord = UnitaryKVCacheCoordinator()
    manager = SimpleNamespace(coordinator=coord)
    cache = HitCache(manager)
    assert cache.enabled
    pool = coord.block_pool
    lookup = _lookup(pool)
    universe = [bytes([i]) for i in range(12)]
    # Requests share prefixes: hashes drawn from a small universe, as prefix chains.
    reqs = []
    for i in range(30):
        n = rng.randint(0, 6)
        hashes = [universe[rng.randrange(3)]] + [universe[rng.randrange(12)] for _ in range(n)]
        reqs.append(_request(f"r{i}", hashes, len(hashes) * BS + rng.randint(0, BS)))
    fresh = 0
    for step in range(25):
        for _ in range(rng.randint(0, 4)):  # the pool changes between steps (through the wrapper)
            key = rng.choice(universe) + GROUP
            if rng.random() < 0.5:
                pool.cached_block_hash_to_block.insert(key, step)
            else:
                pool.cached_block_hash_to_block.pop(key, step)
        cache.refresh()
        waiting = [r for r in reqs if rng.random() < 0.9]
        for r in waiting:
            assert cache.get(r, lookup) == lookup(r), (step, r.request_id)
            fresh += 1
        cache.keep_only({r.request_id for r in waiting})
    assert cache.lookups < fresh  # hits were reused


def test_unchanged_pool_means_no_lookups():
    coord = UnitaryKVCacheCoordinator()
    cache = HitCache(SimpleNamespace(coordinator=coord))
    lookup = _lookup(coord.block_pool)
    reqs = [_request(f"r{i}", [bytes([i])], 9) for i in range(100)]
    for _ in range(5):
        cache.refresh()
        for r in reqs:
            cache.get(r, lookup)
    assert cache.lookups == 100
    # Caching request 7's first block refreshes request 7 only.
    coord.block_pool.cached_block_hash_to_block.insert(bytes([7]) + GROUP, 0)
    cache.refresh()
    assert [cache.get(r, lookup) for r in reqs][7] == 4
    assert cache.lookups == 101


def test_reset_prefix_cache_map_replaced():
    coord = UnitaryKVCacheCoordinator()
    cache = HitCache(SimpleNamespace(coordinator=coord))
    lookup = _lookup(coord.block_pool)
    r = _request("a", [b"x"], 9)
    coord.block_pool.cached_block_hash_to_block.insert(b"x" + GROUP, 0)
    cache.refresh()
    assert cache.get(r, lookup) == 4
    coord.block_pool.cached_block_hash_to_block = HashMap()  # what reset_prefix_cache does
    cache.refresh()
    assert cache.get(r, lookup) == 0


def test_other_layouts_always_look_up():
    coord = UnitaryKVCacheCoordinator()
    coord.single_type_managers = [SimpleNamespace(use_eagle=False)]  # e.g. sliding window
    cache = HitCache(SimpleNamespace(coordinator=coord))
    assert not cache.enabled
    lookup = _lookup(coord.block_pool)
    r = _request("a", [b"x"], 9)
    cache.get(r, lookup)
    cache.get(r, lookup)
    assert cache.lookups == 2
