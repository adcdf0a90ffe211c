"""New-user pass V: colocated mode and closed-loop session replay, checked by hand."""

import json

import pandas as pd

from fairsim.cli import main
from fairsim.traces import load_trace

# One second per step whatever it holds, so every time below is a step count.
CONST = {"schema_version": 1, "name": "const1", "kind": "prior",
         "coefficients": {"a_s": 1.0, "b_s_per_token": 0.0, "k_s_per_pair": 0.0, "d_s_per_request": 0.0},
         "budget_tokens": 2048,
         "idle_prefill": {"prompt_tokens": [16, 2048, 4096], "seconds": [1.0, 1.0, 2.0]}}


def _write(tmp_path, name, rows):
    p = tmp_path / name
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


def test_one_record_warnings_of_the_mooncake_reader_are_singular(tmp_path):
    p = _write(tmp_path, "one.jsonl", [
        {"timestamp": 0, "session_id": "a", "delay": 500, "input_length": 16, "output_length": 1},
        {"timestamp": 10, "session_id": "a", "delay": 5, "input_length": 16, "output_length": 1,
         "hash_ids": [1]}])
    warnings = [str(w) for w in load_trace(p, hash_block_size=16).warnings]
    assert any(f"{p}: 1 record has no hash_ids: no prefix identity" in w for w in warnings)
    assert any(f"{p}: 1 record has a delay but follows no turn" in w for w in warnings)


def test_colocated_self_preemption_and_closed_loop_release_by_hand(tmp_path):
    prof = tmp_path / "const.json"
    prof.write_text(json.dumps(CONST))
    # 16-token blocks, 7 in all. a, b: 20-token prompts (2 blocks); c: 47 (3 blocks). Step 0 (0-1 s)
    # prefills all three (7 blocks). At step 2 c (49 tokens) needs a 4th block, none is free, and c is
    # the latest admitted, so vLLM preempts c itself; a and b decode to 5 tokens (finish 5 s). c
    # comes back at step 5 with its 48 computed tokens cached, computes 1 token (3rd token at 6 s)
    # and finishes at 8 s: TPOT (8 - 1) / 4. Session a's next turn follows a's finish + 1 s x 0.5.
    p = _write(tmp_path, "t.jsonl", [
        {"timestamp": 0, "session_id": "a", "input_length": 20, "output_length": 5, "hash_ids": [1, 2]},
        {"timestamp": 0, "input_length": 20, "output_length": 5, "hash_ids": [3, 4]},
        {"timestamp": 0, "input_length": 47, "output_length": 5, "hash_ids": [5, 6, 7]},
        {"timestamp": 3000, "session_id": "a", "delay": 1000, "input_length": 32, "output_length": 1,
         "hash_ids": [1, 8]}])
    out = tmp_path / "o"
    assert main(["run", "--trace", str(p), "--profile", str(prof), "--mode", "colocated", "--policy", "fcfs",
                 "--block-size", "16", "--hash-block-size", "16", "--kv-blocks", "7", "--think-scale", "0.5",
                 "--out", str(out), "--format", "json"]) == 0
    r = pd.read_parquet(out / "requests-fcfs.parquet").set_index("request_id")
    assert list(r.loc["t:3", ["first_token_s", "finish_s", "preemptions", "discarded_tokens",
                              "resume_cached_tokens"]]) == [1.0, 8.0, 1, 48, 48]
    assert r.loc["t:3", "tpot_s"] == 7.0 / 4
    # a finishes at 5 s; its next turn is sent at 5.5 s and waits for the 6 s step (c holds 4 of
    # the 7 blocks and the turn needs 2): prefill 6-7 s with a's first block cached.
    assert list(r.loc["t:4", ["released_s", "first_scheduled_s", "cached_tokens", "finish_s"]]) == [
        5.5, 6.0, 16, 7.0]
    s = pd.read_parquet(out / "steps-fcfs.parquet")
    assert list(s["preemptions"]) == [0, 0, 1, 0, 0, 0, 0, 0]
    assert list(s["tokens"]) == [87, 3, 2, 2, 2, 1, 17, 1]
