"""The BurstGPT reader (``fairsim.traces.formats.burstgpt``): the fixture's requests worked out
by hand from the release's schema (HPMLL/BurstGPT ``README.md``), and the error contract."""

import gzip
import json

import pytest

from fairsim.cli import main
from fairsim.errors import TraceFormatError
from fairsim.traces import detect, load_trace
from fairsim.traces.formats import FORMATS
from tests.test_formats import DATA

HEADER = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"


def test_fixture_rows_by_hand():
    t = load_trace(DATA / "burstgpt.csv")
    assert (t.format, t.hash_block_size, t.skipped) == ("burstgpt", 512, ())
    # Line 4 (44.5 s) arrives before line 3 (45 s): replayed in time order, with a warning.
    assert [(r.request_id, r.arrival_time, r.prompt_len, r.output_len, r.block_hashes) for r in t.requests] == [
        ("burstgpt:2", 5.0, 472, 18, ()), ("burstgpt:4", 44.5, 417, 276, ()),
        ("burstgpt:3", 45.0, 1087, 1, ()), ("burstgpt:5", 118.0, 2048, 36, ())]
    # A failed request (Response tokens 0) keeps the recorded 0; Total tokens is no label.
    assert [r.labels for r in t.requests] == [
        {"model": "ChatGPT", "log_type": "Conversation log"},
        {"model": "GPT-4", "log_type": "API log"},
        {"model": "ChatGPT", "log_type": "Conversation log", "observed_output_length": 0},
        {"model": "GPT-4", "log_type": "Conversation log"}]
    assert t.warnings == (f"{DATA / 'burstgpt.csv'}: 1 row(s) arrive before an earlier row; replayed in time order",)


def test_detection_does_not_take_azure_or_the_reverse(tmp_path):
    assert detect(DATA / "azure.csv") == "azure"
    p = tmp_path / "b.csv.gz"
    p.write_bytes(gzip.compress((DATA / "burstgpt.csv").read_bytes()))
    assert detect(p) == "burstgpt" and len(load_trace(p)) == 4
    assert FORMATS["burstgpt"].prompt_field == "Request tokens"


def test_header_spelling_and_extra_columns(tmp_path):
    # Column names in any case and spacing, in any order; a column the release announces
    # (Session ID) is kept as a text label (trace_session_id: session_id is a field of fairsim's
    # files); Total tokens and an empty value are left out.
    p = tmp_path / "x.csv"
    p.write_text(" request TOKENS,timestamp,Response Tokens,Session ID,model\r\n"
                 "10,0.25,3,s1,\r\n20,1,4,s2,GPT-4\r\n30,2,5,,GPT-4\r\n")
    t = load_trace(p)
    assert [(r.arrival_time, r.prompt_len, r.output_len, r.labels) for r in t.requests] == [
        (0.25, 10, 3, {"trace_session_id": "s1"}), (1.0, 20, 4, {"trace_session_id": "s2", "model": "GPT-4"}),
        (2.0, 30, 5, {"model": "GPT-4"})]
    assert [r.session_id for r in t.requests] == [None, None, None]  # a label, not a session link


@pytest.mark.parametrize("row, field, message", [
    ("x,ChatGPT,10,1,11,API log", "Timestamp", "must be a number of seconds, got 'x'"),
    ("nan,ChatGPT,10,1,11,API log", "Timestamp", "must be a finite number of seconds >= 0, got 'nan'"),
    ("-1,ChatGPT,10,1,11,API log", "Timestamp", "must be a finite number of seconds >= 0, got '-1'"),
    ("inf,ChatGPT,10,1,11,API log", "Timestamp", "must be a finite number of seconds >= 0, got 'inf'"),
    ("1,ChatGPT,10.0,1,11,API log", "Request tokens", "must be an integer, got '10.0'"),
    ("1,ChatGPT,0,1,1,API log", "Request tokens", "0: need >= 1"),
    ("1,ChatGPT,10,-1,9,API log", "Response tokens", "negative: -1 (need >= 0)"),
    ("1,ChatGPT,10", "Response tokens", "missing (the row has fewer fields than the header)"),
    ("1,ChatGPT,1,087,1,1088,API log", "<row>", "7 fields where the header has 6"),
])
def test_bad_rows_name_line_and_field_and_skip(tmp_path, row, field, message):
    p = tmp_path / "bad.csv"
    p.write_text(HEADER + "0,ChatGPT,5,1,6,API log\n" + row + "\n")
    with pytest.raises(TraceFormatError) as err:
        load_trace(p)
    assert (err.value.line, err.value.field) == (3, field) and message in str(err.value)
    t = load_trace(p, skip_bad=True)
    assert [r.request_id for r in t.requests] == ["bad:2"] and [e.line for e in t.skipped] == [3]


