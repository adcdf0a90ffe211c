"""Regressions from the new-user report (defects 3, 5, 7, 9, 10, 13) in analyze / accept."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from fairsim.analysis.load import Window, busiest_windows, load_series, with_load
from fairsim.analysis.spread import queue_spread
from fairsim.cli import main
from fairsim.costmodel import Profile
from fairsim.traces.offered import offered_load
from fairsim.types import Request

DATA = Path(__file__).parent / "data" / "formats"


class TestClosedLoopQueueEntry:
    """Defect 3: a closed-loop FCFS run releases turns after their timestamps; the spread must
    measure the queue from the release time (``released_s``), not the timestamp."""

    @pytest.mark.parametrize("trace", ["dynamo_trace.jsonl.gz", "claude_code"])
    def test_session_fixtures_analyze(self, trace, capsys):
        code = main(["analyze", str(DATA / trace), "--format", "json"])
        captured = capsys.readouterr()
        assert code == 0, captured.err
        data = json.loads(captured.out)
        assert data["spread"]["source"] == "FCFS simulation at the trace's timing"
        assert 0.0 <= data["spread"]["queued_share"] <= 1.0

    def test_error_names_the_request_id(self):
        with pytest.raises(ValueError, match="request 'r7': first scheduled at 0.5 s"):
            queue_spread(np.array([0.0, 1.0]), np.array([0.0, 0.5]), np.array([3.0, 3.0]), "x",
                         ids=["r1", "r7"])


def write_rows(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


class TestNoFigureIsNull:
    """Defect 9: a spread quantile with no queue is NaN: null in JSON, n/a in text."""

    def test_json_and_text(self, tmp_path, capsys):
        trace = DATA / "bailian.jsonl"  # four requests that never wait together
        assert main(["analyze", str(trace), "--format", "json"]) == 0
        out = capsys.readouterr().out
        assert "NaN" not in out
        data = json.loads(out)
        assert data["spread"]["spread_p50"] is None and data["spread"]["queued_share"] == 0.0
        assert main(["analyze", str(trace), "--out", str(tmp_path / "rep")]) == 0
        out = capsys.readouterr().out
        assert "p50 n/a, p90 n/a" in out and "nan" not in out
        text = (tmp_path / "rep" / "analysis.json").read_text()
        assert "NaN" not in text and json.loads(text)["spread"]["spread_max"] is None
        report = (tmp_path / "rep" / "report.md").read_text()
        assert "n/a / n/a / n/a" in report and "nan" not in report
        # the share of the queued time at or above the threshold: no queued time, no share
        assert data["spread"]["share_at_or_above_threshold"] is None
        assert "| time at or above 4x | n/a |" in report


class TestWindowOptions:
    """Defect 10: a non-finite --window-length names --window-length, not --bin."""

    @pytest.mark.parametrize("option", ["--window-length", "--bin"])
    @pytest.mark.parametrize("value", ["inf", "nan", "0", "-1"])
    def test_names_the_option(self, option, value, capsys):
        assert main(["analyze", "--max-requests", "20", option, value]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"fairsim: error: {option} {value if value != '0' else '0.0'}"), err


class TestOptionsNamedBeforeWork:
    """--spread-threshold and a KV size are checked (and named) before the trace is simulated."""

    @pytest.mark.parametrize("value", ["inf", "1", "nan"])
    def test_spread_threshold(self, value, capsys, monkeypatch):
        monkeypatch.setattr("fairsim.options.load_requests", lambda *a, **k: pytest.fail("read the trace"))
        assert main(["analyze", "--spread-threshold", value]) == 2
        assert capsys.readouterr().err.startswith(f"fairsim: error: --spread-threshold {float(value)}: need a finite factor > 1")

    def test_kv_blocks_named_as_the_option(self, capsys, monkeypatch):
        monkeypatch.setattr("fairsim.analysis.analyze.simulate", lambda *a, **k: pytest.fail("simulated"))
        assert main(["analyze", "--kv-blocks", "99999999"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("fairsim: error: --kv-blocks 99999999 is above the simulator's limit") and "kv_blocks=" not in err


class TestBusiestWindowsPrinted:
    """Defect 13: windows print with the precision of their length, and n/a when none exist."""

    def test_one_instant(self, tmp_path, capsys):
        path = write_rows(tmp_path / "t.jsonl", [
            {"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1, 2]},
            {"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1, 3]}])
        assert main(["analyze", str(path)]) == 0
        line = [x for x in capsys.readouterr().out.splitlines() if x.startswith("busiest windows")]
        assert line == ["busiest windows: n/a (all 2 requests arrive at one instant)"]

    def test_one_instant_has_no_load_figures(self, tmp_path, capsys):
        # No span, no rate: no mean or peak load, bins or windows (a default bin width made them up).
        path = write_rows(tmp_path / "t.jsonl", [
            {"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1, 2]}])
        assert main(["analyze", str(path), "--format", "json", "--out", str(tmp_path / "rep")]) == 0
        data = json.loads(capsys.readouterr().out)
        assert [data[k] for k in ("window_s", "bin_s", "peak_bin_load", "mean_load")] == [None] * 4
        report = (tmp_path / "rep" / "report.md").read_text()
        assert "every request arrives at one instant: no rate, so no load over time" in report
        assert "nan" not in report and " s bins" not in report

    def test_too_many_bins_are_refused_before_the_simulation(self, capsys, monkeypatch):
        monkeypatch.setattr("fairsim.analysis.analyze.simulate", lambda *a, **k: pytest.fail("simulated"))
        assert main(["analyze", "--bin", "1e-9"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("fairsim: error: --bin: bins of 1e-09 s make 2.46e+11 over the trace's 246.339 s, "
                              "more than 10,000,000; use a wider bin or window"), err
        # Was: a tiny --window-length named --bin, an option not given.
        assert main(["analyze", "--window-length", "1e-9"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("fairsim: error: --window-length 1e-09 (the bin is a sixth of it): bins of "
                              "1.66667e-10 s make 1.48e+12"), err

    def test_the_fcfs_sentence_says_when_it_matches_the_replay(self, tmp_path, capsys):
        assert main(["analyze", "--out", str(tmp_path / "rep")]) == 0
        report = (tmp_path / "rep" / "report.md").read_text()
        data = json.loads((tmp_path / "rep" / "analysis.json").read_text())
        differs = data["fcfs_sim_hit_rate"] != data["lru_hit_rate_default"]
        assert ("the cache differs from one-at-a-time replay" in report) == differs
        assert ("as the one-at-a-time replay above" in report) == (not differs)

    def test_sub_second_windows_are_distinct(self, capsys):
        # azure.csv: 3 requests over 1.0 s -> windows of a third of the span, 0.34 s
        assert main(["analyze", str(DATA / "azure.csv"), "--format", "json"]) == 0
        data = json.loads(capsys.readouterr().out)
        assert main(["analyze", str(DATA / "azure.csv")]) == 0
        line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("busiest windows"))
        shown = [part.split(" s load")[0] for part in line.removeprefix("busiest windows: ").split(", ")]
        expect = [f"{w['start_s']:.2f}-{w['end_s']:.2f}" for w in data["busiest_windows"]]
        assert shown == expect and len(set(shown)) == len(shown)
        assert all(w["requests"] >= 1 for w in data["busiest_windows"])  # no empty "busiest" window
        assert data["window_s"] == pytest.approx(data["busiest_windows"][0]["end_s"]
                                                 - data["busiest_windows"][0]["start_s"])


class TestOutCheckedFirst:
    """Defect 5: --out (and accept's --plots) are created and test-written before any work."""

    @pytest.mark.parametrize("argv, option", [
        (["analyze", "--max-requests", "50", "--out", "{bad}"], "--out"),
        (["accept", "--max-requests", "50", "--policy", "fcfs", "--windows", "a:0-5",
          "--out", "{bad}"], "--out"),
        (["accept", "--max-requests", "50", "--policy", "fcfs", "--windows", "a:0-5",
          "--plots", "{bad}"], "--plots"),
        (["run", "--max-requests", "50", "--policy", "fcfs", "--plots", "{bad}"], "--plots"),
        (["compare", "--max-requests", "50", "--policies", "fcfs,lpm", "--plots", "{bad}"], "--plots"),
    ])
    @pytest.mark.parametrize("kind", ["a file", "/proc/self"])
    def test_refused_before_running(self, argv, option, kind, tmp_path, capsys):
        if kind == "a file":
            bad = tmp_path / "taken"
            bad.write_text("x")
        else:
            bad = Path("/proc/self")
        assert main([a.replace("{bad}", str(bad)) for a in argv]) == 2
        captured = capsys.readouterr()
        assert captured.out == ""  # nothing measured or simulated first
        assert captured.err.startswith(f"fairsim: error: {option} {bad}"), captured.err


# a = 10 ms per step, b = 1 ms per token, budget 100: 50-token prompts pack two to a step.
STEPPY = Profile("steppy", "prior", 0.01, 1e-3, 0.0, 0.0, (1, 100_000), (0.011, 100.01),
                 budget_tokens=100)


class TestOneOfferedLoad:
    """Defect 7: analyze and accept print the budget-aware load of fairsim run (fairsim.traces.offered)."""

    def test_bins_pack_prompts_into_budget_steps(self):
        # 10 requests of 50 tokens in each 10 s bin: ceil(500 / 100) = 5 steps -> 5 x 10 ms + 500 x
        # 1 ms = 0.55 s busy per bin -> load 0.055 (the per-prompt cold figure would be 0.06).
        trace = [Request(f"r{i}", float(i), 50, (), 16, 1, {}) for i in range(20)]
        s = load_series(trace, STEPPY, 10.0)
        assert s["load"].tolist() == pytest.approx([0.055, 0.055])
        whole = offered_load(trace, STEPPY, 100, window_s=10.0)
        assert whole.peak_load == pytest.approx(0.055)
        # the busiest window of analyze is offered_load's busiest window
        (b1, *_) = busiest_windows(trace, STEPPY, 10.0, 3)
        assert b1.load == pytest.approx(whole.peak_load) and b1.start_s == whole.peak_start_s
        assert with_load(trace, STEPPY, Window("w", 0.0, 10.0)).load == pytest.approx(0.055)

    @pytest.mark.parametrize("trace", [str(DATA / "bailian.jsonl"),
                                       str(DATA / "mooncake.jsonl"), None])
    def test_same_figures_as_run(self, trace, tmp_path, capsys):
        src = ([trace] if trace else []) + ["--max-requests", "300"]
        assert main(["run", "--policy", "fcfs", "--format", "json", "--budget", "1024",
                     *([f"--trace={trace}"] if trace else []), "--max-requests", "300",
                     "--out", str(tmp_path)]) == 0
        capsys.readouterr()
        run = json.loads((tmp_path / "run.json").read_text())
        line = run["offered_load"]
        assert main(["analyze", *src, "--budget", "1024", "--window-length", "60",
                     "--format", "json"]) == 0
        an = json.loads(capsys.readouterr().out)
        assert an["offered_load"] == line
        if an["busiest_windows"] and run["offered_load_figures"]["span_s"] >= 60:
            assert an["busiest_windows"][0]["load"] == pytest.approx(run["offered_load_figures"]["peak_load"])
        assert main(["accept", *src, "--budget", "1024", "--policy", "fcfs",
                     "--windows", "all:0-1000000"]) in (0, 1)
        # the same figures; accept names the clock of each time (its windows are in trace s)
        labelled = re.sub(r"(\d) s\b", r"\1 simulated s", line)
        assert "over " in line and " simulated s," in labelled
        assert f"{labelled};" in capsys.readouterr().out
