"""What newuser-p's pass over ``analyze`` and ``accept`` found, each checked by hand."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fairsim.cli import main

# Five requests of 512-token blocks: hit rate by hand 2048 / 5208 tokens with an infinite cache.
ROWS = [
    {"timestamp": 0, "input_length": 1024, "output_length": 10, "hash_ids": [1, 2]},
    {"timestamp": 100, "input_length": 1536, "output_length": 10, "hash_ids": [1, 2, 3]},
    {"timestamp": 200, "input_length": 1024, "output_length": 10, "hash_ids": [4, 5]},
    {"timestamp": 300, "input_length": 1024, "output_length": 10, "hash_ids": [1, 2]},
    {"timestamp": 400, "input_length": 600, "output_length": 10, "hash_ids": [4, 6]},
]


def write_rows(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_analyze_into_a_closed_pipe_still_writes_its_report(tmp_path, fmt):
    # Was: `fairsim analyze TRACE --out o | head -1` exited 141 with o/ empty: the summary's print
    # raised BrokenPipeError before analysis.json, report.md and the figures were written.
    trace = write_rows(tmp_path / "t.jsonl", ROWS)
    r, w = os.pipe()
    os.close(r)  # the reader has left before the first line
    try:
        proc = subprocess.run([sys.executable, "-m", "fairsim", "analyze", str(trace), "--out", "o",
                               "--format", fmt], stdout=w, stderr=subprocess.PIPE, text=True,
                              cwd=tmp_path, timeout=300)
    finally:
        os.close(w)
    assert proc.returncode == 141 and "Traceback" not in proc.stderr
    data = json.loads((tmp_path / "o" / "analysis.json").read_text())
    assert data["requests"] == 5 and data["infinite_hit_rate"] == 2048 / 5208
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == [
        "analysis.json", "hit_curve.png", "load.png", "report.md", "spread.png"]


def test_load_bins_count_an_arrival_at_a_bin_start_in_that_bin(tmp_path, capsys):
    # Was: with --bin 0.1 the request at 0.3 s was counted in the bin 0.2-0.3 s (0.3 / 0.1 is
    # 2.9999999999999996 in floating point): that bin showed 2 requests and load 2.76 (the peak
    # bin load in analysis.json), the bin starting at 0.3 s none.
    from fairsim.analysis.load import load_series
    from fairsim.costmodel import load_profile
    from fairsim.traces import load_trace

    trace = write_rows(tmp_path / "t.jsonl", ROWS)
    series = load_series(load_trace(str(trace)).requests, load_profile("a6000-llama3.1-8b-vllm-prior"),
                         0.1, 2048)
    assert series["requests"].tolist() == [1, 1, 1, 1, 1]
    assert series["start_s"].round(9).tolist() == [0.0, 0.1, 0.2, 0.3, 0.4]
    # the 1024-token requests at 0.2 s and 0.3 s each fill their own bin alike
    assert series["load"][2] == series["load"][3] == series["load"][0]
    assert main(["analyze", str(trace), "--bin", "0.1", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["peak_bin_load"] == series["load"].max() == series["load"][1]  # the 1536-token request
    assert data["mean_load"] == series["load"].mean()


# Recorded scheduling: r2 queued 0.1-0.5 s, r3 0.2-0.4 s, r4 0.3-0.6 s (r1 never waits).
OBSERVED = [dict(ROWS[0], observed_first_scheduled_ms=0, observed_cached_tokens=0),
            dict(ROWS[1], input_length=2000, hash_ids=[1, 2, 3, 4], observed_first_scheduled_ms=500,
                 observed_cached_tokens=512),
            dict(ROWS[2], input_length=300, hash_ids=[9], observed_first_scheduled_ms=400,
                 observed_cached_tokens=0),
            dict(ROWS[3], input_length=5000, hash_ids=list(range(11, 21)), observed_first_scheduled_ms=600,
                 observed_cached_tokens=0)]


@pytest.mark.parametrize("start", ["0", "0.1"])
def test_observed_spread_keeps_the_trace_clock_under_window_start(tmp_path, capsys, start):
    # Was: with --window-start 0.1 the arrivals were rebased to the window's start but the
    # observed scheduling times (trace clock) were not: r2 counted as queued 0.0-0.5 s, giving
    # p50 16.7x over 66.7 % of the time instead of the recorded 4.96x over 60 %.
    trace = write_rows(tmp_path / "obs.jsonl", OBSERVED)
    assert main(["analyze", str(trace), "--window-start", start, "--format", "json"]) == 0
    spread = json.loads(capsys.readouterr().out)["spread"]
    assert spread["source"] == "observed scheduling times"
    # queued together: 0.2-0.3 s {1488, 300} 4.96x; 0.3-0.4 s {1488, 300, 5000} 16.7x; 0.4-0.5 s
    # {1488, 5000} 3.36x; span from the first arrival to the last scheduling
    assert spread["queued_share"] == pytest.approx(0.3 / (0.6 if start == "0" else 0.5))
    assert spread["spread_p50"] == pytest.approx(1488 / 300)
    assert spread["spread_max"] == pytest.approx(5000 / 300)
    assert spread["share_at_or_above_threshold"] == pytest.approx(2 / 3)


@pytest.mark.parametrize("field, value, message", [
    ("observed_first_scheduled_ms", 50,
     "field 'observed_first_scheduled_ms': 50 ms is before the request's arrival, 100 ms on the trace's clock"),
    ("observed_cached_tokens", 5000, "field 'observed_cached_tokens': 5000 is outside 0..2000 (the prompt's tokens)"),
    ("observed_cached_tokens", float("inf"), "field 'observed_cached_tokens': need a number, got inf"),
])
def test_a_bad_observed_field_names_file_line_and_field(tmp_path, capsys, field, value, message):
    # Was: "fairsim: error: request 'r1': first scheduled at 0.05 s, before its arrival 0.1 s" (no
    # file, line or field), and "request 'r1': field ..." for the others.
    rows = [dict(r, request_id=f"r{i}") for i, r in enumerate(OBSERVED)]
    rows[1][field] = value
    trace = write_rows(tmp_path / "obs.jsonl", rows)
    assert main(["analyze", str(trace)]) == 2
    err = capsys.readouterr().err
    assert f"fairsim: error: {trace}:2: {message}\n" in err and "Traceback" not in err


def test_a_trace_shorter_than_the_window_prints_its_own_span(tmp_path, capsys):
    # Was: "busiest windows: 0-0 s load 1.77" (decimals of the 60 s length asked for) for the
    # 0.4 s trace that is its own busiest window; report.md's row read "| busy1 | 0 | 0 |".
    trace = write_rows(tmp_path / "t.jsonl", ROWS)
    assert main(["analyze", str(trace), "--window-length", "60", "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == "busiest windows: 0.00-0.40 s load 1.77"
    assert "| busy1 | 0.00 | 0.40 | 5 | 1.77 |" in (tmp_path / "o" / "report.md").read_text()
    assert main(["analyze", str(trace)]) == 0  # the default: a third of the span, to a tenth of it
    assert capsys.readouterr().out.splitlines()[-1] == (
        "busiest windows: 0.00-0.13 s load 2.63, 0.20-0.33 s load 2.07, 0.40-0.53 s load 0.64")
