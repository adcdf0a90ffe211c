"""Regressions found by a second new-user pass (each failed before its fix)."""

from __future__ import annotations

import json

import pytest

from fairsim.cli import main
from fairsim.metrics import parse_slo


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_colocated_json_has_null_not_nan(capsys):
    # The default input has output_length 1: no request decodes twice, so TPOT/ITL do not exist.
    code, out, _ = run_cli(capsys, "run", "--mode", "colocated", "--max-requests", "20", "--format", "json")
    assert code == 0
    row = json.loads(out, parse_constant=lambda c: pytest.fail(f"bare {c} in JSON"))["fairway"]
    assert row["tpot_p50_s"] is None and row["itl_p99_s"] is None
    code, out, _ = run_cli(capsys, "run", "--mode", "colocated", "--max-requests", "20")
    assert code == 0 and "nan" not in out and "n/a" in out


@pytest.mark.parametrize("text, message", [
    ("ttft=1,ttft=2", "ttft given twice"),
    ("", "expected ttft=SECONDS,tpot=SECONDS"),
    ("  ", "expected ttft=SECONDS,tpot=SECONDS"),
])
def test_slo_refuses_repeats_and_empty(text, message):
    with pytest.raises(ValueError, match=message):
        parse_slo(text)
    assert parse_slo(None) == {} and parse_slo("ttft=2,tpot=0.1") == {"ttft": 2.0, "tpot": 0.1}


@pytest.mark.parametrize("argv, message", [
    (["--max-num-seqs", "0"], "--max-num-seqs 0: need >= 1"),
    (["--budget", "0"], "--budget 0: need >= 1"),
])
def test_engine_errors_name_the_option(capsys, argv, message):
    code, _, err = run_cli(capsys, "run", "--mode", "colocated", *argv)
    assert code == 2 and message in err


def test_sweep_refuses_scenario_releases_beyond_1e9(tmp_path, capsys):
    spec = tmp_path / "s.toml"
    spec.write_text('policies = ["fcfs"]\n[[scenarios]]\nname = "agent"\n'
                    'params = { think_median_s = 1e300, think_max_s = 1e300, num_sessions = 3 }\n')
    code, _, err = run_cli(capsys, "sweep", str(spec), "--dry-run")
    assert code == 2 and "scenarios[0] (seed 0): scenario 'agent'" in err and "beyond 1e+09 s" in err


def test_bench_tiles_the_part_kept(capsys):
    from fairsim.bench import MAX_TILED_REQUESTS

    code, out, _ = run_cli(capsys, "bench", "--policies", "fcfs", "--max-requests", "40", "--tile", "3",
                           "--format", "json")
    assert code == 0 and json.loads(out)["fcfs"]["requests"] == 120  # 40 kept, then x3
    code, _, err = run_cli(capsys, "bench", "--policies", "fcfs", "--max-requests", "50", "--tile",
                           str(MAX_TILED_REQUESTS))
    assert code == 2 and "above 10,000,000 requests" in err
