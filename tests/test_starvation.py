"""Starvation from numbers: a backlog of cache misses followed by a stream of cached requests."""

from __future__ import annotations

import pytest

from fairsim.policies import make_policy
from fairsim.sim import EngineConfig, simulate
from tests.utils import constant_profile, make_request

# Hand-made trace, 4-token blocks, 16-token budget, every step exactly 1 s (constant profile):
# - W (t=0): the 32-token document D (8 blocks); computing it caches D for the stream.
# - M1..M3 (t=0.1): 32 tokens each, no shared content: h = 0, c = 32 (two full steps alone).
# - S_i (t=0.2 + i/4): D + 4 own tokens (36 tokens): once D is cached, h = 32 (the hit is capped at
#   L - 1 = 35 tokens -> 8 blocks) and c = 4. Four arrive per second = 16 tokens/s = the budget.
# LPM (h 32 vs 0), RAGCache (h/c 8 vs 0) and PEEK (saved T(36|0) - T(4|32) = 32 us vs 0 for a
# miss, with 1 us per token in its model) put every waiting stream request ahead of the misses, and
# the stream alone fills every step's budget, so the misses run only after the stream ends: their
# worst wait grows by 1 s per 4 more stream requests. FCFS runs W then M1..M3 first (worst miss
# TTFT 7.9 s: M3 runs at t=6,7). Fairway's merge places the oldest miss after at most
# 32/4 + 4 = 12 tokens of stream work: Fast starts at 4*4 = 16, Fair at 32, so Fast places two
# stream requests (ledger 32, then 48 on the tie) and Fair places the miss (8-token chunk). Each
# miss then runs 8 + 16 + 8 tokens over three steps, and the next miss waits one step whose
# leftover 8 tokens go to the two stream requests ahead of it: M1 t=2..4, M2 t=5..7, M3 t=8..10,
# worst TTFT 11 - 0.1 = 10.9 s whatever the stream length. k-LPM (every 4th admission is the
# oldest) and Preble (the pointer reaches the misses' group 0 within ten steps) are bounded too.
DOC = tuple(range(1, 9))
BUDGET = 16
SHORT, LONG = 40, 80  # stream lengths


def trace(stream: int):
    reqs = [make_request("W", 0.0, 32, DOC)]
    reqs += [make_request(f"M{i}", 0.1, 32, tuple(100 * i + j for j in range(8)), klass="miss")
             for i in range(1, 4)]
    reqs += [make_request(f"S{i}", 0.2 + i / 4, 36, DOC + (10_000 + i,), klass="hit")
             for i in range(stream)]
    return reqs


def worst_miss_ttft(name: str, stream: int) -> float:
    profile = constant_profile(1.0)
    config = EngineConfig(budget_tokens=BUDGET, block_size=4, kv_blocks=1000)
    # PEEK ranks by modelled time saved, which is 0 for everyone when tokens cost nothing; its
    # ranking uses a model with a tiny per-token cost (1 us), the engine keeps exact 1 s steps.
    policy_profile = constant_profile(1.0, per_token_s=1e-6) if name == "peek" else profile
    res = simulate(trace(stream), make_policy(name, policy_profile), profile, config)
    return float(res.requests.loc[res.requests["klass"] == "miss", "ttft_s"].max())


class TestStarvation:
    """Cache-greedy orders starve the misses for as long as the stream lasts; fair ones do not."""

    @pytest.mark.parametrize("name", ["lpm", "ragcache", "peek"])
    def test_worst_miss_wait_grows_with_stream(self, name):
        short, long = worst_miss_ttft(name, SHORT), worst_miss_ttft(name, LONG)
        # 40 more stream requests = 10 more full steps ahead of the misses.
        assert long - short >= 0.9 * (LONG - SHORT) / 4, (short, long)
        assert short >= SHORT / 4  # the misses waited out (almost) the whole short stream

    @pytest.mark.parametrize("name", ["fcfs", "fairway", "klpm4", "preble"])
    def test_worst_miss_wait_bounded(self, name):
        short, long = worst_miss_ttft(name, SHORT), worst_miss_ttft(name, LONG)
        # The misses are served while the stream still flows; orders never look ahead, so the
        # two runs agree until the misses are done.
        assert short == long

    def test_fairway_exact(self):
        assert worst_miss_ttft("fairway", LONG) == pytest.approx(10.9)

    def test_fcfs_exact(self):
        # W: t=0,1 (16 tokens each) -> done at 2. M1: t=2,3 -> 4. M2: 4,5 -> 6. M3: 6,7 -> 8;
        # TTFT 8 - 0.1 = 7.9 s.
        assert worst_miss_ttft("fcfs", SHORT) == pytest.approx(7.9)
