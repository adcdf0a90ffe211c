"""PEEK's eviction choice on the compiled block pool (``CompiledBlockPool.protection``) against
its reference, ``HookedBlockPool`` with ``ProtectWaitingHits``.

Operation level: the random operation sequences of ``tests/test_block_pool_compiled.py`` on both
pools sharing one hook, with the protected set replaced, changed by whole runs or emptied between
operations; after each operation the results, errors, free queue, lookups, counters, journal and
callbacks must be the same. Engine level: PEEK's request and step tables, compiled against pure,
exactly: prefill-only on the first conversation requests at the native rate and at 8x, and
colocated with preemptions.
"""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

from fairsim.policies import make_policy
from fairsim.policies.eviction import PGDSFEviction, ProtectWaitingHits
from fairsim.sim import EngineConfig
from fairsim.sim.block_pool import BlockPool
from fairsim.sim.pool_choice import PROTECTED_LAST, compiled_rule, new_block_pool
from fairsim.sim.engine import Engine
from fairsim.sim.hooked_pool import HookedBlockPool
from tests.test_block_pool_compiled import (CONVERSATION, PROFILE, Compiled, _compiled_pool_is_built,  # noqa: F401
                                            _Observed, _pure, _same_tables, random_operations)
from tests.utils import rag_preempting


@settings(max_examples=400, deadline=None)
@given(st.integers(1, 9), st.data())
def test_random_operations_match_the_hooked_pool(num_blocks, data):
    hook = ProtectWaitingHits()
    compiled = Compiled(num_blocks)
    compiled.protection = hook
    random_operations([_Observed(HookedBlockPool(num_blocks, hook)), _Observed(compiled)], data, hook)


def _abc_freed_bc_protected():
    """Both pools of 5 blocks after a request took 0, 1, 2 (cached a, b, c) and freed them deepest
    first, with b and c protected: (pool, hook) per pool, the hooked one first."""
    for pool in (HookedBlockPool(5, ProtectWaitingHits()), Compiled(5)):
        hook = getattr(pool, "hook", None) or ProtectWaitingHits()
        pool.protection = hook
        blocks = pool.allocate(3)
        pool.cache_blocks(blocks, "abc", 0, 3)
        pool.free(reversed(blocks))
        assert pool.free_queue() == [3, 4, 2, 1, 0]  # 3, 4 never used, then c, b, a
        hook.protect([("b", "c")])
        yield pool, hook


def test_hand_computed_protected_last():
    # The queue is 3, 4 (never used), 2 (c), 1 (b), 0 (a). With b and c protected, 4 blocks are
    # 3, 4, 0 (unprotected, LRU), then 2 (c, the older protected one): a and c evicted, b kept.
    for pool, hook in _abc_freed_bc_protected():
        assert hook.protected == {"b": 1, "c": 1}
        assert pool.allocate(4) == [3, 4, 0, 2]
        assert (pool.num_evictions, pool.is_cached("b"), pool.is_cached("a"), pool.is_cached("c")) == (2, True, False,
                                                                                                       False)


def test_burst_takes_one_sequence_in_chunk_order():
    # Same start (a, b, c cached; b, c protected); a burst of 1 + 2 + 1 blocks caching x, y, z, w
    # as it goes: the chunks take 3 | 4, 0 | 2 of the one sequence, as the per-chunk allocate
    # calls do. Cached after each: 3 + x = 4; - a + y + z = 5; - c + w = 5.
    for pool, hook in _abc_freed_bc_protected():
        grown: list[int] = []
        assert pool.grow_chunks(grown, "xyzw", 0, [1, 2, 1], [1, 3, 4]) == ([1, 3, 4], [4, 5, 5], [0, 1, 1])
        assert grown == [3, 4, 0, 2] and pool.free_queue() == [1]
        assert pool.lookup_prefix("xyzw", 4) == [3, 4, 0, 2] and pool.is_cached("b")


