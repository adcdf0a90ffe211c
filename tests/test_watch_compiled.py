"""The compiled watcher-map updates (``fairsim/sim/_watch_c.pyx``, ``CompiledWatch``) are the
pure-Python methods' twins: ``Engine._rewatch``, ``_drop``, ``_unwatch``, ``_snapshot``, ``_make_snapshot``
and ``LazyHits.key_changed``, ``resolve`` and ``start_step``.

- Random operation sequences (hypothesis) on two engines over the same requests, one on the
  reference methods and one on the compiled ones: after every operation the watcher map (keys,
  and each bucket's requests in order), every request's watch fields and snapshot, and the lazy
  path's ``_dirty``, ``raised``, ``bounded``, ``recheck`` and ``resolved`` are the same.
- Whole runs: the request and step tables are equal with and without the extension (random small
  simulations, and a slice of the conversation trace at its native rate for the policies whose
  hits the engine tracks).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairsim.costmodel import load_profile
from fairsim.policies import make_policy
from fairsim.sim import Engine, EngineConfig
from fairsim.sim import engine as engine_module
from fairsim.sim.engine import _Live
from fairsim.sim.lazy_hits import NO_KEY, compiled_watch_class, watching
from tests.strategies import simulations
from tests.utils import make_request

CompiledWatch = compiled_watch_class()
pytestmark = pytest.mark.skipif(CompiledWatch is None, reason="fairsim.sim._watch_c not built")

PROFILE = load_profile("a6000-llama3.1-8b-vllm-prior")
CONVERSATION = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces" / "conversation_trace.jsonl"


def _engine(requests, policy: str, config: EngineConfig, compiled: bool) -> Engine:
    """An engine on the compiled watcher map or on the reference methods."""
    with pytest.MonkeyPatch.context() as m:
        if not compiled:
            m.setattr(engine_module, "compiled_watch_class", lambda: None)
        engine = Engine(requests, make_policy(policy, PROFILE), PROFILE, config)
    assert (engine._watch_c is not None) == compiled
    return engine


# -- operation sequences ----------------------------------------------------------------------------

def _requests():
    """Six waiting requests over three shared prefixes of 4-token blocks (keys 1..9 shared, the
    rest unique), up to 6 full blocks each."""
    prefixes = [(1, 2, 3, 4, 5, 6), (1, 2, 7, 8, 9), (1, 2, 3, 4, 10, 11)]
    return [make_request(f"r{i}", float(i), 4 * len(prefixes[i % 3]) + 1 + i % 2,
                         hashes=prefixes[i % 3], block=4) for i in range(6)]


KEYS = list(range(1, 12))

operations = st.lists(st.one_of(
    st.tuples(st.just("snapshot"), st.integers(0, 5)),
    st.tuples(st.just("rewatch"), st.integers(0, 5), st.integers(0, 6)),
    st.tuples(st.just("cache"), st.sampled_from(KEYS)),
    st.tuples(st.just("release"), st.sampled_from(KEYS)),
    st.tuples(st.just("invalidate"), st.integers(0, 5)),
    st.tuples(st.just("bound"), st.integers(0, 5)),
    st.tuples(st.just("resolve"), st.integers(0, 5)),
    st.tuples(st.just("step"),),
    st.tuples(st.just("hold"), st.integers(0, 5)),
    st.tuples(st.just("unwatch"), st.integers(0, 5)),
), max_size=60)


class _Side:
    """One engine under the operations: its pool's blocks by key, and the lazy path's reads."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.lives = list(engine._all)
        self.blocks: dict = {}  # key -> block held for it (released ones stay cached, evictable)
        self.held: set = set()
        for live in self.lives:
            live.released_s = live.req.arrival_time
            engine._waiting[live] = live
            engine._watch(live)
        self.resolve = engine._lazy.resolve if engine._watch_c is None else engine._watch_c.resolve

    def apply(self, op: tuple) -> None:
        e, lazy, pool = self.engine, self.engine._lazy, self.engine.pool
        kind = op[0]
        live = self.lives[op[1]] if kind not in ("cache", "release", "step") else None
        waiting = live is not None and live in e._waiting
        if kind == "snapshot" and waiting:
            e._snapshot(live)
        elif kind == "rewatch" and waiting:
            e._rewatch(live, min(op[2], live.max_hit_blocks))
        elif kind == "cache" and not pool.is_cached(op[1]) and pool.num_free:
            (block,) = pool.allocate(1)  # may evict a released key: a callback
            pool.cache(block, op[1])
            self.blocks[op[1]] = block
            self.held.add(op[1])
        elif kind == "release" and op[1] in self.held:
            self.held.discard(op[1])
            pool.free([self.blocks[op[1]]])  # evictable: a later allocation evicts it
        elif kind == "invalidate" and waiting:
            live.snap = None
        elif kind == "bound" and waiting:
            lazy.bounded.add(live)
        elif kind == "resolve" and waiting and live.last_snap is not None:
            self.resolve(live.last_snap)
        elif kind == "step":  # a new ordering step: the order hears of the stale requests it holds
            lazy.start_step()
        elif kind == "hold" and waiting and live not in e._in_inc:  # the order takes it
            e._inc.add(e._snapshot(live))
            e._in_inc.add(live)
        elif kind == "unwatch" and waiting:
            del e._waiting[live]
            e._unwatch(live)
            if live in e._in_inc:
                e._in_inc.discard(live)
                e._inc.remove(live.req.request_id)

    def state(self) -> tuple:
        e, lazy = self.engine, self.engine._lazy
        index = {live: i for i, live in enumerate(self.lives)}
        # Each bucket as its watchers in order, and whether it is a dict (a lone watcher is the
        # bucket itself until a second comes: ``lazy_hits.watching``); the two agree on both.
        watchers = {key: (type(bucket) is dict, [index[lid] for lid in watching(bucket)])
                    for key, bucket in e._watchers.items()}
        for key, bucket in e._watchers.items():
            assert bucket is not None and all(b is self.lives[index[lid]] for lid, b in watching(bucket).items())
            assert type(bucket) is dict and len(bucket) > 0 or type(bucket) is _Live
        lives = [(live.watched, live.partial, "none" if live.next_key is NO_KEY else live.next_key,
                  None if live.snap is None else live.snap[:6] + live.snap[7:],
                  live.snap is live.last_snap) for live in self.lives]
        return (watchers, lives, [index[k] for k in e._dirty], [index[k] for k in lazy.raised],
                sorted(index[k] for k in lazy.bounded), [index[live] for live in lazy.recheck],
                sorted(index[k] for k in lazy.resolved), dict(lazy.journal or {}),
                sorted(index[k] for k in e._in_inc))


