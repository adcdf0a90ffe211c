"""A trace label named like a result column is written beside it, never over it
(``fairsim/sim/label_columns.py``; found by the twentieth session's new-user pass)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from fairsim.cli import main
from fairsim.sim.label_columns import RESULT_REQUEST_COLUMNS, label_columns


def test_label_columns_by_hand():
    assert label_columns(["doc", "ttft_s", "trace_ttft_s", "policy"]) == [
        ("doc", "doc"), ("ttft_s", "trace_trace_ttft_s"), ("trace_ttft_s", "trace_ttft_s"),
        ("policy", "trace_policy")]
    assert label_columns(["trace_ttft_s", "ttft_s"]) == [("trace_ttft_s", "trace_ttft_s"),
                                                         ("ttft_s", "trace_trace_ttft_s")]
    assert label_columns([]) == []


def _rows(labels: bool) -> list[dict]:
    rows = []
    for i in range(6):
        r = {"timestamp": 400 * i, "input_length": 600 + 100 * i, "output_length": 5, "hash_ids": [1, 2 + i]}
        if labels:
            r.update(ttft_s=3.0, cached_tokens=7, prompt_tokens=3, finish_s=1.0, doc=i)
        rows.append(r)
    return rows


@pytest.mark.parametrize("mode", [(), ("--mode", "colocated"), ("--instances", "2"),
                                  ("--mode", "disaggregated", "--prefill-instances", "1", "--decode-instances", "1")])
def test_every_mode_writes_only_known_columns_and_labels_beside_them(tmp_path, capsys, mode):
    tables = {}
    for labels in (False, True):
        (tmp_path / f"{int(labels)}").mkdir()
        trace = tmp_path / f"{int(labels)}" / "t.jsonl"  # one name: the same request ids
        trace.write_text("".join(json.dumps(r) + "\n" for r in _rows(labels)))
        out = tmp_path / f"o{int(labels)}"
        code = main(["run", "--trace", str(trace), "--policy", "fcfs", "--format", "json", "--out", str(out), *mode])
        printed, err = capsys.readouterr()
        assert code == 0, err
        tables[labels] = (pd.read_parquet(out / "requests-fcfs.parquet"), json.loads(printed)["fcfs"])
    (plain, plain_sum), (labelled, labelled_sum) = tables[False], tables[True]
    assert set(plain.columns) <= RESULT_REQUEST_COLUMNS
    assert set(labelled.columns) - set(plain.columns) == {"trace_ttft_s", "trace_cached_tokens",
                                                          "trace_prompt_tokens", "trace_finish_s", "doc"}
    pd.testing.assert_frame_equal(labelled[list(plain.columns)], plain)
    assert labelled["trace_ttft_s"].tolist() == [3.0] * 6 and labelled["trace_prompt_tokens"].tolist() == [3] * 6
    for key in ("ttft_p50_s", "ttft_p99_s", "hit_rate", "throughput_tokens_per_s", "queue_delay_p50_s"):
        assert labelled_sum[key] == plain_sum[key], key
