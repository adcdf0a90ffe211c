"""The CSV readers' compiled plain rows (``fairsim/traces/formats/_csv_c.pyx``) against their
Python paths (the references), Azure's and BurstGPT's: on any file -- plain rows, rows it must
hand back, bad rows -- the same trace (every request field, the skipped rows, the warnings) or
the same error.

Skipped only where the twin is not in use (no C compiler, ``FAIRSIM_PURE_PYTHON=1``); with a
compiler and no extension it fails, telling to reinstall (``tests.utils.compiled_twin_or_skip``).
"""

from __future__ import annotations

import gzip
import math
import tempfile
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from fairsim.errors import TraceFormatError
from fairsim.traces.formats import azure, burstgpt
from fairsim.traces.formats._csv import compiled_plain
from tests.utils import compiled_twin_or_skip, read_both_ways, read_outcome

TRACES = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces"
KERNEL = compiled_twin_or_skip("fairsim.traces.formats._csv_c")


def outcome(path: Path, **kwargs):
    """What ``azure.read`` gives (``tests.utils.read_outcome``)."""
    return read_outcome(azure.read, path, **kwargs)


def both(path: Path, **kwargs):
    return read_both_ways(azure.read, path, **kwargs)


def plain(path: Path, block=512, max_requests=None):
    return compiled_plain(KERNEL, path, azure.COLUMNS, block, max_requests)


def test_plain_rows_hand_computed(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\r\n"
                    "2023-11-16 18:17:03.9799600,4808,10\r\n"
                    "2023-11-16 18:17:04.0001,1,0\r\n"
                    "\r\n"
                    "2024-05-10 00:00:00+02:00,300,7\r\n")
    requests, locations = plain(path)
    assert locations == {"t:2": 2, "t:3": 3, "t:5": 5}
    # 18:17:04.0001 - 18:17:03.97996 = 0.02014 s -> 0.02. The 2024 row is 22:00 UTC of May 9th
    # (+02:00): 175 days (30 + 31 + 31 + 29 + 31 + 23, 2024 a leap year) and 3 h 42 min 57 s after
    # 18:17:03 of 2023-11-16, so 15,133,377 - 0.97996 s after the first row.
    assert [(r.request_id, r.arrival_time, r.prompt_len, r.output_len, r.labels, r.block_hashes)
            for r in requests] == [
        ("t:2", 0.0, 4808, 10, {}, ()),
        ("t:3", 0.02, 1, 1, {"observed_output_length": 0}, ()),
        ("t:5", 15133376.02, 300, 7, {}, ())]
    compiled, reference = both(path)
    assert compiled == reference and compiled[0] == "trace"


def test_fields_go_straight_into_the_request_slots(tmp_path):
    # Request's fields are all writable object slots: the twin writes them there (no attribute
    # lookup per field), every one of them.
    assert KERNEL.slots_written_directly()
    path = tmp_path / "t.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03,700,0\n")
    (r,), _ = plain(path, block=64)
    assert (r.request_id, r.arrival_time, r.prompt_len, r.block_hashes, r.hash_block_size, r.output_len,
            r.labels, r.session_id, r.after, r.delay_s, r.segments) == (
        "t:2", 0.0, 700, (), 64, 1, {"observed_output_length": 0}, None, None, 0.0, ())


def test_a_row_it_does_not_take_hands_the_file_back(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                    "2023-11-16 18:17:03.97,10,1\n"
                    '2023-11-16 18:17:04.5,"12",1\n')  # a quoted count: csv's to read
    assert plain(path) is None
    compiled, reference = both(path)
    assert compiled == reference and compiled[0] == "trace" and len(compiled[1]) == 2


@pytest.mark.parametrize("name", ["AzureLLMInferenceTrace_code.csv", "AzureLLMInferenceTrace_conv.csv"])
def test_public_traces_read_the_same(name):
    path = TRACES / name
    if not path.exists():
        pytest.skip(f"shared trace {name} not present")
    assert plain(path) is not None  # every row plain: the compiled path reads the whole file
    compiled, reference = both(path)
    assert compiled[0] == "trace" and len(compiled[1]) > 8000
    assert compiled == reference


