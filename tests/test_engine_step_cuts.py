"""The compiled block pool's ``watched`` filter with a dict map (the engine's watcher map, often
empty) calls ``on_key_change`` for the same keys in the same order as the reference pool, also when
the callback empties or shrinks the map in the middle of a call."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairsim.sim.block_pool import BlockPool

_block_pool_c = pytest.importorskip("fairsim.sim._block_pool_c")

KEYS = list(range(12))


def _calls(pool_class, watched_keys, drop_on_call, ops):
    """Run ``ops`` on a fresh pool of ``pool_class`` with ``watched`` a dict of ``watched_keys``;
    the callback records the key and, where ``drop_on_call``, deletes every watched key (the map
    becomes empty mid-call, as when the last waiting request is dropped from it)."""
    pool = pool_class(6)
    watched = {k: {} for k in watched_keys}
    calls = []

    def notify(key):
        calls.append(key)
        if drop_on_call:
            watched.clear()

    pool.on_key_change = notify
    pool.watched = watched
    held = []
    for op, a, b in ops:
        if op == "alloc" and a <= pool.num_free:
            blocks = pool.allocate(a)
            keys = [KEYS[(b + i) % len(KEYS)] for i in range(a)]
            if not any(pool.is_cached(k) for k in keys):
                pool.cache_blocks(blocks, keys, 0, a)
            held.append(blocks)
        elif op == "free" and held:
            pool.free(reversed(held.pop(a % len(held))))
    return calls, pool.num_evictions, pool.num_cached


@settings(max_examples=150, deadline=None)
@given(watched_keys=st.sets(st.sampled_from(KEYS)), drop=st.booleans(),
       ops=st.lists(st.tuples(st.sampled_from(["alloc", "free"]), st.integers(0, 3), st.integers(0, 11)),
                    max_size=40))
def test_dict_watched_filter_as_reference(watched_keys, drop, ops):
    want = _calls(BlockPool, watched_keys, drop, ops)
    assert _calls(_block_pool_c.CompiledBlockPool, watched_keys, drop, ops) == want


def test_empty_dict_watches_nothing_and_a_key_is_reported():
    for cls in (BlockPool, _block_pool_c.CompiledBlockPool):
        assert _calls(cls, set(), False, [("alloc", 2, 0), ("free", 0, 0), ("alloc", 3, 5)])[0] == []
        # Block keys 0, 1 cached (0 reported); freed; then 3 blocks of keys 5-7 evict both LRU
        # blocks (0 reported again on its eviction).
        got = _calls(cls, {0}, False, [("alloc", 2, 0), ("free", 0, 0), ("alloc", 6, 5)])
        assert got == ([0, 0], 2, 6)
