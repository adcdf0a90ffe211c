"""How readers link parents, sub-agents and follow-ups (docs/sessions.md), with hand-computed gaps.

The Claude Code excerpt ``tests/data/formats/claude_code_excerpt/trace_0277.json`` keeps the
recorded values of the public ``callanjfox/kv-cache-tester`` file ``traces/trace_0277.json``
(its first request and its first two sub-agents, the second cut after its first request).
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from fairsim.cli import main
from fairsim.traces import load_trace

DATA = Path(__file__).parent / "data" / "formats"
EXCERPT = DATA / "claude_code_excerpt" / "trace_0277.json"


def by_id(trace):
    return {r.request_id: r for r in trace.requests}


class TestClaudeCodeSubagentGap:
    def test_public_excerpt_gaps(self):
        r = by_id(load_trace(EXCERPT))
        main0 = r["trace_0277/requests[0]"]
        sa1 = [r[f"trace_0277/requests[1].requests[{i}]"] for i in range(4)]
        sa2 = r["trace_0277/requests[2].requests[0]"]
        # Spawn t minus the end of the parent's request before it (0.0 + api_time 18.78); each
        # sub-agent's first think_time is 0.0 in the file and is not the gap.
        assert (sa1[0].after, sa1[0].arrival_time) == (main0.request_id, 79.224)
        assert sa1[0].delay_s == pytest.approx(79.224 - 18.78)  # 60.444 s
        assert (sa2.after, sa2.arrival_time) == (main0.request_id, 183.906)
        assert sa2.delay_s == pytest.approx(183.906 - 18.78)  # 165.126 s
        # Within the sub-agent: its recorded think_time (t 6.0 = 0.0 + 2.16 + ~4, rounded in the file).
        assert (sa1[1].after, sa1[1].delay_s, sa1[1].arrival_time) == (sa1[0].request_id, 4.0, 79.224 + 6.0)
        assert [x.delay_s for x in sa1[2:]] == [5.0, 3.0]

    def test_replay_releases_after_the_gap(self, tmp_path):
        assert main(["run", "--trace", str(EXCERPT), "--replay", "closed", "--policy", "fcfs",
                     "--out", str(tmp_path)]) == 0
        rows = pq.read_table(tmp_path / "requests-fcfs.parquet").to_pydict()
        at = {rid: i for i, rid in enumerate(rows["request_id"])}
        finish0 = rows["finish_s"][at["trace_0277/requests[0]"]]
        for rid, gap in (("trace_0277/requests[1].requests[0]", 60.444),
                         ("trace_0277/requests[2].requests[0]", 165.126)):
            assert rows["released_s"][at[rid]] - finish0 == pytest.approx(gap)

    def write(self, tmp_path, requests):
        p = tmp_path / "s.json"
        p.write_text(json.dumps({"block_size": 64, "requests": requests}))
        return by_id(load_trace(p))

    def parent_and_subagent(self, resume_t, think):
        """Parent 0-2 s; sub-agent spawned at 3 s runs 3-4 s; parent resumes at ``resume_t``."""
        return [{"t": 0.0, "in": 64, "out": 1, "api_time": 2.0, "think_time": 0.0},
                {"t": 3.0, "type": "subagent", "requests": [
                    {"t": 0.0, "in": 64, "out": 1, "api_time": 1.0, "think_time": 0.0}]},
                {"t": resume_t, "in": 64, "out": 1, "api_time": 1.0, "think_time": think}]

    def test_parent_waits_the_gap_after_its_subagent(self, tmp_path):
        # The parent's think_time (8.0) counts from its own previous response (ended at 2.0 s);
        # it waited for the sub-agent (ended at 4.0 s), so it is sent 10.0 - 4.0 s after it.
        r = self.write(tmp_path, self.parent_and_subagent(10.0, 8.0))
        sub, resume = r["s/requests[1].requests[0]"], r["s/requests[2]"]
        assert (sub.after, sub.delay_s) == ("s/requests[0]", 1.0)  # 3.0 - (0.0 + 2.0)
        assert (resume.after, resume.delay_s) == (sub.request_id, 6.0)

    def test_background_subagent_parent_goes_on(self, tmp_path):
        # The parent resumed at 3.5 s, before its sub-agent ended (4.0 s): it did not wait.
        r = self.write(tmp_path, self.parent_and_subagent(3.5, 1.5))
        assert (r["s/requests[2]"].after, r["s/requests[2]"].delay_s) == ("s/requests[0]", 1.5)


def link(req):
    """``(after, delay_s)`` with the delay rounded to 1 us (ms arithmetic leaves float dust)."""
    return req.after, round(req.delay_s, 6)


def dynamo_rows(tmp_path, rows):
    """A Dynamo request trace of ``(id, session, parent, arrival ms, completion ms)`` rows."""
    p = tmp_path / "d.jsonl"
    lines = []
    for rid, session, parent, arrival, done in rows:
        ctx = {"session_id": session} | ({"parent_session_id": parent} if parent else {})
        lines.append(json.dumps({"schema": "dynamo.request.trace.v1", "event_type": "request_end",
                                 "event_time_unix_ms": done, "agent_context": ctx,
                                 "request": {"request_id": rid, "input_tokens": 16, "output_tokens": 1,
                                             "request_received_ms": arrival}}))
    p.write_text("\n".join(lines) + "\n")
    return by_id(load_trace(p))


class TestDynamoSubagents:
    def test_parent_waits_for_the_last_subagent(self, tmp_path):
        r = dynamo_rows(tmp_path, [("m1", "main", None, 0, 1000), ("a1", "sa", "main", 1500, 2500),
                                   ("b1", "sb", "main", 1600, 4000), ("m2", "main", None, 5000, 5500)])
        assert link(r["a1"]) == ("m1", 0.5)  # spawned 0.5 s after m1 completed
        assert link(r["b1"]) == ("m1", 0.6)
        assert link(r["m2"]) == ("b1", 1.0)  # 5000 - 4000 ms after b1 completed

    def test_background_subagent(self, tmp_path):
        r = dynamo_rows(tmp_path, [("m1", "main", None, 0, 1000), ("a1", "sa", "main", 1500, 4000),
                                   ("m2", "main", None, 3000, 3500)])
        assert link(r["m2"]) == ("m1", 2.0)  # arrived before a1 completed

    def test_a_later_turn_of_the_subagent_keeps_the_parent_from_joining(self, tmp_path):
        r = dynamo_rows(tmp_path, [("m1", "main", None, 0, 1000), ("a1", "sa", "main", 1500, 2000),
                                   ("m2", "main", None, 3000, 3500), ("a2", "sa", None, 4000, 4200)])
        assert link(r["m2"]) == ("m1", 2.0)
        assert link(r["a2"]) == ("a1", 2.0)

    def test_nested_subagent_counts(self, tmp_path):
        r = dynamo_rows(tmp_path, [("m1", "main", None, 0, 1000), ("a1", "sa", "main", 1500, 2000),
                                   ("n1", "sn", "sa", 2500, 6000), ("m2", "main", None, 7000, 7100)])
        assert link(r["n1"]) == ("a1", 0.5)
        assert link(r["m2"]) == ("n1", 1.0)


@pytest.mark.parametrize("resume_s", [3.5, 10.0])
def test_claude_code_and_dynamo_link_the_same_recording_alike(tmp_path, resume_s):
    """One recording (parent 0-2 s, sub-agent 3-4 s, parent again at ``resume_s``) in both formats."""
    cc = TestClaudeCodeSubagentGap().write(tmp_path, TestClaudeCodeSubagentGap().parent_and_subagent(
        resume_s, resume_s - 2.0))
    dy = dynamo_rows(tmp_path, [("p0", "main", None, 0, 2000), ("s0", "sub", "main", 3000, 4000),
                                ("p1", "main", None, int(resume_s * 1000), int(resume_s * 1000) + 1000)])
    names = {"s/requests[0]": "p0", "s/requests[1].requests[0]": "s0", "s/requests[2]": "p1"}
    for rid, other in names.items():
        a, b = cc[rid], dy[other]
        assert (names.get(a.after), a.delay_s) == (b.after, pytest.approx(b.delay_s))
