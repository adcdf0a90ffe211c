"""``fairsim bench --compare dynamo``: the trace and settings Dynamo gets, its figures, the skip."""

from __future__ import annotations

import json

import pytest

from fairsim import bench_dynamo
from fairsim.bench_dynamo import engine_args, mooncake_rows, parse_report, trace_block_size
from fairsim.cli import main
from tests.utils import make_request


def _cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_rows_are_in_arrival_order_with_an_id_for_every_block():
    # Block 4: 10 tokens need ceil(10 / 4) = 3 ids, the third (a partial block) fresh above every
    # hash of the trace (8), so 9; a request without hashes gets fresh ids for all its blocks.
    late = make_request("late", 0.5, 10, hashes=(7, 8), block=4)
    early = make_request("early", 0.25, 4, hashes=(7,), block=4)
    bare = make_request("bare", 1.0, 5, block=4)
    rows = mooncake_rows([late, bare, early], decode=False)
    assert rows == [
        {"timestamp": 250.0, "input_length": 4, "output_length": 1, "hash_ids": [7]},
        {"timestamp": 500.0, "input_length": 10, "output_length": 1, "hash_ids": [7, 8, 9]},
        {"timestamp": 1000.0, "input_length": 5, "output_length": 1, "hash_ids": [10, 11]},
    ]


def test_colocated_rows_keep_the_output_lengths():
    from dataclasses import replace

    r = replace(make_request("a", 0.0, 8, hashes=(1, 2), block=4), output_len=37)
    assert mooncake_rows([r], decode=True)[0]["output_length"] == 37
    assert mooncake_rows([r], decode=False)[0]["output_length"] == 1


def test_one_hash_block_size_or_refused():
    assert trace_block_size([make_request("a", 0, 8, hashes=(1, 2), block=4)]) == 4
    with pytest.raises(ValueError, match=r"mix hash-block sizes \[4, 8\]"):
        trace_block_size([make_request("a", 0, 8, hashes=(1, 2), block=4),
                          make_request("b", 0, 8, hashes=(3,), block=8)])


def test_engine_args_match_fairsims_engine():
    got = engine_args(budget=2048, block_size=512, kv_blocks=451, max_num_seqs=256, speedup_ratio=0.25)
    assert got == {"engine": {"backend": "vllm", "num_gpu_blocks": 451, "block_size": 512,
                              "max_num_batched_tokens": 2048, "max_num_seqs": 256,
                              "enable_prefix_caching": True, "enable_chunked_prefill": True,
                              "speedup_ratio": 0.25}}


def test_the_replays_summary_line_is_read_in_seconds():
    line = json.dumps({"num_requests": 3, "completed_requests": 3, "wall_time_ms": 250.0,
                       "duration_ms": 9000.0, "median_ttft_ms": 120.0, "p99_ttft_ms": 4500.0,
                       "min_ttft_ms": 50.0})
    got = parse_report("some log line\n" + line + "\n", 3)
    assert got == {"requests": 3, "loop_s": 0.25, "sim_time_s": 9.0, "ttft_p50_s": 0.12,
                   "ttft_p99_s": 4.5, "ttft_min_s": 0.05}


@pytest.mark.parametrize("text, says", [
    ("", "printed no summary line"),
    ("Traceback ...\n", "printed no summary line"),
    (json.dumps({"completed_requests": 3, "wall_time_ms": 1.0}), "lacks duration_ms, median_ttft_ms, p99_ttft_ms"),
    (json.dumps({"completed_requests": 2, "wall_time_ms": 1.0, "duration_ms": 1.0, "median_ttft_ms": 1.0,
                 "p99_ttft_ms": 1.0}), "completed 2 of the 3 requests"),
    (json.dumps({"completed_requests": 3, "wall_time_ms": 1.0, "duration_ms": 1.0, "median_ttft_ms": -5,
                 "p99_ttft_ms": 1.0}), r"median_ttft_ms -5 is not a time >= 0"),
    ('{"completed_requests": 3, "wall_time_ms": 1.0, "duration_ms": 1.0, "median_ttft_ms": 1.0, "p99_ttft_ms": NaN}',
     r"p99_ttft_ms nan is not a time >= 0"),
    (json.dumps({"completed_requests": 3, "wall_time_ms": 1.0, "duration_ms": 1.0, "median_ttft_ms": 2.0,
                 "p99_ttft_ms": 1.0}), r"median_ttft_ms 2.0 is above its p99_ttft_ms 1.0"),
])
def test_a_replay_without_whole_figures_is_refused(text, says):
    with pytest.raises(ValueError, match=says):
        parse_report(text, 3)


