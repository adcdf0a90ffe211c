"""fairsim analyze: ordering matters when arrival order thrashes the prefix cache that a
reuse-grouping order keeps, even when every request is the same size (work spread 1x)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fairsim.analysis.order_reuse import OrderReuse
from fairsim.cli import main

AZURE_CONV = Path(__file__).resolve().parents[1] / "../shared/data/traces/AzureLLMInferenceTrace_conv.csv"
GROUPS, PER_GROUP, PREFIX_BLOCKS = 8, 10, 4


def write_round_robin(path: Path) -> Path:
    """8 groups of 10 requests; a group's requests share 4 prefix blocks and end in a block of
    their own (5 x 512 tokens each, so every request is the same size). Arrivals every 50 ms take
    the groups in turn: between two uses of a prefix come 7 other groups, 35 distinct blocks.
    The shared working set is 8 x 4 = 32 blocks; an infinite cache hits 9 x 4 of the 10 x 5
    blocks of every group: 288 / 400 = 0.72."""
    rows, own = [], 1000
    for _ in range(PER_GROUP):
        for g in range(GROUPS):
            rows.append({"timestamp": 50 * len(rows), "input_length": (PREFIX_BLOCKS + 1) * 512,
                         "output_length": 1,
                         "hash_ids": [g * PREFIX_BLOCKS + j for j in range(PREFIX_BLOCKS)] + [own]})
            own += 1
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def analyze_json(capsys, *argv: str) -> dict:
    assert main(["analyze", *argv, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


class TestOrderReuse:
    def test_ratio_by_hand(self):
        r = OrderReuse(kv_blocks=10, prompt_tokens=1000, fcfs_cached_tokens=0, grouped_cached_tokens=600)
        assert r.fcfs_hit_rate == 0.0 and r.grouped_hit_rate == 0.6
        assert r.work_ratio == 2.5 and r.matters  # 1000 / 400 uncached tokens
        assert "2.50x" in r.reason() and ">= 1.25x" in r.reason()
        same = OrderReuse(kv_blocks=10, prompt_tokens=1000, fcfs_cached_tokens=300, grouped_cached_tokens=300)
        assert same.work_ratio == 1.0 and not same.matters and "< 1.25x" in same.reason()
        edge = OrderReuse(10, 1000, 200, 360)  # 800 / 640 = 1.25: at the threshold matters
        assert edge.work_ratio == 1.25 and edge.matters

    def test_all_cached(self):
        assert OrderReuse(10, 1000, 1000, 1000).work_ratio == 1.0
        assert OrderReuse(10, 1000, 0, 1000).work_ratio == float("inf")

    def test_bad_values(self):
        with pytest.raises(ValueError, match="grouped_cached_tokens"):
            OrderReuse(10, 1000, 0, 1001)
        with pytest.raises(ValueError, match="--reuse-threshold"):
            OrderReuse(10, 1000, 0, 10, threshold=1.0)


class TestVerdictFlips:
    def test_thrashing_cache_flips_the_verdict(self, tmp_path, capsys):
        path = write_round_robin(tmp_path / "rr.jsonl")
        data = analyze_json(capsys, str(path), "--kv-blocks", "12")
        sp, ru = data["spread"], data["order_reuse"]
        assert sp["spread_p50"] == 1.0 and sp["verdict"].startswith("ordering matters little")
        assert ru["fcfs_hit_rate"] == 0.0  # 35 distinct blocks between two uses of a prefix > 12
        assert 0.5 < ru["lpm_hit_rate"] <= 0.72  # at most the infinite-cache bound
        assert ru["uncached_tokens_ratio_fcfs_over_lpm"] == pytest.approx(1 / (1 - ru["lpm_hit_rate"]))
        assert ru["matters"] and data["ordering_matters"]
        assert data["verdict"].startswith("ordering matters: arrival order loses prefix-cache hits")
        assert data["infinite_hit_rate"] == pytest.approx(0.72)

    def test_reasoning_printed(self, tmp_path, capsys):
        path = write_round_robin(tmp_path / "rr.jsonl")
        assert main(["analyze", str(path), "--kv-blocks", "12", "--out", str(tmp_path / "rep")]) == 0
        out = capsys.readouterr().out
        assert "prefix cache by order (FCFS and LPM simulations at the trace's timing): at 12 KV " \
               "blocks FCFS (arrival order) keeps a prefix hit rate of 0.000" in out
        verdict = next(line for line in out.splitlines() if line.startswith("verdict: "))
        assert "(>= 1.25x; hit rate 0.000 vs" in verdict
        assert "by work spread alone: ordering matters little: queued work differs 1.0x" in verdict
        assert "**Verdict: ordering matters: arrival order" in (tmp_path / "rep" / "report.md").read_text()

    def test_working_set_that_fits_keeps_the_verdict(self, tmp_path, capsys):
        # 40 blocks hold the 32 shared ones: arrival order already hits the bound, 288/400.
        path = write_round_robin(tmp_path / "rr.jsonl")
        data = analyze_json(capsys, str(path), "--kv-blocks", "40")
        ru = data["order_reuse"]
        assert ru["fcfs_hit_rate"] == ru["lpm_hit_rate"] == pytest.approx(0.72)
        assert ru["uncached_tokens_ratio_fcfs_over_lpm"] == pytest.approx(1.0) and not ru["matters"]
        assert not data["ordering_matters"] and data["verdict"].startswith("ordering matters little")

    def test_no_queue_no_reordering(self, tmp_path, capsys):
        # Stretched 1000x nobody waits together: both orders are the same and both thrash.
        path = write_round_robin(tmp_path / "rr.jsonl")
        data = analyze_json(capsys, str(path), "--kv-blocks", "12", "--time-scale", "1000")
        ru = data["order_reuse"]
        assert ru["fcfs_hit_rate"] == ru["lpm_hit_rate"] == 0.0
        assert ru["uncached_tokens_ratio_fcfs_over_lpm"] == 1.0 and not data["ordering_matters"]

    def test_no_reuse_trace_keeps_the_spread_verdict(self, capsys):
        # Azure's records carry no prefix identity: nothing to cache, the verdict is the spread's.
        data = analyze_json(capsys, str(AZURE_CONV), "--window-start", "0", "--window-end", "300")
        ru, sp = data["order_reuse"], data["spread"]
        assert ru["fcfs_hit_rate"] == ru["lpm_hit_rate"] == 0.0 and not ru["matters"]
        assert data["verdict"].startswith(sp["verdict"] + "; prefix cache: FCFS computes 1.00x")
        assert data["ordering_matters"] == (sp["spread_p50"] >= 4 and sp["queued_share"] >= 0.01)

    def test_bad_threshold_exits_2(self, capsys):
        assert main(["analyze", "--reuse-threshold", "1"]) == 2
        assert "--reuse-threshold 1.0: need a finite factor > 1" in capsys.readouterr().err
