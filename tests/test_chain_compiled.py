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


# -- RowScanner: a plain row checked on its bytes -------------------------------------------------

def scan(line: bytes, block: int = 16):
    import orjson
    return KERNEL.RowScanner(block, orjson.loads)(line)


def test_row_scanner_hand_computed():
    line = (b'{"chat_id": 7, "parent_chat_id": -1, "timestamp": 61.114, "input_length": 40, '
            b'"output_length": 9, "type": "text", "turn": 1, "hash_ids": [5, 6]}\n')
    chat, parent, ts, prompt, output, ids, labels = scan(line)
    assert (chat, parent, ts, prompt, output) == (7, -1, 61.114, 40, 9)
    assert ids == array("q", [5, 6]) and list(labels.items()) == [("type", "text"), ("turn", 1)]
    # Keys in another order, labels in the line's order, no labels, an integer timestamp (a float)
    got = scan(b'{"turn":3,"hash_ids":[1,2,3],"timestamp":5,"chat_id":0,"parent_chat_id":12,'
               b'"output_length":1,"input_length":48,"type":"image"}')
    assert got[:5] == (0, 12, 5.0, 48, 1) and type(got[2]) is float
    assert list(got[6].items()) == [("turn", 3), ("type", "image")]
    got = scan(b' { "chat_id" : 1 , "parent_chat_id" : 0 , "timestamp" : 0.5 , "input_length" : 15 ,'
               b' "output_length" : 2 , "hash_ids" : [ ] } \r\n')
    assert got == (1, 0, 0.5, 15, 2, array("q"), {})
    assert scan(b'{"chat_id": 1, "parent_chat_id": 0, "timestamp": 0, "input_length": 33, '
                b'"output_length": 2, "hash_ids": [1, 2, 3]}', block=16)[5] == array("q", [1, 2, 3])  # ceil
    base = ('{"chat_id": 1, "parent_chat_id": -1, "timestamp": 2.5, "input_length": 32, "output_length": 3, '
            '"type": "text", "turn": 1, "hash_ids": [1, 2]}')
    assert scan(base.encode()) is not None
    refused = [
        base.replace('"turn": 1', '"turn": 1, "extra": 0'),  # another field
        base.replace('"turn": 1', '"turn": 1, "turn": 2'),  # a repeated key
        base.replace('"timestamp": 2.5, ', ''),  # a required field missing
        base.replace("-1", "-2"), base.replace("-1", "-10"), base.replace("-1", "-0"),  # the reader's messages
        base.replace("2.5", "2.5e3"), base.replace("2.5", "25E-1"), base.replace("2.5", "-2.5"),
        base.replace("2.5", "2."), base.replace("2.5", ".5"), base.replace("2.5", "02.5"),
        base.replace("2.5", '"2.5"'), base.replace("2.5", "NaN"),
        base.replace('"output_length": 3', '"output_length": 0'),  # 0 gets a label: the reader's
        base.replace('"input_length": 32', '"input_length": 0'),
        base.replace('"input_length": 32', '"input_length": 64'),  # 2 ids do not fit 64 tokens
        base.replace('"chat_id": 1', '"chat_id": 1.0'), base.replace('"chat_id": 1', '"chat_id": true'),
        base.replace('"chat_id": 1', '"chat_id": 1234567890123456789'),  # 19 digits
        base.replace('"text"', '"t\\u0065xt"'), base.replace('"text"', '"t\u00e9xt"'), base.replace('"text"', "null"),
        base.replace('"turn": 1', '"turn": "1"'), base.replace("[1, 2]", "[1, 02]"), base.replace("[1, 2]", "[1, -2]"),
        base.replace('"chat_id"', '"chat\\u005fid"'), base + " x", base[:-1], "[" + base + "]", "\ufeff" + base, "",
    ]
    for text in refused:
        assert scan(text.encode()) is None, text


FIELD_SPELLINGS = {
    "chat_id": ["{chat}", "{chat}.0", "-{chat}", "true", '"{chat}"'],
    "parent_chat_id": ["-1", "{parent}", "-2", "-1.0", "null"],
    "timestamp": ["{t}", "{t}.25", "{t}.1000000000000000055511151231257827", "{t}e0", "{t}.5E1", "-{t}", "0{t}",
                  "{t}.", "1e400", '"{t}"'],
    "input_length": ["{n}", "0", "{n}.0", "-{n}"],
    "output_length": ["{out}", "0", "-1", "1.5"],
    "type": ['"text"', '"image"', '"te\\u0078t"', '"t\u00e9"', "3", "null", '""'],
    "turn": ["{turn}", "-1", '"1"', "1.0", "{big}"],
}


