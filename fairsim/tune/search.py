"""The Optuna study of ``fairsim tune``: storage, staleness, and trials in fixed batches.

**Storage and resume.** The study lives in ``OUT/study.db`` (Optuna's RDB storage, SQLite).
Each trial records its *slot* (0, 1, ..., ``--trials`` - 1) as a user attribute. A rerun of the
same command finds the finished slots and runs only the others: a trial that was running when
the process died (``kill -9``) is marked failed (``interrupted``) and its parameters are asked
again in the same slot, so no finished trial is repeated.

**Staleness.** The study records a fingerprint (``FINGERPRINT_KEYS``): the trace's content
(SHA-256), the profile file's content, fairsim's version and source digest, a user policy
class's source file (SHA-256), and the settings
that change a trial's result (policies, search spaces, fixed parameters, targets, windows,
engine and shaping options, seed, batch). A rerun with any of them changed is refused with the
difference; a larger ``--trials`` continues the study.

**Determinism.** Slots run in batches of ``--batch`` B: the B trials of a batch are asked
together (before any result of the batch is known), evaluated (in this process, on local
processes, or as Ray tasks), and told. Slot s is sampled by a TPE sampler seeded with
(``--seed``, s), from the finished trials of earlier batches. So for a given seed and batch the
trials, their results and the front are the same on every executor, however many workers run,
and after any interruption. (Optuna's own parallel mode, ``n_jobs`` or several processes on one
storage, samples from whatever happens to have finished and is not deterministic; it is not used.)
"""

from __future__ import annotations

import json
import logging
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fairsim.policies.space import Choice, FloatRange, IntRange, Range

STUDY_FILE = "study.db"
STUDY_NAME = "fairsim-tune"
FINGERPRINT_KEYS = ("trace", "profile", "code", "setup")


def storage_url(out: Path) -> str:
    """Optuna RDB storage URL of the study in ``out``."""
    return f"sqlite:///{(Path(out) / STUDY_FILE).resolve()}"


def _optuna() -> Any:
    from fairsim.deps import require

    require("optuna")
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    return optuna


def open_study(out: Path, fingerprint: dict[str, Any]) -> Any:
    """The study in ``out`` (created with ``fingerprint``), or the existing one if its
    fingerprint is the same.

    Raises:
        ValueError: A study made for another trace, profile, code version or settings (the
            message names what changed and how to start afresh).
    """
    optuna = _optuna()
    from sqlalchemy.exc import DatabaseError

    try:
        study = optuna.create_study(storage=storage_url(out), study_name=STUDY_NAME, load_if_exists=True,
                                    directions=["minimize", "minimize"])
    except DatabaseError as exc:  # a file that is no SQLite database (truncated, or another file)
        why = str(getattr(exc, "orig", None) or exc).splitlines()[0]
        raise ValueError(f"--out {out}: {out / STUDY_FILE} cannot be read as a study ({why}); give another "
                         f"--out, or delete {out / STUDY_FILE} to start a new study") from None
    stored = study.user_attrs.get("fingerprint")
    if stored is None:
        study.set_user_attr("fingerprint", fingerprint)
        return study
    changed = [k for k in FINGERPRINT_KEYS if stored.get(k) != fingerprint[k]]
    if changed:
        raise ValueError(f"--out {out}: {out / STUDY_FILE} holds a study made for {stale_reason(stored, fingerprint, changed)}; "
                         f"give another --out, or delete {out / STUDY_FILE} to start a new study")
    return study


def stale_reason(stored: dict[str, Any], now: dict[str, Any], changed: Sequence[str]) -> str:
    """What differs between the stored fingerprint and this run's, in words."""
    parts = []
    for key in changed:
        if key == "setup":
            diff = sorted(k for k in {**stored["setup"], **now["setup"]}
                          if stored["setup"].get(k) != now["setup"].get(k))
            parts.append("other settings (" + "; ".join(
                f"{k}: was {json.dumps(stored['setup'].get(k))}, now {json.dumps(now['setup'].get(k))}"
                for k in diff) + ")")
        elif key == "code":
            parts.append(f"another fairsim code version (was {stored['code']}, now {now['code']})")
        else:
            parts.append(f"another {key} (content sha256 {str(stored[key])[:12]}..., now {str(now[key])[:12]}...)")
    return " and ".join(parts)


