"""Router registry: build a router by its registered name (as ``fairsim.policies.registry``).

A new router is one module with one ``Router`` subclass (``fairsim.routers.base``) and one line
here. Modules are imported when their router is built, so listing names imports nothing.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

from fairsim.routers.base import Router
from fairsim.types import Request

#: name -> ``module:Class`` under ``fairsim.routers``.
ROUTERS: dict[str, str] = {
    "round-robin": "round_robin:RoundRobin",
    "least-work": "least_work:LeastWork",
    "session-affinity": "session_affinity:SessionAffinity",
    "dynamo-kv": "dynamo_kv:DynamoKV",
    "llm-d": "llmd:LLMD",
    "sglang-cache-aware": "sglang_cache_aware:SGLangCacheAware",
}

#: The router of a fleet when ``--instances N > 1`` names none.
DEFAULT_ROUTER = "round-robin"


def router_class(name: str) -> type[Router]:
    """The class registered as ``name``.

    Raises:
        ValueError: An unknown name (the message lists the known ones).
    """
    try:
        spec = ROUTERS[name]
    except KeyError:
        raise ValueError(f"--router {name!r}: unknown router; known routers: {', '.join(ROUTERS)}") from None
    module, _, cls = spec.partition(":")
    return getattr(importlib.import_module(f"fairsim.routers.{module}"), cls)


def router_params(name: str) -> dict[str, Any]:
    """The ``--router-param`` keys router ``name`` takes, with their defaults."""
    import inspect  # (not at import: only a fleet needs it; fairsim/record.py says what it costs)

    sig = inspect.signature(router_class(name).__init__)
    return {p.name: p.default for p in sig.parameters.values()
            if p.kind is p.KEYWORD_ONLY and p.name not in ("seed", "kv_blocks")}


def make_router(name: str, num_instances: int, params: dict[str, Any] | None = None, *, seed: int = 0,
                kv_blocks: int = 0) -> Router:
    """A fresh router for a fleet of ``num_instances``.

    Args:
        params: ``--router-param`` values (``fairsim.options.parse_params``).
        seed: For routers that sample (Dynamo's temperature).
        kv_blocks: One instance's KV capacity (SGLang's default tree size).

    Raises:
        ValueError: An unknown router or parameter, or a value the router refuses (named as
            ``--router-param KEY=VALUE``).
    """
    cls = router_class(name)
    params = dict(params or {})
    known = router_params(name)
    unknown = sorted(set(params) - set(known))
    if unknown:
        takes = ", ".join(known) if known else "no parameters"
        raise ValueError(f"--router-param {unknown[0]}: router {name!r} takes {takes}")
    return cls(num_instances, seed=seed, kv_blocks=kv_blocks, **params)


def missing_input(name: str, requests: Sequence[Request]) -> str | None:
    """What router ``name`` needs and the trace lacks, as a sentence; ``None`` when nothing is."""
    needs = router_class(name).needs
    if "sessions" in needs and not any(r.session_id is not None for r in requests):
        return (f"--router {name} needs sessions (a session_id per request) and the trace has none; "
                f"use a session trace or another router")
    if "hashes" in needs and not any(r.block_hashes or r.segments for r in requests):
        return (f"--router {name} needs prefix identity (block hashes or segments) to see caches and the "
                f"trace has none; use round-robin or least-work")
    return None
