"""Hand-checked scenarios for the baseline policies (3-6 requests, constant cost model).

Unless stated otherwise: 4-token blocks, every step lasts exactly 1 s (``constant_profile(1.0)``:
no per-token cost), so with that profile ``T_idle(L) = L`` s and ``T(c | h) = 1`` s for
``c <= 2048``. Each expected value is derived in the comment above it.
"""

from __future__ import annotations

import pytest

from fairsim.policies import LPM, PEEK, make_policy
from fairsim.policies.eviction import PGDSFEviction
from fairsim.policies.preble import hit_group
from fairsim.sim import EngineConfig, simulate
from fairsim.sim.hooked_pool import HookedBlockPool
from fairsim.types import QueuedRequest
from tests.utils import constant_profile, make_queued, make_request

PROFILE = constant_profile(1.0)


def run(reqs, name, budget, kv_blocks=100, **params):
    config = EngineConfig(budget_tokens=budget, block_size=4, kv_blocks=kv_blocks)
    res = simulate(reqs, make_policy(name, PROFILE, **params), PROFILE, config)
    return res.requests.set_index("request_id")


def first_scheduled(table):
    return list(table.sort_values(["first_scheduled_s", "first_scheduled_step"]).index)


class TestKLPMScenario:
    """k = 2: admissions alternate between the longest prefix and the oldest request."""

    def test_turns(self):
        # W (t=0, keys 1,2) runs t=0,1 with a 4-token budget (turn 0 = oldest = W; t -> 1).
        # A (t=.5, miss, c=4), B (t=.6) and C (t=.7): D+own block -> h = 8, c = 4; D2 (t=.8) miss.
        reqs = [make_request("W", 0.0, 8, (1, 2)), make_request("A", 0.5, 4),
                make_request("B", 0.6, 12, (1, 2, 30)), make_request("C", 0.7, 12, (1, 2, 40)),
                make_request("D", 0.8, 4)]
        table = run(reqs, "klpm", budget=4, k=2)
        # t=2: turn 1 -> longest (B); t=3: turn 2 -> oldest (A); t=4: turn 3 -> C; t=5: D.
        assert first_scheduled(table) == ["W", "B", "A", "C", "D"]
        # Each takes one 1-s step: TTFT = (start + 1) - arrival.
        assert table["ttft_s"].to_dict() == pytest.approx(
            {"W": 2.0, "B": 2.4, "A": 3.5, "C": 4.3, "D": 5.2})
        # LPM never lets A pass B and C: A is third-last.
        assert first_scheduled(run(reqs, "lpm", budget=4)) == ["W", "B", "C", "A", "D"]


class TestRAGCacheScenario:
    """Descending h / c; equal ratios by arrival."""

    def test_ratio_order(self):
        # W (t=0, keys 1..4) runs t=0,1 (budget 8) and caches 16 tokens.
        # X (t=.5): keys 1..4 + 2 own -> h = 16, c = 8, ratio 2.
        # Y (t=.6): keys 1,2 + own -> h = 8, c = 4, ratio 2 (ties with X: X older).
        # Z (t=.7): keys 1,2 + 1 token -> hit capped at L-1 = 8 tokens, h = 8, c = 1, ratio 8.
        reqs = [make_request("W", 0.0, 16, (1, 2, 3, 4)),
                make_request("X", 0.5, 24, (1, 2, 3, 4, 50, 51)),
                make_request("Y", 0.6, 12, (1, 2, 60)), make_request("Z", 0.7, 9, (1, 2))]
        table = run(reqs, "ragcache", budget=8)
        # t=2: Z (1 token) then X (7-token chunk); budget gone. t=3: X's last token, then Y (4).
        # (X finishing at 4, not 3, shows Z went first: X got only 7 of the 8 tokens at t=2.)
        assert table["first_scheduled_s"].to_dict() == {"W": 0.0, "X": 2.0, "Y": 3.0, "Z": 2.0}
        assert table["ttft_s"].to_dict() == pytest.approx({"W": 2.0, "Z": 2.3, "X": 3.5, "Y": 3.4})
        assert table["cached_tokens"].to_dict() == {"W": 0, "X": 16, "Y": 8, "Z": 8}


