"""Trace readers per public format: detection from content, hand-checked values, the error
battery, and ``compare`` on every fixture with no flags (block mapping: test_block_mapping.py;
convert: test_convert.py)."""

import gzip
import json
import shutil
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fairsim.cli import main
from fairsim.errors import TraceFormatError
from fairsim.sim.keys import block_keys
from fairsim.traces import detect, load_trace
from fairsim.traces.formats import FORMATS, claude_code, mooncake

DATA = Path(__file__).parent / "data" / "formats"
FIXTURES = {
    "mooncake.jsonl": "mooncake",
    "mooncake_agentic.jsonl.gz": "mooncake",
    "bailian.jsonl": "bailian",
    "claude_code": "claude-code",
    "claude_code/session_a.json": "claude-code",
    "ragpulse": "ragpulse",
    "ragpulse/0_trace.jsonl": "ragpulse",
    "dynamo_trace.jsonl.gz": "dynamo",
    "azure.csv": "azure",
    "burstgpt.csv": "burstgpt",
}


def by_id(trace):
    return {r.request_id: r for r in trace.requests}


class TestDetection:
    """Every fixture is recognised from its content, and the suffix plays no part."""

    @pytest.mark.parametrize("name, fmt", FIXTURES.items())
    def test_detect(self, name, fmt):
        assert detect(DATA / name) == fmt
        assert load_trace(DATA / name).format == fmt

    def test_suffix_ignored(self, tmp_path):
        # A gzip stream named .jsonl and a plain file named .gz both read.
        gz = tmp_path / "trace.jsonl"
        gz.write_bytes((DATA / "dynamo_trace.jsonl.gz").read_bytes())
        assert detect(gz) == "dynamo"
        plain = tmp_path / "trace.gz"
        plain.write_text((DATA / "mooncake.jsonl").read_text())
        assert len(load_trace(plain)) == 4

    def test_first_line_longer_than_head(self, tmp_path):
        # A Dynamo row of a 200k-token prompt: 12,500 u64 hashes, ~250 KB on one line.
        rows = [json.loads(x) for x in gzip.open(DATA / "dynamo_trace.jsonl.gz", "rt")][1:2]
        n = 200_000 // 16
        rows[0]["request"]["replay"].update(input_length=200_000, input_sequence_hashes=[2**63 + i for i in range(n)])
        p = tmp_path / "long.jsonl.gz"
        with gzip.open(p, "wt") as fh:
            fh.write(json.dumps(rows[0]) + "\n")
        assert detect(p) == "dynamo" and len(load_trace(p).requests[0].block_hashes) == n

    def test_unknown_content(self, tmp_path):
        p = tmp_path / "x.jsonl"
        p.write_text('{"prompt": "hello"}\n')
        with pytest.raises(ValueError, match=r"cannot tell the trace format.*--trace-format"):
            load_trace(p)

    def test_named_format_and_unknown_name(self):
        assert load_trace(DATA / "mooncake.jsonl", "mooncake").format == "mooncake"
        with pytest.raises(ValueError, match="--trace-format 'parquet': unknown"):
            load_trace(DATA / "mooncake.jsonl", "parquet")


