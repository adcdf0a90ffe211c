"""What the twenty-first session's new-user passes found (fleets, the docs' examples, own
policies), each checked from the command line as a user meets it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from fairsim.cli import main

WINDOW = Path(__file__).resolve().parents[1] / "fairsim" / "traces" / "data" / "conversation_window.jsonl"


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("mode_args", [
    # Was: 7 in the table, summary.json and the steps table, 13 in the requests table: a decode
    # step that preempted every running request scheduled nothing, and its count was dropped.
    ("--mode", "disaggregated", "--prefill-instances", "2", "--kv-link-gbps", "0.1"),
    ("--mode", "disaggregated", "--kv-link-gbps", "0.00105"),
])
def test_every_preemption_is_counted_in_the_steps_and_the_summary(tmp_path, capsys, mode_args):
    code, out, _ = run_cli(capsys, "run", "--trace", WINDOW, "--max-requests", "200", "--policy", "fcfs",
                           *mode_args, "--out", tmp_path, "--format", "json")
    assert code == 0
    requests = pd.read_parquet(tmp_path / "requests-fcfs.parquet")
    steps = pd.read_parquet(tmp_path / "steps-fcfs.parquet")
    total = int(requests["preemptions"].sum())
    assert total > 0
    assert int(steps["preemptions"].sum()) == total
    assert json.loads(out)["fcfs"]["preemptions"] == total
    assert json.loads((tmp_path / "summary.json").read_text())["fcfs"]["preemptions"] == total


def _steady_with_a_cluster() -> list:
    """One 100-token request a second over 150 s, and 60 more in [70, 80) s: the busiest
    window of a third of the span sits mid-trace."""
    from fairsim.types import Request

    times = [float(t) for t in range(151)] + [70 + i / 6 for i in range(60)]
    return [Request(f"r{i}", t, 100, (), 16, 1, {}) for i, t in enumerate(sorted(times))]


def test_default_windows_of_a_short_trace_are_found_beside_a_mid_trace_spike():
    # Was: "no disjoint calm, burst and spike windows of 50 s ... pass a --window-length at most a
    # third of the span" - the length it had used. The default now tries shorter lengths.
    from fairsim.analysis.load import detect_windows
    from fairsim.costmodel import load_profile

    requests = _steady_with_a_cluster()
    calm, burst, spike = detect_windows(requests, load_profile())
    assert [w.end_s - w.start_s for w in (calm, burst, spike)] == pytest.approx([150 / 4] * 3)
    assert spike.start_s <= 70 and spike.end_s >= 80
    assert not (calm.overlaps(burst) or calm.overlaps(spike) or burst.overlaps(spike))
    with pytest.raises(ValueError, match=r"^no disjoint calm, burst and spike windows of 50 s \(calm with "
                                         r">= 20 requests\) in a trace of 150 s; pass another "
                                         r"--window-length \(shorter leaves room for three, longer holds "
                                         r"more requests\), or --windows NAME:START-END,\.\.\.$"):
        detect_windows(requests, load_profile(), length_s=50)


def test_accept_runs_on_a_trace_shorter_than_three_minutes(capsys):
    code, out, err = run_cli(capsys, "accept", WINDOW, "--policy", "fairway", "--window-end", "150",
                             "--target-load", "0.9", "--format", "json")
    assert code == 0, err
    windows = json.loads(out)["windows"]
    assert [w["name"] for w in windows] == ["calm", "burst", "spike"]
    # (the window ends at the last arrival before 150 s, 149.999 s after the first)
    assert ("accept: windows of 29.9998 trace s: three disjoint ones of 49.9997 s do not fit beside this "
            "trace's busiest (--window-length sets the length)") in err


def _write_policies(folder: Path) -> None:
    (folder / "pass21pol.py").write_text(
        "from fairsim.policies.fcfs import FCFS\n"
        "class InitBug(FCFS):\n"
        "    def __init__(self):\n"
        "        self.n = len(5)\n"
        "class Checked(FCFS):\n"
        "    def __init__(self, scale: float = 1.0):\n"
        "        if scale <= 0:\n"
        "            raise ValueError('scale must be > 0')\n"
        "        self.scale = scale\n")


def test_a_constructor_bug_is_the_policys_error_and_says_where(tmp_path, capsys, monkeypatch):
    # Was: "policy 'pass21pol:InitBug': constructor refused {}: object of type 'int' has no len()",
    # exit 2, as if the (absent) --param values were bad.
    _write_policies(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        code, _, err = run_cli(capsys, "run", "--policy", "pass21pol:InitBug", "--max-requests", "5")
        assert code == 1
        assert (f"fairsim: error in policy 'pass21pol:InitBug' (InitBug): TypeError: object of type 'int' "
                f"has no len() (at {tmp_path / 'pass21pol.py'}, line 4)") in err
        # A constructor's check of the values given stays bad input, and says where it refused.
        code, _, err = run_cli(capsys, "run", "--policy", "pass21pol:Checked", "--param", "scale=-1",
                               "--max-requests", "5")
        assert code == 2
        assert (f"policy 'pass21pol:Checked': constructor refused {{'scale': -1}}: scale must be > 0 "
                f"(at {tmp_path / 'pass21pol.py'}, line 8)") in err
    finally:
        import sys

        sys.modules.pop("pass21pol", None)


def test_a_binary_policy_config_names_the_option_and_file(tmp_path, capsys):
    # Was: "fairsim: error: 'utf-8' codec can't decode byte 0xff in position 0: ...".
    config = tmp_path / "best.json"
    config.write_bytes(b"\xff\xfe{}")
    code, _, err = run_cli(capsys, "run", "--policy-config", config, "--max-requests", "5")
    assert code == 2
    assert err.strip() == (f"fairsim: error: --policy-config {config}: not UTF-8 text (a binary file?): invalid "
                           f"start byte at byte 0; expected the JSON file fairsim tune writes")


@pytest.mark.parametrize(("param", "message"), [
    # Was: accepted; 1e300 x blocks + load == 1e300 x blocks sent every request to instance 0.
    ("overlap_weight=1e300", "--router-param overlap_weight=1e+300 (router 'dynamo-kv'): need a finite number "
                             "from 0 to 1e+06 (only the weights' ratios matter)"),
    # Was: "... overlap_weight=2 ...: need a finite number >= 0", hiding that "2" was read as text.
    ('overlap_weight="2"', "--router-param overlap_weight=2 (router 'dynamo-kv'): need a finite number from 0 "
                           "to 1e+06 (only the weights' ratios matter), got the string '2'"),
])
def test_router_weights_are_bounded_and_a_string_is_named(capsys, param, message):
    code, _, err = run_cli(capsys, "run", "--trace", WINDOW, "--max-requests", "10", "--instances", "2",
                           "--router", "dynamo-kv", "--router-param", param)
    assert code == 2 and err.strip() == f"fairsim: error: {message}"


@pytest.mark.parametrize(("argv", "message"), [
    # Was: the last value kept, silently.
    (("--param", "fast_weight=8", "--param", "fast_weight=4"),
     "--param fast_weight given twice (fast_weight=8, then fast_weight=4); give it once"),
    (("--instances", "2", "--router", "dynamo-kv", "--router-param", "overlap_weight=1",
      "--router-param", "overlap_weight=2"),
     "--router-param overlap_weight given twice (overlap_weight=1, then overlap_weight=2); give it once"),
])
def test_a_parameter_given_twice_with_two_values_is_refused(capsys, argv, message):
    code, _, err = run_cli(capsys, "run", "--trace", WINDOW, "--max-requests", "10", *argv)
    assert code == 2 and err.strip() == f"fairsim: error: {message}"
    same = [a.replace("=4", "=8").replace("=2", "=1") for a in argv]
    code, _, err = run_cli(capsys, "run", "--trace", WINDOW, "--max-requests", "10", *same)
    assert code == 0, err  # the same value twice says one thing


def test_a_small_ratio_is_not_printed_as_zero():
    # Was: suf's p50 over FCFS's, 5.6 s / 7,530 s, printed "0.00x".
    from fairsim.ratios import ratio_text

    assert [ratio_text(v) for v in (5.6 / 7530, 0.0123, 0.45, 1.0, 12.345, 0.0)] == [
        "0.00074x", "0.01x", "0.45x", "1.00x", "12.35x", "0.00x"]


def test_torchs_install_hint_needs_no_vllm():
    # Was: "needed for the live vLLM commands; install it with: pip install -e .[live-cpu]" (vLLM).
    from fairsim.deps import missing_message

    assert missing_message("torch") == (
        "torch is not installed (needed for the live vLLM commands and fairsim calibrate --backend torch); "
        "install it with: pip install torch (all that calibrate --backend torch needs: no vLLM), or pip "
        'install -e ".[live-cpu]" for the live vLLM commands')


def test_a_ctrl_c_while_drawing_keeps_summary_and_run_json(tmp_path, capsys, monkeypatch):
    # Was: the tables written, but neither summary.json nor run.json (written after the figures);
    # over an earlier run's --out, that run's summary.json stood beside the new tables.
    import fairsim.run_plots

    def interrupted(*_a, **_k):
        raise KeyboardInterrupt

    monkeypatch.setattr(fairsim.run_plots, "write_run_plots", interrupted)
    out = tmp_path / "o"
    code, _, _ = run_cli(capsys, "compare", "--max-requests", "30", "--policies", "fcfs,lpm", "--out", out,
                         "--plots", tmp_path / "p")
    assert code == 130
    assert set(json.loads((out / "summary.json").read_text())) == {"fcfs", "lpm"}
    assert json.loads((out / "run.json").read_text())["policies"] == ["fcfs", "lpm"]


def test_a_ctrl_c_while_drawing_keeps_analysis_json(tmp_path, capsys, monkeypatch):
    import fairsim.analysis.figures

    def interrupted(*_a, **_k):
        raise KeyboardInterrupt

    monkeypatch.setattr(fairsim.analysis.figures, "load_figure", interrupted)
    code, _, _ = run_cli(capsys, "analyze", WINDOW, "--out", tmp_path / "a")
    assert code == 130 and json.loads((tmp_path / "a" / "analysis.json").read_text())["requests"] > 0


def test_an_earlier_runs_tables_in_out_are_named(tmp_path, capsys):
    # Was: silent; 24 stale tables of an earlier compare sat beside the new summary.json.
    out = tmp_path / "o"
    code, _, _ = run_cli(capsys, "compare", "--max-requests", "20", "--policies", "fcfs,lpm,suf", "--out", out)
    assert code == 0
    code, _, err = run_cli(capsys, "compare", "--max-requests", "20", "--policies", "fcfs", "--out", out)
    message = (f"--out {out} holds 4 tables this run does not write (requests-lpm.parquet, requests-suf.parquet, "
               f"steps-lpm.parquet, steps-suf.parquet), from an earlier run: summary.json and run.json will "
               f"describe this run only; give an empty folder to keep them apart")
    assert code == 0 and f"fairsim: warning: {message}" in err
    assert json.loads((out / "run.json").read_text())["warnings"] == [message]
    code, _, err = run_cli(capsys, "run", "--max-requests", "20", "--policy", "fcfs", "--out", tmp_path / "new")
    assert code == 0 and "warning" not in err


def test_a_colocated_cache_too_small_for_an_output_does_not_point_at_prompts(tmp_path, capsys):
    # Was: "... or keep a part of the trace without prompts over 51200 tokens", for a request whose
    # 26,888-token prompt fits and whose 200,000-token output does not.
    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps({"timestamp": 0, "input_length": 900, "output_length": 5000,
                                 "hash_ids": [1, 2]}) + "\n")
    code, _, err = run_cli(capsys, "run", "--trace", trace, "--mode", "colocated", "--kv-blocks", "4")
    assert code == 2 and err.strip().endswith(
        "or keep a part of the trace without requests whose prompt and output pass 2048 tokens together "
        "(--window-start, --window-end or --max-requests), or cap outputs with --max-model-len")


def test_a_dangling_link_as_out_is_named(tmp_path, capsys):
    # Was: "cannot create the folder: File exists".
    link = tmp_path / "o"
    link.symlink_to(tmp_path / "gone")
    code, _, err = run_cli(capsys, "run", "--max-requests", "5", "--out", link)
    assert code == 2 and f"{link}: is a link to {tmp_path / 'gone'}, which does not exist" in err


def test_where_a_policy_raised_is_its_own_module_first(tmp_path, monkeypatch):
    from fairsim.policies.failure import raised_at

    (tmp_path / "pass21helper.py").write_text("def boom():\n    raise KeyError('k')\n")
    (tmp_path / "pass21own.py").write_text(
        "import pass21helper\nclass Own:\n    def order(self, waiting, now):\n        pass21helper.boom()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import pass21own

    try:
        try:
            pass21own.Own().order([], 0.0)
        except KeyError as exc:
            err = exc
        # The class's own module, then any other code that is neither fairsim nor the stdlib.
        start = err.__traceback__.tb_next  # the policy's call, as policy_failure finds it
        assert raised_at(err, pass21own.Own, start) == f"{tmp_path / 'pass21own.py'}, line 4"
        assert raised_at(err, None, start) == f"{tmp_path / 'pass21helper.py'}, line 2"
        # A shipped policy's class: no place outside fairsim to name.
        from fairsim.policies.fcfs import FCFS

        try:
            FCFS().order(None, 0.0)
        except TypeError as exc:
            assert raised_at(exc, FCFS, exc.__traceback__.tb_next) is None
    finally:
        import sys

        sys.modules.pop("pass21own", None)
        sys.modules.pop("pass21helper", None)


def test_softmax_pick_at_an_overflowing_scale_is_the_argmin():
    # Was: NaN probabilities, and the last instance every time (5e-324 sent 40 of 40 there).
    from fairsim.routers.dynamo_kv import softmax_pick

    assert [softmax_pick([3.0, 1.0, 2.0], t, s) for t, s in ((5e-324, 0.99), (1e-300, 0.5))] == [1, 1]
    # An ordinary temperature still samples by Dynamo's softmax: p ~ exp(-(x - min) / (spread T)).
    assert [softmax_pick([0.0, 1.0], 1.0, s) for s in (0.7, 0.74)] == [0, 1]  # p0 = 1 / (1 + e^-1)


@pytest.mark.parametrize(("argv", "message"), [
    (("--instances", "2", "--router", "dynamo-kv", "--router-param", "temperature=5e-324"),
     "--router-param temperature=5e-324 (router 'dynamo-kv'): need 0 or a finite number >= 1e-06 (a smaller "
     "one overflows the softmax's scale; 0 picks the lowest cost)"),
    # Was: "internal error (a bug in fairsim): KeyError" - a refill below a token fell short.
    (("--policy", "drr-dynamo", "--param", "quantum=1e-300"),
     "DRR-Dynamo quantum=1e-300: need a finite number of tokens >= 1"),
    # Was: "internal error ... OverflowError: cannot convert float infinity to integer".
    (("--policy", "fairway-deadline", "--param", "slack=1e300"),
     "Fairway-deadline slack=1e+300: need a number from 1 to 1e+100"),
    (("--policy", "fairway-deadline", "--param", "slo_floor=1e300"),
     "Fairway slo_floor must be from 1e-06 to 1e+09 s, got 1e+300"),
    (("--policy", "fairway", "--param", "slo_multiplier=1e300"),
     "Fairway slo_multiplier must be from 0 to 1e+09, got 1e+300"),
    (("--policy", "fairway", "--param", "slo_multiplier=0", "--param", "slo_floor=1e-308"),
     "Fairway slo_floor must be from 1e-06 to 1e+09 s, got 1e-308"),
    # Was: accepted, every counter infinite, and VTC's order silently FCFS's.
    (("--policy", "vtc", "--param", "input_weight=1e305"),
     "VTC input_weight=1e+305: need a number from 1e-100 to 1e+100"),
    # Was: accepted, every instance scored 0 and instance 0 took every request.
    (("--instances", "4", "--router", "llm-d", "--router-param", "prefix_weight=0", "--router-param",
      "queue_weight=0", "--router-param", "kv_weight=0"),
     "prefix_weight, queue_weight and kv_weight are all 0, so every instance scores 0"),
    # Was: "--time-scale inf: need a finite factor > 0", an option not given.
    (("--target-load", "5e-324"), "--target-load 4.94066e-324: the time scale it needs is inf, outside the "
                                  "float range; give a larger --target-load"),
])
def test_values_past_the_float_limits_are_refused(capsys, argv, message):
    code, _, err = run_cli(capsys, "run", "--trace", WINDOW, "--max-requests", "40", *argv)
    assert code == 2 and message in err, err


def test_a_window_length_of_millions_of_windows_is_refused_before_any_work(capsys):
    # Was: 21.5 GB and a kill at 1e-6; "out of memory ... use a smaller input" at 1e-9.
    code, out, err = run_cli(capsys, "accept", WINDOW, "--policy", "fairway", "--window-end", "100",
                             "--window-length", "1e-6")
    assert code == 2 and out == ""
    assert err.strip().startswith("fairsim: error: --window-length 1e-06: windows sliding by a tenth of it over "
                                  "the trace's ") and err.strip().endswith(
        "s are more than 1,000,000; use a longer window")
    # Was: ZeroDivisionError (5e-324 / 10 is 0).
    code, _, err = run_cli(capsys, "accept", WINDOW, "--max-requests", "60", "--policy", "fairway",
                           "--window-length", "5e-324")
    assert code == 2 and "--window-length 4.94066e-324: windows sliding by a tenth of it" in err


def test_a_tuned_lpm_candidate_is_checked_against_the_default_lpm(tmp_path, capsys):
    # Was: one lpm row, the tuned candidate's, and its median target 1.1 x its own p50.
    common = ("accept", WINDOW, "--window-end", "120", "--windows", "a:30-60", "--format", "json")
    code, out, _ = run_cli(capsys, *common, "--policy", "fcfs")
    default_lpm = json.loads(out)["windows"][0]["stats"]["lpm"]
    config = tmp_path / "best.json"
    config.write_text(json.dumps({"policy": "lpm", "params": {"sglang_dedup": True, "sglang_sort_limit": True}}))
    for given in (("--policy", "lpm", "--param", "sglang_dedup=true", "--param", "sglang_sort_limit=true"),
                  ("--policy-config", config)):
        code, out, err = run_cli(capsys, *common, *given)
        payload = json.loads(out)
        stats = payload["windows"][0]["stats"]
        assert payload["candidate"] == "lpm" and payload["candidate_row"] == "lpm-candidate"
        assert list(stats) == ["fcfs", "lpm", "lpm-candidate"] and stats["lpm"] == default_lpm
        assert stats["lpm-candidate"]["p50_s"] != default_lpm["p50_s"]
        assert "it runs as 'lpm-candidate' beside the lpm baseline" in err
    # A baseline's own --param lpm.KEY goes to the baseline, and so to a candidate named lpm: one row.
    code, out, _ = run_cli(capsys, *common, "--policy", "lpm", "--param", "lpm.sglang_dedup=true")
    assert list(json.loads(out)["windows"][0]["stats"]) == ["fcfs", "lpm"]


def test_accept_names_an_earlier_runs_tables_in_out(tmp_path, capsys):
    out = tmp_path / "o"
    common = ("accept", WINDOW, "--window-end", "60", "--policy", "fairway", "--out", out)
    assert run_cli(capsys, *common, "--windows", "a:0-20,b:20-40")[0] in (0, 1)
    code, _, err = run_cli(capsys, *common, "--windows", "a:0-20")
    assert code in (0, 1)
    assert (f"fairsim: warning: --out {out} holds 6 tables this run does not write (requests-b-fairway.parquet, "
            f"requests-b-fcfs.parquet, requests-b-lpm.parquet, steps-b-fairway.parquet and 2 more), from an "
            f"earlier run: accept.json will describe this run only; give an empty folder to keep them apart") in err


def test_a_policy_module_failing_at_import_says_where(tmp_path, capsys, monkeypatch):
    # Was: "importing module 'pass21use' failed: RuntimeError: helper module blew up", no place.
    (tmp_path / "pass21bad.py").write_text("x = 1\nraise RuntimeError('helper module blew up')\n")
    (tmp_path / "pass21use.py").write_text("import pass21bad\n")
    (tmp_path / "pass21attr.py").write_text("def __getattr__(name):\n    return {}['k']\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        code, _, err = run_cli(capsys, "run", "--policy", "pass21use:P", "--max-requests", "5")
        assert code == 2 and ("policy 'pass21use:P': importing module 'pass21use' failed: RuntimeError: helper "
                              f"module blew up (at {tmp_path / 'pass21bad.py'}, line 2)") in err
        code, _, err = run_cli(capsys, "run", "--policy", "pass21attr:P", "--max-requests", "5")
        assert code == 2 and ("policy 'pass21attr:P': reading 'P' from module 'pass21attr' failed: KeyError: 'k' "
                              f"(at {tmp_path / 'pass21attr.py'}, line 2)") in err
    finally:
        import sys

        for name in ("pass21bad", "pass21use", "pass21attr"):
            sys.modules.pop(name, None)


def test_tunes_folds_are_the_windows_accept_replays():
    # Was: bounds start + i x length, 42.00000000000001 and 63.000000000000014: the 20 requests
    # arriving at 42.0 s went to w2 [21, 42.00000000000001), which tune printed as "21-42"; accept
    # --windows w2:21-42 did not replay them (70 requests against tune's 90).
    from fairsim.tune.evaluate import fold_windows
    from fairsim.types import Request

    requests = [Request(f"r{i}", float(t), 100, (), 16, 1, {}) for i, t in enumerate([0, 21, 42, 42, 63, 84])]
    train, held = fold_windows(requests, 4)
    assert [(w.start_s, w.end_s) for w in train + held] == [(0.0, 21.0), (42.0, 63.0), (21.0, 42.0),
                                                            (63.0, math.nextafter(84.0, math.inf))]


def test_a_malformed_search_space_of_a_team_class_is_named(tmp_path, capsys, monkeypatch):
    # Was: "internal error (a bug in fairsim): AttributeError: 'tuple' object has no attribute 'check'".
    (tmp_path / "pass21space.py").write_text(
        "from fairsim.policies.fcfs import FCFS\n"
        "class Rev(FCFS):\n"
        "    search_space = {'w': (1.0, 8.0)}\n"
        "    def __init__(self, w: float = 1.0):\n"
        "        self.w = w\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        code, _, err = run_cli(capsys, "tune", "--max-requests", "60", "--policies", "pass21space:Rev",
                               "--trials", "2", "--out", tmp_path / "t", "--workers", "1")
        assert code == 2 and ("Rev.search_space['w'] is (1.0, 8.0): need a FloatRange, IntRange or Choice "
                              "(fairsim/policies/space.py), e.g. FloatRange(1.0, 8.0)") in err
    finally:
        import sys

        sys.modules.pop("pass21space", None)
