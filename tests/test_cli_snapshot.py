"""The commands' output is unchanged: the quick cases of ``tests/cli_snapshot.py`` (README
examples on a shipped public trace, ``--help``, error cases) give byte for byte what is stored
in ``tests/data/cli_snapshot`` (stdout, stderr, exit status, ``--out`` files; wall-clock
figures masked, see ``cli_snapshot``'s docstring). After an intended change of output, record
it again: ``python tests/cli_snapshot.py record . tests/data/cli_snapshot --cases quick``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cli_snapshot  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
STORED = ROOT / "tests" / "data" / "cli_snapshot"


@pytest.mark.skipif(not (ROOT.parent / "shared" / "data" / "traces").is_dir(),
                    reason="the shared public traces (../shared/data/traces) are not beside the repository")
def test_quick_cases_match_the_stored_snapshot(tmp_path):
    cli_snapshot.record(ROOT, tmp_path, cli_snapshot.QUICK)
    found = cli_snapshot.differences(STORED, tmp_path)
    assert not found, "\n".join(found)


def test_masks_only_the_wall_clock(tmp_path):
    text = ('{"fcfs": {"ttft_p50_s": 0.182, "wall_time_s": 0.0812}}\n'
            "fcfs   1200  0.182  247.0    0.08\n")
    masked = cli_snapshot.mask(text, tmp_path, ROOT, table=True)
    assert masked == ('{"fcfs": {"ttft_p50_s": 0.182, "wall_time_s": "<wall>"}}\n'
                      "fcfs   1200  0.182  247.0    <wall>\n")
    assert cli_snapshot.mask("computed: b-2 a-1\n", tmp_path, ROOT, table=False) == "computed: a-1 b-2\n"


def test_a_changed_byte_is_found(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "x.stdout").write_text("load 2.22\n")
    (tmp_path / "b" / "x.stdout").write_text("load 2.23\n")
    (tmp_path / "a" / "y.rc").write_text("0\n")
    found = cli_snapshot.differences(tmp_path / "a", tmp_path / "b")
    assert len(found) == 2 and "-load 2.22" in found[1] and "+load 2.23" in found[1]
    assert found[0].startswith("y.rc: only in")
