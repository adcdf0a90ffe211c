"""Start-up of ``fairsim run``: only what the command uses is imported (start-up within 0.3 s).

Each check runs a fresh interpreter (the test process has imported everything already) and
reads ``sys.modules`` after ``fairsim.cli.main`` returned.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PROBE = """
import io, json, sys, contextlib
preloaded = sorted(sys.modules)  # imported by the interpreter's start-up (site, .pth files)
from fairsim.cli import main
out, err = io.StringIO(), io.StringIO()
with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    try:
        status = main(sys.argv[1:])
    except SystemExit as exc:
        status = exc.code
print(json.dumps({"status": status, "err": err.getvalue(), "out": out.getvalue(),
                  "modules": sorted(sys.modules), "preloaded": preloaded}))
"""


def _probe(*argv: str) -> dict:
    res = subprocess.run([sys.executable, "-c", PROBE, *argv], cwd=ROOT, capture_output=True,
                         text=True, check=True, timeout=120)
    return json.loads(res.stdout.splitlines()[-1])


@pytest.fixture
def one_request(tmp_path):
    path = tmp_path / "one.jsonl"
    path.write_text(json.dumps({"timestamp": 0, "input_length": 600, "output_length": 4,
                                "hash_ids": [0]}) + "\n")
    return path


@pytest.mark.parametrize("mode", ["prefill-only", "colocated"])
def test_run_imports_only_what_it_uses(one_request, mode):
    got = _probe("run", "--trace", str(one_request), "--mode", mode)
    assert got["status"] == 0 and "fairway" in got["out"]
    mods = set(got["modules"])
    # Other commands' modules, the live hook, figures and the progress bar (not a terminal).
    for name in ("calibration.cli", "fairsim.accept", "fairsim.live.cli", "fairsim.sweep",
                 "fairsim.analysis.cli", "fairsim.convert", "vllm", "ray", "matplotlib", "tqdm"):
        assert name not in mods, name
    # One engine: no fleet or disaggregated pieces, no compare, --policy-config or closed-loop
    # figures, no eviction hook's pool.
    for name in ("fairsim.cli_fleet", "fairsim.cli_disagg", "fairsim.sim.fleet", "fairsim.sim.disaggregated",
                 "fairsim.ratios", "fairsim.policy_config", "fairsim.traces.closedload",
                 "fairsim.sim.hooked_pool"):
        assert name not in mods, name
    # np.percentile's np.unique imports numpy.ma (fairsim.metrics.percentiles does without it).
    assert "numpy.ma" not in mods
    # hashlib: only traces with content segments (RAGPulse) hash their blocks.
    assert "hashlib" not in mods
    # No pandas (0.25 s of start-up; it loads pyarrow too where installed): the engine's tables
    # are Columns, the decode figures (colocated) read them with numpy.
    assert "pandas" not in mods
    # No SimPy: a lone engine runs its step loop directly (fairsim.sim.engine); importing simpy
    # reads its version from the installed metadata (importlib.metadata, 15-35 ms).
    assert "simpy" not in mods
    assert "importlib.metadata" not in mods or "importlib.metadata" in got["preloaded"]


def test_a_fleet_runs_in_a_simpy_environment(one_request):
    # The engines of a fleet advance together as processes of one SimPy environment.
    got = _probe("run", "--trace", str(one_request), "--instances", "2")
    assert got["status"] == 0
    assert {"simpy", "fairsim.sim.fleet"} <= set(got["modules"])


def test_core_parser_errors_match_the_full_parser():
    # A mistake before or inside a core command is reported by the full parser, in one line
    # (the error contract), pointing to the --help that lists the options.
    for argv in (["--bogus", "run"], ["run", "--bogus"], ["nosuch"], []):
        got = _probe(*argv)
        assert got["status"] == 2
        assert got["err"].startswith("fairsim") and got["err"].count("\n") == 1, (argv, got["err"])
        assert "--help lists the options)" in got["err"], argv
    assert "invalid choice: 'nosuch'" in _probe("nosuch")["err"]
    assert "unrecognized arguments: --bogus" in _probe("--bogus", "run")["err"]
    other = _probe("sweep", "--help")
    assert other["status"] == 0 and "sweep" in other["out"]


@pytest.mark.parametrize("policy", ["fcfs", "lpm", "drr"])
def test_prefill_only_run_without_the_fairway_family_imports_no_numpy(one_request, policy):
    # The offered load and the summary are computed in plain floats (fairsim.npfloat): 60 ms
    # of start-up saved. (The Fairway family's Fast lane imports numpy only on the numpy bound
    # lines: tests/test_fast_lane_kernel.py.)
    got = _probe("run", "--trace", str(one_request), "--policy", policy)
    assert got["status"] == 0 and policy in got["out"]
    assert "numpy" not in set(got["modules"])
    colocated = _probe("run", "--trace", str(one_request), "--policy", policy, "--mode", "colocated")
    assert "numpy" in set(colocated["modules"])  # the token-gap table's arrays


def test_closed_loop_run_imports_no_numpy(tmp_path):
    # A session trace replays closed loop, and the run then reports the load it delivered from
    # its send times: read from the request table as plain lists (numpy took 40 ms of a
    # 0.15 s run of a small session trace).
    path = tmp_path / "session.jsonl"
    rows = [{"timestamp": 0, "input_length": 600, "output_length": 4, "hash_ids": [0],
             "session_id": "s", "request_id": "a"},
            {"timestamp": 1000, "input_length": 1200, "output_length": 4, "hash_ids": [0, 1],
             "session_id": "s", "request_id": "b", "after": "a"}]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    got = _probe("run", "--trace", str(path), "--policy", "fcfs")
    said = got["out"] + got["err"]
    assert got["status"] == 0 and "closed loop" in said and "load delivered" in said
    mods = set(got["modules"])
    assert "fairsim.traces.closedload" in mods and "numpy" not in mods
