"""Regressions found by a new-user pass of the nineteenth session (each failed before its fix)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from fairsim.cli import main
from fairsim.traces.formats import FORMATS, detect
from fairsim.traces.formats._common import read_head

DATA = Path(__file__).parent / "data" / "formats"


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_named_format_that_does_not_fit_names_the_one_that_does(tmp_path, capsys):
    # Was: only the refused record's reason (an Azure CSV read as Mooncake: "not valid JSON").
    csv = shutil.copy(DATA / "azure.csv", tmp_path / "a.csv")
    code, _, err = run_cli(capsys, "run", "--trace", csv, "--trace-format", "mooncake")
    assert code == 2 and f"{csv}:1: field '<json>': not valid JSON" in err
    assert err.rstrip().endswith("[read as mooncake, as --trace-format asked; the content looks like azure: "
                                 "give --trace-format azure (or auto)]")
    jsonl = shutil.copy(DATA / "mooncake.jsonl", tmp_path / "m.jsonl")
    code, _, err = run_cli(capsys, "run", "--trace", jsonl, "--trace-format", "azure")
    assert code == 2 and f"{jsonl}:1: field 'TIMESTAMP': missing column (header: [" in err
    assert "]) [read as azure, as --trace-format asked; the content looks like mooncake" in err


def test_a_long_header_is_shown_cut(tmp_path, capsys):
    wide = tmp_path / "w.csv"
    wide.write_text(",".join(f"c{i}" for i in range(40)) + "\n1,2\n")
    code, _, err = run_cli(capsys, "run", "--trace", wide, "--trace-format", "azure")
    assert code == 2 and "missing column (header: ['c0', 'c1', 'c2', 'c3', 'c4', 'c5', '...'])" in err


def test_a_bad_record_of_the_named_format_gets_no_hint(tmp_path, capsys):
    bad = tmp_path / "m.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": -5, "output_length": 1, "hash_ids": []}\n')
    code, _, err = run_cli(capsys, "run", "--trace", bad, "--trace-format", "mooncake")
    assert code == 2 and f"{bad}:1: field 'input_length'" in err and "[read as" not in err


def test_fairsim_results_are_no_claude_code_folder(tmp_path, capsys):
    # Was: any folder with a *.json file sniffed as Claude Code, so a folder of --out results was
    # offered as "trace folders", and reading one failed on run.json's "requests" (a count).
    trace = shutil.copy(DATA / "mooncake.jsonl", tmp_path / "m.jsonl")
    work = tmp_path / "work"
    work.mkdir()
    code, _, _ = run_cli(capsys, "run", "--trace", trace, "--policy", "fcfs", "--out", work / "res")
    assert code == 0 and (work / "res" / "run.json").is_file()
    assert not FORMATS["claude-code"].sniff(read_head(work / "res"))
    code, _, err = run_cli(capsys, "run", "--trace", work / "res")
    assert code == 2 and err.strip() == (f"fairsim: error: {work / 'res'}: is a fairsim --out folder (results, "
                                         f"not a trace); its run.json names the trace it ran: {trace}")
    code, _, err = run_cli(capsys, "run", "--trace", work)
    assert code == 2 and "subfolders look like trace folders" not in err and "this one is neither" in err


def test_a_claude_code_folder_is_still_one(tmp_path):
    # A session folder with another JSON file first (in name order) is still found.
    folder = tmp_path / "sessions"
    shutil.copytree(DATA / "claude_code", folder)
    (folder / "0-notes.json").write_text('{"note": "not a session"}\n')
    assert detect(folder) == "claude-code"
    for session in folder.glob("*.json"):
        if session.name != "0-notes.json":
            session.unlink()
    assert not FORMATS["claude-code"].sniff(read_head(folder))


def test_skip_long_counts_one_request_in_the_singular(tmp_path, capsys):
    trace = tmp_path / "m.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 100, "output_length": 1, "hash_ids": []}\n'
                     '{"timestamp": 5, "input_length": 900, "output_length": 1, "hash_ids": [1]}\n')
    code, _, err = run_cli(capsys, "run", "--trace", trace, "--max-model-len", 800, "--skip-long")
    assert code == 0 and "--skip-long dropped 1 request with prompts of 800 tokens or more" in err


WINDOW = Path(__file__).parents[1] / "fairsim" / "traces" / "data" / "conversation_window.jsonl"


def test_an_option_is_never_read_as_the_start_of_another(capsys):
    # Was: compare --policy fcfs was taken as --policy-config fcfs ("cannot read the file").
    for argv, needle in ((["compare", "--policy", "fcfs"], "fairsim compare: error: unrecognized arguments: "
                          "--policy fcfs; did you mean --policies?"),
                         (["run", "--max-req", "5"], "fairsim run: error: unrecognized arguments: --max-req 5; "
                          "did you mean --max-requests?")):
        with pytest.raises(SystemExit) as exc:
            main([*argv, "--trace", str(WINDOW)])
        assert exc.value.code == 2 and needle in capsys.readouterr().err


def test_accept_refuses_windows_whose_tables_would_share_a_file(capsys):
    # Was: 'a b' and 'a_b' both wrote requests-a_b-*.parquet; the second overwrote the first.
    code, _, err = run_cli(capsys, "accept", WINDOW, "--policy", "fairway", "--windows", "a b:0-60,a_b:100-160")
    assert code == 2 and err.strip() == ("fairsim: error: --windows: windows 'a b' and 'a_b' would both write "
                                         "requests-a_b-*.parquet; rename one of them")


def test_a_policy_config_whose_parameters_are_refused_is_named(tmp_path, capsys):
    # Was: "policy 'fairway': bad parameters ...", or "--param (...)" though no --param was given.
    bad_key, bad_value = tmp_path / "k.json", tmp_path / "v.json"
    bad_key.write_text('{"policy": "fairway", "params": {"bogus": 1}}\n')
    bad_value.write_text('{"policy": "fairway", "params": {"fast_weight": NaN}}\n')
    code, _, err = run_cli(capsys, "run", "--trace", WINDOW, "--policy-config", bad_key)
    assert code == 2 and err.startswith(f"fairsim: error: --policy-config {bad_key}: policy 'fairway': "
                                        "bad parameters {'bogus': 1}; accepted: fast_weight")
    code, _, err = run_cli(capsys, "compare", "--trace", WINDOW, "--policy-config", bad_value)
    assert code == 2 and err.strip() == (f"fairsim: error: --policy-config {bad_value}: Fairway "
                                         "fast_weight=nan: need a finite number")


def test_a_too_long_azure_prompt_names_its_column(tmp_path, capsys):
    # Was: field 'input_length', a name the CSV does not have.
    csv = tmp_path / "huge.csv"
    csv.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,100,10\n"
                   "2023-11-16 18:17:04.1,1000000000000,9\n")
    code, _, err = run_cli(capsys, "run", "--trace", csv)
    assert code == 2 and f"{csv}:3: field 'ContextTokens': prompt of 1,000,000,000,000 tokens does not fit" in err


def test_a_fleet_beyond_any_deployment_is_refused_before_the_run(capsys):
    # Was: --instances 1e9 ran out of memory (exit 2, naming --max-requests and the KV cache only).
    code, out, err = run_cli(capsys, "run", "--trace", WINDOW, "--instances", "1000000000")
    assert code == 2 and out == "" and err.strip() == (
        "fairsim: error: --instances 1000000000: at most 100,000 (each engine holds its own KV cache, queues "
        "and tables: a count beyond any real fleet only runs out of memory)")
    code, _, err = run_cli(capsys, "run", "--trace", WINDOW, "--mode", "disaggregated", "--decode-instances", "100001")
    assert code == 2 and "--decode-instances 100001: at most 100,000 instances" in err


def test_session_rate_on_a_trace_without_sessions_says_it_redraws_every_arrival(capsys):
    # Was: silent, though the span went from the trace's to the Poisson draws'.
    code, _, err = run_cli(capsys, "run", "--trace", WINDOW, "--session-rate", "1", "--max-requests", "50",
                           "--format", "json")
    assert code == 0 and ("fairsim: warning: --session-rate 1: no request of this trace follows another, so each "
                          "is a session of one turn, and every arrival is drawn anew") in err


def test_an_empty_policy_list_names_the_option(capsys):
    code, out, err = run_cli(capsys, "compare", "--trace", WINDOW, "--policies", "")
    assert code == 2 and out == "" and err.strip() == (
        "fairsim: error: --policies '': no policies given; name them separated by commas, e.g. fcfs,lpm, or all")


def test_a_request_that_follows_itself_names_the_after_field(tmp_path, capsys):
    # Was: field '<record>' (the Request's own refusal).
    trace = tmp_path / "self.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 10, "output_length": 1, "request_id": "a"}\n'
                     '{"timestamp": 5, "input_length": 10, "output_length": 1, "request_id": "b", "after": "b"}\n')
    code, _, err = run_cli(capsys, "run", "--trace", trace)
    assert code == 2 and f"{trace}:2: field 'after': names the request itself ('b')" in err


def test_wait_cap_says_how_to_give_no_cap(capsys):
    code, _, err = run_cli(capsys, "run", "--trace", WINDOW, "--policy", "fairway-carry", "--param", "wait_cap=none")
    assert code == 2 and "wait_cap='none': need a finite number >= 0, or null for no cap" in err