def suggest(trial: Any, policies: Sequence[str], spaces: dict[str, dict[str, Range]]) -> tuple[str, dict[str, Any]]:
    """Sample a policy and its parameters (Optuna names ``policy`` and ``POLICY.KEY``). A trial
    enqueued with the user attribute ``defaults`` (``run_study``'s first slots, a policy whose
    constructor defaults lie outside its space) gets its policy alone: ``{}``, its defaults."""
    policy = trial.suggest_categorical("policy", list(policies))
    if trial.user_attrs.get("defaults"):
        return policy, {}
    params: dict[str, Any] = {}
    for key, rng in spaces[policy].items():
        name = f"{policy}.{key}"
        if isinstance(rng, FloatRange):
            params[key] = trial.suggest_float(name, rng.low, rng.high, log=rng.log)
        elif isinstance(rng, IntRange):
            params[key] = trial.suggest_int(name, rng.low, rng.high, log=rng.log)
        elif isinstance(rng, Choice):
            params[key] = trial.suggest_categorical(name, list(rng.values))
        else:  # a declaration of another type: a bug in the policy's search_space
            raise ValueError(f"policy {policy!r}: search_space[{key!r}] is {rng!r}, not a FloatRange, IntRange or Choice")
    return policy, params


def trial_params(frozen: Any) -> tuple[str, dict[str, Any]]:
    """``(policy, params)`` of a stored trial (the inverse of ``suggest``)."""
    policy = frozen.params["policy"]
    prefix = f"{policy}."
    return policy, {k[len(prefix):]: v for k, v in frozen.params.items() if k.startswith(prefix)}


def params_key(policy: str, params: dict[str, Any]) -> str:
    return json.dumps([policy, params], sort_keys=True)


@dataclass(frozen=True)
class Result:
    """A trial's outcome from an executor: the score's JSON form, or the error text."""

    values: tuple[float, float] | None
    attrs: dict[str, Any]
    error: str | None = None


Evaluate = Callable[[str, dict[str, Any]], Result]
Executor = Callable[[Evaluate, Sequence[tuple[str, dict[str, Any]]]], Iterator[tuple[int, Result]]]


def slot_seed(seed: int, slot: int) -> int:
    """The sampler seed of ``slot``: from (``seed``, ``slot``) by numpy's ``SeedSequence``."""
    import numpy as np

    return int(np.random.SeedSequence([seed, slot]).generate_state(1)[0])


