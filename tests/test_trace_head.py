"""The head a trace's format is told from (``fairsim.traces.formats._common.read_head``): which
line is its first record, and that a CSV's rows are not decoded as JSON to find it."""

from __future__ import annotations

import json

import pytest

from fairsim.traces.formats._common import read_head

ROW = '{"timestamp": 0, "input_length": 600, "output_length": 2, "hash_ids": [1, 2]}'


@pytest.mark.parametrize(("text", "first"), [
    (ROW + "\n", json.loads(ROW)),
    ("\n\n" + ROW + "\n", json.loads(ROW)),  # blank lines first
    ("\ufeff" + ROW + "\n", json.loads(ROW)),  # a byte order mark
    (ROW[:-5] + "\n" + ROW + "\n", json.loads(ROW)),  # a first record cut short: the next one
    ("x" + ROW + "\n" + ROW.replace("600", "700") + "\n", {**json.loads(ROW), "input_length": 700}),
    ("x" + ROW + "\n  \ufeff" + ROW + "\n", None),  # (a BOM within a line is not JSON's whitespace)
    ("{\n" + ROW + "\n", None),  # a pretty-printed document: its own sniff reads it
    ("[1, 2]\n", [1, 2]),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,4000,10\n", None),
    ("TIMESTAMP,ContextTokens\n1,2\n" + ROW + "\n", json.loads(ROW)),
])
def test_the_first_record(tmp_path, text, first):
    path = tmp_path / "t"
    path.write_bytes(text.encode())
    assert read_head(path).first_record == first


def test_a_csv_head_is_not_decoded_row_by_row(tmp_path, monkeypatch):
    # Was: each of the ~1,800 rows of a 64 KiB Azure head went to json.loads and failed (9 ms of
    # every CSV run); only the first line and lines that open an object are tried now.
    path = tmp_path / "a.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                    + "2023-11-16 18:15:46.6805900,4000,10\n" * 3000)
    calls = []
    loads = json.loads
    monkeypatch.setattr(json, "loads", lambda s, *a, **k: calls.append(s) or loads(s, *a, **k))
    head = read_head(path)
    assert head.first_record is None and len(head.data) >= 64 * 1024
    assert calls == ["TIMESTAMP,ContextTokens,GeneratedTokens"]