def test_absent_dynamo_is_skipped_with_a_line_and_fairsims_figures_stay(capsys, monkeypatch):
    monkeypatch.setattr(bench_dynamo, "dynamo_available", lambda: False)
    code, out, err = _cli(capsys, "bench", "--policies", "fcfs", "--max-requests", "20", "--compare", "dynamo")
    assert code == 0
    assert "bench: --compare dynamo: skipped, Dynamo is not installed" in err
    assert "pip install --no-deps ai-dynamo-runtime==1.6.1 ai-dynamo==1.6.1" in err
    lines = out.strip().splitlines()
    assert lines[1].split()[:2] == ["policy", "steps"] and "x dynamo" not in lines[1]
    assert lines[2].startswith("fcfs ")
    assert lines[-1].startswith("dynamo: skipped, not installed")


def test_closed_loop_has_no_dynamo_counterpart(capsys):
    code, _, err = _cli(capsys, "bench", "--policies", "fcfs", "--max-requests", "20", "--compare", "dynamo",
                        "--replay", "closed")
    assert code == 2 and "--compare dynamo" in err and "--replay closed" in err


def test_a_session_trace_closed_by_default_has_no_dynamo_counterpart(capsys, tmp_path, monkeypatch):
    # Was: fairsim's rows replayed closed loop (the default with sessions) beside Dynamo's open
    # loop, with "same arrivals" under the table (twentieth session's new-user pass).
    monkeypatch.setattr(bench_dynamo, "dynamo_available", lambda: False)  # refused all the same
    trace = tmp_path / "s.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": 500 * i, "input_length": 600, "output_length": 4,
                                         "hash_ids": [1, 2], "session_id": f"s{i % 2}"}) + "\n" for i in range(6)))
    code, out, err = _cli(capsys, "bench", "--policies", "fcfs", "--trace", trace, "--compare", "dynamo",
                          "--repeat", "1")
    assert code == 2 and out == ""
    assert err.strip().endswith("give --replay open to compare the two on the trace's arrival times")
    code, out, _ = _cli(capsys, "bench", "--policies", "fcfs", "--trace", trace, "--compare", "dynamo",
                        "--repeat", "1", "--replay", "open")
    assert code == 0 and "fcfs " in out


def test_dynamo_runs_on_the_same_requests_when_installed(capsys, tmp_path):
    pytest.importorskip("dynamo.replay", reason="Dynamo is not installed (docs/performance.md: the recipe)")
    code, out, _ = _cli(capsys, "bench", "--policies", "fcfs", "--max-requests", "40", "--compare", "dynamo",
                        "--repeat", "1", "--format", "json", "--out", tmp_path)
    assert code == 0
    rows = json.loads(out)
    dyn = rows["dynamo"]
    assert dyn["requests"] == 40 and 0 < dyn["loop_s"] < dyn["process_s"]
    assert 0 < dyn["ttft_p50_s"] <= dyn["ttft_p99_s"]
    assert abs(rows["fcfs"]["vs_dynamo"] - rows["fcfs"]["requests_per_s"] / dyn["requests_per_s"]) < 1e-9
    assert rows["fcfs"]["peer_pairs"] == [[dyn["process_s"], rows["fcfs"]["process_s"]]]  # one pair
    assert len((tmp_path / "dynamo-trace.jsonl").read_text().splitlines()) == 40


def test_dynamos_step_times_are_aligned_to_the_profiles(tmp_path):
    # One cold request of one budget-sized chunk: with the speedup set from the probe, Dynamo's
    # TTFT is the profile's time for that chunk (the alignment's defining point).
    pytest.importorskip("dynamo.replay", reason="Dynamo is not installed (docs/performance.md: the recipe)")
    from fairsim.costmodel import load_profile

    profile = load_profile()
    chunk_s = profile.prefill_time(2048, 0, 2048)
    req = make_request("one", 0.0, 2048, hashes=(1, 2, 3, 4), block=512)
    row = bench_dynamo.bench_dynamo([req], tmp_path, budget=2048, block_size=512, kv_blocks=64,
                                    max_num_seqs=256, chunk_s=chunk_s, decode=False)
    assert row["ttft_p50_s"] == pytest.approx(chunk_s, rel=1e-6)