class TestMooncake:
    """FAST25 rows (ceil count, 512) and Dynamo's agentic rows (64 out of band, aliases)."""

    def test_rows_without_hash_ids_have_no_identity(self, tmp_path):
        # AIPerf's trace rows may leave hash_ids out: detected as Mooncake, read with no prefix
        # identity (none of their blocks hits), counted in a warning; the others keep theirs.
        p = tmp_path / "aiperf.jsonl"
        p.write_text("".join(json.dumps(r) + "\n" for r in [
            {"timestamp": 0, "input_length": 1200, "output_length": 52},
            {"timestamp": 10, "input_length": 1200, "output_length": 5, "hash_ids": [1, 2, 3]},
            {"timestamp": 20, "input_length": 1100, "output_length": 5}]))
        assert detect(p) == "mooncake"
        t = load_trace(p)
        assert [(r.arrival_time, r.prompt_len, r.block_hashes) for r in t.requests] == [
            (0.0, 1200, ()), (0.01, 1200, (1, 2)), (0.02, 1100, ())]
        assert any("2 records have no hash_ids" in w for w in t.warnings)

    def test_text_input_is_refused_with_its_reason(self, tmp_path):
        p = tmp_path / "text.jsonl"
        p.write_text(json.dumps({"timestamp": 0, "text_input": "Hello", "output_length": 5}) + "\n")
        with pytest.raises(TraceFormatError, match=r"text.jsonl:1: field 'text_input': a prompt given as "
                                                   r"text has no token count here"):
            load_trace(p)

    def test_ceil_count_and_output_zero(self):
        r = list(load_trace(DATA / "mooncake.jsonl").requests)
        assert [x.block_hashes for x in r] == [(0, 1), (0, 1), (0,), (5, 6, 7, 8)]
        assert [x.arrival_time for x in r] == [0.0, 0.5, 1.5, 2.0]
        # output_length 0: one token (vLLM samples one), the 0 kept as a label.
        assert r[2].output_len == 1 and r[2].labels == {"observed_output_length": 0}

    def test_floor_count_accepted(self, tmp_path):
        p = tmp_path / "f.jsonl"
        p.write_text(json.dumps({"timestamp": 0, "input_length": 1100, "output_length": 1, "hash_ids": [4, 5]}) + "\n")
        assert load_trace(p).requests[0].block_hashes == (4, 5)

    def test_agentic_rows(self):
        t = load_trace(DATA / "mooncake_agentic.jsonl.gz")
        assert t.hash_block_size == 64 and "fit 64-token hash blocks" in t.warnings[0]
        r = by_id(t)
        assert [x.request_id for x in t.requests] == ["s1-0", "s2-0", "s2-1", "s1-1"]
        # delay 1500 ms after s1-0 (arrived 0 s): open-loop arrival 1.5 s; closed loop: 1.5 s after it finishes.
        assert (r["s1-1"].after, r["s1-1"].delay_s, r["s1-1"].arrival_time) == ("s1-0", 1.5, 1.5)
        assert (r["s2-1"].after, r["s2-1"].delay_s) == ("s2-0", 0.4)
        assert r["s2-1"].arrival_time == pytest.approx(0.65)
        assert r["s1-1"].block_hashes == (1, 2, 3, 5)  # 300 tokens: floor count of 64
        assert r["s1-0"].block_hashes == (1, 2, 3)  # 200 tokens: ceil count, partial id dropped

    def test_hash_block_size_given(self):
        t = load_trace(DATA / "mooncake_agentic.jsonl.gz", hash_block_size=64)
        assert t.hash_block_size == 64 and not t.warnings
        with pytest.raises(TraceFormatError, match=r":1: field 'hash_ids': has 4 ids but 200 tokens"):
            load_trace(DATA / "mooncake_agentic.jsonl.gz", hash_block_size=128)


class TestBailian:
    def test_per_block_ids_get_prefix_identity(self, tmp_path):
        # The same block id after different prefixes is not a shared prefix.
        rows = [{"chat_id": i, "parent_chat_id": -1, "timestamp": float(i), "input_length": 32,
                 "output_length": 1, "type": "text", "turn": 1, "hash_ids": ids}
                for i, ids in enumerate([[1, 2], [3, 2], [1, 2]])]
        p = tmp_path / "b.jsonl"
        p.write_text("".join(json.dumps(r) + "\n" for r in rows))
        a, b, c = load_trace(p).requests
        assert a.block_hashes == c.block_hashes and a.block_hashes[1] != b.block_hashes[1]

    def test_sessions_and_blocks(self):
        t = load_trace(DATA / "bailian.jsonl")
        r = by_id(t)
        assert t.hash_block_size == 16
        # 40 tokens = 2 full 16-token blocks; ids re-chained (interned prefixes of ids).
        assert r["159"].block_hashes == (0, 1) and r["160"].block_hashes == (0, 2)
        assert r["161"].block_hashes == (0, 1, 3, 4, 5)
        assert r["161"].after == "159" and r["161"].session_id == "159"
        assert r["161"].arrival_time == pytest.approx(70.25 - 61.114)
        assert r["161"].delay_s == pytest.approx(70.25 - 61.114)  # gap to the parent's arrival
        assert r["162"].after is None and r["162"].session_id == "162"  # parent 900 not in file
        assert r["160"].labels == {"type": "search", "turn": 1}
        assert any("upper bound" in w for w in t.warnings)


