"""The Mooncake reader's quick check of a row (``mooncake._parse``): a plain row, with or without
string identities (``request_id``, ``session_id``, ``after``: what ``fairsim convert`` writes),
gives what the field-by-field checks give. The Python path is read both ways (the compiled twin
is switched off: ``FAIRSIM_PURE_PYTHON=1``): with the quick check for identities, and with it off
(``mooncake._IDENT`` empty, so such rows take the field-by-field checks)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import example, given, settings, strategies as st

from fairsim.traces.formats import mooncake
from tests.utils import pure_python, read_outcome

IDENT_VALUES = st.sampled_from([None, "a", "s1", "conv:3", "", 7, True, 2.5, ["x"]])


@st.composite
def rows(draw):
    lines, t = [], 0
    for i in range(draw(st.integers(1, 8))):
        t += draw(st.sampled_from([0, 250, 1000]))
        n = draw(st.integers(1, 3 * 512))
        ids = list(range(i * 10, i * 10 + -(-n // 512)))
        row = {"timestamp": draw(st.sampled_from([t, float(t)])), "input_length": n,
               "output_length": draw(st.sampled_from([1, 5, 0])), "hash_ids": ids}
        for key in draw(st.sets(st.sampled_from(["request_id", "session_id", "after"]))):
            row[key] = draw(IDENT_VALUES)
        if draw(st.booleans()):
            row = dict(reversed(list(row.items())))  # another key order
        lines.append(json.dumps(row))
    return "\n".join(lines) + "\n"


def both_ways(path: Path):
    with pure_python():
        quick = read_outcome(mooncake.read, path)
        saved = mooncake._IDENT
        mooncake._IDENT = frozenset()
        try:
            checked = read_outcome(mooncake.read, path)
        finally:
            mooncake._IDENT = saved
    return quick, checked


@settings(max_examples=200, deadline=None)
@given(rows())
@example('{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [0], "after": "a", '
         '"request_id": "a"}\n')  # a self-link: the quick check leaves it to the checks that name 'after'
def test_rows_with_identities_read_as_the_field_by_field_checks(text):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "t.jsonl"
        path.write_text(text)
        quick, checked = both_ways(path)
        assert quick == checked


def test_a_converted_row_takes_the_quick_check(tmp_path, monkeypatch):
    """A row as ``fairsim convert`` writes it is accepted by the quick check (no field-by-field
    call), and its identity is kept."""
    path = tmp_path / "t.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [4, 5], '
                    '"request_id": "conv:1", "session_id": "s", "after": null}\n')

    def refuse(*args):
        raise AssertionError("the field-by-field checks ran")

    monkeypatch.setattr(mooncake, "_pick", refuse)
    with pure_python():
        trace = mooncake.read(path)
    (r,) = trace.requests
    assert (r.request_id, r.session_id, r.after, r.prompt_len, r.block_hashes, r.output_len) == (
        "conv:1", "s", None, 600, (4,), 3)


@pytest.mark.parametrize("value", [7, True, ["x"]])
def test_an_identity_that_is_not_a_string_takes_the_checks(tmp_path, value):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [4, 5],
                                "session_id": value}) + "\n")
    quick, checked = both_ways(path)
    assert quick == checked
    assert (quick[0] == "trace") == (type(value) is int)  # 7 -> "7"; a bool or a list is refused


@pytest.mark.parametrize("ident", [False, True])
@pytest.mark.parametrize("pure", [False, True])
def test_equal_lengths_share_one_int_object(tmp_path, ident, pure):
    """Requests with equal prompt (or output) lengths hold one int object for them, on the
    compiled plain-row path and the Python path (rows with a ``request_id`` take the Python path),
    lengths above CPython's small-int cache; the values are those of the file."""
    rows = [(1000, 300), (700, 1000), (1000, 300), (2000, 700)]
    lines = []
    for i, (n, out) in enumerate(rows):
        ids = list(range(10 * i, 10 * i + n // 512))  # the full blocks' ids
        row = {"timestamp": i, "input_length": n, "output_length": out, "hash_ids": ids}
        if ident:
            row["request_id"] = f"r{i}"
        lines.append(json.dumps(row))
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines) + "\n")
    if pure:
        with pure_python():
            reqs = mooncake.read(path).requests
    else:
        reqs = mooncake.read(path).requests
    assert [(r.prompt_len, r.output_len) for r in reqs] == rows
    assert reqs[0].prompt_len is reqs[2].prompt_len is reqs[1].output_len
    assert reqs[0].output_len is reqs[2].output_len
    assert reqs[1].prompt_len is reqs[3].output_len
