"""What a new-user pass over fleets, disaggregated mode, profiles and bench found (session 26, B)."""

from __future__ import annotations

import os

import pytest

from fairsim import bench
from fairsim.cli import main

WINDOW = "fairsim/traces/data/conversation_window.jsonl"


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


# -- output files in --out/--plots that no write can replace: refused before any work -----------

def _dangling(path):
    path.symlink_to(path.parent / "nowhere" / path.name)


def _fifo(path):
    os.mkfifo(path)


@pytest.mark.parametrize("make, said", [(_dangling, "is a link to"), (_fifo, "is not a regular file")])
@pytest.mark.parametrize("deployment", [[], ["--instances", "2"], ["--mode", "disaggregated"]])
def test_a_summary_json_no_write_can_replace_is_refused_before_the_run(tmp_path, capsys, make, said, deployment):
    # Was: the run simulated, printed its table and wrote its Parquet tables, then failed on
    # summary.json (exit 2 after the work).
    out = tmp_path / "o"
    out.mkdir()
    make(out / "summary.json")
    code, stdout, err = run_cli(capsys, "run", "--trace", WINDOW, "--max-requests", "20", "--policy", "fcfs",
                                "--out", out, *deployment)
    assert code == 2 and stdout == ""
    assert f"fairsim: error: --out {out / 'summary.json'}: {said}" in err
    assert sorted(p.name for p in out.iterdir()) == ["summary.json"]


def test_a_plot_that_is_a_link_to_nothing_is_refused_before_the_run(tmp_path, capsys):
    plots = tmp_path / "p"
    plots.mkdir()
    _dangling(plots / "ttft_cdf.png")
    code, stdout, err = run_cli(capsys, "compare", "--trace", WINDOW, "--max-requests", "20", "--policies",
                                "fcfs,lpm", "--plots", plots)
    assert code == 2 and stdout == ""
    assert f"fairsim: error: --plots {plots / 'ttft_cdf.png'}: is a link to" in err


def test_bench_json_that_is_a_link_to_nothing_is_refused_before_any_child(tmp_path, capsys, monkeypatch):
    calls = []
    monkeypatch.setattr(bench, "bench_policy", lambda argv, name: calls.append(name))
    out = tmp_path / "o"
    out.mkdir()
    _dangling(out / "bench.json")
    code, stdout, err = run_cli(capsys, "bench", "--trace", WINDOW, "--max-requests", "20", "--policies", "fcfs",
                                "--repeat", "1", "--out", out)
    assert code == 2 and stdout == "" and calls == []
    assert f"fairsim: error: --out {out / 'bench.json'}: is a link to" in err


def test_a_link_to_a_file_is_still_written_through(tmp_path, capsys):
    out = tmp_path / "o"
    out.mkdir()
    target = tmp_path / "kept-summary.json"
    target.write_text("{}")
    (out / "summary.json").symlink_to(target)
    code, _, err = run_cli(capsys, "run", "--trace", WINDOW, "--max-requests", "20", "--policy", "fcfs",
                           "--out", out)
    assert code == 0, err
    assert (out / "summary.json").is_symlink() and '"fcfs"' in target.read_text()


# -- disaggregated: a prefill-side cache above the simulator's limit is not "too small" ----------

@pytest.mark.parametrize("option, value, said", [
    ("--kv-fraction", "1e9", "--kv-fraction 1000000000.0 gives 1e+09 blocks, which is above"),
    ("--kv-blocks", "1e9", "--kv-blocks 1000000000 is above"),
])
def test_a_prefill_cache_above_the_limit_is_not_called_too_small(capsys, option, value, said):
    code, _, err = run_cli(capsys, "run", "--trace", WINDOW, "--max-requests", "40", "--mode", "disaggregated",
                           option, value)
    assert code == 2
    assert f"fairsim: error: the prefill side's KV cache: {said} the simulator's limit of 4194304 blocks" in err
    assert "too small" not in err


def test_a_prefill_cache_too_small_still_says_so(capsys):
    code, _, err = run_cli(capsys, "run", "--trace", WINDOW, "--max-requests", "40", "--mode", "disaggregated",
                           "--kv-blocks", "117")
    assert code == 2
    assert ("fairsim: error: the prefill side is too small: request 'conversation_window:37' needs 118 blocks of "
            "512 tokens but the KV cache holds 117") in err


# -- profile files: values the loader took or crashed on -----------------------------------------

def _profile(tmp_path, change):
    """The shipped A6000 prior's JSON with ``change`` applied, written to ``tmp_path/p.json``."""
    import json
    from pathlib import Path

    import fairsim

    data = json.loads((Path(fairsim.__file__).parent / "profiles" / "a6000-llama3.1-8b-vllm-prior.json").read_text())
    change(data)
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("change, said", [
    # Was: "internal error (a bug in fairsim)": OverflowError (bytes beyond a float).
    (lambda d: d["kv_capacity"].update(device_memory_gib=1e300),
     "kv_capacity: 1e+300 GiB x 0.92 - 14.96 GiB weights - 1.0 GiB reserve is beyond what a float holds in bytes"),
    (lambda d: d["kv_capacity"].update(weights_gib=1e300),
     "kv_capacity: 48.0 GiB x 0.92 - 1e+300 GiB weights - 1.0 GiB reserve leaves no memory for the KV cache"),
    # Were: taken, printed as "profile None", "profile {}", "profile True"; schema_version true as 1.
    (lambda d: d.update(name=None), "'name' must be a non-empty string"),
    (lambda d: d.update(name={}), "'name' must be a non-empty string"),
    (lambda d: d.update(name=True), "'name' must be a non-empty string"),
    (lambda d: d.update(name=" "), "'name' must be a non-empty string"),
    (lambda d: d.update(schema_version=True), "schema_version=True, this fairsim reads 1"),
])
def test_a_bad_profile_value_is_refused_naming_the_file(tmp_path, capsys, change, said):
    path = _profile(tmp_path, change)
    code, stdout, err = run_cli(capsys, "run", "--trace", WINDOW, "--max-requests", "20", "--profile", path)
    assert code == 2 and stdout == ""
    assert f"fairsim: error: {path}: {said}" in err and "internal error" not in err


def test_a_profile_without_a_name_is_named_by_its_path(tmp_path, capsys):
    path = _profile(tmp_path, lambda d: d.pop("name"))
    code, stdout, err = run_cli(capsys, "run", "--trace", WINDOW, "--max-requests", "20", "--profile", path)
    assert code == 0, err
    assert f"\nprofile {path}; KV cache 451 blocks" in stdout


def test_a_huge_but_finite_device_is_the_simulators_limit(tmp_path, capsys):
    from fairsim.costmodel import load_profile

    path = _profile(tmp_path, lambda d: d["kv_capacity"].update(device_memory_gib=1e12))
    assert load_profile(str(path)).kv_capacity.tokens == 7536639999869256
    code, _, err = run_cli(capsys, "run", "--trace", WINDOW, "--max-requests", "20", "--profile", path)
    assert code == 2 and "above the simulator's limit of 4194304 blocks" in err
