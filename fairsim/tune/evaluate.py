"""What one trial of ``fairsim tune`` computes: a policy's TTFT statistics on time windows of the
trace, and their score against the targets (``fairsim.accept.Target``).

Windows are cut and simulated as ``fairsim accept`` cuts and simulates them
(``fairsim.accept.window_requests``: each window replayed from ``warmup`` trace seconds before
its start, only requests arriving inside scored; ``window_stats``: p50, p99, max TTFT, starved).
A target ``STAT <= F x REF`` holds on a window when the candidate's statistic is at most F times
that of REF at its default parameters on the same window (``Target.holds``), as ``accept``
checks it; a score holds when every target holds on every window and, with ``no-starvation``,
no window starves.

Pareto axes (both minimised, worst window): the median axis is p50 over the base of the p50
target (its reference's p50, or 1 s for an absolute target; FCFS's p50 when no target names
p50), the tail axis likewise for the p99 or max target (FCFS's p99 when there is none).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fairsim.accept import Target, window_requests, window_stats
from fairsim.analysis.load import Window
from fairsim.costmodel import Profile
from fairsim.metrics import STARVATION_FACTOR
from fairsim.sim import EngineConfig
from fairsim.types import Request


@dataclass(frozen=True)
class WindowData:
    """One window's requests, cut as ``accept`` cuts them (rebased to 0 and time-scaled), and
    the ids of those scored (arriving inside the window)."""

    window: Window
    requests: list[Request]
    scored: frozenset[str]


def cut_windows(requests: Sequence[Request], windows: Sequence[Window], warmup_s: float | None,
                time_scale: float, option: str) -> list[WindowData]:
    """``WindowData`` of each window (``warmup_s`` None: the window's own length, as ``accept``).

    Raises:
        ValueError: A window with no request arriving in it (naming ``option`` and the window).
    """
    out = []
    for w in windows:
        warm = (w.end_s - w.start_s) if warmup_s is None else warmup_s
        sub, scored = window_requests(requests, w, warm, time_scale)
        if not scored:
            raise ValueError(f"{option}: window {w.name} [{w.start_s:g}, {w.end_s:g}) trace s holds no request; "
                             f"choose other windows")
        out.append(WindowData(w, sub, frozenset(scored)))
    return out


def fold_windows(requests: Sequence[Request], folds: int) -> tuple[list[Window], list[Window]]:
    """Cut the span of the arrivals (trace seconds) into ``folds`` windows of equal length:
    ``(training, held-out)``, the 1st, 3rd, ... training and the 2nd, 4th, ... held out, so
    every held-out window comes after a training one and neither sees the other's scores.

    Raises:
        ValueError: ``folds`` below 2 or above the number of requests, or no requests.
    """
    if folds < 2:
        raise ValueError(f"--folds {folds}: need at least 2 (one training and one held-out window)")
    if not requests:
        raise ValueError("the trace holds no request after shaping")
    start = min(r.arrival_time for r in requests)
    last = max(r.arrival_time for r in requests)
    if last == start:
        raise ValueError(f"--folds {folds}: every request of the trace arrives at {start:g} trace s, so its span "
                         f"has no length to cut into windows; give --train and --holdout windows")
    if folds > len(requests):  # (before the bounds: --folds 1e8 built gigabytes of windows)
        raise ValueError(f"--folds {folds}: more windows than the trace's {len(requests)} requests, so some "
                         f"would hold none; give at most {len(requests)} (or --train and --holdout windows)")
    # Bounds at i / folds of the span, each computed once from the ends (not start + i x length,
    # which drifts: 42.00000000000001 put the requests arriving at 42 s into the earlier window,
    # where accept --windows w2:21-42 does not); the last window ends just after the last arrival.
    bounds = [start + (last - start) * i / folds for i in range(folds)] + [math.nextafter(last, math.inf)]
    windows = [Window(f"w{i + 1}", bounds[i], bounds[i + 1]) for i in range(folds)]
    return windows[0::2], windows[1::2]


@dataclass(frozen=True)
class Simulator:
    """Everything a trial needs to simulate a policy (pickled to worker processes and Ray tasks).

    Attributes:
        profile, config: Cost model and engine (the KV capacity resolved on the whole trace).
        replay, think_scale: As ``fairsim run``'s ``--replay`` and ``--think-scale``.
        fixed: Policy -> parameters fixed by ``--param`` (not searched).
        fleet: The fleet every run simulates (``--instances``/``--router``/``--router-param``,
            ``fairsim.cli_fleet.FleetSpec``), or the disaggregated deployment (``--mode
            disaggregated``, ``fairsim.cli_disagg.DisaggSpec``); ``None``: the single engine.
    """

    profile: Profile
    config: EngineConfig
    replay: str | None
    think_scale: float
    fixed: dict[str, dict[str, Any]] = field(default_factory=dict)
    fleet: Any = None

    def stats(self, policy: str, params: dict[str, Any], windows: Sequence[WindowData]) -> list[dict[str, Any]]:
        """``window_stats`` of ``policy`` with ``params`` (plus its fixed ones) on each window."""
        from fairsim.run import run_one

        own = {**self.fixed.get(policy, {}), **params}
        return [window_stats(run_one(policy, w.requests, self.profile, self.config, own, show_progress=False,
                                     replay=self.replay, think_scale=self.think_scale, fleet=self.fleet),
                             set(w.scored))
                for w in windows]


@dataclass(frozen=True)
class Score:
    """A policy's result on a set of windows, against the targets.

    Attributes:
        median, tail: The Pareto axes (module docstring), worst window.
        ratios: Target label -> worst-window value over its base (the target holds when <= factor).
        starvation: Worst window's max / p99 (starved above ``STARVATION_FACTOR``).
        holds: Every target holds on every window (and no starvation, when asked).
        excess: How far from meeting the targets: the largest ratio / factor (<= 1 when it holds).
        windows: Window name -> its ``window_stats``.
    """

    median: float
    tail: float
    ratios: dict[str, float]
    starvation: float
    holds: bool
    excess: float
    windows: dict[str, dict[str, Any]]


@dataclass(frozen=True)
class Objective:
    """The targets and the reference policies' statistics per window they are checked against.

    Attributes:
        targets: The ``--targets`` (``fairsim.accept.parse_targets``).
        no_starvation: Whether starvation fails the targets.
        refs: Window name -> reference policy -> its ``window_stats`` (default parameters).
    """

    targets: tuple[Target, ...]
    no_starvation: bool
    refs: dict[str, dict[str, dict[str, Any]]]

    @property
    def median_axis(self) -> Target:
        return next((t for t in self.targets if t.stat == "p50_s"), Target("p50_s", math.inf, "fcfs"))

    @property
    def tail_axis(self) -> Target:
        return next((t for t in self.targets if t.stat in ("p99_s", "max_s")), Target("p99_s", math.inf, "fcfs"))

    def score(self, windows: Sequence[WindowData], stats: Sequence[dict[str, Any]]) -> Score:
        """Score a policy's ``stats`` (one per window of ``windows``)."""
        ratios: dict[str, float] = {}
        holds = True
        for t in self.targets:
            ratios[t.label()] = max(s[t.stat] / t.base(self.refs[w.window.name]) for w, s in zip(windows, stats))
            holds &= all(t.holds(s, self.refs[w.window.name]) for w, s in zip(windows, stats))
        starvation = max(s["max_s"] / s["p99_s"] if s["p99_s"] > 0 else 1.0 for s in stats)
        if self.no_starvation:
            holds &= not any(s["starved"] for s in stats)
        excess = max([ratios[t.label()] / t.factor for t in self.targets]
                     + ([starvation / STARVATION_FACTOR] if self.no_starvation else []))
        axis = lambda t: max(s[t.stat] / t.base(self.refs[w.window.name]) for w, s in zip(windows, stats))  # noqa: E731
        return Score(median=axis(self.median_axis), tail=axis(self.tail_axis), ratios=ratios,
                     starvation=starvation, holds=holds, excess=excess,
                     windows={w.window.name: s for w, s in zip(windows, stats)})

    def constraints(self, score: Score) -> list[float]:
        """Optuna's constraint values (feasible when all <= 0): ratio - factor per target, and
        starvation - ``STARVATION_FACTOR``; all clipped to 0 when the score holds (so Optuna's
        feasibility is exactly ``Score.holds``)."""
        values = [score.ratios[t.label()] - t.factor for t in self.targets]
        if self.no_starvation:
            values.append(score.starvation - STARVATION_FACTOR)
        if score.holds:
            return [min(v, 0.0) for v in values]
        return values if any(v > 0 for v in values) else [*values, 1e-12]

    def axis_labels(self) -> tuple[str, str]:
        """Column names of the two axes, e.g. ``p50 / lpm p50`` and ``p99 / fcfs p99``."""
        def label(t: Target) -> str:
            stat = t.stat.removesuffix("_s")
            return f"{stat} s" if t.ref is None else f"{stat} / {t.ref} {stat}"
        return label(self.median_axis), label(self.tail_axis)


def reference_stats(sim: Simulator, refs: Sequence[str], windows: Sequence[WindowData]) -> dict[str, dict[str, dict[str, Any]]]:
    """Window name -> reference policy -> its statistics at default parameters (no ``--param``),
    on the same engine or fleet as the trials."""
    out: dict[str, dict[str, dict[str, Any]]] = {w.window.name: {} for w in windows}
    defaults = Simulator(sim.profile, sim.config, sim.replay, sim.think_scale, fleet=sim.fleet)
    for name in refs:
        for w, s in zip(windows, defaults.stats(name, {}, windows)):
            out[w.window.name][name] = s
    return out


@dataclass(frozen=True)
class TrialEvaluator:
    """``(policy, params) -> fairsim.tune.search.Result`` on the training windows (picklable:
    run in worker processes and Ray tasks)."""

    sim: Simulator
    windows: tuple[WindowData, ...]
    objective: Objective

    def __call__(self, policy: str, params: dict[str, Any]) -> Any:
        from fairsim.errors import PolicyContractError, PolicyError
        from fairsim.tune.search import Result

        try:
            score = self.objective.score(self.windows, self.sim.stats(policy, params, self.windows))
        except (ValueError, PolicyError, PolicyContractError) as exc:  # parameters refused, its own error, a broken contract
            return Result(None, {}, f"{type(exc).__name__}: {exc}")
        return Result((score.median, score.tail), score_attrs(score, self.objective))


def score_attrs(score: Score, objective: Objective) -> dict[str, Any]:
    """A score as the JSON-able user attributes of its trial."""
    return {"constraints": objective.constraints(score), "ratios": score.ratios, "starvation": score.starvation,
            "holds": score.holds, "excess": score.excess, "windows": score.windows}


def score_from_attrs(values: Sequence[float], attrs: dict[str, Any]) -> Score:
    """The ``Score`` a trial stored (``score_attrs``)."""
    return Score(median=values[0], tail=values[1], ratios=attrs["ratios"], starvation=attrs["starvation"],
                 holds=attrs["holds"], excess=attrs["excess"], windows=attrs["windows"])
