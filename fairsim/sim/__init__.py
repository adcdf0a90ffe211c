"""Discrete-event simulator: a chunked-prefill engine with a vLLM-style prefix cache."""

from fairsim.sim.block_pool import BlockPool
from fairsim.sim.config import EngineConfig
from fairsim.sim.capacity import resolve_capacity
from fairsim.sim.engine import Engine
from fairsim.sim.result import SimResult
from fairsim.sim.simulation import simulate

__all__ = ["BlockPool", "Engine", "EngineConfig", "SimResult", "resolve_capacity", "simulate"]
