"""Checks from a new user's pass over the docs (branch newuser-t)."""

from __future__ import annotations

import argparse
import re

import pytest

from fairsim.cli import build_parser


def _subcommands():
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    todo = list(sub.choices.items())
    while todo:
        name, parser = todo.pop()
        yield name, parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo += [(f"{name} {s}", p) for s, p in action.choices.items()]


@pytest.mark.parametrize("name,parser", list(_subcommands()), ids=lambda v: v if isinstance(v, str) else "")
def test_help_states_every_default(name, parser):
    """docs/commands.md: `fairsim COMMAND --help` prints the options "with defaults". The live
    commands (replay, equivalence, fidelity, hook-overhead) printed none: docs/live.md's
    `--requests 200`, `--rate 8`, `--kv-blocks 48`, `--sizes 10,100,1000`, ... were in no --help."""
    missing = []
    for action in parser._actions:
        if not action.option_strings or action.help == argparse.SUPPRESS or action.option_strings == ["-h", "--help"]:
            continue
        if action.default is None or action.default is False or action.default == [] \
                or action.default is argparse.SUPPRESS:
            continue
        text = parser.formatter_class(prog="x")._get_help_string(action) % {**vars(action), "default": action.default} \
            if action.help else ""
        if not re.search(r"\bdefault\b", text):
            missing.append(f"{name} {action.option_strings[-1]} (default {action.default!r})")
    assert not missing, missing


def test_help_shows_a_zero_default_and_one_hidden_only_by_the_word_defaults():
    """fairsim.options.HelpFormatter hid a default of 0 (``0 in (None, [], False)`` is true, as
    ``0 == False``) and any default whose help said "defaults" (tune --targets: "POLICY at its
    defaults"): docs/sweeps.md's `--search-seed` default 0 and `--targets` default `accept` were
    in no --help."""
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    tune = " ".join(sub.choices["tune"].format_help().split())
    assert re.search(r"--search-seed N +seed of the sampler.*?\(default: 0\)", tune)
    assert "no-starvation) (default: accept)" in tune
    eq = " ".join(sub.choices["equivalence"].format_help().split())
    assert "--requests is then unused (default: 0)" in eq
