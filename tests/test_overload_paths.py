"""Engine shortcuts for long queues change nothing (issue 13).

- ``HookedBlockPool`` leaves operations the hook does not observe to ``BlockPool``'s own methods.
- Skipping PEEK's order in steps that cannot admit (as for every other policy) keeps its tables.
"""

from __future__ import annotations

import pandas as pd

from fairsim.costmodel import load_profile
from fairsim.policies import make_policy
from fairsim.policies.eviction import ProtectWaitingHits
from fairsim.scenarios import build_scenario
from fairsim.sim import engine as engine_mod
from fairsim.sim import simulate
from fairsim.sim.block_pool import BlockPool
from fairsim.sim.config import EngineConfig
from fairsim.sim.hooked_pool import HookedBlockPool

PROFILE = load_profile("a6000-llama3.1-8b-vllm-prior")


def _rag(n=300):
    rag = build_scenario("rag", PROFILE, seed=5)
    longest = max(r.prompt_len for r in rag.requests)
    return rag.requests[:n], EngineConfig(kv_tokens=3 * longest)


def test_peek_same_tables_when_ordering_every_step(monkeypatch):
    """PEEK's order is skipped in steps that cannot admit, as every policy's: its protection is
    only refreshed in steps that admit, so ordering every step (the old engine) changes nothing."""
    requests, engine = _rag()
    skipped = simulate(requests, make_policy("peek", PROFILE), PROFILE, engine, fast_order=False)
    schedule = engine_mod.Engine._schedule
    extra = []

    def every_step(self, now):
        running = self._running
        remaining = sum(r.req.prompt_len + r.generated - r.computed for r in running)
        if self._waiting and not (remaining < self.config.budget_tokens
                                  and len(running) < self.config.max_num_seqs):
            extra.append(list(self._order_waiting(now)))  # what the old engine computed, unused
        return schedule(self, now)

    monkeypatch.setattr(engine_mod.Engine, "_schedule", every_step)
    every = simulate(requests, make_policy("peek", PROFILE), PROFILE, engine, fast_order=False)
    assert len(extra) > 20  # steps that cannot admit, with requests waiting
    pd.testing.assert_frame_equal(skipped.requests, every.requests, check_exact=True)
    pd.testing.assert_frame_equal(skipped.steps, every.steps, check_exact=True)


class _Observer(ProtectWaitingHits):
    def __init__(self):
        super().__init__()
        self.cached = []

    def on_cache(self, block_id, key):
        self.cached.append(key)


def test_hooked_pool_calls_only_the_hooks_it_has():
    plain = HookedBlockPool(8, ProtectWaitingHits())
    for name in ("cache", "touch", "free", "_evict"):
        assert getattr(plain, name).__func__ is getattr(BlockPool, name)
    observed = HookedBlockPool(8, _Observer())
    assert observed.cache.__func__ is HookedBlockPool.cache
    assert observed.touch.__func__ is BlockPool.touch  # _Observer has no on_touch
    (b,) = observed.allocate(1)
    observed.cache(b, "k0")
    assert observed.hook.cached == ["k0"] and observed.is_cached("k0")