def _fake_dynamo(monkeypatch, log, ttft_ms: str = "120.0", probe_exit: int = 0) -> None:
    """Dynamo "installed" as a stand-in replay script: it appends ``probe`` or ``P`` to the file
    ``log`` at each start and prints the summary line of a replay that completed every request
    of its trace. ``ttft_ms``: a Python expression of ``runs`` (the timed runs so far, this one
    included) for its median TTFT; ``probe_exit``: the probe's exit status."""
    script = f'''import json, sys
spec = json.load(open(sys.argv[1]))
probe = sys.argv[1].endswith("dynamo-probe.json")
with open({str(log)!r}, "a") as f:
    f.write("probe\\n" if probe else "P\\n")
if probe and {probe_exit}:
    print("no engine", file=sys.stderr)
    sys.exit({probe_exit})
runs = open({str(log)!r}).read().split().count("P")
n = sum(1 for _ in open(spec["trace"]))
print(json.dumps({{"num_requests": n, "completed_requests": n, "wall_time_ms": 5.0, "duration_ms": 9000.0,
                  "median_ttft_ms": {ttft_ms}, "p99_ttft_ms": 4500.0, "min_ttft_ms": 50.0}}))
'''
    monkeypatch.setattr(bench_dynamo, "dynamo_available", lambda: True)
    monkeypatch.setattr(bench_dynamo, "CHILD_SCRIPT", script)


def test_dynamo_is_prepared_once_then_run_before_each_policy_run(capsys, tmp_path, monkeypatch):
    from tests.utils import timed_walls

    log = tmp_path / "log"
    _fake_dynamo(monkeypatch, log)
    # Wall seconds in the order run, (dynamo, policy) x 2 for fcfs then lpm (the probe is untimed).
    timed_walls(monkeypatch, log, [1.0, 2.0, 4.0, 2.0, 3.0, 1.0, 3.0, 3.0])
    code, out, err = _cli(capsys, "bench", "--policies", "fcfs,lpm", "--max-requests", "40", "--repeat", "2",
                          "--compare", "dynamo", "--out", tmp_path / "o")
    assert code == 0, err
    assert log.read_text().split() == ["probe"] + ["P", "fcfs"] * 2 + ["P", "lpm"] * 2
    rows = json.loads((tmp_path / "o" / "bench.json").read_text())
    assert rows["fcfs"]["peer_pairs"] == [[1.0, 2.0], [4.0, 2.0]]
    assert rows["lpm"]["peer_pairs"] == [[3.0, 1.0], [3.0, 3.0]]
    assert rows["fcfs"]["vs_dynamo"] == 1.25  # median of 1/2 and 4/2
    assert rows["lpm"]["vs_dynamo"] == 2.0  # median of 3/1 and 3/3
    dyn = rows["dynamo"]
    assert dyn["process_s_runs"] == [1.0, 3.0, 3.0, 4.0] and dyn["process_s"] == 3.0  # lower middle of 4
    assert dyn["ttft_p50_s"] == 0.12 and dyn["sim_time_s"] == 9.0 and dyn["requests"] == 40
    table = out.splitlines()
    assert table[2].split()[-1] == "1.25" and table[3].split()[-1] == "2.00" and table[4].startswith("dynamo ")
    assert ("x dynamo: the median over the 2 pair(s) of the policy's req/s over dynamo's, each policy run "
            "right after a dynamo run (dynamo's row: the median of its 4 run(s))") in table


def test_a_dynamo_whose_probe_fails_stops_before_any_policy_runs(capsys, tmp_path, monkeypatch):
    log = tmp_path / "log"
    _fake_dynamo(monkeypatch, log, probe_exit=3)
    code, out, err = _cli(capsys, "bench", "--policies", "fcfs,lpm", "--max-requests", "40",
                          "--compare", "dynamo", "--out", tmp_path / "o")
    assert code == 2 and out == "" and not (tmp_path / "o" / "bench.json").exists()
    assert err.strip() == "fairsim: error: bench: --compare dynamo: its replay exited 3: no engine"
    assert log.read_text() == "probe\n"  # no timed run, no policy


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_a_dynamo_run_that_disagrees_with_its_first_is_refused_after_the_finished_rows(capsys, tmp_path,
                                                                                      monkeypatch, fmt):
    # Its second timed run reports another TTFT p50: runs dynamo, fcfs, dynamo (refused).
    log = tmp_path / "log"
    _fake_dynamo(monkeypatch, log, ttft_ms="120.0 if runs == 1 else 130.0")
    code, out, err = _cli(capsys, "bench", "--policies", "fcfs,lpm", "--max-requests", "40", "--repeat", "1",
                          "--compare", "dynamo", "--out", tmp_path / "o", "--format", fmt)
    assert code == 2
    assert err.strip().splitlines()[-1] == (
        "fairsim: error: bench: --compare dynamo: its run 2 gave ttft_p50_s 0.13, its first run 0.12; the peer's "
        "simulation must give the same figures every run")
    assert log.read_text().split() == ["probe", "P", "P"]
    rows = json.loads((tmp_path / "o" / "bench.json").read_text())
    assert set(rows) == {"fcfs", "dynamo"} and rows["dynamo"]["ttft_p50_s"] == 0.12
    assert ("lpm" not in out) and (fmt == "json" or "x dynamo: the median over the 1 pair(s)" in out)
