"""--plots on run/compare, and starved / KV size in the printed table."""

from __future__ import annotations

import pandas as pd
import pytest

from fairsim.cli import main
from fairsim.run_plots import queue_and_kv_cached, ttft_vs_arrival


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
