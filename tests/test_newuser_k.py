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


def _with_stdout_closed(tmp_path, last_header, *argv):
    """Run ``python -m fairsim ARGV`` whose stdout's reader leaves after the header lines (up to
    the line starting ``last_header``, the last one printed before the work), as ``| head -3``
    does, before the results print. (Leaving at an earlier header line would race the next one:
    a pipe closed before it makes that line fail, with nothing computed yet.)"""
    import subprocess
    import sys
    from pathlib import Path

    trace = str(Path(TRACE).resolve())
    proc = subprocess.Popen([sys.executable, "-m", "fairsim", *[trace if a == "TRACE" else str(a) for a in argv]],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path, text=True)
    for line in proc.stdout:
        if line.startswith(last_header):
            break
    proc.stdout.close()  # the reader leaves: the next write to stdout raises BrokenPipeError
    err = proc.stderr.read()
    proc.wait(timeout=300)
    return proc.returncode, err


def test_compare_into_a_closed_pipe_still_writes_summary_run_json_and_plots(tmp_path):
    # Was: `fairsim compare --out o --plots p | head -1` wrote the tables, then the table's print
    # failed and summary.json, run.json and every figure were lost (exit 141).
    done = _with_stdout_closed(tmp_path, "replay:", "compare", "--trace", "TRACE", "--policies", "fcfs,fairway",
                               "--time-scale", "8", "--out", "o", "--plots", "p")
    code, err = done
    assert code == 141 and "Traceback" not in err
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert list(summary) == ["fcfs", "fairway"]
    assert json.loads((tmp_path / "o" / "run.json").read_text())["policies"] == ["fcfs", "fairway"]
    assert sorted(p.name for p in (tmp_path / "p").iterdir()) == ["queue_kv.png", "ttft_cdf.png",
                                                                  "ttft_vs_arrival.png"]
    import pandas as pd
    ttft = pd.read_parquet(tmp_path / "o" / "requests-fairway.parquet")["ttft_s"]
    assert summary["fairway"]["requests"] == len(ttft) == 1407
    assert summary["fairway"]["ttft_max_s"] == ttft.max()


def test_accept_into_a_closed_pipe_still_writes_accept_json_and_plots(tmp_path):
    # Was: `fairsim accept ... --out o | head -1` kept the tables but not accept.json (nor --plots).
    done = _with_stdout_closed(tmp_path, "trace ", "accept", "TRACE", "--policy", "fairway", "--target-load", "0.9",
                               "--out", "o", "--plots", "p")
    code, err = done
    assert code == 141 and "Traceback" not in err
    payload = json.loads((tmp_path / "o" / "accept.json").read_text())
    assert payload["partial"] is False and payload["pass"] is True
    assert [w["name"] for w in payload["windows"]] == ["calm", "burst", "spike"]
    assert (tmp_path / "p" / "windows.png").is_file()


def test_a_sweep_whose_stdout_reader_left_still_writes_its_summary(tmp_path):
    # Was: `fairsim sweep spec.toml | head -1`: the "computed: ..." line raised BrokenPipeError
    # after every run finished, so summary.parquet/.csv were never written (or, in a folder of an
    # earlier sweep, stayed the old one, naming other run ids).
    from pathlib import Path

    import pandas as pd

    from fairsim.sweep.command import run_sweep

    lines = []

    def log(line):  # the first line reaches the reader, which then leaves
        if lines:
            raise BrokenPipeError(32, "Broken pipe")
        lines.append(line)

    spec = {"traces": [{"path": str(Path(TRACE).resolve()), "max_requests": 60}], "policies": ["fcfs", "lpm"]}
    with pytest.raises(BrokenPipeError):
        run_sweep(spec, tmp_path / "s", workers=1, progress=False, log=log)
    assert lines == ["sweep: 2 runs, 0 already done, 2 to run (local)"]
    summary = pd.read_parquet(tmp_path / "s" / "summary.parquet")
    assert list(summary["policy"]) == ["fcfs", "lpm"] and list(summary["status"]) == ["ok", "ok"]
    assert (summary["requests"] == 60).all()
    assert len(pd.read_csv(tmp_path / "s" / "summary.csv")) == 2
