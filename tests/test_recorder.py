"""fairsim.live.recorder without vLLM: fake requests through the recorder's event calls."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from fairsim.live.recorder import TraceRecorder, block_id
from fairsim.traces import load_trace


def fake(rid, arrival, prompt, hashes, session=None):
    return SimpleNamespace(request_id=rid, arrival_time=arrival, num_prompt_tokens=prompt,
                           block_hashes=[h.to_bytes(32, "big") for h in hashes], num_output_tokens=0,
                           sampling_params=SimpleNamespace(extra_args={"session_id": session} if session else None),
                           status=SimpleNamespace(name="FINISHED_LENGTH_CAPPED"))


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_lines_in_arrival_order_and_loadable(tmp_path):
    clock = Clock()
    path = tmp_path / "rec.jsonl"
    rec = TraceRecorder(path, 4, clock)
    a, b = fake("a", 100.0, 9, [1, 2], session="s1"), fake("b", 100.5, 8, [1, 3])
    live = {"a": a, "b": b}
    rec.add(a)
    rec.add(b)
    clock.t = 100.6
    rec.scheduled("b", 4, clock.t)  # b admitted first, with one cached block
    b.num_output_tokens = 1
    clock.t = 100.8
    del live["b"]
    rec.after_step(live)
    assert path.read_text() == "" and rec.in_memory == 2  # b waits behind a (arrival order)
    clock.t = 101.0
    rec.scheduled("a", 0, clock.t)
    a.num_output_tokens = 3
    clock.t = 101.25
    del live["a"]
    rec.after_step(live)
    assert rec.in_memory == 0 and rec.written == 2
    # Before close (an engine killed at shutdown never closes): no count in the sidecar, which
    # would be 0 beside two lines, and the reader would refuse it as another file's.
    assert "requests" not in json.loads((tmp_path / "rec.jsonl.meta.json").read_text())
    assert len(load_trace(str(path)).requests) == 2
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["request_id"] for r in rows] == ["a", "b"]
    ra, rb = rows
    assert ra["timestamp"] == 0 and rb["timestamp"] == 500
    assert ra["input_length"] == 9 and ra["output_length"] == 3 and rb["output_length"] == 1
    # two full blocks + a partial one for a (9 tokens of 4); b is two full blocks, no partial
    assert len(ra["hash_ids"]) == 3 and len(rb["hash_ids"]) == 2
    assert ra["hash_ids"][0] == rb["hash_ids"][0] == block_id((1).to_bytes(32, "big"))
    assert ra["hash_ids"][1] != rb["hash_ids"][1]
    assert ra["session_id"] == "s1" and "session_id" not in rb
    assert rb["observed_cached_tokens"] == 4 and rb["observed_first_scheduled_ms"] == 600.0
    assert rb["observed_ttft_ms"] == 300.0 and ra["observed_ttft_ms"] == 1250.0
    rec.close()
    meta = json.loads((tmp_path / "rec.jsonl.meta.json").read_text())
    assert meta["hash_block_size"] == 4 and meta["requests"] == 2
    trace = load_trace(str(path))
    assert [r.hash_block_size for r in trace.requests] == [4, 4]
    assert trace.requests[0].block_hashes[0] == trace.requests[1].block_hashes[0]
    assert trace.requests[1].labels["observed_cached_tokens"] == 4


def test_memory_flat_over_a_long_stream(tmp_path):
    # 20,000 requests, each finishing in the step after it arrives: at most two held at once.
    clock = Clock()
    rec = TraceRecorder(tmp_path / "long.jsonl", 16, clock)
    live = {}
    peak = 0
    for i in range(20_000):
        r = fake(f"r{i}", 100.0 + i, 40, [i % 7, 100 + i])
        live[r.request_id] = r
        rec.add(r)
        rec.scheduled(r.request_id, 0, clock())
        r.num_output_tokens = 1
        live.pop(f"r{i - 1}", None)
        rec.after_step(live)
        peak = max(peak, rec.in_memory)
    rec.close()  # the last request is still in flight: not written
    assert peak <= 2 and rec.written == 19_999


def test_restart_and_bad_block(tmp_path):
    rec = TraceRecorder(tmp_path / "x.jsonl", 4, Clock())
    rec.add(fake("warm", 1.0, 5, [1]))
    rec.restart()
    rec.close()
    assert (tmp_path / "x.jsonl").read_text() == ""
    with pytest.raises(ValueError, match="block size"):
        TraceRecorder(tmp_path / "y.jsonl", 0, Clock())
