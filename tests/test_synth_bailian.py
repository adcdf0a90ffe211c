"""experiments/synth_bailian.py: the same file for the same seed, read by the Bailian reader, each
follow-up's ids starting with its parent's full blocks."""

import json

from experiments import synth_bailian
from fairsim.traces.formats import read_trace


def test_same_seed_same_bytes_and_a_valid_bailian_file(tmp_path):
    a, b, c = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "c.jsonl"
    synth_bailian.write(str(a), 300, 8.0, 2)
    synth_bailian.write(str(b), 300, 8.0, 2)
    synth_bailian.write(str(c), 300, 8.0, 3)
    assert a.read_bytes() == b.read_bytes() != c.read_bytes()
    rows = [json.loads(line) for line in a.read_text().splitlines()]
    by_chat = {r["chat_id"]: r for r in rows}
    follow = [r for r in rows if r["parent_chat_id"] >= 0]
    assert 0 < len(follow) < len(rows)
    for r in rows:
        assert len(r["hash_ids"]) == r["input_length"] // 16 and 10 <= r["output_length"] <= 500
    for r in follow:
        parent = by_chat[r["parent_chat_id"]]
        n = parent["input_length"] // 16
        assert r["hash_ids"][:n] == parent["hash_ids"][:n] and r["input_length"] > parent["input_length"]
    trace = read_trace(a)
    assert trace.format == "bailian" and len(trace.requests) == 300
    # A follow-up turn's requests share their parent's leading block names (prefix identity)
    req = {q.request_id: q for q in trace.requests}
    r = follow[0]
    kid, par = req[str(r["chat_id"])], req[str(r["parent_chat_id"])]
    assert kid.block_hashes[:len(par.block_hashes)] == par.block_hashes and kid.after == par.request_id


def test_bad_options_are_one_line_and_exit_2_with_nothing_written(tmp_path, capsys):
    cases = [
        (["--out", str(tmp_path)], "--out"),
        (["--out", str(tmp_path / "no" / "b.jsonl")], "does not exist"),
        (["--out", str(tmp_path / "b.jsonl"), "--rate", "inf"], "--rate inf"),
        (["--out", str(tmp_path / "b.jsonl"), "--rate", "1e-300"], "--rate 1e-300"),
        (["--out", str(tmp_path / "b.jsonl"), "--requests", "0"], "--requests 0"),
    ]
    for argv, says in cases:
        assert synth_bailian.main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("synth_bailian: error: ") and says in err and err.count("\n") == 1, err
    assert list(tmp_path.iterdir()) == []
    assert synth_bailian.main(["--out", str(tmp_path / "b.jsonl"), "--requests", "1"]) == 0
    assert [p.name for p in tmp_path.iterdir()] == ["b.jsonl"]  # (no .part left)
    assert capsys.readouterr().out == f"wrote {tmp_path / 'b.jsonl'}: 1 request at 8/s (seed 2)\n"
