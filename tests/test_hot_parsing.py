"""The Mooncake reader's per-line fast paths keep every check (they exist for speed only)."""

import pytest

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
