"""A plain folder named ``fairsim`` taken for the package (a clone's top folder, seen from its
parent) is named, with exit 2, instead of an ImportError traceback from every command."""

import sys
import types

from fairsim import __main__ as entry


def test_a_namespace_folder_taken_for_the_package_is_named(monkeypatch, capsys, tmp_path):
    folder = tmp_path / "fairsim"
    folder.mkdir()
    fake = types.ModuleType("fairsim")
    fake.__file__ = None  # what Python makes of a folder without __init__.py (a namespace package)
    fake.__path__ = [str(folder)]
    monkeypatch.setitem(sys.modules, "fairsim", fake)
    assert entry.shadowing_folder() == str(folder)
    assert entry.program() == 2
    err = capsys.readouterr().err
    assert err.startswith(f"fairsim: the folder {folder} (it has no __init__.py) was imported as the package")
    assert err.count("\n") == 1 and "Traceback" not in err


def test_the_package_itself_is_not_a_shadow():
    assert entry.shadowing_folder() is None
