"""fairsim sweep: validation before any run, per-run capacity, run ids, failures, lock, dry-run,
trace-file sweeps, kill-and-resume with a real SIGKILL (no orphan workers), and the Ray executor."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from fairsim.cli import main
from fairsim.costmodel import PROFILE_DIR, load_profile
from fairsim.errors import SweepSpecError
from fairsim.scenarios import build_scenario
from fairsim.sweep import FAILED_DIR, RUNS_DIR, expand, load_spec, run_sweep
from fairsim.sweep.lock import SweepLock
from fairsim.traces import RagSpec, generate_rag, write_mooncake
from tests.utils import ctrl_c_when

REPO = Path(__file__).resolve().parents[1]
PRIOR = PROFILE_DIR / "a6000-llama3.1-8b-vllm-prior.json"

SLOW_SPEC = """
seeds = [0, 1]
[[scenarios]]
name = "sec-steady"
params = { duration_s = 6000.0 }
[[policies]]
name = "fcfs"
[[policies]]
name = "fairway"
grid = { fast_weight = [2, 4, 8] }
"""

SMALL = {"scenarios": [{"name": "rag", "params": {"num_requests": 60}}], "policies": ["fcfs", "lpm"]}


def env_with_repo() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    return env


def quiet(_: str) -> None:
    return None


def small_trace(path: Path, n: int = 40) -> Path:
    """A Mooncake JSONL file of ``n`` generated RAG requests (512-token hash blocks)."""
    write_mooncake(generate_rag(RagSpec(num_requests=n, seed=3)), path)
    return path


def session_pids(sid: int) -> list[int]:
    """Pids of live (non-zombie) processes in session ``sid`` (Linux /proc)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()  # after "pid (comm)": state ppid pgrp session
        if int(fields[3]) == sid and fields[0] != "Z":
            pids.append(int(entry.name))
    return pids


