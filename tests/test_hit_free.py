"""Hit-free policies (``uses_prefix_hits = False``: FCFS, LOF) are shown ``cached_len = 0``.

Their order reads no prefix hit, so the engine shows them no hit (as the live hook does) and
their waiting requests watch no keys: no cache event re-snapshots or re-keys them. The
decisions must be those of the same order shown real hits: every table is compared with a
copy of the policy that declares ``uses_prefix_hits = True`` (the watched path).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

from fairsim.costmodel import load_profile
from fairsim.policies import make_policy
from fairsim.policies.registry import policy_names
from fairsim.policies.fcfs import FCFS
from fairsim.sim import EngineConfig, simulate
from fairsim.sim.engine import Engine
from fairsim.traces import load_trace
from fairsim.types import Request
from tests.strategies import BLOCK, colocated_traces, profiles, simulations
from tests.utils import constant_profile

PROFILE = load_profile("a6000-llama3.1-8b-vllm-prior")
CONVERSATION = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces" / "conversation_trace.jsonl"
HIT_FREE = ["fcfs", "lof"]
TABLES = ("requests", "steps", "token_gaps")


def _watched(policy):
    """The same policy, declared to read hits: the engine shows them and watches keys."""
    watched = type(f"Watched{type(policy).__name__}", (type(policy),), {"uses_prefix_hits": True})
    copy = watched.__new__(watched)
    copy.__dict__.update(policy.__dict__)
    return copy


def _assert_same_tables(a, b) -> None:
    """Every table of two results equal to the bit (a prefill-only run has no token gaps)."""
    for table in TABLES:
        x, y = getattr(a, table), getattr(b, table)
        if x is None or y is None:
            assert x is None and y is None
        else:
            pd.testing.assert_frame_equal(x, y, check_exact=True)


def _same_tables(requests, name, profile, config):
    free = simulate(requests, make_policy(name, profile), profile, config)
    _assert_same_tables(free, simulate(requests, _watched(make_policy(name, profile)), profile, config))
    return free


class _Recording(FCFS):
    """FCFS that keeps every snapshot it is shown (the reference order, no fast path)."""

    def __init__(self):
        self.seen = []

    def order(self, waiting, now):
        self.seen.extend(waiting)
        return super().order(waiting, now)


def test_a_cached_prefix_is_shown_as_no_hit_by_hand():
    # A (2 full blocks + 1 token) is prefilled in step 0 (budget 16 >= 9 tokens) and caches both
    # blocks; B shares them and arrives at 5 s, after A finished. Its snapshot shows no hit
    # (FCFS reads none), its admission still hits both blocks: cached_tokens 8 in the table.
    reqs = [Request("A", 0.0, 2 * BLOCK + 1, (1, 2), BLOCK, 1, {}),
            Request("B", 5.0, 2 * BLOCK + 3, (1, 2), BLOCK, 1, {})]
    config = EngineConfig(budget_tokens=16, block_size=BLOCK, kv_blocks=8)
    for policy, shown in ((_Recording(), 0), (_watched(_Recording()), 2 * BLOCK)):
        engine = Engine(reqs, policy, constant_profile(step_s=1.0), config, fast_order=False)
        result = engine.run()
        b = [q for q in policy.seen if q.request_id == "B"]
        assert [(q.cached_len, q.uncached_len) for q in b] == [(shown, 2 * BLOCK + 3 - shown)]
        assert result.requests.set_index("request_id").loc["B", "cached_tokens"] == 2 * BLOCK
        assert engine._watchers == {}
    assert engine._hit_free is False and Engine(reqs, FCFS(), constant_profile(step_s=1.0), config)._hit_free


@pytest.mark.parametrize("name", HIT_FREE)
@settings(max_examples=40, deadline=None)
@given(sim=simulations(max_requests=8))
def test_prefill_only_tables_match_the_watched_path(name, sim):
    requests, profile, config = sim
    _same_tables(requests, name, profile, config)


@pytest.mark.parametrize("name", HIT_FREE)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_colocated_tables_match_the_watched_path(name, data):
    requests, config = data.draw(colocated_traces())
    _same_tables(requests, name, data.draw(profiles()), config)


@pytest.mark.skipif(not CONVERSATION.exists(), reason="public conversation trace not present")
@pytest.mark.parametrize("name", HIT_FREE)
@pytest.mark.parametrize("mode", ["prefill-only", "colocated"])
def test_conversation_slice_tables_match_the_watched_path(name, mode):
    # 1,500 requests at 8x their rate: a queue, shared prefixes, evictions and (colocated) preemptions.
    reqs = [dataclasses.replace(r, arrival_time=r.arrival_time / 8)
            for r in load_trace(CONVERSATION).requests[:1500]]
    config = EngineConfig(kv_blocks=300, block_size=512, mode=mode)
    result = _same_tables(reqs, name, PROFILE, config)
    assert result.steps["evictions"].sum() > 0


# -- traces whose requests share no first block: nothing is watched for any policy ------------

def _first_keys_apart(requests):
    """The requests with their first hash id made their own (the later ids stay shared with
    other requests' later blocks, which no waiting request can then hit)."""
    return [dataclasses.replace(r, block_hashes=(2_000_000 + i,) + r.block_hashes[1:]) if r.block_hashes else r
            for i, r in enumerate(requests)]


def _unwatched_equals_watched(requests, name, profile, config, engine_class=Engine):
    """Every table of ``name`` equal with the no-reuse shortcut and with it off (the watched
    path, ``first_keys_unique`` patched to False); the shortcut is taken where it may be."""
    from fairsim.sim import engine as engine_module

    engines = []
    for shortcut in (True, False):
        with pytest.MonkeyPatch.context() as m:
            if not shortcut:
                m.setattr(engine_module, "first_keys_unique", lambda lives: False)
            engine = engine_class(requests, make_policy(name, profile), profile, config)
            engines.append((engine, engine.run()))
    (on, a), (off, b) = engines
    assert on._unwatched == (on._hit_free or on._protect is None)
    assert on._watchers == {} and (on._lazy is None or not on._unwatched)
    _assert_same_tables(a, b)
    return a


@settings(max_examples=150, deadline=None)
@given(sim=simulations(max_requests=8), name=st.sampled_from(sorted(policy_names())))
def test_prefill_only_without_shared_first_blocks_matches_the_watched_path(sim, name):
    requests, profile, config = sim
    _unwatched_equals_watched(_first_keys_apart(requests), name, profile, config)


@settings(max_examples=150, deadline=None)
@given(data=st.data(), name=st.sampled_from(sorted(policy_names())), fast_decode=st.booleans())
def test_colocated_without_shared_first_blocks_matches_the_watched_path(data, name, fast_decode):
    """Colocated: decodes preempt, and a preempted request hits its own cached blocks when it
    is admitted again (read at each step, not watched); on the step-by-step engine and on the
    decode fast path ``simulate`` runs."""
    from fairsim.sim.decode_fast import DecodeFastEngine

    requests, config = data.draw(colocated_traces())
    _unwatched_equals_watched(_first_keys_apart(requests), name, data.draw(profiles()), config,
                              DecodeFastEngine if fast_decode else Engine)


def test_first_keys_unique_by_hand():
    from fairsim.sim.engine import first_keys_unique, make_lives

    apart = [Request("a", 0.0, 9, (1, 7), 4, 1, {}), Request("b", 0.0, 9, (2, 7), 4, 1, {}),
             Request("c", 0.0, 3, (), 4, 1, {})]  # c: no full block, no key
    shared = apart + [Request("d", 1.0, 5, (1,), 4, 1, {})]
    assert first_keys_unique(make_lives(apart, 4, False))
    assert not first_keys_unique(make_lives(shared, 4, False))
    # without prefix ids every key is the request's own (an Azure-like trace)
    assert first_keys_unique(make_lives([Request(f"r{i}", 0.0, 9, (), 4, 1, {}) for i in range(5)], 4, False))


@pytest.mark.skipif(not CONVERSATION.exists(), reason="public conversation trace not present")
def test_a_trace_with_shared_prefixes_is_watched():
    reqs = load_trace(CONVERSATION).requests[:200]
    engine = Engine(reqs, make_policy("fairway", PROFILE), PROFILE, EngineConfig(kv_blocks=300, block_size=512))
    assert not engine._unwatched and engine._lazy is not None  # (Fairway's fast path takes lazy hits)


class _AdmittedHits(FCFS):
    """FCFS shown real hits, keeping the snapshot of every request it is told was admitted:
    a preempted request's hit on its own blocks shows there."""

    uses_prefix_hits = True

    def __init__(self):
        self.admitted = []

    def on_admitted(self, admitted, now):
        self.admitted.extend((q.request_id, q.cached_len, q.uncached_len) for q in admitted)


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_preempted_requests_show_their_own_hits_without_shared_first_blocks(data):
    from fairsim.sim import engine as engine_module

    from fairsim.sim.decode_fast import DecodeFastEngine

    requests, config = data.draw(colocated_traces(max_spare_blocks=3))
    requests = _first_keys_apart(requests)
    profile = data.draw(profiles())
    engine_class = data.draw(st.sampled_from([Engine, DecodeFastEngine]))
    seen = []
    for shortcut in (True, False):
        with pytest.MonkeyPatch.context() as m:
            if not shortcut:
                m.setattr(engine_module, "first_keys_unique", lambda lives: False)
            policy = _AdmittedHits()
            engine = engine_class(requests, policy, profile, config)
            assert engine._unwatched is shortcut
            engine.run()
            seen.append(policy.admitted)
    assert seen[0] == seen[1]
