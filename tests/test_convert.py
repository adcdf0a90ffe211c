"""fairsim convert: canonical Mooncake-style JSONL + sidecar; reading it back gives the same
requests (fixtures and a hypothesis property)."""

import json
import math
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fairsim.cli import main
from fairsim.traces import load_trace
from fairsim.traces.canonical import write_canonical
from fairsim.traces.trace import Trace
from fairsim.types import Request
from tests.strategies import canonical_traces
from tests.utils import infinite_cache_hits

DATA = Path(__file__).parent / "data" / "formats"
SINGLE_FILES = ["mooncake.jsonl", "mooncake_agentic.jsonl.gz", "bailian.jsonl", "claude_code", "ragpulse",
                "dynamo_trace.jsonl.gz", "azure.csv"]


class TestConvert:
    """Canonical Mooncake-style JSONL + sidecar; reading it back gives the same requests."""

    @pytest.mark.parametrize("name", SINGLE_FILES)
    def test_round_trip(self, tmp_path, name, capsys):
        src = load_trace(DATA / name)
        out = tmp_path / "out.jsonl"
        assert main(["convert", str(DATA / name), str(out)]) == 0
        assert "converted" in capsys.readouterr().out
        meta = json.loads((tmp_path / "out.jsonl.meta.json").read_text())
        assert meta["source_format"] == src.format and meta["absolute_time"] == src.absolute_time
        # Every line is a plain Mooncake record (what other tools read).
        for line in out.read_text().splitlines():
            rec = json.loads(line)
            assert len(rec["hash_ids"]) == -(-rec["input_length"] // meta["hash_block_size"])
        back = load_trace(out)
        assert back.format == "mooncake" and back.absolute_time == src.absolute_time
        assert len(back) == len(src)
        for a, b in zip(src.requests, back.requests):
            assert (a.request_id, a.prompt_len, a.output_len, a.session_id, a.after, a.labels) == (
                b.request_id, b.prompt_len, b.output_len, b.session_id, b.after, b.labels)
            assert a.arrival_time == pytest.approx(b.arrival_time, abs=1e-6)
            assert a.delay_s == pytest.approx(b.delay_s, abs=1e-6)
            if not a.segments:
                assert b.hash_block_size == a.hash_block_size
                # Blocks without an identity get fresh, unused ids; recorded ones are kept.
                assert b.block_hashes[: len(a.block_hashes)] == a.block_hashes
        if not src.requests[0].segments:
            assert infinite_cache_hits(src.requests, meta["hash_block_size"]) == infinite_cache_hits(
                back.requests, meta["hash_block_size"])

    def test_ragpulse_at_block_size(self, tmp_path):
        src = load_trace(DATA / "ragpulse")
        for block in (8, 16, 32):
            out = tmp_path / f"rp{block}.jsonl.gz"
            assert main(["convert", str(DATA / "ragpulse"), str(out), "--block-size", str(block)]) == 0
            back = load_trace(out)
            assert back.hash_block_size == block
            assert [r.segments for r in back.requests] == [r.segments for r in src.requests]
            # Exact at the written block from hash_ids alone (what other tools read) ...
            plain = [Request(r.request_id, r.arrival_time, r.prompt_len, r.block_hashes, block) for r in back.requests]
            assert infinite_cache_hits(plain, block) == infinite_cache_hits(src.requests, block)
            # ... and at any block from the segments fairsim reads back.
            for other in (8, 12, 64):
                assert infinite_cache_hits(back.requests, other) == infinite_cache_hits(src.requests, other)

    @settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(canonical_traces())
    def test_round_trip_property(self, tmp_path, case):
        reqs, block = case
        out = tmp_path / "p.jsonl"
        write_canonical(Trace("t", "mem", tuple(reqs), hash_block_size=block), out)
        back = load_trace(out).requests
        assert [(r.request_id, r.prompt_len, r.output_len, r.block_hashes, r.session_id, r.after, r.labels)
                for r in back] == [(r.request_id, r.prompt_len, r.output_len, r.block_hashes, r.session_id,
                                    r.after, r.labels) for r in reqs]
        assert [r.arrival_time for r in back] == pytest.approx([r.arrival_time for r in reqs])
        assert [r.delay_s for r in back] == pytest.approx([r.delay_s for r in reqs])

    def test_refuses_overwriting_input(self, tmp_path, capsys):
        p = tmp_path / "t.jsonl"
        shutil.copy(DATA / "mooncake.jsonl", p)
        assert main(["convert", str(p), str(p)]) == 2
        assert "would overwrite IN" in capsys.readouterr().err

    def test_refuses_an_out_named_like_a_sidecar(self, tmp_path, capsys):
        # Was: the trace was written there, and x.jsonl then failed to load, its "sidecar" being
        # trace lines ("not valid JSON", without saying it was read as x.jsonl's sidecar).
        p = tmp_path / "t.jsonl"
        shutil.copy(DATA / "mooncake.jsonl", p)
        out = tmp_path / "x.jsonl.meta.json"
        assert main(["convert", str(p), str(out)]) == 2
        assert capsys.readouterr().err.strip() == (
            f"fairsim: error: convert: OUT {out} ends in .meta.json, the name of the sidecar that convert "
            f"writes beside a trace (x.jsonl's); choose another name")
        assert not out.exists()

    def test_a_sidecar_that_is_not_one_is_named_as_read_as_one(self, tmp_path, capsys):
        p = tmp_path / "x.jsonl"
        shutil.copy(DATA / "mooncake.jsonl", p)
        shutil.copy(DATA / "mooncake.jsonl", tmp_path / "x.jsonl.meta.json")  # trace lines, not a sidecar
        assert main(["run", "--trace", str(p), "--max-requests", "3"]) == 2
        err = capsys.readouterr().err
        assert f"{p}.meta.json" in err and "not valid JSON" in err
        assert ("(read as the sidecar of x.jsonl, the FILE.meta.json that fairsim convert writes beside FILE; "
                "move it away or rename it if it is not x.jsonl's)") in err

    def test_names_a_missing_out_folder_and_a_file_in_its_place(self, tmp_path, capsys):
        p = tmp_path / "t.jsonl"
        shutil.copy(DATA / "mooncake.jsonl", p)
        assert main(["convert", str(p), str(tmp_path / "nope" / "x.jsonl")]) == 2
        assert "(the folder of OUT" in (err := capsys.readouterr().err) and err.rstrip().endswith("does not exist")
        (tmp_path / "afile").write_text("")
        assert main(["convert", str(p), str(tmp_path / "afile" / "x.jsonl")]) == 2
        assert capsys.readouterr().err.rstrip().endswith(f"convert: {tmp_path / 'afile'} (the folder of OUT "
                                                          f"{tmp_path / 'afile' / 'x.jsonl'}) is not a folder")

    def test_fresh_ids_stay_unsigned_64_bit(self, tmp_path):
        # Dynamo's u64 hashes can sit at the top of the range: the fresh ids of blocks without an
        # identity (partial last blocks, records without hash_ids) must stay <= 2**64 - 1, which
        # Dynamo's and AIPerf's readers require, and collide with no recorded id.
        top = 2**64 - 1
        src = tmp_path / "u64.jsonl"
        src.write_text("".join(json.dumps(r) + "\n" for r in [
            {"timestamp": 0, "input_length": 700, "output_length": 1, "hash_ids": [top, 5]},
            {"timestamp": 5, "input_length": 1100, "output_length": 1, "hash_ids": [top, 0, 9]},
            {"timestamp": 9, "input_length": 600, "output_length": 1}]))
        out = tmp_path / "out.jsonl"
        assert main(["convert", str(src), str(out)]) == 0
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        ids = [r["hash_ids"] for r in rows]
        assert ids == [[top, 1], [top, 0, 2], [3, 4]]
        assert all(0 <= h <= top for r in ids for h in r)
        a, b = load_trace(src).requests, load_trace(out).requests
        assert [(r.prompt_len, r.block_hashes) for r in a[:2]] == [(r.prompt_len, r.block_hashes) for r in b[:2]]
        assert b[2].block_hashes == (3,)  # its full block, fresh: hits nothing, as without an identity

    def test_a_refused_trace_leaves_an_earlier_out_as_it_was(self, tmp_path, capsys):
        # A label named like a canonical field (Bailian's extra "session_id" on its 3rd record) is
        # refused at its line before anything is written: the earlier OUT and its sidecar stand,
        # and no temporary file is left.
        good = tmp_path / "good.jsonl"
        shutil.copy(DATA / "bailian.jsonl", good)
        out = tmp_path / "prev.jsonl"
        assert main(["convert", str(good), str(out)]) == 0
        before = out.read_bytes(), (tmp_path / "prev.jsonl.meta.json").read_bytes()
        lines = good.read_text().splitlines()
        rec = json.loads(lines[2])
        rec["session_id"] = "s1"
        bad = tmp_path / "bad.jsonl"
        bad.write_text("\n".join([*lines[:2], json.dumps(rec), *lines[3:]]) + "\n")
        capsys.readouterr()
        assert main(["convert", str(bad), str(out)]) == 2
        assert f"{bad}:3: field 'session_id': collides with a canonical field" in capsys.readouterr().err
        assert (out.read_bytes(), (tmp_path / "prev.jsonl.meta.json").read_bytes()) == before
        assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl", "good.jsonl", "prev.jsonl",
                                                              "prev.jsonl.meta.json"]

    def test_refuses_a_hard_link_to_input(self, tmp_path, capsys):
        src = tmp_path / "m.jsonl"
        shutil.copy(DATA / "mooncake.jsonl", src)
        before = src.read_bytes()
        link = tmp_path / "hard.jsonl"
        link.hardlink_to(src)
        assert main(["convert", str(src), str(link)]) == 2
        assert "would overwrite IN" in capsys.readouterr().err
        assert src.read_bytes() == before

    @pytest.mark.parametrize("out_name", ["out.jsonl", "out.jsonl.gz"])
    def test_ids_outside_u64_become_fresh_ids_sharing_as_before(self, tmp_path, out_name):
        # fairsim's Mooncake reader takes any integer id; the written ids are unsigned 64-bit,
        # one fresh id per distinct id outside the range, so the same blocks are shared and the
        # simulation is unchanged.
        src = tmp_path / "odd.jsonl"
        src.write_text("".join(json.dumps(r) + "\n" for r in [
            {"timestamp": 0, "input_length": 1024, "output_length": 1, "hash_ids": [-7, 2**70]},
            {"timestamp": 5, "input_length": 1536, "output_length": 1, "hash_ids": [-7, 2**70, 4]},
            {"timestamp": 9, "input_length": 1024, "output_length": 1, "hash_ids": [-8, 2**70]}]))
        out = tmp_path / out_name
        assert main(["convert", str(src), str(out)]) == 0
        reread = load_trace(out)
        ids = [list(r.block_hashes) for r in reread.requests]
        assert ids == [[5, 6], [5, 6, 4], [7, 6]]  # fresh ids count up from the largest in range (4)
        assert json.loads((tmp_path / f"{out_name}.meta.json").read_text())["remapped_hash_ids"] == 3
        assert infinite_cache_hits(load_trace(src).requests, 512) == infinite_cache_hits(reread.requests, 512)