def run_study(study: Any, *, trials: int, batch: int, seed: int, policies: Sequence[str],
              spaces: dict[str, dict[str, Range]], evaluate: Evaluate, executor: Executor,
              initial: Sequence[tuple[str, dict[str, Any]]] = (),
              on_done: Callable[[tuple[str, dict[str, Any]], Result], None] = lambda item, result: None) -> int:
    """Run the slots of ``study`` not yet finished, up to ``trials``; return how many ran now.

    ``evaluate(policy, params)`` gives a ``Result``; ``executor(evaluate, items)`` yields
    ``(index, Result)`` for each item, in any order. ``on_done`` gets each finished trial's
    ``(policy, params)`` and result (progress bar). A result with an error is stored as a failed trial with its ``error``
    (its slot counts as done: the same parameters would fail again). The first slots run the
    ``initial`` settings (each policy at its defaults: ``(policy, params)``, or ``(policy, None)``
    where a default lies outside the policy's space, such as SUF's ``starvation_iterations=None``:
    the trial then stores the policy alone and runs its constructor's defaults), so the search
    starts from them and never ends worse than the best of them on the training windows.
    """
    optuna = _optuna()
    from optuna.trial import TrialState

    def constraints(frozen: Any) -> list[float]:
        return frozen.user_attrs.get("constraints", [1.0])

    _requeue_interrupted(study)
    ran = 0
    while True:
        done = _done_slots(study)
        todo = [s for s in range(trials) if s not in done]
        if not todo:
            return ran
        first = todo[0] // batch * batch
        slots = [s for s in range(first, min(first + batch, trials)) if s not in done]
        present = {t.user_attrs.get("slot") for t in study.get_trials(
            deepcopy=False, states=(TrialState.WAITING, TrialState.RUNNING))}
        for slot in slots:
            if slot < len(initial) and slot not in present:
                policy, params = initial[slot]
                if params is None:  # its defaults outside its space: the policy alone (``suggest``)
                    study.enqueue_trial({"policy": policy}, user_attrs={"slot": slot, "asked": True, "defaults": True},
                                        skip_if_exists=False)
                else:
                    study.enqueue_trial({"policy": policy, **{f"{policy}.{k}": v for k, v in params.items()}},
                                        user_attrs={"slot": slot, "asked": True}, skip_if_exists=False)
        asked = []
        # Interrupted (and initial) slots first: Optuna hands out enqueued (WAITING) trials before sampling,
        # and each carries its slot. Then the batch's other slots, each sampled afresh.
        requeued = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
        fresh_slots = [s for s in slots if s not in {t.user_attrs["slot"] for t in requeued}]
        for slot in [None] * len(requeued) + fresh_slots:
            # Optuna 5 reads the constraints each trial sets (_tell); Optuna 4 asks constraints_func.
            study.sampler = optuna.samplers.TPESampler(
                seed=slot_seed(seed, slot or 0),
                constraints_func=None if hasattr(optuna.trial.Trial, "set_constraint") else constraints)
            trial = study.ask()
            if slot is not None:
                trial.set_user_attr("slot", slot)
            asked.append((trial, suggest(trial, policies, spaces)))
            trial.set_user_attr("asked", True)  # all its parameters stored (_requeue_interrupted)
        finished = _finished_by_params(study)
        fresh = [(i, item) for i, (_, item) in enumerate(asked) if params_key(*item) not in finished]
        for i, (_, item) in enumerate(asked):
            if params_key(*item) in finished:  # the same policy and parameters ran: same result
                _tell(study, asked[i][0], finished[params_key(*item)])
                on_done(item, finished[params_key(*item)])
                ran += 1
        for j, result in executor(evaluate, [item for _, item in fresh]):
            trial = asked[fresh[j][0]][0]
            _tell(study, trial, result)
            on_done(fresh[j][1], result)
            ran += 1


def _tell(study: Any, trial: Any, result: Result) -> None:
    from optuna.trial import TrialState

    for key, value in result.attrs.items():
        trial.set_user_attr(key, value)
    if result.error is None and hasattr(trial, "set_constraint"):  # Optuna >= 5
        for i, value in enumerate(result.attrs["constraints"]):
            trial.set_constraint(f"target{i}", value)
    if result.error is not None:
        trial.set_user_attr("error", result.error)
        study.tell(trial, state=TrialState.FAIL)
    else:
        study.tell(trial, list(result.values))


def _done_slots(study: Any) -> set[int]:
    from optuna.trial import TrialState

    return {t.user_attrs["slot"] for t in study.get_trials(deepcopy=False)
            if "slot" in t.user_attrs and (t.state == TrialState.COMPLETE
                                            or (t.state == TrialState.FAIL and "error" in t.user_attrs))}


def _finished_by_params(study: Any) -> dict[str, Result]:
    """Results of the complete trials by their policy and parameters."""
    from optuna.trial import TrialState

    out: dict[str, Result] = {}
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        attrs = {k: v for k, v in t.user_attrs.items() if k not in ("slot", "asked")}
        out.setdefault(params_key(*trial_params(t)), Result(tuple(t.values), attrs))
    return out


