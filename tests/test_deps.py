"""A missing dependency is an install to make, not a bug (``fairsim/deps.py``)."""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

from fairsim.cli import _error_status
from fairsim.deps import REQUIRED, missing_message

ROOT = Path(__file__).resolve().parents[1]


def test_required_is_pyprojects_dependencies():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert {re.split(r"[<>=!~ \[;]", d, maxsplit=1)[0].lower() for d in deps} == REQUIRED


def test_a_missing_dependency_exits_2_naming_the_interpreter(capsys):
    # Was: "internal error (a bug in fairsim ...): ModuleNotFoundError: No module named 'numpy'"
    # from a bench child run by a venv made for Dynamo (twentieth session's new-user pass).
    code = _error_status(ModuleNotFoundError("No module named 'numpy'", name="numpy"), False)
    err = capsys.readouterr().err
    assert code == 2
    assert err == (f"fairsim: error: numpy is not installed for {sys.executable}, and fairsim needs it: install "
                   "fairsim in this environment (pip install -e . in its folder)\n")
    assert missing_message("numpy.linalg") == missing_message("numpy")
    assert missing_message("ray").startswith("ray is not installed (needed for")
    assert missing_message("nosuchmodule") is None
    assert _error_status(ModuleNotFoundError("No module named 'nosuchmodule'", name="nosuchmodule"), False) == 1
    assert "internal error (a bug in fairsim" in capsys.readouterr().err
