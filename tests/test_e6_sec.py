"""E6 on E1's SEC traces (experiments/e6/sec_tenants.py, docs/fleets.md): the tenant overlay (on
two tenants of sec-dyn1 with a 60 s calm, 60 s burst and 30 s spike), and the docs' claims on an
excerpt (four tenants with a 300 s calm and burst and E1's 60 s spike, on four instances)."""

from __future__ import annotations

import pandas as pd
import pytest

from experiments.e6.sec_tenants import HASH_STRIDE, overlay, tenant, tenants
from fairsim.costmodel import DEFAULT_PROFILE, load_profile
from fairsim.policies import make_policy
from fairsim.routers import make_router
from fairsim.scenarios import build_scenario
from fairsim.sim import EngineConfig, simulate
from fairsim.sim.fleet import simulate_fleet

PROFILE = load_profile(DEFAULT_PROFILE)
SHORT = {"calm_s": 60.0, "burst_s": 60.0, "spike_s": 30.0}
EXCERPT = {"calm_s": 300.0, "burst_s": 300.0}


@pytest.fixture(scope="module")
def short():
    return tenants("sec-dyn1", 2, **SHORT)


def test_a_tenant_is_its_seed_with_hashes_moved_apart():
    sc = build_scenario("sec-dyn1", PROFILE, seed=1, **SHORT)
    moved, kv = tenant("sec-dyn1", 1, **SHORT)
    assert kv == sc.engine.kv_blocks
    assert [r.arrival_time for r in moved] == [r.arrival_time for r in sc.requests]
    assert [r.prompt_len for r in moved] == [r.prompt_len for r in sc.requests]
    assert all(m.block_hashes == tuple(h + HASH_STRIDE for h in r.block_hashes)
               for m, r in zip(moved, sc.requests))
    assert all(m.request_id == f"t1-{r.request_id}" for m, r in zip(moved, sc.requests))


def test_tenants_share_no_block_and_the_overlay_keeps_every_request(short):
    parts, kv = short
    hashes = [{h for r in part for h in r.block_hashes} for part in parts]
    assert hashes[0] and hashes[1] and not hashes[0] & hashes[1]
    assert kv == round((tenant("sec-dyn1", 0, **SHORT)[1] + tenant("sec-dyn1", 1, **SHORT)[1]) / 2)
    merged = overlay(parts)
    assert len(merged) == sum(len(p) for p in parts)
    assert [r.arrival_time for r in merged] == sorted(r.arrival_time for r in merged)


def test_outputs_are_e5s_log_normal_draws():
    plain, _ = tenant("sec-dyn1", 0, **SHORT)
    with_out, _ = tenant("sec-dyn1", 0, outputs=True, **SHORT)
    assert {r.output_len for r in plain} == {1}
    lengths = [r.output_len for r in with_out]
    assert 1 <= min(lengths) and max(lengths) <= 1024 and len(set(lengths)) > 10


@pytest.fixture(scope="module")
def excerpt():
    return tenants("sec-dyn1", 4, **EXCERPT)


def fleet_run(parts, kv, router, policy="fcfs"):
    n = len(parts)
    return simulate_fleet(overlay(parts), [make_policy(policy, PROFILE) for _ in range(n)],
                          make_router(router, n, kv_blocks=kv), PROFILE, EngineConfig(kv_blocks=kv)).requests


def hit_rate(requests):
    return requests["cached_tokens"].sum() / requests["prompt_tokens"].sum()


def test_cache_aware_routers_keep_the_hits_round_robin_loses(excerpt):
    """SGLang's router comes within 10 % of the hit rate of one engine per tenant; llm-d's and
    Dynamo's are above round robin's; round robin (every instance sees every tenant's corpus) and
    least work fall well below the bound."""
    parts, kv = excerpt
    alone = pd.concat([simulate(p, make_policy("fcfs", PROFILE), PROFILE, EngineConfig(kv_blocks=kv)).requests
                       for p in parts])
    bound = hit_rate(alone)
    hits = {router: hit_rate(fleet_run(parts, kv, router))
            for router in ("round-robin", "least-work", "dynamo-kv", "llm-d", "sglang-cache-aware")}
    assert hits["sglang-cache-aware"] >= 0.9 * bound
    assert hits["sglang-cache-aware"] > hits["llm-d"] > hits["dynamo-kv"] > hits["round-robin"]
    assert max(hits["round-robin"], hits["least-work"]) < 0.6 * bound


def test_ordering_still_matters_behind_the_best_router(excerpt):
    """Behind SGLang's router LPM and Fairway cut FCFS's spike median, and SUF cuts it most while
    raising the spike p99 above FCFS's (the docs' table, in small)."""
    parts, kv = excerpt
    spike = {p: fleet_run(parts, kv, "sglang-cache-aware", p).query("window == 'spike'")["ttft_s"]
             for p in ("fcfs", "lpm", "fairway", "suf")}
    median = {p: t.median() for p, t in spike.items()}
    assert median["suf"] < min(median["lpm"], median["fairway"])
    assert max(median["lpm"], median["fairway"]) < median["fcfs"]
    assert spike["suf"].quantile(0.99) > spike["fcfs"].quantile(0.99)


def test_tables_rows_from_hand_made_runs(tmp_path):
    """experiments.e6.tables: a router row (TTFT percentiles, FCFS hit rate, its load imbalance) and
    the reference row pooled over the tenants, on hand-made request tables."""
    import json

    from experiments.e6.tables import table

    def write(folder, ttft, cached, window):
        folder.mkdir(parents=True)
        for policy, scale in (("fcfs", 1.0), ("lpm", 2.0)):
            pd.DataFrame({"ttft_s": [t * scale for t in ttft], "cached_tokens": cached,
                          "prompt_tokens": [100] * len(ttft), "window": window}).to_parquet(
                folder / f"requests-{policy}.parquet")

    nd = tmp_path / "sec-dyn1" / "n2"
    write(nd / "round-robin", [1.0, 2.0, 3.0], [0, 50, 100], ["calm", "spike", "spike"])
    (nd / "round-robin" / "summary.json").write_text(json.dumps({"fcfs": {"load_imbalance": 1.25}}))
    write(nd / "alone" / "t0", [1.0], [10], ["spike"])
    write(nd / "alone" / "t1", [3.0], [30], ["spike"])
    lines = table(nd, ["fcfs", "lpm"], None)
    # p50 / p99 of [1, 2, 3] (linear): 2.00 / 2.98; LPM's doubled; hit 150 / 300.
    assert lines[2] == "| round-robin | 2.00 / 2.98 | 4.00 / 5.96 | 0.500 | 1.250 |"
    assert lines[3] == "| one engine per tenant | 2.00 / 2.98 | 4.00 / 5.96 | 0.200 | – |"
    spike = table(nd, ["fcfs", "lpm"], "spike")
    assert spike[2] == "| round-robin | 2.50 / 2.99 | 5.00 / 5.98 | 0.750 | 1.250 |"
