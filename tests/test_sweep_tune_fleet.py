"""Sweeps and tune take the fleet (instances, router, router parameters) as parameters: a sweep's
fleet run is `fairsim run --instances --router --router-param`'s, and tune simulates each trial on
the fleet and records it in tune.json and its fingerprint."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from fairsim.cli import main
from fairsim.errors import SweepSpecError
from fairsim.sweep import RUNS_DIR, expand, run_sweep

ROOT = Path(__file__).resolve().parents[1]
WINDOW = str(ROOT / "fairsim" / "traces" / "data" / "conversation_window.jsonl")
TRACE = {"path": WINDOW, "max_requests": 80}
FLEET_GRID = {"instances": [1, 4], "router": ["round-robin", "dynamo-kv"],
              "router_params": [{"dynamo-kv": {"overlap_weight": 1}}, {"dynamo-kv": {"overlap_weight": 4}}]}


def quiet(_: str) -> None:
    return None


def run_requests(tmp_path: Path, options: list[str]) -> tuple[pd.DataFrame, dict]:
    out = tmp_path / "run"
    assert main(["run", "--trace", WINDOW, "--max-requests", "80", "--policy", "fcfs", *options,
                 "--out", str(out)]) == 0
    return pd.read_parquet(out / "requests-fcfs.parquet"), json.loads((out / "summary.json").read_text())["fcfs"]


def test_sweep_over_instances_and_routers(tmp_path):
    out = tmp_path / "sweep"
    summary = run_sweep({"traces": [TRACE], "policies": ["fcfs"], "engine": FLEET_GRID}, out,
                        workers=1, progress=False, log=quiet)
    assert (summary["status"] == "ok").all()
    # round-robin takes no dynamo-kv parameters: its runs are not repeated per router_params table
    points = list(zip(summary["engine.instances"], summary["engine.router"], summary["engine.router_params"]))
    assert [tuple(None if pd.isna(v) else v for v in p) for p in points] == [
        (1, "round-robin", None), (1, "dynamo-kv", '{"overlap_weight": 1}'),
        (1, "dynamo-kv", '{"overlap_weight": 4}'), (4, "round-robin", None),
        (4, "dynamo-kv", '{"overlap_weight": 1}'), (4, "dynamo-kv", '{"overlap_weight": 4}')]
    rr4 = pd.read_parquet(out / RUNS_DIR / f"{summary['run_id'][3]}.parquet")
    assert list(rr4["instance"]) == [i % 4 for i in range(80)]  # round robin over the trace order
    assert summary["router_hit_rate"][3] == 0.0  # round robin counts no cache
    one = summary[summary["engine.instances"] == 1]
    assert (one["load_imbalance"] == 1.0).all() and one["ttft_p50_s"].nunique() == 1  # a fleet of one
    # the same run as `fairsim run` with the same fleet options, table for table
    dyn = summary.iloc[5]
    got = pd.read_parquet(out / RUNS_DIR / f"{dyn['run_id']}.parquet")
    expected, row = run_requests(tmp_path, ["--instances", "4", "--router", "dynamo-kv",
                                            "--router-param", "overlap_weight=4"])
    pd.testing.assert_frame_equal(got[expected.columns].reset_index(drop=True), expected)
    assert dyn["load_imbalance"] == pytest.approx(row["load_imbalance"])
    assert dyn["router_hit_rate"] == pytest.approx(row["router_hit_rate"])


@pytest.mark.parametrize("engine, message", [
    ({"instances": 0}, r"engine \(instances=0\): instances=0: need at least 1"),
    ({"instances": 100_001}, r"instances=100001: at most 100,000"),  # as run's --instances (was: run)
    ({"router": "nope"}, "router 'nope': unknown router"),
    # parameters of a router no run uses would be dropped unseen: refused, as run refuses them
    ({"instances": 2, "router_params": {"dynamo-kv": {"overlap": 1}}},
     r"engine.router_params: router_params.dynamo-kv: no run of this spec uses router 'dynamo-kv'"),
    ({"router": "dynamo-kv", "router_params": {"dynamo-kv": {"overlap": 1}}},
     "router_params.dynamo-kv overlap: router 'dynamo-kv' takes overlap_weight, temperature"),
    ({"router_params": {"dynamo-kv": {}}}, "router_params needs a router"),
    ({"router": "session-affinity"}, "router session-affinity needs sessions"),
    ({"instances": "2"}, "instances needs an integer"),
    ({"router_params": 3}, "router_params needs a table"),
])
def test_bad_fleet_keys_are_named(engine, message):
    spec = {"traces": [TRACE], "policies": ["fcfs"], "engine": engine}
    with pytest.raises(SweepSpecError, match=message):
        expand(spec, "spec.toml")


def tune(tmp_path: Path, *extra: str) -> int:
    return main(["tune", "--trace", WINDOW, "--max-requests", "120", "--policies", "fcfs,lpm", "--trials", "2",
                 "--folds", "2", "--targets", "p50<=100s", "--out", str(tmp_path / "tune"), "--format", "json",
                 *extra])


def test_tune_runs_its_trials_on_the_fleet(tmp_path, capsys):
    assert tune(tmp_path, "--instances", "2", "--router", "dynamo-kv", "--router-param", "overlap_weight=2") == 0
    payload = json.loads((tmp_path / "tune" / "tune.json").read_text())
    assert payload["fleet"] == {"instances": 2, "router": "dynamo-kv", "router_params": {"overlap_weight": 2}}
    # the reference (fcfs at its defaults) runs on the same fleet: fcfs against itself is 1
    assert [r["tail"] for r in payload["front"] if r["policy"] == "fcfs" and not r["params"]] == [1.0]
    # the default-fairway figures are a 2-instance fleet's: tune on one engine gives others
    single = tmp_path / "single"
    assert main(["tune", "--trace", WINDOW, "--max-requests", "120", "--policies", "fcfs,lpm", "--trials", "2",
                 "--folds", "2", "--targets", "p50<=100s", "--out", str(single), "--format", "json"]) == 0
    alone = json.loads((single / "tune.json").read_text())
    assert alone["fleet"] is None
    assert alone["default_fairway"] != payload["default_fairway"]
    capsys.readouterr()
    # a changed fleet makes the study stale, named
    assert tune(tmp_path, "--instances", "3", "--router", "dynamo-kv", "--router-param", "overlap_weight=2") == 2
    err = capsys.readouterr().err
    assert "fleet: was" in err and '"instances": 2' in err and '"instances": 3' in err
