"""Defects found and mended in the twenty-eighth session (each test says what it was)."""

from __future__ import annotations

import gzip
import json

import pytest

from fairsim.policies import make_policy
from fairsim.traces import read_trace
from tests.utils import constant_profile

PROFILE = constant_profile()


def _dynamo_row(rid, received_ms, schema="dynamo.request.trace.v1"):
    row = {"event_type": "request_end",
           "request": {"request_id": rid, "input_tokens": 32, "output_tokens": 5,
                       "request_received_ms": received_ms,
                       "replay": {"trace_block_size": 16, "input_length": 32,
                                  "input_sequence_hashes": [11, 12]}}}
    if schema is not None:
        row["schema"] = schema
    return row


def test_a_dynamo_row_of_another_schema_version_is_read_with_a_warning(tmp_path):
    # Was: a row naming "dynamo.request.trace.v2" was read as v1 without a word, though a later
    # version may move or rename the fields the reader takes.
    path = tmp_path / "d.jsonl.gz"
    rows = [_dynamo_row("a", 1_000, "dynamo.request.trace.v2"), _dynamo_row("b", 1_500, "dynamo.request.trace.v2"),
            _dynamo_row("c", 2_000), _dynamo_row("d", 2_500, None)]
    path.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in rows).encode()))
    trace = read_trace(path)
    assert [r.request_id for r in trace.requests] == ["a", "b", "c", "d"]
    assert [r.arrival_time for r in trace.requests] == [0.0, 0.5, 1.0, 1.5]
    assert [w for w in trace.warnings if "schema" in w] == [
        f"{path}: request_end rows name the schema 'dynamo.request.trace.v2' (2 rows), not "
        "'dynamo.request.trace.v1', the one fairsim reads: they were read with its fields (docs/traces.md); "
        "check that their fields mean the same"]


def test_a_dynamo_trace_of_the_known_schema_or_none_has_no_schema_warning(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps(_dynamo_row("a", 1_000)) + "\n" + json.dumps(_dynamo_row("b", 1_200, None)) + "\n")
    assert read_trace(path).warnings == ()


@pytest.mark.parametrize("name, params, text", [
    ("fairway", {"fast_weight": True}, "Fairway fast_weight=true: need a finite number"),
    ("ragcache", {"pgdsf": None}, "RAGCache pgdsf=null: need true or false"),
    ("lpm", {"sglang_dedup": 1}, "LPM sglang_dedup=1: need true or false"),
    ("klpm", {"k": False}, "k-LPM k=false: need an integer >= 1"),
    ("suf", {"starvation_iterations": True}, "suf starvation_iterations=true: need an integer >= 1"),
])
def test_shipped_policies_spell_values_as_param_takes_them(name, params, text):
    # Was: "Fairway fast_weight=True: ...", Python's spelling, which --param reads as a string.
    with pytest.raises(ValueError) as info:
        make_policy(name, PROFILE, **params)
    assert text in str(info.value)
