"""What newuser-k's pass found, each checked by hand."""

from __future__ import annotations

import json

import pytest

from fairsim.cli import main
from fairsim.policy_config import read_policy_config

TRACE = "fairsim/traces/data/conversation_window.jsonl"


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("command", [["run", "--trace", TRACE], ["compare", "--trace", TRACE],
                                     ["accept", TRACE]])
def test_an_empty_policy_config_path_is_named_as_empty(capsys, command):
    # Was: "fairsim: error: --policy-config : cannot read the file: Is a directory" (Path("") is ".").
    with pytest.raises(SystemExit) as stop:  # an argparse usage error
        main([*command, "--policy-config", ""])
    out, err = capsys.readouterr()
    assert stop.value.code == 2
    assert "argument --policy-config: empty path ''" in err
    assert "Is a directory" not in err and out == ""
    with pytest.raises(ValueError, match=r"--policy-config '': empty path"):
        read_policy_config("")


def test_a_policy_config_key_given_twice_is_refused(tmp_path, capsys):
    # Was: {"policy": "fairway", "policy": "lpm"} ran LPM without a word (json keeps the last);
    # a parameter given twice ran with its last value. Profiles already refused repeated keys.
    path = tmp_path / "pc.json"
    path.write_text('{"policy": "fairway", "policy": "lpm", "params": {}}')
    code, out, err = run_cli(capsys, "run", "--trace", TRACE, "--policy-config", path)
    assert code == 2 and out == ""
    assert err.strip() == (f"fairsim: error: --policy-config {path}: key 'policy' given twice in one "
                           f"object (JSON keeps the last without a word); give it once")
    path.write_text('{"policy": "fairway", "params": {"fast_weight": 2, "fast_weight": 8}}')
    with pytest.raises(ValueError, match="key 'fast_weight' given twice"):
        read_policy_config(path)
    # The file tune writes still reads back as it was.
    path.write_text(json.dumps({"policy": "fairway", "params": {"fast_weight": 2}}))
    assert read_policy_config(path) == ("fairway", {"fast_weight": 2})


@pytest.mark.parametrize("command", [["run"], ["analyze"], ["accept"], ["bench"], ["tune"]])
def test_an_empty_profile_is_named_as_empty(capsys, command):
    # Was: "profile '' is a folder, not a profile JSON file; shipped: ..." (Path("") is ".").
    with pytest.raises(SystemExit) as stop:
        main([*command, "--profile", ""])
    out, err = capsys.readouterr()
    assert stop.value.code == 2 and out == ""
    assert "argument --profile: empty name ''" in err
    assert "is a folder" not in err