@settings(max_examples=3000)
@given(st.one_of(st.floats(0, 2e9), st.integers(0, 10**9).map(lambda n: n / 1000), st.floats(0, 1e-3)))
def test_ms_reads_back_as_the_seconds_to_the_bit_or_one_unit_off(seconds):
    # The Mooncake reader takes ms / 1000.0: the written number gives the seconds back exactly
    # where some double does, and never more than one unit in the last place off.
    from fairsim.traces.canonical import _ms

    written = json.loads(json.dumps(_ms(seconds)))
    back = written / 1000.0
    assert back == seconds or abs(back - seconds) <= math.ulp(seconds)
    near = {seconds * 1000.0}
    for step in (math.inf, -math.inf):
        m = seconds * 1000.0
        for _ in range(4):
            m = math.nextafter(m, step)
            near.add(m)
    if any(m / 1000.0 == seconds for m in near):
        assert back == seconds


def test_ms_hand_computed():
    from fairsim.traces.canonical import _ms

    assert _ms(0.0) == 0 and type(_ms(0.0)) is int and _ms(1.5) == 1500 and type(_ms(1.5)) is int
    assert _ms(0.001) == 1  # 0.001 * 1000.0 is 1.0
    assert _ms(1.2345678) / 1000.0 == 1.2345678  # (round(..., 3) wrote 1234.568: 1.234568 s back)
