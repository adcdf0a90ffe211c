"""Lazy hits with a direction (``fairsim.sim.lazy_hits``): a request handed to the order as stale
but not as ``raised`` has not gained a hit since the order last saw its snapshot.

This is what lets ``FastLane.stale`` leave such a request's key where it is (an upper bound
only if the hit did not rise). Checked inside real engine runs, at every ``stale`` call, against
the cache as it is at that moment (the start of the step): eviction pressure, shared prefixes,
preemptions, and a slice of the conversation trace at its native rate.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from fairsim.costmodel import load_profile
from fairsim.policies import make_policy
from fairsim.policies.incremental import LazyLanes
from fairsim.scenarios import build_scenario
from fairsim.sim import simulate
from fairsim.sim.config import EngineConfig
from fairsim.sim.engine import Engine
from fairsim.sim.lazy_hits import LazyHits
from tests.utils import shared_prefix_requests

PROFILE = load_profile("a6000-llama3.1-8b-vllm-prior")
CONVERSATION = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces" / "conversation_trace.jsonl"


def _shared_prefix(seed):
    rng = random.Random(seed)
    reqs = shared_prefix_requests(rng)
    return reqs, EngineConfig(kv_tokens=rng.choice([10, 12, 16]) * 512, mode="colocated",
                              max_num_seqs=rng.choice([4, 8]))


def _cases():
    rag = build_scenario("rag", PROFILE, seed=2)
    longest = max(r.prompt_len for r in rag.requests)
    yield "rag-evicting", rag.requests[:300], EngineConfig(kv_tokens=3 * longest)
    for seed in range(3):
        yield f"shared-prefix-{seed}", *_shared_prefix(seed)
    if CONVERSATION.exists():
        from fairsim.traces.formats import read_trace

        yield "conversation", list(read_trace(CONVERSATION).requests)[:500], EngineConfig(kv_blocks=451)


@pytest.mark.parametrize("name", ["fairway", "fairway-plus"])
def test_unraised_stale_requests_did_not_gain_a_hit(name, monkeypatch):
    # Each run's engine, taken where its lazy hits are made (the compiled Engine is an extension
    # type, whose methods cannot be patched).
    engines: list[Engine] = []
    init = LazyHits.__init__

    def keep(self, engine):
        init(self, engine)
        engines.append(engine)

    monkeypatch.setattr(LazyHits, "__init__", keep)
    checked = {"unraised": 0, "raised": 0}
    stale = LazyLanes.stale

    def checking(self, request_ids, raised=None):
        e = engines[-1]
        lane = self.lanes[0]
        up = set(raised or ())
        live_of = {live.req.request_id: live for live in e._waiting.values()}
        for rid in request_ids:
            item = lane._items[rid]
            if rid in up or item[8] == 2:
                checked["raised"] += rid in up
                continue  # keyed by its largest possible hit: no claim
            live = live_of[rid]
            h = e.pool.count_prefix(live.keys, live.max_hit_blocks) * e.block_size
            hc = h / max(live.req.prompt_len - h, 1)
            assert hc <= item[1], (rid, hc, item[1])  # the lane's last h/c still bounds it
            checked["unraised"] += 1
        return stale(self, request_ids, raised)

    monkeypatch.setattr(LazyLanes, "stale", checking)
    for case, requests, config in _cases():
        simulate(requests, make_policy(name, PROFILE), PROFILE, config)
    assert checked["unraised"] > 50 and checked["raised"] > 50, checked  # both kinds happen
