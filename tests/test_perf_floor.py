"""experiments/perf_floor.py: the floor's LRU counts hand-computed hits, and the script runs end to end."""

import subprocess
import sys
from pathlib import Path

from experiments import perf_floor


def _trace(tmp_path: Path) -> Path:
    # Three requests, 2-block LRU: [1,2] misses twice; [1,3] hits 1, misses 3 (evicts 2);
    # [2,3] misses 2 (evicts 1), hits 3 -> 2 hits.
    path = tmp_path / "t.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 1024, "output_length": 1, "hash_ids": [1, 2]}\n'
                    '{"timestamp": 1, "input_length": 1024, "output_length": 1, "hash_ids": [1, 3]}\n'
                    '{"timestamp": 2, "input_length": 1024, "output_length": 1, "hash_ids": [2, 3]}\n')
    return path


def test_floor_lru_hits_hand_computed(tmp_path):
    out = subprocess.run([sys.executable, "-c", perf_floor.FLOOR, str(_trace(tmp_path)), "2", "10"],
                         check=True, capture_output=True, text=True).stdout
    assert out.split() == ["3", "2"]


def test_script_prints_the_ratio(tmp_path, capsys):
    assert perf_floor.main(["--trace", str(_trace(tmp_path)), "--steps", "10", "--repeat", "1",
                            "--", "--policy", "fcfs"]) == 0
    line = capsys.readouterr().out
    assert line.startswith("floor ") and "x the floor" in line


def test_perf_fixed_costs_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    from experiments import perf_fixed_costs

    for argv, says in [(["--trace", str(tmp_path / "none.jsonl")], "none.jsonl"),
                       (["--trace", str(tmp_path), "--repeat", "0"], "--repeat 0"),
                       (["--trace", str(tmp_path), "--budget", "0"], "--budget 0")]:
        assert perf_fixed_costs.main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("perf_fixed_costs: error: ") and says in err and err.count("\n") == 1, err
