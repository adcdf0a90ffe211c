"""Engine shortcuts for long queues change nothing (they exist for speed only).

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
from fairsim.sim import simulation as simulation_mod
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
    only refreshed in steps that admit, so ordering every step (the old engine) changes nothing.
    (Every step through ``_schedule``: ``fast_chunks=False``.)"""
    requests, engine = _rag()
    skipped = simulate(requests, make_policy("peek", PROFILE), PROFILE, engine, fast_order=False,
                       fast_chunks=False)
    extra = []

    class EveryStep(engine_mod.Engine):
        def _schedule(self, now):
            running = self._running
            remaining = sum(r.req.prompt_len + r.generated - r.computed for r in running)
            if self._waiting and not (remaining < self.config.budget_tokens
                                      and len(running) < self.config.max_num_seqs):
                extra.append(list(self._order_waiting(now)))  # what the old engine computed, unused
            return super()._schedule(now)

    # A subclass that simulate() builds (prefill-only): the compiled Engine is an extension
    # type, whose methods cannot be patched.
    monkeypatch.setattr(simulation_mod, "Engine", EveryStep)
    every = simulate(requests, make_policy("peek", PROFILE), PROFILE, engine, fast_order=False,
                     fast_chunks=False)
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


def _conversation_or_flood():
    from pathlib import Path

    from fairsim.traces.formats import read_trace

    path = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces" / "conversation_trace.jsonl"
    if path.exists():
        return list(read_trace(path).requests)[:900], EngineConfig(kv_blocks=300)
    flood = build_scenario("flood", PROFILE, seed=1, num_flood=300, num_miss=8)
    return flood.requests, flood.engine


def test_lazy_snapshots_are_those_of_the_step_start(monkeypatch):
    """Every snapshot the lazy resolver hands out has the hit the cache gave at the step's start
    (recorded here before running chunks and admissions change it), and computed 0."""
    from fairsim.sim import lazy_hits

    starts = {}

    class Recording(engine_mod.Engine):
        def _fast_order(self, now):
            starts["cached"] = set(self.pool._cached)
            return super()._fast_order(now)

    resolve = lazy_hits.LazyHits.resolve
    seen = {"journal": 0, "n": 0}

    def checked(self, q):
        snap = resolve(self, q)
        live = q.handle
        cached = starts["cached"]
        n = 0
        for key in live.keys[: live.max_hit_blocks]:
            if key not in cached:
                break
            n += 1
        assert snap.cached_len == n * self.engine.block_size, q.request_id
        assert snap.num_computed_tokens == 0 and snap.request_id == q.request_id
        seen["n"] += 1
        seen["journal"] += bool(self.journal)
        return snap

    monkeypatch.setattr(simulation_mod, "Engine", Recording)  # simulate() builds it (prefill-only)
    monkeypatch.setattr(lazy_hits.LazyHits, "resolve", checked)
    # The Python methods (the reference): the compiled watcher map resolves in C, which the
    # wrapper above cannot see; tests/test_watch_compiled.py holds it to these methods.
    monkeypatch.setattr(engine_mod, "compiled_watch_class", lambda: None)
    requests, engine = _conversation_or_flood()
    for name in ("fairway", "fairway-carry", "fcfs"):
        simulate(requests, make_policy(name, PROFILE), PROFILE, engine)
    assert seen["n"] > 1000 and seen["journal"] > 100  # resolves after cache changes in the step


def test_lazy_path_is_used_where_offered():
    requests, engine = _rag(50)
    # FCFS's arrival order offers lazy hits but is shown none (uses_prefix_hits = False:
    # Engine._hit_free), so it has no lazy path: nothing to resolve.
    for name, lazy in (("fairway", True), ("fairway-patience", True), ("fcfs", False), ("lpm", False),
                       ("klpm4", True), ("peek", False)):
        e = engine_mod.Engine(requests, make_policy(name, PROFILE), PROFILE, engine)
        assert (e._lazy is not None) is lazy, name
        assert engine_mod.Engine(requests, make_policy(name, PROFILE), PROFILE, engine,
                                 fast_order=False)._lazy is None


def test_key_change_fires_only_when_hittability_changes():
    pool = BlockPool(4)
    events = []
    pool.on_key_change = events.append
    a, b, c = pool.allocate(3)
    pool.cache(a, "k")
    pool.cache(b, "k")  # a duplicate block: hits do not change
    assert events == ["k"]
    pool.free([a, b, c])
    pool.allocate(3)  # evicts c (no key), then a: "k" still hittable through b
    assert events == ["k"] and pool.is_cached("k")
    pool.allocate(1)  # evicts b: "k" is gone
    assert events == ["k", "k"] and not pool.is_cached("k")


def test_hooked_pool_cache_blocks_tells_the_hook_each_block():
    plain = HookedBlockPool(8, ProtectWaitingHits())
    assert plain.cache_blocks.__func__ is BlockPool.cache_blocks  # no on_cache: the bulk path
    observed = HookedBlockPool(8, _Observer())
    assert observed.cache_blocks.__func__ is HookedBlockPool.cache_blocks
    blocks = observed.allocate(3)
    observed.cache_blocks(blocks, ["k0", "k1", "k0"], 0, 3)
    assert observed.hook.cached == ["k0", "k1", "k0"] and observed.num_cached == 3
