"""Arrival processes: piecewise-Poisson load shapes with named windows.

A ``LoadShape`` is a sequence of ``Phase`` s (name, duration in seconds, rate in requests/s).
Arrivals are a Poisson process with the phase's rate inside each phase; each request is labelled
with its phase's name (``window``: e.g. "calm", "burst", "spike"), so metrics can be cut per window.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class Phase:
    """One window of a load shape."""

    name: str
    """Window label, e.g. "calm"."""
    duration_s: float
    """Length of the window, seconds (> 0)."""
    rate_per_s: float
    """Mean Poisson arrival rate inside the window, requests/s (>= 0)."""

    def __post_init__(self) -> None:
        if not self.duration_s > 0 or self.rate_per_s < 0:
            raise ValueError(f"phase {self.name!r}: need duration_s > 0 and rate_per_s >= 0, "
                             f"got {self.duration_s}, {self.rate_per_s}")


@dataclass(frozen=True, slots=True)
class LoadShape:
    """Consecutive phases starting at t = 0."""

    phases: tuple[Phase, ...]

    def __post_init__(self) -> None:
        if not self.phases:
            raise ValueError("a LoadShape needs at least one Phase")

    @property
    def duration_s(self) -> float:
        """Total length, seconds."""
        return float(sum(p.duration_s for p in self.phases))

    def bounds(self) -> dict[str, tuple[float, float]]:
        """``{name: (start_s, end_s)}`` of each phase (the first phase of a repeated name)."""
        out: dict[str, tuple[float, float]] = {}
        t = 0.0
        for p in self.phases:
            out.setdefault(p.name, (t, t + p.duration_s))
            t += p.duration_s
        return out


def poisson(rate_per_s: float, duration_s: float) -> LoadShape:
    """A single-phase steady Poisson shape labelled "steady"."""
    return LoadShape((Phase("steady", duration_s, rate_per_s),))


def calm_burst_spike(base_rate_per_s: float, calm: float = 0.5, burst: float = 0.9,
                     spike: float = 1.6, calm_s: float = 120.0, burst_s: float = 120.0,
                     spike_s: float = 60.0) -> LoadShape:
    """Calm, then a burst, then a 60-second spike beyond capacity (the paper's dynamic traces).

    Args:
        base_rate_per_s: Requests/s the engine can roughly sustain (load 1.0), requests/s.
        calm, burst, spike: Rate multipliers of ``base_rate_per_s`` in each window.
        calm_s, burst_s, spike_s: Window lengths, seconds.
    """
    return LoadShape((
        Phase("calm", calm_s, calm * base_rate_per_s),
        Phase("burst", burst_s, burst * base_rate_per_s),
        Phase("spike", spike_s, spike * base_rate_per_s),
    ))


def arrivals(shape: LoadShape, rng: np.random.Generator) -> tuple[np.ndarray, list[str]]:
    """Sample arrival times (seconds, sorted, ms-rounded) and their window labels.

    Exponential gaps inside each phase; a gap that crosses the phase end is redrawn from the
    phase start (memorylessness makes that exact for a Poisson process).
    """
    times: list[float] = []
    labels: list[str] = []
    start = 0.0
    for phase in shape.phases:
        end = start + phase.duration_s
        if phase.rate_per_s > 0:
            t = start + rng.exponential(1.0 / phase.rate_per_s)
            while t < end:
                times.append(round(t * 1000.0) / 1000.0)
                labels.append(phase.name)
                t += rng.exponential(1.0 / phase.rate_per_s)
        start = end
    return np.asarray(times, dtype=np.float64), labels
