"""The ``fairsim`` command line: ``run``, ``compare``, ``bench``; live ``replay``, ``calibrate``, ...

Every command reads a trace (default: the embedded RAG input), shapes its load, simulates it under
one or more policies, and prints a table or JSON.

This module only builds the parser, dispatches and applies the error contract. The options
shared by the commands are in ``fairsim.options``, and ``fairsim.description.describe_run``
resolves them, in one order of checks, to the ``RunDescription`` each command takes; each command is
its own module: ``run``/``compare`` ``fairsim.run``, ``bench`` ``fairsim.bench``, ``analyze``
``fairsim.analysis.cli``, ``accept`` ``fairsim.accept``, ``sweep`` ``fairsim.sweep``,
``convert`` ``fairsim.convert``, the live commands ``fairsim.live.cli``, ``calibrate``
``calibration.cli``, ``profile build`` ``calibration.profile_cli``. None of them imports this
module (``tests/test_imports.py``).

Error contract (``main``): bad input (a trace, profile, option or output path) -> ``fairsim: error:
...`` naming the file, line and field or the option, exit 2; a missing optional package -> the
``pip install`` extra to use, exit 2; Ctrl-C -> one line, results already written kept, exit 130;
anything else is a bug -> a short message with the exception, exit 1, and the traceback only
with ``fairsim --debug``.
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys
from collections.abc import Sequence

from fairsim import __version__
from fairsim.deps import MissingDependencyError, missing_message
from fairsim.errors import PolicyContractError, PolicyError, StatusError
from fairsim.gcpause import freeze_for_exit
from fairsim.io import count_arg, file_arg, path_arg
from fairsim.deployment_options import add_disagg_options, add_fleet_options
from fairsim.options import HelpFormatter, add_common, resolve_policies
from fairsim.policies import policy_names
from fairsim.run import cmd_simulate

# The option helpers and run/compare's parts live in fairsim.options and fairsim.run; these names
# stay importable from here for code and tests written against the former single module.
from fairsim.options import (MAX_ARRIVAL_S, capacity_of, check_named_once, check_policies,  # noqa: F401
                             check_shaping_options, engine_config, load_in_trace_time, load_requests,
                             param_scope, params_for, parse_params, read_trace, replay_line, scoped_params)
from fairsim.run import format_table, run_one, write_run_info, write_tables  # noqa: F401


POLICY_CONFIG_HELP = ("a policy and its parameters as fairsim tune writes them "
                      "({\"policy\": NAME, \"params\": {...}}); replaces --policy")
PLOTS_HELP = "folder for ttft_cdf.png, ttft_vs_arrival.png, queue_kv.png (fairsim/run_plots.py)"


#: Commands registered first; ``main`` builds a parser with only these when one of them is run.
CORE_COMMANDS = ("run", "compare", "bench")


class _CoreParseError(Exception):
    """A parse error of the core-only parser: ``main`` parses again with the full one."""


class _Parser(argparse.ArgumentParser):
    """argparse's parser whose errors are one line, as every other error of fairsim (the error
    contract in ``main``): ``fairsim CMD: error: MESSAGE (fairsim CMD --help lists the options)``,
    exit 2; argparse's own prints its whole usage block first."""

    def __init__(self, *args, **kwargs):
        # No abbreviated options: ``compare --policy fcfs`` was read as ``--policy-config fcfs``
        # (a new user's report). Every sub-parser is made of this class, so each inherits it.
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # noqa: D102 - argparse's hook; it must not return
        self.exit(2, f"{self.prog}: error: {message} ({self.prog} --help lists the options)\n")

    def parse_args(self, args=None, namespace=None):  # noqa: D102 - argparse's, one change:
        # an unknown option is the command's error (``fairsim run: error: unrecognized
        # arguments: --bogus (fairsim run --help ...)``), not the top-level parser's.
        namespace, extras = self.parse_known_args(args, namespace)
        if extras:
            owner: argparse.ArgumentParser = self
            for action in self._actions:
                if isinstance(action, argparse._SubParsersAction):
                    owner = action.choices.get(getattr(namespace, action.dest, None), self)
            owner.error(f"unrecognized arguments: {' '.join(extras)}{_did_you_mean(owner, extras)}")
        return namespace


