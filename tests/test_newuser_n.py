"""Found by a new user's pass over the docs: an empty path given to an option that names a file
is refused without the advice to give '.', a folder, which that option then refuses."""

from __future__ import annotations

import pytest

from fairsim.cli import main

TRACE = "fairsim/traces/data/conversation_window.jsonl"


@pytest.mark.parametrize("command, argument", [
    (["run", "--policy-config", ""], "--policy-config"),
    (["compare", "--policy-config", ""], "--policy-config"),
    (["accept", TRACE, "--policy-config", ""], "--policy-config"),
    (["sweep", ""], "spec"),
    (["convert", TRACE, ""], "OUT"),
])
def test_an_empty_file_path_asks_for_a_file_name(capsys, command, argument):
    # Was: "give a folder or file name, '.' for the working folder"; '.' is then refused
    # (--policy-config: "cannot read the file: Is a directory"; convert OUT: a folder).
    with pytest.raises(SystemExit) as stop:
        main(command)
    err = capsys.readouterr().err
    assert stop.value.code == 2
    assert f"argument {argument}: empty path '' (an unset shell variable?); give a file name" in err
    assert "working folder" not in err


def test_an_empty_out_folder_still_offers_the_working_folder(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["run", "--plots", ""])
    assert stop.value.code == 2
    assert "'.' for the working folder" in capsys.readouterr().err
