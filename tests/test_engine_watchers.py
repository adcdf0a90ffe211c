"""The engine's watcher map (``Engine._rewatch``): a waiting request watches only the keys whose
change can change the prefix hit its snapshot shows, and that is enough.

Checked at the start of every step (before the policy reads snapshots) on random small traces
with shared prefixes and small caches (hypothesis), with the reference ordering (snapshots
trusted until a watched key changes, no lazy journal):

- every waiting request's cached snapshot shows the hit the cache gives now (no stale snapshot
  survives a cache event: the invalidation is complete);
- a waiting request with a snapshot of ``h`` hit blocks watches exactly ``keys[:min(h + 1,
  max_hit_blocks)]``, one without a snapshot watches nothing, and the map holds nothing else.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings

from fairsim.policies import make_policy
from fairsim.sim import Engine
from fairsim.sim.lazy_hits import NO_KEY, watching
from tests.strategies import simulations

CONVERSATION = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces" / "conversation_trace.jsonl"


@pytest.fixture(autouse=True, scope="module")
def _watched_path():
    """The watched path on every trace: where no two requests share a first block the engine
    watches nothing (``first_keys_unique``; ``tests/test_hit_free.py`` compares the two)."""
    from fairsim.sim import engine as engine_module

    with pytest.MonkeyPatch.context() as m:
        m.setattr(engine_module, "first_keys_unique", lambda lives: False)
        yield


def _check(engine: Engine) -> int:
    pool, bs = engine.pool, engine.block_size
    expected: dict = {}
    checked = 0
    for live in engine._waiting.values():
        if live.snap is None:
            assert live.watched == 0 or live.watched <= live.max_hit_blocks
        else:
            now_hit = pool.count_prefix(live.keys, live.max_hit_blocks)
            assert live.snap.cached_len == now_hit * bs, live.req.request_id
            checked += 1
            h = live.snap.cached_len // bs
            assert live.watched == min(h + 1, live.max_hit_blocks)
        for key in live.keys[: live.watched]:
            expected.setdefault(key, set()).add(live)
    assert {k: set(watching(v)) for k, v in engine._watchers.items()} == expected
    return checked


@pytest.mark.parametrize("name", ["lpm", "suf", "peek", "drr"])
@settings(max_examples=60, deadline=None)
@given(sim=simulations(max_requests=10))
def test_watched_keys_cover_every_hit_change(name, sim):
    requests, profile, config = sim
    engine = Engine(requests, make_policy(name, profile), profile, config, fast_order=False)
    seen, result = _run_checked(engine, _check)
    assert len(seen) == len(result.steps)


def _run_checked(engine: Engine, check) -> tuple[list[int], object]:
    """Run ``engine`` with ``check(engine)`` at the start of every step; its results and the
    run's. Every request is served and nothing stays watched.

    Every step goes through ``_schedule`` (no chunk burst: its steps make the same pool calls,
    ``tests/test_chunk_burst.py``), so the check sees each one."""
    engine.fast_chunks = False
    schedule = engine._schedule
    seen = []

    def checked_schedule(now):
        seen.append(check(engine))
        return schedule(now)

    engine._schedule = checked_schedule
    result = engine.run()
    assert len(result.requests) == len(engine._all)
    assert engine._watchers == {}  # every request left the queue: nothing watched
    return seen, result


def test_hit_grows_one_key_at_a_time():
    """Hand-made, on the engine's pool: a waiting request with keys k0..k4 watches its hit and the
    next key; caching that key invalidates its snapshot, caching a key further on does not."""
    from fairsim.costmodel import load_profile
    from fairsim.sim import EngineConfig
    from tests.utils import make_request

    profile = load_profile("a6000-llama3.1-8b-vllm-prior")
    b = make_request("b", 0.0, 21, hashes=(1, 2, 7, 8, 9), block=4)  # 5 full blocks, hit <= 5
    engine = Engine([b], make_policy("suf", profile), profile,
                    EngineConfig(block_size=4, kv_blocks=16), fast_order=False)
    pool, live = engine.pool, engine._all[0]
    engine._waiting[live] = live
    engine._watch(live)
    assert live.watched == 0 and engine._watchers == {}

    def cache(j):
        (block,) = pool.allocate(1)
        pool.cache(block, live.keys[j])

    snap = engine._snapshot(live)
    assert (snap.cached_len, live.watched) == (0, 1)  # k0 missing: only k0 can change the hit
    cache(3)  # k3: not watched, the hit stays 0
    assert live.snap is snap
    cache(0)  # k0: watched, the hit is now 1 block
    assert live.snap is None
    snap = engine._snapshot(live)
    assert (snap.cached_len, live.watched) == (4, 2)
    assert set(engine._watchers) == set(live.keys[:2])
    cache(1)  # k1 -> hit k0, k1 (k2 missing; k3 cached does not count)
    assert live.snap is None
    snap = engine._snapshot(live)
    assert (snap.cached_len, live.watched) == (8, 3)
    engine._unwatch(live)
    assert live.watched == 0 and engine._watchers == {}


def _check_lazy(engine: Engine) -> int:
    """Lazy hits (``LazyHits.key_changed``): the map keeps what can still matter to the order."""
    lazy, bs = engine._lazy, engine.block_size
    waiting = {live for live in engine._waiting.values()}
    checked = 0
    for live in engine._waiting.values():
        lid = live
        if live.snap is not None:
            # A snapshot (start of a step: as of the cache then) watches its hit and next key.
            h = live.snap.cached_len // bs
            assert live.watched == min(h + 1, live.max_hit_blocks)
            assert live.next_key == (live.keys[h] if h < live.max_hit_blocks else NO_KEY)
            for key in live.keys[: live.watched]:
                assert lid in watching(engine._watchers[key]), (live.req.request_id, key)
            checked += 1
        elif live.next_key is not NO_KEY and lid not in lazy.bounded:
            # Stale, not keyed by its largest hit: its next key's caching must still reach it.
            assert lid in watching(engine._watchers[live.next_key]), live.req.request_id
            checked += 1
    for key, bucket in engine._watchers.items():
        assert type(bucket) is not dict or len(bucket) > 0  # no empty watcher sets
        for lid, live in watching(bucket).items():
            assert lid in waiting and key in live.keys[: live.watched]
    return checked


def _run_lazy_checked(engine: Engine) -> int:
    assert engine._lazy is not None
    return sum(_run_checked(engine, _check_lazy)[0])


@pytest.mark.parametrize("name", ["fairway", "fairway-deadline", "drr", "vtc"])
@settings(max_examples=60, deadline=None)
@given(sim=simulations(max_requests=10))
def test_lazy_watchers_keep_what_can_change_the_order(name, sim):
    requests, profile, config = sim
    _run_lazy_checked(Engine(requests, make_policy(name, profile), profile, config))


@pytest.mark.parametrize("name", ["fairway", "drr"])
def test_lazy_watchers_under_overload(name):
    """A slice of the conversation trace at its native rate (hundreds waiting, shared prefixes
    cached and evicted): the map stays exact at every step and stale watchers are dropped."""
    from fairsim.costmodel import load_profile
    from fairsim.sim import EngineConfig
    from fairsim.traces.formats import read_trace

    if not CONVERSATION.exists():
        pytest.skip("shared conversation trace not present")
    profile = load_profile("a6000-llama3.1-8b-vllm-prior")
    requests = list(read_trace(CONVERSATION).requests)[:800]
    engine = Engine(requests, make_policy(name, profile), profile, EngineConfig(kv_blocks=451))
    drops = 0
    key_changed = engine._lazy.key_changed

    def counting(key):
        nonlocal drops
        before = sum(len(watching(b)) for b in engine._watchers.values())
        key_changed(key)
        drops += max(0, before - sum(len(watching(b)) for b in engine._watchers.values()))

    engine.pool.on_key_change = counting
    assert _run_lazy_checked(engine) > 1000
    assert drops > 100  # the case is exercised: stale watchers left the map
