"""The error contract of the fairsim command (fairsim/cli.py main) and fairsim/io.py.

Bad input -> exit 2 and a named cause, never a traceback; a missing optional package -> the extra
to install, exit 2; Ctrl-C -> exit 130 with finished results kept; a bug -> exit 1 with a short
message, the traceback only with --debug.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from fairsim.cli import main
from fairsim.costmodel import DEFAULT_PROFILE, IDLE_TABLE_TOLERANCE, PROFILE_DIR, load_profile
from fairsim.errors import OutputError, ProfileError
from fairsim.io import atomic_to_parquet, atomic_write_text, check_writable_dir, check_writable_file
from fairsim.policies import registry
from fairsim.policies.base import arrival_key
from tests.utils import ctrl_c_when, write_failing_policy

ROOT = Path(__file__).resolve().parents[1]


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _trace(path: Path, records: list[str]) -> str:
    path.write_text("".join(r + "\n" for r in records))
    return str(path)


class TestBadOptions:
    """Absurd options: each a named error at the option, exit 2, no traceback, before any run."""

    @pytest.mark.parametrize("argv, message", [
        (["--budget", "0"], "--budget 0: need >= 1"),
        (["--time-scale", "0"], "--time-scale 0.0: need a finite factor > 0"),
        (["--time-scale", "1e308"], "--time-scale 1e+308: the last arrival is at"),
        (["--kv-fraction", "1e300"], "--kv-fraction 1e+300 gives 1.7e+301 blocks, which is above the simulator's limit"),
        (["--kv-fraction", "inf"], "--kv-fraction inf: need a finite fraction > 0"),
        (["--kv-blocks", "100000000000000000000"], "--kv-blocks 100000000000000000000 is above the simulator's limit of 4194304"),
        (["--time-scale", "1e-300"], "--time-scale 1e-300: the trace's"),
        (["--window-start", "10", "--window-end", "5"], "--window-start 10 --window-end 5: the window [10, 5) s is empty"),
        (["--window-start", "nan"], "--window-start nan: need a finite time >= 0 s"),
        (["--window-end=-inf"], "--window-end -inf: need a finite time >= 0 s"),
        (["--max-requests", "0"], "--max-requests 0: need an integer >= 1"),
        (["--max-num-seqs", "0"], "--max-num-seqs 0: need >= 1"),
        (["--param", "fast_weight=abc"], "fast_weight='abc': need a finite number"),
        (["--param", "fast_weight=[1]"], "fast_weight=[1]: need a finite number"),
        (["--param", "fast_weight=1e400"], "fast_weight=inf: need a finite number"),
        (["--param", "noequals"], "--param 'noequals': expected KEY=VALUE"),
        (["--profile", "/"], "profile '/' is a folder, not a profile JSON file; shipped: "),
        (["--out", "/dev/null/x"], "--out /dev/null/x"),
    ])
    def test_named_error(self, capsys, argv, message):
        code, out, err = run_cli(capsys, "run", "--max-requests", "20", *argv) if "--max-requests" not in argv \
            else run_cli(capsys, "run", *argv)
        assert code == 2, err
        assert message in err and err.startswith("fairsim: error:") and "Traceback" not in err

    @pytest.mark.parametrize("command", ["compare", "bench"])
    def test_all_with_other_names(self, capsys, command):
        code, out, err = run_cli(capsys, command, "--policies", "all,fcfs")
        assert code == 2 and out == ""
        assert err.startswith("fairsim: error: --policies all,fcfs: 'all' stands alone (every registered policy)")

    @pytest.mark.parametrize("command", ["compare", "bench"])
    @pytest.mark.parametrize("spec", ["fcfs,", "fcfs,,lpm", ",lpm"])
    def test_an_empty_policy_name(self, capsys, command, spec):
        code, out, err = run_cli(capsys, command, "--policies", spec)
        assert code == 2 and out == ""
        assert err.startswith(f"fairsim: error: --policies {spec}: an empty name between commas")

    @pytest.mark.parametrize("command", ["compare", "bench"])
    def test_a_policy_given_twice(self, capsys, command):
        code, out, err = run_cli(capsys, command, "--policies", "fcfs,lpm,fcfs")
        assert code == 2 and out == ""
        assert err.startswith("fairsim: error: --policies fcfs,lpm,fcfs: 'fcfs' given more than once")

    def test_max_num_seqs_up_to_the_budget(self, capsys):
        # As many seats as the budget (vLLM's largest max_num_seqs) is no limit here: more seats
        # than requests changes nothing (same result as 256). Above the budget vLLM refuses it,
        # and so does fairsim (10**20 once ran silently).
        code, out, _ = run_cli(capsys, "run", "--policy", "fcfs", "--max-requests", "20", "--format", "json",
                               "--max-num-seqs", "2048")
        code2, out2, _ = run_cli(capsys, "run", "--policy", "fcfs", "--max-requests", "20", "--format", "json")
        strip = lambda s: {k: v for k, v in json.loads(s)["fcfs"].items() if k != "wall_time_s"}  # noqa: E731
        assert code == code2 == 0 and strip(out) == strip(out2)
        code, out, err = run_cli(capsys, "run", "--max-num-seqs", str(10**20))
        assert code == 2 and out == "" and err.startswith(f"fairsim: error: --max-num-seqs {10**20}: need at most")

    @pytest.mark.parametrize("argv, message", [
        (["equivalence", "--rate", "0"], "--rate 0.0: need a finite arrival rate > 0"),
        (["fidelity", "--requests", "0"], "--requests 0: need an integer >= 1"),
        (["hook-overhead", "--sizes", "10,x"], "--sizes '10,x': need comma-separated integers >= 1"),
        (["hook-overhead", "--steps", "0"], "--steps 0: need an integer >= 1"),
        (["hook-overhead", "--sizes", "50,,10"], "--sizes '50,,10': need comma-separated integers >= 1"),
        (["hook-overhead", "--sizes", "1000,10001"], "--sizes '1000,10001': at most 10,000 waiting requests"),
        (["hook-overhead", "--policies", ","], "--policies ',': need comma-separated policy names"),
        (["hook-overhead", "--policies", "fcfs,nosuch"], "--policies nosuch: unknown policy"),
        (["hook-overhead", "--policies", "preble"], "--policies preble: policy 'preble' has skips_misfits"),
        (["hook-overhead", "--policies", "all", "--steps", "0"], "--steps 0: need an integer >= 1"),
        (["hook-overhead", "--policies", "lpm,fcfs,lpm"], "--policies lpm,fcfs,lpm: 'lpm' given more than once"),
        (["hook-overhead", "--policies", "all,fcfs"], "--policies all,fcfs: 'all' stands alone"),
        (["hook-overhead", "--sizes", "20,20"], "--sizes 20,20: '20' given more than once"),
        (["hook-overhead", "--policies", "peek"], "--policies peek: policy 'peek' has eviction_hook=ProtectWaitingHits"),
        (["hook-overhead", "--profile", "nosuch"], "--profile nosuch: profile 'nosuch' is neither a file"),
        (["equivalence", "--out", "/dev/null"], "--out /dev/null: exists and is not a folder"),
        (["equivalence", "--policies", "preble"], "--policies preble: policy 'preble' has skips_misfits"),
        (["equivalence", "--policies", "fcfs,bogus"], "--policies bogus: unknown policy"),
        (["fidelity", "--policies", "fcfs,lpm,fcfs"], "--policies fcfs,lpm,fcfs: 'fcfs' given more than once"),
        (["equivalence", "--max-num-seqs", "0"], "--max-num-seqs 0: need an integer >= 1"),
        (["equivalence", "--max-output", "8"], "--max-output 8: output lengths are drawn in --mode colocated only"),
        (["fidelity", "--mode", "colocated", "--max-output", "0"], "--max-output 0: need an integer >= 1 token"),
        (["equivalence", "--sessions", "-1"], "--sessions -1: need >= 0"),
        (["fidelity", "--profile", "nosuch"], "--profile nosuch: profile 'nosuch' is neither a file"),
        (["calibrate", "--out", "/"], "--out /: is a folder; give a file name"),
        (["calibrate", "--new-tokens", "4096"], "--new-tokens 4096: above --budget 2048"),
        (["calibrate", "--context-tokens", "0,100"], "--context-tokens 100: need a multiple of the block size"),
        (["calibrate", "--new-tokens", "64", "--context-tokens", "0", "--requests-per-step", "1"],
         "has 1 points; the fit needs >= 5"),
        (["calibrate", "--idle-lengths", "128"], "--idle-lengths: need >= 2 distinct lengths"),
        (["calibrate", "--max-worst", "nan"], "--max-worst nan: need a finite fraction > 0"),
        (["calibrate", "--requests-per-step", "0"], "--requests-per-step 0: need integers >= 1"),
    ])
    def test_live_and_calibrate_options_checked_before_the_engine(self, capsys, argv, message):
        t0 = time.perf_counter()
        code, out, err = run_cli(capsys, *argv)
        assert code == 2 and message in err and "Traceback" not in err
        assert out == ""  # not even a table header before the error
        assert time.perf_counter() - t0 < 30  # no engine was started


class TestBadTraces:
    """Traces that are not traces: a named file, line and field."""

    @pytest.mark.parametrize("content, message", [
        (['{"timestamp": 0, "input_length": NaN, "output_length": 1, "hash_ids": []}'],
         ":1: field 'input_length'"),
        (['{"timestamp": Infinity, "input_length": 10, "output_length": 1, "hash_ids": [1]}'],
         ":1: field 'timestamp'"),
        (['{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}', '[]'], ":2: "),
    ])
    def test_bad_records(self, capsys, tmp_path, content, message):
        path = _trace(tmp_path / "t.jsonl", content)
        code, _, err = run_cli(capsys, "run", "--trace", path)
        assert code == 2 and f"{path}{message}" in err and "Traceback" not in err

    def test_binary_file(self, capsys, tmp_path):
        path = tmp_path / "t.jsonl"
        path.write_bytes(bytes(range(256)) * 4)
        code, _, err = run_cli(capsys, "run", "--trace", str(path))
        assert code == 2 and str(path) in err and "Traceback" not in err

    def test_directory(self, capsys, tmp_path):
        code, _, err = run_cli(capsys, "run", "--trace", str(tmp_path))
        assert code == 2 and f"{tmp_path}: a folder is read only as ragpulse or claude-code" in err

    def test_trace_beyond_float_resolution(self, capsys, tmp_path):
        path = _trace(tmp_path / "t.jsonl", [
            '{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}',
            '{"timestamp": 1e15, "input_length": 10, "output_length": 1, "hash_ids": [1]}'])
        code, _, err = run_cli(capsys, "run", "--trace", path)
        # The record that arrives too late is named (file, line, request), and the remedy.
        assert code == 2 and (f"{path}:2: arrival time of request 't:2': the last arrival is at 1e+12 s, "
                              f"beyond 1e+09 s") in err and err.strip().endswith("use a shorter window (--window-end)")

    def test_replay_options_without_effect_are_said(self, capsys, tmp_path):
        path = _trace(tmp_path / "t.jsonl", [
            '{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}',
            '{"timestamp": 1000, "input_length": 10, "output_length": 1, "hash_ids": [2]}'])
        code, _, err = run_cli(capsys, "run", "--trace", path, "--replay", "closed")
        assert code == 0 and ("fairsim: warning: --replay closed: no request of this trace follows another, so "
                              "every request is sent at its own timestamp, as in open loop") in err
        code, _, err = run_cli(capsys, "run", "--trace", path, "--think-scale", "2")
        assert code == 0 and "fairsim: warning: --think-scale 2 has no effect in open loop" in err
        code, out, err = run_cli(capsys, "run", "--trace", path)
        assert code == 0 and "warning" not in err and "offered load: 2 requests over 1.0 s" in out
        one = _trace(tmp_path / "one.jsonl", ['{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}'])
        code, out, _ = run_cli(capsys, "run", "--trace", one)
        assert code == 0 and "offered load: 1 request arriving at one instant" in out

    def test_closed_loop_session_starts_out_of_range_name_session_rate(self, capsys):
        sessions = ROOT / "tests" / "data" / "formats" / "claude_code"  # closed loop, no absolute time
        code, _, err = run_cli(capsys, "run", "--trace", str(sessions), "--session-rate", "1e-12")
        assert code == 2 and err.startswith("fairsim: error: --session-rate 1e-12 (the session starts it draws): "
                                            "the last session starts at ")
        assert err.strip().endswith("use a larger --session-rate") and "think/tool delay" not in err

    def test_a_block_larger_than_the_cache_names_block_size(self, capsys, tmp_path):
        path = _trace(tmp_path / "t.jsonl", [
            '{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}'])
        code, _, err = run_cli(capsys, "run", "--trace", path, "--block-size", "100000000")
        assert code == 2 and err.strip() == ("fairsim: error: the profile's KV capacity (231014 tokens): less than "
                                             "one block of 100000000 tokens (--block-size 100000000)")

    def test_a_trace_given_as_profile_says_it_was_read_as_one(self, capsys, tmp_path):
        path = _trace(tmp_path / "t.jsonl", [
            '{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}',
            '{"timestamp": 1, "input_length": 10, "output_length": 1, "hash_ids": [2]}'])
        code, _, err = run_cli(capsys, "run", "--trace", path, "--profile", path)
        assert code == 2 and err.strip() == f"fairsim: error: {path}:2: not valid JSON: Extra data (column 1; reading it as a profile)"

    def test_arrivals_too_close_name_the_trace_not_the_default_time_scale(self, capsys, tmp_path):
        path = _trace(tmp_path / "t.jsonl", [
            '{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}',
            '{"timestamp": 0.0001, "input_length": 10, "output_length": 1, "hash_ids": [2]}'])
        code, _, err = run_cli(capsys, "run", "--trace", path)
        assert code == 2 and err.startswith(f"fairsim: error: {path}:2: arrival time of request 't:2': the "
                                            f"trace's 1e-07 s of arrivals")
        assert "--time-scale 1" not in err and err.strip().endswith("use a larger --time-scale")

    @pytest.mark.parametrize("rate, says", [
        ("1e300", "under 1e-06 s, finer than any engine step; use a smaller --session-rate"),
        ("1e-300", "beyond 1e+09 s, where float64 time cannot resolve 1 us steps; use a larger --session-rate"),
    ])
    def test_session_starts_out_of_range_name_session_rate(self, capsys, tmp_path, rate, says):
        # Two sessions of one request each; --session-rate places their starts (first at 0 s).
        path = _trace(tmp_path / "t.jsonl", [
            '{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}',
            '{"timestamp": 5, "input_length": 10, "output_length": 1, "hash_ids": [2]}'])
        code, _, err = run_cli(capsys, "run", "--trace", path, "--session-rate", rate)
        assert code == 2 and err.startswith(f"fairsim: error: --session-rate {float(rate):g} (the session "
                                            f"starts it draws): ") and says in err, err


def _profile_data() -> dict:
    return json.loads((PROFILE_DIR / f"{DEFAULT_PROFILE}.json").read_text())


def _mutate(path: list, value):
    def apply(d):
        target = d
        for key in path[:-1]:
            target = target[key]
        if value is _DELETE:
            del target[path[-1]]
        else:
            target[path[-1]] = value
        return d
    return apply


_DELETE = object()


class TestBadProfiles:
    """A profile file the loader refuses, naming the file and the key."""

    @pytest.mark.parametrize("mutate, message", [
        (_mutate(["coefficients", "a_s"], float("nan")), "'coefficients.a_s' must be a finite number >= 0 (s), got nan"),
        (_mutate(["coefficients", "b_s_per_token"], float("inf")), "'coefficients.b_s_per_token' must be a finite"),
        (_mutate(["coefficients", "k_s_per_pair"], None), "'coefficients.k_s_per_pair' must be a number (s/pair), got null"),
        (_mutate(["coefficients", "d_s_per_request"], True), "'coefficients.d_s_per_request' must be a number (s/request), got true"),
        (_mutate(["coefficients", "a_s"], "0.01"), "'coefficients.a_s' must be a number (s), got \"0.01\""),
        (_mutate(["coefficients", "a_s"], -0.001), "'coefficients.a_s' must be a finite number >= 0 (s), got -0.001"),
        (_mutate(["coefficients"], [1, 2]), "'coefficients' must be a JSON object"),
        (_mutate(["coefficients", "a_s"], _DELETE), "missing key 'coefficients.a_s'"),
        (_mutate(["idle_prefill", "seconds", 3], float("nan")), "'idle_prefill.seconds[3]' must be a finite number >= 0 (s), got nan"),
        (_mutate(["idle_prefill", "seconds", 0], None), "'idle_prefill.seconds[0]' must be a number (s), got null"),
        (_mutate(["idle_prefill", "seconds", 1], False), "'idle_prefill.seconds[1]' must be a number (s), got false"),
        (_mutate(["idle_prefill", "seconds", 5], 0.0), "'idle_prefill.seconds[5]'=0.0 is below [4]"),
        (_mutate(["idle_prefill", "prompt_tokens", 2], 16), "'idle_prefill.prompt_tokens[2]'=16: lengths must be >= 1 and strictly increasing"),
        (_mutate(["idle_prefill", "prompt_tokens", 0], True), "'idle_prefill.prompt_tokens' must be a list of integers"),
        (_mutate(["idle_prefill", "prompt_tokens"], [16]), "'idle_prefill' needs >= 2 points"),
        (_mutate(["idle_prefill", "seconds"], "fast"), "'idle_prefill.seconds' must be a list of numbers"),
        (_mutate(["budget_tokens"], 2048.5), "'budget_tokens' must be an integer >= 1 (tokens), got 2048.5"),
        (_mutate(["budget_tokens"], "2048"), "'budget_tokens' must be an integer >= 1 (tokens), got \"2048\""),
        (_mutate(["metadata"], "x"), "'metadata' must be a JSON object"),
        (_mutate(["schema_version"], 2), "schema_version=2, this fairsim reads 1"),
        (_mutate(["idle_table_tolerance"], -1), "'idle_table_tolerance' must be a finite number >= 0"),
        (_mutate(["idle_table_tolerence"], 0.4), "unknown key 'idle_table_tolerence'; known: schema_version, name"),
        (_mutate(["coefficients", "e_s"], 0.1), "unknown key 'coefficients.e_s'; known: a_s, b_s_per_token"),
        (_mutate(["idle_prefill", "sec"], []), "unknown key 'idle_prefill.sec'; known: prompt_tokens, seconds"),
        (_mutate(["kind"], "guess"), "'kind' must be \"prior\" or \"measured\", got \"guess\""),
    ])
    def test_refused(self, capsys, tmp_path, mutate, message):
        path = tmp_path / "p.json"
        path.write_text(json.dumps(mutate(_profile_data())))  # NaN/Infinity as Python's json writes them
        code, out, err = run_cli(capsys, "run", "--profile", str(path), "--max-requests", "5")
        assert code == 2, err
        assert f"{path}: {message}" in err and "Traceback" not in err and out == ""

    def test_not_json_names_the_line(self, capsys, tmp_path):
        path = tmp_path / "p.json"
        path.write_text('{\n  "schema_version": 1,\n  oops\n}\n')
        code, _, err = run_cli(capsys, "run", "--profile", str(path))
        assert code == 2 and f"{path}:3: not valid JSON" in err

    def test_binary_profile(self, capsys, tmp_path):
        path = tmp_path / "p.json"
        path.write_bytes(b"\xff\xfe\x00binary")
        code, _, err = run_cli(capsys, "run", "--profile", str(path))
        assert code == 2 and f"{path}: not UTF-8 text" in err


class TestIdleTableConsistency:
    """T_idle table vs the profile's own coefficients (IDLE_TABLE_TOLERANCE = 0.25)."""

    def test_shipped_profiles_pass(self):
        for name in ("a6000-llama3.1-8b-vllm-prior", "cpu-tiny-llama-vllm-measured"):
            load_profile(name)

    def _scaled(self, tmp_path, index, factor, tolerance=None):
        data = _profile_data()
        data["idle_prefill"]["seconds"][index] *= factor
        seconds = data["idle_prefill"]["seconds"]
        for i in range(index + 1, len(seconds)):  # keep it monotone
            seconds[i] = max(seconds[i], seconds[i - 1])
        if tolerance is not None:
            data["idle_table_tolerance"] = tolerance
        path = tmp_path / "p.json"
        path.write_text(json.dumps(data))
        return path, data

    def test_inside_tolerance_loads(self, tmp_path):
        path, _ = self._scaled(tmp_path, 0, 1 + IDLE_TABLE_TOLERANCE - 0.01)
        load_profile(path)

    def test_outside_tolerance_names_the_worst_point(self, tmp_path):
        # Point 3 (128 tokens): table 0.022456842 s x 1.3; the model gives 0.0224568 s -> 30.0 %
        # (6.7 ms, beyond the 5 ms absolute slack).
        path, data = self._scaled(tmp_path, 3, 1.3)
        t = data["idle_prefill"]["seconds"][3]
        with pytest.raises(ProfileError, match=(
                rf"{path}: 'idle_prefill.seconds' disagrees with the profile's coefficients: at 128 tokens "
                rf"the table says {t:.6g} s, the cost model 0.0224568 s \(30.0 % apart, tolerance 25 %\)")):
            load_profile(path)

    def test_absolute_slack_forgives_a_tiny_prompt(self, tmp_path):
        # Point 0 (16 tokens) x 1.3 is 30 % but only 2.3 ms off: inside IDLE_TABLE_SLACK_S (5 ms).
        path, _ = self._scaled(tmp_path, 0, 1.3)
        load_profile(path)

    def test_profile_states_a_wider_tolerance(self, tmp_path):
        path, _ = self._scaled(tmp_path, 3, 1.3, tolerance=0.35)
        load_profile(path)