class TestClaudeCode:
    """Folder of sessions, local ids namespaced, sub-agents, think/api time."""

    def test_gzip_session_keeps_the_ids(self, tmp_path):
        src = DATA / "claude_code" / "session_a.json"
        gz = tmp_path / "session_a.json.gz"
        gz.write_bytes(gzip.compress(src.read_bytes()))
        plain, packed = load_trace(src), load_trace(gz)
        assert packed.name == plain.name == "session_a"
        assert [(r.request_id, r.session_id) for r in packed.requests] == [
            (r.request_id, r.session_id) for r in plain.requests]
        assert packed.requests[0].request_id == "session_a/requests[0]"

    def test_folder(self):
        t = load_trace(DATA / "claude_code")
        assert not t.absolute_time and t.hash_block_size == 64 and len(t) == 7
        r = by_id(t)
        a0, a1 = r["session_a/requests[0]"], r["session_a/requests[1]"]
        sa0, sa1 = r["session_a/requests[2].requests[0]"], r["session_a/requests[2].requests[1]"]
        a3, b0 = r["session_a/requests[3]"], r["session_b/requests[0]"]
        # Local scope: the same id 1 in two files is not the same block.
        assert a0.block_hashes[0] != b0.block_hashes[0]
        assert a1.block_hashes[:3] == a0.block_hashes  # chained within the file
        # t[1] = t[0] + api_time[0] + think_time[1] = 0 + 2 + 1.
        assert (a1.after, a1.delay_s, a1.output_len) == (a0.request_id, 1.0, 1)
        assert a1.labels["observed_output_length"] == 0 and a0.labels["observed_ttft"] == 0.5
        # The sub-agent spawns at 4.5 s beside its parent: 4.5 - (3.0 + api 1.0) after a1 ends.
        # One session per file (its start is chosen by the replay); the label says which agent.
        assert (sa0.session_id, sa0.labels["agent"], a0.labels["agent"]) == ("session_a", "requests[2]", "main")
        assert (sa0.after, sa0.arrival_time) == (a1.request_id, 4.5)
        assert sa0.delay_s == pytest.approx(0.5)
        assert (sa1.after, sa1.delay_s, sa1.arrival_time) == (sa0.request_id, 1.5, 6.5)
        # The parent goes on after a1 (6.0 - 3.0 - 1.0), not after its sub-agent.
        assert (a3.after, a3.delay_s) == (a1.request_id, 2.0)
        assert sa0.block_hashes[0] == a0.block_hashes[0]  # sub-agent shares the parent's first block
        assert r["session_b/requests[1]"].delay_s == 5.0 and "upper bound" in t.warnings[0]
        assert t.warnings[1].endswith("offsets from each session's start (2 sessions)")

    def test_parent_waiting_for_its_subagent(self, tmp_path):
        doc = json.loads((DATA / "claude_code" / "session_a.json").read_text())
        doc["requests"][3]["t"] = 8.0  # after the sub-agent's last request ended (6.5 + 0.5)
        (tmp_path / "s.json").write_text(json.dumps(doc))
        r = by_id(load_trace(tmp_path / "s.json"))
        assert r["s/requests[3]"].after == "s/requests[2].requests[1]"
        assert r["s/requests[3]"].delay_s == pytest.approx(1.0)

    def test_lenient_where_the_file_is_consistent(self, tmp_path):
        doc = json.loads((DATA / "claude_code" / "session_a.json").read_text())
        del doc["requests"][0]["hash_ids"]  # no identity recorded: unique blocks, warned
        sub = doc["requests"][2]
        for x in sub["requests"]:
            x["t"] += sub["t"]  # a writer that keeps session time in sub-agents
        (tmp_path / "s.json").write_text(json.dumps(doc))
        t = load_trace(tmp_path / "s.json")
        r = by_id(t)
        assert r["s/requests[0]"].block_hashes == ()
        assert [r[f"s/requests[2].requests[{i}]"].arrival_time for i in (0, 1)] == [4.5, 6.5]
        assert any("fewer hash_ids" in w for w in t.warnings) and any("session time" in w for w in t.warnings)
        doc["requests"][0]["hash_ids"] = list(range(5))  # 200 tokens span at most 4 blocks
        (tmp_path / "s.json").write_text(json.dumps(doc))
        with pytest.raises(TraceFormatError, match=r"s.json: requests\[0\]: field 'hash_ids': has 5 ids but in=200 spans 4"):
            load_trace(tmp_path / "s.json")

    def test_hash_id_scope_global(self, tmp_path):
        for name in ("session_a.json", "session_b.json"):
            doc = json.loads((DATA / "claude_code" / name).read_text())
            doc["hash_id_scope"] = "global"
            (tmp_path / name).write_text(json.dumps(doc))
        r = by_id(load_trace(tmp_path))
        assert r["session_a/requests[0]"].block_hashes[:2] == r["session_b/requests[0]"].block_hashes


