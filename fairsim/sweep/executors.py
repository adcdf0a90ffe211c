"""Run a list of ``RunSpec`` on local processes or on Ray; hand each outcome to a callback.

Each outcome is ``("ok", requests, steps)`` or ``("failed", "Type: message", traceback)``
(``fairsim.sweep.runs.execute_safely``): a run that raises is reported, the others go on. The
callback (the sweep driver) writes the files, in this process only.

Local workers die with their parent: each sets ``PR_SET_PDEATHSIG`` (Linux ``prctl(2)``: the
kernel sends SIGKILL to the worker when the process that started it exits) and also runs a
watchdog thread that exits when ``os.getppid()`` changes (other POSIX systems, and the window
before ``prctl`` took effect). A ``kill -9`` of the sweep therefore leaves no orphan computing
in the background. Workers ignore SIGINT; on Ctrl-C the driver terminates them.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from fairsim.sweep.runs import execute_safely
from fairsim.sweep.runspec import RunSpec

Outcome = tuple[str, Any, Any]
OnResult = Callable[[RunSpec, Outcome], None]

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
WATCHDOG_PERIOD_S = 0.5


def _watch_parent(parent_pid: int) -> None:
    while True:
        time.sleep(WATCHDOG_PERIOD_S)
        if os.getppid() != parent_pid:
            os._exit(1)  # the sweep is gone: nobody would write this worker's result


def worker_init(parent_pid: int) -> None:
    """Initialiser of a local worker: die with ``parent_pid`` (module docstring), ignore SIGINT."""
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


def _bar(total: int, desc: str, progress: bool) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="run", disable=not progress or None)


def run_local(todo: Sequence[RunSpec], on_result: OnResult, workers: int | None = None,
              progress: bool = True) -> None:
    """Run ``todo`` on ``workers`` local processes (1: in this process), in completion order.

    Workers are started with ``spawn`` (a fresh interpreter: no inherited locks, threads or
    file descriptors) and die with this process. If a worker process dies (killed, out of
    memory), the runs without a result are run again one at a time in a fresh single-worker
    pool, where the run whose worker dies is known (one in flight): it alone is reported
    failed (``worker process died``), and the others go on.

    Raises:
        ValueError: ``workers < 1``.
    """
    workers = workers or os.cpu_count() or 1
    if workers < 1:
        raise ValueError(f"--workers {workers}: need >= 1")
    with _bar(len(todo), "sweep", progress) as bar:
        if workers == 1 or len(todo) <= 1:
            for run in todo:
                on_result(run, execute_safely(run))
                bar.update(1)
            return
        remaining = list(todo)
        isolate = False
        while remaining:
            size = 1 if isolate else min(workers, len(remaining))
            done, broke = _pool_pass(remaining, size, on_result, bar)
            remaining = [r for r in remaining if r.run_id not in done]
            if broke and isolate:  # one worker, runs in order: the first without a result
                culprit = remaining.pop(0)
                on_result(culprit, ("failed", f"worker process died: {broke}", ""))
                bar.update(1)
                isolate = False
            elif broke:
                isolate = True


def _pool_pass(runs: Sequence[RunSpec], size: int, on_result: OnResult,
               bar: Any) -> tuple[set[str], str | None]:
    """Run ``runs`` on a fresh pool of ``size`` workers until done or a worker dies.

    Returns:
        The ids with an outcome, and the pool's error text if a worker died (else None).
    """
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from concurrent.futures.process import BrokenProcessPool

    done: set[str] = set()
    pool = ProcessPoolExecutor(max_workers=size, mp_context=multiprocessing.get_context("spawn"),
                               initializer=worker_init, initargs=(os.getpid(),))
    try:
        futures = {pool.submit(execute_safely, run): run for run in runs}
        for fut in as_completed(futures):
            try:
                outcome = fut.result()
            except BrokenProcessPool as exc:  # a worker was killed (e.g. out of memory)
                pool.shutdown(wait=True, cancel_futures=True)
                return done, str(exc)
            on_result(futures[fut], outcome)
            done.add(futures[fut].run_id)
            bar.update(1)
    except BaseException:
        # Ctrl-C or a write error: stop now rather than wait for the running simulations.
        procs = getattr(pool, "_processes", None) or {}  # private, but no public way to stop
        for proc in list(procs.values()):
            proc.terminate()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    return done, None


def run_ray(todo: Sequence[RunSpec], on_result: OnResult, address: str | None = None,
            workers: int | None = None, progress: bool = True) -> None:
    """Run ``todo`` as Ray tasks (one CPU each); outcomes reach ``on_result`` as they arrive.

    Connects to ``address`` (e.g. ``"auto"`` or ``"ray://host:10001"``), or reuses an initialised
    Ray, or starts a local one with ``workers`` CPUs. Workers get this checkout's folder on
    ``PYTHONPATH`` (``runtime_env``) so they import the same fairsim code as the driver (each run
    checks it: ``fairsim.sweep.runs.execute``).

    Raises:
        ImportError: Ray is not installed (``pip install "fairsim[ray]"``).
    """
    try:
        import ray
    except ImportError:
        raise ImportError("the ray executor needs Ray: pip install 'fairsim[ray]'") from None

    started = False
    if not ray.is_initialized():
        root = str(Path(__file__).resolve().parents[2])
        env = {"env_vars": {"PYTHONPATH": os.pathsep.join(
            p for p in (root, os.environ.get("PYTHONPATH", "")) if p)}}
        kwargs: dict[str, Any] = {"runtime_env": env, "log_to_driver": False}
        if address:
            ray.init(address=address, **kwargs)
        else:
            ray.init(num_cpus=workers or os.cpu_count(), include_dashboard=False, **kwargs)
        started = True
    try:
        task = ray.remote(num_cpus=1)(execute_safely)
        pending = {task.remote(run): run for run in todo}
        with _bar(len(todo), "sweep[ray]", progress) as bar:
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1)
                run = pending.pop(ready[0])
                try:
                    outcome = ray.get(ready[0])
                except ray.exceptions.RayError as exc:  # the task's worker died
                    outcome = ("failed", f"{type(exc).__name__}: {exc}", "")
                on_result(run, outcome)
                bar.update(1)
    finally:
        if started:
            ray.shutdown()
