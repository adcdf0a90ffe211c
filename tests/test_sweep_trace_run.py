"""A sweep's trace-file run is `fairsim run` with the same options: same KV capacity, same
shaping (window, max_requests, cut sessions), same readers (files and folders), and what passes
validation runs. Regressions of the new-user defects 2, 6 and 13."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from fairsim.cli import main
from fairsim.costmodel import load_profile
from fairsim.errors import SweepSpecError
from fairsim.sweep import RUNS_DIR, expand, run_sweep
from fairsim.sweep.runs import execute_safely

FORMATS = Path(__file__).resolve().parent / "data" / "formats"


def quiet(_: str) -> None:
    return None


def run_table(tmp_path: Path, options: list[str], policy: str = "fcfs") -> tuple[pd.DataFrame, dict]:
    """The request table and summary row of ``fairsim run OPTIONS --policy POLICY --out``."""
    out = tmp_path / f"run-{len(list(tmp_path.glob('run-*')))}"
    assert main(["run", *options, "--policy", policy, "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())[policy]
    return pd.read_parquet(out / f"requests-{policy}.parquet"), summary


def sweep_tables(tmp_path: Path, spec: dict) -> tuple[pd.DataFrame, list[pd.DataFrame]]:
    out = tmp_path / "sweep"
    summary = run_sweep(spec, out, workers=1, progress=False, log=quiet)
    assert (summary["status"] == "ok").all(), summary["error"].tolist()
    return summary, [pd.read_parquet(out / RUNS_DIR / f"{rid}.parquet") for rid in summary["run_id"]]


# (trace entry, engine point, the `fairsim run` options that say the same)
PARITY = {
    "azure, defaults": ({"path": str(FORMATS / "azure.csv")}, {}, ["--trace", str(FORMATS / "azure.csv")]),
    "bailian cut session": ({"path": str(FORMATS / "bailian.jsonl"), "window": [5]}, {},
                            ["--trace", str(FORMATS / "bailian.jsonl"), "--window-start", "5"]),
    "bailian colocated": ({"path": str(FORMATS / "bailian.jsonl"), "window": [5]}, {"mode": "colocated"},
                          ["--trace", str(FORMATS / "bailian.jsonl"), "--window-start", "5",
                           "--mode", "colocated"]),
    "claude code folder": ({"path": str(FORMATS / "claude_code")}, {},
                           ["--trace", str(FORMATS / "claude_code")]),
    "ragpulse folder, 16-token blocks": ({"path": str(FORMATS / "ragpulse")}, {"block_size": 16},
                                         ["--trace", str(FORMATS / "ragpulse"), "--block-size", "16"]),
    "mooncake agentic, budget": ({"path": str(FORMATS / "mooncake_agentic.jsonl.gz"), "time_scale": 2.0,
                                  "max_requests": 3}, {"budget_tokens": 512},
                                 ["--trace", str(FORMATS / "mooncake_agentic.jsonl.gz"), "--time-scale", "2",
                                  "--max-requests", "3", "--budget", "512"]),
    "mooncake, kv_blocks": ({"path": str(FORMATS / "mooncake.jsonl")}, {"kv_blocks": 8},
                            ["--trace", str(FORMATS / "mooncake.jsonl"), "--kv-blocks", "8"]),
    "claude code, kv_fraction": ({"path": str(FORMATS / "claude_code")}, {"kv_fraction": 3.0},
                                 ["--trace", str(FORMATS / "claude_code"), "--kv-fraction", "3"]),
}


class TestSameAsRun:
    """Defect 2 (capacity) and 6 (shaping): a sweep run gives `fairsim run`'s tables."""

    @pytest.mark.parametrize("case", sorted(PARITY))
    def test_identical_request_table_and_capacity(self, case, tmp_path):
        entry, point, options = PARITY[case]
        expected, run_summary = run_table(tmp_path, options)
        summary, (got,) = sweep_tables(tmp_path, {"traces": [entry], "policies": ["fcfs"],
                                                   "engine": {k: [v] for k, v in point.items()}})
        pd.testing.assert_frame_equal(got[list(expected.columns)], expected)
        assert summary["kv_blocks"].iloc[0] == run_summary["kv_blocks"]
        assert summary["block_size"].iloc[0] == run_summary["block_size"]
        assert summary["ttft_p50_s"].iloc[0] == run_summary["ttft_p50_s"]

    def test_profile_kv_capacity_is_the_default(self, tmp_path):
        # The prior's kv_capacity: 231,014 tokens -> floor(231014 / 512) = 451 blocks of the
        # Azure reader's 512-token block (not 0.3 x reusable content, which is 0 blocks here).
        tokens = load_profile().kv_capacity_tokens
        assert tokens == 231_014
        summary, _ = sweep_tables(tmp_path, {"traces": [{"path": str(FORMATS / "azure.csv")}],
                                             "policies": ["fcfs"], "engine": {"block_size": [512, 128]}})
        assert summary["kv_blocks"].tolist() == [451, 1804]  # 231014 // 512, 231014 // 128
        assert summary["kv_tokens"].tolist() == [230_912, 230_912]

    def test_explicit_capacity_replaces_the_profile(self, tmp_path):
        summary, _ = sweep_tables(tmp_path, {"traces": [{"path": str(FORMATS / "azure.csv")}],
                                             "policies": ["fcfs"], "engine": {"kv_tokens": [6000]}})
        assert summary["kv_blocks"].tolist() == [11]  # floor(6000 / 512)


    def test_block_size_mapping_warning_as_run(self, capsys):
        # `fairsim run --block-size 48` warns that 48 and the 512-token hash block do not divide;
        # the sweep says it once, for the point it concerns (128 divides 512: no warning).
        expand({"traces": [{"path": str(FORMATS / "mooncake.jsonl")}], "policies": ["fcfs"],
                "engine": {"block_size": [128, 48]}}, "s.toml")
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and err[0].startswith(
            "fairsim: s.toml: traces[0] (time_scale=1.0, window=[0.0, None), max_requests=None), "
            "engine (block_size=48): warning: engine.block_size 48 and the trace's 512-token hash "
            "blocks: neither divides the other"), err


