"""The Bailian reader's compiled re-chaining (``fairsim/traces/formats/_chain_c.pyx``) against its
Python reference (``bailian.chain_ids``): the same names for any ids -- chained or not, dense or
sparse, negative, past 64 bits (handed back) -- and the same trace from a whole file.

Skipped only where the twin is not in use (no C compiler, ``FAIRSIM_PURE_PYTHON=1``); with a
compiler and no extension it fails, telling to reinstall (``tests.utils.compiled_twin_or_skip``).
"""

from __future__ import annotations

import json
from array import array
from functools import partial

from hypothesis import given, settings, strategies as st

from fairsim.traces.formats import bailian
from fairsim.types import Request
from tests.utils import compiled_twin_or_skip, pure_python

KERNEL = compiled_twin_or_skip("fairsim.traces.formats._chain_c")


def reference(id_lists):
    with pure_python():
        return bailian.chain_ids(id_lists)


def test_hand_computed_names():
    # Names in order of first sight of (previous name, id): the shared prefix [7, 8] is named
    # once; 8 after another id (9) is another block; a repeat of a whole prompt gives its names.
    got = KERNEL.chain_ids([[7, 8, 9], [7, 8, 5], [9, 8], [7, 8, 9]])
    assert got == [(0, 1, 2), (0, 1, 3), (4, 5), (0, 1, 2)]
    assert all(type(x) is int for t in got for x in t)


def test_ids_past_64_bits_or_not_ints_are_handed_back():
    assert KERNEL.chain_ids([[1, 2], [2**63]]) is None
    assert KERNEL.chain_ids([[1, True]]) is None
    assert KERNEL.chain_ids([[1, 2.0]]) is None
    assert KERNEL.chain_ids([[-2**63, 2**63 - 1]]) == [(0, 1)]
    assert KERNEL.chain_ids([array("q", [7, 8]), [7, 8, 9], array("i", [1])]) is None  # not 'q': handed back
    assert KERNEL.chain_ids([array("q", [7, 8]), [7, 8, 9]]) == [(0, 1), (0, 1, 2)]


POOLS = {"dense": st.integers(0, 6), "negative": st.integers(-3, 3), "sparse": st.sampled_from([0, 5, 10**12, 2**62]),
         "past 64 bits": st.sampled_from([0, 1, 2**64, -2**70])}


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(POOLS)), st.data())
def test_any_ids_get_the_reference_names(pool, data):
    id_lists = data.draw(st.lists(st.lists(POOLS[pool], max_size=6), max_size=8))
    kind = data.draw(st.sampled_from([list, tuple] + ([] if pool == "past 64 bits" else [partial(array, "q")])))
    id_lists = [kind(ids) for ids in id_lists]  # the reader gives arrays of 64-bit ids, or lists
    want = reference(id_lists)
    assert bailian.chain_ids(id_lists) == want
    got = KERNEL.chain_ids(id_lists)
    assert got is None or got == want