# How a timestamp may be written: the forms the twin reads itself and those it hands back.
STAMPS = st.one_of(
    st.builds(lambda d, sep, sec, frac, zone: d.strftime(f"%Y-%m-%d{sep}%H:%M") + sec + frac + zone,
              st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 30)),
              st.sampled_from([" ", "T"]),
              st.sampled_from([":00", ":59", ":07", "", ":60", ":5"]),
              st.sampled_from(["", ".9799600", ".0", ".5", ".000001", "." + "9" * 40, "." + "1" * 70, "."]),
              st.sampled_from(["", "", "Z", "+00:00", "-05:30", "+23:59", "+24:00", "+05:75", "+0530", "+05",
                               " ", "z"])),
    st.sampled_from(["2023-02-29 00:00:00", "2024-02-29 23:59:59.5", "1900-02-29 00:00", "2000-02-29 00:00",
                     "0000-01-01 00:00", "2023-13-01 00:00", "2023-00-10 00:00", "2023-04-31 00:00",
                     "2023-11-16 24:00:00", "2023-11-16 18:60:00", " 2023-11-16 18:17:03", "2023-11-16",
                     "2023-11-16 18:17:03 ", "2023/11/16 18:17:03", "", "x", "٢٠٢٣-11-16 18:17:03"]),
)
COUNTS = st.one_of(st.integers(0, 10**6).map(str), st.sampled_from(
    ["0", "1", "007", "-1", "+5", " 5", "5 ", "1_000", "1.0", "", "x", "1" * 18, "1" * 19, "１２"]))
HEADERS = st.sampled_from([
    "TIMESTAMP,ContextTokens,GeneratedTokens", "timestamp, contexttokens , GENERATEDTOKENS",
    "ContextTokens,TIMESTAMP,GeneratedTokens,Note", "TIMESTAMP,ContextTokens", "TIMESTAMP,ContextTokens,GeneratedTokens,ContextTokens",
    '"TIMESTAMP",ContextTokens,GeneratedTokens', "\ufeffTIMESTAMP,ContextTokens,GeneratedTokens", ""])


@st.composite
def azure_files(draw):
    header = draw(HEADERS)
    names = [f.strip().lower().lstrip("\ufeff").strip('"') for f in header.split(",")]
    lines = [header]
    base = datetime(2023, 11, 16, 18, 17, 3)
    for _ in range(draw(st.integers(0, 8))):
        kind = draw(st.sampled_from(["plain"] * 6 + ["stamp", "count", "odd"]))
        base += timedelta(seconds=draw(st.sampled_from([0.0, 0.25, 1.0, 90000.0, -2.0])))
        stamp = base.strftime("%Y-%m-%d %H:%M:%S.%f") + draw(st.sampled_from(["", "0", "+00:00"]))
        fields = {"timestamp": stamp if kind != "stamp" else draw(STAMPS),
                  "contexttokens": str(draw(st.integers(1, 5000))) if kind != "count" else draw(COUNTS),
                  "generatedtokens": str(draw(st.integers(0, 900))) if kind != "count" else draw(COUNTS)}
        row = ",".join(fields.get(n, "note") for n in names)
        if kind == "odd":
            row = draw(st.sampled_from([row + ",", row.split(",")[0], "", " ", row + '"', row.replace(",", ", ", 1),
                                        row + ",\x00", row + ",é", row + "\r" + row, '"' + row + '"']))
        lines.append(row)
    end = draw(st.sampled_from(["\n", "\r\n"]))
    return end.join(lines) + draw(st.sampled_from(["", end, end + end]))


@settings(max_examples=300, deadline=None)
@given(azure_files(), st.sampled_from([None, 16, -1]), st.sampled_from([None, 1, 3]), st.booleans(),
       st.sampled_from(["plain", "gzip", "gzip cut short", "latin-1"]))
