"""Live vLLM: the scheduler hook, prompt synthesis, trace replay and decision equivalence.

``fairsim.live.PolicyScheduler`` / ``fairsim.live.AsyncPolicyScheduler`` are loaded lazily so that
``import fairsim.live`` (and the prompt synthesis in ``fairsim.live.prompts``) works without vLLM;
only the modules that drive an engine import vllm, and nothing outside ``fairsim.live`` does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: Folder of the tiny Llama ``config.json`` shipped for dummy-weight engines.
TINY_LLAMA_DIR = Path(__file__).parent / "tiny_llama"

__all__ = ["AsyncPolicyScheduler", "PolicyScheduler", "TINY_LLAMA_DIR"]


def __getattr__(name: str) -> Any:
    if name in ("PolicyScheduler", "AsyncPolicyScheduler"):
        from fairsim.live import scheduler

        return getattr(scheduler, name)
    raise AttributeError(f"module 'fairsim.live' has no attribute {name!r}")
