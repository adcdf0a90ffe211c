"""Regressions found by a third new-user pass (each failed before its fix)."""

from __future__ import annotations

import json

import pytest

from fairsim.cli import main


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def write_lines(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize("ids, first, second", [([5, 5, 5], 0, 1), ([0, 1, 0, 1], 0, 2), ([5, 6, 5], 0, 2)])
def test_repeated_chained_id_is_refused_at_load(tmp_path, capsys, ids, first, second):
    # Was: KeyError inside the engine (exit 1). Chained ids cannot repeat within one prompt.
    trace = write_lines(tmp_path / "t.jsonl", [
        {"timestamp": 0, "input_length": 512, "output_length": 1, "hash_ids": [9]},
        {"timestamp": 10, "input_length": 512 * len(ids), "output_length": 5, "hash_ids": ids}])
    code, _, err = run_cli(capsys, "run", "--trace", trace)
    assert code == 2
    assert f"{trace}:2: field 'hash_ids': id {ids[first]} stands at positions {first} and {second}" in err


@pytest.fixture
def exit_policy(tmp_path, monkeypatch):
    pkg = tmp_path / "exitpol"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "p.py").write_text("class Exit:\n    def order(self, waiting, now):\n        raise SystemExit(0)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return "exitpol.p:Exit"


@pytest.mark.parametrize("argv", [["run", "--policy", "{p}"], ["compare", "--policies", "fcfs,{p}"]])
def test_sys_exit_in_a_policy_is_its_failure(capsys, exit_policy, argv):
    # Was: exit 0 with no table (SystemExit passed through the engine and the CLI).
    code, _, err = run_cli(capsys, *[a.format(p=exit_policy) for a in argv], "--max-requests", 20)
    assert code == 1 and f"error in policy '{exit_policy}' (Exit): SystemExit: 0" in err


@pytest.mark.parametrize("param, message", [
    ("profile=3", "policy 'fairway': 'profile' comes from --profile, not from --param"),
    ("name=x", "policy 'fairway': bad parameters {'name': 'x'}; accepted: fast_weight"),
])
def test_reserved_param_names_exit_2(capsys, param, message):
    # Was: TypeError "make_policy() got multiple values for argument 'profile'" (exit 1).
    code, _, err = run_cli(capsys, "run", "--policy", "fairway", "--param", param, "--max-requests", 5)
    assert code == 2 and message in err


def test_param_scoped_to_a_user_class(tmp_path, monkeypatch, capsys):
    # Was: "--param tpol.p:Rev.flip: policy 'tpol' is not among those run" (the first dot was the scope).
    (tmp_path / "revpol3.py").write_text(
        "class Rev:\n    def __init__(self, flip=True):\n        self.flip = flip\n"
        "    def order(self, waiting, now):\n"
        "        w = sorted(waiting, key=lambda q: (q.arrival_time, q.request_id))\n"
        "        return w[::-1] if self.flip else w\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    code, out, _ = run_cli(capsys, "compare", "--policies", "fcfs,revpol3:Rev", "--param", "revpol3:Rev.flip=false",
                           "--max-requests", 40, "--format", "json")
    assert code == 0, _
    rows = json.loads(out)
    assert rows["revpol3:Rev"]["ttft_p99_s"] == rows["fcfs"]["ttft_p99_s"]  # flip=false is FCFS's order
    code, _, err = run_cli(capsys, "compare", "--policies", "fcfs,revpol3:Rev", "--param", "other:X.flip=1",
                           "--max-requests", 5)
    assert code == 2 and "--param other:X.flip: policy 'other:X' is not among those run" in err


def test_detected_format_is_named(tmp_path, capsys):
    # Was: a Mooncake file with chat_id labels was read as Bailian and nothing said so; then
    # (pass 3) refused, pointing at mooncake. Its 512-token id counts now make it Mooncake's
    # (pass 20), and a file whose counts fit Bailian's 16 stays Bailian's.
    rows = [{"timestamp": 0, "input_length": 1100, "output_length": 20, "hash_ids": [0, 1, 2],
             "chat_id": 5, "parent_chat_id": -1},
            {"timestamp": 500, "input_length": 1300, "output_length": 10, "hash_ids": [0, 1, 3],
             "chat_id": 6, "parent_chat_id": -1}]
    trace = write_lines(tmp_path / "mc.jsonl", rows)
    for named in ((), ("--trace-format", "mooncake")):
        code, out, err = run_cli(capsys, "run", "--trace", trace, *named)
        assert code == 0 and out.startswith("trace mc (mooncake format): offered load: 2 requests over 0.5 s")
        assert "misreads" not in err
    rows[0]["input_length"] = 40  # 3 ids: ceil(40 / 16), Bailian's 16-token blocks
    trace = write_lines(tmp_path / "bl.jsonl", rows)
    code, _, err = run_cli(capsys, "run", "--trace", trace)
    assert code == 2 and f"{trace}:2: field 'hash_ids': has 3 ids but 1300 tokens span 82 blocks of 16" in err
    assert "mooncake" not in err


def bailian_row(chat, parent, ts):
    return {"chat_id": chat, "parent_chat_id": parent, "timestamp": ts, "input_length": 40,
            "output_length": 5, "type": "text", "turn": 1, "hash_ids": [chat * 10, chat * 10 + 1, chat * 10 + 2]}


@pytest.mark.parametrize("rows, message", [
    ([bailian_row(1, 2, 0.0), bailian_row(2, 1, 1.0)],
     ":1: field 'parent_chat_id': 2: names chat 2 (line 2, timestamp 1 s), which does not arrive before this turn"),
    ([bailian_row(1, -1, 0.0), bailian_row(2, 3, 1.0), bailian_row(3, -1, 2.0)],
     ":2: field 'parent_chat_id': 3: names chat 3 (line 3, timestamp 2 s), which does not arrive"),
    ([bailian_row(1, 1, 0.0)], ":1: field 'parent_chat_id': 1: names the turn itself"),
])
def test_bailian_parent_in_file_but_not_before_is_refused(tmp_path, capsys, rows, message):
    # Was: "1 turns name a parent_chat_id not in the file" (false: the parent is in the file), exit 0.
    trace = write_lines(tmp_path / "b.jsonl", rows)
    code, _, err = run_cli(capsys, "run", "--trace", trace, "--trace-format", "bailian")
    assert code == 2 and f"{trace}{message}" in err


def test_bailian_skip_bad_drops_the_whole_cycle(tmp_path):
    from fairsim.traces.formats import read_trace

    trace = read_trace(write_lines(tmp_path / "b.jsonl", [bailian_row(1, 2, 0.0), bailian_row(2, 1, 1.0),
                                                         bailian_row(3, -1, 2.0)]), "bailian", skip_bad=True)
    assert [r.request_id for r in trace.requests] == ["3"]
    assert [str(e).split(": ", 1)[1] for e in trace.skipped] == [
        "field 'parent_chat_id': 2: names chat 2 (line 2, timestamp 1 s), which does not arrive before "
        "this turn (timestamp 0 s); a parent must come first",
        "field 'parent_chat_id': 1: names chat 1 (line 1), skipped as a bad record"]
    assert not any("not in the file" in w for w in trace.warnings)


def test_dynamo_duplicate_request_end_names_both_lines(tmp_path, capsys):
    # Was: "request 'r2': 'after' names the request itself".
    import gzip

    lines = gzip.decompress(open("tests/data/formats/dynamo_trace.jsonl.gz", "rb").read()).decode().splitlines()
    r2 = next(i for i, t in enumerate(lines) if '"request_end"' in t and '"request_id": "r2"' in t)
    trace = tmp_path / "d.jsonl"
    trace.write_text("\n".join(lines + [lines[r2]]) + "\n")
    code, _, err = run_cli(capsys, "run", "--trace", trace)
    assert code == 2
    assert f"{trace}:{len(lines) + 1}: field 'request.request_id': 'r2' duplicates line {r2 + 1}" in err


def test_bailian_duplicate_chat_id_names_the_field(tmp_path, capsys):
    # Was: field 'request_id' (not a Bailian field).
    trace = write_lines(tmp_path / "b.jsonl", [bailian_row(1, -1, 0.0), bailian_row(1, -1, 1.0)])
    code, _, err = run_cli(capsys, "run", "--trace", trace, "--trace-format", "bailian")
    assert code == 2 and f"{trace}:2: field 'chat_id': 1 duplicates line 1" in err


def test_analyze_refuses_more_cached_than_the_prompt(tmp_path, capsys):
    rows = [{"timestamp": i * 100, "input_length": 1100, "output_length": 5, "hash_ids": [0, 1, 2 + i],
             "request_id": f"q{i}", "observed_cached_tokens": 1024, "observed_first_scheduled_ms": i * 100 + 500,
             "observed_ttft_ms": 600} for i in range(30)]
    rows[4]["observed_cached_tokens"] = 5000
    trace = write_lines(tmp_path / "r.jsonl", rows)
    code, _, err = run_cli(capsys, "analyze", trace)
    assert code == 2 and f"{trace}:5: field 'observed_cached_tokens': 5000 is outside 0..1100" in err


@pytest.mark.parametrize("argv", [["run", "--out", ""], ["compare", "--plots", " "], ["convert", "x", ""],
                                  ["sweep", ""]])
def test_empty_path_options_are_refused(tmp_path, monkeypatch, capsys, argv):
    # Was: `--out ''` (an unset shell variable) wrote the result files into the working folder.
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stop:  # an argparse usage error
        main(argv)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "empty path" in err and "(an unset shell variable?)" in err
    assert list(tmp_path.iterdir()) == []


def test_queue_plot_shows_idle_gaps():
    # Was: samples joined across idle gaps, drawing one waiting request through an idle engine.
    import pandas as pd

    from fairsim.run_plots import _with_idle_gaps

    steps = pd.DataFrame({"start_s": [0.0, 0.5, 2.0], "duration_s": [0.5, 0.25, 0.5], "waiting": [2, 1, 1],
                          "kv_blocks_used": [3, 4, 2], "kv_blocks_cached": [3, 5, 6]})
    out = _with_idle_gaps(steps)
    # Step 2 ends at 0.75 s and the engine idles until 2.0 s; step 3 ends at 2.5 s, the last.
    assert out["start_s"].tolist() == [0.0, 0.5, 0.75, 2.0, 2.5]
    assert out["waiting"].tolist() == [2, 1, 0, 1, 0]
    assert out["kv_blocks_used"].tolist() == [3, 4, 0, 2, 0]
    assert out["kv_blocks_cached"].tolist() == [3, 5, 5, 6, 6]
    assert _with_idle_gaps(steps.drop(columns="duration_s")).equals(steps.drop(columns="duration_s"))


def test_two_aliases_of_one_field_are_refused(tmp_path, capsys):
    trace = write_lines(tmp_path / "a.jsonl", [
        {"session_id": "s", "timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]},
        {"session_id": "s", "delay": 5, "delay_ms": 7, "input_length": 600, "output_length": 5, "hash_ids": [1, 3]}])
    code, _, err = run_cli(capsys, "run", "--trace", trace, "--trace-format", "mooncake")
    assert code == 2 and f"{trace}:2: field 'delay_ms': given together with 'delay'" in err


def test_claude_code_folder_names_the_files_it_ignores(tmp_path):
    import shutil

    from fairsim.traces.formats import read_trace

    shutil.copy("tests/data/formats/claude_code/session_a.json", tmp_path)
    shutil.copy("tests/data/formats/mooncake.jsonl", tmp_path)
    trace = read_trace(tmp_path)
    assert trace.format == "claude-code" and len(trace.requests) == 5
    assert f"{tmp_path}: read the *.json session files only; ignored mooncake.jsonl" in trace.warnings


@pytest.mark.parametrize("window", [60.0, 1e9])
def test_analyze_busiest_window_equals_runs_on_a_short_trace(window):
    # Was: analyze divided a 2 s trace's work by the 60 s window (load 0.01 vs run's 0.34).
    from fairsim.analysis.load import busiest_windows
    from fairsim.costmodel import load_profile
    from fairsim.traces.formats import read_trace
    from fairsim.traces.offered import offered_load

    requests = list(read_trace("tests/data/formats/mooncake.jsonl").requests)
    profile = load_profile("a6000-llama3.1-8b-vllm-prior")
    load = offered_load(requests, profile, 2048, window)
    (w,) = busiest_windows(requests, profile, window, 3, 2048)
    assert (w.start_s, w.end_s, w.requests) == (0.0, 2.0, 4)
    assert w.load == pytest.approx(load.peak_load, rel=1e-12) and load.peak_load == pytest.approx(load.load)


@pytest.mark.parametrize("fmt, good", [
    ("mooncake", {"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}),
    ("bailian", bailian_row(1, -1, 0.0)),
])
def test_a_line_that_is_not_an_object_names_its_type(tmp_path, capsys, fmt, good):
    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps(good) + "\n[1, 2]\n")
    code, _, err = run_cli(capsys, "run", "--trace", trace, "--trace-format", fmt)
    assert code == 2 and f"{trace}:2: field '<json>': expected an object, got list" in err