def test_any_file_reads_as_the_python_path_reads_it(text, block, max_requests, skip_bad, storage):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "t.csv"
        data = text.encode("latin-1", errors="replace") if storage == "latin-1" else text.encode()
        if storage.startswith("gzip"):
            data = gzip.compress(data)
            if storage == "gzip cut short":
                data = data[:max(10, len(data) - 9)]
        path.write_bytes(data)
        compiled, reference = both(path, skip_bad=skip_bad, hash_block_size=block, max_requests=max_requests)
        assert compiled == reference


@settings(max_examples=300, deadline=None)
@given(STAMPS)
def test_a_timestamp_reads_as_parse_time_reads_it(stamp):
    """Where the twin reads a time itself, it is ``parse_time``'s float to the bit; where
    ``parse_time`` refuses it, the twin hands the file back."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "t.csv"
        path.write_text(f"TIMESTAMP,ContextTokens,GeneratedTokens\n1970-01-01 00:00:00,5,5\n{stamp},5,5\n")
        got = plain(path)
    try:
        t = azure.parse_time(stamp)
    except ValueError:
        assert got is None
        return
    if t < 0.0:  # before the first row's 0 s: the Python path reports it
        assert got is None
    elif got is not None:
        assert got[0][1].arrival_time == round(t, 3)


def test_a_gzip_file_cut_short_keeps_its_rows_and_names_the_line(tmp_path):
    """Both paths: the rows before the cut stand (``--skip-bad``), else the error names the
    first line lost; never an internal error."""
    rows = "TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(
        f"2023-11-16 18:17:{i:02d}.5,{10 + i},1\n" for i in range(40))
    data = gzip.compress(rows.encode())
    path = tmp_path / "t.csv"
    path.write_bytes(data[:len(data) // 2])
    compiled, reference = both(path)
    assert compiled == reference and compiled[0] == "error"
    assert "field '<gzip>'" in compiled[2] and "cut short" in compiled[2]
    kept, reference = both(path, skip_bad=True)
    assert kept == reference and kept[0] == "trace" and 0 < len(kept[1]) < 40
    assert len(kept[2]) == 1 and kept[2][0].startswith(f"{path}:{len(kept[1]) + 2}: field '<gzip>'")


def test_bytes_that_are_not_utf8_fail_their_field_only(tmp_path):
    path = tmp_path / "t.csv"
    path.write_bytes(b"TIMESTAMP,ContextTokens,GeneratedTokens,Note\n"
                     b"2023-11-16 18:17:03.5,10,1,caf\xe9\n"  # an unused column: read
                     b"2023-11-16 18:17:04.5,1\xe90,1,x\n")  # a count: refused, line and column named
    compiled, reference = both(path)
    assert compiled == reference
    assert compiled == ("error", "TraceFormatError",
                        f"{path}:3: field 'ContextTokens': must be an integer, got '1\\udce90'")
    kept = both(path, skip_bad=True)[0]
    assert kept[0] == "trace" and [r[0] for r in kept[1]] == ["'t:2'"]


#: Halves and their neighbours (where ``round`` decides), whole ms, and values up to past 2**40 ms.
ARRIVALS = st.one_of(
    st.floats(min_value=0.0, max_value=5e6, allow_nan=False, allow_infinity=False),
    st.floats(min_value=4e6, max_value=2e9, allow_nan=False, allow_infinity=False),  # 2**32 and 2**40 ms
    st.integers(4 * 10**9, 2 * 10**12).map(lambda ms: (ms + 0.5) / 1000),
    st.integers(0, 10**10).map(lambda ms: ms / 1000),
    st.integers(0, 10**10).map(lambda ms: (ms + 0.5) / 1000),
    st.tuples(st.integers(0, 10**9), st.sampled_from([-1, 1])).map(
        lambda p: math.nextafter((p[0] + 0.5) / 1000, math.copysign(math.inf, p[1]))),
)


@settings(max_examples=2000, deadline=None)
@given(ARRIVALS)
def test_arrivals_round_to_the_ms_as_round_does(x):
    """The twin's rounding of an arrival (``_round_ms``) is ``round(x, 3)``, to the bit."""
    assert KERNEL.round_ms(x).hex() == round(x, 3).hex()