def _did_you_mean(parser: argparse.ArgumentParser, extras: list[str]) -> str:
    """``"; did you mean --policies?"`` for the first unknown option with a close known one."""
    known = [o for action in parser._actions for o in action.option_strings if o.startswith("--")]
    for extra in extras:
        if extra.startswith("--"):
            name = extra.partition("=")[0]
            starting = sorted(o for o in known if o.startswith(name))  # an abbreviation: every option it starts
            if 1 < len(starting) <= 4:
                return f"; did you mean {', '.join(starting[:-1])} or {starting[-1]}?"
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
            if close:
                return f"; did you mean {close[0]}?"
    return ""


class _CoreParser(_Parser):
    def error(self, message: str):  # noqa: D102 - argparse's hook
        raise _CoreParseError(message)


def _add_run(sub: argparse._SubParsersAction, fmt: type[argparse.HelpFormatter]) -> None:
    run = sub.add_parser("run", help="simulate one policy", formatter_class=fmt)
    # No argparse default: a --policy given is told from none, so one naming another policy than
    # --policy-config's is refused (fairsim.policy_config), even when it names fairway.
    run.add_argument("--policy", help=f"one of: {', '.join(policy_names())}; or package.module:Class, a class "
                                      f"of your own (default: fairway)")
    run.add_argument("--policy-config", type=file_arg, metavar="FILE", help=POLICY_CONFIG_HELP)
    add_common(run)
    add_fleet_options(run)
    add_disagg_options(run)
    run.add_argument("--plots", type=path_arg, help=PLOTS_HELP)


def _add_compare(sub: argparse._SubParsersAction, fmt: type[argparse.HelpFormatter]) -> None:
    cmp = sub.add_parser("compare", help="simulate several policies on the same input, side by side",
                         formatter_class=fmt)
    cmp.add_argument("--policies", default="fcfs,lpm,fairway",
                     help="comma-separated policy names, or 'all' (every registered policy but the "
                          "generic klpm, which klpm4 covers)")
    cmp.add_argument("--policy-config", type=file_arg, metavar="FILE",
                     help="a policy and its parameters as fairsim tune writes them: the policy runs with "
                          "them (added to --policies if missing)")
    add_common(cmp)
    add_fleet_options(cmp)
    add_disagg_options(cmp)
    cmp.add_argument("--plots", type=path_arg, help=PLOTS_HELP)
    cmp.add_argument("--baseline", default="fcfs", metavar="NAME",
                     help="show each policy's TTFT p50/p99/max as a ratio to this policy's (table, JSON, "
                          "summary.json); run first if not among --policies; 'none': no ratios")


def _add_bench(sub: argparse._SubParsersAction, fmt: type[argparse.HelpFormatter]) -> None:
    bench = sub.add_parser("bench", help="speed and peak memory per policy (one process each)",
                           formatter_class=fmt)
    bench.add_argument("--policies", default="fcfs,lpm,fairway",
                       help="comma-separated policy names, or 'all'")
    add_common(bench, out_help="folder for bench.json (every policy's figures; partial ones on Ctrl-C)", goodput=False)
    add_fleet_options(bench)
    add_disagg_options(bench)
    bench.add_argument("--compare", metavar="PATH",
                       help="also run this peer simulator on the same requests: 'dynamo' (NVIDIA Dynamo's "
                            "offline replay) or sched-sim's executable")
    bench.add_argument("--repeat", type=count_arg, default=3,
                       help="runs per policy; the median is kept (so one slow run does not move it)")
    bench.add_argument("--tile", type=count_arg, default=1, metavar="N",
                       help="concatenate N time-shifted copies of the trace")
    bench.add_argument("--vs-one-engine", action="store_true",
                       help="with --instances N: also run the same requests on one engine at the same per-engine "
                            "load (arrivals N times further apart), alternating, and print the fleet's time "
                            "over it")


#: Each core command's registration, in ``CORE_COMMANDS``' order.
_CORE_ADDERS = {"run": _add_run, "compare": _add_compare, "bench": _add_bench}


