"""The documentation stays true: the site builds strictly, the README's commands print what it
shows, its policy table is the registry's, its own-policy example runs, and every option of every
command is documented."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from fairsim.policies.catalog import FIXED, RULES, markdown_table
from fairsim.policies.registry import POLICIES, make_policy

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
WINDOW = ROOT / "fairsim" / "traces" / "data" / "conversation_window.jsonl"
FULL_TRACE = ROOT.parent / "shared" / "data" / "traces" / "conversation_trace.jsonl"
TEST_COMMAND = ('pip install -e ".[test,live-cpu]" && pip uninstall -y torchvision torchaudio '
                'torchcodec && python -m pytest -n 2')


def _env(*paths: Path) -> dict[str, str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in (*paths, ROOT))
    return env


@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None,
                    reason='mkdocs is not installed (pip install -e ".[test]")')
def test_mkdocs_build_strict(tmp_path):
    """A broken link, a missing anchor or a page left out of the nav fails the build."""
    # No -q: mkdocs's quiet mode drops WARNING records before --strict counts them, so a
    # broken link passed with it while `mkdocs build --strict` (the README's command) failed.
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict",
                           "-f", str(ROOT / "mkdocs.yml"), "-d", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True,
                          env=dict(os.environ, NO_MKDOCS_2_WARNING="1"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "site" / "policies" / "index.html").is_file()


def test_readme_length_and_fresh_machine_commands():
    assert len(README.splitlines()) <= 250
    assert "pip install -e . && fairsim compare\n" in README
    assert TEST_COMMAND + "\n" in README


def _table(text: str) -> str:
    start, end = "<!-- policy-table:start -->\n", "<!-- policy-table:end -->"
    return text[text.index(start) + len(start):text.index(end)]


def test_policy_tables_are_the_registrys():
    assert _table(README) == markdown_table()
    assert _table((ROOT / "docs" / "policies.md").read_text()) == markdown_table()


def test_catalog_has_a_rule_per_policy_and_fixed_params_are_fixed():
    assert set(RULES) == set(POLICIES)
    profile = __import__("fairsim.costmodel", fromlist=["load_profile"]).load_profile(
        "a6000-llama3.1-8b-vllm-prior")
    for name, fixed in FIXED.items():
        for key, value in fixed.items():
            with pytest.raises(ValueError, match="fixes"):
                make_policy(name, profile, **{key: value})


def _console_blocks(text: str) -> list[tuple[str, str]]:
    """Each ```console block of the README as (command after '$ ', the output shown)."""
    return [(m.group(1), m.group(2)) for m in
            re.finditer(r"```console\n\$ ([^\n]+)\n(.*?)\n```", text, flags=re.S)]


def _comparable(output: str) -> list[str]:
    # The wall-clock column (last on a policy row) is the one figure that varies between runs.
    return [re.sub(r"\s+wall s$|\s+\d+\.\d\d$", "", line.rstrip()) for line in output.splitlines()]


def _run_readme_command(command: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    argv = shlex.split(command)
    if argv[0].startswith("PYTHONPATH="):
        argv = argv[1:]  # the test's env carries the folder instead
    assert argv[0] == "fairsim"
    argv = [sys.executable, "-m", "fairsim", *(str(ROOT / a) if a == str(WINDOW.relative_to(ROOT))
                                               else a for a in argv[1:])]
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)


def test_worked_example_prints_what_the_readme_shows(tmp_path):
    """analyze -> compare -> accept on the shipped window: same lines, same exit status 0."""
    blocks = [(c, o) for c, o in _console_blocks(README) if "mypolicy" not in c]
    assert [shlex.split(c)[1] for c, _ in blocks] == ["analyze", "compare", "accept"]
    for command, shown in blocks:
        proc = _run_readme_command(command, tmp_path, _env())
        assert proc.returncode == 0, proc.stderr
        # stderr and stdout are captured apart, so compare the lines, not their interleaving
        assert sorted(_comparable(proc.stderr + proc.stdout)) == sorted(_comparable(shown)), command
    assert (tmp_path / "report" / "report.md").is_file()
    assert (tmp_path / "plots" / "ttft_cdf.png").is_file()


def test_own_policy_example_runs(tmp_path):
    code = re.search(r"<!-- own-policy:code -->\n```python\n(.*?)```", README, flags=re.S).group(1)
    (tmp_path / "mypolicy.py").write_text(code)
    assert len(code.strip().splitlines()) <= 16
    [(command, shown)] = [(c, o) for c, o in _console_blocks(README) if "mypolicy" in c]
    proc = _run_readme_command(command, tmp_path, _env(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert sorted(_comparable(proc.stderr + proc.stdout)) == sorted(_comparable(shown))
    row = next(line for line in proc.stdout.splitlines() if line.startswith("mypolicy:ShortestFirst"))
    assert row.split()[1] == "1407"


def test_readme_links_resolve():
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README):
        if "://" not in target:
            assert (ROOT / target).exists(), target


# Which page documents each command's options (options shared with `run` may be on its page).
PAGES = {"run": ["commands.md"], "compare": ["commands.md"], "bench": ["commands.md"],
         "analyze": ["analyze-accept.md"], "accept": ["analyze-accept.md"],
         "convert": ["traces.md"], "sweep": ["sweeps.md"], "replay": ["live.md"],
         "equivalence": ["live.md"], "fidelity": ["live.md"], "hook-overhead": ["live.md"],
         "calibrate": ["live.md"], "tune": ["sweeps.md"], "profile": ["profiles.md"]}


def test_every_option_of_every_command_is_documented():
    from fairsim.cli import build_parser

    subparsers = next(a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction")
    assert set(subparsers.choices) == set(PAGES)
    missing = []
    for command, parser in subparsers.choices.items():
        text = "".join((ROOT / "docs" / p).read_text() for p in [*PAGES[command], "commands.md"])
        parsers = [(command, parser)]
        while parsers:  # a command with sub-commands (`profile build`): their options too
            name, current = parsers.pop()
            for action in current._actions:
                if action.__class__.__name__ == "_SubParsersAction":
                    parsers += [(f"{name} {sub}", p) for sub, p in action.choices.items()]
                for option in action.option_strings:
                    if option.startswith("--") and option != "--help" and option not in text:
                        missing.append(f"{name} {option}")
    assert not missing


@pytest.mark.skipif(not FULL_TRACE.is_file(), reason="the full public trace is not beside the repository")
def test_shipped_window_is_the_documented_cut_of_the_public_trace():
    rebuilt = []
    for line in FULL_TRACE.read_text().splitlines():
        record = json.loads(line)
        if 1_800_000 <= record["timestamp"] < 2_200_000:
            record["timestamp"] -= 1_800_000
            rebuilt.append(json.dumps(record))
    assert WINDOW.read_text() == "\n".join(rebuilt) + "\n"


def test_fleets_page_shows_the_disaggregated_capacity_errors_as_printed(capsys):
    """docs/fleets.md's two 'side too small' examples are what those commands print (a new
    user's report: the decode one had drifted from the message)."""
    from fairsim.cli import main

    text = (ROOT / "docs" / "fleets.md").read_text()
    block = re.search(r"```console\n(\$ fairsim run [^\n]*--mode disaggregated[^\n]*\n.*?)\n```", text, re.S)
    assert block is not None
    lines = block.group(1).splitlines()
    pairs = list(zip(lines[::2], lines[1::2]))
    assert len(pairs) == 2 and all(c.startswith("$ fairsim ") for c, _ in pairs)
    for command, shown in pairs:
        argv = [str(ROOT / a) if a.startswith("fairsim/traces/") else a for a in shlex.split(command)[2:]]
        assert main(argv) == 2
        assert capsys.readouterr().err.strip() == shown