@settings(max_examples=200, deadline=None)
@given(ops=operations, kv_blocks=st.integers(7, 14))
def test_operations_leave_the_same_state(ops, kv_blocks):
    config = EngineConfig(block_size=4, kv_blocks=kv_blocks)
    ref = _Side(_engine(_requests(), "fairway", config, False))
    new = _Side(_engine(_requests(), "fairway", config, True))
    assert ref.state() == new.state()
    for op in ops:
        ref.apply(op)
        new.apply(op)
        assert ref.state() == new.state(), op


def test_rewatch_by_hand():
    """A hand-made case: a request with six keys, hits 0, 2, 6 (its cap: 6 full blocks of a
    25-token prompt, capped at 24 tokens) and back to 1 block."""
    r = make_request("a", 0.0, 25, hashes=(1, 2, 3, 4, 5, 6), block=4)
    e = _engine([r], "fairway", EngineConfig(block_size=4, kv_blocks=8), True)
    live = e._all[0]
    e._waiting[live] = live
    e._watch(live)
    e._rewatch(live, 0)
    assert (live.watched, live.next_key, set(e._watchers)) == (1, 1, {1})
    e._rewatch(live, 2)
    assert (live.watched, live.next_key, set(e._watchers)) == (3, 3, {1, 2, 3})
    e._rewatch(live, 6)
    assert (live.watched, live.next_key, set(e._watchers)) == (6, NO_KEY, {1, 2, 3, 4, 5, 6})
    e._rewatch(live, 1)
    assert (live.watched, live.next_key, set(e._watchers)) == (2, 2, {1, 2})
    e._unwatch(live)
    assert (live.watched, live.next_key, e._watchers) == (0, NO_KEY, {})


# -- whole runs -------------------------------------------------------------------------------------

def _tables(requests, policy, config, compiled):
    result = _engine(requests, policy, config, compiled).run()
    return result.requests, result.steps


def _assert_same_tables(requests, policy, config):
    (req_a, steps_a), (req_b, steps_b) = (_tables(requests, policy, config, c) for c in (False, True))
    pd.testing.assert_frame_equal(req_a, req_b, check_exact=True)
    pd.testing.assert_frame_equal(steps_a, steps_b, check_exact=True)
    return req_b


@pytest.mark.parametrize("policy", ["fairway", "fairway-deadline", "lpm", "drr", "peek"])
@settings(max_examples=40, deadline=None)
@given(sim=simulations(max_requests=10))
def test_runs_match_the_reference(policy, sim):
    requests, _, config = sim
    _assert_same_tables(requests, policy, config)


@pytest.mark.parametrize("policy", ["fairway", "fairway-deadline", "lpm", "lpm-aging", "drr"])
def test_conversation_slice_tables_match(policy):
    """The first 1,500 requests of the conversation trace at their native rate (hundreds waiting,
    shared prefixes cached and evicted under a 451-block cache): the same tables."""
    from fairsim.traces.formats import read_trace

    if not CONVERSATION.exists():
        pytest.skip("shared conversation trace not present")
    requests = list(read_trace(CONVERSATION).requests)[:1500]
    table = _assert_same_tables(requests, policy, EngineConfig(kv_blocks=451))
    assert table["cached_tokens"].sum() > 0  # hits happened: the watched keys mattered
