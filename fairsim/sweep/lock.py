"""One sweep per output folder at a time: an exclusive ``flock`` on ``OUT/.sweep.lock``.

The kernel drops the lock when its holder exits, however it exits (``kill -9`` included), so a
crashed sweep never leaves a stale lock behind, and the next command resumes at once. The lock
file holds the holder's pid, for the message the second sweep prints. Workers are started with
``spawn`` (``fairsim.sweep.executors``), so they never inherit the lock's file descriptor.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from fairsim.errors import SweepLockedError

LOCK_NAME = ".sweep.lock"


class SweepLock:
    """Context manager holding ``OUT/.sweep.lock`` exclusively.

    Raises:
        SweepLockedError: Another process holds the lock (the message names it and the folder).
        OSError: The folder cannot be created or written (message names the path).
    """

    def __init__(self, out: Path) -> None:
        self.out = Path(out)
        self.path = self.out / LOCK_NAME
        self._fd: int | None = None

    def __enter__(self) -> "SweepLock":
        try:
            self.out.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise OSError(f"--out {self.out}: cannot create the sweep folder or its lock file: "
                          f"{exc.strerror or exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise SweepLockedError(
                f"--out {self.out}: another fairsim sweep or tune (pid {holder}) is running in this folder; "
                "wait for it to finish or give another --out") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