class TestOutputs:
    """--out checked before any work; atomic writes that name the file on failure."""

    def test_out_is_a_file_fails_before_simulating(self, capsys, tmp_path):
        target = tmp_path / "f"
        target.write_text("x")
        code, out, err = run_cli(capsys, "run", "--out", str(target))
        assert code == 2 and f"--out {target}: exists and is not a folder" in err
        assert "offered load" not in out + err  # nothing was loaded or simulated

    @pytest.mark.skipif(os.geteuid() == 0, reason="root ignores permissions")
    def test_read_only_folder(self, tmp_path):
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
        try:
            with pytest.raises(OutputError, match=rf"--out {ro}: not writable"):
                check_writable_dir(ro)
        finally:
            ro.chmod(0o700)

    def test_missing_parent_is_created(self, tmp_path):
        assert check_writable_dir(tmp_path / "a" / "b").is_dir()
        assert check_writable_file(tmp_path / "c" / "p.json").parent.is_dir()
        assert sorted(p.name for p in (tmp_path / "a" / "b").iterdir()) == []  # the probe is gone

    def test_atomic_write_replaces_and_keeps_permissions(self, tmp_path):
        path = tmp_path / "x.txt"
        atomic_write_text(path, "one")
        atomic_write_text(path, "two")
        assert path.read_text() == "two" and [p.name for p in tmp_path.iterdir()] == ["x.txt"]
        assert path.stat().st_mode & 0o777 == 0o666 & ~_umask()

    def test_failed_write_names_the_file_and_leaves_no_tmp(self, tmp_path, monkeypatch):
        path = tmp_path / "t.parquet"
        atomic_to_parquet(pd.DataFrame({"a": [1]}), path)

        def full(self, *a, **k):
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(pd.DataFrame, "to_parquet", full)
        with pytest.raises(OutputError, match=rf"{path}: cannot write: No space left on device"):
            atomic_to_parquet(pd.DataFrame({"a": [2]}), path)
        assert [p.name for p in tmp_path.iterdir()] == ["t.parquet"]  # old file kept, no .tmp
        monkeypatch.undo()
        assert pd.read_parquet(path)["a"].tolist() == [1]

    def test_failed_write_through_the_cli(self, capsys, tmp_path, monkeypatch):
        def full(self, *a, **k):
            raise OSError(28, "No space left on device")

        import pyarrow.parquet as pq

        monkeypatch.setattr(pq, "write_table", full)  # the CLI writes Parquet with schema metadata
        code, _, err = run_cli(capsys, "run", "--policy", "fcfs", "--max-requests", "5", "--out", str(tmp_path))
        assert code == 2 and f"{tmp_path / 'requests-fcfs.parquet'}: cannot write: No space left" in err
        assert not any(p.name.endswith(".tmp") for p in tmp_path.iterdir())


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


