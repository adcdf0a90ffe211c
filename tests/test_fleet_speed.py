"""Fleet speed: ``fairsim bench --vs-one-engine`` (a fleet beside one engine at the same per-engine
load) and the fast paths of fleet engines, which must not change a fleet's tables."""

from __future__ import annotations

import json
import math

import pytest

from fairsim import bench
from fairsim.cli import main
from fairsim.traces.canonical import write_canonical
from fairsim.traces.trace import Trace
from fairsim.types import Request

CONVERSATION = "../shared/data/traces/conversation_trace.jsonl"


def _cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _fake_runs(monkeypatch, seconds):
    """Replace each ``fairsim run`` child by the next ``(process_s, loop_s)`` of ``seconds``;
    returns the list of argv the children were given."""
    calls = []
    it = iter(seconds)

    def fake(argv, name):
        calls.append(list(argv))
        process, loop = next(it)
        return {"requests": 40, "steps": 10, "sim_time_s": 1.0, "process_s": process,
                "requests_per_s": 40 / process, "loop_s": loop, "loop_requests_per_s": 40 / loop,
                "peak_mib": 50.0, "ttft_p50_s": 0.1, "ttft_p99_s": 0.2, "profile": "p", "kv_tokens": 512,
                "kv_blocks": 1, "block_size": 512}

    monkeypatch.setattr(bench, "bench_policy", fake)
    return calls


def _value(argv, option):
    return argv[argv.index(option) + 1] if option in argv else None


def test_vs_one_engine_pairs_the_fleet_with_one_engine_at_the_same_per_engine_load(capsys, monkeypatch):
    # Pairs (one engine, fleet): process 2 then 3 s, 4 then 5 s, 1 then 3 s; loops 1/2, 2/2, 1/1.5.
    calls = _fake_runs(monkeypatch, [(2, 1), (3, 2), (4, 2), (5, 2), (1, 1), (3, 1.5)])
    code, out, err = _cli(capsys, "bench", "--policies", "fcfs", "--max-requests", "40", "--instances", "4",
                          "--router", "least-work", "--time-scale", "2", "--vs-one-engine", "--repeat", "3",
                          "--format", "json")
    assert code == 0, err
    one, fleet = calls[0::2], calls[1::2]
    for argv in one:  # one engine, arrivals 4 x further apart, no router
        assert float(_value(argv, "--time-scale")) == 8.0
        assert "--instances" not in argv and "--router" not in argv
        assert _value(argv, "--think-scale") is None  # open loop: think times untouched
    for argv in fleet:
        assert _value(argv, "--instances") == "4" and _value(argv, "--router") == "least-work"
        assert float(_value(argv, "--time-scale")) == 2.0
    r = json.loads(out)["fcfs"]
    assert r["vs_one_engine"] == 1.5  # median of 3/2, 5/4, 3/1
    assert r["loop_vs_one_engine"] == 1.5  # median of 2/1, 2/2, 1.5/1
    assert r["one_engine_process_s"] == 2 and r["one_engine_loop_s"] == 1
    assert r["one_engine_pairs"] == [[2, 3, 1, 2], [4, 5, 2, 2], [1, 3, 1, 1.5]]
    assert r["process_s"] == 3  # the fleet's median run
    assert r["one_engine_time_scale"] == 8.0


def test_vs_one_engine_in_closed_loop_stretches_think_times_too(capsys, monkeypatch, tmp_path):
    trace = tmp_path / "s.jsonl"
    reqs = (Request("a", 0.0, 40, session_id="s"), Request("c", 1.0, 40),
            Request("b", 5.0, 40, session_id="s", after="a", delay_s=2.0))
    write_canonical(Trace("s", "test", reqs), trace)
    calls = _fake_runs(monkeypatch, [(2, 1), (3, 2)])
    code, out, err = _cli(capsys, "bench", "--policies", "fcfs", "--trace", trace, "--instances", "2",
                          "--think-scale", "1.5", "--vs-one-engine", "--repeat", "1")
    assert code == 0, err
    assert float(_value(calls[0], "--think-scale")) == 3.0 and float(_value(calls[0], "--time-scale")) == 2.0
    assert float(_value(calls[1], "--think-scale")) == 1.5
    assert "vs 1 engine" in out and "think scale 3" in out


