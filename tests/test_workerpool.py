"""The worker pool of sweep and tune (fairsim.workerpool) with real spawned processes: results, a worker's
death at any moment (even halfway through sending its result), errors, and ``run_local``'s rule
for runs whose worker died (run again alone; a second death fails that run only)."""

from __future__ import annotations

import os

import pytest

from fairsim.sweep.executors import run_local
from fairsim.workerpool import RemoteTraceback, WorkerPool, death_cause
from tests import pool_tasks


def collect(pool: WorkerPool, items: list, parallel: int | None = None) -> dict[int, tuple]:
    out = {}
    for index, result, died in pool.run(items, parallel):
        assert index not in out
        out[index] = (result, died)
    return out


def test_every_item_once_with_its_result():
    items = list(range(7))
    with WorkerPool(2, pool_tasks.square) as pool:
        assert collect(pool, items) == {i: (i * i, None) for i in items}
        assert collect(pool, [5, 6], parallel=1) == {0: (25, None), 1: (36, None)}  # same pool again


@pytest.mark.parametrize("task", [
    pool_tasks.die_on_negative,
    pytest.param(pool_tasks.die_mid_message, marks=pytest.mark.skipif(
        not os.path.isdir("/proc/self/fd"), reason="finds its socket in /proc")),
])
def test_a_dead_worker_is_reported_and_replaced(task):
    """A worker killed, before or halfway through its reply, is reported with its item at once
    (no hang: the ProcessPoolExecutor the pool replaced waits forever on the half message), and
    the remaining items run on a fresh worker."""
    items = [1, -2, 3, 4, -5, 6]
    with WorkerPool(2, task) as pool:
        out = collect(pool, items)
    assert out == {0: (1, None), 1: (None, "killed by SIGKILL"), 2: (9, None), 3: (16, None),
                   4: (None, "killed by SIGKILL"), 5: (36, None)}


def test_a_raising_task_raises_in_the_parent_with_its_traceback():
    with WorkerPool(2, pool_tasks.fail_on_negative) as pool:
        with pytest.raises(ValueError, match="negative: -1") as info:
            collect(pool, [1, -1, 2])
    cause = info.value.__cause__
    assert isinstance(cause, RemoteTraceback)
    assert "in fail_on_negative" in str(cause) and "ValueError: negative: -1" in str(cause)


def test_workers_are_gone_after_the_pool():
    with WorkerPool(2, pool_tasks.square) as pool:
        collect(pool, [1, 2, 3])
        procs = [w.process for w in pool._idle]
    assert len(procs) == 2 and all(p.exitcode == 0 for p in procs)  # told to stop: a clean exit


def test_death_cause_words():
    assert [death_cause(c) for c in (-9, -15, 1, 0)] == ["killed by SIGKILL", "killed by SIGTERM",
                                                        "exit code 1", "exit code 0"]


def test_zero_workers_refused():
    with pytest.raises(ValueError, match="at least one worker"):
        WorkerPool(0, pool_tasks.square)


class TestRunLocal:
    """``run_local``: a run whose worker died runs again after the others, alone."""

    def run(self, todo: list[str]) -> dict[str, tuple]:
        got: dict[str, tuple] = {}

        def on_result(run, outcome):
            assert run not in got
            got[run] = outcome

        run_local(todo, on_result, workers=2, progress=False, execute=pool_tasks.sweep_outcome)
        return got

    def test_a_second_death_fails_that_run_only(self):
        got = self.run(["a", "doomed", "b", "c"])
        assert got == {"a": ("ok", "A", ""), "b": ("ok", "B", ""), "c": ("ok", "C", ""),
                       "doomed": ("failed", "worker process died: killed by SIGKILL", "")}

    def test_a_run_that_dies_once_is_retried(self, tmp_path):
        once = f"once:{tmp_path / 'died'}"
        got = self.run(["a", once, "b"])
        assert got == {"a": ("ok", "A", ""), once: ("ok", once.upper(), ""), "b": ("ok", "B", "")}
        assert os.path.exists(tmp_path / "died")  # it did die the first time


def test_tune_local_executor_fails_the_trial_of_a_dead_worker():
    """``fairsim tune``'s local workers: a trial whose worker dies is a failed trial, as a failed
    Ray task is, and the other trials of the batch go on."""
    from fairsim.tune.search import LocalExecutor, Result

    with LocalExecutor(2) as executor:
        got = dict(executor(pool_tasks.evaluate_or_die, [("fcfs", {}), ("doomed", {}), ("lpm", {"a": 1})]))
    assert got == {0: Result((4.0, 0.0), {"policy": "fcfs"}),
                   1: Result(None, {}, "worker process died: killed by SIGKILL"),
                   2: Result((3.0, 1.0), {"policy": "lpm"})}