@st.composite
def bailian_files(draw):
    """Turns with shared prefixes, parents before and after, repeated ids at other parents."""
    lines, t = [], 0.0
    for chat in range(draw(st.integers(1, 7))):
        t += draw(st.sampled_from([0.0, 0.5, 2.0]))
        n = draw(st.integers(1, 5)) * 16 + draw(st.integers(0, 15))
        ids = draw(st.lists(st.integers(0, 9), min_size=-(-n // 16), max_size=-(-n // 16)))
        parent = draw(st.sampled_from([-1, -1, chat - 1, chat + 1, 99]))
        lines.append(json.dumps({"chat_id": chat, "parent_chat_id": parent, "timestamp": t, "input_length": n,
                                 "output_length": draw(st.integers(0, 3)), "type": "text", "turn": 1,
                                 "hash_ids": ids}))
    return "\n".join(lines) + "\n"


def outcome(path, **kwargs):
    try:
        trace = bailian.read(path, **kwargs)
    except (ValueError, OSError) as exc:
        return ("error", type(exc).__name__, str(exc))
    return ([tuple(repr(getattr(r, f)) for f in Request.__slots__) for r in trace.requests],
            [str(e) for e in trace.skipped], trace.warnings, trace.locations)


def assert_reads_as_python(tmp_path_factory, text: str, skip_bad: bool) -> None:
    """The file ``text`` reads the same with the compiled twins and with the Python path."""
    path = tmp_path_factory.mktemp("bailian") / "t.jsonl"
    path.write_text(text)
    compiled = outcome(path, skip_bad=skip_bad)
    with pure_python():
        assert outcome(path, skip_bad=skip_bad) == compiled


@settings(max_examples=150, deadline=None)
@given(bailian_files(), st.booleans())
def test_a_file_reads_as_with_the_python_names(tmp_path_factory, text, skip_bad):
    assert_reads_as_python(tmp_path_factory, text, skip_bad)


def test_split_ids_hand_computed():
    line = b'{"chat_id": 3, "hash_ids" : [ 0 , 17,123456789012345678 ], "turn": 1}\n'
    rest, ids = KERNEL.split_ids(line)
    assert rest == b'{"chat_id": 3, "hash_ids" : [], "turn": 1}\n'
    assert ids == array("q", [0, 17, 123456789012345678])
    assert KERNEL.split_ids(b'{"hash_ids": []}') == (b'{"hash_ids": []}', array("q"))
    for refused in (b'{"hash_ids": [01]}', b'{"hash_ids": [1,]}', b'{"hash_ids": [-1]}', b'{"hash_ids": [1.0]}',
                    b'{"hash_ids": [1234567890123456789]}', b'{"hash_ids": [1], "hash_ids": [2]}',
                    b'{"a": "\\\\", "hash_ids": [1]}', b'{"hash_ids": ["1"]}', b'{"hash_ids" [1]}', b'{"hash_ids": 1}'):
        assert KERNEL.split_ids(refused) is None, refused


# Ways to write a line's hash_ids that the bytes scanner must read as a JSON parser does, or hand
# to the parser: spacing, JSON's integer spelling, ids as text, a nested or repeated key, escapes.
SPELLINGS = [
    lambda text: text,
    lambda text: text.replace('"hash_ids": [', '"hash_ids" :[ ').replace(", ", " ,"),
    lambda text: text.replace('"hash_ids": [', '"hash_ids": [0'),  # a leading zero: not JSON
    lambda text: text.replace('"hash_ids": [', '"hash_ids": [-'),
    lambda text: text.replace('"hash_ids": [', '"hash_ids": [1234567890123456789, '),  # 19 digits
    lambda text: text.replace('"hash_ids": [', '"hash_ids": [18446744073709551615, '),  # u64
    lambda text: text.replace('"hash_ids": [', '"hash_ids": [true, '),
    lambda text: text.replace('"hash_ids": [', '"hash_ids": ["7", '),
    lambda text: text.replace('"hash_ids": [', '"hash_ids": [7.0, '),
    lambda text: text.replace('"hash_ids"', '"hash\\u005fids"'),
    lambda text: text.replace('"type": "text"', '"type": "te\\"xt"'),
    lambda text: text.replace('"type": "text"', '"type": "hash_ids"'),
    lambda text: text.replace('"type": "text"', '"type": {"hash_ids": []}'),
    lambda text: text[:-1] + ', "hash_ids": [1]}',
    lambda text: text.replace('"type": "text", ', '"hash_ids": [], '),
    lambda text: text.replace("]", "]]", 1),
    lambda text: text + " x",
]


@st.composite
def spelled_files(draw):
    lines = draw(bailian_files()).splitlines()
    return "\n".join(draw(st.sampled_from(SPELLINGS))(line) for line in lines) + "\n"


@settings(max_examples=200, deadline=None)
@given(spelled_files(), st.booleans())
def test_any_spelling_of_the_ids_reads_as_the_python_path(tmp_path_factory, text, skip_bad):
    assert_reads_as_python(tmp_path_factory, text, skip_bad)
