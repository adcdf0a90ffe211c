"""Module-level tasks for tests/test_workerpool.py: a spawned worker imports them by name."""

from __future__ import annotations

import os
import signal
import struct
from pathlib import Path


def square(x: int) -> int:
    return x * x


def _own_socket() -> int:
    """The worker's one socket: its end of the pool's socket pair."""
    fds = []
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{name}").startswith("socket:"):
                fds.append(int(name))
        except FileNotFoundError:  # the listing's own descriptor, closed by now
            pass
    assert len(fds) == 1, fds
    return fds[0]


def die_on_negative(x: int) -> int:
    """Square ``x``; SIGKILL its own worker when ``x < 0`` (as the OOM killer would)."""
    if x < 0:
        os.kill(os.getpid(), signal.SIGKILL)
    return x * x


def die_mid_message(x: int) -> int:
    """Square ``x``; for ``x < 0``, write the first part of a 10 MB reply on the worker's socket
    (multiprocessing's 4-byte length header, then 1,000 bytes) and SIGKILL the worker: the death
    that hangs ``concurrent.futures.ProcessPoolExecutor``."""
    if x < 0:
        os.write(_own_socket(), struct.pack("!i", 10_000_000) + b"x" * 1000)
        os.kill(os.getpid(), signal.SIGKILL)
    return x * x


def fail_on_negative(x: int) -> int:
    if x < 0:
        raise ValueError(f"negative: {x}")
    return x * x


def sweep_outcome(run: str) -> tuple[str, str, str]:
    """An outcome like ``execute_safely``'s, for a run named by a string. ``"doomed"`` kills its
    worker every time; ``"once:PATH"`` kills it the first time only (it leaves a file at PATH)."""
    if run == "doomed":
        os.kill(os.getpid(), signal.SIGKILL)
    if run.startswith("once:"):
        marker = Path(run[5:])
        if not marker.exists():
            marker.touch()
            os.kill(os.getpid(), signal.SIGKILL)
    return ("ok", run.upper(), "")


def evaluate_or_die(policy: str, params: dict) -> object:
    """A tune evaluation (``fairsim.tune.search.Evaluate``) whose worker dies for ``"doomed"``."""
    from fairsim.tune.search import Result

    if policy == "doomed":
        os.kill(os.getpid(), signal.SIGKILL)
    return Result((float(len(policy)), float(len(params))), {"policy": policy})
