"""Regressions found by a third new-user pass (each failed before its fix)."""

from __future__ import annotations

import json

import pytest

from fairsim.cli import main


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def write_lines(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize("ids, first, second", [([5, 5, 5], 0, 1), ([0, 1, 0, 1], 0, 2), ([5, 6, 5], 0, 2)])
def test_repeated_chained_id_is_refused_at_load(tmp_path, capsys, ids, first, second):
    # Was: KeyError inside the engine (exit 1). Chained ids cannot repeat within one prompt.
    trace = write_lines(tmp_path / "t.jsonl", [
        {"timestamp": 0, "input_length": 512, "output_length": 1, "hash_ids": [9]},
        {"timestamp": 10, "input_length": 512 * len(ids), "output_length": 5, "hash_ids": ids}])
    code, _, err = run_cli(capsys, "run", "--trace", trace)
    assert code == 2
    assert f"{trace}:2: field 'hash_ids': id {ids[first]} stands at positions {first} and {second}" in err