def test_rounding_hand_computed():
    """Ties go to the even ms on the exact binary value; 0.0625 s is 62.5 ms exactly."""
    assert KERNEL.round_ms(0.0625) == 0.062  # an exact tie: even
    assert KERNEL.round_ms(0.0635) == round(0.0635, 3) == 0.064  # the double 0.0635 lies above 63.5 ms
    assert KERNEL.round_ms(1.2344999) == 1.234
    assert KERNEL.round_ms(0.0) == 0.0
    assert KERNEL.round_ms(4294967.2965) == round(4294967.2965, 3)  # past 2**32 ms: a wider margin
    assert KERNEL.round_ms(5000000.0625) == 5000000.062  # an exact tie past 2**32 ms: even
    assert KERNEL.round_ms(1099511627.7765) == round(1099511627.7765, 3)  # past 2**40 ms: round decides


# BurstGPT: the same kernel with seconds for the time, no rebasing, and text labels.

def burst_plain(path: Path):
    return compiled_plain(KERNEL, path, burstgpt.COLUMNS, 512, None, burstgpt._Labels(str(path)).of,
                          seconds=True, rebase=False)


def burst_both(path: Path, **kwargs):
    return read_both_ways(burstgpt.read, path, **kwargs)


def test_burstgpt_plain_rows_hand_computed(tmp_path):
    path = tmp_path / "b.csv"
    path.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                    "5,ChatGPT,472,18,490,Conversation log\n"
                    "45.25,GPT-4,1087,0,1087,API log\n"
                    "\n"
                    "5000000.0005,,3,4,7,API log\n")
    requests, locations = burst_plain(path)
    assert locations == {"b:2": 2, "b:3": 3, "b:5": 5}
    # Not rebased; 5,000,000.0005 s is about half a ms: round() decides (5000000.0 or .001)
    assert [(r.request_id, r.arrival_time, r.prompt_len, r.output_len, r.labels) for r in requests] == [
        ("b:2", 5.0, 472, 18, {"model": "ChatGPT", "log_type": "Conversation log"}),
        ("b:3", 45.25, 1087, 1, {"model": "GPT-4", "log_type": "API log", "observed_output_length": 0}),
        ("b:5", round(5000000.0005, 3), 3, 4, {"log_type": "API log"})]
    # One str object per distinct label value (the Python path's are equal, not shared).
    assert requests[0].labels["log_type"] is not requests[1].labels["log_type"]
    assert requests[1].labels["log_type"] is requests[2].labels["log_type"]
    compiled, reference = burst_both(path)
    assert compiled == reference and compiled[0] == "trace"


@pytest.mark.parametrize("body", [
    "44,GPT-4,1,1,2,API log\n43,GPT-4,1,1,2,API log\n",  # out of time order: sorted, warned
    "1e3,GPT-4,1,1,2,API log\n",  # an exponent
    " 5,GPT-4,1,1,2,API log\n",  # a space
    "5,GPT-4 ,1,1,2,API log\n",  # a label str.strip() changes
    "5,GPT-4,1,1,2\n",  # a short row without its last label
    "-5,GPT-4,1,1,2,API log\n", "nan,GPT-4,1,1,2,API log\n", "5..,GPT-4,1,1,2,API log\n",
])
def test_burstgpt_rows_it_does_not_take_hand_the_file_back(tmp_path, body):
    path = tmp_path / "b.csv"
    path.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n" + body)
    got = burst_plain(path)
    compiled, reference = burst_both(path, skip_bad=True)
    assert compiled == reference
    if body.startswith("5,GPT-4,1,1,2\n"):
        assert got is not None and got[0][0].labels == {"model": "GPT-4"}  # as the Python path: no label
    else:
        assert got is None


