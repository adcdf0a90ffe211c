"""A reader's note about think times (taken as the gap between recorded arrivals) concerns
closed-loop replay only: under ``--replay open`` requests arrive at their timestamps and no
think time is used, so the note is neither printed nor written to ``run.json`` there."""

from __future__ import annotations

import json

import pytest

from fairsim.cli import main
from fairsim.traces.trace import ClosedLoopWarning

BAILIAN = [
    {"chat_id": 1, "parent_chat_id": -1, "timestamp": 0.0, "input_length": 40, "output_length": 5,
     "hash_ids": [1, 2, 3]},
    {"chat_id": 2, "parent_chat_id": 1, "timestamp": 3.5, "input_length": 60, "output_length": 5,
     "hash_ids": [1, 2, 3, 4]},
]
# Mooncake session rows with a timestamp and no delay: the think time is the arrival gap.
MOONCAKE = [
    {"timestamp": 0, "input_length": 1024, "output_length": 5, "hash_ids": [1, 2], "session_id": "s"},
    {"timestamp": 2000, "input_length": 1536, "output_length": 5, "hash_ids": [1, 2, 3], "session_id": "s"},
]
NOTES = {"bailian": "think time of 1 follow-up turn taken as the gap to the parent turn's arrival",
         "mooncake": "1 session turn has a timestamp but no delay; their think time is taken as the gap"}


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize("fmt, rows", [("bailian", BAILIAN), ("mooncake", MOONCAKE)])
@pytest.mark.parametrize("replay", ["open", "closed"])
def test_the_think_time_note_only_under_closed_loop(tmp_path, capsys, fmt, rows, replay):
    trace = _write(tmp_path / f"{fmt}.jsonl", rows)
    out = tmp_path / "out"
    code = main(["run", "--policy", "fcfs", "--trace", str(trace), "--replay", replay, "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 0, err
    written = json.loads((out / "run.json").read_text())["warnings"]
    said = [w for w in written if NOTES[fmt] in w]
    assert len(said) == (replay == "closed") and err.count(NOTES[fmt]) == (replay == "closed"), err


def test_the_note_is_a_plain_string_where_kept():
    note = ClosedLoopWarning("x: think time")
    assert note == "x: think time" and isinstance(note, str) and json.dumps([note]) == '["x: think time"]'


@pytest.mark.parametrize("replay, said", [("open", 0), ("closed", 1)])
def test_a_tiled_bench_says_the_note_only_under_closed_loop(tmp_path, capsys, replay, said):
    trace = _write(tmp_path / "b.jsonl", BAILIAN)
    code = main(["bench", "--policies", "fcfs", "--repeat", "1", "--tile", "2", "--trace", str(trace),
                 "--replay", replay, "--format", "json"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert err.count("think time of") == said, err
