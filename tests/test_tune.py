"""fairsim tune: a hand-checkable search, resume after kill -9, stale studies, Ray = local,
the error contract, and --policy-config in run/compare/accept and the live hook's settings."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from fairsim.cli import main
from fairsim.policies.catalog import search_space
from fairsim.policies.registry import policy_names
from fairsim.policies.space import Choice, FloatRange, IntRange, parse_range

pytest.importorskip("optuna")

ROOT = Path(__file__).resolve().parents[1]
WINDOW = ROOT / "fairsim" / "traces" / "data" / "conversation_window.jsonl"
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]), PYTHONUNBUFFERED="1")


@pytest.fixture(autouse=True)
def _tests_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "tests"))


def bursts(path: Path, second_burst_ms: int = 100_000) -> Path:
    """Two identical bursts (at 0 and 100 s): one 8000-token prompt, then five of 500 tokens, all
    at the same instant, no shared prefix. FCFS serves the long one first (ties by request id, the
    line number as text: in the second burst, lines 6-11, the long one is line 10, first as text);
    any ShortFirst limit from 1 to 7 (x 1000 tokens) serves the five short ones first; 0 and 8+
    give FCFS's order."""
    lines, h = [], 0
    for burst, prompts in ((0, (8000, 500, 500, 500, 500, 500)), (second_burst_ms, (500, 500, 500, 500, 8000, 500))):
        for n in prompts:
            k = -(-n // 512)
            lines.append(json.dumps({"timestamp": burst, "input_length": n, "output_length": 1,
                                     "hash_ids": list(range(h, h + k))}))
            h += k
    path.write_text("\n".join(lines) + "\n")
    return path


def p50_of_run(trace: Path, policy: str, *params: str) -> float:
    out = subprocess.run([sys.executable, "-m", "fairsim", "run", "--trace", str(trace), "--policy", policy,
                          *[a for p in params for a in ("--param", p)], "--format", "json"],
                         env=ENV, capture_output=True, text=True, check=True).stdout
    return next(iter(json.loads(out).values()))["ttft_p50_s"]


def trials(out: Path) -> pd.DataFrame:
    return pd.read_parquet(out / "trials.parquet")


# ---- search spaces --------------------------------------------------------------------------

def test_every_registered_policy_declares_a_valid_space_whose_bounds_it_accepts():
    from fairsim.costmodel import load_profile
    from fairsim.tune.command import build_spaces

    names = policy_names()
    spaces, notes = build_spaces(names, {}, {}, load_profile("a6000-llama3.1-8b-vllm-prior"))
    assert notes == []  # every registered policy with parameters declares its space
    assert set(spaces["fairway"]) == {"fast_weight", "slo_multiplier", "slo_floor"}
    assert spaces["klpm4"] == {}  # klpm4 fixes k
    assert spaces["klpm"]["k"] == IntRange(1, 64, log=True)
    assert spaces["fcfs"] == {} and spaces["vtc"] == {}


def test_a_class_without_a_declaration_is_searched_over_nothing_with_a_note():
    space, note = search_space("tune_policies:Undeclared")
    assert space == {} and "declares no search_space" in note and "limit" in note
    assert search_space("tune_policies:ShortFirst") == ({"limit": IntRange(0, 10)}, None)


def test_parse_range():
    assert parse_range("1:16:log", "x") == FloatRange(1.0, 16.0, True)
    assert parse_range("1:64:int", "x") == IntRange(1, 64, False)
    assert parse_range("true|false", "x") == Choice((True, False))
    assert parse_range("relative", "x") == Choice(("relative",))
    for bad, words in (("8:2", "empty range 8..2"), ("0:4:log", "needs low > 0"), ("a:b", "with numbers"),
                       ("1:2:cube", "unknown flag"), ("1|1", "given twice")):
        with pytest.raises(ValueError, match=words):
            parse_range(bad, "--space x")


# ---- a search whose answer is known ------------------------------------------------------------

def test_tiny_trace_finds_the_known_best_limit(tmp_path, capsys):
    trace = bursts(tmp_path / "bursts.jsonl")
    out = tmp_path / "tune"
    status = main(["tune", "--trace", str(trace), "--policies", "tune_policies:ShortFirst", "--trials", "8",
                   "--targets", "p50<=0.9xfcfs", "--folds", "2", "--out", str(out), "--search-seed", "3"])
    assert status == 0, capsys.readouterr().err
    t = trials(out)
    limits = t["params"].map(lambda p: json.loads(p)["limit"])
    shortfirst = limits.between(1, 7)
    assert shortfirst.any() and (~shortfirst).any()  # both kinds sampled
    # limit 1..7 all give the short-first order, 0 and 8+ FCFS's: exactly ratio 1 to FCFS.
    expected = p50_of_run(trace, "tune_policies:ShortFirst", "limit=1") / p50_of_run(trace, "fcfs")
    assert expected < 0.9
    assert t.loc[shortfirst, "median"].tolist() == pytest.approx([expected] * shortfirst.sum(), rel=1e-12)
    assert t.loc[~shortfirst, "median"].tolist() == [1.0] * (~shortfirst).sum()
    assert t.loc[shortfirst, "holds"].all() and not t.loc[~shortfirst, "holds"].any()
    config = json.loads((out / "policy-config.json").read_text())
    assert config["policy"] == "tune_policies:ShortFirst" and 1 <= config["params"]["limit"] <= 7
    report = json.loads((out / "tune.json").read_text())
    assert report["meets_targets"] is True
    # the two bursts are identical: held-out = training; the gain over default fairway (which
    # orders the all-cold burst as FCFS) is 1 / expected.
    assert report["chosen"]["held_out"]["median"] == pytest.approx(expected, rel=1e-12)
    assert report["held_out_gain"]["over_default_fairway"]["median"] == pytest.approx(1 / expected, rel=1e-9)
    for name in ("front.parquet", "front.png", "study.db"):
        assert (out / name).is_file()
    # the file runs as is
    assert p50_of_run(trace, "tune_policies:ShortFirst", f"limit={config['params']['limit']}") == \
        p50_of_run(trace, "tune_policies:ShortFirst", "limit=1")


def test_same_seed_same_trials_and_a_larger_budget_continues(tmp_path, capsys):
    trace = bursts(tmp_path / "bursts.jsonl")
    args = ["tune", "--trace", str(trace), "--policies", "tune_policies:ShortFirst,fcfs", "--targets",
            "p50<=2xfcfs", "--folds", "2", "--search-seed", "5"]
    assert main([*args, "--trials", "6", "--out", str(tmp_path / "a")]) == 0
    assert main([*args, "--trials", "4", "--out", str(tmp_path / "b")]) == 0
    assert main([*args, "--trials", "6", "--out", str(tmp_path / "b")]) == 0  # continues: 2 more
    a, b = trials(tmp_path / "a"), trials(tmp_path / "b")
    assert b["slot"].tolist() == list(range(6))
    cols = ["slot", "policy", "params", "median", "tail"]
    pd.testing.assert_frame_equal(a[cols], b[cols])
    capsys.readouterr()
    # A smaller N than the study holds reports the whole study, and says so (was: silently).
    assert main([*args, "--trials", "4", "--out", str(tmp_path / "b"), "--format", "json"]) == 0
    note = (f"--trials 4: the study in {tmp_path / 'b'} already holds 6 trials; all of them are reported "
            f"(a larger N continues it; a new --out starts afresh)")
    assert f"fairsim: note: {note}" in capsys.readouterr().err
    saved = json.loads((tmp_path / "b" / "tune.json").read_text())
    assert saved["trials_run_now"] == 0 and note in saved["notes"] and len(trials(tmp_path / "b")) == 6
    assert saved["trials"] == 4 and saved["trials_in_study"] == 6  # the N asked, and the trials reported


def test_a_policy_whose_default_lies_outside_its_space_runs_at_its_defaults_first(tmp_path, capsys):
    """SUF's default ``starvation_iterations=None`` (no guard) is outside its searched 1..4096: its
    first trial stores the policy alone and runs the constructor's defaults (was: left out, so
    the chosen setting could be worse than the "best untuned" policy tune itself reported)."""
    out = tmp_path / "tune"
    status = main(["tune", "--trace", str(WINDOW), "--target-load", "0.9", "--policies", "suf,lpm", "--trials", "2",
                   "--search-seed", "3", "--out", str(out)])
    assert status == 0, capsys.readouterr().err
    t = trials(out)
    assert t["policy"].tolist() == ["suf", "lpm"] and json.loads(t["params"][0]) == {}
    report = json.loads((out / "tune.json").read_text())
    assert report["best_untuned"]["policy"] == "suf"
    # The trial at SUF's defaults is the untuned SUF: the same training scores.
    assert report["best_untuned"]["train"]["median"] == pytest.approx(t["median"][0], rel=1e-12)
    assert report["chosen"]["policy"] == "suf" and report["chosen"]["params"] == {}
    assert report["chosen"]["train"]["median"] <= report["best_untuned"]["train"]["median"]


# ---- resume after kill -9 ---------------------------------------------------------------------

def _complete(db: Path) -> list[tuple]:
    if not db.is_file():
        return []
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as con:
            return con.execute("SELECT trial_id, number FROM trials WHERE state = 'COMPLETE' ORDER BY number").fetchall()
    except sqlite3.OperationalError:  # tables not created yet
        return []


def test_kill_9_mid_study_then_rerun_repeats_no_finished_trial_and_gives_the_same_front(tmp_path):
    cmd = [sys.executable, "-m", "fairsim", "tune", "--trace", str(WINDOW), "--max-requests", "500",
           "--policies", "fairway,lpm,klpm", "--trials", "10", "--search-seed", "1", "--folds", "2"]
    killed = tmp_path / "killed"
    proc = subprocess.Popen([*cmd, "--out", str(killed)], env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while len(_complete(killed / "study.db")) < 3:
        assert proc.poll() is None, proc.stderr.read().decode()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    before = _complete(killed / "study.db")
    assert 3 <= len(before) < 10
    subprocess.run([*cmd, "--out", str(killed)], env=ENV, check=True, capture_output=True)
    after = trials(killed)
    assert sorted(after["slot"]) == list(range(10))  # one finished trial per slot: none repeated
    assert set(n for _, n in before) <= set(after["trial"])  # those finished before the kill kept
    subprocess.run([*cmd, "--out", str(tmp_path / "whole")], env=ENV, check=True, capture_output=True)
    whole = trials(tmp_path / "whole")
    cols = ["slot", "policy", "params", "median", "tail", "holds"]
    pd.testing.assert_frame_equal(after.sort_values("slot")[cols].reset_index(drop=True),
                                  whole.sort_values("slot")[cols].reset_index(drop=True))
    front = lambda d: pd.read_parquet(d / "front.parquet")[["policy", "params", "median", "tail"]]  # noqa: E731
    pd.testing.assert_frame_equal(front(killed), front(tmp_path / "whole"))


# ---- stale studies --------------------------------------------------------------------------

def test_a_stale_study_is_refused_with_the_reason(tmp_path, capsys, monkeypatch):
    trace = bursts(tmp_path / "bursts.jsonl")
    out = tmp_path / "tune"
    args = ["tune", "--trace", str(trace), "--policies", "tune_policies:ShortFirst", "--trials", "2",
            "--targets", "p50<=2xfcfs", "--folds", "2", "--out", str(out)]
    assert main(args) == 0
    capsys.readouterr()
    assert main([*args[:-6], "--targets", "p50<=1.5xfcfs", *args[-4:]]) == 2
    err = capsys.readouterr().err
    assert "other settings (targets: was [\"p50 <= 2 x fcfs\"], now [\"p50 <= 1.5 x fcfs\"])" in err
    assert "delete" in err and "study.db" in err
    bursts(trace, second_burst_ms=90_000)  # the trace's content changes
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "a study made for another trace (content sha256" in err
    bursts(trace)  # back as it was; now the code changes
    import fairsim.sweep.runspec as runspec

    monkeypatch.setattr(runspec, "code_identity", lambda: {"version": "0.1.0", "source": "edited"})
    assert main(args) == 2
    assert "another fairsim code version" in capsys.readouterr().err
    monkeypatch.undo()
    monkeypatch.syspath_prepend(str(ROOT / "tests"))
    assert main(args) == 0  # unchanged again: the study is reused, nothing to run


# ---- Ray gives the same front as local --------------------------------------------------------

def test_ray_executor_gives_the_same_trials_and_front_as_local(tmp_path):
    pytest.importorskip("ray")
    trace = bursts(tmp_path / "bursts.jsonl")
    base = ["tune", "--trace", str(trace), "--policies", "tune_policies:ShortFirst,fairway", "--trials", "6",
            "--batch", "3", "--targets", "p50<=2xfcfs", "--folds", "2", "--search-seed", "2"]
    assert main([*base, "--out", str(tmp_path / "local")]) == 0
    subprocess.run([sys.executable, "-m", "fairsim", *base, "--executor", "ray", "--workers", "2",
                    "--out", str(tmp_path / "ray")], env=ENV, check=True, capture_output=True)
    cols = ["slot", "policy", "params", "median", "tail", "holds"]
    for name in ("trials", "front"):
        local = pd.read_parquet(tmp_path / "local" / f"{name}.parquet")[cols].sort_values("slot", ignore_index=True)
        ray = pd.read_parquet(tmp_path / "ray" / f"{name}.parquet")[cols].sort_values("slot", ignore_index=True)
        pd.testing.assert_frame_equal(local, ray)


# ---- the error contract -------------------------------------------------------------------------

@pytest.mark.parametrize("extra, message", [
    (["--space", "fairway.fast_wait=1:4"], "--space fairway.fast_wait=1:4: unknown parameter 'fast_wait' of "
                                           "policy 'fairway'; accepted: fast_weight, fair_weight"),
    (["--space", "fairway.fast_weight=8:2"], "--space fairway.fast_weight=8:2: empty range 8..2"),
    (["--space", "fairway.slo_floor=0:2"], "--space: fairway.slo_floor=0.0 is refused"),
    (["--space", "lpm.k=1:4"], "policy 'lpm' is not among --policies"),
    (["--targets", "p90<=1xfcfs"], "--targets 'p90<=1xfcfs': expected STAT<=FxPOLICY"),
    (["--targets", "p50<=1xnosuch"], "--targets p50<=1xnosuch: reference unknown policy 'nosuch'"),
    (["--train", "a:0-100"], "--train and --holdout go together"),
    (["--train", "a:0-200", "--holdout", "b:100-300"], "overlaps --train (a/b)"),
    (["--trials", "0"], "--trials 0: need at least 1"),
    (["--folds", "1"], "--folds 1: need at least 2"),
    # More folds than requests: refused before any window is built (1e8 of them took gigabytes).
    (["--folds", "100000000"], "--folds 100000000: more windows than the trace's 1407 requests, so some would "
                               "hold none; give at most 1407"),
])
def test_bad_input_exits_2_naming_the_option(tmp_path, capsys, extra, message):
    status = main(["tune", "--trace", str(WINDOW), "--policies", "fairway", "--out", str(tmp_path / "o"), *extra])
    assert status == 2
    assert message in capsys.readouterr().err


def test_a_float_range_for_an_int_parameter_names_the_int_flag(tmp_path, capsys):
    # ShortFirst's limit is annotated int: 1:4 (floats) is refused before any trial, with the fix.
    status = main(["tune", "--trace", str(WINDOW), "--policies", "tune_policies:ShortFirst",
                   "--space", "tune_policies:ShortFirst.limit=1:4", "--out", str(tmp_path / "o")])
    assert status == 2
    assert ("--space: tune_policies:ShortFirst.limit=1.0 is refused: --param limit=1.0: policy "
            "'tune_policies:ShortFirst' takes a whole number there (declared int); a whole-number "
            "range is LOW:HIGH:int") in capsys.readouterr().err
    assert not (tmp_path / "o" / "trials.parquet").exists()


def test_a_policy_that_fails_is_a_failed_trial_and_the_report_goes_on(tmp_path, capsys):
    # A policy raising in order() (or breaking the contract) at its defaults: its trials are
    # failed trials, yet the report then re-ran it untuned and died (exit 1, no tune.json); a
    # broken contract even stopped the study at its trial.
    out = tmp_path / "tune"
    status = main(["tune", "--trace", str(WINDOW), "--policies",
                   "fairway,tune_policies:Crashes,tune_policies:BreaksContract", "--trials", "3",
                   "--targets", "p50<=2xfcfs", "--out", str(out)])
    err = capsys.readouterr().err
    assert status == 0, err
    t = trials(out).set_index("policy")
    assert t.loc["tune_policies:Crashes", "error"].startswith(
        "PolicyError: error in policy 'tune_policies:Crashes' (Crashes): RuntimeError: crashed on a long queue")
    assert t.loc["tune_policies:BreaksContract", "error"].startswith(
        "PolicyContractError: policy 'tune_policies:BreaksContract': order() must return a permutation")
    assert pd.isna(t.loc["fairway", "error"]) and t.loc["fairway", "holds"]
    report = json.loads((out / "tune.json").read_text())
    assert report["best_untuned"]["policy"] == "fairway" and report["chosen"]["policy"] == "fairway"
    assert [n.split(" at its defaults failed")[0] for n in report["notes"]] == [
        "policy 'tune_policies:Crashes'", "policy 'tune_policies:BreaksContract'"]
    assert json.loads((out / "policy-config.json").read_text())["policy"] == "fairway"


def test_every_trial_failing_says_so(tmp_path, capsys):
    out = tmp_path / "tune"
    status = main(["tune", "--trace", str(WINDOW), "--policies", "tune_policies:Crashes", "--trials", "1",
                   "--out", str(out)])
    err = capsys.readouterr().err
    assert status == 2 and ("no trial of 1 meets the targets on the training windows; every trial failed "
                            "(trials.parquet's error; first: trial 0, tune_policies:Crashes: PolicyError:") in err
    report = json.loads((out / "tune.json").read_text())
    assert report["best_untuned"] is None and "chosen" not in report


def test_second_tune_in_a_folder_is_named_as_a_tune(tmp_path, capsys):
    # The lock is sweep's: a second tune was told "another sweep (pid N) is running".
    from fairsim.sweep.lock import SweepLock

    out = tmp_path / "tune"
    with SweepLock(out):
        assert main(["tune", "--trace", str(WINDOW), "--policies", "fcfs", "--trials", "1", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"--out {out}: another fairsim sweep or tune (pid {os.getpid()}) is running in this folder" in err
    assert not (out / "study.db").exists()


def test_tune_needs_out(capsys):
    assert main(["tune", "--policies", "fcfs"]) == 2
    assert "--out DIR" in capsys.readouterr().err


def test_unreachable_targets_exit_2_naming_the_closest_and_keep_the_results(tmp_path, capsys):
    trace = bursts(tmp_path / "bursts.jsonl")
    out = tmp_path / "tune"
    status = main(["tune", "--trace", str(trace), "--policies", "tune_policies:ShortFirst", "--trials", "6",
                   "--targets", "p50<=0.01xfcfs", "--folds", "2", "--out", str(out), "--search-seed", "3"])
    err = capsys.readouterr().err
    assert status == 2
    assert "no trial of 6 meets the targets on the training windows; closest: trial" in err
    assert "p50 <= 0.01 x fcfs: 0.1" in err  # the best ratio reached, ~0.19
    closest = json.loads((out / "closest-policy-config.json").read_text())
    assert 1 <= closest["params"]["limit"] <= 7
    assert not (out / "policy-config.json").exists()
    assert (out / "front.parquet").is_file() and json.loads((out / "tune.json").read_text())["meets_targets"] is False


def test_undeclared_policy_note_and_no_parameter_searched(tmp_path, capsys):
    trace = bursts(tmp_path / "bursts.jsonl")
    assert main(["tune", "--trace", str(trace), "--policies", "tune_policies:Undeclared,tune_policies:ShortFirst",
                 "--trials", "4", "--targets", "p50<=2xfcfs", "--folds", "2", "--out", str(tmp_path / "o")]) == 0
    assert "note: policy 'tune_policies:Undeclared' (Undeclared) declares no search_space" in capsys.readouterr().err
    t = trials(tmp_path / "o")
    assert (t.loc[t["policy"] == "tune_policies:Undeclared", "params"] == "{}").all()


# ---- --policy-config ----------------------------------------------------------------------------

def test_policy_config_in_run_compare_accept_and_the_live_settings(tmp_path, capsys):
    from fairsim.live.settings import read_settings

    cfg = tmp_path / "tuned.json"
    cfg.write_text(json.dumps({"policy": "fairway", "params": {"fast_weight": 8, "slo_floor": 0.5}}))
    common = ["--trace", str(WINDOW), "--max-requests", "300", "--format", "json"]
    assert main(["run", "--policy-config", str(cfg), *common]) == 0
    by_file = json.loads(capsys.readouterr().out)["fairway"]
    assert main(["run", "--policy", "fairway", "--param", "fast_weight=8", "--param", "slo_floor=0.5", *common]) == 0
    by_params = json.loads(capsys.readouterr().out)["fairway"]
    assert by_file["ttft_p50_s"] == by_params["ttft_p50_s"] and by_file["ttft_max_s"] == by_params["ttft_max_s"]
    assert main(["compare", "--policies", "fcfs", "--policy-config", str(cfg), *common]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert list(rows) == ["fcfs", "fairway"] and rows["fairway"]["ttft_p50_s"] == by_file["ttft_p50_s"]
    assert main(["accept", "--policy-config", str(cfg), "--trace", str(WINDOW), "--format", "json"]) in (0, 1)
    assert json.loads(capsys.readouterr().out)["candidate"] == "fairway"
    assert main(["run", "--policy-config", str(cfg), "--param", "fast_weight=2", *common]) == 2
    assert "sets fast_weight of policy 'fairway'; give it in one place" in capsys.readouterr().err
    assert main(["run", "--policy", "lpm", "--policy-config", str(cfg), *common]) == 2
    (tmp_path / "bad.json").write_text('{"policy": "fairway", "parms": {}}')
    assert main(["run", "--policy-config", str(tmp_path / "bad.json"), *common]) == 2
    assert "unknown key(s) parms; expected policy, params" in capsys.readouterr().err
    # the live hook: the file as additional_config, or named by the policy_config setting
    assert read_settings({"fairsim": json.loads(cfg.read_text())})["params"]["fast_weight"] == 8
    settings = read_settings({"fairsim": {"policy_config": str(cfg), "profile": "a6000-llama3.1-8b-vllm-prior"}})
    assert settings["policy"] == "fairway" and settings["params"] == {"fast_weight": 8, "slo_floor": 0.5}
    with pytest.raises(ValueError, match="leave out policy"):
        read_settings({"fairsim": {"policy_config": str(cfg), "policy": "lpm"}})
