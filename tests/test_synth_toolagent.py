"""experiments/synth_toolagent.py: the same file for the same seed, a valid Mooncake file whose
steps extend their trajectory's context, and the shared command line's error contract."""

import json

from experiments import synth_toolagent
from fairsim.traces.formats import read_trace


def test_same_seed_same_bytes_and_a_valid_mooncake_file(tmp_path):
    a, b, c = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "c.jsonl"
    synth_toolagent.write(str(a), 400, 6.0, 5)
    synth_toolagent.write(str(b), 400, 6.0, 5)
    synth_toolagent.write(str(c), 400, 6.0, 6)
    assert a.read_bytes() == b.read_bytes() != c.read_bytes()
    rows = [json.loads(line) for line in a.read_text().splitlines()]
    assert len(rows) == 400
    assert [r["timestamp"] for r in rows] == sorted(r["timestamp"] for r in rows)
    for r in rows:
        assert len(r["hash_ids"]) == -(-r["input_length"] // 512) and r["output_length"] >= 1
    # Prefix reuse: most rows start with blocks an earlier row holds (a template or a prior step).
    seen: set[int] = set()
    reused = 0
    for r in rows:
        reused += r["hash_ids"][0] in seen
        seen.update(r["hash_ids"])
    assert reused > 300
    trace = read_trace(a)
    assert trace.format == "mooncake" and len(trace.requests) == 400 and trace.hash_block_size == 512


def test_bad_options_are_one_line_and_exit_2(tmp_path, capsys):
    assert synth_toolagent.main(["--out", str(tmp_path / "x.jsonl"), "--requests", "0"]) == 2
    err = capsys.readouterr().err
    assert err == "synth_toolagent: error: --requests 0: need 1 to 10,000,000\n"
    assert list(tmp_path.iterdir()) == []
    assert synth_toolagent.main(["--out", str(tmp_path / "x.jsonl"), "--requests", "3", "--rate", "2"]) == 0
    assert capsys.readouterr().out == f"wrote {tmp_path / 'x.jsonl'}: 3 requests at 2/s (seed 5)\n"
