"""Disaggregated prefill and decode (``--mode disaggregated``; ``fairsim.sim.disaggregated``).

* One request by hand: TTFT = prefill step + transfer + the decode side's first step; the transfer
  time formula; the decode steps' count and cost.
* Invariants on a real trace window: every request prefilled once and decoded once, its KV moved
  once (tokens = prompt - the decode side's local hit), KV blocks freed on both sides, held and
  transfer intervals ordered.
* A tiny decode pool holds requests (``held`` in the step table, ``decode_held``) and still
  finishes every one.
* Bad input: exit 2 naming the option. Determinism.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fairsim.costmodel import DEFAULT_PROFILE, load_profile
from fairsim.errors import CapacityError
from fairsim.policies import make_policy
from fairsim.routers import make_router
from fairsim.sim import EngineConfig
from fairsim.sim.disaggregated import KVLink, simulate_disaggregated
from fairsim.traces import load_trace
from fairsim.types import Request

ROOT = Path(__file__).resolve().parents[1]
WINDOW = ROOT / "fairsim" / "traces" / "data" / "conversation_window.jsonl"
PROFILE = load_profile(DEFAULT_PROFILE)


def run(requests, prefill=1, decode=1, policy="fcfs", config=EngineConfig(block_size=16, kv_blocks=400),
        link=KVLink(131072, 400), decode_kv_blocks=None):
    return simulate_disaggregated(
        requests, [make_policy(policy, PROFILE) for _ in range(prefill)],
        make_router("round-robin", prefill, kv_blocks=400), [make_policy("fcfs", PROFILE) for _ in range(decode)],
        PROFILE, link, config, decode_kv_blocks=decode_kv_blocks)


@pytest.fixture(scope="module")
def window() -> list[Request]:
    return list(load_trace(WINDOW).requests)[:150]


def test_transfer_time_formula():
    # 1,000 tokens x 131,072 bytes x 8 bits / 400e9 bit/s = 2.62144 ms.
    assert KVLink(131072, 400).seconds(1000) == pytest.approx(0.00262144, rel=1e-12)
    assert KVLink(81920, 100).seconds(512) == pytest.approx(512 * 81920 * 8 / 100e9, rel=1e-12)
    for bad in (0, -1, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="gbps"):
            KVLink(131072, bad)


def test_one_request_by_hand():
    req = Request("a", 0.0, 1000, (1,), 512, output_len=5)
    res = run([req])
    row = res.requests.iloc[0]
    prefill = PROFILE.step_time_from_sums(1000, 1000 * 500.0, 1)  # one cold 1,000-token chunk
    transfer = 1000 * 131072 * 8 / 400e9
    # The decode side recomputes the last prompt token (ctx 999) and samples the first token.
    first = PROFILE.step_time_colocated(1, 999.5, 1, 0, 0)
    assert row["prefill_done_s"] == pytest.approx(prefill, abs=1e-12)
    assert row["transfer_s"] == pytest.approx(transfer, abs=1e-12)
    assert row["held_s"] == 0.0 and not row["decode_held"]
    assert row["ttft_s"] == pytest.approx(prefill + transfer + first, abs=1e-12)
    decode = PROFILE.step_time_colocated(1, 1000.5, 1, 1, 1000)  # the first decode: ctx 1000
    assert row["tpot_s"] == pytest.approx(decode, rel=1e-6)  # ctx grows by one per step: same floor here
    steps = res.steps
    assert list(steps["role"]) == ["prefill"] + ["decode"] * 5  # 1 recompute + 4 decodes = 5 tokens
    assert list(steps["tokens"]) == [1000, 1, 1, 1, 1, 1]
    assert list(steps["decode_tokens"]) == [0, 0, 1, 1, 1, 1]
    assert row["transfer_tokens"] == 1000 and row["decode_cached_tokens"] == 0
    assert len(res.token_gaps) == 4


def test_invariants_on_a_window(window):
    res = run(window, prefill=2, decode=2, policy="fairway", config=EngineConfig(kv_blocks=451))
    r = res.requests
    assert len(r) == len(window) and r["request_id"].is_unique
    # Every request prefilled once (on one prefill instance) and decoded once (on one decode one).
    per_prefill = sum(len(p.requests) for p in res.instances)
    per_decode = sum(len(p.requests) for p in res.decode_instances)
    assert per_prefill == per_decode == len(window)
    assert set(r["instance"]) <= {0, 1} and set(r["decode_instance"]) <= {0, 1}
    # Time order: arrival <= prefill end <= blocks on the decode side < KV there < first token <= finish.
    assert (r["released_s"] <= r["prefill_done_s"]).all()
    assert (r["prefill_done_s"] <= r["kv_alloc_s"]).all()
    assert (r["kv_alloc_s"] < r["kv_ready_s"]).all()
    assert (r["kv_ready_s"] < r["first_token_s"]).all()
    assert (r["first_token_s"] <= r["finish_s"]).all()
    # KV moved once: the prompt minus the decode side's local hit, at the link's rate.
    assert (r["transfer_tokens"] == r["prompt_tokens"] - r["decode_cached_tokens"]).all()
    np.testing.assert_allclose(r["transfer_s"], r["transfer_tokens"] * 131072 * 8 / 400e9, rtol=1e-9)
    # Tokens computed: prefill side the uncached prompt (prefill-only: L - hit each), decode side
    # its hit-less remainder plus one per output token (no preemption here).
    pre = res.steps[res.steps["role"] == "prefill"]
    dec = res.steps[res.steps["role"] == "decode"]
    assert pre["tokens"].sum() == (r["prompt_tokens"] - r["cached_tokens"]).sum()
    assert r["decode_preemptions"].sum() == 0
    assert dec["tokens"].sum() == r["output_tokens"].sum()
    assert dec["decode_tokens"].sum() == (r["output_tokens"] - 1).sum()
    # Nothing left held or moving at the end; TTFT is the decode side's.
    assert (r["ttft_s"] == r["first_token_s"] - r["released_s"]).all()
    assert res.steps["held"].min() >= 0 and res.steps["transferring"].min() >= 0


def test_tiny_decode_pool_holds_requests():
    # Six 160-token prompts with 40 output tokens at once: one decode engine of 13 blocks of 16
    # tokens holds one request (199 tokens, 13 blocks) at a time; the others wait held.
    # A seventh request reaches prefill instance 0 (round robin) at 1 s, while its earlier ones wait.
    reqs = [Request(f"r{i}", 0.0, 160, (), 16, output_len=40) for i in range(6)]
    reqs.append(Request("late", 1.0, 160, (), 16, output_len=2))
    res = run(reqs, prefill=2, decode=1, config=EngineConfig(block_size=16, kv_blocks=100), decode_kv_blocks=13)
    r = res.requests
    assert r["finish_s"].notna().all()
    assert r["decode_held"].sum() >= 4
    dec = res.steps[res.steps["role"] == "decode"]
    assert dec["held"].max() >= 4 and dec["running"].max() == 1
    # Their KV waits pinned on the prefill side: the late request's step sees them held, and their
    # blocks (10 each) used beside its own 10.
    late = res.steps[(res.steps["role"] == "prefill") & (res.steps["start_s"] >= 1.0)].iloc[0]
    assert late["instance"] == 0 and late["held"] >= 1
    assert late["kv_blocks_used"] == 10 * (1 + late["held"] + late["transferring"])
    # Served one after another: each KV allocation after the previous request finished.
    order = r.sort_values("kv_alloc_s")
    assert (order["kv_alloc_s"].to_numpy()[1:] >= order["finish_s"].to_numpy()[:-1]).all()


def test_decode_engine_waits_for_a_transfer_when_its_blocks_are_taken():
    # A decode engine of 4 blocks of 16 tokens: "a" (16 + 40 tokens) decodes while "b"'s KV (2
    # blocks) moves over a slow link (0.1 s per token: 3.2 s). When "a" needs its third block
    # none is free: it is preempted and nothing can run until "b"'s transfer ends. The engine
    # waits for that end (it used to stop with "scheduled nothing although 1 requests wait").
    reqs = [Request("a", 0.0, 16, (), 16, output_len=40), Request("b", 0.5, 32, (), 16, output_len=2)]
    slow = KVLink(131072, 131072 * 8 / 0.1 / 1e9)  # 0.1 s per token
    res = run(reqs, config=EngineConfig(block_size=16, kv_blocks=100), decode_kv_blocks=4, link=slow)
    a, b = res.requests.set_index("request_id").loc[["a", "b"]].to_dict("records")
    assert b["transfer_s"] == pytest.approx(3.2) and a["transfer_s"] == pytest.approx(1.6)
    assert a["decode_preemptions"] == 1 and b["decode_preemptions"] == 0
    dec = res.steps[res.steps["role"] == "decode"]
    step = PROFILE.step_time_colocated(1, 16.5, 1, 1, 16)  # "a"'s decode steps (same floor)
    # "a" runs 17 steps (its last prompt token, then 16 decodes filling 2 blocks) from its KV's
    # arrival; the next step starts when "b"'s KV is there, with "a" waiting preempted.
    starts = dec["start_s"].to_numpy()
    assert starts[0] == a["kv_ready_s"]
    assert starts[16] == pytest.approx(a["kv_ready_s"] + 16 * step, rel=1e-9)
    assert starts[17] == b["kv_ready_s"] and dec["waiting"].iloc[17] == 1
    # "a" comes back after "b" finished (it needs 3 of the 4 blocks, "b" 3 while decoding).
    assert b["finish_s"] < a["finish_s"] and np.isfinite(a["finish_s"])


def test_decode_side_too_small_for_one_request():
    reqs = [Request("big", 0.0, 160, (), 16, output_len=40)]
    with pytest.raises(CapacityError, match="decode side is too small for request 'big'"):
        run(reqs, decode_kv_blocks=12)


def test_deterministic(window):
    a = run(window[:60], prefill=2, decode=2, policy="lpm", config=EngineConfig(kv_blocks=451))
    b = run(window[:60], prefill=2, decode=2, policy="lpm", config=EngineConfig(kv_blocks=451))
    assert a.requests.equals(b.requests) and a.steps.equals(b.steps) and a.token_gaps.equals(b.token_gaps)


def cli(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "fairsim", *args], capture_output=True, text=True, cwd=cwd,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


@pytest.mark.parametrize("args,named", [
    (["--prefill-instances", "2"], "--prefill-instances needs --mode disaggregated"),
    (["--mode", "colocated", "--kv-link-gbps", "100"], "--kv-link-gbps needs --mode disaggregated"),
    (["--mode", "disaggregated", "--prefill-instances", "0"], "--prefill-instances 0: need at least 1"),
    (["--mode", "disaggregated", "--decode-instances", "0"], "--decode-instances 0: need at least 1"),
    (["--mode", "disaggregated", "--kv-link-gbps", "-5"], "--kv-link-gbps -5: need a finite number > 0"),
    (["--mode", "disaggregated", "--instances", "2"], "--instances 2: --mode disaggregated counts"),
    (["--mode", "disaggregated", "--kv-blocks", "20"], "--kv-blocks"),
])
def test_bad_input_exits_2(args, named):
    out = cli("run", "--policy", "fcfs", "--trace", str(WINDOW), "--max-requests", "20", *args)
    assert out.returncode == 2, out.stderr
    assert named in out.stderr and "Traceback" not in out.stderr


def test_cli_run_writes_tables(tmp_path):
    out = cli("run", "--policy", "fcfs", "--trace", str(WINDOW), "--max-requests", "40", "--mode", "disaggregated",
              "--prefill-instances", "2", "--decode-instances", "2", "--slo", "ttft=5,tpot=0.1",
              "--out", str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert "KV transfer = tokens x 131,072 bytes" in out.stdout and "per instance (disaggregated)" in out.stdout
    import pandas as pd

    reqs = pd.read_parquet(tmp_path / "requests-fcfs.parquet")
    steps = pd.read_parquet(tmp_path / "steps-fcfs.parquet")
    assert {"instance", "decode_instance", "transfer_s", "held_s", "tpot_s"} <= set(reqs.columns)
    assert set(steps["role"]) == {"prefill", "decode"} and {"held", "transferring"} <= set(steps.columns)
    summary = json.loads((tmp_path / "summary.json").read_text())["fcfs"]
    assert summary["mode"] == "disaggregated" and summary["decode_instances"] == 2
    assert summary["ttft_p50_s"] == pytest.approx(float(np.percentile(reqs["ttft_s"], 50)))
    assert "goodput_share" in summary and "tpot_p50_s" in summary
    info = json.loads((tmp_path / "run.json").read_text())
    assert info["mode"] == "disaggregated" and info["prefill_instances"] == 2