@st.composite
def plain_rows(draw):
    """Bailian lines whose fields are spelled plainly or not, in any order, some left out or
    repeated: the scanner must give the reader's tuple or hand the line over."""
    lines, t = [], 0
    for chat in range(draw(st.integers(1, 6))):
        t += draw(st.integers(0, 3))
        n = draw(st.integers(1, 5)) * 16 + draw(st.integers(0, 15))
        count = draw(st.sampled_from([-(-n // 16), n // 16, n // 16 + 2]))
        ids = draw(st.lists(st.integers(0, 9), min_size=count, max_size=count))
        values = {"chat": draw(st.sampled_from([chat, chat, 0])), "parent": draw(st.sampled_from([chat - 1, chat + 1, 99])),
                  "t": t, "n": n, "out": draw(st.integers(1, 3)), "turn": draw(st.integers(0, 3)), "big": 10**20}
        fields = []
        for key, spellings in FIELD_SPELLINGS.items():
            if key in ("type", "turn") and draw(st.booleans()):
                continue  # the labels are optional
            plain = draw(st.integers(0, 3)) > 0  # mostly the plain spelling
            spelling = spellings[0] if plain else draw(st.sampled_from(spellings))
            fields.append(f'"{key}": {spelling.format(**values)}')
        fields.append('"hash_ids": [' + ", ".join(map(str, ids)) + "]")
        if draw(st.integers(0, 9)) == 0:
            fields.append(draw(st.sampled_from(['"extra": 1', '"turn": 2', '"chat_id": 5'])))
        order = draw(st.permutations(range(len(fields))))
        sep = draw(st.sampled_from([", ", ",", " , "]))
        lines.append("{" + sep.join(fields[i] for i in order) + "}")
    return "\n".join(lines) + "\n"


@settings(max_examples=300, deadline=None)
@given(plain_rows(), st.booleans())
def test_rows_scanned_whole_read_as_the_python_path(tmp_path_factory, text, skip_bad):
    assert_reads_as_python(tmp_path_factory, text, skip_bad)


@settings(max_examples=300, deadline=None)
@given(plain_rows())
def test_a_scanned_row_is_what_the_checks_make_of_the_parsed_line(text):
    """Line by line: where the scanner takes a line, its tuple is the dict path's values."""
    import orjson
    for raw in text.encode().splitlines():
        got = scan(raw)
        if got is None:
            continue
        rec = orjson.loads(raw)
        labels = {k: v for k, v in rec.items() if k not in bailian._KNOWN}
        assert got == (rec["chat_id"], rec["parent_chat_id"], float(rec["timestamp"]), rec["input_length"],
                       rec["output_length"], array("q", rec["hash_ids"]), labels)
        assert list(got[6]) == list(labels) and type(got[2]) is float


def test_requests_of_writes_make_requests_objects():
    from fairsim.traces.fastreq import make_request
    accepted = [(3, ("7", 0.5, 40), (9, {"type": "text"}, "7", None, 0.0), None),
                (4, ("8", 1.5, 33), (1, {}, "7", "7", 1.0), None)]
    named = [(0, 1), (0, 1)]
    got = KERNEL.requests_of(accepted, named, 16)
    want = [make_request(*head, names, 16, *tail, ()) for (_, head, tail, _), names in zip(accepted, named)]
    assert [[repr(getattr(r, f)) for f in Request.__slots__] for r in got] == \
        [[repr(getattr(r, f)) for f in Request.__slots__] for r in want]
    # A value make_request refuses is refused with its message (Request.__post_init__ runs)
    for bad in [(3, ("7", 0.5, 40), (9, {}, "7", "7", 0.0), None),  # after names itself
                (3, ("7", 0.5, 16), (9, {}, "7", None, 0.0), None),  # two blocks in 16 tokens
                (3, ("7", -1.0, 40), (9, {}, "7", None, 0.0), None)]:
        try:
            make_request(*bad[1], (0, 1), 16, *bad[2], ())
        except ValueError as exc:
            want_msg = str(exc)
        try:
            KERNEL.requests_of([bad], [(0, 1)], 16)
        except ValueError as exc:
            assert str(exc) == want_msg
        else:
            raise AssertionError(f"{bad} was not refused")
