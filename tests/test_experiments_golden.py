"""Golden runs: each experiment on its tiny configuration matches a stored summary.

Regenerate after an intended change with ``FAIRSIM_UPDATE_GOLDEN=1 python -m pytest
tests/test_experiments_golden.py`` and review the diff of ``tests/golden/*.json``.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from experiments import e1_spike, e2_scenarios, e3_flood, e4_ablation

GOLDEN = Path(__file__).parent / "golden"
EXPERIMENTS = {"e1": e1_spike, "e2": e2_scenarios, "e3": e3_flood, "e4": e4_ablation}


def assert_close(got, want, path="summary"):
    """Recursive comparison; floats to 1e-5 relative (summaries are rounded to 6 digits)."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and sorted(got) == sorted(want), f"{path}: keys differ"
        for k in want:
            assert_close(got[k], want[k], f"{path}.{k}")
    elif isinstance(want, float) and not isinstance(want, bool):
        assert math.isclose(got, want, rel_tol=1e-5, abs_tol=1e-9), f"{path}: {got} != {want}"
    else:
        assert got == want, f"{path}: {got!r} != {want!r}"


@pytest.mark.parametrize("name", sorted(EXPERIMENTS))
def test_tiny_matches_golden(name, tmp_path):
    out = tmp_path / name
    assert EXPERIMENTS[name].main(["--tiny", "--out", str(out)]) == 0
    got = json.loads((out / "summary.json").read_text())
    assert list(out.glob("*.png")), "no figure written"
    assert (out / "requests.parquet").is_file()
    golden = GOLDEN / f"{name}.json"
    if os.environ.get("FAIRSIM_UPDATE_GOLDEN"):
        golden.write_text(json.dumps(got, indent=2, sort_keys=True) + "\n")
    assert_close(got, json.loads(golden.read_text()))