def test_a_label_that_is_not_utf8_is_refused_at_its_line_and_column(tmp_path, capsys):
    # Read on, it would fail only when the tables are written, after the simulation.
    p = tmp_path / "l.csv"
    p.write_bytes(HEADER.encode() + b"0,ChatGPT,5,1,6,API log\n1,GPT-\xe9,5,1,6,API log\n")
    with pytest.raises(TraceFormatError) as err:
        load_trace(p)
    assert (err.value.line, err.value.field) == (3, "Model") and "not UTF-8 text" in str(err.value)
    assert [r.request_id for r in load_trace(p, skip_bad=True).requests] == ["l:2"]
    assert main(["run", "--trace", str(p), "--out", str(tmp_path / "o")]) == 2
    assert "l.csv:3: field 'Model': not UTF-8 text" in capsys.readouterr().err


def test_header_problems_at_line_1(tmp_path):
    p = tmp_path / "h.csv"
    p.write_text("Timestamp,Request tokens,Response tokens,Timestamp\n1,2,3,4\n")
    with pytest.raises(TraceFormatError, match=r"h.csv:1: field 'Timestamp': named twice in the header "
                                               r"\(columns 1 and 4\)"):
        load_trace(p, format="burstgpt")
    p.write_text("Timestamp,Request tokens,Response tokens,Log Type,log  type\n1,2,3,a,b\n")
    with pytest.raises(TraceFormatError, match=r"h.csv:1: field 'log  type': column 5 gives the label 'log_type', "
                                               r"as column 4 does: rename one"):
        load_trace(p)
    # A label column named twice names both positions, as a column the reader reads does.
    p.write_text("Timestamp,Model,Request tokens,Response tokens,model\n1,a,2,3,b\n")
    with pytest.raises(TraceFormatError, match=r"h.csv:1: field 'model': named twice in the header "
                                               r"\(columns 2 and 5\): keep one"):
        load_trace(p)
    p.write_text("Timestamp,Request tokens\n1,2\n")
    with pytest.raises(TraceFormatError, match=r"field 'Response tokens': missing column"):
        load_trace(p, format="burstgpt")


def test_cli_run_and_convert(tmp_path, capsys):
    # One command on the file as downloaded: open loop, every request a miss (no identity).
    assert main(["run", "--trace", str(DATA / "burstgpt.csv"), "--policy", "fcfs", "--format", "json"]) == 0
    out = capsys.readouterr()
    row = json.loads(out.out)["fcfs"]
    assert (row["requests"], row["hit_rate"]) == (4, 0.0)
    assert "burstgpt format" in out.err and "replayed in time order" in out.err
    assert main(["run", "--trace", str(DATA / "burstgpt.csv"), "--trace-format", "burstgpt", "--policy", "fcfs",
                 "--format", "json"]) == 0
    capsys.readouterr()
    # convert writes Mooncake rows (ms) with the labels; they read back as the same requests.
    out_file = tmp_path / "b.jsonl"
    assert main(["convert", str(DATA / "burstgpt.csv"), str(out_file)]) == 0
    back = load_trace(out_file)
    first = load_trace(DATA / "burstgpt.csv")
    assert [(r.arrival_time, r.prompt_len, r.output_len) for r in back.requests] == [
        (r.arrival_time, r.prompt_len, r.output_len) for r in first.requests]


@pytest.mark.parametrize("header, row", [
    (HEADER, "1,ChatGPT,5,1,6,{}"), ("TIMESTAMP,ContextTokens,GeneratedTokens\n", "2023-11-16 18:15:47,5,{}")])
