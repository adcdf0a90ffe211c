"""What newuser-p's pass over ``analyze`` and ``accept`` found, each checked by hand."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fairsim.cli import main

# Five requests of 512-token blocks: hit rate by hand 2048 / 5208 tokens with an infinite cache.
ROWS = [
    {"timestamp": 0, "input_length": 1024, "output_length": 10, "hash_ids": [1, 2]},
    {"timestamp": 100, "input_length": 1536, "output_length": 10, "hash_ids": [1, 2, 3]},
    {"timestamp": 200, "input_length": 1024, "output_length": 10, "hash_ids": [4, 5]},
    {"timestamp": 300, "input_length": 1024, "output_length": 10, "hash_ids": [1, 2]},
    {"timestamp": 400, "input_length": 600, "output_length": 10, "hash_ids": [4, 6]},
]


def write_rows(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_analyze_into_a_closed_pipe_still_writes_its_report(tmp_path, fmt):
    # Was: `fairsim analyze TRACE --out o | head -1` exited 141 with o/ empty: the summary's print
    # raised BrokenPipeError before analysis.json, report.md and the figures were written.
    trace = write_rows(tmp_path / "t.jsonl", ROWS)
    r, w = os.pipe()
    os.close(r)  # the reader has left before the first line
    try:
        proc = subprocess.run([sys.executable, "-m", "fairsim", "analyze", str(trace), "--out", "o",
                               "--format", fmt], stdout=w, stderr=subprocess.PIPE, text=True,
                              cwd=tmp_path, timeout=300)
    finally:
        os.close(w)
    assert proc.returncode == 141 and "Traceback" not in proc.stderr
    data = json.loads((tmp_path / "o" / "analysis.json").read_text())
    assert data["requests"] == 5 and data["infinite_hit_rate"] == 2048 / 5208
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == [
        "analysis.json", "hit_curve.png", "load.png", "report.md", "spread.png"]
