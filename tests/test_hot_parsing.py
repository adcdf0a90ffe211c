"""The Mooncake reader's per-line fast paths keep every check (they exist for speed only)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairsim.errors import TraceFormatError
from fairsim.traces.formats._common import need_ids
from fairsim.traces.formats.mooncake import _pick


def test_need_ids_fast_path_copies_and_keeps_the_checks():
    ids = [1, 2, 3]
    out = need_ids(ids, "t.jsonl", 4, "hash_ids")
    assert out == [1, 2, 3] and out is not ids
    assert need_ids([1, "18446744073709551615"], "t.jsonl", 4, "hash_ids") == [1, 18446744073709551615]
    assert need_ids([], "t.jsonl", 4, "hash_ids") == []
    with pytest.raises(TraceFormatError, match=r"t.jsonl:4: field 'hash_ids': entry 1 is True, not an integer"):
        need_ids([1, True], "t.jsonl", 4, "hash_ids")
    with pytest.raises(TraceFormatError, match="entry 0 is 1.0"):
        need_ids([1.0], "t.jsonl", 4, "hash_ids")


def test_pick_matches_first_of():
    assert _pick({"delay": 5}, ("delay", "delay_ms"), "t.jsonl", 2) == ("delay", 5)
    assert _pick({"delay_ms": 0}, ("delay", "delay_ms"), "t.jsonl", 2) == ("delay_ms", 0)
    assert _pick({"x": 1}, ("delay", "delay_ms"), "t.jsonl", 2) is None
    with pytest.raises(TraceFormatError, match=r"t.jsonl:2: field 'delay_ms': given together with 'delay'"):
        _pick({"delay": 1, "delay_ms": 2}, ("delay", "delay_ms"), "t.jsonl", 2)


_BOUNDS = [2**64 - 1, 2**64, -2**63, -2**63 - 1, 10**18, 10**19 - 1, 10**19, 10**20, 2**63, -10**18]


def _orjson_safe_twin():
    from tests.utils import compiled_twin_or_skip

    return compiled_twin_or_skip("fairsim.traces.formats._mooncake_c").orjson_safe


@pytest.mark.parametrize("line", [
    b'{"ids": [18446744073709551615]}', b'{"ids": [18446744073709551616]}',   # u64 max, one past
    b'{"a": -9223372036854775808}', b'{"a": -9223372036854775809}',           # int64 min, one past
    b'{"a": 00000000000000000001}', b'{"a": -00000000000000000001}',          # leading zeros
    b'{"a": 000000000000000000001}', b'{"a": 9999999999999999999}',          # 21-digit run; 19 nines
    b'{"a": 99999999999999999999}', b'{"a": "x18446744073709551616"}',        # > u64; inside a string
    b'{"a": 1.23456789012345678901234}', b'{"a": 1e-92233720368547758090}',    # float digits
    b'', b'-', b'1234567890123456789-', b'{"ids": [1, 2, 3]}',
])
def test_compiled_orjson_safe_matches_the_reference(line):
    from fairsim.traces.formats._common import _orjson_safe

    assert _orjson_safe_twin()(line) is _orjson_safe(line)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(st.integers(-2**70, 2**70), st.sampled_from(_BOUNDS),
                          st.integers(-2**70, 2**70).map(lambda v: f"0000{v}" if v >= 0 else f"-0000{-v}")),
                max_size=6),
       st.sampled_from([", ", ",", " x", "-", "e"]))
def test_compiled_orjson_safe_matches_the_reference_on_runs_of_digits(values, sep):
    from fairsim.traces.formats._common import _orjson_safe

    line = ("[" + sep.join(str(v) for v in values) + "]").encode()
    assert _orjson_safe_twin()(line) is _orjson_safe(line)


def _reference_distinct(ids):
    """True where need_ids returns ids unchanged (exact ints, here within 64 bits unsigned) and
    check_chained passes them; else False."""
    from fairsim.traces.formats._common import check_chained

    if not all(type(x) is int and 0 <= x <= 2**64 - 1 for x in ids):
        return False
    try:
        check_chained(need_ids(ids, "t", 1, "f"), "t", 1, "f")
    except TraceFormatError:
        return False
    return True


def test_distinct_u64_ids_by_hand():
    from tests.utils import compiled_twin_or_skip

    distinct = compiled_twin_or_skip("fairsim.traces.formats._mooncake_c").distinct_u64_ids
    assert distinct([]) is True and distinct([0]) is True and distinct([2**64 - 1, 0, 2**63]) is True
    assert distinct([5, 7, 5]) is False and distinct([2**64 - 1, 2**64 - 1]) is False
    for other in ([1, True], [1, 2.0], [1, "2"], [-1, 2], [2**64], [1, -2**70], [None], [0, 0, 2**64]):
        assert distinct(other) is False, other
    assert distinct(list(range(5000))) is True and distinct(list(range(5000)) + [4999]) is False


@settings(max_examples=500, deadline=None)
@given(st.lists(st.one_of(st.integers(0, 40), st.sampled_from(_BOUNDS), st.integers(0, 2**64 - 1),
                          st.sampled_from([True, 1.5, "7"])), max_size=300))
def test_distinct_u64_ids_matches_the_readers_checks(ids):
    from tests.utils import compiled_twin_or_skip

    distinct = compiled_twin_or_skip("fairsim.traces.formats._mooncake_c").distinct_u64_ids
    assert distinct(ids) is _reference_distinct(ids)
