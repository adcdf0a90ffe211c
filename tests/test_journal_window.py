"""Lazy hits record the pool's changes only while a read can use them.

``LazyHits.resolve`` reads the journal (each changed key's hittability at the step's start) only
between ``start_step``, which starts a new journal, and the end of that step's admission
(``LazyHits.end_step``); the chunk steps in between record nothing. The decisions must be those
of a journal kept on all the time.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd
import pytest

from fairsim.costmodel import load_profile
from fairsim.policies import make_policy
from fairsim.sim import EngineConfig, simulate
from fairsim.sim.lazy_hits import LazyHits
from fairsim.traces import load_trace

PROFILE = load_profile("a6000-llama3.1-8b-vllm-prior")
CONVERSATION = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces" / "conversation_trace.jsonl"
LAZY = ["fairway", "fairway-deadline", "hrrn", "lpm-aging", "preble", "drr", "vtc"]


@pytest.mark.skipif(not CONVERSATION.exists(), reason="public conversation trace not present")
@pytest.mark.parametrize("name", LAZY)
@pytest.mark.parametrize("mode", ["prefill-only", "colocated"])
def test_tables_equal_a_journal_kept_on(name, mode, monkeypatch):
    reqs = [dataclasses.replace(r, arrival_time=r.arrival_time / 4)
            for r in load_trace(CONVERSATION).requests[:1200]]
    config = EngineConfig(kv_blocks=300, block_size=512, mode=mode)
    states = []
    original = LazyHits.end_step

    def watching(self):
        original(self)
        states.append(self.pool.journal)

    monkeypatch.setattr(LazyHits, "end_step", watching)
    windowed = simulate(reqs, make_policy(name, PROFILE), PROFILE, config)
    assert states and all(journal is None for journal in states)  # off after each admission
    monkeypatch.setattr(LazyHits, "end_step", lambda self: None)  # the journal never stops
    always = simulate(reqs, make_policy(name, PROFILE), PROFILE, config)
    for table in ("requests", "steps", "token_gaps"):
        a, b = getattr(windowed, table), getattr(always, table)
        if a is None:
            assert b is None
        else:
            pd.testing.assert_frame_equal(a, b, check_exact=True)
    assert windowed.steps["evictions"].sum() > 0


def test_resolve_reads_the_journal_only_for_the_keys_that_decide_the_hit(monkeypatch):
    # A request with keys k0..k4 (4-token blocks); k0 and k1 cached now, so its hit now is 2
    # blocks and k2 decides whether it grows. A journal entry for k3 (past k2) cannot change the
    # hit at the step's start: 2 blocks, no recheck. One saying k1 was not hittable at the start
    # (cached since) makes it 1 block, built from the journal: rechecked at the next step.
    # (A lone request shares its first block with nobody, so the engine would take no lazy hits
    # (``first_keys_unique``): the watched path is forced, the blocks being cached by hand.)
    from fairsim.sim import engine as engine_module
    from fairsim.sim.engine import Engine
    from tests.utils import make_request

    monkeypatch.setattr(engine_module, "first_keys_unique", lambda lives: False)

    b = make_request("b", 0.0, 21, hashes=(1, 2, 7, 8, 9), block=4)
    engine = Engine([b], make_policy("fairway", PROFILE), PROFILE, EngineConfig(block_size=4, kv_blocks=16))
    lazy, pool, live = engine._lazy, engine.pool, engine._all[0]
    engine._waiting[live] = live
    for j in (0, 1):
        (block,) = pool.allocate(1)
        pool.cache(block, live.keys[j])

    def resolve(journal):
        lazy.journal = journal
        lazy.resolved, lazy.recheck, live.snap = {}, [], None
        snap = lazy.resolve(engine._make_snapshot(live, 0, 0))
        return snap.cached_len, lazy.recheck == [live]

    assert resolve({}) == (8, False)
    assert resolve({live.keys[3]: True}) == (8, False)
    assert resolve({live.keys[1]: False}) == (4, True)
    assert resolve({live.keys[2]: True}) == (12, True)  # k2 was hittable at the start (evicted since): 3 blocks