def test_vs_one_engine_drops_a_seed_that_seeded_only_the_fleets_sampling_router(capsys, monkeypatch):
    # --seed 5 seeds dynamo-kv's sampling (temperature > 0); the one engine has no router, and a
    # fairsim run with a --trace and a seed that seeds nothing exits 2, so it must not get it.
    calls = _fake_runs(monkeypatch, [(2, 1), (3, 2)])
    code, out, err = _cli(capsys, "bench", "--policies", "fcfs", "--trace", "fairsim/traces/data/conversation_window.jsonl",
                          "--max-requests", "40", "--instances", "2", "--router", "dynamo-kv", "--router-param",
                          "temperature=0.5", "--seed", "5", "--vs-one-engine", "--repeat", "1")
    assert code == 0, err
    one, fleet = calls
    assert _value(one, "--seed") is None and "--router" not in one and "--router-param" not in one
    assert _value(fleet, "--seed") == "5" and _value(fleet, "--router-param") == "temperature=0.5"


def test_vs_one_engine_with_a_sampling_router_and_a_seed_runs_for_real(capsys):
    code, out, err = _cli(capsys, "bench", "--policies", "fcfs", "--trace", "fairsim/traces/data/conversation_window.jsonl",
                          "--max-requests", "40", "--instances", "2", "--router", "dynamo-kv", "--router-param",
                          "temperature=0.5", "--seed", "5", "--vs-one-engine", "--repeat", "1")
    assert code == 0, err
    assert "40 requests" in out and "vs 1 engine" in out


def test_vs_one_engine_keeps_the_seed_of_the_generated_input(capsys, monkeypatch):
    # Without --trace the seed chooses the generated RAG input: both runs need it.
    calls = _fake_runs(monkeypatch, [(2, 1), (3, 2)])
    code, _, err = _cli(capsys, "bench", "--policies", "fcfs", "--max-requests", "40", "--instances", "2",
                        "--router", "dynamo-kv", "--router-param", "temperature=0.5", "--seed", "5",
                        "--vs-one-engine", "--repeat", "1")
    assert code == 0, err
    assert [_value(argv, "--seed") for argv in calls] == ["5", "5"]


@pytest.mark.parametrize("extra", [[], ["--instances", "1"], ["--instances", "1", "--router", "least-work"]])
def test_vs_one_engine_needs_a_fleet(capsys, monkeypatch, extra):
    calls = _fake_runs(monkeypatch, [])
    code, _, err = _cli(capsys, "bench", "--policies", "fcfs", "--max-requests", "40", "--vs-one-engine", *extra)
    assert code == 2 and "--vs-one-engine" in err and "--instances N >= 2" in err and not calls


def test_vs_one_engine_runs_both_for_real(capsys):
    code, out, err = _cli(capsys, "bench", "--policies", "fcfs", "--max-requests", "60", "--instances", "2",
                          "--vs-one-engine", "--tile", "2")
    assert code == 0, err
    head, columns, row, note = out.splitlines()[:4]
    assert "120 requests" in head and "trace x2" in head
    assert "vs 1 engine" in columns and "vs x1" not in columns  # the pair is the one engine, not x1
    assert note.startswith("vs 1 engine: time of the 2-instance fleet over one engine")


# -- fleet tables: the fast paths against the reference ----------------------------------------

