"""Fleets (``--instances N`` behind a router; ``fairsim.sim.fleet``, ``fairsim.routers``).

* One instance behind any router is today's single engine, table for table (requests and steps;
  prefill-only and colocated, open and closed loop, several orderings).
* Each router's choice on hand-built states, against its public rule (hand-computed values).
* A fleet's tables: every request served once, on the instance the router chose; per-instance
  rows add up to the fleet's.
* A KV-aware router's hit rate grows toward the single-engine bound with its overlap weight on
  agent sessions; round robin's stays below it.
* Bad input: exit 2 with the option or the router and what it needs named.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from fairsim.costmodel import DEFAULT_PROFILE, load_profile
from fairsim.metrics import summarize
from fairsim.policies import make_policy
from fairsim.routers import ROUTERS, InstanceView, RouteRequest, make_router
from fairsim.routers.dynamo_kv import softmax_pick
from fairsim.sim import EngineConfig, simulate
from fairsim.sim.block_pool import BlockPool
from fairsim.sim.fleet import FLEET_REQUEST_COLUMNS, simulate_fleet
from fairsim.traces import load_trace
from fairsim.traces.agent import AgentSpec, generate_agent
from fairsim.types import Request

ROOT = Path(__file__).resolve().parents[1]
WINDOW = ROOT / "fairsim" / "traces" / "data" / "conversation_window.jsonl"
PROFILE = load_profile(DEFAULT_PROFILE)


@pytest.fixture(scope="module")
def conversation() -> list[Request]:
    return list(load_trace(WINDOW).requests)[:400]


@pytest.fixture(scope="module")
def agent() -> list[Request]:
    return list(generate_agent(AgentSpec(num_sessions=16, session_rate_per_s=1.0)).requests)


def fleet_of_one(requests, policy, router, config):
    return simulate_fleet(requests, [make_policy(policy, PROFILE)], make_router(router, 1, kv_blocks=100),
                          PROFILE, config)


def assert_same_tables(single, fleet):
    requests = fleet.requests.drop(columns=list(FLEET_REQUEST_COLUMNS))
    steps = fleet.steps.drop(columns=["instance"])
    assert single.requests.equals(requests)
    assert single.steps.equals(steps)
    assert (fleet.requests["instance"] == 0).all() and (fleet.steps["instance"] == 0).all()


# -- one instance = the single engine -------------------------------------------------------------
@pytest.mark.parametrize("policy", ["fcfs", "lpm", "fairway"])
@pytest.mark.parametrize("router", [r for r in ROUTERS if r != "session-affinity"])
def test_one_instance_is_the_single_engine_open_loop(conversation, policy, router):
    config = EngineConfig()
    single = simulate(conversation, make_policy(policy, PROFILE), PROFILE, config)
    assert_same_tables(single, fleet_of_one(conversation, policy, router, config))


@pytest.mark.parametrize("mode", ["prefill-only", "colocated"])
@pytest.mark.parametrize("router", list(ROUTERS))
def test_one_instance_is_the_single_engine_closed_loop(agent, mode, router):
    # A small cache, so that evictions and (colocated) preemptions happen too.
    config = EngineConfig(mode=mode, kv_blocks=1500, block_size=16)
    single = simulate(agent, make_policy("fairway", PROFILE), PROFILE, config)
    assert single.requests["preemptions"].sum() > 0 or mode == "prefill-only"
    assert_same_tables(single, fleet_of_one(agent, "fairway", router, config))


def test_one_colocated_instance_keeps_the_token_gaps(agent):
    config = EngineConfig(mode="colocated", kv_blocks=1500, block_size=16)
    single = simulate(agent, make_policy("fcfs", PROFILE), PROFILE, config)
    fleet = fleet_of_one(agent, "fcfs", "llm-d", config)
    assert single.token_gaps.equals(fleet.token_gaps)


# -- hand-built states: each router against its public rule ---------------------------------------
BS = 4
KEYS = ("a", "b", "c", "d")  # a 16-token prompt, four full blocks of 4 tokens


def view(index, cached=(), held=0, waiting=0, blocks=20, in_flight=0, active=0, outstanding=0):
    """An instance with ``cached`` keys hittable, ``held`` further blocks held by requests."""
    pool = BlockPool(blocks)
    if cached:
        ids = pool.allocate(len(cached))
        pool.cache_blocks(ids, list(cached), 0, len(cached))
        pool.free(reversed(ids))  # cached, evictable: hittable, not held
    if held:
        pool.allocate(held)
    engine = SimpleNamespace(pool=pool, _waiting=dict.fromkeys(range(waiting)), _preempted=[],
                             _arrivals=SimpleNamespace(heap=[]), _running=[])
    v = InstanceView(index, engine)
    v.in_flight, v.active_blocks, v.outstanding_tokens = in_flight, active, outstanding
    return v


def route_request(prompt_len=16, keys=KEYS, session=None, rid="r"):
    req = Request(rid, 0.0, prompt_len, (), BS, 1, {}, session_id=session)
    return RouteRequest(req, keys, BS)


def test_round_robin_cycles():
    router = make_router("round-robin", 3)
    views = [view(k) for k in range(3)]
    assert [router.choose(route_request(), views, 0.0) for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]


def test_least_work_takes_the_fewest_outstanding_tokens_first_on_a_tie():
    router = make_router("least-work", 3)
    views = [view(0, outstanding=500), view(1, outstanding=120), view(2, outstanding=120)]
    assert router.choose(route_request(), views, 0.0) == 1


def test_session_affinity_sticks_to_the_first_turns_instance():
    router = make_router("session-affinity", 2)
    views = [view(0, outstanding=10), view(1, outstanding=0)]
    assert router.choose(route_request(session="s"), views, 0.0) == 1  # least work
    views[1].outstanding_tokens = 10_000
    assert router.choose(route_request(session="s"), views, 1.0) == 1  # its session's home
    assert router.choose(route_request(session="t"), views, 1.0) == 0  # a new session: least work


def test_dynamo_cost_trades_overlap_against_active_blocks():
    # Instance 0: two of the four blocks cached, 10 active blocks; instance 1: nothing, idle.
    # logit = w * (L - overlap * bs) / bs + active + ceil(L / bs):
    #   w=1:  0: 1 * (16 - 8) / 4 + 10 + 4 = 16;   1: 1 * 16 / 4 + 0 + 4 = 8   -> 1
    #   w=10: 0: 10 * 2 + 14 = 34;                 1: 10 * 4 + 4 = 44          -> 0
    views = [view(0, cached=("a", "b"), active=10), view(1)]
    low = make_router("dynamo-kv", 2, {"overlap_weight": 1})
    high = make_router("dynamo-kv", 2, {"overlap_weight": 10})
    assert low.logits(route_request(), views) == [16.0, 8.0]
    assert high.logits(route_request(), views) == [34.0, 44.0]
    assert low.choose(route_request(), views, 0.0) == 1
    assert high.choose(route_request(), views, 0.0) == 0


def test_dynamo_ties_go_to_the_smaller_cache_then_the_lower_index():
    # Same logit (no overlap for this prompt), instance 0 caches more unrelated blocks.
    views = [view(0, cached=("x", "y")), view(1, cached=("z",)), view(2, cached=("w",))]
    assert make_router("dynamo-kv", 3).choose(route_request(), views, 0.0) == 1


def test_dynamo_softmax_sampling_is_its_normalised_rule():
    # logits 0, 3, 9 at T = 1: p ~ exp(-(v - 0) / 9) = 1, e^-1/3, e^-1 -> p0 = 0.4797, p1 = 0.3437
    p0 = 1 / (1 + 2.718281828 ** (-1 / 3) + 2.718281828 ** -1)
    assert p0 == pytest.approx(0.4797, abs=1e-4)
    assert softmax_pick([0, 3, 9], 1.0, p0 - 1e-9) == 0
    assert softmax_pick([0, 3, 9], 1.0, p0 + 1e-6) == 1
    assert softmax_pick([0, 3, 9], 1.0, 0.99) == 2
    assert softmax_pick([5, 5], 1.0, 0.6) == 1  # all equal: uniform


def test_llmd_weighted_scorers():
    # Instance 0: 2 of the 4 prompt blocks cached, 5 waiting, half its KV held.
    # Instance 1: nothing cached, 1 waiting, nothing held.
    # prefix 0.5 / 0, queue (5-5)/(5-1) = 0 / (5-1)/(5-1) = 1, kv 1 - 0.5 / 1 - 0.
    #   weights 3/2/2:  0: 1.5 + 0 + 1 = 2.5;   1: 0 + 2 + 2 = 4   -> 1
    #   prefix 10:      0: 5 + 0 + 1 = 6;       1: 4               -> 0
    views = [view(0, cached=("a", "b"), held=10, waiting=5), view(1, waiting=1)]
    default = make_router("llm-d", 2)
    assert default.scores(route_request(), views) == pytest.approx([2.5, 4.0])
    assert default.choose(route_request(), views, 0.0) == 1
    assert make_router("llm-d", 2, {"prefix_weight": 10}).choose(route_request(), views, 0.0) == 0


def test_sglang_routes_by_its_own_tree_when_balanced():
    router = make_router("sglang-cache-aware", 3, kv_blocks=100)
    router.trees[1].update(dict.fromkeys(("a", "b", "c"), 0.0))  # 3 of 4 blocks: rate 0.75 > 0.5
    router.trees[2].update(dict.fromkeys(("a",), 0.0))
    views = [view(k, in_flight=5) for k in range(3)]
    assert router.choose(route_request(), views, 1.0) == 1
    assert router.last_match_blocks == 3
    assert router.trees[1]["d"] == 1.0  # the prompt went into the chosen tree
    # A prompt matched at rate 1/4 <= 0.5 goes to the smallest tree (instance 0, empty).
    assert router.choose(route_request(keys=("a", "q", "r", "s")), views, 2.0) == 0


def test_sglang_balances_when_both_thresholds_are_passed():
    router = make_router("sglang-cache-aware", 2, kv_blocks=100)
    router.trees[0].update(dict.fromkeys(KEYS, 0.0))  # a full match on instance 0
    # max - min = 40 > 32 and 40 > 1.1 * 0: imbalanced -> the least loaded, despite the match.
    assert router.choose(route_request(), [view(0, in_flight=40), view(1, in_flight=0)], 0.0) == 1
    # max - min = 30 <= 32: balanced -> the match.
    router2 = make_router("sglang-cache-aware", 2, kv_blocks=100)
    router2.trees[0].update(dict.fromkeys(KEYS, 0.0))
    assert router2.choose(route_request(), [view(0, in_flight=30), view(1, in_flight=0)], 0.0) == 0


def test_sglang_evicts_least_recently_used_blocks_past_the_tree_size():
    router = make_router("sglang-cache-aware", 1, {"max_tree_size": 2, "eviction_interval_s": 10})
    router.trees[0].update({"old": 0.0, "mid": 5.0, "new": 9.0})
    router.choose(route_request(keys=("new",)), [view(0)], 10.0)  # eviction due at 10 s, then insert
    assert set(router.trees[0]) == {"mid", "new"}


@pytest.mark.parametrize("name,params,message", [
    ("dynamo-kv", {"overlap_weight": -1}, "overlap_weight=-1"),
    ("dynamo-kv", {"temperature": "hot"}, "temperature=hot "),
    ("llm-d", {"queue_weight": True}, "queue_weight=true "),
    ("sglang-cache-aware", {"cache_threshold": 2}, "cache_threshold=2"),
    ("round-robin", {"overlap_weight": 1}, "router 'round-robin' takes no parameters"),
])
def test_router_parameters_are_checked(name, params, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        make_router(name, 2, params)


# -- a fleet's tables ---------------------------------------------------------------------------
@pytest.mark.parametrize("router", [r for r in ROUTERS if r != "session-affinity"])
def test_fleet_serves_each_request_once_where_routed(conversation, router):
    result = simulate_fleet(conversation, [make_policy("lpm", PROFILE) for _ in range(3)],
                            make_router(router, 3, kv_blocks=200), PROFILE, EngineConfig())
    reqs = result.requests
    assert len(reqs) == len(conversation) and reqs["request_id"].is_unique
    assert reqs["ttft_s"].notna().all()
    assert sum(len(p.requests) for p in result.instances) == len(conversation)
    for k, part in enumerate(result.instances):
        mine = reqs[reqs["instance"] == k]
        assert list(part.requests["request_id"]) == list(mine["request_id"])
        assert len(part.steps) == int((result.steps["instance"] == k).sum())
    # What the router counted: whole blocks, below the prompt; none for a router blind to caches.
    counted = reqs["router_cached_tokens"]
    assert (counted % result.block_size == 0).all() and (counted <= reqs["prompt_tokens"]).all()
    if make_router(router, 3).view == "none":
        assert (counted == 0).all()
    else:
        assert counted.sum() > 0


def test_round_robin_spreads_requests_evenly(conversation):
    result = simulate_fleet(conversation, [make_policy("fcfs", PROFILE) for _ in range(4)],
                            make_router("round-robin", 4), PROFILE, EngineConfig())
    # Open loop, the i-th released request (arrival order) goes to i mod 4.
    assert list(result.requests["instance"]) == [i % 4 for i in range(len(conversation))]


def test_kv_router_hit_rate_grows_with_overlap_weight_toward_the_single_engine_bound():
    """Agent sessions, caches too large to evict: one engine reuses every shared prefix (the
    bound); round robin splits each session over the instances; Dynamo's cost keeps sessions
    together the more, the larger its overlap weight."""
    reqs = list(generate_agent(AgentSpec(num_sessions=40, session_rate_per_s=2.0)).requests)
    config = EngineConfig(kv_blocks=200_000, block_size=16)
    bound = summarize(simulate(reqs, make_policy("fcfs", PROFILE), PROFILE, config).requests)["hit_rate"]

    def hit(router, params=None):
        result = simulate_fleet(reqs, [make_policy("fcfs", PROFILE) for _ in range(4)],
                                make_router(router, 4, params), PROFILE, config)
        return summarize(result.requests)["hit_rate"]

    rr = hit("round-robin")
    weights = [hit("dynamo-kv", {"overlap_weight": w}) for w in (0, 1, 4, 16)]
    assert weights == sorted(weights)
    assert weights[-1] >= 0.95 * bound
    assert rr < weights[-1] and rr < 0.9 * bound


def test_round_robin_loses_a_sessions_own_prefix_with_more_instances():
    """Round robin sends a session's consecutive turns to different instances, so the share of
    the bound it keeps falls with N (measured 0.89, 0.76, 0.65 at N = 2, 4, 8), toward what every
    instance caches anyway (the prompts sessions share); a KV-aware router keeps >= 0.95 of it."""
    reqs = list(generate_agent(AgentSpec(num_sessions=40, session_rate_per_s=2.0)).requests)
    config = EngineConfig(kv_blocks=200_000, block_size=16)
    bound = summarize(simulate(reqs, make_policy("fcfs", PROFILE), PROFILE, config).requests)["hit_rate"]

    def share(router, n, params=None):
        result = simulate_fleet(reqs, [make_policy("fcfs", PROFILE) for _ in range(n)],
                                make_router(router, n, params), PROFILE, config)
        return summarize(result.requests)["hit_rate"] / bound

    rr = [share("round-robin", n) for n in (2, 4, 8)]
    assert rr[0] > rr[1] > rr[2] and rr[2] < 0.7
    assert all(share("dynamo-kv", n, {"overlap_weight": 16}) >= 0.95 for n in (2, 8))


# -- the command line ---------------------------------------------------------------------------
def fairsim(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "fairsim", *args], cwd=cwd, capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


def test_cli_fleet_tables_and_summary(tmp_path):
    out = tmp_path / "out"
    proc = fairsim("run", "--trace", str(WINDOW), "--max-requests", "200", "--policy", "lpm", "--instances", "3",
                   "--router", "llm-d", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "per instance:" in proc.stdout and "behind llm-d" in proc.stdout
    import pandas as pd

    reqs = pd.read_parquet(out / "requests-lpm.parquet")
    steps = pd.read_parquet(out / "steps-lpm.parquet")
    assert set(reqs["instance"]) <= {0, 1, 2} and len(reqs) == 200 and "instance" in steps
    summary = json.loads((out / "summary.json").read_text())["lpm"]
    assert summary["instances"] == 3 and summary["router"] == "llm-d"
    assert sum(r["requests"] for r in summary["per_instance"]) == 200
    busy = [r["busy_s"] for r in summary["per_instance"]]
    assert summary["load_imbalance"] == pytest.approx(max(busy) / (sum(busy) / 3))
    run = json.loads((out / "run.json").read_text())
    assert run["instances"] == 3 and run["router"] == "llm-d"


@pytest.mark.parametrize("args,message", [
    (["--instances", "0"], "--instances 0: need at least 1 instance"),
    (["--instances", "-2"], "--instances -2: need at least 1 instance"),
    (["--router-param", "x=1"], "--router-param needs --router"),
    (["--instances", "2", "--router", "dynamo-kv", "--router-param", "speed=1"],
     "--router-param speed: router 'dynamo-kv' takes overlap_weight, temperature"),
    (["--instances", "2", "--router", "session-affinity"],
     "--router session-affinity needs sessions (a session_id per request) and the trace has none"),
])
def test_cli_bad_fleet_input_exits_2_named(args, message):
    proc = fairsim("run", "--trace", str(WINDOW), "--max-requests", "50", "--policy", "fcfs", *args)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr


def test_cli_router_needing_hashes_on_a_trace_without_them(tmp_path):
    trace = tmp_path / "nohash.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": i * 100, "input_length": 500, "output_length": 1}) + "\n"
                             for i in range(20)))
    proc = fairsim("run", "--trace", str(trace), "--policy", "fcfs", "--instances", "2", "--router", "dynamo-kv")
    assert proc.returncode == 2, proc.stderr
    assert f"{trace}: --router dynamo-kv needs prefix identity (block hashes or segments)" in proc.stderr


def test_bench_passes_the_fleet_options_to_its_runs():
    from fairsim.bench import run_argv
    from fairsim.cli import build_parser

    args = build_parser().parse_args(["bench", "--instances", "8", "--router", "dynamo-kv",
                                      "--router-param", "overlap_weight=2", "--tile", "10"])
    argv = run_argv(args)
    assert argv[argv.index("--instances") + 1] == "8"
    assert argv[argv.index("--router") + 1] == "dynamo-kv"
    assert argv[argv.index("--router-param") + 1] == "overlap_weight=2"
    assert "--tile" not in argv
