"""fairsim.analysis.reuse: the one-pass LRU hit-rate curve against hand counts and replays."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from fairsim.analysis.reuse import lru_hit_curve
from fairsim.costmodel import Profile
from fairsim.policies import make_policy
from fairsim.sim import EngineConfig, simulate
from fairsim.sim.block_pool import BlockPool
from fairsim.sim.keys import blocks_for, engine_block_keys
from fairsim.types import Request
from tests.strategies import BLOCK, traces


def req(i: int, t: float, prompt: int, hashes: tuple[int, ...]) -> Request:
    return Request(f"r{i}", t, prompt, hashes, BLOCK, 1, {})


def pool_replay(requests: list[Request], capacity: int) -> float:
    """Independent replay through the simulator's BlockPool, one request at a time.

    Each request: leading-run lookup capped at (L - 1) // B blocks, touch the hits, allocate the
    rest (evicting from the LRU front), cache every new full block, free deepest first.
    """
    pool = BlockPool(capacity)
    hit_tokens = 0
    for r in sorted(requests, key=lambda r: r.arrival_time):
        keys = engine_block_keys(r, BLOCK)
        hit = pool.lookup_prefix(keys, min(len(keys), (r.prompt_len - 1) // BLOCK))
        pool.touch(hit)
        new = pool.allocate(blocks_for(r.prompt_len, BLOCK) - len(hit))
        blocks = hit + new
        for j in range(len(hit), len(keys)):
            pool.cache(blocks[j], keys[j])
        pool.free(reversed(blocks))
        hit_tokens += len(hit) * BLOCK
    return hit_tokens / sum(r.prompt_len for r in requests)


class TestHandComputed:
    """Three requests of 9 tokens, blocks of 4: r1 = (1, 2), r2 = (1, 3), r3 = (1, 2)."""

    def test_thresholds_and_curve(self):
        # r1 misses everything. Stack after r1: 1, 2; its partial block leaves one keyless block
        # at the front of the free queue, so the next request sees C - 1 hashed slots.
        # r2: block 1 at depth 1 -> threshold 1 + 1 = 2; block 3 unseen. Stack: 1, 3, 2.
        # r3: block 1 at depth 1 -> 2; block 2 at depth 3 -> running max 3 -> threshold 4.
        trace = [req(1, 0.0, 9, (1, 2)), req(2, 1.0, 9, (1, 3)), req(3, 2.0, 9, (1, 2))]
        curve = lru_hit_curve(trace)
        assert curve.thresholds.tolist() == [2, 2, 4]
        assert curve.hit_rate([1, 2, 3, 4, 100]).tolist() == [0, 8 / 27, 8 / 27, 12 / 27, 12 / 27]
        assert curve.infinite_hit_rate == 12 / 27
        for c in (3, 4, 5):  # the capacities that can hold a request (3 blocks)
            assert curve.hit_rate(c) == pool_replay(trace, c)

    def test_hit_capped_at_l_minus_one(self):
        # 8 tokens = two full blocks; a repeat hits only one block (the last token is recomputed).
        trace = [req(1, 0.0, 8, (1, 2)), req(2, 1.0, 8, (1, 2))]
        curve = lru_hit_curve(trace)
        assert curve.thresholds.tolist() == [1]
        assert curve.infinite_hit_rate == 4 / 16

    def test_leading_run_only(self):
        # r3 shares block 1 with r1, which was pushed out; block 5 of its own is new: no hit
        # beyond the first miss even though later keys are unrelated.
        trace = [req(1, 0.0, 9, (1, 2)), req(2, 1.0, 9, (3, 4)), req(3, 2.0, 9, (1, 5))]
        curve = lru_hit_curve(trace)
        # block 1 at r3: stack 3, 4, [keyless], 1, 2 -> depth 3 among hashed + 1 keyless = 4
        assert curve.thresholds.tolist() == [4]
        assert pool_replay(trace, 3) == 0.0
        assert pool_replay(trace, 4) == 4 / 27


class TestAgainstReplay:
    """The curve equals an independent BlockPool replay at every capacity that fits."""

    @settings(max_examples=200, deadline=None)
    @given(traces(max_requests=20), st.integers(0, 12))
    def test_equals_pool_replay(self, trace, extra):
        # Exact unless a fully cached prompt is a multiple of the block size (the duplicate
        # block the stack model does not keep; see the module docstring): keep a partial block.
        trace = [r if r.prompt_len % BLOCK else
                 Request(r.request_id, r.arrival_time, r.prompt_len + 1, r.block_hashes, BLOCK, 1, {})
                 for r in trace]
        capacity = max(blocks_for(r.prompt_len, BLOCK) for r in trace) + extra
        assert lru_hit_curve(trace).hit_rate(capacity) == pool_replay(trace, capacity)

    @settings(max_examples=100, deadline=None)
    @given(traces(max_requests=20), st.integers(0, 12))
    def test_duplicates_are_the_only_gap(self, trace, extra):
        # With block-multiple prompts allowed the curve may over-count by the slots held by
        # duplicate copies: never below the replay, and at most one block per such request.
        capacity = max(blocks_for(r.prompt_len, BLOCK) for r in trace) + extra
        exact = pool_replay(trace, capacity)
        approx = lru_hit_curve(trace).hit_rate(capacity)
        total = sum(r.prompt_len for r in trace)
        dups = sum(1 for r in trace if r.prompt_len % BLOCK == 0)
        assert exact - 1e-12 <= approx <= exact + dups * len(trace) * BLOCK / total + 1e-12

    def test_equals_simulator_when_nothing_overlaps(self):
        # Arrivals 100 s apart on a fast engine: one request at a time, as the curve assumes.
        # Odd requests share a growing prefix of a document; even ones share block 0 only.
        hashes = [tuple(range(1 + i % 5)) if i % 2 else (0, 100 + i) for i in range(40)]
        trace = [req(i, 100.0 * i, BLOCK * len(h) + 1 + i % 3, h) for i, h in enumerate(hashes)]
        profile = Profile("t", "prior", 0.001, 1e-6, 0.0, 0.0, (1, 1000), (0.01, 0.1), budget_tokens=2048)
        curve = lru_hit_curve(trace)
        for cap in (6, 7, 9, 12):
            res = simulate(trace, make_policy("fcfs", profile), profile,
                           EngineConfig(block_size=BLOCK, kv_blocks=cap)).requests
            sim_rate = res["cached_tokens"].sum() / res["prompt_tokens"].sum()
            assert curve.hit_rate(cap) == sim_rate
