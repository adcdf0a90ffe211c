"""What the twentieth session's format pass found: a Bailian file pointed at Mooncake, and
Mooncake rows with no time at all (AIPerf's optional ``timestamp``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from fairsim.cli import main
from fairsim.traces.formats import read_trace

DATA = Path(__file__).parent / "data" / "formats"


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_a_bad_bailian_record_is_not_pointed_at_mooncake(tmp_path, capsys):
    # Was: "... [read as bailian, detected from the content; it also looks like mooncake: give
    # --trace-format mooncake to read it so]", and Mooncake reads seconds as milliseconds.
    bad = write_jsonl(tmp_path / "b.jsonl", [
        {"chat_id": 0, "parent_chat_id": 1, "timestamp": 0.5, "input_length": 40, "output_length": 5,
         "type": "text", "turn": 1, "hash_ids": [1, 2, 3]},
        {"chat_id": 1, "parent_chat_id": -1, "timestamp": 3.25, "input_length": 60, "output_length": 5,
         "type": "text", "turn": 2, "hash_ids": [1, 2, 4, 5]}])
    code, _, err = run_cli(capsys, "run", "--trace", bad)
    assert code == 2
    assert f"{bad}:1: field 'parent_chat_id'" in err and "a parent must come first" in err
    assert "mooncake" not in err


def test_a_bailian_file_read_as_mooncake_warns(tmp_path):
    bl = shutil.copy(DATA / "bailian.jsonl", tmp_path / "bl.jsonl")
    trace = read_trace(bl, "mooncake")
    assert trace.format == "mooncake"
    assert trace.warnings[-1] == (f"{bl}: read as mooncake, as --trace-format asked, but the content is "
                                  "bailian's (which mooncake misreads): give --trace-format bailian (or auto)")
    assert not any("misreads" in w for w in read_trace(bl, "bailian").warnings)
    assert not any("misreads" in w for w in read_trace(bl).warnings)
    mc = read_trace(DATA / "mooncake.jsonl", "mooncake")
    assert not any("misreads" in w for w in mc.warnings)


def test_mooncake_rows_with_no_time_are_aiperf_rows(tmp_path):
    # Each row of a file with no timestamp anywhere: delay 0 where it gives none, sessions started
    # by the replay (no absolute time). The same file with explicit delays 0 reads the same.
    rows = [{"session_id": "a", "input_length": 1000, "output_length": 10, "hash_ids": [1, 2]},
            {"session_id": "a", "delay": 500, "input_length": 1500, "output_length": 10, "hash_ids": [1, 2, 3]},
            {"session_id": "a", "input_length": 1600, "output_length": 10, "hash_ids": [1, 2, 3, 4]},
            {"input_length": 700, "output_length": 3, "hash_ids": [7, 8]}]
    trace = read_trace(write_jsonl(tmp_path / "n.jsonl", rows))
    assert not trace.absolute_time
    assert [(q.request_id, q.arrival_time, q.delay_s, q.after) for q in trace.requests] == [
        ("n:1", 0.0, 0.0, None), ("n:4", 0.0, 0.0, None), ("n:2", 0.5, 0.5, "n:1"), ("n:3", 0.5, 0.0, "n:2")]
    explicit = [dict(r, delay=r.get("delay", 0)) for r in rows]
    again = read_trace(write_jsonl(tmp_path / "n.jsonl", explicit))
    assert [(q.arrival_time, q.delay_s, q.after, q.prompt_len) for q in again.requests] == [
        (q.arrival_time, q.delay_s, q.after, q.prompt_len) for q in trace.requests]


def test_a_row_with_no_time_among_timed_rows_is_refused(tmp_path, capsys):
    f = write_jsonl(tmp_path / "m.jsonl", [
        {"timestamp": 0, "input_length": 1000, "output_length": 10, "hash_ids": [1, 2]},
        {"session_id": "a", "input_length": 1000, "output_length": 10, "hash_ids": [1, 2]}])
    code, _, err = run_cli(capsys, "run", "--trace", f)
    assert code == 2
    assert err.strip() == (f"fairsim: error: {f}:2: field 'timestamp': missing (and no delay), where other "
                           "records give a timestamp")


# -- accept (the twentieth session's first pass) ---------------------------------------------------
def _one_request(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "one.jsonl", [
        {"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}])


def test_accept_window_at_one_instant_has_no_load(tmp_path, capsys):
    # Was: load inf in the table, and Infinity (not JSON) in accept.json.
    out = tmp_path / "acc"
    code, printed, _ = run_cli(capsys, "accept", _one_request(tmp_path), "--policy", "fairway",
                               "--windows", "a:0-60", "--out", out)
    assert code == 0
    row = next(line.split() for line in printed.splitlines() if line.startswith("a "))
    assert row[:4] == ["a", "0-0", "1", "n/a"]
    payload = json.loads((out / "accept.json").read_text(), parse_constant=lambda c: pytest.fail(c))
    assert payload["windows"][0]["load"] is None and payload["pass"] is True


def test_accept_writes_accept_json_when_the_first_window_fails(tmp_path, capsys, monkeypatch):
    # Was: no accept.json at all, though CI reads its `pass` to tell a crash from a missed target.
    (tmp_path / "boompol.py").write_text(
        "from fairsim.policies.base import Policy\n"
        "class Boom(Policy):\n"
        "    name = 'boom'\n"
        "    def order(self, waiting, now):\n"
        "        raise RuntimeError('boom')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "acc"
    code, _, err = run_cli(capsys, "accept", _one_request(tmp_path), "--policy", "boompol:Boom",
                           "--windows", "a:0-60", "--out", out)
    assert code == 1, err
    assert "boom" in err
    payload = json.loads((out / "accept.json").read_text())
    assert payload["pass"] is None and payload["partial"] is True
    assert payload["windows"] == [] and payload["unfinished_windows"] == ["a"]


def test_accept_tables_mark_the_scored_requests(tmp_path, capsys):
    # Was: the per-window tables held the warm-up's requests too, unmarked.
    rows = [{"timestamp": 1000 * i, "input_length": 600, "output_length": 5, "hash_ids": [1, 2 + i]}
            for i in range(10)]
    out = tmp_path / "acc"
    code, _, _ = run_cli(capsys, "accept", write_jsonl(tmp_path / "t.jsonl", rows), "--policy", "fairway",
                         "--windows", "w:5-10", "--warmup", "3", "--out", out)
    assert code == 0
    import pyarrow.parquet as pq

    table = pq.read_table(out / "requests-w-fairway.parquet")
    frame = table.to_pandas()
    assert frame["request_id"].tolist() == [f"t:{i}" for i in range(3, 11)]  # lines 3..10: 2 s .. 9 s
    assert frame["scored"].tolist() == [False] * 3 + [True] * 5
    meta = json.loads(table.schema.metadata[b"fairsim"])
    assert meta["window"] == "w" and meta["policy"] == "fairway" and meta["kv_blocks"] > 0  # (was "w-fairway")


# -- options that had no effect, or contradicted another ---------------------------------------------
def test_options_without_effect_are_refused(tmp_path, capsys):
    trace = write_jsonl(tmp_path / "t.jsonl", [
        {"timestamp": 1000 * i, "input_length": 600, "output_length": 5, "hash_ids": [1, 2 + i]} for i in range(10)])
    code, _, err = run_cli(capsys, "accept", trace, "--policy", "fairway", "--windows", "w:0-5",
                           "--window-length", "30")
    assert code == 2 and err.strip() == ("fairsim: error: --window-length 30: it sizes --windows auto's windows; "
                                         "--windows w:0-5 gives them")
    code, _, err = run_cli(capsys, "profile", "build", "--from", "llmservingsim", "--system", "h200_sxm",
                           "--out", tmp_path / "p.json")
    assert code == 2 and err.strip() == ("fairsim: error: --system: only used with --from aiconfigurator "
                                         "(this is --from llmservingsim)")
    code, _, err = run_cli(capsys, "profile", "build", "--from", "aiconfigurator", "--tables", tmp_path,
                           "--out", tmp_path / "p.json")
    assert code == 2 and "--tables: only used with --from llmservingsim" in err
    assert not (tmp_path / "p.json").exists()


def test_tune_refuses_contradictions_before_any_trial(tmp_path, capsys):
    pytest.importorskip("optuna")
    trace = write_jsonl(tmp_path / "t.jsonl", [
        {"timestamp": 1000 * i, "input_length": 600, "output_length": 5, "hash_ids": [1, 2 + i]} for i in range(10)])
    base = ["tune", "--trace", trace, "--policies", "fairway", "--trials", "2", "--out", tmp_path / "o"]
    code, _, err = run_cli(capsys, *base, "--train", "a:0-4", "--holdout", "b:5-9", "--folds", "3")
    assert code == 2 and "--folds 3: --train and --holdout give the windows" in err
    code, _, err = run_cli(capsys, *base, "--param", "fairway.fast_weight=2", "--space", "fairway.fast_weight=1:8")
    assert code == 2 and err.strip() == ("fairsim: error: --space fairway.fast_weight: --param fixes "
                                         "fairway.fast_weight, so it is not searched; give one of the two")
    assert not (tmp_path / "o" / "trials.parquet").exists()


@pytest.mark.parametrize("command, name", [
    (("compare", "--policies", "fcfs,lpm"), "summary.json"), (("run", "--policy", "fcfs"), "run.json"),
    (("run", "--policy", "mypol:Rev"), "steps-mypol_Rev.parquet"),
    (("bench", "--policies", "fcfs", "--repeat", "1"), "bench.json")])
def test_a_folder_where_out_writes_a_file_is_refused_before_any_work(tmp_path, capsys, command, name):
    # Was: every policy ran, then "cannot write: Is a directory" (and compare wrote no run.json).
    (tmp_path / "o" / name).mkdir(parents=True)
    code, out, err = run_cli(capsys, *command, "--max-requests", "20", "--out", tmp_path / "o")
    assert code == 2 and out == ""
    assert err.strip() == (f"fairsim: error: --out {tmp_path / 'o' / name}: is a folder, where --out writes "
                           f"the file {name}")


@pytest.mark.parametrize("params, says", [
    ("seed = 5, num_requests = 50",
     "bad scenario parameter seed: the sweep's seeds set it (the spec's `seeds`), not `params`"),
    ('zipf_s = "abc"', "bad scenario parameter zipf_s: 'abc' is not a number (its default is 1.1)"),
    ("num_requests = 2.5", "bad scenario parameter num_requests: 2.5 is not a whole number (its default is 1200)"),
    ("nosuch = 1", "bad scenario parameter 'nosuch': unknown; known: num_requests, rate_per_s, num_docs, zipf_s,")])
def test_sweep_scenario_parameters_are_named_with_their_rule(tmp_path, capsys, params, says):
    # Was: "build_scenario() got multiple values for argument 'seed'" (seed was listed as known),
    # and "bad operand type for unary -: 'str'".
    spec = tmp_path / "s.toml"
    spec.write_text(f'[[scenarios]]\nname = "rag"\nparams = {{{params}}}\n[[policies]]\nname = "fcfs"\n')
    code, _, err = run_cli(capsys, "sweep", spec, "--out", tmp_path / "o", "--dry-run")
    assert code == 2 and f"{spec}: scenarios[0] (seed 0): {says}" in err
    assert "seed," not in err.partition("known:")[2]


def test_sweep_on_ray_without_ray_exits_2_with_the_extra_even_dry(tmp_path, capsys, monkeypatch):
    # Was: --dry-run exited 0, and a run said pip install 'fairsim[ray]' (the docs: -e ".[ray]").
    import importlib.util

    find = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else find(name, *a))
    spec = tmp_path / "s.toml"
    spec.write_text('[[scenarios]]\nname = "rag"\n[[policies]]\nname = "fcfs"\n')
    for dry in (("--dry-run",), ()):
        code, out, err = run_cli(capsys, "sweep", spec, "--out", tmp_path / "o", "--executor", "ray", *dry)
        assert code == 2 and out == ""
        assert 'install it with: pip install -e ".[ray]"' in err


def test_tune_names_the_closest_as_such_and_an_instant_trace_span(tmp_path, capsys):
    pytest.importorskip("optuna")
    one = _one_request(tmp_path)
    code, _, err = run_cli(capsys, "tune", "--trace", one, "--policies", "fairway", "--trials", "2",
                           "--out", tmp_path / "o1")
    # Was: "window w1 [0, 0) trace s holds no request", of a trace that holds one.
    assert code == 2 and err.strip() == ("fairsim: error: --folds 4: every request of the trace arrives at 0 "
                                         "trace s, so its span has no length to cut into windows; give --train "
                                         "and --holdout windows")
    trace = write_jsonl(tmp_path / "t.jsonl", [
        {"timestamp": 1000 * i, "input_length": 600 + 50 * i, "output_length": 5, "hash_ids": [1, 2 + i]}
        for i in range(12)])
    code, out, err = run_cli(capsys, "tune", "--trace", trace, "--policies", "fairway", "--trials", "2",
                             "--folds", "2", "--targets", "p50<=1e-9s", "--out", tmp_path / "o2")
    assert code == 2 and "no trial of 2 meets the targets" in err
    assert "closest (fairway, trial " in out and "chosen (" not in out


def test_an_abbreviation_of_several_options_names_them_all(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["bench", "--rep", "1"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "unrecognized arguments: --rep 1; did you mean --repeat or --replay?" in err


# -- the third pass: edge inputs ----------------------------------------------------------------------
def test_a_broken_first_line_is_named_and_skippable(tmp_path, capsys):
    # Was: "cannot tell the trace format of this file from its content", even with --skip-bad.
    broken = '{"timestamp": 0, "input_length": 1000, "output_length": 1, "hash_ids": [1,2]\n'
    good = "".join(json.dumps({"timestamp": 100 * i, "input_length": 600, "output_length": 2,
                               "hash_ids": [1, 2 + i]}) + "\n" for i in range(1, 4))
    alone = tmp_path / "alone.jsonl"
    alone.write_text(broken)
    code, _, err = run_cli(capsys, "run", "--trace", alone)
    assert code == 2 and err.startswith(f"fairsim: error: {alone}: line 1 is not valid JSON (")
    assert "give --trace-format (one of:" in err
    first = tmp_path / "first.jsonl"
    first.write_text(broken + good)
    code, _, err = run_cli(capsys, "run", "--trace", first)
    assert code == 2 and f"{first}:1: field '<json>': not valid JSON" in err
    code, out, err = run_cli(capsys, "run", "--trace", first, "--skip-bad", "--format", "json")
    assert code == 0 and json.loads(out)["fairway"]["requests"] == 3
    import gzip

    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(gzip.compress(good.encode())[:40])
    code, _, err = run_cli(capsys, "run", "--trace", cut)
    assert code == 2 and "line 1 is not valid JSON (" in err and "the gzip stream ends there, cut short" in err


def test_fairway_weights_beyond_their_bounds_are_refused(capsys):
    # Was: 4e304 / 1e304 accepted, the work charges overflowed and the merge changed silently.
    code, _, err = run_cli(capsys, "run", "--max-requests", "20", "--param", "fast_weight=4e304",
                           "--param", "fair_weight=1e304")
    assert code == 2 and "Fairway fast_weight=4e+304: need a weight from 1e-100 to 1e+100" in err
    runs = [run_cli(capsys, "run", "--max-requests", "60", "--format", "json", *p) for p in
            ((), ("--param", "fast_weight=4e99", "--param", "fair_weight=1e99"))]
    assert [json.loads(out)["fairway"]["ttft_p99_s"] for _, out, _ in runs] == [
        json.loads(runs[0][1])["fairway"]["ttft_p99_s"]] * 2  # the ratio alone matters within the bounds


def test_capacity_messages_at_the_edges(tmp_path, capsys):
    azure = tmp_path / "a.csv"
    azure.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                     "2023-11-16 18:15:46.6805900,4000,10\n2023-11-16 18:15:47.0,300,5\n")
    code, _, err = run_cli(capsys, "run", "--trace", azure, "--kv-fraction", "1e6")
    # Was: a 1-block cache, and "raise ... --kv-fraction" (0 x F is 0 whatever F).
    assert code == 2 and err.strip() == ("fairsim: error: --kv-fraction 1e+06: the trace has no reusable content "
                                         "(no block of 512 tokens appears in two requests), so a fraction of it "
                                         "is no cache; size it with --kv-blocks or --kv-tokens (EngineConfig "
                                         "kv_blocks/kv_tokens)")
    one = write_jsonl(tmp_path / "one.jsonl", [{"timestamp": 0, "input_length": 1, "output_length": 1,
                                                "hash_ids": []}])
    code, _, err = run_cli(capsys, "run", "--trace", one, "--max-model-len", "2", "--kv-blocks", "1",
                           "--block-size", "1")
    # Was: "Use --max-model-len 1 or less", which is out of range.
    assert code == 2 and "needs 2 KV blocks of 1 token, but the KV cache holds 1 (1 token)" in err
    assert "Use a larger cache (--kv-tokens, --kv-blocks" in err


def test_the_runs_warnings_reach_run_json(tmp_path, capsys):
    trace = write_jsonl(tmp_path / "t.jsonl", [{"timestamp": 0, "input_length": 1000, "output_length": 5000,
                                                 "hash_ids": [1, 2]}])
    code, _, err = run_cli(capsys, "run", "--trace", trace, "--mode", "colocated", "--max-model-len", "2048",
                           "--think-scale", "2", "--out", tmp_path / "o")
    assert code == 0
    warnings = json.loads((tmp_path / "o" / "run.json").read_text())["warnings"]
    assert [w[:40] for w in warnings] == ["1 request asks for more output than --ma",
                                          "--think-scale 2 has no effect in open lo"]
    assert all(f"fairsim: warning: {w}" in err for w in warnings)


# -- the fourth pass (this session's changes, seen from outside) ------------------------------------
def test_a_stray_byte_before_the_first_record_is_named(tmp_path, capsys):
    rows = "".join(json.dumps({"timestamp": 100 * i, "input_length": 600, "output_length": 2,
                               "hash_ids": [1, 2 + i]}) + "\n" for i in range(3))
    trace = tmp_path / "t.jsonl"
    trace.write_text("x" + rows)
    code, _, err = run_cli(capsys, "run", "--trace", trace)
    assert code == 2 and f"{trace}:1: field '<json>': not valid JSON: Expecting value (at character 1)" in err
    code, out, _ = run_cli(capsys, "run", "--trace", trace, "--skip-bad", "--format", "json")
    assert code == 0 and json.loads(out)["fairway"]["requests"] == 2


def test_output_folders_in_the_way_are_refused_before_any_work(tmp_path, capsys):
    (tmp_path / "p" / "queue_kv.png").mkdir(parents=True)
    code, out, err = run_cli(capsys, "compare", "--max-requests", "20", "--policies", "fcfs",
                             "--plots", tmp_path / "p")
    assert code == 2 and out == ""
    assert err.strip() == (f"fairsim: error: --plots {tmp_path / 'p' / 'queue_kv.png'}: is a folder with a file's "
                           f"name (fairsim writes its .json, .parquet, .png, .md, .csv files in --plots); move it away")
    spec = tmp_path / "s.toml"
    spec.write_text('[[scenarios]]\nname = "rag"\nparams = {num_requests = 30}\n[[policies]]\nname = "fcfs"\n')
    (tmp_path / "sw").mkdir()
    (tmp_path / "sw" / "runs").write_text("")
    code, _, err = run_cli(capsys, "sweep", spec, "--out", tmp_path / "sw", "--workers", "1", "--no-progress")
    assert code == 2 and f"{tmp_path / 'sw' / 'runs'}: is a file, where --out keeps the folder runs" in err
    assert not (tmp_path / "sw" / "spec.json").exists()


@pytest.mark.parametrize("scenario, params, says", [
    ("sec-steady", 'rate_per_s = "fast"',
     "bad scenario parameter rate_per_s: 'fast' is not a number (its default is 1.0)"),
    ("sec-steady", 'profile = "x"', "bad scenario parameter profile: the sweep's engine profile sets it, not `params`"),
    ("mooncake-conversation", "bogus = 0",
     "bad scenario parameter 'bogus': unknown; known: load, max_requests, window_step_s, max_prompt_tokens")])
def test_a_builders_own_parameters_are_checked_too(tmp_path, capsys, scenario, params, says):
    spec = tmp_path / "s.toml"
    spec.write_text(f'[[scenarios]]\nname = "{scenario}"\nparams = {{{params}}}\n[[policies]]\nname = "fcfs"\n')
    code, _, err = run_cli(capsys, "sweep", spec, "--out", tmp_path / "o", "--dry-run")
    assert code == 2 and says in err


def test_a_whole_float_for_an_int_parameter_is_the_int():
    from fairsim.costmodel import DEFAULT_PROFILE, load_profile
    from fairsim.scenarios import build_scenario

    profile = load_profile(DEFAULT_PROFILE)
    assert len(build_scenario("rag", profile, 0, num_requests=40.0).requests) == 40
    with pytest.raises(ValueError, match=r"num_requests: 40.5 is not a whole number"):
        build_scenario("rag", profile, 0, num_requests=40.5)


def test_analyze_does_not_list_the_slo_it_refuses(capsys):
    with pytest.raises(SystemExit):
        main(["analyze", "--help"])
    assert "--slo" not in capsys.readouterr().out
