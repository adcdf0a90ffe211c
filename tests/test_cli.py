"""The fairsim command: JSON keys, Parquet output, errors naming file, line and field."""

import json

import pandas as pd
import pytest

from fairsim.cli import main, parse_params


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


class TestCompare:
    """compare on the embedded input."""

    def test_json_keys_and_shape(self, capsys):
        code, out, err = run_cli(capsys, "compare", "--policies", "fcfs,lpm,fairway",
                                 "--max-requests", "200", "--format", "json")
        assert code == 0
        data = json.loads(out)
        assert list(data) == ["fcfs", "lpm", "fairway"]
        for row in data.values():
            for key in ("requests", "ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "ttft_max_s",
                        "hit_rate", "sim_time_s", "wall_time_s"):
                assert key in row
            assert row["requests"] == 200
            assert row["ttft_p50_s"] <= row["ttft_p90_s"] <= row["ttft_p99_s"] <= row["ttft_max_s"]
        assert "offered load" in err

    def test_out_writes_parquet(self, capsys, tmp_path):
        code, _, _ = run_cli(capsys, "run", "--policy", "lpm", "--max-requests", "50",
                             "--out", str(tmp_path))
        assert code == 0
        req = pd.read_parquet(tmp_path / "requests-lpm.parquet")
        steps = pd.read_parquet(tmp_path / "steps-lpm.parquet")
        assert len(req) == 50 and steps["tokens"].max() <= 2048
        assert {"arrival_s", "prompt_tokens", "cached_tokens", "first_scheduled_s", "ttft_s",
                "finish_s"} <= set(req.columns)
        assert {"start_s", "tokens", "requests", "waiting", "kv_blocks_used", "evictions"} <= set(steps.columns)

    def test_time_scale_lowers_load(self, capsys):
        def p99(scale):
            _, out, _ = run_cli(capsys, "run", "--policy", "fcfs", "--time-scale", str(scale),
                                "--max-requests", "300", "--format", "json")
            return json.loads(out)["fcfs"]["ttft_p99_s"]

        assert p99(0.5) > p99(4.0)


class TestErrors:
    """Bad input exits 2 with a message naming the problem."""

    def test_bad_trace_line(self, capsys, tmp_path):
        path = tmp_path / "bad.jsonl"
        path.write_text('{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1, 2]}\n'
                        '{"timestamp": 5, "input_length": -4, "output_length": 1, "hash_ids": []}\n')
        code, _, err = run_cli(capsys, "run", "--trace", str(path))
        assert code == 2
        assert f"{path}:2: field 'input_length': negative" in err

    def test_skip_bad(self, capsys, tmp_path):
        path = tmp_path / "bad.jsonl"
        path.write_text('{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1, 2]}\n'
                        'not json\n')
        code, out, err = run_cli(capsys, "run", "--trace", str(path), "--skip-bad", "--format", "json")
        assert code == 0 and json.loads(out)["fairway"]["requests"] == 1
        assert "skipped 1 bad record of" in err

    def test_unknown_policy(self, capsys):
        code, _, err = run_cli(capsys, "run", "--policy", "nope")
        assert code == 2 and "unknown policy 'nope'; known policies: fcfs" in err

    def test_bad_param(self, capsys):
        code, _, err = run_cli(capsys, "run", "--param", "fast_weight=-1")
        assert code == 2 and "weights must be > 0" in err


def test_parse_params():
    assert parse_params(["fast_weight=8", "fair_lane=false", "wait_mode=absolute"]) == {
        "fast_weight": 8, "fair_lane": False, "wait_mode": "absolute"}
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_params(["oops"])


def test_params_scoped_to_one_policy():
    from fairsim.cli import params_for

    params = parse_params(["fairway.fast_weight=8", "slo_floor=2"])
    assert params_for("fairway", params) == {"fast_weight": 8, "slo_floor": 2}
    assert params_for("fcfs", {"fairway.fast_weight": 8}) == {}


def test_compare_all_with_scoped_param(capsys):
    code, out, _ = run_cli(capsys, "compare", "--policies", "all", "--param", "fairway.fast_weight=8",
                           "--max-requests", "60", "--format", "json")
    assert code == 0
    names = list(json.loads(out))
    assert "klpm4" in names and "klpm" not in names and "fairway" in names


class TestReviewFindings:
    """Inputs a reviewer used to break the CLI: each must be a clear error, exit 2, no traceback."""

    @pytest.mark.parametrize("argv, message", [
        (["run", "--time-scale", "inf"], "--time-scale inf: need a finite factor > 0"),
        (["run", "--param", "fair_lane=False"], "fair_lane='False': need true or false"),
        (["run", "--policy", "klpm4", "--param", "k=8"], "'klpm4' fixes k=4"),
        (["run", "--param", "nosuch=1"], "accepted: fast_weight, fair_weight"),
        (["compare", "--policies", "fcfs,lpm", "--param", "nope.k=2"], "policy 'nope' is not among"),
        (["run", "--seed", "-1"], "--seed -1: need an integer >= 0"),
        (["run", "--max-requests", "5", "--out", "/dev/null/x"], "fairsim: error:"),
    ])
    def test_clear_error(self, capsys, argv, message):
        code, _, err = run_cli(capsys, *argv)
        assert code == 2 and message in err and "Traceback" not in err

    def test_bench_bad_trace_reaches_the_user(self, capsys, tmp_path):
        # The error crosses the spawned worker's process boundary (it must pickle).
        path = tmp_path / "bad.jsonl"
        path.write_text('{"timestamp": 0, "input_length": -5, "output_length": 1, "hash_ids": []}\n')
        code, _, err = run_cli(capsys, "bench", "--policies", "fcfs", "--trace", str(path))
        assert code == 2 and f"{path}:1: field 'input_length': negative" in err

    def test_run_json_records_the_inputs(self, capsys, tmp_path):
        code, _, _ = run_cli(capsys, "run", "--policy", "fcfs", "--max-requests", "30",
                             "--time-scale", "2", "--out", str(tmp_path))
        info = json.loads((tmp_path / "run.json").read_text())
        assert code == 0 and info["time_scale"] == 2.0 and info["policies"] == ["fcfs"]


def test_a_parameter_value_the_policy_refuses_names_its_param(capsys):
    from fairsim.cli import main

    assert main(["run", "--policy", "fairway", "--param", "fast_weight=-1", "--max-requests", "5"]) == 2
    err = capsys.readouterr().err
    assert "fairsim: error: --param (fast_weight=-1) of policy 'fairway': Fairway weights must be > 0" in err
