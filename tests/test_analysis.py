"""fairsim.analysis: queue work spread, offered load and windows, and the analyze command."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fairsim.analysis.load import detect_windows, load_series, parse_windows
from fairsim.analysis.spread import queue_spread
from fairsim.cli import main
from fairsim.costmodel import Profile
from fairsim.types import Request

# T_idle = 1 ms per token: capacity 1,000 tokens/s at every prompt length.
FLAT = Profile("flat", "prior", 0.0, 1e-3, 0.0, 0.0, (1, 100_000), (0.001, 100.0), budget_tokens=2048)


class TestSpread:
    """Hand-made queues: intervals [arrival, first scheduled) and their works."""

    def test_timeline_by_hand(self):
        # r0 waits 0-2 (work 100), r1 0-4 (10), r2 1-3 (1000), r3 never waits (scheduled on arrival).
        sp = queue_spread(np.array([0, 0, 1, 5.0]), np.array([2, 4, 3, 5.0]),
                          np.array([100, 10, 1000, 5.0]), "hand")
        tl = sp.timeline
        assert tl["start_s"].tolist() == [0, 1, 2, 3, 4]
        assert tl["waiting"].tolist() == [2, 3, 2, 1, 0]
        assert tl["spread"].tolist()[:3] == [10.0, 100.0, 100.0]  # 100/10, 1000/10, 1000/10
        assert sp.queued_share == pytest.approx(3 / 5)
        assert sp.quantile(0.5) == 100.0 and sp.quantile(0.0) == 10.0
        assert sp.share_above(50) == pytest.approx(2 / 3)
        assert sp.verdict().startswith("ordering matters:")

    def test_deciles_ignore_one_outlier(self):
        # 20 requests of work 100 and one of work 1 wait together: max/min would say 100x; the
        # nearest-rank deciles (3rd smallest, 19th) both hold 100 -> spread 1.
        n = 21
        work = np.array([1.0] + [100.0] * (n - 1))
        sp = queue_spread(np.zeros(n), np.full(n, 10.0), work, "hand")
        assert sp.quantile(0.5) == 1.0
        assert sp.verdict().startswith("ordering matters little: queued work differs 1.0x")

    def test_no_queue_verdict(self):
        sp = queue_spread(np.array([0.0, 10.0]), np.array([0.0, 10.0]), np.array([5.0, 500.0]), "hand")
        assert sp.queued_share == 0.0
        assert "wait together only 0.0 %" in sp.verdict()

    def test_bad_inputs(self):
        with pytest.raises(ValueError, match="before its arrival"):
            queue_spread(np.array([1.0]), np.array([0.5]), np.array([3.0]), "x")
        with pytest.raises(ValueError, match="--spread-threshold"):
            queue_spread(np.array([1.0]), np.array([1.5]), np.array([3.0]), "x", threshold=1.0)


def shaped(rates: list[tuple[float, int]], prompt: int = 100) -> list[Request]:
    """Evenly spaced arrivals: ``(seconds, requests)`` per phase, back to back."""
    out, t0 = [], 0.0
    for dur, n in rates:
        for k in range(n):
            out.append(Request(f"r{len(out)}", t0 + dur * k / n, prompt, (), 512, 1, {}))
        t0 += dur
    return out


class TestWindows:
    """Offered load and calm / burst / spike detection on a hand-made load shape."""

    def test_load_series_by_hand(self):
        # 10 s at 1 req/s then 10 s at 5 req/s, 100 tokens each: 100 and 500 tokens/s.
        trace = shaped([(10, 10), (10, 50)])
        s = load_series(trace, FLAT, 10.0)
        assert s["requests"].tolist() == [10, 50]
        assert s["prompt_tokens_per_s"].tolist() == [100.0, 500.0]
        assert s["load"].tolist() == pytest.approx([0.1, 0.5])

    def test_detects_calm_burst_spike(self):
        # calm 120 s at 1/s, burst 120 s at 4/s, quiet 60 s at 2/s, spike 60 s at 8/s.
        trace = shaped([(120, 120), (120, 480), (60, 120), (60, 480)])
        calm, burst, spike = detect_windows(trace, FLAT, 60.0)
        assert (spike.start_s, spike.end_s) == (300.0, 360.0)
        assert spike.load == pytest.approx(0.8)
        assert 120.0 <= burst.start_s and burst.end_s <= 240.0 and burst.load == pytest.approx(0.4)
        assert calm.end_s <= 120.0 and calm.load == pytest.approx(0.1)
        assert [w.name for w in (calm, burst, spike)] == ["calm", "burst", "spike"]

    def test_too_short_for_windows(self):
        with pytest.raises(ValueError, match="--windows"):
            detect_windows(shaped([(10, 30)]), FLAT, 60.0)

    def test_parse_windows(self):
        ws = parse_windows("calm:0-120, spike:300-360")
        assert [(w.name, w.start_s, w.end_s) for w in ws] == [("calm", 0, 120), ("spike", 300, 360)]
        for bad in ("calm:5-1", "calm", "calm:a-b", "x:0-1,x:2-3"):
            with pytest.raises(ValueError, match="--windows"):
                parse_windows(bad)


class TestAnalyzeCommand:
    """fairsim analyze on the embedded input and on a trace with observed fields."""

    def test_writes_report_and_figures(self, tmp_path, capsys):
        code = main(["analyze", "--max-requests", "300", "--out", str(tmp_path)])
        out = capsys.readouterr().out
        assert code == 0
        assert "verdict: ordering matters" in out
        for name in ("load.png", "spread.png", "hit_curve.png"):
            assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"
        data = json.loads((tmp_path / "analysis.json").read_text())
        assert 0 < data["lru_hit_rate_default"] <= data["infinite_hit_rate"] <= 1
        assert data["spread"]["source"].startswith("FCFS simulation")
        assert "## 2. Prefix reuse" in (tmp_path / "report.md").read_text()

    def test_lru_default_matches_an_unloaded_fcfs_run(self, capsys):
        # Stretched 1000x, the FCFS run sees requests one at a time: its hit rate is the curve's.
        code = main(["analyze", "--max-requests", "300", "--format", "json"])
        curve = json.loads(capsys.readouterr().out)["lru_hit_rate_default"]
        assert code == 0
        code = main(["run", "--policy", "fcfs", "--max-requests", "300", "--time-scale", "1000",
                     "--format", "json"])
        run = json.loads(capsys.readouterr().out)["fcfs"]["hit_rate"]
        assert curve == pytest.approx(run, rel=0.01)

    def test_uses_observed_times(self, tmp_path, capsys):
        # Two requests waiting together 0-1 s with works 900 and 100 (cached 0 and 800).
        path = tmp_path / "obs.jsonl"
        rows = [{"timestamp": 0, "input_length": 900, "output_length": 1, "hash_ids": [1, 2],
                 "observed_cached_tokens": 0, "observed_first_scheduled_ms": 1000},
                {"timestamp": 0, "input_length": 900, "output_length": 1, "hash_ids": [1, 3],
                 "observed_cached_tokens": 800, "observed_first_scheduled_ms": 2000}]
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        code = main(["analyze", str(path), "--format", "json", "--window-length", "1"])
        data = json.loads(capsys.readouterr().out)
        assert code == 0
        assert data["spread"]["source"] == "observed scheduling times"
        assert data["spread"]["spread_p50"] == 9.0  # 900 / 100 while both wait

    def test_errors_exit_2(self, tmp_path, capsys):
        assert main(["analyze", "--bin", "0"]) == 2
        assert "--bin" in capsys.readouterr().err
        assert main(["analyze", "--param", "k=1"]) == 2
        assert main(["analyze", str(tmp_path / "missing.jsonl")]) == 2
        bad = tmp_path / "bad.jsonl"
        bad.write_text('{"timestamp": 0, "input_length": 9, "output_length": 1, "hash_ids": [1],'
                       ' "observed_cached_tokens": "x", "observed_first_scheduled_ms": 1}\n')
        assert main(["analyze", str(bad)]) == 2
        assert "observed_cached_tokens" in capsys.readouterr().err


def test_time_scale_keeps_windows_in_trace_time(capsys):
    """Busiest windows stay in trace seconds (what accept --windows takes); loads are divided."""
    def run(scale):
        assert main(["analyze", "--max-requests", "300", "--format", "json", "--time-scale", scale]) == 0
        return json.loads(capsys.readouterr().out)

    one, two = run("1"), run("2")
    assert [(w["start_s"], w["end_s"]) for w in one["busiest_windows"]] == \
        [(w["start_s"], w["end_s"]) for w in two["busiest_windows"]]
    for a, b in zip(one["busiest_windows"], two["busiest_windows"]):
        assert b["load"] == pytest.approx(a["load"] / 2)
    assert two["spread"]["source"] == "FCFS simulation, arrivals x2"


from hypothesis import given, settings, strategies as st  # noqa: E402


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 10), st.integers(1, 1000)),
                min_size=1, max_size=25))
def test_spread_timeline_matches_brute_force(rows):
    """At the midpoint of every interval, the timeline's queue and spread equal a direct count."""
    a = np.array([float(r[0]) for r in rows])
    s = a + np.array([float(r[1]) for r in rows])
    w = np.array([float(r[2]) for r in rows])
    sp = queue_spread(a, s, w, "prop")
    for row in sp.timeline.itertuples():
        t = row.start_s + row.duration_s / 2
        queued = np.sort(w[(a <= t) & (s > t)])
        assert row.waiting == queued.size
        if queued.size >= 2:
            n = queued.size
            expect = queued[int(np.ceil(0.9 * n)) - 1] / queued[int(np.ceil(0.1 * n)) - 1]
            assert row.spread == expect and row.spread >= 1
    assert sp.timeline["duration_s"].sum() == pytest.approx(s.max() - a.min())
