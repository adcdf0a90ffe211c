"""What the twenty-fifth session's new-user pass found, each checked by hand."""

from __future__ import annotations

import gzip
import json

import pytest

from fairsim.cli import main
from fairsim.errors import OutputError
from fairsim.traces.formats import detect, read_trace


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


# A Claude Code session laid out one request per line: its first line is no JSON value alone,
# its second is a whole object (one request), which the head took as the first record.
ONE_PER_LINE = ('{"block_size": 64, "requests": [\n'
                '{"t": 0.0, "in": 200, "out": 10, "api_time": 1.0, "hash_ids": [1, 2, 3]},\n'
                '{"t": 5.0, "in": 300, "out": 10, "api_time": 1.0, "hash_ids": [1, 2, 3, 4]}\n'
                ']}\n')


@pytest.mark.parametrize("indent", ["", " ", "\t"])
def test_a_claude_code_document_with_one_request_per_line_is_detected(tmp_path, indent):
    # Was: "line 1 is not valid JSON ...; give --trace-format" for the file, and "this one is
    # neither" for a folder of them, although --trace-format claude-code read both.
    path = tmp_path / "s.json"
    path.write_text(ONE_PER_LINE.replace("\n{", "\n" + indent + "{"))
    assert detect(path) == "claude-code"
    folder = tmp_path / "sessions"
    folder.mkdir()
    (folder / "a.json").write_text(path.read_text())
    (folder / "b.json").write_text(path.read_text())
    assert detect(folder) == "claude-code"
    trace = read_trace(path)
    assert [r.prompt_len for r in trace.requests] == [200, 300]
    # The second request follows the first: its gap is 5 - 0 - 1.0 (api_time) = 4 s.
    assert trace.requests[1].after == trace.requests[0].request_id
    assert trace.requests[1].delay_s == pytest.approx(4.0)


def test_a_jsonl_file_is_not_taken_for_a_claude_code_document(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}\n'
                    '{"timestamp": 5, "input_length": 600, "output_length": 5, "hash_ids": [1, 3]}\n')
    assert detect(path) == "mooncake"


def test_a_claude_code_request_before_the_one_it_follows_is_refused(tmp_path, capsys):
    # Was: read, requests[1] (t = 0) released after requests[0] (t = 5) ended, its -6 s gap
    # clamped to 0 without a word. A start before the predecessor's end (jitter) stays clamped.
    path = tmp_path / "cc.json"
    path.write_text(json.dumps({"block_size": 64, "requests": [
        {"t": 5.0, "in": 200, "out": 10, "api_time": 1.0, "hash_ids": [1, 2, 3]},
        {"t": 0.0, "in": 300, "out": 10, "api_time": 1.0, "hash_ids": [1, 2, 3, 4]}]}))
    code, _, err = run_cli(capsys, "run", "--trace", path, "--policy", "fcfs")
    assert code == 2
    assert "cc.json: requests[1]: field 't'" in err and "a session's requests are in time order" in err
    assert "Traceback" not in err
    skipped = read_trace(path, skip_bad=True)
    assert len(skipped.requests) == 1 and len(skipped.skipped) == 1
    jitter = tmp_path / "jitter.json"
    jitter.write_text(json.dumps({"block_size": 64, "requests": [
        {"t": 5.0, "in": 200, "out": 10, "api_time": 1.0, "hash_ids": [1, 2, 3]},
        {"t": 5.5, "in": 300, "out": 10, "api_time": 1.0, "hash_ids": [1, 2, 3, 4]}]}))
    second = read_trace(jitter).requests[1]
    assert second.delay_s == 0.0 and second.after is not None


def test_an_after_naming_a_later_request_is_refused(tmp_path, capsys):
    # Was: read, request a (recorded at 0 s) released 0.1 s after b (recorded at 0.5 s) finished.
    path = tmp_path / "after.jsonl"
    path.write_text(
        '{"request_id":"a","after":"b","delay":100,"timestamp": 0, "input_length": 1000, "output_length": 10, '
        '"hash_ids": [0, 1]}\n'
        '{"request_id":"b","timestamp": 500, "input_length": 1600, "output_length": 10, "hash_ids": [0, 1, 2, 3]}\n')
    code, _, err = run_cli(capsys, "run", "--trace", path, "--policy", "fcfs")
    assert code == 2
    assert "after.jsonl:1: field 'after'" in err and "(line 2), which arrives later (0.5 s)" in err
    # Equal arrivals are no reversal.
    same = tmp_path / "same.jsonl"
    same.write_text(path.read_text().replace('"timestamp": 500', '"timestamp": 0'))
    assert [r.request_id for r in read_trace(same).requests] == ["a", "b"]


def test_dynamo_rows_without_replay_hashes_are_counted_in_a_warning(tmp_path):
    # Was: read with no word; a misplaced hash list gave a 0 % hit rate silently.
    path = tmp_path / "dy.jsonl.gz"
    rows = [{"event_type": "request_end", "event_time_unix_ms": 1500 + 1000 * i,
             "request": {"request_received_ms": 1000 + 1000 * i, "input_tokens": 40, "output_tokens": 5,
                         "hash_ids": [1, 2]}} for i in range(2)]
    with gzip.open(path, "wt") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rows)
    trace = read_trace(path)
    assert len(trace.requests) == 2 and all(r.block_hashes == () for r in trace.requests)
    assert any("2 requests have no request.replay.input_sequence_hashes" in w for w in trace.warnings)


def test_a_policy_whose_tables_cannot_be_written_is_still_printed(tmp_path, capsys, monkeypatch):
    # Was: a full disk while writing the first policy's tables lost its computed row (nothing
    # printed) and ran no more policies; now its row is printed, marked as not in the files.
    import fairsim.run as run_mod

    real = run_mod.write_tables

    def full_disk(out, name, *args, **kwargs):
        if name == "lpm":
            raise OutputError(out / "steps-lpm.parquet", "cannot write: No space left on device")
        return real(out, name, *args, **kwargs)

    monkeypatch.setattr(run_mod, "write_tables", full_disk)
    out = tmp_path / "o"
    code, stdout, err = run_cli(capsys, "compare", "--policies", "fcfs,lpm,fairway", "--out", out)
    assert code == 2
    table = stdout[stdout.index("\npolicy "):].splitlines()[2:]
    assert [line.split()[0] for line in table[:3]] == ["fcfs", "lpm", "p50"]
    assert "the 2 of 3 policies that finished (fcfs, lpm); lpm: its tables were not written" in err
    assert "steps-lpm.parquet: cannot write" in err
    assert list(json.loads((out / "summary.json").read_text())) == ["fcfs"]
