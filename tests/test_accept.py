"""fairsim accept: targets per window, exit codes that match the verdict table, bad input -> 2."""

from __future__ import annotations

import json

import pytest

from fairsim.accept import MEDIAN_FACTOR, P99_FACTOR
from fairsim.cli import main


def write_trace(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def no_reuse_trace(path, n=150):
    """Requests without shared prefixes: LPM has nothing to prefer, so it orders as FCFS."""
    return write_trace(path, [{"timestamp": 100 * i, "input_length": 2600 + 37 * (i % 7),
                               "output_length": 1, "hash_ids": [10 * i + j for j in range(6)]}
                              for i in range(n)])


def shared_prefix_trace(path, n=150):
    """Bursts mixing long cold prompts and short ones sharing a long prefix with its predecessor."""
    rows = []
    for i in range(n):
        doc = [1000 + j for j in range(12)]
        cold = [100_000 + 100 * i + j for j in range(12)]
        rows.append({"timestamp": 200 * (i // 5) * 5, "input_length": 12 * 512 + 100,
                     "output_length": 1, "hash_ids": (doc if i % 2 else cold) + [900_000 + i]})
    return write_trace(path, rows)


class TestEvaluate:
    """The targets on explicit windows."""

    def test_factors_are_the_papers(self):
        assert (MEDIAN_FACTOR, P99_FACTOR) == (1.1, 1.1)

    def test_fcfs_against_itself_meets_p99(self, tmp_path, capsys):
        path = no_reuse_trace(tmp_path / "t.jsonl")
        code = main(["accept", str(path), "--policy", "fcfs", "--windows", "a:0-5,b:5-15",
                     "--format", "json"])
        data = json.loads(capsys.readouterr().out)
        assert [w["name"] for w in data["windows"]] == ["a", "b"]
        for w in data["windows"]:
            s = w["stats"]
            # with no reuse, LPM's order is FCFS's: identical figures, every target holds
            assert s["lpm"]["p50_s"] == s["fcfs"]["p50_s"] and w["p99_ok"] and w["median_ok"]
            assert w["stats"]["fcfs"]["requests"] == (50 if w["name"] == "a" else 100)
        assert data["pass"] is True and code == 0


class TestExitCodes:
    """Exit status 0 iff every window passes; the printed table says the same."""

    def test_pass_exits_0(self, tmp_path, capsys):
        code = main(["accept", str(no_reuse_trace(tmp_path / "t.jsonl")), "--policy", "fairway",
                     "--windows", "all:0-15"])
        out = capsys.readouterr().out
        assert code == 0
        assert "fairway: PASS (1 of 1 windows" in out

    def test_fail_exits_1(self, tmp_path, capsys):
        # FCFS runs the cold prompts first inside each burst; LPM runs the cached ones first and
        # has a much lower median, so FCFS misses the median target.
        path = shared_prefix_trace(tmp_path / "t.jsonl")
        code = main(["accept", str(path), "--policy", "fcfs", "--windows", "all:0-30",
                     "--format", "json"])
        data = json.loads(capsys.readouterr().out)
        w = data["windows"][0]
        assert w["stats"]["fcfs"]["p50_s"] > MEDIAN_FACTOR * w["stats"]["lpm"]["p50_s"]
        assert w["median_ok"] is False and data["pass"] is False and code == 1

    def test_auto_windows_and_outputs(self, tmp_path, capsys):
        out, plots = tmp_path / "out", tmp_path / "plots"
        code = main(["accept", "--policy", "fairway", "--max-requests", "400", "--window-length", "20",
                     "--out", str(out), "--plots", str(plots)])
        text = capsys.readouterr().out
        data = json.loads((out / "accept.json").read_text())
        assert [w["name"] for w in data["windows"]] == ["calm", "burst", "spike"]
        assert data["mode"] == "prefill-only"
        assert code == (0 if data["pass"] else 1)
        assert text.count("FAIL") == sum(
            (not w["median_ok"]) + (not w["p99_ok"]) + (not w["starvation_ok"]) + (not w["pass"])
            for w in data["windows"]) + (0 if data["pass"] else 1)
        spike = next(w for w in data["windows"] if w["name"] == "spike")
        assert spike["load"] >= max(w["load"] for w in data["windows"])
        assert (out / "requests-spike-fairway.parquet").exists()
        for name in ("windows.png", "spike-ttft_cdf.png", "calm-queue_kv.png", "burst-ttft_vs_arrival.png"):
            assert (plots / name).read_bytes()[:4] == b"\x89PNG"


class TestTargetLoad:
    """``--target-load X`` is the ``--time-scale`` it resolves to: windows are still cut in trace
    time (they were cut from arrivals already scaled, and labelled trace seconds)."""

    @pytest.mark.parametrize("command", ["accept", "analyze"])
    def test_same_windows_and_figures_as_the_printed_time_scale(self, tmp_path, capsys, command):
        path = shared_prefix_trace(tmp_path / "t.jsonl")  # 150 requests over 29 s of trace time
        extra = (["--policy", "fairway", "--windows", "a:0-10,b:10-29"] if command == "accept"
                 else ["--window-length", "5"])
        assert main([command, str(path), *extra, "--target-load", "0.5", "--format", "json"]) in (0, 1)
        by_load = capsys.readouterr()
        scale = float(by_load.err.split("--target-load 0.5: time scale ")[1].split()[0])
        assert scale > 1  # the trace is overloaded: 0.5 needs slower arrivals
        assert main([command, str(path), *extra, "--time-scale", repr(scale), "--format", "json"]) in (0, 1)
        by_scale = json.loads(capsys.readouterr().out)
        by_load = json.loads(by_load.out)
        # (the printed scale has 6 significant digits: the figures agree to about that)
        if command == "accept":
            for a, b in zip(by_load["windows"], by_scale["windows"], strict=True):
                assert (a["name"], a["start_s"], a["end_s"], a["requests"]) == (b["name"], b["start_s"], b["end_s"], b["requests"])
                for name in ("fcfs", "lpm", "fairway"):
                    assert a["stats"][name]["requests"] == b["stats"][name]["requests"]
                    assert a["stats"][name]["p50_s"] == pytest.approx(b["stats"][name]["p50_s"], rel=1e-4)
            # window a holds the requests of trace seconds 0-10: the first 50 (not the first ~10
            # that arrive before 10 s once scaled)
            assert by_load["windows"][0]["stats"]["fairway"]["requests"] == 50
        else:
            spans = lambda d: [(w["start_s"], w["end_s"]) for w in d["busiest_windows"]]  # noqa: E731
            assert spans(by_load) and spans(by_load) == spans(by_scale)
            assert max(w["end_s"] for w in by_load["busiest_windows"]) <= 29  # trace seconds


class TestErrors:
    """Bad options exit 2 with a message naming them, before any simulation."""

    @pytest.mark.parametrize("argv,needle", [
        (["--policy", "nope"], "unknown policy 'nope'"),
        (["--policy", "fairway", "--windows", "spike:9-3"], "--windows"),
        (["--policy", "fairway", "--param", "nope=1"], "bad parameters"),
        (["--policy", "fairway", "--warmup", "-1"], "--warmup"),
        (["--policy", "fairway", "--windows", "x:5000-6000"], "holds no request"),
        (["--policy", "fairway", "--slo", "ttft=5"], "--slo: accept checks its TTFT targets"),  # not ignored
    ])
    def test_exit_2(self, argv, needle, capsys):
        assert main(["accept", *argv]) == 2
        assert needle in capsys.readouterr().err

    def test_analyze_refuses_slo_too(self, capsys):
        assert main(["analyze", "--slo", "garbage"]) == 2
        assert "--slo: analyze measures the trace" in capsys.readouterr().err


class TestLoad:
    """Window loads are reported at the replayed (scaled) timing, with a warning when huge."""

    def test_time_scale_divides_window_load(self, tmp_path, capsys):
        path = no_reuse_trace(tmp_path / "t.jsonl")
        loads = []
        for scale in ("1", "2"):
            main(["accept", str(path), "--policy", "fcfs", "--windows", "a:0-10",
                  "--time-scale", scale, "--format", "json"])
            loads.append(json.loads(capsys.readouterr().out)["windows"][0]["load"])
        # 100 requests of ~2,700 tokens in 10 s; stretched 2x they arrive half as fast
        assert loads[1] == pytest.approx(loads[0] / 2)

    def test_overload_warning(self, tmp_path, capsys):
        path = no_reuse_trace(tmp_path / "t.jsonl")
        main(["accept", str(path), "--policy", "fcfs", "--windows", "a:0-10", "--time-scale", "0.01"])
        assert "warning: offered load above 2" in capsys.readouterr().err


class TestClockLabels:
    """Windows are cut in trace seconds, the offered-load line is measured on the replayed
    (simulated) clock: every length and time printed names its clock."""

    def test_accept_names_both_clocks(self, tmp_path, capsys):
        path = no_reuse_trace(tmp_path / "t.jsonl")  # 150 requests, 100 ms apart: 14.9 trace s
        assert main(["accept", str(path), "--policy", "fcfs", "--windows", "a:0-5",
                     "--time-scale", "2", "--load-window", "4"]) == 0
        out = capsys.readouterr().out
        # 14.9 trace s x 2 = 29.8 simulated s; the busiest load window is 4 simulated s long
        assert "offered load: 150 requests over 29.8 simulated s," in out
        assert "busiest 4 simulated s window from " in out
        assert "time scale 2 (simulated s = trace s x 2; windows in trace s)" in out
        header, row = out.splitlines()[1:3]
        assert header.split()[:3] == ["window", "span,", "trace"] and row.split()[:2] == ["a", "0-5"]

    def test_analyze_names_both_clocks_when_they_differ(self, tmp_path, capsys):
        path = no_reuse_trace(tmp_path / "t.jsonl")
        assert main(["analyze", str(path), "--window-length", "5", "--time-scale", "2"]) == 0
        out = capsys.readouterr().out
        assert "over 29.8 simulated s," in out
        assert out.split("busiest windows: ")[1].split(",")[0].split(" load")[0].endswith(" trace s")
        assert main(["analyze", str(path), "--window-length", "5"]) == 0
        assert "simulated s" not in capsys.readouterr().out  # one clock: plain seconds


def test_window_of_a_closed_loop_trace_detaches_turns_whose_predecessor_was_cut():
    """A session crossing a window's start: its first kept turn is sent at its own timestamp (as
    run's --window-start sends it), not refused for naming a request outside the window."""
    from fairsim.accept import Window, window_requests
    from fairsim.types import Request

    reqs = [Request("a0", 0.0, 100, session_id="a"),
            Request("a1", 50.0, 100, session_id="a", after="a0", delay_s=5.0),
            Request("a2", 80.0, 100, session_id="a", after="a1", delay_s=3.0),
            Request("b0", 60.0, 100, session_id="b")]
    sub, scored = window_requests(reqs, Window("w", 60.0, 100.0), warmup_s=20.0, time_scale=2.0)
    by_id = {r.request_id: r for r in sub}
    assert set(by_id) == {"a1", "a2", "b0"} and scored == {"a2", "b0"}
    assert (by_id["a1"].after, by_id["a1"].delay_s, by_id["a1"].arrival_time) == (None, 0.0, 20.0)
    assert (by_id["a2"].after, by_id["a2"].delay_s, by_id["a2"].arrival_time) == ("a1", 3.0, 80.0)


def test_a_window_past_the_trace_end_is_cut_there(capsys):
    """--windows calm:0-10000 on a trace ending at 30 s: the window ends just after the last
    arrival (warned), so its load is over the seconds the trace covers."""
    import math

    from fairsim.accept import clip_to_trace
    from fairsim.analysis.load import Window
    from fairsim.types import Request

    reqs = [Request(f"r{i}", float(t), 100) for i, t in enumerate((0, 10, 30))]
    [w, v] = clip_to_trace([Window("calm", 0.0, 10000.0), Window("early", 0.0, 5.0)], reqs)
    assert (w.start_s, w.end_s) == (0.0, math.nextafter(30.0, math.inf)) and (v.start_s, v.end_s) == (0.0, 5.0)
    assert "the trace's last arrival is at 30 trace s; the window is cut there" in capsys.readouterr().err


def test_window_names_in_plot_files_are_file_stems_as_in_out(tmp_path, capsys):
    """--windows 'x/y:...' --plots P wrote P/x/y-ttft_cdf.png (a sub-folder; '../' left P), while
    --out names its tables requests-x_y-POLICY.parquet."""
    plots, out = tmp_path / "plots", tmp_path / "out"
    code = main(["accept", "--policy", "fairway", "--max-requests", "200", "--windows", "x/y:0-20,../up:20-40",
                 "--plots", str(plots), "--out", str(out)])
    capsys.readouterr()
    assert code in (0, 1)
    assert sorted(p.name for p in plots.iterdir()) == sorted(
        ["windows.png"] + [f"{w}-{f}.png" for w in ("x_y", ".._up") for f in ("ttft_cdf", "ttft_vs_arrival", "queue_kv")])
    assert not (tmp_path / "up-ttft_cdf.png").exists()
    assert (out / "requests-x_y-fairway.parquet").exists() and (out / "requests-.._up-lpm.parquet").exists()


def test_engine_vllm_without_vllm_exits_2_before_any_work(tmp_path, capsys, monkeypatch):
    # Was: the trace was read and the windows chosen, the missing package was reported inside
    # the first window, and --out held an accept.json marked partial for a run that never started.
    import importlib.util

    find = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else find(name, *a))
    trace = no_reuse_trace(tmp_path / "t.jsonl")
    out = tmp_path / "o"
    code = main(["accept", str(trace), "--policy", "fairway", "--engine", "vllm", "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    assert "vllm is not installed (needed for" in captured.err and "Traceback" not in captured.err
    assert not (out / "accept.json").exists()