def build_parser(full: bool = True, only: str | None = None) -> argparse.ArgumentParser:
    """The ``fairsim`` argument parser.

    Args:
        full: Register every command. False: only ``CORE_COMMANDS``, without importing the other
            commands' modules (start-up of ``fairsim run``); a parse error then raises
            ``_CoreParseError`` instead of exiting, so the caller can parse with the full parser.
        only: With ``full`` False, register this core command alone (its options are the same;
            the other two cost a run ~2 ms of ``add_argument`` calls).
    """
    cls = _Parser if full else _CoreParser
    parser = cls(prog="fairsim", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"fairsim {__version__}")
    parser.add_argument("--debug", action="store_true",
                        help="on an internal error, print the full traceback (give it before the command)")
    sub = parser.add_subparsers(dest="command", required=True)
    fmt = HelpFormatter
    for name, add in _CORE_ADDERS.items():
        if full or only is None or only == name:
            add(sub, fmt)
    if not full:
        return parser
    # Live vLLM commands (replay, equivalence, fidelity, hook-overhead) and calibrate; their
    # modules import vLLM only when a command runs.
    from calibration.cli import add_calibrate_command
    from fairsim.live.cli import add_live_commands

    add_live_commands(sub, add_common)
    add_calibrate_command(sub)
    from calibration.profile_cli import add_profile_command

    add_profile_command(sub)
    from fairsim.sweep import add_parser as add_sweep_parser

    add_sweep_parser(sub)
    from fairsim.convert import add_parser as add_convert_parser

    add_convert_parser(sub)
    from fairsim.analysis.cli import add_analyze_command

    add_analyze_command(sub, add_common, fmt)
    from fairsim.accept import add_accept_command

    add_accept_command(sub, add_common, fmt)
    from fairsim.tune.command import add_tune_command

    add_tune_command(sub, add_common, fmt)
    return parser