class TestRagPulse:
    """Content ids + side files: exact prefix identity at any engine block."""

    def test_segments(self):
        t = load_trace(DATA / "ragpulse")
        r0, r1, r2 = t.requests
        assert r0.segments == ((1, 20), (2, 12), (10, 30), (11, 25), (30, 9))
        assert r0.prompt_len == 100  # 96 chunk tokens + 4 template tokens, unique, at the end
        assert (r2.session_id, r2.after, r2.delay_s) == ("u1", r0.request_id, 7.0)
        assert r2.output_len == 1 and r2.labels == {"observed_output_length": 0}

    @pytest.mark.parametrize("block, shared01, shared02", [
        # r0/r1 share sys (32) + passage 10 (30) = 62 tokens; r0/r2 also passage 11: 87 tokens.
        (16, 3, 5), (8, 7, 10), (32, 1, 2), (31, 2, 2), (64, 0, 1), (1, 62, 87)])
    def test_shared_blocks_any_block_size(self, block, shared01, shared02):
        r0, r1, r2 = load_trace(DATA / "ragpulse").requests

        def shared(a, b):
            n = 0
            for x, y in zip(block_keys(a, block), block_keys(b, block)):
                if x != y:
                    break
                n += 1
            return n

        assert (shared(r0, r1), shared(r0, r2)) == (shared01, shared02)

    def test_chunks_longer_than_prompt_are_cut(self, tmp_path):
        shutil.copytree(DATA / "ragpulse", tmp_path / "rp")
        p = tmp_path / "rp" / "0_trace.jsonl"
        rec = json.loads(p.read_text().splitlines()[0])
        p.write_text(json.dumps({**rec, "input_length": 40}) + "\n")
        t = load_trace(tmp_path / "rp")
        assert t.requests[0].segments == ((1, 20), (2, 12), (10, 8)) and "cut at input_length" in t.warnings[0]

    def test_missing_content_id(self, tmp_path):
        shutil.copytree(DATA / "ragpulse", tmp_path / "rp")
        p = tmp_path / "rp" / "0_trace.jsonl"
        rec = json.loads(p.read_text().splitlines()[1])
        rec["hash_ids"]["passages_ids"] = [10, 99]
        p.write_text(p.read_text().splitlines()[0] + "\n" + json.dumps(rec) + "\n")
        with pytest.raises(TraceFormatError, match=r"0_trace.jsonl:2: field 'hash_ids.passages_ids\[1\]': content id 99"):
            load_trace(tmp_path / "rp")

    def test_an_id_of_a_missing_side_file_names_the_file(self, tmp_path):
        shutil.copytree(DATA / "ragpulse", tmp_path / "rp")
        (tmp_path / "rp" / "5_web_search.jsonl").unlink()
        with pytest.raises(TraceFormatError) as info:
            load_trace(tmp_path / "rp")
        assert str(info.value).endswith(f"content id 40 is in no side file (missing from {tmp_path / 'rp'}: "
                                        f"5_web_search.jsonl)")


class TestDynamo:
    def test_request_end_rows(self):
        t = load_trace(DATA / "dynamo_trace.jsonl.gz")
        assert [r.request_id for r in t.requests] == ["r1", "r2", "r3"]  # sorted by arrival
        r1, r2, r3 = t.requests
        assert r1.block_hashes == (18446744073709551557, 9007199254740993)  # u64, exact (2^53 + 1)
        assert r2.block_hashes[:2] == r1.block_hashes
        assert (r2.after, r2.delay_s) == ("r1", 1.0)  # arrives 2.0 s, r1 finished at 1.0 s
        assert (r3.session_id, r3.after) == ("sub", "r2")  # sub-agent follows its parent's last turn
        assert r3.delay_s == pytest.approx(0.2)
        assert r2.labels["observed_cached_tokens"] == 32 and r2.labels["observed_ttft_ms"] == 40.0

    def test_float_hash_refused(self, tmp_path):
        rows = [json.loads(x) for x in gzip.open(DATA / "dynamo_trace.jsonl.gz", "rt")]
        rows[1]["request"]["replay"]["input_sequence_hashes"][1] = 1.5e19
        p = tmp_path / "d.jsonl"
        p.write_text("".join(json.dumps(x) + "\n" for x in rows))
        with pytest.raises(TraceFormatError, match=r"d.jsonl:2: field 'request.replay.input_sequence_hashes': entry 1"):
            load_trace(p)

    def test_an_end_before_the_arrival_is_refused(self, tmp_path):
        # A completion before the arrival (a clock step, a broken row) would give the session's
        # next turn a think time from a time the request had not yet arrived by.
        rows = [json.loads(x) for x in gzip.open(DATA / "dynamo_trace.jsonl.gz", "rt")]
        rows[2]["event_time_unix_ms"] = rows[2]["request"]["request_received_ms"] - 500
        p = tmp_path / "d.jsonl"
        p.write_text("".join(json.dumps(x) + "\n" for x in rows))
        with pytest.raises(TraceFormatError, match=r"d.jsonl:3: field 'event_time_unix_ms': 1699999999500 ms is before "
                                                   r"the request arrived \(request.request_received_ms 1700000000000 ms\)"):
            load_trace(p)
        t = load_trace(p, skip_bad=True)
        assert [r.request_id for r in t.requests] == ["r2", "r3"] and len(t.skipped) == 1
        rows[2]["event_time_unix_ms"] = rows[2]["request"]["request_received_ms"]  # at the arrival: taken
        p.write_text("".join(json.dumps(x) + "\n" for x in rows))
        assert len(load_trace(p).requests) == 3


