"""A pool of spawned worker processes that a worker's death, at any moment, cannot hang.

Used by ``fairsim sweep`` and ``fairsim tune`` for their local workers.

Why not ``concurrent.futures.ProcessPoolExecutor``: its workers write their results into one
shared pipe whose write end the parent also holds. A worker killed while writing a result (a
sweep run's result is megabytes: its requests and steps tables) leaves half a message there, and
the executor's reader waits for the rest forever: no result, no ``BrokenProcessPool`` (CPython
3.11; reproduced by killing a worker 3 s into sending a 2 GB result). Here each worker has its
own socket pair and the parent closes the worker's end once it is started, so a worker that dies
mid-message reads as end of file at once, and the pool knows which item it was running.

Workers die with their parent: each sets ``PR_SET_PDEATHSIG`` (Linux ``prctl(2)``: the kernel
sends SIGKILL to the worker when the process that started it exits) and also runs a watchdog
thread that exits when ``os.getppid()`` changes (other POSIX systems, and the window before
``prctl`` took effect). Workers ignore SIGINT: on Ctrl-C the parent terminates them.
"""

from __future__ import annotations

import ctypes
import os
import pickle
import signal
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from multiprocessing import get_context
from multiprocessing.connection import Connection, wait
from typing import Any

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
WATCHDOG_PERIOD_S = 0.5


def _watch_parent(parent_pid: int) -> None:
    while True:
        time.sleep(WATCHDOG_PERIOD_S)
        if os.getppid() != parent_pid:
            os._exit(1)  # the parent is gone: nobody would read this worker's result


def die_with_parent(parent_pid: int) -> None:
    """In a worker: die with ``parent_pid`` (module docstring), ignore SIGINT."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):  # no prctl in this libc: the watchdog below still works
            pass
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)
    threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True,
                     name="fairsim-parent-watchdog").start()


STOP_GRACE_S = 10.0  # how long a worker may take to exit after its last item before it is killed


def _serve(conn: Connection, fn: Callable[[Any], Any], parent_pid: int) -> None:
    """A worker's loop: run ``fn`` on each item received until ``None`` or end of file."""
    die_with_parent(parent_pid)
    while True:
        try:
            item = conn.recv()
        except EOFError:  # the parent is gone or closed the pool
            return
        if item is None:
            return
        try:
            reply: tuple[bool, Any] = (True, fn(item))
        except Exception as exc:  # sent to the parent, which raises it there: never swallowed
            text = traceback.format_exc()
            try:
                pickle.dumps(exc)
            except Exception:  # an exception that cannot travel: its traceback still does
                exc = RuntimeError(str(exc))
            reply = (False, (exc, text))
        conn.send(reply)


def death_cause(exitcode: int | None) -> str:
    """The words for a worker's exit code: ``killed by SIGKILL``, ``exit code 1``."""
    if exitcode is None:
        return "closed its pipe while still running"
    if exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit code {exitcode}"


class RemoteTraceback(Exception):
    """The worker's traceback, chained as the cause of an exception re-raised in the parent."""


@dataclass
class _Worker:
    process: Any  # multiprocessing's SpawnProcess
    conn: Connection  # our end of the worker's socket pair
    index: int = -1  # the item it is running


class WorkerPool:
    """Up to ``size`` spawned processes, each running ``fn`` on one item at a time.

    Workers are started on demand with ``spawn`` (a fresh interpreter: no inherited locks,
    threads or file descriptors) and die with this process (module docstring). Use as a context
    manager: on a normal exit idle workers are told to stop and joined; on an exception (Ctrl-C,
    an error in the caller) every worker is terminated at once.

    Args:
        size: the most workers running items at once (>= 1).
        fn: a module-level function (spawn pickles it by name) of one item.

    Raises:
        ValueError: ``size < 1``.
    """

    def __init__(self, size: int, fn: Callable[[Any], Any]) -> None:
        if size < 1:
            raise ValueError(f"need at least one worker, got {size}")
        self.size = size
        self._fn = fn
        self._ctx = get_context("spawn")
        self._idle: list[_Worker] = []
        self._busy: dict[Connection, _Worker] = {}

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        self.close(kill=exc_type is not None)

    def _start(self) -> _Worker:
        ours, theirs = self._ctx.Pipe(duplex=True)
        process = self._ctx.Process(target=_serve, args=(theirs, self._fn, os.getpid()),
                                    daemon=True, name="fairsim-worker")
        process.start()
        theirs.close()  # the worker's end lives only in the worker: its death is our end of file
        return _Worker(process, ours)

    @staticmethod
    def _reap(worker: _Worker) -> str:
        """Close ``worker``'s pipe, wait for it to exit (killing it after ``STOP_GRACE_S``), say how."""
        worker.conn.close()
        worker.process.join(STOP_GRACE_S)
        if worker.process.exitcode is None:
            worker.process.kill()
            worker.process.join()
        return death_cause(worker.process.exitcode)

    def run(self, items: Sequence[Any], parallel: int | None = None) -> Iterator[tuple[int, Any, str | None]]:
        """Run ``fn`` on every item, at most ``parallel`` (default ``size``) at once.

        Yields:
            ``(index, result, None)`` as each item finishes, in completion order, or
            ``(index, None, cause)`` when the worker running item ``index`` died (``cause`` as
            ``death_cause``); a dead worker is replaced for the remaining items.

        Raises:
            Exception: what ``fn`` raised in a worker, with the worker's traceback as its cause
                (``RemoteTraceback``); an exception that cannot be pickled comes as ``RuntimeError``.
        """
        limit = min(parallel or self.size, self.size)
        pending = deque(enumerate(items))
        while pending or self._busy:
            while pending and len(self._busy) < limit:
                worker = self._idle.pop() if self._idle else self._start()
                worker.index, item = pending[0]
                try:
                    worker.conn.send(item)
                except OSError:  # died while idle (killed between items): the item never left
                    self._reap(worker)
                    continue
                pending.popleft()
                self._busy[worker.conn] = worker
            for conn in wait(list(self._busy)):
                worker = self._busy.pop(conn)  # type: ignore[call-overload]
                try:
                    ok, result = worker.conn.recv()
                except (EOFError, OSError):  # died, possibly halfway through sending its result
                    yield worker.index, None, self._reap(worker)
                    continue
                self._idle.append(worker)
                if not ok:
                    exc, text = result
                    raise exc from RemoteTraceback(f"in worker process {worker.process.pid}:\n{text}")
                yield worker.index, result, None

    def close(self, kill: bool = False) -> None:
        """Stop every worker: idle ones are told to stop, busy ones (or all, with ``kill``) are
        terminated; then all are joined."""
        busy = list(self._busy.values())  # left running only when the caller stopped early
        workers = self._idle + busy
        self._idle, self._busy = [], {}
        for worker in workers:
            if kill or worker in busy:
                worker.process.terminate()
            else:
                try:
                    worker.conn.send(None)
                except OSError:  # already gone
                    pass
        for worker in workers:
            self._reap(worker)