def dispatch(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """Run the command named by ``args.command``; errors propagate to ``main``."""
    if args.command in ("run", "compare") and getattr(args, "policy_config", None) is not None:
        from fairsim.policy_config import apply_policy_config

        apply_policy_config(args, args.command)
    if args.command == "run":
        return cmd_simulate(args, [args.policy or "fairway"])
    if args.command == "compare":
        from fairsim.ratios import with_baseline

        names, note = with_baseline(resolve_policies(args.policies), args.baseline)
        if note is not None:  # the baseline was added: it takes only its own NAME.KEY --param
            args.baseline_added = args.baseline
            print(note, file=sys.stderr)
        return cmd_simulate(args, names)
    if args.command == "bench":
        from fairsim.bench import cmd_bench

        return cmd_bench(args, resolve_policies(args.policies))
    from fairsim.live.cli import LIVE_COMMANDS, run_live_command

    if args.command in LIVE_COMMANDS:
        return run_live_command(args)
    if args.command == "calibrate":
        from calibration.cli import cmd_calibrate

        return cmd_calibrate(args)
    if args.command == "profile":
        from calibration.profile_cli import cmd_profile

        return cmd_profile(args)
    if args.command == "sweep":
        from fairsim.sweep import cmd_sweep

        return cmd_sweep(args)
    if args.command == "convert":
        from fairsim.convert import cmd_convert

        return cmd_convert(args)
    if args.command == "analyze":
        from fairsim.analysis.cli import cmd_analyze

        return cmd_analyze(args)
    if args.command == "tune":
        from fairsim.tune.command import cmd_tune

        return cmd_tune(args)
    if args.command == "accept":
        from fairsim.accept import cmd_accept

        return cmd_accept(args)
    parser.error(f"unknown command {args.command}")
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``fairsim`` console script; applies the error contract (module docstring).

    A Ctrl-C ends in exit 130 wherever it lands, the parsing included (building the full parser
    imports every command's module); an error raised after one (a library that turned the
    ``KeyboardInterrupt`` into an ``ImportError``) is reported as the interruption it is.

    Returns:
        The exit status: 0 success, 1 internal error (a bug), 2 bad input or a missing optional
        package, 3 a refused calibration fit, 130 interrupted (Ctrl-C).
    """
    from fairsim import interrupt

    interrupt.install()
    argv = sys.argv[1:] if argv is None else list(argv)
    debug = False
    try:
        parser, args = parse_command_line(argv)
        debug = bool(getattr(args, "debug", False))
        status = dispatch(parser, args)
        # Ctrl-C arrived in a finaliser after the last step; a command that returns 130 has
        # reported the interruption itself (sweep names its resumable folder), so not twice.
        if interrupt.REQUESTED and status != 130:
            raise KeyboardInterrupt
        return status
    except Exception as exc:  # noqa: BLE001 - classified below; KeyboardInterrupt is no Exception
        if interrupt.REQUESTED:
            return _interrupted(debug)
        return _error_status(exc, debug)
    except KeyboardInterrupt:
        return _interrupted(debug)


def parse_command_line(argv: list[str]) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    """The parser and the parsed options: a core command (``CORE_COMMANDS``) by the core-only
    parser, anything else, or a mistake, by the full one (which says it and exits 2)."""
    command = next((a for a in argv if not a.startswith("-")), None)
    try:
        if command not in CORE_COMMANDS:
            raise _CoreParseError(command)
        parser = build_parser(full=False, only=command)
        return parser, parser.parse_args(argv)
    except _CoreParseError:  # another command, or a mistake: the full parser says it
        parser = build_parser()
        return parser, parser.parse_args(argv)


def _print_traceback(exc: BaseException | None) -> None:
    """``--debug``: print ``exc``'s traceback (``None``: the exception being handled) to stderr."""
    import traceback  # here, not at the top: traceback, linecache and tokenize cost every run ~5 ms

    if exc is None:
        traceback.print_exc()
    else:
        traceback.print_exception(exc)


def _interrupted(debug: bool) -> int:
    """Ctrl-C: ``fairsim.interrupt.MESSAGE``, exit 130 (the traceback first with ``--debug``)."""
    from fairsim import interrupt

    if debug:
        _print_traceback(None)
    return interrupt.report()


def _error_status(exc: Exception, debug: bool) -> int:
    """The message and exit status of an error a command raised (module docstring)."""

    def fail(message: str, status: int) -> int:
        if debug:
            _print_traceback(exc)
        print(f"fairsim: {message}", file=sys.stderr)
        return status

    if isinstance(exc, StatusError):  # its own status (a bench child's, a policy failing in the hook)
        return fail(str(exc), exc.status)
    if isinstance(exc, MissingDependencyError):
        return fail(f"error: {exc}", 2)
    if isinstance(exc, ImportError):  # an optional package missing deep inside a command
        hint = missing_message(exc.name or "")
        return fail(f"error: {hint}", 2) if hint is not None else _bug(exc, debug)
    if isinstance(exc, MemoryError):
        return fail("error: out of memory (MemoryError); use a smaller input (--max-requests, "
                    "--window-end), KV cache (--kv-blocks/--kv-fraction) or fleet (--instances)", 2)
    if isinstance(exc, BrokenPipeError):  # the reader of stdout left (`| head`): stop quietly, as `cat` does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no 2nd error at exit
        return 141  # 128 + SIGPIPE, the shell's status for a writer whose reader left
    if isinstance(exc, (ValueError, OSError)):  # bad input or an unusable path: message, no traceback
        return fail(f"error: {exc}", 2)
    if isinstance(exc, PolicyError):  # the policy's own code raised: name it, not "a bug in fairsim"
        return fail(f"{exc}" + ("" if debug else _DEBUG_HINT), 1)
    if isinstance(exc, PolicyContractError):  # the policy returned a bad order (message names it)
        return fail(f"error: policy contract broken (fairsim/policies/base.py): {exc}"
                    + ("" if debug else _DEBUG_HINT), 1)
    return _bug(exc, debug)  # anything else is a bug: say so, briefly


_DEBUG_HINT = "\n(rerun with fairsim --debug ... for the traceback)"


def _bug(exc: BaseException, debug: bool) -> int:
    """Report an internal error (exit 1): the exception, and the traceback only with ``--debug``."""
    if debug:
        _print_traceback(exc)
    print(f"fairsim: internal error (a bug in fairsim, please report it): {type(exc).__name__}: {exc}"
          + ("" if debug else _DEBUG_HINT), file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