class TestPrebleScenario:
    """One hit-ratio group per step, pointer walking down; misfits skipped."""

    def test_groups(self):
        assert [hit_group(h, 20) for h in (0, 1, 2, 4, 16, 19)] == [0, 0, 0, 1, 7, 9]

    def test_one_group_per_step(self):
        # t=0: only W (group 0; pointer 9 walks down to 0, then wraps to 9). W done at 1.
        # P (t=.5, miss, 16 tokens): group 0. Q (t=.6, keys 1..4 + own, 20 tokens): h = 16,
        # 16/20 = 0.8 -> group 7. R (t=.7, keys 1,2, 8 tokens): hit capped at 7 -> 4 tokens,
        # 4/8 = 0.5 -> group 4. Budget 16 would fit P or Q+R in one step, but each step serves
        # one group: t=1 group 7 (Q), t=2 group 4 (R), t=3 group 0 (P).
        reqs = [make_request("W", 0.0, 16, (1, 2, 3, 4)), make_request("P", 0.5, 16),
                make_request("Q", 0.6, 20, (1, 2, 3, 4, 70)), make_request("R", 0.7, 8, (1, 2))]
        table = run(reqs, "preble", budget=16)
        assert first_scheduled(table) == ["W", "Q", "R", "P"]
        assert table["ttft_s"].to_dict() == pytest.approx({"W": 1.0, "Q": 1.4, "R": 2.3, "P": 3.5})

    def test_skips_misfit(self):
        # 5 KV blocks. A, B (16 tokens = 4 blocks each) and C (4 tokens = 1 block) arrive at 0,
        # all group 0. A takes 4 blocks; B needs 4 of the 1 left: skipped; C fits in that 1.
        # A and C finish at 1; B runs t=1 -> 2. FCFS would stop at B, so C would wait until t=1.
        reqs = [make_request("A", 0.0, 16), make_request("B", 0.0, 16), make_request("C", 0.0, 4)]
        preble = run(reqs, "preble", budget=64, kv_blocks=5)
        assert preble["ttft_s"].to_dict() == {"A": 1.0, "B": 2.0, "C": 1.0}
        fcfs = run(reqs, "fcfs", budget=64, kv_blocks=5)
        assert fcfs["ttft_s"].to_dict() == {"A": 1.0, "B": 2.0, "C": 2.0}


class TestPEEKScenario:
    """Order by prefill time saved; soft protection of the blocks the next requests would hit."""

    def test_order_by_saved_time(self):
        # T_idle(L) = 0.01 L, T(c | h) = 0.01 c + 1e-6 c h  ->  saved = h (0.01 - 1e-6 c):
        # A (h 1000, c 100) 9.9; B (h 2000, c 9000) 2.0; C (h 500, c 10) 4.995; D (h 0) 0.
        peek = PEEK(lambda L: 0.01 * L, lambda c, h: 0.01 * c + 1e-6 * c * h)
        q = [make_queued("A", 1000, 100), make_queued("B", 2000, 9000),
             make_queued("C", 500, 10), make_queued("D", 0, 50)]
        assert [r.request_id for r in peek.order(q, 0.0)] == ["A", "C", "B", "D"]
        # LPM would put B first.
        assert [r.request_id for r in LPM().order(q, 0.0)] == ["B", "A", "C", "D"]

    def test_protection_keeps_next_hit(self):
        # 4 KV blocks, budget 12. t=0: P1 (8 tokens, keys b1,b2; saved 8-1 = 7) then P2
        # (4 tokens, key a1; saved 3): P1 gets blocks 0,1 and P2 block 2; both finish at 1, freed
        # deepest first in batch order: free queue [3 (empty), 1 (b2), 0 (b1), 2 (a1)].
        # t=1: X (t=.5, 12-token miss) and Y (t=.6, keys b1,b2 + 1 token: h = 8, c = 1).
        # saved = L - 1: X 11 > Y 8, so X first; budget 12 lets only X run at t=1.
        # Y's would-hit blocks {b1, b2} are protected: X takes 3, 2 (a1), then - still one
        # short - the protected LRU block 1 (b2). Y keeps b1: at t=2 it hits 4 tokens, c = 5.
        # Plain LRU (protect=false) gives X blocks 3, 1, 0: Y hits nothing.
        reqs = [make_request("P1", 0.0, 8, (91, 92)), make_request("P2", 0.0, 4, (81,)),
                make_request("X", 0.5, 12, (71, 72, 73)), make_request("Y", 0.6, 9, (91, 92))]
        table = run(reqs, "peek", budget=12, kv_blocks=4)
        assert first_scheduled(table) == ["P1", "P2", "X", "Y"]
        assert table.loc["Y", "cached_tokens"] == 4
        assert table["ttft_s"].to_dict() == pytest.approx({"P1": 1.0, "P2": 1.0, "X": 1.5, "Y": 2.4})
        lru = run(reqs, "peek", budget=12, kv_blocks=4, protect=False)
        assert lru.loc["Y", "cached_tokens"] == 0


