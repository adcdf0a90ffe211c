"""The analysis notebook executes (nbclient) on a small sweep and draws its figures."""

from __future__ import annotations

import os
from pathlib import Path

from fairsim.sweep import run_sweep

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK = REPO / "notebooks" / "sweep_results.ipynb"


def test_notebook_runs_on_small_sweep(tmp_path, monkeypatch):
    import nbclient  # in the test extra: CI must execute the notebook, never skip it
    import nbformat
    spec = {"scenarios": [{"name": "rag", "params": {"num_requests": 120}},
                          {"name": "sec-dyn1", "params": {"calm_s": 20.0, "burst_s": 20.0,
                                                          "spike_s": 10.0}}],
            "policies": ["fcfs", {"name": "fairway", "grid": {"fast_weight": [2, 4]}}]}
    out = tmp_path / "sweep"
    run_sweep(spec, out, workers=1, progress=False, log=lambda s: None)
    monkeypatch.setenv("FAIRSIM_SWEEP_DIR", str(out))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(REPO / "notebooks")}}).execute()
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    # 2 CDFs + 1 window chart (sec-dyn1) + 2 queue/KV charts
    assert len(images) == 5
    assert any("drew 5 figures" in o.get("text", "") for o in outputs)
