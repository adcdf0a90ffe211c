"""--plots on run/compare, and starved / KV size in the printed table."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fairsim.cli import main
from fairsim.run_plots import (MAX_STEP_POINTS, TIME_BINS, binned_step_function, goodput_figure,
                               queue_and_kv_cached, tpot_cdf, ttft_vs_arrival)


def test_compare_plots_and_table_columns(tmp_path, capsys):
    code = main(["compare", "--policies", "fcfs,lpm", "--max-requests", "120", "--kv-blocks", "60",
                 "--plots", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0
    header, *rows = [line for line in out.splitlines() if line.startswith(("policy", "fcfs", "lpm"))]
    assert len(rows) == 2

    def cell(row: str, column: str) -> str:  # columns are right-aligned under their header
        end = header.index(column) + len(column)
        return row[:end].split()[-1]

    for row in rows:
        assert cell(row, "starved") in ("yes", "no")
        assert cell(row, "KV blocks") == "60"
    for name in ("ttft_cdf.png", "ttft_vs_arrival.png", "queue_kv.png"):
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"


def test_figures_name_missing_columns():
    with pytest.raises(ValueError, match="waiting"):
        queue_and_kv_cached(pd.DataFrame({"start_s": [0.0], "kv_blocks_used": [2], "policy": ["a"]}))
    # a live step table (no KV columns): the queue panel alone
    fig = queue_and_kv_cached(pd.DataFrame({"start_s": [0.0, 1.0], "waiting": [1, 0], "policy": ["a", "a"]}))
    assert len(fig.axes) == 1
    with pytest.raises(ValueError, match="arrival_s"):
        ttft_vs_arrival(pd.DataFrame({"ttft_s": [1.0], "policy": ["a"]}))


AZURE_CONV = str(Path(__file__).resolve().parents[1] / "../shared/data/traces/AzureLLMInferenceTrace_conv.csv")


def test_colocated_plots_tpot_and_goodput(tmp_path, capsys):
    args = ["compare", "--policies", "fcfs,lpm", "--trace", AZURE_CONV, "--max-requests", "150",
            "--mode", "colocated"]
    assert main([*args, "--slo", "ttft=1,tpot=0.05", "--plots", str(tmp_path / "slo"),
                 "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "goodput (share meeting SLOs)" in out.splitlines()[3]  # the table's header
    for name in ("ttft_cdf.png", "ttft_vs_arrival.png", "queue_kv.png", "tpot_cdf.png", "goodput.png"):
        assert (tmp_path / "slo" / name).read_bytes()[:4] == b"\x89PNG"
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert 0 <= summary["fcfs"]["goodput_share"] <= 1  # the JSON key is unchanged
    assert main([*args, "--plots", str(tmp_path / "plain")]) == 0
    err = capsys.readouterr().err
    assert (tmp_path / "plain" / "tpot_cdf.png").exists() and not (tmp_path / "plain" / "goodput.png").exists()
    assert "no goodput.png: goodput needs --slo" in err


def test_goodput_figure_shares_by_hand():
    # SLO ttft <= 2 s, tpot <= 0.1 s: a meets it, b is slow to start, c decodes slowly, d has one
    # output token (no TPOT: meets a TPOT SLO, as vLLM counts it) -> policy p 2 of 4 = 0.5.
    reqs = pd.DataFrame({"policy": ["p"] * 4, "arrival_s": [0.0, 1.0, 2.0, 3.0],
                         "ttft_s": [1.0, 3.0, 1.0, 1.0], "tpot_s": [0.05, 0.05, 0.2, np.nan]})
    fig = goodput_figure(reqs, {"ttft": 2.0, "tpot": 0.1})
    (bar,) = fig.axes[0].patches
    assert bar.get_height() == 0.5
    with pytest.raises(ValueError, match="needs an SLO"):
        goodput_figure(reqs, {})
    fig = tpot_cdf(reqs)
    assert fig.axes[0].get_legend().get_texts()[0].get_text() == "p (3 of 4 requests)"


def test_binned_step_function_by_hand():
    # 2 on [0,1), 4 on [1,3), then 0 at 3 (the end); bins [0,2) and [2,4]
    mean, low, high = binned_step_function(np.array([0, 1, 3.0]), np.array([2, 4, 0.0]), np.array([0, 2, 4.0]))
    assert mean.tolist() == [3.0, 4.0]  # (2 x 1 + 4 x 1) / 2; then 4 held on [2,3), nothing after 3
    assert low.tolist() == [2.0, 0.0] and high.tolist() == [4.0, 4.0]
    mean, _, _ = binned_step_function(np.array([1, 3.0]), np.array([4, 0.0]), np.array([0, 2, 4, 6.0]))
    assert mean[:2].tolist() == [4.0, 4.0] and np.isnan(mean[2])  # nothing held before 1 or after 3


def test_long_queue_kv_is_aggregated():
    # 10,000 steps of 1 s alternating 0 / 10 waiting: per step it is a solid block; per 50 s bin
    # the mean is 5 and the band 0-10.
    n = 10_000
    steps = pd.DataFrame({"start_s": np.arange(n, dtype=float), "duration_s": 1.0,
                          "waiting": np.tile([0, 10], n // 2), "policy": "a"})
    fig = queue_and_kv_cached(steps)
    line = fig.axes[0].lines[0]
    assert n > MAX_STEP_POINTS and len(line.get_xdata()) == TIME_BINS + 1
    assert np.allclose(line.get_ydata()[:-1], 5.0, atol=0.03)
    short = queue_and_kv_cached(steps.iloc[:100])
    assert len(short.axes[0].lines[0].get_xdata()) == 101  # per step, and the idle end at 100 s


def test_arrival_plots_place_closed_loop_turns_at_their_send_time():
    # b follows a: recorded at 1 s, but sent at 5 s (a finished at 4 s, think time 1 s); TTFT is
    # measured from 5 s, so both figures place b at 5 s, and say so.
    reqs = pd.DataFrame({"policy": ["p", "p"], "arrival_s": [0.0, 1.0], "released_s": [0.0, 5.0],
                         "ttft_s": [1.0, 3.0], "tpot_s": [0.05, 0.05]})
    fig = ttft_vs_arrival(reqs)
    assert fig.axes[0].collections[0].get_offsets()[:, 0].tolist() == [0.0, 5.0]
    assert fig.axes[0].get_xlabel() == "arrival time (s; a closed-loop turn: when it was sent)"
    fig = goodput_figure(reqs, {"ttft": 2.0})
    right = fig.axes[1]
    assert right.get_xlabel() == "arrival time (simulated s; a closed-loop turn: when it was sent), 5 s bins"
    # one bin per request (sqrt(2) -> 1 bin: 0-5 s); the step line spans the send times
    assert right.lines[0].get_xdata().tolist() == [0.0, 5.0]
    # open loop (released_s = arrival_s): the plain label
    fig = ttft_vs_arrival(reqs.assign(released_s=reqs["arrival_s"]))
    assert fig.axes[0].collections[0].get_offsets()[:, 0].tolist() == [0.0, 1.0]
    assert fig.axes[0].get_xlabel() == "arrival time (s)"
