"""RAGPulse weeks: a file (or folder) of several weeks is never overlaid on one time axis."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from fairsim.cli import main
from fairsim.traces import load_trace
from fairsim.traces.formats import ragpulse

DATA = Path(__file__).parent / "data" / "formats"
WEEK = 604800


def records(stamps_and_sessions):
    """Fixture-shaped records (side files of ``tests/data/formats/ragpulse``) at these times."""
    base = json.loads((DATA / "ragpulse" / "0_trace.jsonl").read_text().splitlines()[0])
    return [json.dumps({**base, "timestamp": str(ts), "session_id": sid}) for ts, sid in stamps_and_sessions]


@pytest.fixture
def two_weeks(tmp_path):
    """Week 1 (lines 1-3, 0 .. 604700 s) then week 2 (lines 4-5, restarting at 5 s), one file."""
    folder = Path(shutil.copytree(DATA / "ragpulse", tmp_path / "rp"))
    lines = records([(0, "u1"), (3, "u2"), (WEEK - 100, "u1"), (5, "u1"), (9, "u1")])
    (folder / "0_trace.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def test_two_weeks_are_refused_without_a_choice(two_weeks):
    with pytest.raises(ValueError) as info:
        load_trace(two_weeks)
    msg = str(info.value)
    assert msg.startswith(f"{two_weeks / '0_trace.jsonl'}:4: field 'timestamp': the time axis restarts here "
                          f"(5 s after 604700 s on an earlier line): the file holds 2 parts")
    assert "part 1: lines 1-3, timestamps 0-604700 s, 3 requests; part 2: lines 4-5, timestamps 5-9 s, " \
           "2 requests" in msg and msg.endswith("choose one with --trace-part N")


@pytest.mark.parametrize("part, arrivals, follows", [
    (1, [0.0, 3.0, WEEK - 100.0], [None, None, 0]),
    # Week 2 alone, rebased to its first request; its u1 turns link within the week only.
    (2, [0.0, 4.0], [None, 0]),
])
def test_a_chosen_week(two_weeks, part, arrivals, follows):
    t = load_trace(two_weeks, part=part)
    assert t.name == f"rp-part{part}"
    assert [r.arrival_time for r in t.requests] == arrivals
    ids = [r.request_id for r in t.requests]
    assert [r.after for r in t.requests] == [None if i is None else ids[i] for i in follows]
    if part == 2:
        assert t.requests[1].delay_s == 4.0  # 9 - 5 s, not 9 - (604800 - 100)
    assert any(f"read part {part}: lines" in w and "of 2 (--trace-part)" in w for w in t.warnings)


def test_a_part_the_file_has_not(two_weeks):
    with pytest.raises(ValueError, match=r"--trace-part 3: .*0_trace.jsonl has 2 parts \(part 1: lines 1-3"):
        load_trace(two_weeks, part=3)
    with pytest.raises(ValueError, match=r"--trace-part 0: need a part number >= 1"):
        load_trace(two_weeks, part=0)


def test_one_week_reads_as_before_and_part_1_is_it(tmp_path):
    t = load_trace(DATA / "ragpulse")
    one = load_trace(DATA / "ragpulse", part=1)
    assert t.name == one.name == "ragpulse" and [r.arrival_time for r in one.requests] == [0.0, 3.0, 7.0]
    assert not any("--trace-part" in w for w in one.warnings)


def test_small_steps_back_are_sorted_and_counted(tmp_path):
    folder = Path(shutil.copytree(DATA / "ragpulse", tmp_path / "rp"))
    # 3599 s back is under RESTART_S: one week, logged out of order.
    (folder / "0_trace.jsonl").write_text("\n".join(records([(0, "a"), (4000, "b"), (401, "c")])) + "\n")
    assert 4000 - 401 < ragpulse.RESTART_S
    t = load_trace(folder)
    assert [r.arrival_time for r in t.requests] == [0.0, 401.0, 4000.0]
    assert any("1 records have a timestamp earlier than the record before them" in w for w in t.warnings)
    (folder / "0_trace.jsonl").write_text("\n".join(records([(0, "a"), (4000, "b"), (400, "c")])) + "\n")
    with pytest.raises(ValueError, match="holds 2 parts"):  # 3600 s back: a restart
        load_trace(folder)


def test_a_folder_of_several_week_files_names_them(tmp_path):
    folder = Path(shutil.copytree(DATA / "ragpulse", tmp_path / "rp"))
    shutil.copy(folder / "0_trace.jsonl", folder / "0_trace_week2.jsonl")
    with pytest.raises(ValueError, match=r"rp: holds 2 RAGPulse trace files \(0_trace.jsonl, 0_trace_week2.jsonl\)"):
        load_trace(folder)
    t = load_trace(folder / "0_trace_week2.jsonl")  # one week, by name
    assert len(t.requests) == 3


def test_a_folder_of_week_folders_names_them(tmp_path):
    for week in ("week1", "week2"):
        shutil.copytree(DATA / "ragpulse", tmp_path / "data" / week)
    with pytest.raises(ValueError, match=r"data: is no trace folder itself; its subfolders look like trace "
                                         r"folders: week1 \(ragpulse\), week2 \(ragpulse\); give one of them"):
        load_trace(tmp_path / "data")


def test_part_of_a_format_without_parts():
    with pytest.raises(ValueError, match=r"--trace-part 2: .*mooncake.jsonl is a mooncake trace, which has one "
                                         r"time axis; --trace-part chooses a part \(a week\) of ragpulse files"):
        load_trace(DATA / "mooncake.jsonl", part=2)


def test_cli(two_weeks, tmp_path, capsys):
    assert main(["run", "--trace", str(two_weeks), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "the time axis restarts here" in err and "Traceback" not in err
    assert main(["run", "--trace", str(two_weeks), "--trace-part", "2", "--out", str(tmp_path / "o")]) == 0
    assert main(["run", "--trace-part", "2", "--out", str(tmp_path / "o2")]) == 2
    assert "--trace-part 2: needs --trace" in capsys.readouterr().err
    out = tmp_path / "week2.jsonl"
    assert main(["convert", str(two_weeks), str(out), "--trace-part", "2"]) == 0
    assert [json.loads(x)["timestamp"] for x in out.read_text().splitlines()] == [0, 4000]
