"""compare's ratio columns (fairsim/ratios.py): each policy's TTFT p50/p99/max over a baseline's."""

import json
import math

import pytest

from fairsim.cli import main
from fairsim.ratios import add_ratios, ratio, with_baseline


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


ROWS = {"fcfs": {"ttft_p50_s": 2.0, "ttft_p99_s": 10.0, "ttft_max_s": 20.0},
        "suf": {"ttft_p50_s": 0.5, "ttft_p99_s": 30.0, "ttft_max_s": 122.0}}


class TestAddRatios:
    def test_hand_computed(self):
        out = add_ratios(ROWS, "fcfs")
        assert out["suf"]["ttft_p50_ratio"] == 0.25
        assert out["suf"]["ttft_p99_ratio"] == 3.0
        assert out["suf"]["ttft_max_ratio"] == 6.1
        assert [out["fcfs"][k] for k in ("ttft_p50_ratio", "ttft_p99_ratio", "ttft_max_ratio")] == [1.0] * 3
        assert out["suf"]["ratio_baseline"] == "fcfs"
        assert "ttft_p50_ratio" not in ROWS["suf"]  # the given summaries are not changed

    def test_other_baseline(self):
        assert add_ratios(ROWS, "suf")["fcfs"]["ttft_p50_ratio"] == 4.0

    def test_undefined_ratios_are_none(self):
        assert ratio(1.0, 0.0) is None and ratio(None, 1.0) is None and ratio(1.0, math.nan) is None
        assert ratio(0.0, 2.0) == 0.0

    def test_no_baseline_row_no_ratios(self):
        assert add_ratios(ROWS, "lpm") is ROWS  # not finished (Ctrl-C) or not run
        assert add_ratios(ROWS, "none") is ROWS


class TestWithBaseline:
    def test_among_policies_unchanged(self):
        assert with_baseline(["lpm", "fcfs"], "fcfs") == (["lpm", "fcfs"], None)

    def test_missing_baseline_runs_first(self):
        names, note = with_baseline(["lpm", "suf"], "fcfs")
        assert names == ["fcfs", "lpm", "suf"] and "running it too, first" in note

    def test_none_runs_nothing_more(self):
        assert with_baseline(["lpm"], "none") == (["lpm"], None)

    def test_unknown_baseline_names_the_option(self):
        with pytest.raises(ValueError, match=r"--baseline fcsf: unknown policy"):
            with_baseline(["lpm"], "fcsf")


class TestCompareCommand:
    def test_json_ratios_are_the_figures_over_fcfs(self, capsys, tmp_path):
        code, out, err = run_cli(capsys, "compare", "--policies", "lpm,suf", "--max-requests", "150",
                                 "--format", "json", "--out", str(tmp_path))
        assert code == 0
        assert "baseline 'fcfs' (--baseline) is not among --policies: running it too" in err
        data = json.loads(out)
        assert list(data) == ["fcfs", "lpm", "suf"]
        for row in data.values():
            for fig in ("p50", "p99", "max"):
                assert row[f"ttft_{fig}_ratio"] == row[f"ttft_{fig}_s"] / data["fcfs"][f"ttft_{fig}_s"]
        assert json.loads((tmp_path / "summary.json").read_text()) == data

    def test_table_shows_ratio_columns(self, capsys):
        code, out, _ = run_cli(capsys, "compare", "--policies", "fcfs,lpm", "--max-requests", "150",
                               "--baseline", "lpm")
        assert code == 0
        lines = out.splitlines()
        header = next(line for line in lines if line.startswith("policy"))
        assert header.split()[10:14] == ["p50", "x", "p99", "x"]  # after "max s"
        lpm = next(line for line in lines if line.startswith("lpm "))
        assert lpm.split()[6:9] == ["1.00x", "1.00x", "1.00x"]
        assert lines[-1] == "p50 x, p99 x, max x: TTFT over lpm's (--baseline)"

    def test_baseline_none(self, capsys):
        code, out, err = run_cli(capsys, "compare", "--policies", "lpm", "--max-requests", "50",
                                 "--format", "json", "--baseline", "none")
        assert code == 0 and list(json.loads(out)) == ["lpm"]
        assert "ttft_p50_ratio" not in json.loads(out)["lpm"]

    def test_unknown_baseline_exits_2(self, capsys):
        code, _, err = run_cli(capsys, "compare", "--policies", "lpm", "--baseline", "fcsf")
        assert code == 2 and "--baseline fcsf: unknown policy" in err

    def test_added_baseline_takes_only_its_own_params(self, capsys):
        # The unscoped --param is for the policies named; fcfs (added) takes none and is not given it.
        code, out, err = run_cli(capsys, "compare", "--policies", "sjf-aging", "--param", "aging_tokens_per_s=10",
                                 "--max-requests", "60", "--format", "json")
        assert code == 0, err
        assert list(json.loads(out)) == ["fcfs", "sjf-aging"]
        code, _, err = run_cli(capsys, "compare", "--policies", "sjf-aging", "--param", "fcfs.k=1",
                               "--max-requests", "60")
        assert code == 2 and "'fcfs' takes no parameters" in err