class TestInternalErrors:
    """A bug: exit 1, a short message saying so, the traceback only with --debug."""

    @pytest.fixture
    def buggy(self, monkeypatch):
        class Buggy:
            name = "buggy"

            def order(self, waiting, now):
                return sorted(waiting, key=lambda q: 1 / 0)

        monkeypatch.setitem(registry.POLICIES, "buggy", lambda profile, **p: Buggy())

    def test_short_message(self, capsys, monkeypatch):
        import fairsim.metrics

        def broken(*_a, **_k):
            return 1 / 0

        monkeypatch.setattr(fairsim.metrics, "summarize", broken)
        code, _, err = run_cli(capsys, "run", "--policy", "fcfs", "--max-requests", "5")
        assert code == 1 and "Traceback" not in err
        assert ("fairsim: internal error (a bug in fairsim, please report it): ZeroDivisionError: "
                "division by zero\n(rerun with fairsim --debug ... for the traceback)") in err

    def test_error_inside_a_policy_names_the_policy(self, capsys, buggy):
        code, _, err = run_cli(capsys, "run", "--policy", "buggy", "--max-requests", "5")
        assert code == 1 and "Traceback" not in err and "bug in fairsim" not in err
        # The line of Buggy.order's lambda, in this file: where the policy's own code raised.
        assert (f"fairsim: error in policy 'buggy' (Buggy): ZeroDivisionError: division by zero "
                f"(at {__file__}, line 424)\n(rerun with fairsim --debug ... for the traceback)") in err

    def test_debug_shows_the_traceback(self, capsys, buggy):
        code, _, err = run_cli(capsys, "--debug", "run", "--policy", "buggy", "--max-requests", "5")
        assert code == 1 and "Traceback (most recent call last)" in err and "1 / 0" in err
        assert "ZeroDivisionError: division by zero" in err

    def test_debug_on_a_user_error_adds_the_traceback(self, capsys):
        code, _, err = run_cli(capsys, "--debug", "run", "--budget", "0")
        assert code == 2 and "Traceback (most recent call last)" in err
        assert err.strip().splitlines()[-1] == "fairsim: error: --budget 0: need >= 1 token per step"

    def test_policy_contract_is_a_clean_message(self, capsys, monkeypatch):
        class Dup:
            name = "dup"

            def order(self, waiting, now):
                out = sorted(waiting, key=arrival_key)
                return out[:1] * len(out)

        monkeypatch.setitem(registry.POLICIES, "dup", lambda profile, **p: Dup())
        code, _, err = run_cli(capsys, "run", "--policy", "dup", "--max-requests", "40")
        assert code == 1 and "Traceback" not in err and "simpy" not in err
        assert "bug in fairsim" not in err
        assert ("fairsim: error: policy contract broken (fairsim/policies/base.py): policy 'dup': "
                "order() must return a permutation of the") in err
        assert "duplicate 'rag-" in err

    def test_failure_in_a_later_policy_keeps_the_finished_ones(self, capsys, monkeypatch, tmp_path):
        class Drop:
            name = "drop"

            def order(self, waiting, now):
                return list(waiting)[1:]

        monkeypatch.setitem(registry.POLICIES, "drop", lambda profile, **p: Drop())
        code, _, err = run_cli(capsys, "compare", "--policies", "fcfs,drop", "--max-requests", "40",
                               "--out", str(tmp_path))
        assert code == 1 and "policy 'drop': order() must return a permutation" in err
        assert json.loads((tmp_path / "summary.json").read_text()).keys() == {"fcfs"}
        assert json.loads((tmp_path / "run.json").read_text())["policies"] == ["fcfs"]
        assert len(pd.read_parquet(tmp_path / "requests-fcfs.parquet")) == 40
        assert not (tmp_path / "requests-drop.parquet").exists()

    def test_missing_optional_package(self, capsys, monkeypatch):
        monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm now fails
        code, _, err = run_cli(capsys, "replay", "--engine", "vllm", "--max-requests", "5")
        assert code == 2 and "Traceback" not in err
        assert 'fairsim: error: vllm is not installed (needed for the live vLLM commands' in err
        assert 'pip install -e ".[live-cpu]"' in err

    def test_import_error_deep_inside_a_command(self, capsys, monkeypatch):
        import fairsim.cli as cli

        def cmd(args, names):
            raise ModuleNotFoundError("No module named 'ray'", name="ray")

        monkeypatch.setattr(cli, "cmd_simulate", cmd)
        code, _, err = run_cli(capsys, "run")
        assert code == 2 and 'pip install -e ".[ray]"' in err


    def test_out_of_memory(self, capsys, monkeypatch):
        import fairsim.cli as cli

        def cmd(args, names):
            raise MemoryError()

        monkeypatch.setattr(cli, "cmd_simulate", cmd)
        code, _, err = run_cli(capsys, "run")
        assert code == 2 and "Traceback" not in err
        assert err.startswith("fairsim: error: out of memory (MemoryError); use a smaller input")