def _fleet_run(mode, router, policy="fairway", max_requests=600, extra=(), **fleet_options):
    import contextlib
    import io

    from fairsim.cli import build_parser
    from fairsim.cli_fleet import FleetSpec
    from fairsim.costmodel import load_profile
    from fairsim.options import engine_config, load_requests

    scale = "1" if mode == "prefill-only" else "6"
    args = build_parser().parse_args(["run", "--trace", CONVERSATION, "--policy", policy, "--time-scale", scale,
                                      "--mode", mode, "--max-requests", str(max_requests), *extra])
    profile = load_profile(args.profile)
    with contextlib.redirect_stderr(io.StringIO()):
        _, requests = load_requests(args, profile)
    if fleet_options:
        from fairsim.policies import make_policy
        from fairsim.routers import make_router
        from fairsim.sim.capacity import resolve_capacity
        from fairsim.sim.fleet import simulate_fleet

        config = engine_config(args, profile)
        _, kv_blocks = resolve_capacity(requests, config)
        return simulate_fleet(requests, [make_policy(policy, profile) for _ in range(4)],
                              make_router(router, 4, {}, kv_blocks=kv_blocks), profile, config,
                              replay=args.replay, think_scale=args.think_scale, name=policy, **fleet_options)
    return FleetSpec(4, router).run(policy, requests, profile, engine_config(args, profile), {},
                                    replay=args.replay, think_scale=args.think_scale)


def _tables(result):
    """Every table of a fleet result as plain lists (fleet-wide, then per instance), NaN as the
    string ``"nan"`` (a NaN equals no NaN, and a one-token request's TPOT is one)."""
    def plain(values):
        return ["nan" if isinstance(v, float) and math.isnan(v) else v for v in values]

    out = []
    for part in (result, *result.instances):
        for name in ("requests", "steps"):
            out.append({c: plain(list(v)) for c, v in part.columns(name).columns.items()})
        gaps = part.token_gaps
        out.append(None if gaps is None else {c: plain(v) for c, v in gaps.to_dict("list").items()})
    return out


CASES = [("prefill-only", "round-robin", ()), ("prefill-only", "dynamo-kv", ()),
         ("prefill-only", "session-affinity", ("--replay", "closed", "--think-scale", "0.2")),
         ("colocated", "least-work", ("--kv-blocks", "250")),
         ("colocated", "llm-d", ("--replay", "closed", "--think-scale", "0.2", "--kv-blocks", "250"))]


@pytest.mark.parametrize("mode,router,extra", CASES)
def test_advancing_the_clock_without_an_event_changes_no_table(monkeypatch, mode, router, extra):
    # FleetMember.advance skips a step's SimPy timeout when it would be the next event anyway;
    # the reference yields every one (the fleet before this fast path).
    from fairsim.sim.fleet import FleetMember

    fast = _tables(_fleet_run(mode, router, extra=extra))
    monkeypatch.setattr(FleetMember, "advance", lambda self, t: False)
    assert _tables(_fleet_run(mode, router, extra=extra)) == fast


COLOCATED = [("round-robin", "fairway", ()), ("dynamo-kv", "lpm", ()), ("least-work", "fcfs", ("--kv-blocks", "250")),
             ("llm-d", "fairway", ("--replay", "closed", "--think-scale", "0.2", "--kv-blocks", "250")),
             ("session-affinity", "fcfs", ("--replay", "closed", "--kv-blocks", "250"))]


@pytest.mark.parametrize("router,policy,extra", COLOCATED)
def test_colocated_fleets_on_the_decode_fast_path_give_the_step_by_step_tables(router, policy, extra):
    fast = _fleet_run("colocated", router, policy, extra=extra, fast_decode=True)
    reference = _fleet_run("colocated", router, policy, extra=extra, fast_decode=False)
    assert _tables(fast) == _tables(reference)


@pytest.mark.parametrize("router,extra", [("least-work", ()), ("dynamo-kv", ("--replay", "closed", "--think-scale", "0.2"))])
def test_colocated_fleets_with_preemptions_on_the_decode_fast_path(router, extra):
    # A small cache at a high load: decoders outgrow it and vLLM preempts the newest.
    extra = ("--kv-blocks", "300", "--time-scale", "1.5", *extra)
    fast = _fleet_run("colocated", router, "fcfs", extra=extra, fast_decode=True)
    assert sum(fast.columns("requests")["preemptions"]) > 5
    assert _tables(fast) == _tables(_fleet_run("colocated", router, "fcfs", extra=extra, fast_decode=False))
