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