def wait_session_empty(sid: int, timeout_s: float = 20.0) -> list[int]:
    """Wait until no process of session ``sid`` is left; return those still alive at the end."""
    deadline = time.monotonic() + timeout_s
    while session_pids(sid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return session_pids(sid)


class TestExpand:
    """Spec -> runs."""

    def test_grid_size_and_stable_ids(self, tmp_path):
        spec_path = tmp_path / "s.toml"
        spec_path.write_text(SLOW_SPEC)
        runs = expand(load_spec(spec_path))
        assert len(runs) == 2 * (1 + 3)  # seeds x (fcfs + 3 fairway weights)
        assert [r.run_id for r in runs] == [r.run_id for r in expand(load_spec(spec_path))]
        assert len({r.run_id for r in runs}) == len(runs)

    def test_yaml_and_shorthands(self, tmp_path):
        p = tmp_path / "s.yaml"
        p.write_text("scenarios: [rag]\npolicies: [fcfs, lpm]\nseeds: [3]\n")
        runs = expand(load_spec(p))
        assert [(r.scenario, r.seed, r.policy) for r in runs] == [("rag", 3, "fcfs"), ("rag", 3, "lpm")]

    def test_unknown_policy_names_the_known_ones(self):
        with pytest.raises(SweepSpecError, match=r"policies\[0\]\.name: unknown policy 'nope'; known: .*fcfs"):
            expand({"scenarios": ["rag"], "policies": ["nope"]})

    def test_scenario_grid_and_params_columns(self):
        runs = expand({"scenarios": [{"name": "rag", "grid": {"num_requests": [30, 60]}}],
                       "policies": [{"name": "fairway", "params": {"slo_multiplier": 3},
                                     "grid": {"fast_weight": [2, 4]}}],
                       "engine": {"budget_tokens": [1024, 2048]}})
        assert len(runs) == 2 * 2 * 2
        cols = runs[-1].parameters()
        assert cols == {"scenario": "rag", "trace": None, "seed": 0, "policy": "fairway",
                        "scenario.num_requests": 60, "policy.slo_multiplier": 3,
                        "policy.fast_weight": 4, "engine.budget_tokens": 2048}


class TestRunId:
    """A run id covers what its result depends on."""

    def test_profile_content_not_name(self, tmp_path):
        copy = tmp_path / "prior.json"
        shutil.copy(PRIOR, copy)
        by_name = expand({**SMALL, "profile": "a6000-llama3.1-8b-vllm-prior"})
        by_copy = expand({**SMALL, "profile": str(copy)})
        assert [r.run_id for r in by_name] == [r.run_id for r in by_copy]  # same bytes, same id
        data = json.loads(copy.read_text())
        data["metadata"]["note"] = "edited"
        copy.write_text(json.dumps(data))
        edited = expand({**SMALL, "profile": str(copy)})
        assert not {r.run_id for r in edited} & {r.run_id for r in by_copy}

    def test_trace_content_and_shaping(self, tmp_path):
        trace = small_trace(tmp_path / "t.jsonl")
        spec = {"traces": [{"path": str(trace)}], "policies": ["fcfs"]}
        first = expand(spec)[0].run_id
        assert expand({"traces": [{"path": str(trace), "time_scale": 2.0}],
                       "policies": ["fcfs"]})[0].run_id != first
        moved = tmp_path / "moved.jsonl"
        shutil.copy(trace, moved)
        assert expand({"traces": [{"path": str(moved), "name": "t"}], "policies": ["fcfs"]})[0].run_id == first
        small_trace(trace, n=41)
        assert expand(spec)[0].run_id != first

    def test_code_version_in_id(self, monkeypatch):
        import fairsim.sweep.plan as plan

        before = expand(SMALL)[0].run_id
        monkeypatch.setattr(plan, "code_identity", lambda: {"version": "9.9", "source": "x"})
        assert expand(SMALL)[0].run_id != before


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


BASE = '[[scenarios]]\nname = "rag"\nparams = { num_requests = 30 }\n'
POL = '[[policies]]\nname = "fcfs"\n'
BROKEN = {
    "misspelt policy key": (BASE + POL + '[[policies]]\nname = "fairway"\ngrd = { fast_weight = [2] }\n',
                            "s.toml: policies[1].grd: unknown key; expected name, params, grid"),
    "misspelt top key": ("seed = [0]\n" + BASE + POL, "s.toml: seed: unknown key; expected out"),
    "float seed": ("seeds = [0, 1.5]\n" + BASE + POL, "s.toml: seeds[1]: expected an integer >= 0, got a number 1.5"),
    "string seed": ('seeds = ["a"]\n' + BASE + POL, "s.toml: seeds[0]: expected an integer >= 0"),
    "negative seed": ("seeds = [-1]\n" + BASE + POL, "s.toml: seeds[0]: -1: expected an integer >= 0"),
    "repeated seed": ("seeds = [1, 1]\n" + BASE + POL, "s.toml: seeds: [1, 1]: a seed is listed twice"),
    "toml syntax": ("seeds = [0]\n[[scenarios]\nname = 'rag'\n" + POL, "s.toml:2: not valid TOML"),
    "unknown policy": (BASE + '[[policies]]\nname = "fifo"\n', "s.toml: policies[0].name: unknown policy 'fifo'"),
    "unknown scenario": ('scenarios = ["ragg"]\n' + POL, "s.toml: scenarios[0].name: unknown scenario 'ragg'"),
    "bad policy grid point": (BASE + '[[policies]]\nname = "fairway"\ngrid = { fast_weight = [2, 0] }\n',
                              "s.toml: policies[0].grid (fast_weight=0): Fairway weights must be > 0"),
    "unknown policy param": (BASE + '[[policies]]\nname = "fairway"\nparams = { fast_wieght = 2 }\n',
                             "s.toml: policies[0].params: policy 'fairway': bad parameters"),
    "unknown engine key": (BASE + POL + "[engine]\nbudget = [1024]\n", "s.toml: engine.budget: unknown key; expected budget_tokens"),
    "engine type": (BASE + POL + '[engine]\nbudget_tokens = [1024, "big"]\n',
                    "s.toml: engine.budget_tokens[1]: 'big': budget_tokens needs an integer"),
    "engine value": (BASE + POL + "[engine]\nblock_size = [16, 0]\n", "s.toml: engine (block_size=0): block_size=0: need >= 1"),
    "kv_blocks over block sizes": (BASE + POL + "[engine]\nblock_size = [16, 128]\nkv_blocks = 100\n",
                                   "s.toml: engine.kv_blocks: with several block sizes [16, 128]"),
    "two capacities": (BASE + POL + "[engine]\nkv_blocks = 100\nkv_fraction = 0.3\n",
                       "s.toml: engine.kv_fraction: give one KV capacity key of kv_blocks, kv_fraction, kv_tokens, not kv_blocks and kv_fraction"),
    "tokens and blocks": (BASE + POL + "[engine]\nkv_tokens = [100000]\nkv_blocks = 100\n",
                          "s.toml: engine.kv_tokens: give one KV capacity key"),
    "cache too small": (BASE + POL + "[engine]\nkv_blocks = [400, 1]\n",
                        "s.toml: scenarios[0] (seed 0), engine (kv_blocks=1): request"),
    "bad scenario param": ('[[scenarios]]\nname = "rag"\nparams = { num_request = 5 }\n' + POL,
                           "s.toml: scenarios[0] (seed 0): bad scenario parameter"),
    "bad scenario grid point": ('seeds = [0, 1]\n[[scenarios]]\nname = "rag"\ngrid = { num_requests = [20, -5] }\n' + POL,
                                "s.toml: scenarios[0] (seed 0, num_requests=-5)"),
    "missing trace": ('[[traces]]\npath = "nowhere.jsonl"\n' + POL, "s.toml: traces[0].path: no such file 'nowhere.jsonl'"),
    "trace key": ('[[traces]]\npath = "t.jsonl"\ntimescale = 2\n' + POL, "s.toml: traces[0].timescale: unknown key"),
    "trace scale": ('[[traces]]\npath = "t.jsonl"\ntime_scale = [1, 0]\n' + POL, "s.toml: traces[0].time_scale[1]: 0: need a factor > 0"),
    "huge trace scale": ('[[traces]]\npath = "t.jsonl"\ntime_scale = [1, 1e300]\n' + POL,
                         "s.toml: traces[0] (time_scale=1e+300, window=[0.0, None), max_requests=None): "
                         "time_scale 1e+300: the last arrival is at"),
    "trace window": ('[[traces]]\npath = "t.jsonl"\nwindow = [10.0, 5.0]\n' + POL, "s.toml: traces[0].window: window [10.0, 5.0) is empty"),
    "empty window": ('[[traces]]\npath = "t.jsonl"\nwindow = [1e6, 2e6]\n' + POL, "s.toml: traces[0] (time_scale=1.0, window=[1000000.0, 2000000.0)"),
    "bad trace record": ('[[traces]]\npath = "bad.jsonl"\n' + POL, "s.toml: traces[0].path: "),
    "no policies": (BASE, "s.toml: (top level): missing key 'policies'"),
    "nothing to run": (POL, "s.toml: (top level): nothing to run"),
    "missing profile file": ('profile = "nope.json"\n' + BASE + POL, "s.toml: profile: no such file 'nope.json'"),
    "unknown profile name": ('profile = "h100"\n' + BASE + POL, "s.toml: profile: profile 'h100' is neither a file nor a shipped profile"),
    "folder of no format": ('[[traces]]\npath = "."\n' + POL,
                            "s.toml: traces[0].path: .: a folder is read only as ragpulse or claude-code"),
    "unknown format": ('[[traces]]\npath = "t.jsonl"\nformat = "csv"\n' + POL,
                       "s.toml: traces[0].format: unknown format 'csv'; known: auto, dynamo, "),
    "wrong format": ('[[traces]]\npath = "t.jsonl"\nformat = "azure"\n' + POL, "s.toml: traces[0].path: "),
    "empty trace": ('[[traces]]\npath = "empty.jsonl"\n' + POL, "s.toml: traces[0].path: empty.jsonl: no requests in the trace"),
    "empty grid axis": (BASE + '[[policies]]\nname = "fairway"\ngrid = { fast_weight = [] }\n',
                        "s.toml: policies[0].grid.fast_weight: empty list"),
    "nan param": (BASE + '[[policies]]\nname = "fairway"\nparams = { fast_weight = nan }\n',
                  "s.toml: policies[0].params.fast_weight: nan is not a finite number"),
    "params not a table": (BASE + '[[policies]]\nname = "fairway"\nparams = 3\n', "s.toml: policies[0].params: expected a table"),
    "scenarios not a list": ("scenarios = 5\n" + POL, "s.toml: scenarios: expected a list"),
    "grid also in params": (BASE + '[[policies]]\nname = "fairway"\nparams = { fast_weight = 2 }\ngrid = { fast_weight = [4] }\n',
                            "s.toml: policies[0].grid.fast_weight: also given in params"),
    "duplicate run": (BASE + POL + POL, "s.toml: scenarios[0] x policies[1]: gives the same run as scenarios[0] x policies[0]"),
    "date value": (BASE + POL + "[engine]\nbudget_tokens = 1979-05-27\n", "s.toml: engine.budget_tokens: a date (1979-05-27) is not allowed"),
}


class TestBrokenSpecs:
    """Every broken spec ends with exit 2 and a named cause, before anything runs."""

    @pytest.mark.parametrize("case", sorted(BROKEN))
    def test_exit_2_named_cause(self, case, tmp_path, capsys, monkeypatch):
        text, expected = BROKEN[case]
        monkeypatch.chdir(tmp_path)
        small_trace(tmp_path / "t.jsonl")
        good = (tmp_path / "t.jsonl").read_text().splitlines()
        (tmp_path / "bad.jsonl").write_text(good[0] + "\n" + good[1].replace('"input_length"', '"input_len"') + "\n")
        (tmp_path / "empty.jsonl").write_text("")
        spec = write(tmp_path, "s.toml", text)
        rc = main(["sweep", spec.name, "--out", "out", "--no-progress"])
        err = capsys.readouterr().err
        assert rc == 2, err
        assert err.startswith("fairsim: error: ") and expected in err, err
        assert "Traceback" not in err
        assert not (tmp_path / "out").exists()  # refused before the folder was touched

    def test_bad_trace_record_names_file_and_line(self, tmp_path):
        small_trace(tmp_path / "t.jsonl")
        lines = (tmp_path / "t.jsonl").read_text().splitlines()
        lines[2] = lines[2].replace('"input_length"', '"input_len"')
        (tmp_path / "bad.jsonl").write_text("\n".join(lines) + "\n")
        with pytest.raises(SweepSpecError, match=r"traces\[0\]\.path: .*bad\.jsonl:3: field 'input_length'"):
            expand({"traces": [{"path": str(tmp_path / "bad.jsonl")}], "policies": ["fcfs"]}, "s.toml")

    def test_path_next_to_the_spec_is_named(self, tmp_path, monkeypatch, capsys):
        (tmp_path / "specs").mkdir()
        small_trace(tmp_path / "specs" / "t.jsonl")
        spec = write(tmp_path / "specs", "s.toml", '[[traces]]\npath = "t.jsonl"\n' + POL)
        monkeypatch.chdir(tmp_path)
        assert main(["sweep", "specs/s.toml", "--dry-run"]) == 2
        assert ("traces[0].path: no such file 't.jsonl' (relative paths are read from the current "
                f"folder, {tmp_path}); there is one next to the spec: give 'specs/t.jsonl'") in capsys.readouterr().err
        assert spec.is_file()

    def test_yaml_syntax_error_names_line(self, tmp_path, capsys):
        spec = write(tmp_path, "s.yaml", "policies: [fcfs]\nscenarios: [rag\nseeds: [0]\n")
        assert main(["sweep", str(spec), "--dry-run"]) == 2
        assert "s.yaml:3: not valid YAML" in capsys.readouterr().err

    @pytest.mark.parametrize("name,expected", [("s.json", "must be .toml, .yaml or .yml"),
                                               ("missing.toml", "no such sweep spec file")])
    def test_unreadable_spec(self, tmp_path, capsys, name, expected):
        if name.endswith(".json"):
            write(tmp_path, name, "{}")
        assert main(["sweep", str(tmp_path / name)]) == 2
        assert expected in capsys.readouterr().err

    def test_subprocess_no_traceback(self, tmp_path):
        spec = write(tmp_path, "s.toml", BROKEN["misspelt policy key"][0])
        res = subprocess.run([sys.executable, "-m", "fairsim", "sweep", str(spec)], cwd=tmp_path,
                             env=env_with_repo(), capture_output=True, text=True, timeout=120)
        assert res.returncode == 2
        assert res.stderr.strip().splitlines() == [
            f"fairsim: error: {spec}: policies[1].grd: unknown key; expected name, params, grid"]

    @pytest.mark.parametrize("options,expected", [
        (["--workers", "0"], "--workers 0: need >= 1"),
        (["--address", "auto"], "--address auto: only used with --executor ray")])
    def test_bad_options(self, tmp_path, capsys, options, expected):
        spec = write(tmp_path, "s.toml", BASE + POL)
        assert main(["sweep", str(spec), "--out", str(tmp_path / "o"), *options]) == 2
        assert expected in capsys.readouterr().err
        assert not (tmp_path / "o").exists()


class TestCapacity:
    """Capacity is resolved per run from its own engine settings, as tokens."""

    def test_block_size_grid_keeps_scenario_tokens(self, tmp_path):
        spec = {"scenarios": [{"name": "rag", "params": {"num_requests": 80}}], "policies": ["fcfs"],
                "engine": {"block_size": [128, 256, 512]}}
        summary = run_sweep(spec, tmp_path / "o", workers=1, progress=False, log=quiet)
        scenario = build_scenario("rag", load_profile(), 0, num_requests=80)
        tokens = scenario.engine.kv_blocks * 512  # the scenario sizes its cache in 512-token blocks
        assert summary["block_size"].tolist() == [128, 256, 512]
        assert summary["kv_blocks"].tolist() == [tokens // 128, tokens // 256, tokens // 512]
        assert (summary["kv_tokens"] == tokens).all()

    def test_kv_tokens_key(self, tmp_path):
        spec = {"scenarios": [{"name": "rag", "params": {"num_requests": 80}}], "policies": ["fcfs"],
                "engine": {"block_size": [128, 512], "kv_tokens": 100_000}}
        summary = run_sweep(spec, tmp_path / "o", workers=1, progress=False, log=quiet)
        # floor(100000 / 128) = 781 blocks = 99968 tokens; floor(100000 / 512) = 195 = 99840
        assert summary["kv_blocks"].tolist() == [781, 195]
        assert summary["kv_tokens"].tolist() == [99_968, 99_840]


class TestLocalExecutor:
    """Local processes give the same results as one process, and a rerun computes nothing."""

    def test_two_workers_match_one(self, tmp_path):
        spec = {"scenarios": [{"name": "mixed", "params": {"duration_s": 30.0}}], "seeds": [0, 1],
                "policies": ["fcfs", "lpm"], "engine": {"budget_tokens": [1024, 2048]}}
        logs: list[str] = []
        two = run_sweep(spec, tmp_path / "two", workers=2, progress=False, log=logs.append)
        one = run_sweep(spec, tmp_path / "one", workers=1, progress=False, log=quiet)
        assert len(two) == 8 and (two["status"] == "ok").all()
        pd.testing.assert_frame_equal(two, one)
        assert two["engine"].nunique() == 2
        assert two["engine.budget_tokens"].tolist() == [1024, 2048] * 4  # named by parameter
        logs.clear()
        run_sweep(spec, tmp_path / "two", workers=2, progress=False, log=logs.append)
        assert "8 already done, 0 to run" in logs[0] and not any(l.startswith("computed") for l in logs)


class TestFailures:
    """A failing run is recorded and the others go on; the command exits 1 and names it."""

    def test_trace_edited_mid_sweep_fails_only_its_runs(self, tmp_path):
        trace = small_trace(tmp_path / "t.jsonl")
        spec = {"scenarios": [{"name": "rag", "params": {"num_requests": 40}}],
                "traces": [{"path": str(trace)}], "policies": ["fcfs", "lpm"]}

        def log(line: str) -> None:  # runs after planning, before the first run
            if line.startswith("sweep:"):
                small_trace(trace, n=39)

        summary = run_sweep(spec, tmp_path / "o", workers=1, progress=False, log=log)
        assert summary["status"].tolist() == ["ok", "ok", "failed", "failed"]
        assert summary["error"].iloc[2].startswith(f"StaleInputError: trace {trace.resolve()} changed")
        assert summary.loc[:1, "ttft_p99_s"].notna().all() and summary.loc[2:, "ttft_p99_s"].isna().all()
        record = json.loads((tmp_path / "o" / FAILED_DIR / f"{summary['run_id'].iloc[2]}.json").read_text())
        assert record["error"] == summary["error"].iloc[2] and "Traceback" in record["traceback"]

    def test_cli_exit_1_then_retry(self, tmp_path, capsys, monkeypatch):
        import fairsim.sweep.runs as runs_mod

        real = runs_mod.execute

        def flaky(run):  # fault injection: one run's simulation raises
            if run.policy == "lpm":
                raise ZeroDivisionError("injected")
            return real(run)

        monkeypatch.setattr(runs_mod, "execute", flaky)
        spec = write(tmp_path, "s.toml", BASE + POL + '[[policies]]\nname = "lpm"\n')
        out = tmp_path / "o"
        args = ["sweep", str(spec), "--out", str(out), "--workers", "1", "--no-progress"]
        assert main(args) == 1
        captured = capsys.readouterr()
        assert "fairsim: 1 of 2 runs failed" in captured.err
        assert "rag-s0-lpm-" in captured.err and "ZeroDivisionError: injected" in captured.err
        assert pd.read_parquet(out / "summary.parquet")["status"].tolist() == ["ok", "failed"]
        monkeypatch.setattr(runs_mod, "execute", real)
        assert main(args) == 0
        assert "1 already done, 1 to run" in capsys.readouterr().out
        assert pd.read_parquet(out / "summary.parquet")["status"].tolist() == ["ok", "ok"]
        assert not list((out / FAILED_DIR).glob("*.json"))


class TestStaleResults:
    """A resume never reuses a result computed from a different input."""

    def test_edited_profile_is_recomputed(self, tmp_path):
        profile = tmp_path / "p.json"
        shutil.copy(PRIOR, profile)
        spec = {**SMALL, "profile": str(profile)}
        logs: list[str] = []
        first = run_sweep(spec, tmp_path / "o", workers=1, progress=False, log=quiet)
        data = json.loads(profile.read_text())  # a device twice as slow: every cost term x 2
        data["coefficients"] = {k: 2 * v for k, v in data["coefficients"].items()}
        data["idle_prefill"]["seconds"] = [2 * v for v in data["idle_prefill"]["seconds"]]
        profile.write_text(json.dumps(data))
        second = run_sweep(spec, tmp_path / "o", workers=1, progress=False, log=logs.append)
        assert "0 already done, 2 to run" in logs[0]
        assert set(first["run_id"]).isdisjoint(second["run_id"])
        assert (second["ttft_p50_s"].to_numpy() > first["ttft_p50_s"].to_numpy()).all()


class TestLockAndDryRun:
    """One sweep per folder; --dry-run lists the runs without running them."""

    def test_second_sweep_refused(self, tmp_path, capsys):
        spec = write(tmp_path, "s.toml", BASE + POL)
        out = tmp_path / "o"
        with SweepLock(out):
            assert main(["sweep", str(spec), "--out", str(out), "--no-progress"]) == 2
        err = capsys.readouterr().err
        assert f"--out {out}: another fairsim sweep or tune (pid {os.getpid()}) is running in this folder" in err
        assert not (out / RUNS_DIR).exists()
        assert main(["sweep", str(spec), "--out", str(out), "--no-progress"]) == 0  # released

    def test_out_not_a_folder(self, tmp_path, capsys):
        spec = write(tmp_path, "s.toml", BASE + POL)
        (tmp_path / "o").write_text("a file")
        assert main(["sweep", str(spec), "--out", str(tmp_path / "o"), "--no-progress"]) == 2
        assert f"--out {tmp_path / 'o'}: cannot create the sweep folder" in capsys.readouterr().err

    def test_dry_run_lists_and_runs_nothing(self, tmp_path, capsys):
        spec = write(tmp_path, "s.toml", BASE + POL + '[[policies]]\nname = "fairway"\ngrid = { fast_weight = [2, 4] }\n')
        out = tmp_path / "o"
        assert main(["sweep", str(spec), "--out", str(out), "--dry-run"]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert lines[-1] == f"3 runs; 0 done in {out}"
        assert "policy.fast_weight" in lines[0] and sum("to run" in l for l in lines) == 3
        assert not out.exists()
        run_sweep(load_spec(spec) | {"policies": ["fcfs"]}, out, workers=1, progress=False, log=quiet)
        assert main(["sweep", str(spec), "--out", str(out), "--dry-run"]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert sum(" done " in l for l in lines[1:-1]) == 1 and lines[-1] == f"3 runs; 1 done in {out}"


class TestTraceSweep:
    """[[traces]] runs a trace file under each shaping combination."""

    def test_shaping_grid(self, tmp_path):
        trace = small_trace(tmp_path / "t.jsonl", n=50)
        spec = {"seeds": [0, 1],  # seeds do not multiply a file's runs
                "traces": [{"path": str(trace), "time_scale": [1.0, 2.0], "max_requests": 30}],
                "policies": ["fcfs"]}
        out = tmp_path / "o"
        summary = run_sweep(spec, out, workers=1, progress=False, log=quiet)
        assert len(summary) == 2 and summary["seed"].isna().all()
        assert summary["scenario"].tolist() == ["t", "t"]
        assert summary["trace.time_scale"].tolist() == [1, 2] and (summary["requests"] == 30).all()
        one, two = (pd.read_parquet(out / RUNS_DIR / f"{rid}.parquet") for rid in summary["run_id"])
        arrivals = generate_rag(RagSpec(num_requests=50, seed=3)).requests[:30]
        expected = [round(r.arrival_time * 1000) / 1000 for r in arrivals]  # JSONL has ms
        assert one["arrival_s"].tolist() == pytest.approx(expected)
        assert two["arrival_s"].tolist() == pytest.approx([2 * t for t in expected])

    def test_window_pairs(self, tmp_path):
        trace = small_trace(tmp_path / "t.jsonl", n=50)
        runs = expand({"traces": [{"path": str(trace), "window": [[0, 10], [10, 20]]}],
                       "policies": ["fcfs"]})
        assert [(r.trace["window_start_s"], r.trace["window_end_s"]) for r in runs] == [(0, 10), (10, 20)]


class TestResume:
    """kill -9 of the sweep leaves no worker behind; the same command then finishes every run once."""

    def test_ctrl_c_says_interrupted_once(self, tmp_path):
        # The sweep reports its own interruption (the folder to resume); main must not add its
        # generic line after it (it did: two "interrupted" lines).
        spec_path = tmp_path / "slow.toml"
        spec_path.write_text(SLOW_SPEC)
        out = tmp_path / "out"
        runs_dir = out / RUNS_DIR
        res = ctrl_c_when([sys.executable, "-m", "fairsim", "sweep", str(spec_path), "--out", str(out),
                           "--workers", "1", "--no-progress"],
                          lambda: runs_dir.is_dir() and any(runs_dir.glob("*.parquet")),
                          cwd=tmp_path, env=env_with_repo(), wait_s=180)
        stderr = res.stderr
        if res.returncode == 0:
            pytest.skip("the sweep finished before the signal arrived")
        assert res.returncode == 130, stderr
        said = [ln for ln in stderr.splitlines() if "interrupted" in ln]
        assert len(said) == 1 and f"the finished runs are kept in {out}" in said[0], stderr
        assert "Traceback" not in stderr, stderr

    def test_ctrl_c_while_summarising_says_no_summary(self, tmp_path, capsys, monkeypatch):
        # A Ctrl-C after the last run, while the summary is read back and written, left no
        # summary, yet the message said "(summary written)".
        from fairsim.sweep import command

        spec = tmp_path / "s.toml"
        spec.write_text('scenarios = [{name = "rag", params = {num_requests = 60}}]\npolicies = ["fcfs", "lpm"]\n')
        out = tmp_path / "out"

        def interrupted(*_args, **_kwargs):
            raise KeyboardInterrupt

        monkeypatch.setattr(command, "summarize_runs", interrupted)
        assert main(["sweep", str(spec), "--out", str(out), "--workers", "1", "--no-progress"]) == 130
        err = capsys.readouterr().err
        assert f"the finished runs are kept in {out} (summary not written)" in err, err
        assert not (out / "summary.parquet").exists() and not (out / "summary.csv").exists()
        assert len(list((out / RUNS_DIR).glob("*.parquet"))) == 2  # both runs kept
        monkeypatch.undo()
        assert main(["sweep", str(spec), "--out", str(out), "--workers", "1", "--no-progress"]) == 0
        assert pd.read_csv(out / "summary.csv")["status"].tolist() == ["ok", "ok"]

    def test_ctrl_c_during_runs_writes_summary(self, tmp_path, capsys, monkeypatch):
        from fairsim.sweep import command

        spec = tmp_path / "s.toml"
        spec.write_text('scenarios = [{name = "rag", params = {num_requests = 60}}]\npolicies = ["fcfs", "lpm"]\n')
        out = tmp_path / "out"

        def run_one_then_stop(todo, on_result, workers, progress):
            from fairsim.sweep.executors import run_local

            run_local(todo[:1], on_result, workers, progress)
            raise KeyboardInterrupt

        monkeypatch.setattr(command, "run_local", run_one_then_stop)
        assert main(["sweep", str(spec), "--out", str(out), "--workers", "1", "--no-progress"]) == 130
        err = capsys.readouterr().err
        assert f"the finished runs are kept in {out} (summary written)" in err, err
        assert pd.read_csv(out / "summary.csv")["status"].tolist() == ["ok", "not run"]

    def test_sigkill_parent_then_resume(self, tmp_path):
        spec_path = tmp_path / "slow.toml"
        spec_path.write_text(SLOW_SPEC)
        out = tmp_path / "out"
        cmd = [sys.executable, "-m", "fairsim", "sweep", str(spec_path), "--out", str(out),
               "--workers", "2", "--no-progress"]
        proc = subprocess.Popen(cmd, cwd=tmp_path, env=env_with_repo(), start_new_session=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        runs_dir = out / RUNS_DIR
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if runs_dir.is_dir() and len(list(runs_dir.glob("*.parquet"))) >= 2:
                break
            assert proc.poll() is None, proc.stdout.read().decode()
            time.sleep(0.01)
        assert len(session_pids(proc.pid)) >= 3  # the sweep and its two workers
        os.kill(proc.pid, signal.SIGKILL)  # only the parent: its workers must end by themselves
        proc.wait()
        assert wait_session_empty(proc.pid) == [], "orphaned workers survived their sweep"
        finished = {p.stem: p.stat().st_mtime_ns for p in runs_dir.glob("*.parquet")}
        total = len(expand(load_spec(spec_path)))
        assert 2 <= len(finished) < total, f"kill landed outside the sweep: {len(finished)}/{total}"

        res = subprocess.run(cmd, cwd=tmp_path, env=env_with_repo(), capture_output=True,
                             text=True, timeout=300)
        assert res.returncode == 0, res.stderr
        assert f"{len(finished)} already done, {total - len(finished)} to run" in res.stdout
        computed = next(l for l in res.stdout.splitlines() if l.startswith("computed:")).split()[1:]
        assert set(computed).isdisjoint(finished)  # nothing finished was recomputed
        assert sorted(computed + list(finished)) == sorted(r.run_id for r in expand(load_spec(spec_path)))
        for stem, mtime in finished.items():  # the finished files were not rewritten
            assert (runs_dir / f"{stem}.parquet").stat().st_mtime_ns == mtime
        summary = pd.read_parquet(out / "summary.parquet")
        assert len(summary) == total and summary["run_id"].is_unique
        assert (summary["status"] == "ok").all() and summary["ttft_p99_s"].notna().all()
        assert not list(out.glob("*/.*.tmp"))  # no half-written file survives the restart


class TestWorkerDeath:
    """A worker killed mid-run (say by the OOM killer) costs no run: the sweep reruns its runs."""

    def test_killed_worker(self, tmp_path):
        spec_path = tmp_path / "slow.toml"
        spec_path.write_text(SLOW_SPEC)
        out = tmp_path / "out"
        proc = subprocess.Popen([sys.executable, "-m", "fairsim", "sweep", str(spec_path), "--out",
                                 str(out), "--workers", "2", "--no-progress"], cwd=tmp_path,
                                env=env_with_repo(), start_new_session=True, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 180
        workers: list[int] = []
        while time.monotonic() < deadline and not workers:
            assert proc.poll() is None, proc.stdout.read()
            if (out / RUNS_DIR).is_dir() and list((out / RUNS_DIR).glob("*.parquet")):
                workers = [p for p in session_pids(proc.pid)
                           if "spawn_main" in Path(f"/proc/{p}/cmdline").read_text()]
            time.sleep(0.01)
        os.kill(workers[0], signal.SIGKILL)
        output, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, output
        summary = pd.read_parquet(out / "summary.parquet")
        assert len(summary) == 8 and (summary["status"] == "ok").all()
        assert wait_session_empty(proc.pid) == []


class TestRay:
    """The Ray executor against a real local Ray cluster (no mock)."""

    def test_ray_matches_local(self, tmp_path, monkeypatch):
        import ray  # in the test extra: CI must run this test, never skip it
        monkeypatch.setenv("PYTHONPATH", env_with_repo()["PYTHONPATH"])
        spec = {"scenarios": [{"name": "rag", "params": {"num_requests": 150}}],
                "policies": ["fcfs", {"name": "fairway", "grid": {"fast_weight": [2, 4]}}]}
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": {"PYTHONPATH": env_with_repo()["PYTHONPATH"]}})
        try:
            via_ray = run_sweep(spec, tmp_path / "ray", executor="ray", progress=False, log=quiet)
        finally:
            ray.shutdown()
        local = run_sweep(spec, tmp_path / "local", workers=1, progress=False, log=quiet)
        assert len(via_ray) == 3
        cols = ["run_id", "status", "ttft_p50_s", "ttft_p99_s", "hit_rate"]
        pd.testing.assert_frame_equal(via_ray[cols], local[cols])
        for run_id in local["run_id"]:  # identical per-request results, bit for bit
            pd.testing.assert_frame_equal(
                pd.read_parquet(tmp_path / "ray" / RUNS_DIR / f"{run_id}.parquet"),
                pd.read_parquet(tmp_path / "local" / RUNS_DIR / f"{run_id}.parquet"))