def _requeue_interrupted(study: Any) -> None:
    """Mark trials left running by a killed process failed (``interrupted``) and enqueue their
    parameters for the same slot (this process holds ``OUT``'s lock: nothing else runs them)."""
    from optuna.trial import TrialState

    trials = study.get_trials(deepcopy=False)
    waiting = {t.user_attrs.get("slot") for t in trials if t.state == TrialState.WAITING}
    for t in trials:
        if t.state != TrialState.RUNNING:
            continue
        slot = t.user_attrs.get("slot")
        if slot is not None and slot not in waiting and t.user_attrs.get("asked"):
            attrs = {"slot": slot, "asked": True, **({"defaults": True} if t.user_attrs.get("defaults") else {})}
            study.enqueue_trial(t.params, user_attrs=attrs, skip_if_exists=False)
        study.tell(t.number, state=TrialState.FAIL)
        # user attributes of a finished trial cannot be set; the failed trial without "error"
        # is an interrupted one (``_done_slots``).


class LocalExecutor:
    """Evaluate a batch in this process (``workers`` 1) or on ``workers`` local processes (spawned
    once for the study: ``fairsim.workerpool.WorkerPool``). A context manager; calling it yields
    ``(index, Result)`` as trials finish. A trial whose worker process dies (killed, out of
    memory) is a failed trial (``worker process died: killed by SIGKILL``), as a failed Ray task
    is; the others go on."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.pool: Any = None

    def __enter__(self) -> "LocalExecutor":
        if self.workers > 1:
            from fairsim.workerpool import WorkerPool

            self.pool = WorkerPool(self.workers, _call_packed)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.pool is not None:
            self.pool.close(kill=exc[0] is not None)

    def __call__(self, evaluate: Evaluate, items: Sequence[tuple[str, dict[str, Any]]]) -> Iterator[tuple[int, Result]]:
        if self.pool is None:
            for i, item in enumerate(items):
                yield i, evaluate(*item)
            return
        for i, result, died in self.pool.run([(evaluate, *item) for item in items]):
            yield i, result if died is None else Result(None, {}, f"worker process died: {died}")


class RayExecutor:
    """Evaluate a batch as Ray tasks (one CPU each) on the cluster at ``address``, or on a Ray
    started here with ``workers`` CPUs. Workers get this checkout on ``PYTHONPATH``, as
    ``fairsim sweep --executor ray`` gives them (``fairsim.sweep.executors.run_ray``)."""

    def __init__(self, address: str | None, workers: int) -> None:
        self.address, self.workers = address, workers
        self.started = False
        self._evaluate: Any = None

    def __enter__(self) -> "RayExecutor":
        import os

        from fairsim.deps import require

        require("ray")
        import ray

        if not ray.is_initialized():
            root = str(Path(__file__).resolve().parents[2])
            env = {"env_vars": {"PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)}}
            kwargs: dict[str, Any] = {"runtime_env": env, "log_to_driver": False}
            if self.address:
                ray.init(address=self.address, **kwargs)
            else:
                ray.init(num_cpus=self.workers, include_dashboard=False, **kwargs)
            self.started = True
        self.task = ray.remote(num_cpus=1)(_call)
        return self

    def __exit__(self, *exc: object) -> None:
        import ray

        if self.started:
            ray.shutdown()

    def __call__(self, evaluate: Evaluate, items: Sequence[tuple[str, dict[str, Any]]]) -> Iterator[tuple[int, Result]]:
        import ray

        if self._evaluate is None or self._evaluate[0] is not evaluate:
            self._evaluate = (evaluate, ray.put(evaluate))  # shipped once, not with every task
        pending = {self.task.remote(self._evaluate[1], policy, params): i for i, (policy, params) in enumerate(items)}
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            i = pending.pop(ready[0])
            try:
                yield i, ray.get(ready[0])
            except ray.exceptions.RayError as exc:  # the task's worker died
                yield i, Result(None, {}, f"Ray task failed: {type(exc).__name__}: {exc}")


def _call(evaluate: Evaluate, policy: str, params: dict[str, Any]) -> Result:
    return evaluate(policy, params)


def _call_packed(item: tuple[Evaluate, str, dict[str, Any]]) -> Result:
    return _call(*item)
