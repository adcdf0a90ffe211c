"""Ctrl-C that cannot be lost.

Python raises ``KeyboardInterrupt`` wherever the main thread happens to be when SIGINT arrives. If
that is inside a finaliser (``__del__``, a weakref callback), the exception is printed as
"Exception ignored" and the program goes on as if nothing happened. ``install()`` (called by the
``fairsim`` command) raises ``KeyboardInterrupt`` as Python does, except inside a finaliser, and
records the request in ``REQUESTED`` either way; the simulator's step loop checks it once per step
and raises ``KeyboardInterrupt`` there (the live commands call ``check()`` between engine steps
and before building an engine), and ``fairsim.cli.main`` treats a command that returns with it
set as interrupted, so an interrupted run always stops (exit 130, no traceback) with its finished
results kept.
"""

from __future__ import annotations

import _weakrefset
import signal
import weakref
from typing import Any

REQUESTED = False
"""True once SIGINT arrived in this process (read by ``fairsim.sim.engine`` every step)."""


#: Where Python's own weakref callbacks run (``finalize.__call__``, the ``remove`` callbacks of
#: ``WeakKeyDictionary``/``WeakValueDictionary``/``WeakSet``): an exception there is only printed.
_WEAKREF_FILES = frozenset({weakref.__file__, _weakrefset.__file__})


def _in_finaliser(frame: Any, depth: int = 64) -> bool:
    """True when ``frame`` runs inside a ``__del__`` or one of Python's weakref callbacks (an
    exception there would only be printed, "Exception ignored in ...")."""
    while frame is not None and depth > 0:
        code = frame.f_code
        if code.co_name == "__del__" or code.co_filename in _WEAKREF_FILES:
            return True
        frame, depth = frame.f_back, depth - 1
    return False


def _on_sigint(signum: int, frame: Any) -> None:
    global REQUESTED
    REQUESTED = True
    if not _in_finaliser(frame):  # else the step loop (or main, at the end) raises it
        raise KeyboardInterrupt


def install() -> None:
    """Route SIGINT through ``_on_sigint`` where Python's default handler is in place (not where
    SIGINT is ignored, e.g. a background job, nor where a caller installed its own)."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_sigint)


def check() -> None:
    """Raise ``KeyboardInterrupt`` if SIGINT arrived, even one a finaliser swallowed; loops that
    step a live engine call it once per step."""
    if REQUESTED:
        raise KeyboardInterrupt
