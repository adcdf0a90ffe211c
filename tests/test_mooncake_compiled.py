"""The Mooncake reader's compiled plain rows (``fairsim/traces/formats/_mooncake_c.pyx``) against
its Python path (the reference): on any file -- plain rows, rows it must hand back, bad rows --
the same trace (every request field, the skipped rows, the warnings) or the same error.

Skipped only where the twin is not in use (no C compiler, ``FAIRSIM_PURE_PYTHON=1``); with a
compiler and no extension it fails, telling to reinstall (``tests.utils.compiled_twin_or_skip``).
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from fairsim.traces.formats import mooncake
from fairsim.types import Request
from tests.utils import compiled_twin_or_skip, read_both_ways, read_outcome

CONVERSATION = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces" / "conversation_trace.jsonl"
KERNEL = compiled_twin_or_skip("fairsim.traces.formats._mooncake_c")


def outcome(path: Path, **kwargs):
    """What ``mooncake.read`` gives (``tests.utils.read_outcome``)."""
    return read_outcome(mooncake.read, path, **kwargs)


def both(path: Path, **kwargs):
    return read_both_ways(mooncake.read, path, **kwargs)


def plain(path: Path, block=None):
    return mooncake._compiled_plain(KERNEL, path, block)


BLOCK = 16


@st.composite
def plain_row(draw, t: float):
    """A row the compiled path takes: the four fields, chained ids fitting 16-token blocks."""
    n = draw(st.integers(1, 5 * BLOCK))
    count = draw(st.sampled_from([n // BLOCK, -(-n // BLOCK)]))
    first = draw(st.integers(0, 3))
    ids = list(range(first * 100, first * 100 + count))
    ts = draw(st.sampled_from([t, int(t)])) if float(int(t)) == t else t
    return {"timestamp": ts, "input_length": n, "output_length": draw(st.integers(1, 9)), "hash_ids": ids}


# Changes that make a row one the compiled path hands back (each the Python path takes, refuses,
# or skips in its own way).
VARIANTS = [
    lambda r: {**r, "session_id": "s1"},
    lambda r: {**r, "label": "x"},
    lambda r: {**r, "input_length": float(r["input_length"])},
    lambda r: {**r, "output_length": 0},
    lambda r: {**r, "timestamp": -1},
    lambda r: {**r, "timestamp": 2**1100},
    lambda r: {**r, "hash_ids": r["hash_ids"] + [True]},
    lambda r: {**r, "hash_ids": r["hash_ids"] + r["hash_ids"][:1]},
    lambda r: {**r, "hash_ids": r["hash_ids"] + [10**6, 10**6 + 1, 10**6 + 2]},
    lambda r: {k: v for k, v in r.items() if k != "hash_ids"},
    lambda r: {k: v for k, v in r.items() if k != "timestamp"},
    lambda r: {"delay": 5, **{k: v for k, v in r.items() if k != "timestamp"}},
    lambda r: {**r, "input_length": 2**70},
    lambda r: {**r, "hash_ids": [2**64 - 1 - i for i in range(len(r["hash_ids"]))]},  # u64: orjson reads it
    lambda r: {**r, "hash_ids": [2**64 + i for i in range(len(r["hash_ids"]))]},  # beyond: the json module
    lambda r: {**r, "timestamp": 1234567890123456789.5},  # 19 digits in a float
]


# A ``request_id`` the compiled path takes (a string: scanned where it is printable ASCII without
# escapes, else read by orjson; an empty one named ``STEM:LINE``), or hands back (not a string, a
# repeat of an earlier id or of a ``STEM:LINE`` name).
REQUEST_IDS = ["a", "b", "", "t:2", "t:1", "caf\u00e9", "tab\there", "q\"uote", 7, None]


@st.composite
def mooncake_files(draw):
    lines = []
    t = 0.0
    for _ in range(draw(st.integers(0, 8))):
        t += draw(st.sampled_from([0.0, 0.5, 3.0, 1000.0]))
        row = draw(plain_row(t))
        kind = draw(st.sampled_from(["plain"] * 6 + ["variant", "earlier", "broken", "named"]))
        if kind == "named":
            lines.append(json.dumps({**row, "request_id": draw(st.sampled_from(REQUEST_IDS))},
                                    ensure_ascii=draw(st.booleans())))
        elif kind == "variant":
            lines.append(json.dumps(draw(st.sampled_from(VARIANTS))(row)))
        elif kind == "earlier":
            lines.append(json.dumps({**row, "timestamp": max(0.0, t - 1.0) if t >= 1.0 else -0.5}))
        elif kind == "broken":
            lines.append(draw(st.sampled_from(['{"timestamp": 1', "[1, 2]", "", "nan"])))
        else:
            lines.append(json.dumps(row))
    text = "\n".join(lines) + draw(st.sampled_from(["", "\n", "\n\n", "\n \n"]))
    return draw(st.sampled_from(["", "\ufeff"])) + text


@settings(max_examples=200, deadline=None)
@given(mooncake_files(), st.sampled_from([None, 16, 32]), st.sampled_from([None, 16, 64, 0, "16"]),
       st.booleans(), st.sampled_from(["plain", "gzip", "gzip cut short"]))
def test_any_file_reads_as_the_python_path_reads_it(text, given_block, sidecar_block, skip_bad, storage):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "t.jsonl"
        data = text.encode()
        if storage != "plain":
            data = gzip.compress(data)
            if storage == "gzip cut short":
                data = data[:max(10, len(data) - 9)]
        path.write_bytes(data)
        if sidecar_block is not None:
            Path(folder, "t.jsonl.meta.json").write_text(json.dumps({"hash_block_size": sidecar_block}))
        compiled, reference = both(path, skip_bad=skip_bad, hash_block_size=given_block)
        assert compiled == reference


def test_plain_rows_hand_computed(tmp_path):
    path = tmp_path / "t.jsonl"
    rows = [{"timestamp": 0, "input_length": 1100, "output_length": 3, "hash_ids": [7, 8, 9]},
            {"timestamp": 2500.5, "input_length": 1024, "output_length": 1, "hash_ids": [7, 8]}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    got = plain(path)
    requests, locations, block = got
    assert (locations, block) == ({"t:1": 1, "t:2": 2}, 512)
    # 1,100 tokens: 2 full blocks of 512 (the third id, of the partial block, dropped)
    assert [(r.request_id, r.arrival_time, r.prompt_len, r.block_hashes, r.output_len) for r in requests] == [
        ("t:1", 0.0, 1100, (7, 8), 3), ("t:2", 2.5005, 1024, (7, 8), 1)]
    assert outcome(path) == both(path)[1]


def test_equal_ids_share_one_int_object(tmp_path):
    # Ids above 256 (CPython shares the small ints itself) that repeat across rows come back as
    # one object, as the engine's dict lookups then find them by identity; an id far beyond the
    # ids scanned (here 10**15 after 3 ids: past 4 per id scanned + 65,536) gets an object of its
    # own each time, so no table is sized by it; the values are the reference's either way.
    path = tmp_path / "t.jsonl"
    rows = [{"timestamp": 0, "input_length": 1536, "output_length": 1, "hash_ids": [300, 301, 5000]},
            {"timestamp": 1, "input_length": 1536, "output_length": 1, "hash_ids": [300, 301, 6000]},
            {"timestamp": 2, "input_length": 1024, "output_length": 1, "hash_ids": [10**15, 301]},
            {"timestamp": 3, "input_length": 1024, "output_length": 1, "hash_ids": [10**15, 7000]},
            # a float time: orjson reads this row (the scanner takes integers only); its ids are
            # shared the same way, the first object seen of a value kept
            {"timestamp": 4.5, "input_length": 1536, "output_length": 1, "hash_ids": [300, 7000, 8000]}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    a, b, c, d, e = plain(path)[0]
    assert [r.block_hashes for r in (a, b, c, d, e)] == [(300, 301, 5000), (300, 301, 6000), (10**15, 301),
                                                        (10**15, 7000), (300, 7000, 8000)]
    assert a.block_hashes[0] is b.block_hashes[0] is e.block_hashes[0]
    assert a.block_hashes[1] is b.block_hashes[1] is c.block_hashes[1] and d.block_hashes[1] is e.block_hashes[1]
    assert c.block_hashes[0] == d.block_hashes[0] and c.block_hashes[0] is not d.block_hashes[0]
    assert outcome(path) == both(path)[1]


def test_conversation_trace_ids_are_shared():
    if not CONVERSATION.exists():
        pytest.skip("the shared conversation trace is not here")
    first: dict[int, int] = {}
    for r in plain(CONVERSATION, None)[0]:
        for x in r.block_hashes:
            assert first.setdefault(x, x) is x  # every repeat of an id is its first object


def test_fields_go_straight_into_the_request_slots(tmp_path):
    # Request's fields are all writable object slots: the twin writes them there (no attribute
    # lookup per field), and the requests are the reference's, every slot set.
    assert KERNEL.slots_written_directly()
    path = tmp_path / "t.jsonl"
    path.write_text('{"timestamp": 1500, "input_length": 1030, "output_length": 3, "hash_ids": [4, 9, 2]}\n')
    (r,), _, _ = plain(path)
    assert (r.request_id, r.arrival_time, r.prompt_len, r.block_hashes, r.hash_block_size, r.output_len,
            r.labels, r.session_id, r.after, r.delay_s, r.segments) == ("t:1", 1.5, 1030, (4, 9), 512, 3, {},
                                                                        None, None, 0.0, ())
    assert r == Request("t:1", 1.5, 1030, (4, 9), 512, 3) and hash(r) == hash(Request("t:1", 1.5, 1030, (4, 9), 512, 3))
    with pytest.raises(dataclasses.FrozenInstanceError):  # still a frozen Request
        r.prompt_len = 1


def test_rows_with_a_request_id_hand_computed(tmp_path):
    # fairsim convert's and bench --tile's rows: the id is kept; an empty one reads as STEM:LINE
    path = tmp_path / "t.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 600, "output_length": 2, "hash_ids": [1, 2], "request_id": "x#1"}\n'
                    '{"request_id":"", "timestamp": 5, "input_length": 600, "output_length": 2, "hash_ids": [3]}\n'
                    '{"timestamp": 6, "input_length": 9, "output_length": 2, "hash_ids": [], "request_id": "\\u00e9"}\n')
    requests, locations, block = plain(path)
    assert locations == {"x#1": 1, "t:2": 2, "\u00e9": 3} and block == 512
    assert [(r.request_id, r.arrival_time, r.block_hashes) for r in requests] == [
        ("x#1", 0.0, (1,)), ("t:2", 0.005, (3,)), ("\u00e9", 0.006, ())]
    assert both(path)[0] == both(path)[1] == outcome(path)
    # a repeated id (here the name the second row would get) is the Python path's to report
    path.write_text('{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [], "request_id": "t:2"}\n'
                    '{"timestamp": 1, "input_length": 10, "output_length": 1, "hash_ids": []}\n')
    assert plain(path) is None
    compiled, reference = both(path)
    assert compiled == reference and compiled[0] == "error" and "duplicates line 1" in compiled[2]


def test_a_row_it_does_not_take_hands_the_file_back(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": []}\n'
                    '{"timestamp": 1, "input_length": 10, "output_length": 1, "hash_ids": [], "session_id": "a"}\n')
    assert plain(path) is None
    compiled, reference = both(path)
    assert compiled == reference and compiled[0] == "trace"


@pytest.mark.skipif(not CONVERSATION.exists(), reason="shared conversation trace not present")
def test_conversation_trace_reads_the_same():
    compiled, reference = both(CONVERSATION)
    assert compiled[0] == "trace" and len(compiled[1]) == 12031
    assert compiled == reference


# How a row's text may be written: the scanner (``_Scanner``) reads the common row from its bytes
# and hands any other text to ``orjson.loads``; both must give what the Python path gives.
WHITESPACE = st.sampled_from(["", " ", "  ", "\t", "\r"])
NUMBER_TEXT = [  # (replacement for one integer's text) each a number orjson reads or refuses
    lambda v: f"0{v}", lambda v: f"-{v}", lambda v: f"{v}.0", lambda v: f"{v}e0", lambda v: f"{v}E1",
    lambda v: str(v).rjust(19, "9"), lambda v: "1" * 18, lambda v: "-0", lambda v: "0",
    lambda v: f"{v}x", lambda v: f'"{v}"', lambda v: "true", lambda v: "null",
]


@st.composite
def written_row(draw, row: dict) -> str:
    """``row`` as JSON text with drawn spacing, key order, and at most one odd token."""
    ws = lambda: draw(WHITESPACE)  # noqa: E731
    names = draw(st.permutations(list(row)))
    odd = draw(st.sampled_from([None] * 4 + ["number", "key", "repeat", "after", "array"]))
    odd_name = draw(st.sampled_from(names)) if odd in ("number", "key", "repeat") else None
    members = []
    for name in names:
        value = row[name]
        if isinstance(value, list):
            items = [str(x) for x in value]
            if odd == "array" and items:
                items[draw(st.integers(0, len(items) - 1))] = draw(st.sampled_from(NUMBER_TEXT))(1)
            text = "[" + ws() + f"{ws()},{ws()}".join(items) + ws() + "]"
        else:
            text = json.dumps(value)
            if odd == "number" and name == odd_name and isinstance(value, int):
                text = draw(st.sampled_from(NUMBER_TEXT))(value)
        key = json.dumps(name)
        if odd == "key" and name == odd_name:
            key = draw(st.sampled_from(['"\\u0074imestamp"', '"input_length "', '"hash_id"', '"Hash_ids"']))
        members.append(f"{ws()}{key}{ws()}:{ws()}{text}{ws()}")
        if odd == "repeat" and name == odd_name:
            members.append(f"{ws()}{key}:{text}")
    tail = draw(st.sampled_from(["", " x", "}", ",", " {}"])) if odd == "after" else ws()
    return ws() + "{" + ",".join(members) + "}" + tail


@st.composite
def written_files(draw):
    lines, t = [], 0.0
    for _ in range(draw(st.integers(1, 6))):
        t += draw(st.sampled_from([0.0, 1.0, 3.0]))
        lines.append(draw(written_row(draw(plain_row(t)))))
    return "\n".join(lines) + draw(st.sampled_from(["", "\n", "\r\n"]))


@settings(max_examples=300, deadline=None)
@given(written_files(), st.sampled_from([None, 16]))
def test_any_spelling_of_a_row_reads_as_the_python_path_reads_it(text, given_block):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "t.jsonl"
        path.write_bytes(text.encode())
        compiled, reference = both(path, hash_block_size=given_block)
        assert compiled == reference


def test_spaced_and_reordered_rows_are_scanned_hand_computed(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('\t{ "hash_ids" :[ 9 ,8,7 ] ,"output_length":2,"input_length" : 1536,"timestamp":0 }\r\n'
                    '{"timestamp":12,"input_length":1023,"output_length":1,"hash_ids":[4,5]}\n', encoding="utf-8")
    requests, locations, block = plain(path)
    # 1,536 tokens: 3 full blocks, ids in any order; 1,023 tokens: 1 full block (ceil count 2)
    assert [(r.arrival_time, r.prompt_len, r.block_hashes, r.output_len) for r in requests] == [
        (0.0, 1536, (9, 8, 7), 2), (0.012, 1023, (4,), 1)]
    assert (locations, block) == ({"t:1": 1, "t:2": 2}, 512)
    # a repeated id in an unordered row is found (the sorted check), and the file handed back
    path.write_text('{"timestamp":0,"input_length":1536,"output_length":1,"hash_ids":[9,7,9]}\n', encoding="utf-8")
    assert plain(path) is None
    assert both(path)[0] == both(path)[1]


@pytest.mark.parametrize("field", ["timestamp", "input_length", "output_length", "hash_ids"])
@pytest.mark.parametrize("number", range(len(NUMBER_TEXT)))
def test_every_odd_number_in_every_field_reads_as_the_python_path_reads_it(tmp_path, field, number):
    row = {"timestamp": 5, "input_length": 1100, "output_length": 3, "hash_ids": [7, 8, 9]}
    text = NUMBER_TEXT[number](row[field][0] if field == "hash_ids" else row[field])
    members = [f'"{k}": {text if k == field and k != "hash_ids" else json.dumps(v)}' for k, v in row.items()]
    if field == "hash_ids":
        members[-1] = f'"hash_ids": [7, {text}, 9]'
    path = tmp_path / "t.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1, 2]}\n'
                    "{" + ", ".join(members) + "}\n", encoding="utf-8")
    compiled, reference = both(path)
    assert compiled == reference