class TestNoAssertsInFairsim:
    """Engine invariants are explicit checks, not asserts that python -O removes."""

    def test_no_bare_asserts(self):
        import ast

        offenders = []
        for path in (ROOT / "fairsim").rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Assert):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
        assert offenders == []


class TestInterrupt:
    """Ctrl-C: one line, exit 130, the policies that finished kept in --out."""

    def test_handler_inside_finalisers_only_records(self, monkeypatch):
        import gc
        import weakref

        from fairsim import interrupt

        monkeypatch.setattr(interrupt, "REQUESTED", False)
        seen = []

        def handler_here():  # the SIGINT handler as Python would call it, on this frame
            try:
                interrupt._on_sigint(signal.SIGINT, sys._getframe())
                seen.append("recorded")
            except KeyboardInterrupt:
                seen.append("raised")

        class Obj:
            def __del__(self):
                handler_here()

        class Key:
            pass

        Obj()  # __del__
        weakref.finalize(Key(), handler_here)  # weakref.finalize.__call__ (weakref.py)
        gc.collect()
        assert seen == ["recorded", "recorded"] and interrupt.REQUESTED
        with pytest.raises(KeyboardInterrupt):
            interrupt.check()
        handler_here()  # not in a finaliser: raised at once
        assert seen[-1] == "raised"

    @pytest.mark.parametrize("fmt", ["table", "json"])
    def test_a_failing_policy_prints_the_ones_before_it(self, capsys, tmp_path, monkeypatch, fmt):
        # compare fcfs,BOOM,lpm: fcfs finished, BOOM raises in order(); fcfs is printed (not only
        # written with --out), lpm is not run, and the exit is BOOM's (1).
        write_failing_policy(tmp_path, "comparefailpol")
        monkeypatch.syspath_prepend(str(tmp_path))
        try:
            code, out, err = run_cli(capsys, "compare", "--policies", "fcfs,comparefailpol:Boom,lpm",
                                     "--max-requests", "60", "--format", fmt)
        finally:
            sys.modules.pop("comparefailpol", None)
        assert code == 1 and "error in policy 'comparefailpol:Boom' (Boom)" in err
        assert "fairsim: the output above holds the 1 of 3 policies that finished (fcfs)" in err
        if fmt == "json":
            rows = json.loads(out)
            assert set(rows) == {"fcfs"} and rows["fcfs"]["requests"] == 60
        else:
            assert [ln.split()[0] for ln in out.splitlines()[3:]] == ["policy", "fcfs", "p50"], out  # the rows, then the ratio legend

    def test_sigint_keeps_finished_results(self, tmp_path):
        # 3,000 overloaded requests; the second policy, DRR, reorders the whole queue every step,
        # so it runs long enough to be interrupted. Three tries at different moments: a Ctrl-C that
        # lands in a finaliser (__del__) must not be lost either (fairsim/interrupt.py).
        trace = tmp_path / "t.jsonl"
        trace.write_text("".join(json.dumps({"timestamp": i * 5, "input_length": 1024, "output_length": 1,
                                             "hash_ids": [i % 50, 10_000 + i]}) + "\n" for i in range(3000)))
        for attempt in range(3):
            out = tmp_path / f"out{attempt}"
            res = ctrl_c_when([sys.executable, "-m", "fairsim", "compare", "--policies", "fcfs,drr", "--trace",
                               str(trace), "--out", str(out)], (out / "steps-fcfs.parquet").exists, cwd=ROOT)
            stdout, stderr = res.stdout, res.stderr
            if res.returncode == 0:
                pytest.skip("the second policy finished before the signal arrived")
            assert res.returncode == 130, stderr
            assert stderr.strip().splitlines()[-1] == "fairsim: interrupted; results already written are kept"
            assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr
            assert json.loads((out / "summary.json").read_text()).keys() == {"fcfs"}
            # and printed: the finished policy's row, said to be the only one
            assert [ln.split()[0] for ln in stdout.splitlines()[3:]] == ["policy", "fcfs", "p50"], stdout  # the rows, then the ratio legend
            assert "fairsim: the output above holds the 1 of 2 policies that finished (fcfs)" in stderr
        assert len(pd.read_parquet(out / "requests-fcfs.parquet")) == 3000
        assert not (out / "requests-fairway.parquet").exists()
        assert not any(p.name.endswith(".tmp") for p in out.iterdir())


