"""Defects found and mended in the twenty-eighth session (each test says what it was)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from fairsim.cli import main
from fairsim.policies import make_policy
from fairsim.traces import read_trace
from tests.utils import constant_profile

PROFILE = constant_profile()


def _dynamo_row(rid, received_ms, schema="dynamo.request.trace.v1"):
    row = {"event_type": "request_end",
           "request": {"request_id": rid, "input_tokens": 32, "output_tokens": 5,
                       "request_received_ms": received_ms,
                       "replay": {"trace_block_size": 16, "input_length": 32,
                                  "input_sequence_hashes": [11, 12]}}}
    if schema is not None:
        row["schema"] = schema
    return row


def test_a_dynamo_row_of_another_schema_version_is_read_with_a_warning(tmp_path):
    # Was: a row naming "dynamo.request.trace.v2" was read as v1 without a word, though a later
    # version may move or rename the fields the reader takes.
    path = tmp_path / "d.jsonl.gz"
    rows = [_dynamo_row("a", 1_000, "dynamo.request.trace.v2"), _dynamo_row("b", 1_500, "dynamo.request.trace.v2"),
            _dynamo_row("c", 2_000), _dynamo_row("d", 2_500, None)]
    path.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in rows).encode()))
    trace = read_trace(path)
    assert [r.request_id for r in trace.requests] == ["a", "b", "c", "d"]
    assert [r.arrival_time for r in trace.requests] == [0.0, 0.5, 1.0, 1.5]
    assert [w for w in trace.warnings if "schema" in w] == [
        f"{path}: request_end rows name the schema 'dynamo.request.trace.v2' (2 rows), not "
        "'dynamo.request.trace.v1', the one fairsim reads: they were read with its fields (docs/traces.md); "
        "check that their fields mean the same"]


def test_a_dynamo_trace_of_the_known_schema_or_none_has_no_schema_warning(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps(_dynamo_row("a", 1_000)) + "\n" + json.dumps(_dynamo_row("b", 1_200, None)) + "\n")
    assert read_trace(path).warnings == ()


@pytest.mark.parametrize("name, params, text", [
    ("fairway", {"fast_weight": True}, "Fairway fast_weight=true: need a finite number"),
    ("ragcache", {"pgdsf": None}, "RAGCache pgdsf=null: need true or false"),
    ("lpm", {"sglang_dedup": 1}, "LPM sglang_dedup=1: need true or false"),
    ("klpm", {"k": False}, "k-LPM k=false: need an integer >= 1"),
    ("suf", {"starvation_iterations": True}, "suf starvation_iterations=true: need an integer >= 1"),
])
def test_shipped_policies_spell_values_as_param_takes_them(name, params, text):
    # Was: "Fairway fast_weight=True: ...", Python's spelling, which --param reads as a string.
    with pytest.raises(ValueError) as info:
        make_policy(name, PROFILE, **params)
    assert text in str(info.value)


@pytest.mark.parametrize("where, spec, message", [
    ("policy grid", 'policies = [{name = "fairway", grid = {fast_weight = [4, 4.0]}}]\n',
     "policies[0].grid.fast_weight: [4, 4.0]: a value is listed twice"),
    ("policy grid", 'policies = [{name = "fairway", grid = {fast_weight = [2, 2]}}]\n',
     "policies[0].grid.fast_weight: [2, 2]: a value is listed twice"),
    ("engine", 'policies = ["fcfs"]\n[engine]\nkv_blocks = [100, 100.0]\n',
     "engine.kv_blocks: [100, 100.0]: a value is listed twice"),
])
def test_sweep_refuses_a_grid_value_listed_twice_in_any_spelling(tmp_path, capsys, where, spec, message):
    # Was: [4, 4.0] ran the same simulation twice under two run ids (the ids hash 4 and 4.0
    # apart); [2, 2] was refused only as two entries giving the same run.
    path = tmp_path / "s.toml"
    head, _, engine = spec.partition("[engine]\n")
    path.write_text(head + '[[scenarios]]\nname = "rag"\nparams = { num_requests = 40 }\n'
                    + (f"[engine]\n{engine}" if engine else ""))
    assert main(["sweep", str(path), "--out", str(tmp_path / "o"), "--dry-run"]) == 2
    assert capsys.readouterr().err.strip() == f"fairsim: error: {path}: {message}"


def test_sweep_keeps_distinct_grid_values_that_only_look_alike(tmp_path, capsys):
    path = tmp_path / "s.toml"
    path.write_text('policies = [{name = "fairway", grid = {fast_weight = [4, 4.5, 40]}}]\n'
                    '[[scenarios]]\nname = "rag"\nparams = { num_requests = 40 }\n')
    assert main(["sweep", str(path), "--out", str(tmp_path / "o"), "--dry-run"]) == 0
    assert "3 runs" in capsys.readouterr().out


@pytest.mark.parametrize("command", ["compare", "tune"])
def test_an_unscoped_param_another_policy_takes_is_named_with_its_scoped_spelling(tmp_path, capsys, command):
    # Was: "policy 'lpm': bad parameters {'fast_weight': 8}; accepted: ...", leaving the user to
    # find that an unscoped --param goes to every policy run, and how to scope it.
    args = [command, "--param", "fast_weight=8", "--policies", "fairway,lpm", "--out", str(tmp_path / "o")]
    assert main(args + (["--trials", "4"] if command == "tune" else [])) == 2
    assert capsys.readouterr().err.strip().endswith(
        "policy 'lpm': bad parameters {'fast_weight': 8}; accepted: sglang_sort_limit, sglang_dedup; "
        "--param fast_weight=8 goes to every policy run: give it to one as --param fairway.fast_weight=8")


def test_an_unscoped_param_no_policy_run_takes_gets_no_scoping_advice(capsys):
    assert main(["compare", "--param", "bogus=8", "--policies", "fairway,lpm"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == ("fairsim: error: policy 'fairway': bad parameters {'bogus': 8}; "
                                               "accepted: fast_weight, fair_weight, slo_multiplier, slo_floor, "
                                               "wait_mode, fair_lane")


@pytest.mark.parametrize("text, message", [
    ("no-starvation,no-starvation", "--targets no-starvation,no-starvation: no-starvation given more than once"),
    ("accept, no-starvation", "--targets accept, no-starvation: no-starvation given more than once (accept includes it)"),
    ("accept,accept", "--targets accept,accept: accept given more than once"),
])
def test_targets_refuse_no_starvation_given_twice(text, message):
    # Was: accepted, while a statistic given twice is refused.
    from fairsim.accept import parse_targets

    with pytest.raises(ValueError) as info:
        parse_targets(text)
    assert str(info.value) == message


def test_targets_take_no_starvation_once_beside_statistics():
    from fairsim.accept import parse_targets

    targets, starvation = parse_targets("p50<=2s,no-starvation,p99<=1.5xfcfs")
    assert starvation and [(t.stat, t.factor, t.ref) for t in targets] == [("p50_s", 2.0, None), ("p99_s", 1.5, "fcfs")]


def test_a_run_collects_earlier_runs_garbage_once_their_requests_pass_the_bound(monkeypatch):
    # Was: each finished run's per-request state stayed in reference cycles, hidden from the
    # collector's schedule by the run's gc.freeze, so one process's runs (compare, analyze,
    # accept, tune) kept every earlier run's state: 8 policies on 200,000 requests took 2.0 GB.
    import gc
    import weakref

    import fairsim.gcpause as gcpause
    from fairsim.sim import EngineConfig, simulate
    from fairsim.types import Request

    requests = [Request(f"r{i}", 0.1 * i, 64, (i, i + 1000), 32, 1) for i in range(40)]
    monkeypatch.setattr(gcpause, "GARBAGE_REQUESTS", 60)
    monkeypatch.setattr(gcpause, "_simulated", 0)
    collected = []
    monkeypatch.setattr(gc, "collect", lambda *a, _c=gc.collect: collected.append(1) or _c(*a))
    policy = make_policy("fcfs", PROFILE)
    first = weakref.ref(policy)
    simulate(requests, policy, PROFILE, EngineConfig(kv_blocks=64))
    del policy
    simulate(requests, make_policy("fcfs", PROFILE), PROFILE, EngineConfig(kv_blocks=64))
    assert collected == [] and gcpause._simulated == 80  # 40 simulated before: below the bound
    simulate(requests, make_policy("fcfs", PROFILE), PROFILE, EngineConfig(kv_blocks=64))
    assert collected == [1] and gcpause._simulated == 40  # 80 >= 60: collected, then counted anew
    assert first() is None  # the first run's engine (which held its policy) was freed


def test_analyze_under_session_rate_measures_the_spread_on_the_simulated_clock(tmp_path, capsys):
    # Was: --session-rate drew new session starts but the spread still read the recorded
    # scheduling times, on the recording's clock: two clocks compared, or the run stopped with
    # "... is before the request's arrival".
    rows = [{"timestamp": 100 * i, "input_length": 1024, "output_length": 10, "hash_ids": [i, 100 + i],
             "session_id": f"s{i}", "observed_first_scheduled_ms": 100 * i + 50, "observed_cached_tokens": 0}
            for i in range(6)]
    trace = tmp_path / "obs.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["analyze", str(trace), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["spread"]["source"] == "observed scheduling times"
    assert main(["analyze", str(trace), "--session-rate", "0.001", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["spread"]["source"] == "FCFS simulation at the trace's timing"


@pytest.mark.parametrize("command", ["run", "bench"])
def test_a_window_that_keeps_no_request_says_where_the_arrivals_lie(capsys, command):
    # Was: "no requests left after --window-start/--window-end/--max-requests", without saying
    # that the embedded trace's arrivals end at 399 s.
    window = Path(__file__).resolve().parents[1] / "fairsim" / "traces" / "data" / "conversation_window.jsonl"
    args = [command, "--trace", str(window), "--window-start", "500"]
    assert main(args + (["--policies", "fcfs", "--tile", "2"] if command == "bench" else [])) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "fairsim: error: no requests left after --window-start/--window-end/--max-requests: --window-start 500 "
        "keeps none of the trace's arrivals, which run from 0 s to 399 s")


def test_tune_space_refuses_one_number_given_twice_in_two_spellings():
    # Was: --space fairway.fast_weight=4|4.0 searched 4 and 4.0 as two choices (one simulation),
    # where a sweep grid refuses them as one value listed twice.
    from fairsim.policies.space import parse_range

    with pytest.raises(ValueError) as info:
        parse_range("4|4.0", "--space fairway.fast_weight")
    assert str(info.value) == "--space fairway.fast_weight: a value given twice in [4, 4.0]"
    assert parse_range("4|4.5|true|1", "--space x").values == (4, 4.5, True, 1)


def test_an_interrupted_tune_says_how_to_resume(tmp_path, capsys, monkeypatch):
    # Was: only "interrupted; results already written are kept", where sweep also says that the
    # same command resumes; tune's study does resume (its trials are in study.db).
    import fairsim.tune.search as search

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(search, "run_study", interrupted)
    out = tmp_path / "t"
    window = Path(__file__).resolve().parents[1] / "fairsim" / "traces" / "data" / "conversation_window.jsonl"
    assert main(["tune", "--trace", str(window), "--policies", "fcfs,lpm", "--trials", "2", "--out", str(out)]) == 130
    assert f"fairsim: the finished trials are kept in {out}; run the same command to resume" in \
        capsys.readouterr().err


@pytest.mark.parametrize("recorded", [True, False])
def test_analyze_warns_of_a_simulated_backlog_only_when_it_simulates_the_spread(tmp_path, capsys, recorded):
    # Was: the overload warning ("the FCFS queue grows ... the spread measures that backlog")
    # also when the spread came from the recorded scheduling times, not from an FCFS run.
    rows = [{"timestamp": 10 * i, "input_length": 8000, "output_length": 1, "hash_ids": list(range(16 * i, 16 * i + 16))}
            for i in range(20)]
    if recorded:
        for i, r in enumerate(rows):
            r.update(observed_first_scheduled_ms=10 * i + 5, observed_cached_tokens=0)
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["analyze", str(trace), "--format", "json"]) == 0
    captured = capsys.readouterr()
    source = json.loads(captured.out)["spread"]["source"]
    assert source == ("observed scheduling times" if recorded else "FCFS simulation at the trace's timing")
    assert ("the FCFS queue grows" in captured.err) is (not recorded)
