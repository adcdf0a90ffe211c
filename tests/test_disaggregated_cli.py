"""``--mode disaggregated`` beyond ``run``/``compare``'s basics: the decode side's own KV size
(``--decode-kv-blocks``), sweeps, tune, bench, and the figure by role (``--plots``).

Numbers by hand: in the first 40 requests of the shipped conversation window the longest prompt
(``conversation_window:37``, 60,157 tokens) needs 118 blocks of 512 tokens and its prompt and
output (60,157 + 383 - 1 tokens) 119.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from fairsim.cli import main

ROOT = Path(__file__).resolve().parents[1]
WINDOW = str(ROOT / "fairsim" / "traces" / "data" / "conversation_window.jsonl")
DISAGG = ["--mode", "disaggregated", "--prefill-instances", "2", "--decode-instances", "2"]


def run_json(tmp_path: Path, *options: str, requests: int = 40) -> dict:
    out = tmp_path / "run"
    assert main(["run", "--policy", "fcfs", "--trace", WINDOW, "--max-requests", str(requests), *DISAGG,
                 *options, "--format", "json", "--out", str(out)]) == 0
    return json.loads((out / "summary.json").read_text())["fcfs"]


# -- --decode-kv-blocks ----------------------------------------------------------------------------

def test_decode_kv_blocks_sizes_the_decode_side_only(tmp_path, capsys):
    s = run_json(tmp_path, "--kv-blocks", "118", "--decode-kv-blocks", "119")
    # The prefill side holds prompts only (118 blocks: the longest prompt); each decode engine 119.
    assert s["kv_blocks"] == 118 and s["decode_kv_blocks"] == 119
    steps = pd.read_parquet(tmp_path / "run" / "steps-fcfs.parquet")
    assert steps.loc[steps["role"] == "decode", "kv_blocks_used"].max() <= 119
    assert steps.loc[steps["role"] == "prefill", "kv_blocks_used"].max() <= 118
    info = json.loads((tmp_path / "run" / "run.json").read_text())
    assert info["decode_kv_blocks"] == 119
    # One request's worth of decode KV serialises the decode side: requests wait held.
    assert s["held_requests"] > 0
    assert "119 KV blocks each (--decode-kv-blocks)" in capsys.readouterr().err


def test_default_decode_side_is_the_prefill_sides(tmp_path):
    s = run_json(tmp_path, "--kv-blocks", "400")
    assert s["kv_blocks"] == 400 and s["decode_kv_blocks"] == 400


@pytest.mark.parametrize("options, named", [
    # No --decode-kv-blocks: the decode side is the prefill side's 118 blocks, one short.
    (["--kv-blocks", "118"], ["the decode side is too small for request 'conversation_window:37'",
                              "need 119 KV blocks", "--decode-kv-blocks 119 or more",
                              "--kv-blocks/--kv-tokens to 119 blocks"]),
    (["--decode-kv-blocks", "50"], ["the decode side is too small", "a decode instance holds 50",
                                    "--decode-kv-blocks 50; give --decode-kv-blocks 119 or more"]),
    (["--kv-blocks", "117", "--decode-kv-blocks", "500"], ["the prefill side is too small",
                                                           "needs 118 blocks", "--kv-blocks to at least 118"]),
    (["--decode-kv-blocks", "0"], ["--decode-kv-blocks 0: need 1 to"]),
])
def test_too_small_sides_exit_2_named(tmp_path, capsys, options, named):
    assert main(["run", "--policy", "fcfs", "--trace", WINDOW, "--max-requests", "40", *DISAGG, *options]) == 2
    err = capsys.readouterr().err
    assert all(n in err for n in named), err
    assert "Traceback" not in err


def test_decode_kv_blocks_needs_the_mode(capsys):
    assert main(["run", "--policy", "fcfs", "--trace", WINDOW, "--max-requests", "10",
                 "--decode-kv-blocks", "100"]) == 2
    assert "--decode-kv-blocks needs --mode disaggregated" in capsys.readouterr().err
