"""A run's input: the requests and base engine settings of a scenario or a shaped trace file."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fairsim.costmodel import Profile
from fairsim.sim.config import EngineConfig
from fairsim.types import Request


def shape(requests: Sequence[Request], trace: dict[str, Any]) -> list[Request]:
    """Window then time-scale ``requests``, as ``fairsim run``'s options do (window first).

    Args:
        requests: The trace's requests, sorted by arrival.
        trace: ``window_start_s``, ``window_end_s`` (None = to the end), ``max_requests`` (None =
            all) and ``time_scale`` (> 0), seconds of trace time.

    Raises:
        ValueError: Bad shaping values, or no request left.
    """
    from fairsim.traces import scale_time, window

    out = window(list(requests), trace["window_start_s"], trace["window_end_s"], trace["max_requests"])
    if not out:
        raise ValueError(f"no requests in the window [{trace['window_start_s']}, "
                         f"{trace['window_end_s']}) s of the trace")
    return scale_time(out, trace["time_scale"])


def scenario_workload(name: str, params: dict[str, Any], seed: int,
                      profile: Profile) -> tuple[list[Request], EngineConfig]:
    """``(requests, engine settings)`` of scenario ``name`` (``fairsim.scenarios``).

    Raises:
        ValueError: An unknown scenario or a bad parameter.
        FileNotFoundError: A real trace is missing.
    """
    from fairsim.scenarios import build_scenario

    scenario = build_scenario(name, profile, seed, **params)
    return scenario.requests, scenario.engine


def trace_requests(path: str) -> list[Request]:
    """All requests of the trace file at ``path`` (the format ``fairsim run --trace`` reads).

    Raises:
        TraceFormatError: A bad record (``FILE:LINE: field ...``).
        ValueError: An unsupported format or an empty trace.
        OSError: The file cannot be read.
    """
    from fairsim.traces import load_trace

    trace = load_trace(path)
    if not trace.requests:
        raise ValueError(f"{path}: no requests in the trace")
    return list(trace.requests)
