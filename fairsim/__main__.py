"""``python -m fairsim`` and the ``fairsim`` console script: ``program()``.

Kept light on purpose: ``program`` routes Ctrl-C through ``fairsim.interrupt`` before the
command line's modules (NumPy, pandas, ...) are imported, so a Ctrl-C in the first half second,
inside those imports, ends as any other one: one line, exit 130, no traceback.
"""

import sys


def shadowing_folder() -> str | None:
    """The folder Python took for the package ``fairsim`` where that is a plain folder of the same
    name (a namespace package: a clone's top folder seen from its parent, in the working folder
    or on ``PYTHONPATH``) instead of this package, else None.

    An editable install's finder is consulted after the module path, and its package's modules
    still load through such a folder (this one among them), but ``fairsim`` itself is then the
    folder: every command failed with an ``ImportError`` traceback."""
    package = sys.modules.get("fairsim")
    if package is None or getattr(package, "__file__", None) is not None:
        return None
    return ", ".join(str(p) for p in getattr(package, "__path__", ())) or "(unknown)"


def program() -> int:
    """The ``fairsim`` program: ``fairsim.cli.main()`` with Ctrl-C handled from its first line.

    A Ctrl-C that lands while the command line's modules are imported (where a library may turn
    the ``KeyboardInterrupt`` into another error: NumPy's "import numpy from its source
    directory") or after ``main`` returned ends in exit 130 with ``fairsim.interrupt.MESSAGE``.
    The interpreter's final garbage collection is skipped (``fairsim.gcpause.freeze_for_exit``:
    ~0.05 s of a 12,000-request run's exit). Only a Ctrl-C before this function's first
    line (Python's own start-up, ~0.1 s) gets Python's default handling.

    Returns:
        The exit status (``fairsim.cli.main``).
    """
    shadow = shadowing_folder()
    if shadow is not None:
        sys.stderr.write(f"fairsim: the folder {shadow} (it has no __init__.py) was imported as the package "
                         "'fairsim', ahead of the installed one, because it is on the module path (the working "
                         "folder with `python -m fairsim`, or PYTHONPATH): run fairsim from another folder, or "
                         "take that folder's parent off PYTHONPATH\n")
        return 2
    from fairsim import interrupt  # standard-library imports only
    from fairsim.gcpause import paused  # standard-library imports only

    interrupt.install()
    try:
        # The command line's modules (~0.07 s of a run's start-up) are long-lived objects, and
        # the cyclic collector's passes over them while they load free nearly nothing: off
        # meanwhile, and what they built frozen (fairsim/gcpause.py; Engine.run unfreezes at its
        # end, as after a trace read).
        with paused(freeze=True):
            from fairsim.cli import main

        status = main()
    except BaseException:
        if not interrupt.REQUESTED:
            raise  # SystemExit (argparse, --help), or a bug in main's own error handling
        status = interrupt.report()
    finally:
        interrupt.RAISE = False  # first: a Ctrl-C from here on (the exit itself) is only recorded
        interrupt.record_only()
    from fairsim.gcpause import freeze_for_exit

    freeze_for_exit()
    interrupt.ignore_for_exit()  # the status below is final; the exit itself is not interrupted
    if interrupt.REQUESTED:
        if status != 130:  # it came after main returned
            status = interrupt.report()
        # CPython marks a KeyboardInterrupt that left code run by exec() of a string (dataclasses
        # and namedtuple build their methods so, at import) as unhandled, though it was caught,
        # and `python -m` then ends the process by SIGINT at exit (status -2, not this one);
        # each exec() of a string clears the mark first (Python/pythonrun.c, run_eval_code_obj),
        # so one that raises nothing clears it.
        exec("None")  # noqa: S102 - a constant
    return status


if __name__ == "__main__":
    sys.exit(program())
