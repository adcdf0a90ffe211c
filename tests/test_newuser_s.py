"""fairsim tune as a new user reads docs/sweeps.md: defects found and fixed (helper S)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from fairsim.cli import main
from fairsim.policies.registry import policy_names

pytest.importorskip("optuna")

ROOT = Path(__file__).resolve().parents[1]
WINDOW = ROOT / "fairsim" / "traces" / "data" / "conversation_window.jsonl"


def test_tune_policies_all_searches_the_generic_klpm(tmp_path, capsys):
    # --policies all (tune's default) must search klpm's k (1-64): klpm4/klpm8 fix it. compare's
    # all leaves the generic klpm out as klpm4's twin; tune's left the only searchable k-LPM out.
    assert len(policy_names()) == 27
    assert main(["tune", "--trace", str(WINDOW), "--policies", "all", "--trials", "26",
                 "--out", str(tmp_path / "t")]) == 2
    assert "--trials 26: fewer than the 27 policies searched" in capsys.readouterr().err
    out = tmp_path / "all"
    main(["tune", "--trace", str(WINDOW), "--max-requests", "120", "--folds", "2", "--policies", "all",
          "--trials", "27", "--out", str(out)])
    assert json.loads((out / "tune.json").read_text())["policies"] == policy_names()
    rows = pd.read_parquet(out / "trials.parquet")
    assert json.loads(rows.loc[rows["policy"] == "klpm", "params"].iloc[0]) == {"k": 4}


def test_compare_policies_all_runs_a_policy_config_whose_policy_all_leaves_out(tmp_path, capsys):
    # compare --policies all leaves out the generic klpm (which tune searches and may choose): the
    # file's policy is added to all as to a list, not refused ("not among those run") or, with no
    # parameters, silently not run.
    trace = ["--trace", str(WINDOW), "--max-requests", "60", "--format", "json"]
    for params, k in (({"k": 9}, 9), ({}, 4)):
        config = tmp_path / "klpm.json"
        config.write_text(json.dumps({"policy": "klpm", "params": params}))
        assert main(["compare", *trace, "--policies", "all", "--policy-config", str(config)]) == 0
        rows = json.loads(capsys.readouterr().out)
        assert list(rows) == [*policy_names(include_generic=False), "klpm"]
    assert main(["compare", *trace, "--policies", "fcfs,klpm", "--policy-config", str(config)]) == 0
    assert list(json.loads(capsys.readouterr().out)) == ["fcfs", "klpm"]


def test_run_policy_fairway_given_with_a_policy_config_naming_another_is_refused(tmp_path, capsys):
    # run's --policy defaulted to fairway in the parser, so a --policy fairway typed beside a file
    # naming lpm gave way to the file without a word; accept refused it. Now both refuse it.
    config = tmp_path / "lpm.json"
    config.write_text(json.dumps({"policy": "lpm", "params": {"sglang_dedup": True}}))
    trace = ["--trace", str(WINDOW), "--max-requests", "30", "--format", "json"]
    assert main(["run", *trace, "--policy", "fairway", "--policy-config", str(config)]) == 2
    assert ("--policy fairway: --policy-config " + str(config) + " names policy 'lpm'; give one of them"
            in capsys.readouterr().err)
    assert main(["run", *trace, "--policy-config", str(config)]) == 0
    assert list(json.loads(capsys.readouterr().out)) == ["lpm"]
    assert main(["run", *trace]) == 0  # no --policy, no file: fairway, as before
    assert list(json.loads(capsys.readouterr().out)) == ["fairway"]
