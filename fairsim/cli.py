"""The ``fairsim`` command line: ``run``, ``compare``, ``bench``; live ``replay``, ``calibrate``, ...

Every command reads a trace (default: the embedded RAG input), shapes its load, simulates it under
one or more policies, and prints a table or JSON.

This module only builds the parser, dispatches and applies the error contract. The options
shared by the commands, and what they resolve to, are in ``fairsim.options``; each command is
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
import os
import sys
import traceback
from collections.abc import Sequence

from fairsim import __version__
from fairsim.deps import MissingDependencyError, missing_message
from fairsim.errors import PolicyContractError, PolicyError, StatusError
from fairsim.gcpause import freeze_for_exit
from fairsim.io import path_arg
from fairsim.options import HelpFormatter, add_common, resolve_policies
from fairsim.policies import policy_names
from fairsim.run import cmd_simulate

# The option helpers and run/compare's parts live in fairsim.options and fairsim.run; these names
# stay importable from here for code and tests written against the former single module.
from fairsim.options import (MAX_ARRIVAL_S, capacity_of, check_named_once, check_policies,  # noqa: F401
                             check_shaping_options, engine_config, load_in_trace_time, load_requests,
                             param_scope, params_for, parse_params, read_trace, replay_line, scoped_params)
from fairsim.run import format_table, run_one, write_run_info, write_tables  # noqa: F401


PLOTS_HELP = "folder for ttft_cdf.png, ttft_vs_arrival.png, queue_kv.png (fairsim/run_plots.py)"


#: Commands registered first; ``main`` builds a parser with only these when one of them is run.
CORE_COMMANDS = ("run", "compare", "bench")


class _CoreParseError(Exception):
    """A parse error of the core-only parser: ``main`` parses again with the full one."""


class _CoreParser(argparse.ArgumentParser):
    def error(self, message: str):  # noqa: D102 - argparse's hook
        raise _CoreParseError(message)


def build_parser(full: bool = True) -> argparse.ArgumentParser:
    """The ``fairsim`` argument parser.

    Args:
        full: Register every command. False: only ``CORE_COMMANDS``, without importing the other
            commands' modules (start-up of ``fairsim run``); a parse error then raises
            ``_CoreParseError`` instead of exiting, so the caller can parse with the full parser.
    """
    cls = argparse.ArgumentParser if full else _CoreParser
    parser = cls(prog="fairsim", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"fairsim {__version__}")
    parser.add_argument("--debug", action="store_true",
                        help="on an internal error, print the full traceback (give it before the command)")
    sub = parser.add_subparsers(dest="command", required=True)
    fmt = HelpFormatter
    run = sub.add_parser("run", help="simulate one policy", formatter_class=fmt)
    run.add_argument("--policy", default="fairway",
                     help=f"one of: {', '.join(policy_names())}; or package.module:Class, a class of your own")
    add_common(run)
    run.add_argument("--plots", type=path_arg, help=PLOTS_HELP)
    cmp = sub.add_parser("compare", help="simulate several policies on the same input, side by side",
                         formatter_class=fmt)
    cmp.add_argument("--policies", default="fcfs,lpm,fairway",
                     help="comma-separated policy names, or 'all' (every registered policy but the "
                          "generic klpm, which klpm4 covers)")
    add_common(cmp)
    cmp.add_argument("--plots", type=path_arg, help=PLOTS_HELP)
    bench = sub.add_parser("bench", help="speed and peak memory per policy (one process each)",
                           formatter_class=fmt)
    bench.add_argument("--policies", default="fcfs,lpm,fairway",
                       help="comma-separated policy names, or 'all'")
    add_common(bench, out_help="folder for bench.json (every policy's figures; partial ones on Ctrl-C)")
    bench.add_argument("--compare", metavar="PATH",
                       help="also run this peer simulator (sched-sim's executable) on the same requests")
    bench.add_argument("--repeat", type=int, default=1, help="runs per policy; the median is kept")
    bench.add_argument("--tile", type=int, default=1, metavar="N",
                       help="concatenate N time-shifted copies of the trace")
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
    return parser


def dispatch(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """Run the command named by ``args.command``; errors propagate to ``main``."""
    if args.command == "run":
        return cmd_simulate(args, [args.policy])
    if args.command == "compare":
        return cmd_simulate(args, resolve_policies(args.policies))
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
    if args.command == "accept":
        from fairsim.accept import cmd_accept

        return cmd_accept(args)
    parser.error(f"unknown command {args.command}")
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``fairsim`` console script; applies the error contract (module docstring).

    Returns:
        The exit status: 0 success, 1 internal error (a bug), 2 bad input or a missing optional
        package, 3 a refused calibration fit, 130 interrupted (Ctrl-C).
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    try:
        if command not in CORE_COMMANDS:
            raise _CoreParseError(command)
        parser = build_parser(full=False)
        args = parser.parse_args(argv)
    except _CoreParseError:  # another command, or a mistake: the full parser says it
        parser = build_parser()
        args = parser.parse_args(argv)
    debug = bool(getattr(args, "debug", False))

    def fail(message: str, status: int) -> int:
        if debug:
            traceback.print_exc()
        print(f"fairsim: {message}", file=sys.stderr)
        return status

    from fairsim import interrupt

    interrupt.install()
    try:
        status = dispatch(parser, args)
        # Ctrl-C arrived in a finaliser after the last step; a command that returns 130 has
        # reported the interruption itself (sweep names its resumable folder), so not twice.
        if interrupt.REQUESTED and status != 130:
            raise KeyboardInterrupt
        return status
    except KeyboardInterrupt:
        return fail("interrupted; results already written are kept", 130)
    except StatusError as exc:  # its own status (a bench child's, a policy failing in the hook)
        return fail(str(exc), exc.status)
    except MissingDependencyError as exc:
        return fail(f"error: {exc}", 2)
    except ImportError as exc:  # an optional package missing deep inside a command
        hint = missing_message(exc.name or "")
        if hint is not None:
            return fail(f"error: {hint}", 2)
        return _bug(exc, debug)
    except MemoryError:
        return fail("error: out of memory (MemoryError); use a smaller input (--max-requests, "
                    "--window-end) or KV cache (--kv-blocks/--kv-fraction)", 2)
    except BrokenPipeError:  # the reader of stdout left (`| head`): stop quietly, as `cat` does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no 2nd error at exit
        return 141  # 128 + SIGPIPE, the shell's status for a writer whose reader left
    except (ValueError, OSError) as exc:  # bad input or an unusable path: message, no traceback
        return fail(f"error: {exc}", 2)
    except PolicyError as exc:  # the policy's own code raised: name it, not "a bug in fairsim"
        return fail(f"{exc}" + ("" if debug else _DEBUG_HINT), 1)
    except PolicyContractError as exc:  # the policy returned a bad order (message names it)
        return fail(f"error: policy contract broken (fairsim/policies/base.py): {exc}"
                    + ("" if debug else _DEBUG_HINT), 1)
    except Exception as exc:  # noqa: BLE001 - anything else is a bug: say so, briefly
        return _bug(exc, debug)


def program() -> int:
    """The ``fairsim`` program (console script and ``python -m fairsim``): ``main()``, then the
    interpreter's final garbage collection skipped (``fairsim.gcpause.freeze_for_exit``: ~0.05 s
    of a 12,000-request run's exit). Call ``main`` to run a command inside a process
    that goes on (tests)."""
    try:
        return main()
    finally:
        freeze_for_exit()


_DEBUG_HINT = "\n(rerun with fairsim --debug ... for the traceback)"


def _bug(exc: BaseException, debug: bool) -> int:
    """Report an internal error (exit 1): the exception, and the traceback only with ``--debug``."""
    if debug:
        traceback.print_exception(exc)
    print(f"fairsim: internal error (a bug in fairsim, please report it): {type(exc).__name__}: {exc}"
          + ("" if debug else "\n(rerun with fairsim --debug ... for the traceback)"), file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
