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

DISAGG_KEYS = {"prefill_instances": "int", "decode_instances": "int", "kv_link_gbps": "float",
               "kv_bytes_per_token": "float", "decode_kv_blocks": "int"}
"""Engine keys of ``mode = "disaggregated"`` (``fairsim run --mode disaggregated
--prefill-instances/--decode-instances/--kv-link-gbps/--kv-bytes-per-token/--decode-kv-blocks``;
its router is ``router``/``router_params``, as a fleet's). ``fleet_of`` reads them, ``run_engine``
leaves them out and runs the engines' settings colocated."""


def engine_fields() -> dict[str, str]:
    """``{name: annotation}`` of the keys a sweep's ``[engine]`` accepts.

    ``EngineConfig``'s fields, plus ``kv_tokens`` (integer tokens) where it has no such field.
    """
    fields = {f.name: str(f.type) for f in dataclasses.fields(EngineConfig)}
    fields.setdefault("kv_tokens", "int | None")
    fields.update(FLEET_KEYS)
    fields.update(DISAGG_KEYS)
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

    ``mode = "disaggregated"`` gives ``mode="colocated"``: the settings of both sides (their
    deployment is ``fleet_of``'s).
    """
    fields = {f.name for f in dataclasses.fields(EngineConfig)}
    changes = {k: v for k, v in overrides.items() if k not in FLEET_KEYS and k not in DISAGG_KEYS}  # fleet_of
    if changes.get("mode") == "disaggregated":  # both sides run the settings as fairsim run does: colocated
        changes["mode"] = "colocated"
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
    that is empty. A point without fleet keys is returned unchanged (a single engine). A point
    with ``mode = "disaggregated"`` is ``disagg_point``'s.

    Raises:
        ValueError: ``instances`` below 1 or above ``fairsim.cli_fleet.MAX_INSTANCES``, an
            unknown router (in ``router`` or as a key of ``router_params``), ``router_params``
            without a fleet, or a parameter the router does not take or refuses
            (``fairsim.routers.make_router``); a ``DISAGG_KEYS`` key without ``mode =
            "disaggregated"``; as ``disagg_point``.
    """
    if point.get("mode") == "disaggregated":
        return disagg_point(point)
    given = [k for k in DISAGG_KEYS if k in point]
    if given:
        raise ValueError(f'{given[0]} needs mode = "disaggregated"')
    if not any(k in point for k in FLEET_KEYS):
        return point
    from fairsim.cli_fleet import MAX_INSTANCES

    out = {k: v for k, v in point.items() if k not in FLEET_KEYS}
    n = point.get("instances", 1)
    if n < 1:
        raise ValueError(f"instances={n}: need at least 1 instance")
    if n > MAX_INSTANCES:  # as fairsim run's --instances
        raise ValueError(f"instances={n}: at most {MAX_INSTANCES:,} (each engine holds its own KV cache)")
    _check_routers(point)
    out["instances"] = n
    if n == 1 and point.get("router") is None:
        if point.get("router_params"):
            raise ValueError("router_params needs a router (or instances > 1, which routes round-robin)")
        return out
    return _with_router(out, point, n)


def disagg_point(point: dict[str, Any]) -> dict[str, Any]:
    """A ``mode = "disaggregated"`` point checked as ``fairsim run --mode disaggregated`` checks
    its options: ``prefill_instances`` and ``decode_instances`` (default 1) always present, the
    router (default round robin) and its own ``router_params`` as in ``fleet_point``, and the
    link and decode-side keys where given.

    Raises:
        ValueError: ``instances`` in the point (the mode counts its engines with
            ``prefill_instances``/``decode_instances``), a value
            ``fairsim.cli_disagg.check_deployment`` refuses (named as ``key=value``), or a
            router or parameter ``fleet_point`` refuses.
    """
    from fairsim.cli_disagg import check_deployment
    from fairsim.io import echo

    if "instances" in point:
        raise ValueError('instances: mode = "disaggregated" counts its engines with prefill_instances and '
                         'decode_instances')
    check_deployment(point, lambda key, value: f"{key}={echo(value)}")
    _check_routers(point)
    out = {k: v for k, v in point.items() if k not in FLEET_KEYS and k not in DISAGG_KEYS}
    out.update(prefill_instances=point.get("prefill_instances", 1), decode_instances=point.get("decode_instances", 1))
    out.update({k: point[k] for k in ("kv_link_gbps", "kv_bytes_per_token", "decode_kv_blocks") if k in point})
    return _with_router(out, point, out["prefill_instances"])


def _check_routers(point: dict[str, Any]) -> None:
    """Refuse an unknown router (``router`` or a key of ``router_params``) or a parameter entry
    that is not a table."""
    from fairsim.routers import ROUTERS

    name = point.get("router")
    if name is not None and name not in ROUTERS:
        raise ValueError(f"router {name!r}: unknown router; known routers: {', '.join(ROUTERS)}")
    for name in point.get("router_params", {}):
        if name not in ROUTERS:
            raise ValueError(f"router_params.{name}: not a router; router_params holds each router's parameters "
                             f"under its name, e.g. router_params = {{dynamo-kv = {{overlap_weight = 1}}}}; known "
                             f"routers: {', '.join(ROUTERS)}")
    for name, params in point.get("router_params", {}).items():
        if not isinstance(params, dict):
            raise ValueError(f"router_params.{name}: {params!r}; expected a table of the router's parameters")


def _with_router(out: dict[str, Any], point: dict[str, Any], n: int) -> dict[str, Any]:
    """``out`` with the run's ``router`` (default round robin) and its own ``router_params``
    (none when empty), checked by building the router for ``n`` instances."""
    from fairsim.routers import DEFAULT_ROUTER, make_router

    out["router"] = point.get("router") or DEFAULT_ROUTER
    params = point.get("router_params", {}).get(out["router"], {})
    try:
        make_router(out["router"], n, params, kv_blocks=1)  # checked up front, as fairsim run does
    except (ValueError, TypeError) as exc:
        raise ValueError(str(exc).replace("--router-param", f"router_params.{out['router']}")) from None
    if params:
        out["router_params"] = params
    return out


def fleet_of(point: dict[str, Any], seed: int) -> Any:
    """The deployment of a run's engine point (``fleet_point``'s form): a
    ``fairsim.cli_disagg.DisaggSpec`` for ``mode = "disaggregated"``, a
    ``fairsim.cli_fleet.FleetSpec`` for a fleet, ``None`` for a single engine. ``seed`` seeds a
    sampling router (``fairsim run --seed``)."""
    from fairsim.cli_disagg import DisaggSpec
    from fairsim.cli_fleet import FleetSpec

    if point.get("mode") == "disaggregated":
        return DisaggSpec(point["prefill_instances"], point["decode_instances"], point["router"],
                          dict(point.get("router_params", {})), point.get("kv_link_gbps"),
                          point.get("kv_bytes_per_token"), seed, point.get("decode_kv_blocks"))
    if "router" not in point:
        return None
    return FleetSpec(point["instances"], point["router"], dict(point.get("router_params", {})), seed)


def check_capacity(point: dict[str, Any], requests: Sequence[Request], config: EngineConfig, profile: Any) -> None:
    """Refuse a KV cache the run's engines cannot work with, as ``fairsim run`` does: one
    engine's (``resolve_capacity``), or under ``mode = "disaggregated"`` each side's (a prefill
    engine holds each prompt, a decode engine each prompt and output) and the link's bytes per
    token (from the profile when not given).

    Raises:
        CapacityError: A side too small, named (``decode_kv_blocks`` or the capacity key to raise).
        ValueError: No bytes per token (``kv_bytes_per_token``) and a profile without them, or
            a link too slow (``fairsim.cli_disagg.DisaggSpec.link``).
    """
    from fairsim.errors import CapacityError
    from fairsim.sim.capacity import resolve_capacity
    from fairsim.sim.disaggregated import check_decode_fits, prefill_capacity_mode

    if point.get("mode") != "disaggregated":
        resolve_capacity(requests, config)
        return
    decode = point.get("decode_kv_blocks")
    try:
        block_size, kv_blocks = resolve_capacity(requests, dataclasses.replace(
            config, mode=prefill_capacity_mode(config, decode)))
    except CapacityError as exc:
        raise CapacityError(f"the prefill side is too small: {exc}") from None
    try:
        check_decode_fits(requests, block_size, decode or kv_blocks)
    except CapacityError as exc:
        raise CapacityError(f"{exc} (raise decode_kv_blocks" + ("" if decode else ", or the KV capacity it "
                                                                "defaults to") + ")") from None
    try:
        fleet_of(point, 0).link(profile)
    except ValueError as exc:
        raise ValueError(str(exc).replace("--kv-bytes-per-token", "engine.kv_bytes_per_token")
                         .replace("--kv-link-gbps", "engine.kv_link_gbps")) from None


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
