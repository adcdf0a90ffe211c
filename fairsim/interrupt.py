"""Ctrl-C that cannot be lost.

Python raises ``KeyboardInterrupt`` wherever the main thread happens to be when SIGINT arrives. If
that is inside a finaliser (``__del__``, a weakref callback), the exception is printed as
"Exception ignored" and the program goes on as if nothing happened. ``install()`` (called by the
``fairsim`` command) raises ``KeyboardInterrupt`` as Python does, except inside a finaliser, and
records the request in ``REQUESTED`` either way; the simulator's step loop checks it once per step
and raises ``KeyboardInterrupt`` there (the live commands call ``check()`` between engine steps
and before building an engine), and ``fairsim.cli.main`` treats a command that returns with it
set as interrupted, so an interrupted run always stops (exit 130, no traceback) with its finished
results kept. The ``fairsim`` program (``fairsim.__main__``) installs the handler before it imports
anything else and ends any failure after a Ctrl-C, or a Ctrl-C after the command finished, the
same way (``report``, ``record_only``).

This module imports only what Python's start-up has already imported, or nearly (``weakref``:
under 1 ms; not ``signal``, whose enums take ~5 ms: ``_signal`` holds the same functions), so the
handler is in place before the slow imports.
"""

from __future__ import annotations

import _signal as signal  # CPython's signal functions, loaded at start-up (``signal`` takes ~5 ms)
import _weakrefset
import sys
import types  # loaded by site at start-up
import weakref

REQUESTED = False
"""True once SIGINT arrived in this process (read by ``fairsim.sim.engine`` every step)."""

RAISE = True
"""Whether ``_on_sigint`` raises ``KeyboardInterrupt``. The ``fairsim`` program sets it False, by a
plain assignment (no call: Python runs signal handlers only at calls and backward jumps), the
moment its command is over, so a Ctrl-C landing in what follows is recorded, never raised."""

STATUS = 130
"""Exit status of an interrupted command: 128 + SIGINT, what a shell reports for a Ctrl-C."""
MESSAGE = "fairsim: interrupted; results already written are kept"
"""The one line an interrupted command prints on stderr."""


#: Where Python's own weakref callbacks run (``finalize.__call__``, the ``remove`` callbacks of
#: ``WeakKeyDictionary``/``WeakValueDictionary``/``WeakSet``): an exception there is only printed.
_WEAKREF_FILES = frozenset({weakref.__file__, _weakrefset.__file__})

#: The import system's weakref callbacks, by (file, function): the module-lock callback ``cb`` of
#: ``_get_module_lock`` (CPython 3.11+, run whenever an import's lock is freed) and the ``remove``
#: callback of its own ``_WeakValueDictionary`` (3.12+). A KeyboardInterrupt raised there was only
#: printed ("Exception ignored in: <function _get_module_lock.<locals>.cb>"), with its traceback.
_IMPORT_CALLBACKS = frozenset({("<frozen importlib._bootstrap>", "cb"),
                               ("<frozen importlib._bootstrap>", "remove")})


def _in_finaliser(frame: types.FrameType | None, depth: int = 64) -> bool:
    """True when ``frame`` runs inside a ``__del__`` or one of Python's weakref callbacks (an
    exception there would only be printed, "Exception ignored in ...")."""
    while frame is not None and depth > 0:
        code = frame.f_code
        if code.co_name == "__del__" or code.co_filename in _WEAKREF_FILES \
                or (code.co_filename, code.co_name) in _IMPORT_CALLBACKS:
            return True
        frame, depth = frame.f_back, depth - 1
    return False


#: The loader of C extension modules (CPython's importlib, always loaded).
_EXTENSION_LOADER = sys.modules["_frozen_importlib_external"].ExtensionFileLoader


def _in_extension_init(frame: types.FrameType | None) -> bool:
    """True when ``frame`` runs inside the initialisation of a C extension module (Python code
    that the module's init function called, e.g. an import of its own)."""
    while frame is not None:
        if frame.f_code.co_name in ("create_module", "exec_module") \
                and isinstance(frame.f_locals.get("self"), _EXTENSION_LOADER):
            return True
        frame = frame.f_back
    return False


def _deliver_again(delay_s: float = 0.01) -> None:
    """Send this process SIGINT again in ``delay_s`` seconds (from a timer thread)."""
    import threading  # loaded by then: NumPy and the standard library's own imports use it

    timer = threading.Timer(delay_s, signal.raise_signal, (signal.SIGINT,))
    timer.daemon = True
    timer.start()


def _on_sigint(signum: int, frame: types.FrameType | None) -> None:
    global REQUESTED
    REQUESTED = True
    if _in_extension_init(frame):
        # Not every extension checks the calls its init makes: orjson's crashes (SIGSEGV) on a
        # KeyboardInterrupt raised there. Raise it once the import is done instead.
        _deliver_again()
    elif RAISE and not _in_finaliser(frame):  # else the step loop (or main, at the end) raises it
        raise KeyboardInterrupt


def install() -> None:
    """Route SIGINT through ``_on_sigint`` where Python's default handler is in place (not where
    SIGINT is ignored, e.g. a background job, nor where a caller installed its own)."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_sigint)


def _record(signum: int, frame: types.FrameType | None) -> None:
    global REQUESTED
    REQUESTED = True


def record_only() -> None:
    """From now on a SIGINT only sets ``REQUESTED`` (the ``fairsim`` program, once its command has
    returned: a Ctrl-C during the interpreter's exit must not print a traceback), where
    ``install`` routed it (not where SIGINT is ignored or a caller installed its own)."""
    if signal.getsignal(signal.SIGINT) is _on_sigint:
        signal.signal(signal.SIGINT, _record)


def ignore_for_exit() -> None:
    """From now on SIGINT is ignored, where ``record_only`` routed it: the ``fairsim`` program's
    status is decided and its results are complete. Without this, CPython's finalisation puts the
    default action back for a signal that has a Python handler (``_PySignal_Fini``, leaving
    ``SIG_IGN`` alone), and a Ctrl-C in the last milliseconds of the exit would kill the process
    by SIGINT, with no line and no status of ours."""
    if signal.getsignal(signal.SIGINT) is _record:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def report() -> int:
    """Say ``MESSAGE`` on stderr (if stderr is still there) and return ``STATUS``."""
    try:
        print(MESSAGE, file=sys.stderr)
    except (OSError, ValueError):  # stderr closed: the status still says it
        pass
    return STATUS


def check() -> None:
    """Raise ``KeyboardInterrupt`` if SIGINT arrived, even one a finaliser swallowed; loops that
    step a live engine call it once per step."""
    if REQUESTED:
        raise KeyboardInterrupt
