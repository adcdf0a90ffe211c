"""What a new user's pass over reading and converting traces found (session newuser-g)."""

from __future__ import annotations

import gzip
import json

import pytest

from fairsim.cli import main
from fairsim.errors import TraceFormatError
from fairsim.traces.formats import read_trace


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


ROW = '{"timestamp": 0, "input_length": 1000, "output_length": 10, "hash_ids": [1, 2]'


@pytest.mark.parametrize("extra, field", [
    (', "request_id": "a\\ud800"', "request_id"),
    (', "session_id": "\\udc80"', "session_id"),
    (', "tags": ["ok", "x\\ud800"]', "tags[1]"),
    (', "meta": {"who": "\\ud800"}', "meta.who"),
])
def test_a_lone_surrogate_escape_is_refused_at_its_line_and_field(tmp_path, capsys, extra, field):
    # Was: read and simulated, then "fairsim: error: 'utf-8' codec can't encode character
    # '\ud800' ..." (no file, line or field) when --out wrote the tables, the results not printed.
    path = tmp_path / "m.jsonl"
    path.write_text(ROW + extra + "}\n")
    code, out, err = run_cli(capsys, "run", "--trace", path, "--policy", "fcfs", "--out", tmp_path / "o")
    assert code == 2
    assert f"m.jsonl:1: field '{field}': holds a lone UTF-16 surrogate escape" in err
    assert "codec" not in err
    assert not (tmp_path / "o" / "requests-fcfs.parquet").exists()


def test_a_surrogate_pair_escape_is_a_character_and_is_read(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text(ROW + ', "request_id": "\\ud83d\\ude00"}\n')
    assert [r.request_id for r in read_trace(path).requests] == ["\U0001F600"]


def test_skip_bad_skips_a_row_with_a_lone_surrogate(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text(ROW + ', "request_id": "\\ud800"}\n'
                    + ROW.replace('"timestamp": 0', '"timestamp": 5') + ', "request_id": "b"}\n')
    trace = read_trace(path, skip_bad=True)
    assert [r.request_id for r in trace.requests] == ["b"]
    assert len(trace.skipped) == 1 and trace.skipped[0].field == "request_id"


def test_a_lone_surrogate_in_a_claude_code_document_is_refused(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"block_size": 64, "requests": [
        {"t": 0.0, "in": 200, "out": 10, "model": "\ud800", "hash_ids": [1, 2, 3]}]}))
    with pytest.raises(TraceFormatError) as err:
        read_trace(path)
    assert (err.value.line, err.value.field) == ("requests[0]", "model")


def test_a_lone_surrogate_in_a_dynamo_row_is_refused(tmp_path):
    path = tmp_path / "d.jsonl.gz"
    row = {"schema": "dynamo.request.trace.v1", "event_type": "request_end", "event_time_unix_ms": 1000,
           "agent_context": {"session_id": "\ud800"},
           "request": {"request_id": "r1", "input_tokens": 48, "output_tokens": 5, "request_received_ms": 0,
                       "replay": {"trace_block_size": 16, "input_length": 48, "input_sequence_hashes": [1, 2, 3]}}}
    path.write_bytes(gzip.compress((json.dumps(row) + "\n").encode()))
    with pytest.raises(TraceFormatError) as err:
        read_trace(path)
    assert (err.value.line, err.value.field) == (1, "agent_context.session_id")


def _dynamo_end(rid, received_ms, done_ms, session, parent=None, hashes=(11, 12, 13)):
    ctx = {"session_id": session}
    if parent is not None:
        ctx["parent_session_id"] = parent
    row = {"schema": "dynamo.request.trace.v1", "event_type": "request_end", "agent_context": ctx,
           "request": {"request_id": rid, "input_tokens": 16 * len(hashes), "output_tokens": 5,
                       "request_received_ms": received_ms,
                       "replay": {"trace_block_size": 16, "input_length": 16 * len(hashes),
                                  "input_sequence_hashes": list(hashes)}}}
    if done_ms is not None:
        row["event_time_unix_ms"] = done_ms
    return row


def _write_dynamo(path, rows):
    path.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in rows).encode()))
    return path


def test_a_dynamo_turn_after_a_request_without_completion_time_warns(tmp_path):
    # Was: the think time silently taken as the gap to the previous turn's arrival (0.7 s here
    # instead of 0.2 s after the recorded completion), unlike every other reader, which warns.
    path = _write_dynamo(tmp_path / "d.jsonl.gz", [
        _dynamo_end("r1", 1_000, 1_500, "main"), _dynamo_end("r2", 2_000, None, "main"),
        _dynamo_end("r3", 2_700, 3_000, "main")])
    trace = read_trace(path)
    by_id = {r.request_id: r for r in trace.requests}
    assert by_id["r2"].delay_s == pytest.approx(0.5)  # after r1's recorded completion
    assert by_id["r3"].delay_s == pytest.approx(0.7)  # r2 has none: the gap to its arrival
    gaps = [w for w in trace.warnings if "no completion time" in w]
    assert gaps == [f"{path}: 1 turn follows a request with no completion time (no event_time_unix_ms or "
                    "request.total_time_ms): the think time is taken as the gap to that request's arrival "
                    "(an upper bound)"]


def test_a_dynamo_trace_with_every_completion_has_no_gap_warning(tmp_path):
    path = _write_dynamo(tmp_path / "d.jsonl.gz", [
        _dynamo_end("r1", 1_000, 1_500, "main"), _dynamo_end("r2", 2_000, 2_200, "main")])
    assert read_trace(path).warnings == ()


@pytest.mark.parametrize("parent", ["nowhere", "sub"])
def test_a_dynamo_sub_agent_whose_parent_has_no_earlier_turn_warns(tmp_path, parent):
    # Was: "nowhere" (no such session) or "sub" (its own session) passed over without a word,
    # the sub-agent replayed as an independent session; Bailian's reader says so for its turns.
    path = _write_dynamo(tmp_path / "d.jsonl.gz", [
        _dynamo_end("r1", 1_000, 1_500, "main"), _dynamo_end("r2", 1_600, 1_900, "sub", parent, (21, 22))])
    trace = read_trace(path)
    sub = next(r for r in trace.requests if r.request_id == "r2")
    assert sub.after is None and sub.arrival_time == pytest.approx(0.6)
    assert [w for w in trace.warnings if "parent_session_id" in w] == [
        f"{path}: 1 sub-agent turn names an agent_context.parent_session_id with no turn arriving before it "
        "(not in the file, later, or its own session); each starts on its own, at its recorded arrival"]
    linked = _write_dynamo(tmp_path / "ok.jsonl.gz", [
        _dynamo_end("r1", 1_000, 1_500, "main"), _dynamo_end("r2", 1_600, 1_900, "sub", "main", (21, 22))])
    trace = read_trace(linked)
    assert next(r for r in trace.requests if r.request_id == "r2").after == "r1"
    assert trace.warnings == ()
