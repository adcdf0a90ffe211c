"""Per-run engine settings: a run's ``[engine]`` overrides on top of its workload's settings
(a scenario's own, or ``fairsim run``'s defaults for a trace file: ``fairsim.sweep.tracerun``).

The KV capacity is resolved for each run from its own settings, as a *token* capacity: when a
run changes ``block_size`` but not the capacity, a workload capacity given in blocks (the
scenarios' ``kv_blocks``, sized at the trace's 512-token hash block) is converted to tokens at the
old block size and back to blocks at the new one, so a sweep over block sizes compares caches of
the same size in tokens (vLLM sizes its cache in bytes, i.e. tokens, and derives the block count
from the block size: ``vllm/v1/core/kv_cache_utils.py``, ``get_num_blocks``).

``kv_tokens`` is accepted as a sweep engine key. Where ``EngineConfig`` has a ``kv_tokens``
field it is passed through; otherwise it becomes ``kv_blocks = floor(kv_tokens / block_size)``
at the run's block size (floor, like vLLM's block count from the memory it has).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from fairsim.sim.config import EngineConfig, check_vllm_scheduler
from fairsim.types import Request

CAPACITY_KEYS = ("kv_blocks", "kv_fraction", "kv_tokens")
"""Engine keys that set the KV capacity (one replaces the others)."""

FLEET_KEYS = {"instances": "int", "router": "str", "router_params": "dict"}
"""Engine keys that describe the fleet (``fairsim run --instances/--router/--router-param``),
not ``EngineConfig`` fields: ``fleet_of`` reads them, ``run_engine`` leaves them out."""


def engine_fields() -> dict[str, str]:
    """``{name: annotation}`` of the keys a sweep's ``[engine]`` accepts.

    ``EngineConfig``'s fields, plus ``kv_tokens`` (integer tokens) where it has no such field.
    """
    fields = {f.name: str(f.type) for f in dataclasses.fields(EngineConfig)}
    fields.setdefault("kv_tokens", "int | None")
    fields.update(FLEET_KEYS)
    return fields


def check_value(name: str, annotation: str, value: Any) -> str | None:
    """Why ``value`` does not fit field ``name`` typed ``annotation``, or None when it does."""
    if value is None:
        return None if "None" in annotation else "needs a value"
    is_int = isinstance(value, int) and not isinstance(value, bool)
    if annotation == "dict":
        ok, want = isinstance(value, dict), "a table"
    elif "float" in annotation:
        ok = is_int or isinstance(value, float)
        want = "a number"
    elif "int" in annotation:
        ok, want = is_int, "an integer"
    elif "bool" in annotation:
        ok, want = isinstance(value, bool), "true or false"
    elif "str" in annotation:
        ok, want = isinstance(value, str), "a string"
    else:
        return None
    return None if ok else f"{value!r}: {name} needs {want}"


def block_size_of(config: EngineConfig, requests: Sequence[Request]) -> int:
    """Tokens per KV block under ``config``: its ``block_size``, else the trace's hash block.

    Same rule as ``fairsim.sim.capacity.resolve_capacity``.

    Raises:
        ValueError: ``block_size`` unset and the requests mix hash block sizes.
    """
    if config.block_size is not None:
        return config.block_size
    sizes = {r.hash_block_size for r in requests}
    if len(sizes) > 1:
        raise ValueError(f"trace mixes hash block sizes {sorted(sizes)}; set engine.block_size")
    return sizes.pop() if sizes else 16


def run_engine(base: EngineConfig, overrides: dict[str, Any], requests: Sequence[Request]) -> EngineConfig:
    """The ``EngineConfig`` of one run: ``overrides`` applied to the workload's ``base``.

    Args:
        base: The workload's engine settings: a scenario's, or for a trace file ``fairsim
            run``'s defaults (``fairsim.sweep.tracerun.trace_engine``, which then adds the
            profile's ``kv_capacity`` when neither sets a capacity).
        overrides: The run's ``[engine]`` point (``EngineConfig`` fields, ``kv_tokens``).
        requests: The run's requests (for the trace's hash block size).

    Returns:
        The run's settings. A capacity key in ``overrides`` replaces the base capacity; a
        ``block_size`` change alone keeps the base capacity in tokens (see the module docstring).

    Raises:
        ValueError: A value ``EngineConfig`` refuses, two capacity keys, ``kv_tokens`` below
            one block, or ``max_num_seqs`` above ``budget_tokens`` (vLLM's rule,
            ``fairsim.sim.config.check_vllm_scheduler``).
    """
    fields = {f.name for f in dataclasses.fields(EngineConfig)}
    changes = {k: v for k, v in overrides.items() if k not in FLEET_KEYS}  # the fleet: fleet_of
    given = [k for k in CAPACITY_KEYS if changes.get(k) is not None]
    if len(given) > 1:
        raise ValueError(f"give one KV capacity of {', '.join(CAPACITY_KEYS)}, not {' and '.join(given)}")
    if any(k in changes for k in CAPACITY_KEYS):
        changes.update({k: None for k in CAPACITY_KEYS if k in fields and k not in changes})
    elif "block_size" in changes and base.kv_blocks is not None:
        old_bs = block_size_of(base, requests)
        new_bs = block_size_of(dataclasses.replace(base, block_size=changes["block_size"]), requests)
        if new_bs != old_bs:
            changes.update(kv_blocks=None, kv_tokens=base.kv_blocks * old_bs)
    tokens = changes.pop("kv_tokens", None) if "kv_tokens" not in fields else None
    if tokens is not None:
        bs = block_size_of(dataclasses.replace(
            base, block_size=changes.get("block_size", base.block_size)), requests)
        if tokens // bs < 1:
            raise ValueError(f"kv_tokens={tokens}: less than one block of {bs} tokens")
        changes.update(kv_blocks=tokens // bs, kv_fraction=None)
    config = dataclasses.replace(base, **changes)
    check_vllm_scheduler(config.budget_tokens, config.max_num_seqs)  # as fairsim run checks its options
    return config


def fleet_point(point: dict[str, Any]) -> dict[str, Any]:
    """``point`` with its fleet keys checked and ``router_params`` cut to the run's router.

    ``router_params`` is ``{ROUTER: {KEY: VALUE}}`` (a router's parameters by its name, so one
    table serves a grid over routers); the run keeps only its own router's table, and none when
    that is empty. A point without fleet keys is returned unchanged (a single engine).

    Raises:
        ValueError: ``instances`` below 1, an unknown router (in ``router`` or as a key of
            ``router_params``), ``router_params`` without a fleet, or a parameter the router
            does not take or refuses (``fairsim.routers.make_router``).
    """
    from fairsim.routers import DEFAULT_ROUTER, ROUTERS, make_router

    if not any(k in point for k in FLEET_KEYS):
        return point
    out = {k: v for k, v in point.items() if k not in FLEET_KEYS}
    n = point.get("instances", 1)
    router = point.get("router")
    by_router = point.get("router_params", {})
    if n < 1:
        raise ValueError(f"instances={n}: need at least 1 instance")
    for name in [router, *by_router]:
        if name is not None and name not in ROUTERS:
            raise ValueError(f"router {name!r}: unknown router; known routers: {', '.join(ROUTERS)}")
    for name, params in by_router.items():
        if not isinstance(params, dict):
            raise ValueError(f"router_params.{name}: {params!r}; expected a table of the router's parameters")
    out["instances"] = n
    if n == 1 and router is None:
        if by_router:
            raise ValueError("router_params needs a router (or instances > 1, which routes round-robin)")
        return out
    out["router"] = router or DEFAULT_ROUTER
    params = by_router.get(out["router"], {})
    try:
        make_router(out["router"], n, params, kv_blocks=1)  # checked up front, as fairsim run does
    except (ValueError, TypeError) as exc:
        raise ValueError(str(exc).replace("--router-param", f"router_params.{out['router']}")) from None
    if params:
        out["router_params"] = params
    return out


def fleet_of(point: dict[str, Any], seed: int) -> Any:
    """The ``fairsim.cli_fleet.FleetSpec`` of a run's engine point (``fleet_point``'s form), or
    ``None`` for a single engine. ``seed`` seeds a sampling router (``fairsim run --seed``)."""
    from fairsim.cli_fleet import FleetSpec

    if "router" not in point:
        return None
    return FleetSpec(point["instances"], point["router"], dict(point.get("router_params", {})), seed)


def check_fleet_input(point: dict[str, Any], requests: Sequence[Request]) -> None:
    """Refuse a router that needs what the workload lacks (sessions, prefix hashes).

    Raises:
        ValueError: The router and what it needs (``fairsim.routers.missing_input``).
    """
    if "router" in point:
        from fairsim.routers import missing_input

        missing = missing_input(point["router"], requests)
        if missing is not None:
            raise ValueError(missing.replace("--router ", "router "))