class TestNotATrace:
    """Inputs often mistaken for a trace get a message that says what they are."""

    def test_folder_of_mooncake_files(self, tmp_path):
        for name in ("a.jsonl", "b.jsonl"):
            shutil.copy(DATA / "mooncake.jsonl", tmp_path / name)
        with pytest.raises(ValueError, match=r"a folder is read only as ragpulse or claude-code .* its files "
                                             r"look like mooncake \(e.g. a.jsonl\): give one file"):
            load_trace(tmp_path)
        for fmt in ("mooncake", "azure", "burstgpt", "bailian", "dynamo"):
            with pytest.raises(ValueError, match=rf"is a folder; --trace-format {fmt} reads one file"):
                load_trace(tmp_path, format=fmt)

    def test_git_lfs_pointer(self, tmp_path):
        p = tmp_path / "trace.jsonl"
        p.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:0a1b\nsize 1234\n")
        with pytest.raises(ValueError, match="is a Git LFS pointer, not the trace itself"):
            load_trace(p)

    def test_claude_code_transcript(self, tmp_path):
        p = tmp_path / "0b9e.jsonl"
        p.write_text(json.dumps({"type": "assistant", "sessionId": "0b9e", "uuid": "u1",
                                 "timestamp": "2025-07-15T10:00:02.500Z", "message": {"usage": {}}}) + "\n")
        with pytest.raises(ValueError, match="looks like a Claude Code transcript"):
            load_trace(p)


