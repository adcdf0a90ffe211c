"""Run a list of ``RunSpec`` on local processes or on Ray; hand each outcome to a callback.

Each outcome is ``("ok", requests, steps)`` or ``("failed", "Type: message", traceback)``
(``fairsim.sweep.runs.execute_safely``): a run that raises is reported, the others go on. The
callback (the sweep driver) writes the files, in this process only.

Local workers are a ``fairsim.workerpool.WorkerPool``: they die with the sweep (a ``kill -9``
of it leaves no orphan computing in the background), ignore SIGINT (on Ctrl-C the driver
terminates them), and a worker killed at any moment costs its run only, never a hang.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from fairsim.sweep.runs import execute_safely
from fairsim.sweep.runspec import RunSpec
from fairsim.workerpool import WorkerPool

Outcome = tuple[str, Any, Any]
OnResult = Callable[[RunSpec, Outcome], None]

def _bar(total: int, desc: str, progress: bool) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="run", disable=not progress or None)


def run_local(todo: Sequence[RunSpec], on_result: OnResult, workers: int | None = None,
              progress: bool = True, execute: Callable[[RunSpec], Outcome] = execute_safely) -> None:
    """Run ``todo`` on ``workers`` local processes (1: in this process), in completion order.

    ``execute`` turns a run into its outcome (module-level, so workers can import it; the tests
    pass one that kills its worker).

    Workers are spawned processes (``fairsim.workerpool.WorkerPool``) that die with this
    process. If a worker process dies (killed, out of memory), the run it had in flight is run
    again after the others, alone; if its worker dies again, that run alone is reported failed
    (``worker process died: killed by SIGKILL``), and the others go on.

    Raises:
        ValueError: ``workers < 1``.
    """
    workers = workers or os.cpu_count() or 1
    if workers < 1:
        raise ValueError(f"--workers {workers}: need >= 1")
    with _bar(len(todo), "sweep", progress) as bar:
        if workers == 1 or len(todo) <= 1:
            for run in todo:
                on_result(run, execute(run))
                bar.update(1)
            return
        with WorkerPool(min(workers, len(todo)), execute) as pool:
            orphans: list[RunSpec] = []
            for i, outcome, died in pool.run(todo):
                if died:  # maybe its own fault, maybe the others' memory: try it again alone
                    orphans.append(todo[i])
                    continue
                on_result(todo[i], outcome)
                bar.update(1)
            for i, outcome, died in pool.run(orphans, parallel=1):
                on_result(orphans[i], ("failed", f"worker process died: {died}", "") if died else outcome)
                bar.update(1)


def run_ray(todo: Sequence[RunSpec], on_result: OnResult, address: str | None = None,
            workers: int | None = None, progress: bool = True) -> None:
    """Run ``todo`` as Ray tasks (one CPU each); outcomes reach ``on_result`` as they arrive.

    Connects to ``address`` (e.g. ``"auto"`` or ``"ray://host:10001"``), or reuses an initialised
    Ray, or starts a local one with ``workers`` CPUs. Workers get this checkout's folder on
    ``PYTHONPATH`` (``runtime_env``) so they import the same fairsim code as the driver (each run
    checks it: ``fairsim.sweep.runs.execute``).

    Raises:
        ImportError: Ray is not installed (``fairsim.deps.require``'s message: ``pip install -e ".[ray]"``).
    """
    from fairsim.deps import require

    require("ray")
    import ray

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
