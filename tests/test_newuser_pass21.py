"""What the twenty-first session's new-user passes found (fleets, the docs' examples, own
policies), each checked from the command line as a user meets it."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from fairsim.cli import main

WINDOW = Path(__file__).resolve().parents[1] / "fairsim" / "traces" / "data" / "conversation_window.jsonl"


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("mode_args", [
    # Was: 7 in the table, summary.json and the steps table, 13 in the requests table: a decode
    # step that preempted every running request scheduled nothing, and its count was dropped.
    ("--mode", "disaggregated", "--prefill-instances", "2", "--kv-link-gbps", "0.1"),
    ("--mode", "disaggregated", "--kv-link-gbps", "0.00105"),
])
def test_every_preemption_is_counted_in_the_steps_and_the_summary(tmp_path, capsys, mode_args):
    code, out, _ = run_cli(capsys, "run", "--trace", WINDOW, "--max-requests", "200", "--policy", "fcfs",
                           *mode_args, "--out", tmp_path, "--format", "json")
    assert code == 0
    requests = pd.read_parquet(tmp_path / "requests-fcfs.parquet")
    steps = pd.read_parquet(tmp_path / "steps-fcfs.parquet")
    total = int(requests["preemptions"].sum())
    assert total > 0
    assert int(steps["preemptions"].sum()) == total
    assert json.loads(out)["fcfs"]["preemptions"] == total
    assert json.loads((tmp_path / "summary.json").read_text())["fcfs"]["preemptions"] == total
