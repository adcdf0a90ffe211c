"""fairsim sweep: grid expansion, kill-and-resume with a real SIGKILL, and the Ray executor."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from fairsim.sweep import RUNS_DIR, expand, load_spec, run_sweep

REPO = Path(__file__).resolve().parents[1]

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


def env_with_repo() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    return env


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
        with pytest.raises(ValueError, match="known: .*fcfs"):
            expand({"scenarios": ["rag"], "policies": ["nope"]})


class TestLocalExecutor:
    """Local processes give the same results as one process, and a rerun computes nothing."""

    def test_two_workers_match_one(self, tmp_path):
        spec = {"scenarios": [{"name": "mixed", "params": {"duration_s": 30.0}}], "seeds": [0, 1],
                "policies": ["fcfs", "lpm"], "engine": {"budget_tokens": [1024, 2048]}}
        logs: list[str] = []
        two = run_sweep(spec, tmp_path / "two", workers=2, progress=False, log=logs.append)
        one = run_sweep(spec, tmp_path / "one", workers=1, progress=False, log=lambda s: None)
        assert len(two) == 8
        pd.testing.assert_frame_equal(two, one)
        assert two["engine"].nunique() == 2
        logs.clear()
        run_sweep(spec, tmp_path / "two", workers=2, progress=False, log=logs.append)
        assert "8 already done, 0 to run" in logs[0] and not any(l.startswith("computed") for l in logs)


class TestResume:
    """A sweep killed halfway and restarted recomputes only the unfinished runs."""

    def test_sigkill_then_resume(self, tmp_path):
        spec_path = tmp_path / "slow.toml"
        spec_path.write_text(SLOW_SPEC)
        out = tmp_path / "out"
        cmd = [sys.executable, "-m", "fairsim", "sweep", str(spec_path), "--out", str(out),
               "--workers", "1", "--no-progress"]
        proc = subprocess.Popen(cmd, cwd=tmp_path, env=env_with_repo(), start_new_session=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        runs_dir = out / RUNS_DIR
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if runs_dir.is_dir() and len(list(runs_dir.glob("*.parquet"))) >= 2:
                break
            assert proc.poll() is None, proc.stdout.read().decode()
            time.sleep(0.01)
        os.killpg(proc.pid, signal.SIGKILL)  # a real, unclean kill mid-sweep
        proc.wait()
        finished = {p.stem: p.stat().st_mtime_ns for p in runs_dir.glob("*.parquet")}
        total = len(expand(load_spec(spec_path)))
        assert 2 <= len(finished) < total, f"kill landed outside the sweep: {len(finished)}/{total}"

        res = subprocess.run(cmd, cwd=tmp_path, env=env_with_repo(), capture_output=True,
                             text=True, timeout=300)
        assert res.returncode == 0, res.stderr
        assert f"{len(finished)} already done, {total - len(finished)} to run" in res.stdout
        computed = next(l for l in res.stdout.splitlines() if l.startswith("computed:")).split()[1:]
        assert set(computed).isdisjoint(finished)  # nothing finished was recomputed
        assert len(computed) == total - len(finished)
        for stem, mtime in finished.items():  # the finished files were not rewritten
            assert (runs_dir / f"{stem}.parquet").stat().st_mtime_ns == mtime
        summary = pd.read_parquet(out / "summary.parquet")
        assert len(summary) == total and summary["ttft_p99_s"].notna().all()
        assert not list(out.glob("*/.*.tmp"))  # no half-written file survives the restart


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
            via_ray = run_sweep(spec, tmp_path / "ray", executor="ray", progress=False,
                                log=lambda s: None)
        finally:
            ray.shutdown()
        local = run_sweep(spec, tmp_path / "local", workers=1, progress=False, log=lambda s: None)
        assert len(via_ray) == 3
        cols = ["run_id", "ttft_p50_s", "ttft_p99_s", "hit_rate"]
        pd.testing.assert_frame_equal(via_ray[cols], local[cols])
        for run_id in local["run_id"]:  # identical per-request results, bit for bit
            pd.testing.assert_frame_equal(
                pd.read_parquet(tmp_path / "ray" / RUNS_DIR / f"{run_id}.parquet"),
                pd.read_parquet(tmp_path / "local" / RUNS_DIR / f"{run_id}.parquet"))
