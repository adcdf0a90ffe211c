"""Trace loading (errors name file, line and field), the embedded input, load shaping."""

import json
from pathlib import Path

import pytest

from fairsim.costmodel import load_profile
from fairsim.errors import TraceFormatError
from fairsim.traces import (DEFAULT_RAG_PATH, RagSpec, generate_rag, load_mooncake, load_trace,
                            offered_load, scale_time, window, write_mooncake)

SHARED_TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "traces"
GOOD = {"timestamp": 0, "input_length": 1100, "output_length": 5, "hash_ids": [7, 8, 9]}


def write_lines(tmp_path, lines):
    path = tmp_path / "t.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    return path


class TestMooncakeLoader:
    """Valid records and every kind of bad record."""

    def test_valid_record(self, tmp_path):
        path = write_lines(tmp_path, [json.dumps(GOOD), json.dumps({**GOOD, "timestamp": 1500})])
        trace = load_mooncake(path)
        r0, r1 = trace.requests
        assert r0.prompt_len == 1100 and r0.output_len == 5
        assert r0.block_hashes == (7, 8)  # 1100 = 2 full blocks + a partial one (not cacheable)
        assert r1.arrival_time == 1.5 and r1.request_id == "t:2"

    @pytest.mark.parametrize("line, field, why", [
        ('{"timestamp": 0, "input_length": 10', "<json>", "not valid JSON: Expecting ',' delimiter \\(the line ends early\\)"),
        ('{"timestamp": 0 "input_length": 10}', "<json>", "not valid JSON: Expecting ',' delimiter \\(at character 17\\)"),
        (json.dumps({k: v for k, v in GOOD.items() if k != "input_length"}), "input_length", "missing"),
        (json.dumps({**GOOD, "output_length": -3}), "output_length", "negative"),
        (json.dumps({**GOOD, "input_length": -1100}), "input_length", "negative"),
        (json.dumps({**GOOD, "timestamp": "soon"}), "timestamp", "must be a number"),
        (json.dumps({**GOOD, "hash_ids": [1]}), "hash_ids", "span 3 blocks of 512 tokens"),
        (json.dumps({**GOOD, "input_length": 10.5}), "input_length", "must be an integer"),
    ])
    def test_bad_record_names_file_line_field(self, tmp_path, line, field, why):
        path = write_lines(tmp_path, [json.dumps(GOOD), line])
        with pytest.raises(TraceFormatError, match=why) as info:
            load_mooncake(path)
        err = info.value
        assert (err.line, err.field) == (2, field)
        assert str(err).startswith(f"{path}:2: field '{field}'")

    def test_blank_lines(self, tmp_path):
        # Trailing blank lines carry nothing and are accepted; a blank line between records is not.
        path = write_lines(tmp_path, [json.dumps(GOOD), "", "  "])
        assert len(load_mooncake(path)) == 1
        path = write_lines(tmp_path, [json.dumps(GOOD), "", json.dumps(GOOD)])
        with pytest.raises(TraceFormatError, match=r":2: field '<json>': empty line before more records"):
            load_mooncake(path)

    def test_not_utf8_and_bom(self, tmp_path):
        path = tmp_path / "t.jsonl"
        path.write_bytes(b"\xef\xbb\xbf" + json.dumps(GOOD).encode() + b"\n\xff\xfe\n")
        with pytest.raises(TraceFormatError, match=r":2: field '<json>': not UTF-8 text"):
            load_mooncake(path)

    def test_decreasing_timestamp(self, tmp_path):
        path = write_lines(tmp_path, [json.dumps({**GOOD, "timestamp": 500}), json.dumps({**GOOD, "timestamp": 400})])
        with pytest.raises(TraceFormatError, match=r":2: field 'timestamp': decreases: 400 ms after 500 ms"):
            load_mooncake(path)

    def test_skip_bad_counts_and_keeps_the_rest(self, tmp_path):
        path = write_lines(tmp_path, [
            json.dumps(GOOD), "{broken", json.dumps({**GOOD, "timestamp": 10}),
            json.dumps({**GOOD, "timestamp": 5}), json.dumps({**GOOD, "timestamp": 20}),
        ])
        trace = load_mooncake(path, skip_bad=True)
        assert [r.request_id for r in trace.requests] == ["t:1", "t:3", "t:5"]
        assert [(e.line, e.field) for e in trace.skipped] == [(2, "<json>"), (4, "timestamp")]

    @pytest.mark.skipif(not SHARED_TRACES.is_dir(), reason="shared traces not beside the repo")
    def test_conversation_trace(self):
        trace = load_mooncake(SHARED_TRACES / "conversation_trace.jsonl")
        assert len(trace) == 12031 and not trace.skipped
        assert trace.requests[-1].arrival_time == 3536.999
        assert sum(len(r.block_hashes) for r in trace.requests) == sum(
            r.prompt_len // 512 for r in trace.requests)


class TestDefaultInput:
    """The shipped RAG input is what the generator makes."""

    def test_shipped_file_matches_generator(self, tmp_path):
        write_mooncake(generate_rag(RagSpec()), tmp_path / "rag.jsonl")
        assert (tmp_path / "rag.jsonl").read_text() == DEFAULT_RAG_PATH.read_text()

    def test_load_default(self):
        trace = load_trace()
        assert len(trace) == RagSpec().num_requests
        r = trace.requests[0]
        assert r.block_hashes[0] == 0  # the shared system prompt block
        assert "doc_id" in r.labels

    def test_same_doc_shares_prefix(self):
        reqs = generate_rag(RagSpec(num_requests=200)).requests
        by_doc = {}
        for r in reqs:
            by_doc.setdefault(r.labels["doc_id"], []).append(r)
        a, b = next(v for v in by_doc.values() if len(v) >= 2)[:2]
        shared = min(a.labels["excerpts"], b.labels["excerpts"]) * 2 + 1
        assert a.block_hashes[:shared] == b.block_hashes[:shared]

    def test_seed_changes_trace(self):
        assert generate_rag(RagSpec(seed=1)).requests != generate_rag(RagSpec(seed=0)).requests


class TestShaping:
    """Time scaling, windows and the offered-load statement."""

    def test_scale_and_window(self, tmp_path):
        path = write_lines(tmp_path, [json.dumps({**GOOD, "timestamp": t}) for t in (0, 1000, 2000, 3000)])
        reqs = list(load_mooncake(path).requests)
        assert [r.arrival_time for r in scale_time(reqs, 2.0)] == [0.0, 2.0, 4.0, 6.0]
        assert [r.arrival_time for r in window(reqs, 1.0, 3.0)] == [0.0, 1.0]
        assert len(window(reqs, max_requests=3)) == 3
        with pytest.raises(ValueError):
            scale_time(reqs, 0)

    def test_offered_load_by_hand(self, tmp_path):
        # Two 1100-token requests 1 s apart, same first two blocks: ideal reuse saves 1024 tokens.
        path = write_lines(tmp_path, [json.dumps(GOOD), json.dumps({**GOOD, "timestamp": 1000})])
        prof = load_profile()
        load = offered_load(list(load_mooncake(path).requests), prof)
        assert load.span_s == 1.0
        assert load.prompt_tokens_per_s == 2200
        assert load.ideal_uncached_tokens_per_s == 2200 - 1024
        # Capacity at these prompt lengths: 2 x 1100 tokens over 2 x T_idle(1100).
        assert load.capacity_tokens_per_s == pytest.approx(1100 / prof.idle_prefill_time(1100))
        assert load.load == pytest.approx(2200 / load.capacity_tokens_per_s)
