"""Workload generators: determinism, sizes, prefix structure, labels; real-trace scenarios."""

from __future__ import annotations

import numpy as np
import pytest

from fairsim.costmodel import load_profile
from fairsim.traces import offered_load
from fairsim.traces.flood import FloodSpec, generate_flood
from fairsim.traces.loadshape import LoadShape, Phase, arrivals, calm_burst_spike, poisson
from fairsim.traces.mixed import MixedSpec, generate_mixed
from fairsim.traces.multihop import MultiHopSpec, generate_multihop
from fairsim.traces.prefix import PrefixIds, make_request
from fairsim.errors import TraceFormatError
from fairsim.traces.formats import azure
from fairsim.traces.real import load_azure_csv, real_scenario, traces_dir
from fairsim.scenarios import build_scenario, scenario_names
from fairsim.traces.sec import SecSpec, dynamic_sec_traces, generate_sec

SMALL = poisson(2.0, 60.0)


def shared_blocks(a, b) -> int:
    n = 0
    for x, y in zip(a.block_hashes, b.block_hashes):
        if x != y:
            break
        n += 1
    return n


class TestPrefixIds:
    """Prefix ids: equal prefixes share ids, a difference ends sharing for good."""

    def test_prefix_semantics(self):
        ids = PrefixIds()
        assert ids.chain(["a", "b", "c"]) == [0, 1, 2]
        assert ids.chain(["a", "b", "x"]) == [0, 1, 3]
        assert ids.chain(["z", "b", "c"]) == [4, 5, 6]  # same content after a different prefix

    def test_tail_is_unique_and_uncached(self):
        ids = PrefixIds()
        r = make_request(ids, "r", 1.2345, ["a"], 100, {})
        assert r.prompt_len == 612 and r.block_hashes == (0,) and r.arrival_time == 1.234
        assert r.labels["_hash_ids"] == [0, 1]
        with pytest.raises(ValueError, match="tail_tokens"):
            make_request(ids, "r", 0.0, ["a"], 512, {})


class TestLoadShape:
    """Piecewise Poisson arrivals with window labels."""

    def test_windows_in_order_and_rates(self):
        shape = calm_burst_spike(10.0)
        t, w = arrivals(shape, np.random.default_rng(0))
        assert np.all(np.diff(t) >= 0) and t[-1] < shape.duration_s
        bounds = shape.bounds()
        for name, (lo, hi) in bounds.items():
            sel = [x for x, lab in zip(t, w) if lab == name]
            assert all(lo <= x < hi for x in sel)
        assert w.count("spike") / 60.0 > w.count("calm") / 120.0 * 2  # 1.6x vs 0.5x the base

    def test_bad_phase(self):
        with pytest.raises(ValueError, match="duration_s"):
            LoadShape((Phase("x", 0.0, 1.0),))


