"""E5 (colocated vs prefill-only): the tiny run's tables, and the output-length plumbing."""

import json

import numpy as np

from experiments import e5_colocated as e5
from fairsim.sim import EngineConfig
from tests.utils import make_request


def test_output_lengths_deterministic_and_bounded():
    reqs = [make_request(f"r{i}", float(i), 100) for i in range(500)]
    a, b = e5.with_outputs(reqs, 3), e5.with_outputs(reqs, 3)
    outs = np.array([r.output_len for r in a])
    assert [r.output_len for r in b] == outs.tolist()
    assert outs.min() >= 1 and outs.max() <= e5.OUTPUT_MAX
    assert abs(np.median(outs) - e5.OUTPUT_MEDIAN) < 0.15 * e5.OUTPUT_MEDIAN


def test_colocated_engine_holds_prompt_and_output():
    reqs = e5.with_outputs([make_request("a", 0.0, 1000, block=512)], 0)
    need = 2 * -(-(1000 + reqs[0].output_len - 1) // 512)
    cfg = e5.colocated_engine(EngineConfig(kv_blocks=1), reqs)
    assert cfg.mode == "colocated" and cfg.kv_blocks == need
    assert e5.colocated_engine(EngineConfig(kv_blocks=10_000), reqs).kv_blocks == 10_000


def test_tiny_run(tmp_path):
    assert e5.main(["--tiny", "--out", str(tmp_path)]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())["results"]["sec-steady"]
    assert set(summary) == {"prefill-only", "colocated"}
    for pol in ("fcfs", "lpm", "fairway"):
        pre, col = summary["prefill-only"][pol], summary["colocated"][pol]
        assert pre["requests"] == col["requests"] > 0
        assert 0 <= col["goodput_share"] <= 1 and col["tpot_p99_s"] >= col["tpot_p50_s"] > 0
        assert "tpot_p50_s" not in pre or pre["tpot_p50_s"] is None
        # Decodes share the budget: the same arrivals wait at least as long for a first token.
        assert col["ttft_p50_s"] >= pre["ttft_p50_s"]
    assert list(tmp_path.glob("*.png"))
