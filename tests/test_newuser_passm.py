"""What new-user pass M found in `fairsim tune` and `fairsim sweep`, each checked by hand."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from fairsim.cli import main

ROOT = Path(__file__).resolve().parents[1]
WINDOW = ROOT / "fairsim" / "traces" / "data" / "conversation_window.jsonl"

POLICY = '''
from fairsim.policies.space import IntRange


class Mine:
    search_space = {"limit": IntRange(1, 8)}

    def __init__(self, limit: int = 2):
        self.limit = limit

    def order(self, waiting, now):
        return sorted(waiting, key=lambda r: r.arrival_time{reverse})
'''


def test_tune_refuses_a_study_whose_own_policy_class_was_edited(tmp_path, capsys, monkeypatch):
    # Was: the edited module's trials were added to the study made with the old code (the
    # fingerprint held fairsim's source, not the class's), so the front mixed two policies.
    pytest.importorskip("optuna")
    module = tmp_path / "passm_policy.py"
    module.write_text(POLICY.replace("{reverse}", ""))
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "tune"
    args = ["tune", "--trace", str(WINDOW), "--max-requests", "120", "--policies", "fairway,passm_policy:Mine",
            "--targets", "p50<=2xfcfs", "--folds", "2", "--out", str(out)]
    assert main([*args, "--trials", "2"]) == 0
    capsys.readouterr()
    assert main([*args, "--trials", "3"]) == 0  # unchanged: the study continues
    capsys.readouterr()
    module.write_text(POLICY.replace("{reverse}", ", reverse=True"))
    assert main([*args, "--trials", "4"]) == 2
    err = capsys.readouterr().err
    assert "other settings (policy_source_sha256: was {\"passm_policy:Mine\": " in err
    assert "delete" in err and "study.db" in err
    assert json.loads((out / "tune.json").read_text())["trials_in_study"] == 3  # nothing lost
    # A class used only as a target's reference counts too.
    out2 = tmp_path / "tune2"
    ref = ["tune", "--trace", str(WINDOW), "--max-requests", "120", "--policies", "fcfs", "--trials", "1",
           "--targets", "p50<=9xpassm_policy:Mine", "--folds", "2", "--out", str(out2)]
    assert main(ref) == 0
    capsys.readouterr()
    module.write_text(POLICY.replace("{reverse}", ""))
    assert main(ref) == 2
    assert "policy_source_sha256" in capsys.readouterr().err
    sys.modules.pop("passm_policy", None)


def test_sweep_table_shows_a_parameter_set_on_some_runs_and_left_at_its_default_on_others(tmp_path, capsys):
    # Was: the column was hidden (its missing values were not counted as a value), so the two
    # fairway rows printed the same but for their hashes.
    spec = tmp_path / "s.toml"
    spec.write_text('[[scenarios]]\nname = "rag"\nparams = { num_requests = 40 }\n'
                    '[[policies]]\nname = "fairway"\n'
                    '[[policies]]\nname = "fairway"\nparams = { fast_weight = 8 }\n')
    assert main(["sweep", str(spec), "--out", str(tmp_path / "o"), "--workers", "1", "--no-progress"]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:1] == ["run_id"])
    assert lines[header].split()[:3] == ["run_id", "policy", "policy.fast_weight"]
    assert [line.split()[1:3] for line in lines[header + 1:header + 3]] == [["fairway", "-"], ["fairway", "8"]]


@pytest.mark.parametrize("engine, message", [
    ("block_size = [256, 256]", "engine.block_size: [256, 256]: a value is listed twice"),
    ("instances = 2\nrouter = \"dynamo-kv\"\nrouter_params = [{dynamo-kv = {overlap_weight = 1}}, "
     "{dynamo-kv = {overlap_weight = 1}}]",
     'engine.router_params: [{"dynamo-kv": {"overlap_weight": 1}}, {"dynamo-kv": {"overlap_weight": 1}}]: '
     "a value is listed twice"),
])
def test_sweep_refuses_an_engine_value_listed_twice(tmp_path, capsys, engine, message):
    # Was: accepted, and the repeated point silently run once ("1 run"), where a repeated seed,
    # policy grid value or trace time_scale is refused.
    spec = tmp_path / "s.toml"
    spec.write_text('policies = ["fcfs"]\n[[scenarios]]\nname = "rag"\nparams = { num_requests = 40 }\n'
                    f"[engine]\n{engine}\n")
    assert main(["sweep", str(spec), "--out", str(tmp_path / "o"), "--dry-run"]) == 2
    assert capsys.readouterr().err == f"fairsim: error: {spec}: {message}\n"
    spec.write_text(spec.read_text().replace("[256, 256]", "[256, 512]").replace("overlap_weight = 1}}]",
                                                                                  "overlap_weight = 4}}]"))
    assert main(["sweep", str(spec), "--out", str(tmp_path / "o"), "--dry-run"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"2 runs; 0 done in {tmp_path / 'o'}"


@pytest.mark.parametrize("content, why", [(b"not a database at all\n" * 10, "file is not a database"),
                                          (b"SQLite format 3\x00" + b"\x10\x00" + b"\x00" * 82, None)])
def test_tune_names_a_study_db_that_is_not_a_database(tmp_path, capsys, content, why):
    # Was: "fairsim: internal error (a bug in fairsim, please report it): DatabaseError: ...", exit 1.
    pytest.importorskip("optuna")
    out = tmp_path / "tune"
    out.mkdir()
    (out / "study.db").write_bytes(content)
    assert main(["tune", "--trace", str(WINDOW), "--max-requests", "120", "--policies", "fcfs", "--trials", "1",
                 "--folds", "2", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"fairsim: error: --out {out}: {out / 'study.db'} cannot be read as a study (")
    assert why is None or f"({why})" in err
    assert err.endswith(f"give another --out, or delete {out / 'study.db'} to start a new study\n")
    assert (out / "study.db").read_bytes() == content  # left as it was


def test_tune_leaves_no_stale_policy_config_of_an_earlier_study(tmp_path, capsys):
    # Was: with study.db deleted and the targets made unreachable, the rerun wrote
    # closest-policy-config.json beside the earlier study's policy-config.json, which a team
    # would deploy; and the other way round.
    pytest.importorskip("optuna")
    out = tmp_path / "tune"
    base = ["tune", "--trace", str(WINDOW), "--max-requests", "120", "--policies", "fcfs", "--trials", "1",
            "--folds", "2", "--out", str(out)]
    assert main([*base, "--targets", "p50<=2xfcfs"]) == 0
    assert json.loads((out / "policy-config.json").read_text()) == {"policy": "fcfs", "params": {}}
    (out / "study.db").unlink()
    assert main([*base, "--targets", "p50<=0.5xfcfs"]) == 2
    assert not (out / "policy-config.json").exists()
    assert json.loads((out / "closest-policy-config.json").read_text()) == {"policy": "fcfs", "params": {}}
    assert json.loads((out / "tune.json").read_text())["policy_config"] == str(out / "closest-policy-config.json")
    (out / "study.db").unlink()
    assert main([*base, "--targets", "p50<=2xfcfs"]) == 0
    assert (out / "policy-config.json").exists() and not (out / "closest-policy-config.json").exists()
    capsys.readouterr()


def test_a_yaml_spec_with_a_key_given_twice_is_refused_naming_the_line(tmp_path, capsys):
    # Was: PyYAML kept the last value, so 'seeds: [0, 1]' then 'seeds: [2]' ran seed 2 only,
    # without a word (the same spec in TOML is refused).
    pytest.importorskip("yaml")
    spec = tmp_path / "s.yaml"
    spec.write_text("seeds: [0, 1]\npolicies: [fcfs]\nseeds: [2]\nscenarios:\n  - name: rag\n"
                    "    params: {num_requests: 40}\n")
    assert main(["sweep", str(spec), "--out", str(tmp_path / "o"), "--dry-run"]) == 2
    assert capsys.readouterr().err == (f"fairsim: error: {spec}:3: not valid YAML: key 'seeds' given twice "
                                       "(first at line 1)\n")
    spec.write_text("policies: [fcfs]\nscenarios:\n  - name: rag\n    params:\n      num_requests: 40\n"
                    "      num_requests: 50\n")
    assert main(["sweep", str(spec), "--out", str(tmp_path / "o"), "--dry-run"]) == 2
    assert "s.yaml:6: not valid YAML: key 'num_requests' given twice (first at line 5)" in capsys.readouterr().err
    spec.write_text("seeds: [0, 1]\npolicies: [fcfs]\nscenarios:\n  - name: rag\n    params: {num_requests: 40}\n")
    assert main(["sweep", str(spec), "--out", str(tmp_path / "o"), "--dry-run"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"2 runs; 0 done in {tmp_path / 'o'}"


def test_tune_refuses_fewer_trials_than_policies(tmp_path, capsys):
    # Was: --policies all --trials 3 ran fcfs, lpm and klpm4 at their defaults only, then
    # reported "no trial of 3 meets the targets" (exit 2, closest-policy-config.json) while
    # its own table showed default fairway and the best untuned policy meeting them.
    pytest.importorskip("optuna")
    base = ["tune", "--trace", str(WINDOW), "--max-requests", "120", "--policies", "fcfs,lpm,fairway",
            "--folds", "2", "--out", str(tmp_path / "o")]
    assert main([*base, "--trials", "2"]) == 2
    assert capsys.readouterr().err == ("fairsim: error: --trials 2: fewer than the 3 policies searched, each of "
                                       "which runs first at its defaults; give --trials 3 or more, or fewer "
                                       "--policies\n")
    assert not (tmp_path / "o" / "study.db").exists()
    assert main([*base, "--trials", "3", "--format", "json"]) in (0, 2)
    assert sorted(json.loads(capsys.readouterr().out)["policies"]) == ["fairway", "fcfs", "lpm"]
    assert sorted(pd_read(tmp_path / "o" / "trials.parquet")["policy"]) == ["fairway", "fcfs", "lpm"]


def pd_read(path):
    import pandas as pd

    return pd.read_parquet(path)