class TestCutSessions:
    """Defect 6: a window that cuts a session runs as in `fairsim run`, and validation sees it."""

    SPEC = {"traces": [{"path": str(FORMATS / "bailian.jsonl"), "window": [[0, 5], [5]]}],
            "policies": ["fcfs"], "engine": {"mode": ["prefill-only", "colocated"]}}

    def test_every_validated_run_runs(self, tmp_path, capsys):
        runs = expand(self.SPEC, "s.toml")
        assert len(runs) == 4
        assert [execute_safely(r)[0] for r in runs] == ["ok"] * 4
        err = capsys.readouterr().err  # the cut is reported once, with the window that cuts it
        assert ("fairsim: s.toml: traces[0] (time_scale=1.0, window=[5.0, None), max_requests=None): "
                "1 turn whose predecessor is outside the window (or dropped) is sent at its own "
                "arrival time") in err

    def test_cut_window_keeps_two_requests(self, tmp_path):
        summary, tables = sweep_tables(tmp_path, self.SPEC)
        assert summary["trace.window_start_s"].tolist() == [0, 0, 5, 5]
        # colocated rows carry TPOT and E2E; no ITL column (a sweep keeps no token gaps)
        assert "tpot_p50_s" in summary and "e2e_p50_s" in summary
        assert not [c for c in summary.columns if c.startswith("itl_")]
        # Window [5 s, end) of trace time (from the first arrival, 61.114 s; times re-based to the
        # window start): requests 161 and 162; 161's parent 159 was cut, so 161 is sent at its
        # own timestamp as in `fairsim run`.
        late = tables[2]
        assert late["request_id"].tolist() == ["161", "162"]
        assert late["after"].isna().all()
        assert late["arrival_s"].tolist() == pytest.approx([70.25 - 61.114 - 5, 71.0 - 61.114 - 5])

    def test_prompt_over_max_model_len_refused_before_running(self, tmp_path):
        # `fairsim run` refuses a prompt the model cannot take; the sweep now refuses it when
        # validating (before, it simulated it).
        limit = load_profile().max_model_len
        trace = tmp_path / "long.jsonl"
        trace.write_text(json.dumps({"timestamp": 0, "input_length": 100, "output_length": 1, "hash_ids": [0]})
                         + "\n" + json.dumps({"timestamp": 1000, "input_length": limit, "output_length": 1,
                                              "hash_ids": list(range(1, -(-limit // 512) + 1))}) + "\n")
        assert main(["run", "--trace", str(trace), "--policy", "fcfs"]) == 2
        with pytest.raises(SweepSpecError, match=r"s\.toml: traces\[0\] \(time_scale=1\.0, .*long\.jsonl:2: field 'input_length': .*; skip_long drops"):
            expand({"traces": [{"path": str(trace)}], "policies": ["fcfs"]}, "s.toml")
        expected, _ = run_table(tmp_path, ["--trace", str(trace), "--skip-long"])  # as in `run`
        summary, (got,) = sweep_tables(tmp_path, {"traces": [{"path": str(trace), "skip_long": True}],
                                                   "policies": ["fcfs"]})
        assert got["request_id"].tolist() == ["long:1"] and summary["trace.skip_long"].tolist() == [True]
        pd.testing.assert_frame_equal(got[list(expected.columns)], expected)


class TestFolders:
    """Defect 13: folders `fairsim run --trace` reads are sweep traces; ids hash every file."""

    def copy(self, tmp_path: Path, name: str) -> Path:
        return Path(shutil.copytree(FORMATS / name, tmp_path / name))

    def test_edit_any_file_of_the_folder_changes_the_id(self, tmp_path):
        folder = self.copy(tmp_path, "claude_code")
        spec = {"traces": [{"path": str(folder)}], "policies": ["fcfs"]}
        first = expand(spec)[0].run_id
        assert expand(spec)[0].run_id == first
        moved = Path(shutil.copytree(folder, tmp_path / "elsewhere" / "claude_code"))
        assert expand({"traces": [{"path": str(moved)}], "policies": ["fcfs"]})[0].run_id == first
        doc = json.loads((folder / "session_b.json").read_text())
        doc["requests"][0]["in"] += 1
        (folder / "session_b.json").write_text(json.dumps(doc))
        second = expand(spec)[0].run_id
        assert second != first
        shutil.copy(folder / "session_b.json", folder / "session_c.json")  # a new session file
        third = expand(spec)[0].run_id
        assert third not in (first, second)
        (folder / "results").mkdir()  # a subfolder (e.g. the sweep's output) is not read
        (folder / "results" / "summary.csv").write_text("run_id\n")
        assert expand(spec)[0].run_id == third

    def test_ragpulse_side_file_is_part_of_the_id(self, tmp_path):
        folder = self.copy(tmp_path, "ragpulse")
        specs = [{"traces": [{"path": str(folder)}], "policies": ["fcfs"]},
                 {"traces": [{"path": str(folder / "0_trace.jsonl"), "format": "ragpulse"}],
                  "policies": ["fcfs"]}]
        before = [expand(s)[0].run_id for s in specs]
        side = folder / "2_passages.jsonl"
        side.write_text(side.read_text() + "\n")
        after = [expand(s)[0].run_id for s in specs]
        assert before[0] != after[0] and before[1] != after[1]

    def test_folder_edited_after_planning_fails_its_run(self, tmp_path):
        folder = self.copy(tmp_path, "claude_code")
        (run,) = expand({"traces": [{"path": str(folder)}], "policies": ["fcfs"]})
        (folder / "session_a.json").write_text((folder / "session_a.json").read_text() + " ")
        status, error, _ = execute_safely(run)
        assert status == "failed"
        assert error == (f"StaleInputError: trace {folder} changed after the sweep was planned; run "
                         "the sweep again to plan it with the new content")

    def test_cli_sweep_of_a_folder(self, tmp_path, capsys):
        spec = tmp_path / "cc.toml"
        spec.write_text(f'[[traces]]\npath = "{FORMATS / "claude_code"}"\n[[policies]]\nname = "fcfs"\n')
        assert main(["sweep", str(spec), "--out", str(tmp_path / "o"), "--no-progress", "--workers", "1"]) == 0
        summary = pd.read_parquet(tmp_path / "o" / "summary.parquet")
        assert summary["scenario"].tolist() == ["claude_code"] and summary["requests"].tolist() == [7]


REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", ["sweep-demo.toml", "sweep-traces.toml"])
def test_shipped_examples_validate(name, monkeypatch):
    """The README's example specs pass validation from the repository root (so they run)."""
    from fairsim.sweep import load_spec

    monkeypatch.chdir(REPO)
    if name == "sweep-traces.toml" and not Path("../shared/data/traces/synthetic_trace.jsonl").is_file():
        pytest.skip("needs the public traces in ../shared/data/traces")
    runs = expand(load_spec(Path("examples") / name), name)
    assert len(runs) == {"sweep-demo.toml": 20, "sweep-traces.toml": 24}[name]
