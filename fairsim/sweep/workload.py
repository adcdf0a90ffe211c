"""A run's input: a scenario's requests and engine settings, or a trace's requests as read.

A trace point is shaped and sized by ``fairsim.sweep.tracerun`` (``fairsim run``'s own code).
"""

from __future__ import annotations

from typing import Any

from fairsim.costmodel import Profile
from fairsim.sim.config import EngineConfig
from fairsim.types import Request


def scenario_workload(name: str, params: dict[str, Any], seed: int,
                      profile: Profile) -> tuple[list[Request], EngineConfig]:
    """``(requests, engine settings)`` of scenario ``name`` (``fairsim.scenarios``).

    Raises:
        ValueError: An unknown scenario or a bad parameter.
        FileNotFoundError: A real trace is missing.
    """
    from fairsim.scenarios import PROFILE_IN_PARAMS, SEED_IN_PARAMS, build_scenario

    if "seed" in params:  # (build_scenario's own arguments)
        raise ValueError(SEED_IN_PARAMS)
    if "profile" in params:
        raise ValueError(PROFILE_IN_PARAMS)
    scenario = build_scenario(name, profile, seed, **params)
    return scenario.requests, scenario.engine


def trace_requests(path: str, format: str = "auto") -> list[Request]:
    """All requests of the trace file or folder at ``path``, read as ``fairsim run --trace``
    reads it (``fairsim.traces.load_trace``; ``format``: ``--trace-format``, ``"auto"`` detects
    it from the content).

    Raises:
        TraceFormatError: A bad record (``FILE:LINE: field ...``).
        ValueError: An unsupported format or an empty trace.
        OSError: The file cannot be read.
    """
    from fairsim.traces import load_trace

    trace = load_trace(path, format)
    if not trace.requests:
        raise ValueError(f"{path}: no requests in the trace")
    return list(trace.requests)