class TestAzure:
    def test_rows(self):
        r = load_trace(DATA / "azure.csv").requests
        assert [(x.arrival_time, x.prompt_len, x.output_len, x.block_hashes) for x in r] == [
            (0.0, 4808, 10, ()), (0.052, 3180, 8, ()), (1.02, 100, 1, ())]

    def test_2024_week_traces_with_a_zone(self, tmp_path):
        # The 2024 week-long traces (AzureLLMInferenceTrace_*_1week.csv) write a fraction and a
        # zone; a row may also have no fraction. Refused before: a biased subset with --skip-bad.
        p = tmp_path / "code_1week.csv"
        p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                     "2024-05-10 00:00:00.009930+00:00,1000,20\n"
                     "2024-05-10 00:00:01+00:00,2000,30\n"
                     "2024-05-10 02:00:01.509930+02:00,300,0\n")
        t = load_trace(p)
        assert t.format == "azure" and t.skipped == ()
        assert [(x.arrival_time, x.prompt_len, x.output_len) for x in t.requests] == [
            (0.0, 1000, 20), (0.99, 2000, 30), (1.5, 300, 1)]

    def test_rows_keep_the_file_lines_across_blank_lines(self, tmp_path):
        # A blank line is skipped but counted: a row's id and an error name its line in the file.
        # A short row's missing count is refused as missing. (A repeated column, whose last copy
        # csv.DictReader would keep, is refused: tests/test_newuser_pass22.py.)
        p = tmp_path / "gaps.csv"
        p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens,Other\n"
                     "2023-11-16 18:17:03.9799600,4808,10,7\n\n"
                     "2023-11-16 18:17:04.0319600,3180,8,9\n")
        r = load_trace(p).requests
        assert [(x.request_id, x.prompt_len) for x in r] == [("gaps:2", 4808), ("gaps:4", 3180)]
        p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n\n2023-11-16 18:17:03.9799600,4808\n")
        with pytest.raises(TraceFormatError, match=r"gaps.csv:3: field 'GeneratedTokens': missing \(the row has "
                                                   r"fewer fields than the header\)"):
            load_trace(p)

    def test_a_row_longer_than_its_header_is_refused_at_its_line(self, tmp_path):
        # "4,808" written with a thousands separator shifts the columns: the row is not read as
        # if it had not (csv.DictReader would keep the extra field aside and read 4 tokens).
        p = tmp_path / "long.csv"
        p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                     "2023-11-16 18:17:03.9799600,4808,10\n"
                     "2023-11-16 18:17:04.0319600,4,808,10\n")
        with pytest.raises(TraceFormatError, match=r"long.csv:3: field '<row>': 4 fields where the header has 3"):
            load_trace(p)
        t = load_trace(p, skip_bad=True)
        assert [(x.request_id, x.prompt_len) for x in t.requests] == [("long:2", 4808)]
        assert [e.line for e in t.skipped] == [3]
        # A trailing comma (an empty extra field) shifts nothing: read as before.
        p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,4808,10,\n")
        assert [(x.prompt_len, x.output_len) for x in load_trace(p).requests] == [(4808, 10)]

    def test_a_row_without_its_timestamp_is_refused_as_missing(self, tmp_path):
        p = tmp_path / "order.csv"
        p.write_text("ContextTokens,GeneratedTokens,TIMESTAMP\n12,3,2023-11-16 18:17:03.9799600\n12,3\n")
        with pytest.raises(TraceFormatError, match=r"order.csv:3: field 'TIMESTAMP': missing"):
            load_trace(p)

    def test_iso_and_header_spelling(self, tmp_path):
        p = tmp_path / "iso.csv"
        p.write_text("timestamp, contexttokens ,GENERATEDTOKENS\r\n"
                     "2023-11-16T18:17:03.979Z,10,1\r\n2023-11-16T18:17:04.9799600,20,2\r\n")
        assert detect(p) == "azure"
        assert [(x.arrival_time, x.prompt_len) for x in load_trace(p).requests] == [(0.0, 10), (1.001, 20)]

    @given(st.lists(st.tuples(st.integers(0, 3), st.sampled_from(["", ".5", ".0319600", ".009930"]),
                              st.sampled_from(["", "+00:00", "+02:00", "Z"]), st.sampled_from([" ", "T"])),
                    min_size=1, max_size=12))
    def test_the_readers_stamp_parser_equals_parse_time(self, rows):
        # The reader keeps the last row's whole seconds (rows of one second share them): the same
        # floats as parse_time row by row, also where the second, the zone or the separator changes.
        from fairsim.traces.formats import azure

        stamps = azure._Stamps()
        for second, fraction, zone, sep in rows:
            stamp = f"2023-11-16{sep}18:17:0{second}{fraction}{zone}"
            assert stamps(stamp) == azure.parse_time(stamp)

    def test_bad_counts_are_named_in_column_order_and_skipped(self, tmp_path):
        # Each row's first problem, in the reader's order: the time, ContextTokens as an integer,
        # GeneratedTokens as an integer, ContextTokens >= 1, GeneratedTokens >= 0 (0 -> 1 token
        # with the label), the time not decreasing.
        p = tmp_path / "c.csv"
        p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                     "2023-11-16 18:17:03.5,x,y\n"      # 2: ContextTokens first
                     "2023-11-16 18:17:03.5,0,y\n"      # 3: GeneratedTokens before ContextTokens >= 1
                     "2023-11-16 18:17:03.5,0,5\n"      # 4: ContextTokens >= 1
                     "2023-11-16 18:17:03.5,10,-1\n"    # 5: GeneratedTokens negative
                     "2023-11-16 18:17:04.5, 20 ,0\n"   # 6: good: int() takes the spaces; 0 -> 1
                     "2023-11-16 18:17:04.0,30,3\n"     # 7: earlier than row 6
                     "2023-11-16 18:17:05.5,40\n")      # 8: GeneratedTokens missing
        with pytest.raises(TraceFormatError, match=r"c.csv:2: field 'ContextTokens': must be an integer, got 'x'"):
            load_trace(p)
        t = load_trace(p, skip_bad=True)
        assert [str(e).split(": ", 1)[1] for e in t.skipped] == [
            "field 'ContextTokens': must be an integer, got 'x'",
            "field 'GeneratedTokens': must be an integer, got 'y'",
            "field 'ContextTokens': 0: need >= 1",
            "field 'GeneratedTokens': negative: -1 (need >= 0)",
            "field 'TIMESTAMP': decreases: '2023-11-16 18:17:04.0' is earlier than the previous row's "
            "'2023-11-16 18:17:04.5' (line 6)",
            "field 'GeneratedTokens': missing (the row has fewer fields than the header)"]
        assert [(r.request_id, r.arrival_time, r.prompt_len, r.output_len, r.labels) for r in t.requests] == [
            ("c:6", 0.0, 20, 1, {"observed_output_length": 0})]

    @pytest.mark.parametrize("stamp", ["2024-05-10", "2024-05-10 00:00:00.x", "yesterday",
                                       "2024-05-10 00:00:00.5 UTC"])
    def test_bad_stamps_are_named(self, tmp_path, stamp):
        p = tmp_path / "b.csv"
        p.write_text(f"TIMESTAMP,ContextTokens,GeneratedTokens\n{stamp},10,1\n")
        with pytest.raises(TraceFormatError, match=r"b.csv:2: field 'TIMESTAMP': cannot parse"):
            load_trace(p)