def test_empty_protected_set_is_lru():
    pool = Compiled(4)
    pool.protection = ProtectWaitingHits()
    pool.cache_blocks(pool.allocate(2), "ab", 0, 2)
    pool.free([1, 0])
    assert pool.allocate(3) == [2, 3, 1]


# -- selection ---------------------------------------------------------------------------------------
class _ObservingProtection(ProtectWaitingHits):
    def on_evict(self, b, key):
        pass


def test_selection_compiled_only_for_a_declared_rule_without_notifications():
    assert ProtectWaitingHits.pool_rule == PROTECTED_LAST and compiled_rule(ProtectWaitingHits())
    assert not compiled_rule(PGDSFEviction(lambda c, h: 1.0)) and not compiled_rule(_ObservingProtection())
    hook = ProtectWaitingHits()
    with _pure(None):
        pool = new_block_pool(3, hook)
        assert type(pool) is Compiled and pool.protection is hook
        assert type(new_block_pool(3, PGDSFEviction(lambda c, h: 1.0))) is HookedBlockPool
        assert type(new_block_pool(3, _ObservingProtection())) is HookedBlockPool
        assert type(new_block_pool(3)) is Compiled and new_block_pool(3).protection is None
    with _pure("1"):
        assert type(new_block_pool(3, hook)) is HookedBlockPool and type(new_block_pool(3)) is BlockPool


def test_engine_gives_peek_the_compiled_pool_and_pgdsf_the_hooked_one():
    from fairsim.scenarios import build_scenario

    reqs = build_scenario("rag", PROFILE, seed=2).requests[:5]
    with _pure(None):
        peek = make_policy("peek", PROFILE)
        pool = Engine(reqs, peek, PROFILE, EngineConfig()).pool
        assert type(pool) is Compiled and pool.protection is peek.eviction_hook
        assert type(Engine(reqs, make_policy("ragcache", PROFILE, pgdsf=True), PROFILE, EngineConfig()).pool) \
            is HookedBlockPool
    with _pure("1"):
        assert type(Engine(reqs, make_policy("peek", PROFILE), PROFILE, EngineConfig()).pool) is HookedBlockPool


# -- engine level ------------------------------------------------------------------------------------
def _conversation(n: int, scale: float):
    from fairsim.traces.formats import read_trace

    return [dataclasses.replace(r, arrival_time=scale * r.arrival_time)
            for r in list(read_trace(CONVERSATION).requests)[:n]]


def _protection_matters(reqs, config, protected):
    """PEEK without protection (the plain pool) decides differently: the protected choice was
    exercised, not only LRU."""
    with _pure(None):
        from fairsim.sim import simulate

        plain = simulate(reqs, make_policy("peek", PROFILE, protect=False), PROFILE, config)
    assert not plain.steps.equals(protected.steps)


@pytest.mark.skipif(not CONVERSATION.exists(), reason="shared conversation trace not present")
@pytest.mark.parametrize("scale", [1.0, 8.0])
def test_conversation_prefill_only(scale):
    reqs = _conversation(2000, scale)
    config = EngineConfig(kv_blocks=451)
    res = _same_tables(reqs, "peek", config)
    assert res.steps["evictions"].sum() > 0
    if scale == 1.0:  # at 8x the queue is short: these requests' protection changes no choice
        _protection_matters(reqs, config, res)


def test_colocated_with_preemptions():
    reqs, config = rag_preempting(PROFILE)
    res = _same_tables(reqs, "peek", config)
    assert res.requests["preemptions"].sum() > 0


@pytest.mark.skipif(not CONVERSATION.exists(), reason="shared conversation trace not present")
def test_conversation_colocated_time_scale_8():
    reqs = _conversation(1500, 8.0)
    config = EngineConfig(kv_blocks=451, mode="colocated")
    res = _same_tables(reqs, "peek", config)
    assert res.steps["evictions"].sum() > 0 and res.requests["preemptions"].sum() > 0
    _protection_matters(reqs, config, res)