class TestCalibrateRefusal:
    """A refused calibration keeps its raw measurements in OUT.raw.json (engine faked: the checks
    and the files are what is tested; tests/test_live_calibrate.py runs the real engine)."""

    COEF = dict(a_s=0.004, b_s_per_token=1e-5, k_s_per_pair=1e-8, d_s_per_request=1e-4)

    @pytest.fixture
    def fake_engine(self, monkeypatch):
        import calibration.measure as measure_mod
        import fairsim.live.engine as engine_mod
        from calibration.fit import StepSample
        from fairsim.costmodel import Profile

        model = Profile("m", "prior", *self.COEF.values(), (1, 2), (0.0, 0.0), 2048)
        state = {"idle_factor": 1.0}

        class LLM:
            class llm_engine:
                class model_config:
                    dtype = "float32"

        class Profiler:
            def __init__(self, llm, block):
                pass

            def warm_up(self):
                pass

        def measure(profiler, grid, budget, progress=None):
            samples = []
            for c in grid.context_tokens:
                for n in grid.new_tokens:
                    for r in grid.requests_per_step:
                        if r <= n:
                            batch = [(n // r, c)] * r
                            samples.append(StepSample(tuple(x for x, _ in batch), tuple(y for _, y in batch),
                                                      model.step_time(batch)))
            idle = {L: state["idle_factor"] * model.prefill_time(L) for L in grid.idle_lengths}
            raw = {"steps": [{"seconds": [s.seconds]} for s in samples],
                   "idle_prefill": [{"prompt_tokens": L, "seconds": [t]} for L, t in idle.items()]}
            return samples, idle, raw

        monkeypatch.setattr(engine_mod, "make_llm", lambda cfg, dtype="auto": LLM())
        monkeypatch.setattr(engine_mod, "vllm_version", lambda: "fake")
        monkeypatch.setattr(measure_mod, "Profiler", Profiler)
        monkeypatch.setattr(measure_mod, "measure", measure)
        import calibration.kv as kv_mod
        from fairsim.kvcapacity import KVCapacity

        # The engine's KV pool, as calibration.kv reads it from a real vLLM engine (faked here).
        capacity = KVCapacity(device_memory_gib=1.0, gpu_memory_utilization=1.0, weights_gib=0.0,
                              activation_reserve_gib=0.0, kv_bytes_per_token=1024)
        notes = {"kv_cache_tokens": capacity.tokens, "kv_cache_blocks": capacity.tokens // 128,
                 "kv_block_size": 128}
        monkeypatch.setattr(kv_mod, "engine_kv_capacity", lambda llm, total=None: (capacity, 8193, notes))
        return state

    def test_consistent_fit_writes_the_profile(self, capsys, tmp_path, fake_engine):
        out = tmp_path / "p.json"
        code, _, err = run_cli(capsys, "calibrate", "--out", str(out))
        assert code == 0, err
        assert load_profile(out).a_s == pytest.approx(0.004, rel=1e-6)
        assert not (tmp_path / "p.raw.json").exists()

    def test_inconsistent_idle_table_refused_raw_kept(self, capsys, tmp_path, fake_engine):
        fake_engine["idle_factor"] = 2.0  # T_idle measured at twice the fitted model: 100 % apart
        out = tmp_path / "p.json"
        code, _, err = run_cli(capsys, "calibrate", "--out", str(out))
        assert code == 3 and "fit refused" in err and "(100.0 % apart, tolerance 25 %)" in err
        assert f"Raw measurements: {tmp_path / 'p.raw.json'}" in err
        assert not out.exists()
        raw = json.loads((tmp_path / "p.raw.json").read_text())
        assert raw["fit_refused"] is True and len(raw["raw_measurements"]["steps"]) == 4 * 3 * 2
        assert raw["fit"]["coefficients"]["a_s"] == pytest.approx(0.004, rel=1e-6)

    def test_force_states_its_tolerance(self, capsys, tmp_path, fake_engine):
        fake_engine["idle_factor"] = 1.32  # 32 % apart -> written with idle_table_tolerance 0.35
        out = tmp_path / "p.json"
        code, _, err = run_cli(capsys, "calibrate", "--force", "--out", str(out))
        assert code == 0, err
        assert json.loads(out.read_text())["idle_table_tolerance"] == 0.35
        load_profile(out)


@pytest.mark.parametrize("command", [["analyze"], ["accept", "--policy", "fairway"],
                                     ["tune", "--policies", "fcfs", "--trials", "1"]])
@pytest.mark.parametrize("option, says", [
    (["--time-scale", "1e-12"], "fairsim: error: --time-scale 1e-12: the trace's 399 s of arrivals would span "
                                "3.99e-10 s, under 1e-06 s, finer than any engine step; use a larger --time-scale"),
    (["--time-scale", "1e8"], "fairsim: error: --time-scale 100000000.0: the last arrival is at 3.99e+10 s, "
                              "beyond 1e+09 s, where float64 time cannot resolve 1 us steps; use a smaller --time-scale"),
    (["--target-load", "1e12"], "fairsim: error: --target-load 1e+12 (time scale 6.81682e-12): the trace's 399 s "
                                "of arrivals would span 2.72e-09 s, under 1e-06 s"),
])
def test_trace_time_commands_refuse_scales_run_refuses(capsys, tmp_path, command, option, says):
    # accept, analyze and tune cut windows in trace time and scale after; they took a time
    # scale that squeezes the arrivals under 1 us or pushes them past 1e9 s, which run refuses.
    window = ROOT / "fairsim" / "traces" / "data" / "conversation_window.jsonl"
    argv = [*command, "--trace", str(window), *option]
    if command[0] == "tune":
        argv += ["--out", str(tmp_path / "tune")]
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and says in err and "Traceback" not in err, err
    assert "window" not in out and "busiest" not in out  # refused before any window or simulation
    code, _, err = run_cli(capsys, "run", "--trace", str(window), *option)
    assert code == 2 and says in err  # the same refusal as run's