def test_burstgpt_fixture_and_a_long_sorted_file_read_the_same(tmp_path):
    compiled, reference = burst_both(Path(__file__).parent / "data" / "formats" / "burstgpt.csv")
    assert compiled == reference and compiled[3] != ()  # the fixture has a row out of order: Python path
    path = tmp_path / "long.csv"
    rows = ["Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"]
    rows += [f"{i * 7 // 3}{'.5' if i % 4 == 1 else ''},{'GPT-4' if i % 3 else 'ChatGPT'},{1 + i % 900},{i % 7},0,"
             f"{'API log' if i % 5 else 'Conversation log'}" for i in range(3000)]
    path.write_text("\n".join(rows) + "\n")
    assert burst_plain(path) is not None
    compiled, reference = burst_both(path)
    assert compiled == reference and len(compiled[1]) == 3000


def test_burstgpt_a_column_named_like_the_failed_request_label_is_refused_both_ways(tmp_path):
    # The column would give the label observed_output_length, which the reader sets to 0 on a
    # Response tokens of 0: the twin read such a file with text and 0 under one label (the run
    # then failed writing its tables, an internal error) where the Python path refused line 3.
    path = tmp_path / "b.csv"
    path.write_text("Timestamp,Request tokens,Response tokens,Observed Output Length\n5,10,2,x\n6,10,0,y\n")
    compiled, reference = burst_both(path)
    assert compiled == reference and compiled[0] == "error"
    with pytest.raises(TraceFormatError) as err:
        burstgpt.read(path)
    assert (err.value.line, err.value.field) == (1, "Observed Output Length")
    assert "gives the label 'observed_output_length', which holds the Response tokens of 0" in str(err.value)


BURST_TIMES = st.one_of(st.integers(0, 10**7).map(str), st.sampled_from(
    ["0", "5", "5.", ".5", "0.000", "110.5", "007", "1e3", "-1", "+5", " 5", "nan", "inf", "", ".", "5..5",
     "9" * 30, "1" * 70, "1_0", "٥"]))


@st.composite
def burstgpt_files(draw):
    header = draw(st.sampled_from([
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type",
        "timestamp, request tokens ,Response Tokens", "Model,Timestamp,Request tokens,Response tokens,Session ID",
        "Timestamp,Request tokens", "Timestamp,Request tokens,Response tokens,Model,model",
        "Timestamp,Request tokens,Response tokens,Observed output length"]))
    names = [f.strip().lower() for f in header.split(",")]
    lines = [header]
    t = 0.0
    for _ in range(draw(st.integers(0, 8))):
        kind = draw(st.sampled_from(["plain"] * 6 + ["time", "count", "odd"]))
        t += draw(st.sampled_from([0.0, 0.25, 1.0, 90000.0, -2.0]))
        fields = {"timestamp": (f"{max(t, 0):.3f}" if kind != "time" else draw(BURST_TIMES)),
                  "request tokens": str(draw(st.integers(1, 5000))) if kind != "count" else draw(COUNTS),
                  "response tokens": str(draw(st.integers(0, 900))) if kind != "count" else draw(COUNTS),
                  "model": draw(st.sampled_from(["ChatGPT", "GPT-4", "", " x", "a b"])),
                  "session id": draw(st.sampled_from(["s1", "", "7"])),
                  "observed output length": draw(st.sampled_from(["x", "", "0"]))}
        row = ",".join(fields.get(n, "0") for n in names)
        if kind == "odd":
            row = draw(st.sampled_from([row + ",", row.split(",")[0], "", row + ",\x00", row + ",é",
                                        '"' + row + '"']))
        lines.append(row)
    return "\n".join(lines) + draw(st.sampled_from(["", "\n"]))


@settings(max_examples=300, deadline=None)
@given(burstgpt_files(), st.booleans(), st.sampled_from(["plain", "gzip"]))
def test_any_burstgpt_file_reads_as_the_python_path_reads_it(text, skip_bad, storage):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "b.csv"
        data = gzip.compress(text.encode()) if storage == "gzip" else text.encode()
        path.write_bytes(data)
        compiled, reference = burst_both(path, skip_bad=skip_bad)
        assert compiled == reference