class TestErrors:
    """Every reader error names file, line (or JSON path) and field."""

    def test_duplicate_ids_name_both_lines(self, tmp_path):
        p = tmp_path / "d.jsonl"
        rows = [{"timestamp": i, "input_length": 10, "output_length": 1, "hash_ids": [], "request_id": rid}
                for i, rid in enumerate(["a", "b", "a"])]
        p.write_text("".join(json.dumps(r) + "\n" for r in rows))
        with pytest.raises(TraceFormatError, match=r"d.jsonl:3: field 'request_id': 'a' duplicates line 1"):
            load_trace(p)
        t = load_trace(p, skip_bad=True)
        assert [r.request_id for r in t.requests] == ["a", "b"] and t.skipped[0].line == 3

    def test_mixed_label_types(self, tmp_path):
        p = tmp_path / "m.jsonl"
        rows = [{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [], "doc": d}
                for d in (3, 4, "x")]
        p.write_text("".join(json.dumps(r) + "\n" for r in rows))
        with pytest.raises(TraceFormatError, match=r"m.jsonl:3: field 'doc': is a string, but a number at line 1"):
            load_trace(p)

    def test_claude_code_json_path(self, tmp_path):
        doc = json.loads((DATA / "claude_code" / "session_a.json").read_text())
        del doc["requests"][2]["requests"][1]["in"]
        p = tmp_path / "s.json"
        p.write_text(json.dumps(doc))
        with pytest.raises(TraceFormatError) as info:
            load_trace(p)
        assert str(info.value) == f"{p}: requests[2].requests[1]: field 'in': missing"

    def test_broken_gzip(self, tmp_path, capsys):
        p = tmp_path / "t.jsonl.gz"
        p.write_bytes((DATA / "dynamo_trace.jsonl.gz").read_bytes()[:200])
        assert main(["run", "--trace", str(p)]) == 2
        # The first line is whole; the cut falls in the second.
        assert (f"{p}:2: field '<gzip>': the gzip stream ends before its end-of-stream marker (the file was "
                f"cut short); this line and any after it are lost") in capsys.readouterr().err

    @pytest.mark.parametrize("keep", [2, 5, 12])
    def test_a_gzip_cut_before_any_data_is_not_called_empty(self, tmp_path, capsys, keep):
        # The magic alone, or part of the header: no line came out, but the file is not empty.
        p = tmp_path / "t.jsonl.gz"
        p.write_bytes((DATA / "dynamo_trace.jsonl.gz").read_bytes()[:keep])
        assert main(["run", "--trace", str(p)]) == 2
        assert capsys.readouterr().err == (f"fairsim: error: {p}: no requests in the trace: a gzip stream cut "
                                           "short before its first line (the download stopped?)\n")
        empty = tmp_path / "empty.jsonl"
        empty.write_bytes(b"")
        assert main(["run", "--trace", str(empty)]) == 2
        assert capsys.readouterr().err == f"fairsim: error: {empty}: no requests in the trace: the file is empty\n"

    def test_a_gzip_cut_short_keeps_its_complete_lines_with_skip_bad(self, tmp_path, capsys):
        lines = [json.dumps({"timestamp": i * 1000, "input_length": 600, "output_length": 1,
                             "hash_ids": [i, i + 1000]}) for i in range(400)]
        whole = gzip.compress(("\n".join(lines) + "\n").encode())
        p = tmp_path / "cut.jsonl.gz"
        p.write_bytes(whole[:len(whole) // 2])
        assert main(["run", "--trace", str(p), "--format", "json"]) == 2
        err = capsys.readouterr().err
        at = int(err.split(f"{p}:")[1].split(":")[0])  # the line after the last complete one
        assert 1 < at < 400 and "field '<gzip>': the gzip stream ends" in err
        assert main(["run", "--trace", str(p), "--skip-bad", "--format", "json"]) == 0
        out, err = capsys.readouterr()
        assert json.loads(out)["fairway"]["requests"] == at - 1  # every complete line, none made up
        assert f"skipped 1 bad record of {p}; first: {p}:{at}: field '<gzip>'" in err
        trace = load_trace(p, skip_bad=True)
        assert [r.arrival_time for r in trace.requests] == [i * 1.0 for i in range(at - 1)]

    def test_unknown_after(self, tmp_path):
        p = tmp_path / "a.jsonl"
        p.write_text(json.dumps({"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [],
                                 "after": "nope"}) + "\n")
        with pytest.raises(TraceFormatError, match=r"a.jsonl:1: field 'after': names 'nope'"):
            load_trace(p)

    @pytest.mark.parametrize("change, field, why", [
        ({"parent_chat_id": None}, "parent_chat_id", "missing"),
        ({"timestamp": "x"}, "timestamp", "must be a number of seconds"),
        ({"hash_ids": [1]}, "hash_ids", "has 1 ids but 40 tokens span 3 blocks of 16"),
    ])
    def test_bailian_bad_record(self, tmp_path, change, field, why):
        rec = json.loads((DATA / "bailian.jsonl").read_text().splitlines()[0])
        bad = {k: v for k, v in {**rec, "chat_id": 5, **change}.items() if v is not None}
        p = tmp_path / "b.jsonl"
        p.write_text(json.dumps(rec) + "\n" + json.dumps(bad) + "\n")
        with pytest.raises(TraceFormatError, match=rf"b.jsonl:2: field '{field}': {why}"):
            load_trace(p, "bailian")

    def test_a_bailian_file_without_parent_chat_id_is_not_taken_for_mooncake(self, tmp_path, capsys):
        # Its first record lacks parent_chat_id: detected by chat_id and hash_ids, it is refused
        # naming the field, where the Mooncake reader took its seconds for milliseconds.
        rec = json.loads((DATA / "bailian.jsonl").read_text().splitlines()[0])
        del rec["parent_chat_id"]
        p = tmp_path / "b.jsonl"
        p.write_text(json.dumps(rec) + "\n")
        assert main(["run", "--trace", str(p)]) == 2
        assert f"{p}:1: field 'parent_chat_id': missing" in capsys.readouterr().err
        # A Mooncake row with a chat_id label whose ids fit 512-token blocks stays Mooncake's
        p.write_text(json.dumps({"timestamp": 0, "input_length": 1024, "output_length": 1, "hash_ids": [1, 2],
                                 "chat_id": 7}) + "\n")
        assert load_trace(p).format == "mooncake"

    def test_skip_bad_reports_reasons_when_none_left(self, tmp_path, capsys):
        p = tmp_path / "bad.jsonl"
        p.write_text('{"timestamp": 0, "input_length": -1, "output_length": 1, "hash_ids": []}\n{broken\n')
        assert main(["run", "--trace", str(p), "--skip-bad"]) == 2
        err = capsys.readouterr().err
        assert "skipped 2 bad records" in err and "no valid requests" in err
        assert f"{p}:1: field 'input_length': negative" in err and f"{p}:2: field '<json>'" in err

    def test_capacity_message_names_flags(self, capsys):
        code = main(["run", "--trace", str(DATA / "mooncake.jsonl"), "--kv-blocks", "2", "--max-requests", "4"])
        assert code == 2
        assert "--kv-blocks" in capsys.readouterr().err


class TestCompareOnEveryFixture:
    """``fairsim compare --trace FILE --policies all`` runs with no other flag; every request ends."""

    @pytest.mark.parametrize("name", ["mooncake.jsonl", "mooncake_agentic.jsonl.gz", "bailian.jsonl",
                                      "claude_code", "ragpulse", "dynamo_trace.jsonl.gz", "azure.csv",
                                      "burstgpt.csv"])
    def test_compare_all(self, name, capsys):
        n = len(load_trace(DATA / name))
        assert main(["compare", "--trace", str(DATA / name), "--policies", "all", "--format", "json"]) == 0
        rows = json.loads(capsys.readouterr().out)
        assert rows and all(row["requests"] == n for row in rows.values())

    def test_odd_block_size_warns(self, capsys, tmp_path):
        assert main(["run", "--trace", str(DATA / "claude_code"), "--block-size", "48", "--out", str(tmp_path)]) == 0
        err = capsys.readouterr().err
        assert "neither divides" in err
        assert any("neither divides" in w for w in json.loads((tmp_path / "run.json").read_text())["warnings"])


class TestCliOptions:
    def test_hash_block_size_and_run_json(self, capsys, tmp_path):
        args = ["run", "--trace", str(DATA / "mooncake_agentic.jsonl.gz"), "--policy", "fcfs", "--out", str(tmp_path)]
        assert main(args + ["--hash-block-size", "64"]) == 0
        info = json.loads((tmp_path / "run.json").read_text())
        assert (info["trace_format"], info["hash_block_size"], info["warnings"]) == ("mooncake", 64, [])
        assert main(args) == 0  # inferred, and said
        assert "fit 64-token hash blocks" in capsys.readouterr().err
        assert main(args + ["--hash-block-size", "0"]) == 2
        assert "--hash-block-size 0: need >= 1" in capsys.readouterr().err

    def test_wrong_named_format_names_field(self, capsys):
        assert main(["run", "--trace", str(DATA / "mooncake.jsonl"), "--trace-format", "bailian"]) == 2
        assert "mooncake.jsonl:1: field 'chat_id': missing" in capsys.readouterr().err

    def test_convert_missing_out_folder(self, capsys, tmp_path):
        assert main(["convert", str(DATA / "mooncake.jsonl"), str(tmp_path / "no" / "x.jsonl")]) == 2
        assert "does not exist" in capsys.readouterr().err


def test_registry_contract():
    """Each registered reader has a name, a sniffer and a reader; names are unique."""
    assert list(FORMATS) == ["dynamo", "ragpulse", "bailian", "claude-code", "mooncake", "azure", "burstgpt"]
    assert FORMATS["mooncake"].read is mooncake.read and FORMATS["claude-code"].sniff is claude_code.sniff