def test_a_field_over_csvs_limit_is_a_bad_row_not_an_internal_error(tmp_path, capsys, header, row):
    # csv refuses a field over 131,072 characters (here an unclosed quote that swallows the rows
    # after it): that row is named at the line it begins, and --skip-bad reads on after it.
    first = "2023-11-16 18:15:46,5,1" if header.startswith("TIME") else "0,ChatGPT,5,1,6,API log"
    last = "2023-11-16 18:15:48,7,1" if header.startswith("TIME") else "2,ChatGPT,7,1,8,API log"
    p = tmp_path / "big.csv"
    p.write_text(header + first + "\n" + row.format('"x') + "\n" + ("y" * 1000 + "\n") * 131 + last + "\n")
    with pytest.raises(TraceFormatError) as err:
        load_trace(p)
    assert (err.value.line, err.value.field) == (3, "<row>")
    assert "not a CSV row (lines 3 to 134: an unclosed quote?): field larger than field limit (131072)" in str(
        err.value)
    t = load_trace(p, skip_bad=True)
    assert [r.request_id for r in t.requests] == ["big:2", "big:135"] and [e.line for e in t.skipped] == [3]
    assert main(["run", "--trace", str(p), "--policy", "fcfs"]) == 2
    assert "big.csv:3: field '<row>': not a CSV row" in capsys.readouterr().err
    p.write_text(header.rstrip("\n") + ',"' + "z" * 140000 + "\n" + last + "\n")
    with pytest.raises(TraceFormatError, match=r"big.csv:1: field '<header>': not a CSV header: field larger"):
        load_trace(p)


def test_a_column_name_that_is_not_utf8_is_refused_at_line_1(tmp_path, capsys):
    # It would name a label; read on, the run simulated and then failed writing its tables with a
    # codec error naming no file.
    p = tmp_path / "n.csv"
    p.write_bytes(HEADER.rstrip("\n").encode() + b",Sessi\xf3n\n0,ChatGPT,5,1,6,API log,s1\n")
    with pytest.raises(TraceFormatError) as err:
        load_trace(p)
    assert (err.value.line, err.value.field) == (1, "Sessi\\xf3n") and "not UTF-8 text" in str(err.value)
    assert main(["run", "--trace", str(p), "--policy", "fcfs", "--out", str(tmp_path / "o")]) == 2
    out = capsys.readouterr()
    assert "n.csv:1: field 'Sessi\\xf3n': a column name that is not UTF-8 text" in out.err and out.out == ""
    # A UTF-8 name outside ASCII is a label as any other.
    p.write_bytes(HEADER.rstrip("\n").encode() + ",Sesión\n0,ChatGPT,5,1,6,API log,s1\n".encode())
    assert load_trace(p).requests[0].labels == {"model": "ChatGPT", "log_type": "API log", "sesión": "s1"}


@pytest.mark.parametrize("fmt", [None, "azure", "burstgpt"])
@pytest.mark.parametrize("packed", [False, True])
def test_a_file_holding_only_a_byte_order_mark_is_bad_input(tmp_path, capsys, fmt, packed):
    # Its head has bytes but no text: the CSV sniffers took line 0 of no lines (an internal error).
    p = tmp_path / "bom.csv"
    p.write_bytes(gzip.compress(b"\xef\xbb\xbf") if packed else b"\xef\xbb\xbf")
    args = ["run", "--trace", str(p), "--policy", "fcfs"] + (["--trace-format", fmt] if fmt else [])
    assert main(args) == 2
    err = capsys.readouterr().err
    if fmt is None:
        assert "bom.csv: cannot tell the trace format of this file from its content" in err
    else:
        column = {"azure": "TIMESTAMP", "burstgpt": "Timestamp"}[fmt]
        assert f"bom.csv:1: field '{column}': missing column (the file has no header line: it is empty)" in err


def test_a_label_named_like_a_canonical_field_is_prefixed_and_converts(tmp_path):
    p = tmp_path / "s.csv"
    p.write_text(HEADER.strip() + ",Session ID,Delay\n5,ChatGPT,472,18,490,Conversation log,s1,3\n")
    assert load_trace(p).requests[0].labels == {"model": "ChatGPT", "log_type": "Conversation log",
                                                "trace_session_id": "s1", "trace_delay": "3"}
    out = tmp_path / "s.jsonl"
    assert main(["convert", str(p), str(out)]) == 0
    back = load_trace(out).requests[0]
    assert (back.session_id, back.labels["trace_session_id"], back.labels["trace_delay"]) == (None, "s1", "3")
