"""Regressions from the new-user report (defects 3, 5, 7, 9, 10, 13) in analyze / accept."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fairsim.analysis.spread import queue_spread
from fairsim.cli import main

DATA = Path(__file__).parent / "data" / "formats"


class TestClosedLoopQueueEntry:
    """Defect 3: a closed-loop FCFS run releases turns after their timestamps; the spread must
    measure the queue from the release time (``released_s``), not the timestamp."""

    @pytest.mark.parametrize("trace", ["dynamo_trace.jsonl.gz", "claude_code"])
    def test_session_fixtures_analyze(self, trace, capsys):
        code = main(["analyze", str(DATA / trace), "--format", "json"])
        captured = capsys.readouterr()
        assert code == 0, captured.err
        data = json.loads(captured.out)
        assert data["spread"]["source"] == "FCFS simulation at the trace's timing"
        assert 0.0 <= data["spread"]["queued_share"] <= 1.0

    def test_error_names_the_request_id(self):
        with pytest.raises(ValueError, match="request 'r7': first scheduled at 0.5 s"):
            queue_spread(np.array([0.0, 1.0]), np.array([0.0, 0.5]), np.array([3.0, 3.0]), "x",
                         ids=["r1", "r7"])