class TestGenerators:
    """Each generator is deterministic in its seed and has the documented structure."""

    @pytest.mark.parametrize("make", [
        lambda s: generate_sec(SecSpec(shape=SMALL, seed=s)),
        lambda s: generate_multihop(MultiHopSpec(shape=SMALL, seed=s)),
        lambda s: generate_mixed(MixedSpec(shape=SMALL, seed=s)),
        lambda s: generate_flood(FloodSpec(num_miss=3, num_flood=50, seed=s)),
    ])
    def test_deterministic_in_seed(self, make):
        a, b, c = make(1), make(1), make(2)
        key = lambda t: [(r.request_id, r.arrival_time, r.prompt_len, r.block_hashes) for r in t.requests]
        assert key(a) == key(b)
        assert key(a) != key(c)
        assert all(x.arrival_time <= y.arrival_time for x, y in zip(a.requests, a.requests[1:]))

    def test_sec_prompts_up_to_16k_and_reuse(self):
        trace = generate_sec(SecSpec(shape=poisson(2.0, 200.0), seed=3))
        lens = [r.prompt_len for r in trace.requests]
        assert max(lens) <= 16384 and min(lens) > 1024
        same = [(a, b) for a in trace.requests[:80] for b in trace.requests[:80]
                if a is not b and a.labels["doc_id"] == b.labels["doc_id"]
                and a.labels["topic"] == b.labels["topic"]]
        assert same and all(shared_blocks(a, b) >= 2 + 4 * min(a.labels["excerpts"], b.labels["excerpts"])
                            for a, b in same)

    def test_two_dynamic_traces_differ(self):
        one, two = dynamic_sec_traces(1.0)
        assert one.name == "sec-dyn1" and two.name == "sec-dyn2"
        assert {r.labels["window"] for r in one.requests} == {"calm", "burst", "spike"}
        assert [r.prompt_len for r in one.requests] != [r.prompt_len for r in two.requests]

    def test_multihop_hits_are_partial(self):
        trace = generate_multihop(MultiHopSpec(shape=poisson(3.0, 100.0), seed=0))
        reqs = trace.requests
        shares = [shared_blocks(a, b) for a in reqs[:60] for b in reqs[:60] if a is not b]
        assert 1 in shares  # system prompt only
        assert any(1 < s < len(a.block_hashes) for a in reqs[:60] for b in reqs[:60]
                   for s in [shared_blocks(a, b)] if a is not b)

    def test_mixed_lengths(self):
        trace = generate_mixed(MixedSpec(shape=SMALL, seed=0))
        short = [r.prompt_len for r in trace.requests if r.labels["length"] == "short"]
        long = [r.prompt_len for r in trace.requests if r.labels["length"] == "long"]
        assert short and long and max(short) <= 2048 < 6144 <= min(long)

    def test_flood_classes(self):
        spec = FloodSpec(num_miss=5, num_flood=40)
        trace = generate_flood(spec)
        klass = [r.labels["klass"] for r in trace.requests]
        assert klass.count("miss") == 5 and klass.count("flood") == 40
        assert klass.count("warmup") == spec.flood_docs
        misses = [r for r in trace.requests if r.labels["klass"] == "miss"]
        assert all(shared_blocks(a, b) == 0 for a in misses for b in misses if a is not b)


class TestScenarios:
    """Named scenarios build; real traces at a chosen load."""

    def test_names_and_unknown(self):
        assert len(scenario_names()) == 11
        with pytest.raises(ValueError, match="known: "):
            build_scenario("nope", load_profile())
        with pytest.raises(ValueError, match="bad scenario parameter"):
            build_scenario("rag", load_profile(), not_a_field=1)

    def test_real_trace_at_load(self):
        try:
            traces_dir()
        except FileNotFoundError:
            pytest.skip("real traces folder not present")
        profile = load_profile()
        reqs = real_scenario("mooncake-synthetic", profile, 0.5, max_requests=200)
        assert len(reqs) == 200 and reqs[0].arrival_time == 0.0
        assert offered_load(reqs, profile).ideal_load == pytest.approx(0.5, rel=1e-3)
        azure = real_scenario("azure-conv", profile, 0.5, max_requests=100)
        assert all(r.block_hashes == () for r in azure)  # no prefix identity in the Azure CSVs

    def test_azure_csv_parsing(self, tmp_path):
        p = tmp_path / "a.csv"
        p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                     "2023-11-16 18:17:03.9799600,100,5\n2023-11-16 18:17:04.0000000,0,5\n"
                     "2023-11-16 18:17:05.5000000,2000,7\n")
        # A prompt of 0 tokens is a bad row, named; --skip-bad skips and counts it.
        with pytest.raises(TraceFormatError, match=r"a.csv:3: field 'ContextTokens': 0: need >= 1"):
            load_azure_csv(p)
        trace = azure.read(p, skip_bad=True)
        assert [(r.arrival_time, r.prompt_len, r.output_len) for r in trace.requests] == [
            (0.0, 100, 5), (1.52, 2000, 7)]
        assert [(e.line, e.field) for e in trace.skipped] == [(3, "ContextTokens")]
