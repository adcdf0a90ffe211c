"""Colocated decision equivalence against a real vLLM engine (tiny dummy-weight Llama, CPU)."""

from __future__ import annotations

import os

import pytest

pytestmark = pytest.mark.live

from fairsim.live.engine import ENGINE_ENV  # noqa: E402  (no vLLM import)

for _k, _v in ENGINE_ENV.items():
    os.environ.setdefault(_k, _v)

from fairsim.costmodel import load_profile  # noqa: E402
from fairsim.live.engine import LiveConfig  # noqa: E402
from fairsim.live.equivalence import compare, equivalence_trace_colocated  # noqa: E402


@pytest.mark.parametrize("policy", ["fcfs", "lpm", "fairway"])
def test_colocated_decisions_with_preemptions(policy):
    # 24 requests decoding up to 128 tokens each into 24 blocks of 128 tokens: running decodes
    # outgrow the cache and preempt one another.
    requests = equivalence_trace_colocated(24, seed=3, rate_per_s=8.0, max_output=128)
    eq = compare(requests, policy, load_profile("a6000-llama3.1-8b-vllm-prior"),
                 LiveConfig(kv_blocks=24, max_num_seqs=16), colocated=True)
    assert eq.preemptions > 0 and eq.table["vllm_preemptions"].sum() > 0
    assert eq.table["sim_cached_tokens"].sum() > 0
    assert eq.fraction_identical >= 0.99, eq.first_difference()


def test_colocated_fidelity_reports_tpot(tmp_path):
    import json

    from fairsim.cli import main

    rc = main(["fidelity", "--mode", "colocated", "--requests", "6", "--rate", "4", "--max-output", "8",
               "--policies", "fcfs", "--out", str(tmp_path)])
    assert rc == 0
    row = json.loads((tmp_path / "fidelity.json").read_text())["fcfs"]
    for side in ("sim", "vllm"):
        assert row[f"{side}_tpot_p99_s"] >= row[f"{side}_tpot_p50_s"] > 0
    import pandas as pd

    live = pd.read_parquet(tmp_path / "requests-live-fcfs.parquet")
    assert {"output_tokens", "e2e_s", "tpot_s"} <= set(live.columns)
    assert (live["output_tokens"] >= 1).all() and (live["e2e_s"] >= live["ttft_s"]).all()
