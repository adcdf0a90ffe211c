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


# -- the third pass -----------------------------------------------------------------------------

def test_special_files_are_refused_and_links_written_through(tmp_path, capsys):
    # Was: a FIFO, a device or a link at OUT replaced by a plain file, "wrote ..." and exit 0.
    import os

    from experiments import synth_toolagent

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert synth_toolagent.main(["--requests", "3", "--out", str(fifo)]) == 2
    assert "is not a regular file" in capsys.readouterr().err and fifo.is_fifo()
    src = tmp_path / "in.jsonl"
    src.write_text('{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}\n')
    code, _, err = run_cli(capsys, "convert", src, fifo)
    assert code == 2 and "is not a regular file" in err and fifo.is_fifo()
    target = tmp_path / "target.jsonl"
    target.write_text("old\n")
    link = tmp_path / "link.jsonl"
    link.symlink_to(target)
    assert synth_toolagent.main(["--requests", "3", "--out", str(link)]) == 0
    assert link.is_symlink() and len(target.read_text().splitlines()) == 3
    dangling = tmp_path / "dangling.jsonl"
    dangling.symlink_to(tmp_path / "nowhere" / "x.jsonl")
    code, _, err = run_cli(capsys, "convert", src, dangling)
    assert code == 2 and "which does not exist" in err


def test_skip_bad_drops_the_turns_that_follow_a_dropped_one(tmp_path, capsys):
    # Was: b1 (after a later request) skipped, but b2 (after b1) kept, then refused by the run.
    path = tmp_path / "t.jsonl"
    rows = [(0, "a1", None), (1000, "b1", "a3"), (3000, "a3", None), (4000, "b2", "b1"), (5000, "c", None)]
    path.write_text("".join(json.dumps({"timestamp": t, "input_length": 600, "output_length": 5, "hash_ids": [i, 99],
                                        "request_id": rid, **({"after": a, "delay": 100} if a else {})}) + "\n"
                            for i, (t, rid, a) in enumerate(rows)))
    trace = read_trace(path, skip_bad=True)
    assert [r.request_id for r in trace.requests] == ["a1", "a3", "c"]
    assert [str(e).split(": field")[0] for e in trace.skipped] == [f"{path}:2", f"{path}:4"]


def _policy_module(tmp_path, monkeypatch, name, body):
    (tmp_path / f"{name}.py").write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    return f"{name}:P"


def test_an_admission_limit_set_badly_in_order_is_the_policys_broken_contract(tmp_path, monkeypatch, capsys):
    # Was: "internal error (a bug in fairsim)": EngineInvariantError or a slice TypeError.
    spec = _policy_module(tmp_path, monkeypatch, "later_limit", (
        "class P:\n"
        "    admission_limit = None\n"
        "    def order(self, waiting, now):\n"
        "        self.admission_limit = 0\n"
        "        return list(waiting)\n"))
    code, _, err = run_cli(capsys, "run", "--policy", spec, "--max-requests", "20")
    assert code == 1
    assert "policy contract broken" in err and "admission_limit is 0 (int)" in err and "internal error" not in err


@pytest.mark.parametrize("hook, says, status", [
    ("Hook", "eviction_hook is the class Hook; give an instance", 2),
    ("42", "eviction_hook 42 (int) has no select(pool, n) method", 2),
    ("Bare()", "eviction_hook's select() cannot be called as select(pool, n)", 2),
    ("NoList()", "eviction hook NoList.select(pool, ", 1),
])
def test_eviction_hook_mistakes_are_the_teams(tmp_path, monkeypatch, capsys, hook, says, status):
    name = "hooky_" + "".join(c for c in hook if c.isalnum())  # (a module per case: imports are cached)
    spec = _policy_module(tmp_path, monkeypatch, name, (
        "class Hook:\n"
        "    def select(self, pool, n):\n"
        "        return list(pool.iter_free())[:n]\n"
        "class Bare:\n"
        "    def select(self):\n"
        "        return []\n"
        "class NoList:\n"
        "    def select(self, pool, n):\n"
        "        return None\n"
        "class P:\n"
        f"    eviction_hook = {hook}\n"
        "    def order(self, waiting, now):\n"
        "        return list(waiting)\n"))
    code, _, err = run_cli(capsys, "run", "--policy", spec, "--max-requests", "60", "--kv-blocks", "20")
    assert code == status and says in err and "internal error" not in err, err


def test_a_property_that_raises_is_the_policys_error(tmp_path, monkeypatch, capsys):
    spec = _policy_module(tmp_path, monkeypatch, "propraise", (
        "class P:\n"
        "    @property\n"
        "    def admission_limit(self):\n"
        "        raise RuntimeError('prop boom')\n"
        "    def order(self, waiting, now):\n"
        "        return list(waiting)\n"))
    code, _, err = run_cli(capsys, "run", "--policy", spec, "--max-requests", "20")
    assert code == 1 and "error in policy 'propraise:P' (P): RuntimeError: prop boom" in err
    assert f"(at {tmp_path / 'propraise.py'}, line 4)" in err


def test_a_pretty_printed_claude_code_document_with_requests_first_is_detected(tmp_path):
    # Was: longer than the 64 KiB head, its block_size after the list: "line 1 is not valid JSON".
    requests = [{"t": 2.0 * i, "in": 200 + i, "out": 10, "api_time": 1.0, "hash_ids": [1, 2, 3]} for i in range(600)]
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"requests": requests, "id": "x", "block_size": 64}, indent=2))
    assert path.stat().st_size > 65536
    assert detect(path) == "claude-code"
    assert len(read_trace(path).requests) == 600


@pytest.mark.parametrize("fmt", ["bailian", "dynamo"])
def test_a_wrong_trace_format_names_the_format_the_content_fits(capsys, fmt):
    # Was: Bailian's "field 'chat_id': missing" and Dynamo's "no request_end events" alone, where
    # the other readers name the format the content fits (docs/traces.md).
    code, _, err = run_cli(capsys, "run", "--trace", "fairsim/traces/data/conversation_window.jsonl",
                           "--trace-format", fmt, "--policy", "fcfs")
    assert code == 2
    assert err.rstrip().endswith(f"[read as {fmt}, as --trace-format asked; the content looks like mooncake: give "
                                 "--trace-format mooncake (or auto)]")


def test_without_timestamps_a_row_placed_by_after_arrives_its_delay_after_that_request(tmp_path):
    # Was: b2 (after b1, delay 250 ms, no session) arrived with b1, its delay left out of the
    # open-loop arrival (closed loop released it right: finish(b1) + 0.25 s).
    path = tmp_path / "notime.jsonl"
    rows = [{"session_id": "s1", "request_id": "a1"}, {"session_id": "s1", "request_id": "a2", "delay": 500},
            {"session_id": "s2", "request_id": "b1"}, {"request_id": "b2", "after": "b1", "delay": 250}]
    path.write_text("".join(json.dumps({"input_length": 600, "output_length": 5, "hash_ids": [i, 7], **r}) + "\n"
                            for i, r in enumerate(rows)))
    got = {r.request_id: (r.arrival_time, r.after, r.delay_s) for r in read_trace(path).requests}
    assert got == {"a1": (0.0, None, 0.0), "a2": (0.5, "a1", 0.5), "b1": (0.0, None, 0.0), "b2": (0.25, "b1", 0.25)}
