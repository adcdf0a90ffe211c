"""What the new-user pass on the deployment modes (colocated, disaggregated, fleets) found,
each checked by hand."""

from __future__ import annotations

import json

import pytest

from fairsim.cli import main


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _profile_without_kv_capacity(tmp_path):
    """The shipped prior without its kv_capacity: the default KV size is 0.3 of reusable content."""
    from importlib.resources import files

    data = json.loads((files("fairsim.profiles") / "a6000-llama3.1-8b-vllm-prior.json").read_text())
    del data["kv_capacity"]
    data["name"] = "nokv"
    path = tmp_path / "nokv.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("mode, blocks, phrase", [
    # prefill-only: the longest prompt, 100 tokens = 7 blocks of 16.
    ("prefill-only", 7, "raised to the longest prompt)"),
    # colocated and disaggregated: prompt + output - 1 = 100 + 500 - 1 = 599 tokens = 38 blocks.
    ("colocated", 38, "raised to the largest prompt and output of a request)"),
    ("disaggregated", 38, "raised to the largest prompt and output of a request)"),
])
def test_the_default_kv_line_says_what_the_size_was_raised_to(tmp_path, capsys, mode, blocks, phrase):
    # Was: "(raised to the longest prompt)" in every mode, although colocated the 38 blocks hold
    # the prompt and its output, five times the longest prompt's 7.
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 100, "output_length": 500, "hash_ids": [1]}\n')
    extra = ["--kv-bytes-per-token", 1000] if mode == "disaggregated" else []
    code, out, err = run_cli(capsys, "run", "--trace", trace, "--profile", _profile_without_kv_capacity(tmp_path),
                             "--policy", "fcfs", "--mode", mode, "--block-size", 16, "--out", tmp_path / "o", *extra)
    assert code == 0, err
    line = next(x for x in out.splitlines() if x.startswith("profile nokv; KV cache"))
    assert line.startswith(f"profile nokv; KV cache {blocks} blocks x 16 tokens")
    assert phrase in line
    engine = json.loads((tmp_path / "o" / "run.json").read_text())["engine"]
    assert engine["kv_blocks"] == blocks
    assert phrase.rstrip(")") in engine["kv_capacity_source"]


@pytest.mark.parametrize("opts, mode", [
    ([], "prefill-only"),
    (["--mode", "colocated"], "colocated"),
    (["--mode", "colocated", "--instances", 2], "colocated"),
    (["--mode", "disaggregated"], "disaggregated"),
])
def test_bench_records_the_engine_mode(tmp_path, capsys, opts, mode):
    # Was: a colocated bench's header and bench.json rows did not say the mode, so they could not be
    # told from a prefill-only bench's (whose runs simulate one output token per request), and a
    # colocated fleet's row said only "deployment": {"mode": "fleet", ...}.
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}\n'
                     '{"timestamp": 500, "input_length": 600, "output_length": 3, "hash_ids": [1, 3]}\n')
    code, out, err = run_cli(capsys, "bench", "--trace", trace, "--policies", "fcfs", "--repeat", 1,
                             "--out", tmp_path / "o", *opts)
    assert code == 0, err
    row = json.loads((tmp_path / "o" / "bench.json").read_text())["fcfs"]
    assert row["mode"] == mode
    header = out.splitlines()[0]
    assert header.endswith("colocated (prefill and decode)") == (mode == "colocated" and "--instances" not in opts)
    assert ("colocated (prefill and decode)" in header) == (mode == "colocated")
    # Colocated, the runs decode: 5 + 3 output tokens take more steps than the two prefills.
    assert row["requests"] == 2 and (row["steps"] == 2) == (mode == "prefill-only")
