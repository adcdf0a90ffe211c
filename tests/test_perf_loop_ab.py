"""experiments/perf_loop_ab.py: each tree's process times one run_one per run, and the script
prints every figure and the ratio of the medians."""

import subprocess
from pathlib import Path

import pytest

from experiments import perf_loop_ab

ROOT = Path(__file__).resolve().parents[1]


def _trace(tmp_path: Path) -> Path:
    path = tmp_path / "t.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 1024, "output_length": 1, "hash_ids": [1, 2]}\n'
                    '{"timestamp": 1, "input_length": 1024, "output_length": 1, "hash_ids": [1, 3]}\n')
    return path


def test_one_figure_per_run(tmp_path):
    cpu = perf_loop_ab.loop_cpu(str(ROOT), 3, ["--policy", "fcfs", "--trace", str(_trace(tmp_path))])
    assert len(cpu) == 3 and all(0 < c < 60 for c in cpu)


def test_script_alternates_the_trees(tmp_path, capsys):
    trace = str(_trace(tmp_path))
    assert perf_loop_ab.main(["--trees", str(ROOT), str(ROOT), "--rounds", "2", "--runs", "1", "--",
                              "--policy", "fairway", "--trace", trace]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines[:4]] == [f"round {i} {ROOT}" for i in (1, 1, 2, 2)]
    assert lines[4].startswith("median loop CPU s: A ") and "B/A " in lines[4]


def test_a_failing_run_is_reported(tmp_path):
    with pytest.raises(subprocess.CalledProcessError):  # not a figure of a failed run
        perf_loop_ab.loop_cpu(str(ROOT), 1, ["--policy", "no-such-policy", "--trace", str(_trace(tmp_path))])


def test_each_process_loads_its_own_tree(tmp_path, monkeypatch):
    """The tree given, not the current directory, is first on the child's path."""
    monkeypatch.chdir(ROOT)  # (where a -c command's path would otherwise start)
    other = tmp_path / "tree" / "fairsim"
    other.mkdir(parents=True)
    (other / "__init__.py").write_text("")
    (other / "run.py").write_text("raise SystemExit('the other tree')\n")
    with pytest.raises(subprocess.CalledProcessError) as err:
        perf_loop_ab.loop_cpu(str(other.parent), 1, ["--policy", "fcfs", "--trace", str(_trace(tmp_path))])
    assert "the other tree" in err.value.stderr