class TestPGDSF:
    """PGDSF: lowest Clock + Frequency x Cost / Size leaf first."""

    def test_leaf_and_priority(self):
        # Cost T(4 | h) = 4 + h: a1 (depth 0) 4, a2 (depth 1) 8, b1 (depth 0) 4; Size 4.
        hook = PGDSFEviction(lambda c, h: c + h)
        pool = HookedBlockPool(3, hook)
        hook.attach(4, [("a1", "a2"), ("b1",)])
        assert pool.allocate(3) == [0, 1, 2]  # empty blocks, LRU order
        for b, k in zip([0, 1, 2], ["a1", "a2", "b1"]):
            pool.cache(b, k)
        pool.touch([2])
        pool.touch([2])  # b1: frequency 3 -> priority 3 * 4 / 4 = 3
        pool.free([1, 0])
        pool.free([2, 2, 2])
        # a2: 1 * 8 / 4 = 2 (leaf); a1: 1 (but a2 is its cached child); b1: 3. Evict a2.
        assert pool.allocate(1) == [1]
        assert hook.clock == 2.0
        # Now a1 is a leaf with priority 1 < b1's 3.
        assert pool.allocate(1) == [0]
        assert pool.is_cached("b1") and not pool.is_cached("a1")


class TestLPMSwitches:
    """SGLang fidelity switches of LPM."""

    def test_no_resort_above_128(self):
        # 100 waiting (<= 128): sorted by h, longest first. Then 30 more arrive (130 > 128) and
        # every h changes: the previous order is kept, new arrivals appended in arrival order.
        lpm = LPM(sglang_sort_limit=True)
        old = [make_queued(f"r{i:03d}", h=i, c=10, arrival=float(i)) for i in range(100)]
        first = [r.request_id for r in lpm.order(old, 200.0)]
        assert first == [f"r{i:03d}" for i in range(99, -1, -1)]
        flipped = [make_queued(f"r{i:03d}", h=1000 - i, c=10, arrival=float(i)) for i in range(100)]
        new = [make_queued(f"n{i:02d}", h=5000, c=10, arrival=300.0 - i) for i in range(30)]
        second = [r.request_id for r in lpm.order(flipped + new, 400.0)]
        assert second == first + [f"n{i:02d}" for i in range(29, -1, -1)]
        # Without the switch, LPM re-sorts: the new requests (h 5000) go first.
        assert LPM().order(flipped + new, 400.0)[0].request_id == "n29"

    def test_dedup(self):
        # Block size 32, so "shares >= 32 tokens" = shares the first block. A (t=0) and B (t=1)
        # share it and have h = 0 <= 32: B goes last. C (t=2) has h = 64 > 32 and is not
        # checked. D (t=3) shares nothing with A.
        def q(rid, t, h, keys):
            return QueuedRequest(rid, t, 128, h, 128 - h, 0, None, keys, 32)
        reqs = [q("A", 0, 0, (1, 2)), q("B", 1, 0, (1, 3)), q("C", 2, 64, (1, 2)), q("D", 3, 0, (9,))]
        assert [r.request_id for r in LPM(sglang_dedup=True).order(reqs, 5.0)] == ["C", "A", "D", "B"]
        assert [r.request_id for r in LPM().order(reqs, 5.0)] == ["C", "A", "B", "D"]


def test_registered_peek_orders_cold_requests_by_arrival():
    """Reason: with no hits every request saves 0 s, so PEEK must fall back to arrival order
    (the table-vs-model mismatch once ordered cold requests by prompt length)."""
    from fairsim.costmodel import load_profile
    from fairsim.policies import make_policy
    from tests.utils import make_queued

    peek = make_policy("peek", load_profile())
    cold = [make_queued(f"r{i}", 0, L, arrival=float(i)) for i, L in enumerate([3000, 700, 9100, 5123, 1900])]
    assert [r.request_id for r in peek.order(cold[::-1], 10.0)] == ["r0", "r1", "r2", "r3", "r4"]
