"""Discrete-event simulator: a chunked-prefill engine with a vLLM-style prefix cache."""

from fairsim.sim.block_pool import BlockPool
from fairsim.sim.config import EngineConfig
from fairsim.sim.capacity import resolve_capacity
from fairsim.sim.engine import Engine, simulate
from fairsim.sim.result import SimResult

__all__ = ["BlockPool", "Engine", "EngineConfig", "SimResult", "resolve_capacity", "simulate"]
