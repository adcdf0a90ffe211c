"""``--mode disaggregated`` on ``run`` and ``compare``: ``--prefill-instances``,
``--decode-instances``, ``--kv-link-gbps``, ``--kv-bytes-per-token``, ``--decode-kv-blocks``, the line
before the run, the KV capacity of both sides, the per-instance summary and ``disaggregated.png`` (``fairsim.sim.disaggregated`` runs it).
The options themselves are added by ``fairsim.deployment_options``.

Kept apart from ``fairsim/run.py`` (as ``cli_fleet``): ``disagg_spec`` checks the options and
returns a ``DisaggSpec``, which ``run_one`` runs as it runs a ``FleetSpec``.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fairsim.deployment_options import DISAGG_HELP, DISAGG_OPTIONS, add_disagg_options  # noqa: F401
from fairsim.io import echo, plural
from fairsim.types import Request


@dataclass(frozen=True)
class DisaggSpec:
    """A disaggregated deployment: ``prefill`` engines behind ``router`` (with ``params``),
    ``decode`` engines (each of ``decode_kv_blocks`` KV blocks if given, else the prefill side's
    size), a link of ``gbps`` and (if given) ``bytes_per_token``."""

    prefill: int
    decode: int
    router: str
    params: dict[str, Any] = field(default_factory=dict)
    gbps: float | None = None
    bytes_per_token: float | None = None
    seed: int = 0
    decode_kv_blocks: int | None = None

    def link(self, profile: Any) -> Any:
        """The ``KVLink``: ``--kv-bytes-per-token`` or the profile's, and the bandwidth.

        Raises:
            ValueError: Neither gives the bytes per token (naming the profile and the option), or
                a link slower than ``MAX_TRANSFER_S_PER_TOKEN`` (naming the options and the
                bandwidth that reaches it).
        """
        from fairsim.sim.disaggregated import DEFAULT_KV_LINK_GBPS, MAX_TRANSFER_S_PER_TOKEN, KVLink

        per_token = self.bytes_per_token
        if per_token is None:
            if profile.kv_capacity is None:
                raise ValueError(f"--mode disaggregated: profile {profile.name!r} has no kv_capacity."
                                 f"kv_bytes_per_token; give --kv-bytes-per-token")
            per_token = profile.kv_capacity.kv_bytes_per_token
        link = KVLink(per_token, DEFAULT_KV_LINK_GBPS if self.gbps is None else self.gbps)
        if link.seconds(1) > MAX_TRANSFER_S_PER_TOKEN:
            slowest = link.gbps * link.seconds(1) / MAX_TRANSFER_S_PER_TOKEN
            raise ValueError(
                f"--kv-link-gbps {echo(link.gbps)} with {echo(per_token)} KV bytes per token (--kv-bytes-per-token or "
                f"the profile's): {link.seconds(1000):.3g} s per 1,000 tokens; fairsim takes links of at most "
                f"{MAX_TRANSFER_S_PER_TOKEN * 1000:g} s per 1,000 tokens (here --kv-link-gbps >= {slowest:.3g}): "
                f"slower than any real link, and simulated times that large lose a step's float precision")
        return link

    def capacity(self, requests: Sequence[Request], config: Any, args: argparse.Namespace) -> tuple[int, int]:
        """The prefill side's ``(block_size, kv_blocks)`` (``fairsim.options.capacity_of`` under
        ``prefill_capacity_mode``'s rule), after checking that each decode engine holds every
        request's prompt and output.

        Raises:
            CapacityError: A prefill side that cannot hold a prompt (``capacity_of``'s message
                after "the prefill side is too small"), or a
                decode side too small for a request, naming the request and the option to raise:
                ``--decode-kv-blocks``, or when it is not given (the decode side has the prefill
                side's size) ``--decode-kv-blocks`` and ``--kv-blocks``/``--kv-tokens``.
        """
        from dataclasses import replace

        from fairsim.errors import CapacityError
        from fairsim.options import capacity_of
        from fairsim.sim.disaggregated import check_decode_fits, prefill_capacity_mode
        from fairsim.sim.keys import blocks_for

        mode = prefill_capacity_mode(config, self.decode_kv_blocks)
        try:
            block_size, kv_blocks = capacity_of(requests, replace(config, mode=mode), args)
        except CapacityError as exc:
            # (a size above the simulator's limit is the other way round: too large)
            side = ("the prefill side's KV cache" if "above the simulator's limit" in str(exc)
                    else "the prefill side is too small")
            raise CapacityError(f"{side}: {exc}") from None
        try:
            check_decode_fits(requests, block_size, self.decode_kv_blocks or kv_blocks)
        except CapacityError as exc:
            need = max(blocks_for(r.prompt_len + r.output_len - 1, block_size) for r in requests)
            if self.decode_kv_blocks is not None:
                hint = f"--decode-kv-blocks {self.decode_kv_blocks}; give --decode-kv-blocks {need} or more"
            else:
                hint = (f"no --decode-kv-blocks: the decode side has the prefill side's {kv_blocks} blocks; give "
                        f"--decode-kv-blocks {need} or more, or raise --kv-blocks/--kv-tokens to {need} blocks")
            raise CapacityError(f"{exc} ({hint})") from None
        return block_size, kv_blocks

    def describe(self, profile: Any) -> str:
        """The line printed before the run: the deployment and the transfer formula's figures."""
        link = self.link(profile)
        source = ("--kv-bytes-per-token" if self.bytes_per_token is not None
                  else f"profile {profile.name}'s kv_capacity")
        gbps = "--kv-link-gbps" if self.gbps is not None else "default: one 400 Gb/s NDR port per GPU"
        size = ("the prefill side's KV cache" if self.decode_kv_blocks is None
                else f"{self.decode_kv_blocks:,} KV blocks each (--decode-kv-blocks)")
        per_token = (f"{link.bytes_per_token:,.0f}" if link.bytes_per_token == round(link.bytes_per_token)
                     else echo(link.bytes_per_token))  # a fractional count as given, not rounded
        return (f"disaggregated: {plural(self.prefill, 'prefill instance')} behind {self.router}, "
                f"{plural(self.decode, 'decode instance')} (fewest active KV blocks; {size}); KV transfer = tokens x "
                f"{per_token} bytes ({source}) / {echo(link.gbps)} Gbit/s ({gbps}) = "
                f"{1e3 * link.seconds(1000):.4g} ms per 1,000 tokens")

    def run(self, name: str, requests: Sequence[Request], profile: Any, config: Any, policy_params: dict[str, Any],
            progress: Callable[[int], Any] | None = None, *, replay: str | None = None,
            think_scale: float = 1.0) -> Any:
        """Simulate ``requests`` with policy ``name`` on every prefill instance (FCFS on the
        decode instances); a ``fairsim.sim.disaggregated.DisaggregatedResult``."""
        from dataclasses import replace

        from fairsim.policies import make_policy
        from fairsim.routers import make_router
        from fairsim.sim.capacity import resolve_capacity
        from fairsim.sim.disaggregated import simulate_disaggregated

        from fairsim.sim.disaggregated import prefill_capacity_mode

        mode = prefill_capacity_mode(config, self.decode_kv_blocks)
        _, kv_blocks = resolve_capacity(requests, replace(config, mode=mode))
        router = make_router(self.router, self.prefill, self.params, seed=self.seed, kv_blocks=kv_blocks)
        policies = [make_policy(name, profile, **policy_params) for _ in range(self.prefill)]
        decoders = [make_policy("fcfs", profile) for _ in range(self.decode)]
        return simulate_disaggregated(requests, policies, router, decoders, profile, self.link(profile), config,
                                      decode_kv_blocks=self.decode_kv_blocks, replay=replay,
                                      think_scale=think_scale, name=name, router_name=self.router)

    def run_info(self, profile: Any) -> dict[str, Any]:
        """``run.json``'s record of the deployment: the link's values as used (given, or the
        default bandwidth and ``profile``'s bytes per token)."""
        link = self.link(profile)
        return {"mode": "disaggregated", "prefill_instances": self.prefill, "decode_instances": self.decode,
                "router": self.router, "router_params": self.params, "kv_link_gbps": link.gbps,
                "kv_bytes_per_token": link.bytes_per_token, "decode_kv_blocks": self.decode_kv_blocks}


def check_deployment(values: dict[str, Any], term: Callable[[str, Any], str]) -> None:
    """Refuse a bad setting of the mode.

    Args:
        values: ``prefill_instances``, ``decode_instances`` (``None``: 1), ``kv_link_gbps``,
            ``kv_bytes_per_token``, ``decode_kv_blocks`` (``None``: not given) -> value.
        term: ``(name, value) -> how the user wrote it``, for the message: ``--prefill-instances
            0`` on the command line, ``prefill_instances=0`` in a sweep spec.

    Raises:
        ValueError: A count below 1 or above ``MAX_INSTANCES``; a bandwidth or byte count that is
            not a finite number > 0; a ``decode_kv_blocks`` below 1 or above ``MAX_KV_BLOCKS``
            (the simulator's limit).
    """
    from fairsim.cli_fleet import MAX_INSTANCES
    from fairsim.sim.capacity import MAX_KV_BLOCKS

    for name in ("prefill_instances", "decode_instances"):
        value = values.get(name)
        if value is not None and value < 1:
            raise ValueError(f"{term(name, value)}: need at least 1 instance")
        if value is not None and value > MAX_INSTANCES:
            raise ValueError(f"{term(name, value)}: at most {MAX_INSTANCES:,} instances")
    for name in ("kv_link_gbps", "kv_bytes_per_token"):
        value = values.get(name)
        if value is not None and not (math.isfinite(value) and value > 0):
            raise ValueError(f"{term(name, value)}: need a finite number > 0")
    blocks = values.get("decode_kv_blocks")
    if blocks is not None and not 1 <= blocks <= MAX_KV_BLOCKS:
        raise ValueError(f"{term('decode_kv_blocks', blocks)}: need 1 to {MAX_KV_BLOCKS} blocks (the simulator's "
                         f"limit)")


def disagg_spec(args: argparse.Namespace) -> DisaggSpec | None:
    """The deployment ``--mode disaggregated`` asks for; ``None`` in the other modes.

    With it, ``args.mode`` becomes ``colocated`` and ``args.disaggregated`` the spec: shaping
    (output lengths capped at max_model_len, a KV capacity that holds each request's prompt and
    output, ``--slo``, the decode columns) follows the decode side's rules.

    Raises:
        ValueError: A mode option without ``--mode disaggregated``; ``--instances`` with it (use
            ``--prefill-instances``); a value ``check_deployment`` refuses; a router parameter
            the router refuses.
    """
    from fairsim.options import parse_router_params
    from fairsim.routers import DEFAULT_ROUTER, make_router

    if getattr(args, "mode", None) != "disaggregated":
        given = [option for dest, option in DISAGG_OPTIONS if getattr(args, dest, None) is not None]
        if given:
            raise ValueError(f"{given[0]} needs --mode disaggregated")
        return None
    if getattr(args, "instances", 1) != 1:
        raise ValueError(f"--instances {args.instances}: --mode disaggregated counts its engines with "
                         f"--prefill-instances and --decode-instances")
    options = dict(DISAGG_OPTIONS)
    check_deployment({dest: getattr(args, dest, None) for dest in options},
                     lambda dest, value: f"{options[dest]} {echo(value)}")
    params = parse_router_params(getattr(args, "router_param", []))
    spec = DisaggSpec(args.prefill_instances or 1, args.decode_instances or 1, args.router or DEFAULT_ROUTER,
                      params, args.kv_link_gbps, args.kv_bytes_per_token, getattr(args, "seed", 0),
                      getattr(args, "decode_kv_blocks", None))
    make_router(spec.router, spec.prefill, params, seed=spec.seed, kv_blocks=1)  # parameters checked up front
    args.mode = "colocated"
    args.disaggregated = spec
    return spec


def disagg_summary(result: Any) -> dict[str, Any]:
    """Disaggregated figures of one policy's run, for its summary row.

    Returns:
        ``mode`` (``disaggregated``), ``prefill_instances``, ``decode_instances``, ``router``,
        ``kv_link_gbps``, ``kv_bytes_per_token``, ``decode_kv_blocks`` (each decode engine's KV
        blocks; the summary's ``kv_blocks`` is the prefill side's), ``router_hit_rate`` (as a
        fleet's, ``fairsim.cli_fleet.fleet_summary``: the prefill side's router); over requests ``held_p50_s``/``held_p99_s``
        (prefill end to decode blocks), ``transfer_p50_s``/``transfer_p99_s``, ``transfer_tokens``
        (sum), ``held_requests`` (requests a decode engine refused at a step start for want of
        KV blocks or a ``max_num_seqs`` slot: ``decode_held``); ``prefill_load_imbalance`` and
        ``decode_load_imbalance`` (max/mean busy time per side); ``per_instance``-like rows in
        ``by_instance``: ``role``, ``instance``, ``requests``, ``busy_s``, ``tokens``,
        ``evictions``, ``preemptions``, ``held_max`` (most requests held at a step start),
        ``held_s`` (the held times of the requests prefilled, or decoded, there, summed).
    """
    import numpy as np

    reqs = result.columns("requests")
    prompt = float(np.sum(reqs["prompt_tokens"]))
    held = np.asarray(reqs["held_s"], dtype=np.float64)
    moved = np.asarray(reqs["transfer_s"], dtype=np.float64)
    rows = []
    for role, parts in (("prefill", result.instances), ("decode", result.decode_instances)):
        for k, part in enumerate(parts):
            steps = part.columns("steps")
            rows.append({"role": role, "instance": k, "requests": len(part.columns("requests"))})
            for key, col in (("busy_s", "duration_s"), ("tokens", "tokens"), ("evictions", "evictions"),
                             ("preemptions", "preemptions")):
                total = np.sum(steps[col]) if len(steps) else 0
                rows[-1][key] = float(total) if key == "busy_s" else int(total)
    all_steps = result.columns("steps")
    roles = np.asarray(all_steps["role"])
    inst = np.asarray(all_steps["instance"])
    held_at = np.asarray(all_steps["held"])
    by_role = {"prefill": np.asarray(reqs["instance"]), "decode": np.asarray(reqs["decode_instance"])}
    for row in rows:
        mine = (roles == row["role"]) & (inst == row["instance"])
        row["held_max"] = int(held_at[mine].max()) if mine.any() else 0
        row["held_s"] = float(np.sum(held[by_role[row["role"]] == row["instance"]]))

    def imbalance(role: str) -> float:
        busy = [r["busy_s"] for r in rows if r["role"] == role]
        mean = sum(busy) / len(busy)
        return max(busy) / mean if mean > 0 else float("nan")

    return {
        "mode": "disaggregated", "prefill_instances": len(result.instances),
        "decode_instances": len(result.decode_instances), "router": result.router,
        "kv_link_gbps": result.link.gbps, "kv_bytes_per_token": result.link.bytes_per_token,
        "decode_kv_blocks": result.decode_instances[0].kv_blocks,
        "router_hit_rate": float(np.sum(reqs["router_cached_tokens"]) / prompt) if prompt else float("nan"),
        "held_p50_s": float(np.percentile(held, 50)), "held_p99_s": float(np.percentile(held, 99)),
        "held_requests": int(np.sum(reqs["decode_held"])),
        "transfer_p50_s": float(np.percentile(moved, 50)), "transfer_p99_s": float(np.percentile(moved, 99)),
        "transfer_tokens": int(np.sum(reqs["transfer_tokens"])),
        "prefill_load_imbalance": imbalance("prefill"), "decode_load_imbalance": imbalance("decode"),
        "by_instance": rows,
    }


def format_disaggregated(rows: dict[str, dict[str, Any]]) -> str:
    """Plain-text per-instance table (both roles) below ``run``/``compare``'s table."""
    header = ["policy", "role", "instance", "requests", "busy s", "tokens", "evictions", "preempt", "held max"]
    body, notes = [], []
    for name, s in rows.items():
        if s.get("mode") != "disaggregated":
            continue
        notes.append(f"{name}: held p50/p99 {s['held_p50_s']:.3f}/{s['held_p99_s']:.3f} s ({plural(s['held_requests'], 'request')} "
                     f"held), transfer p50/p99 {s['transfer_p50_s']:.4f}/{s['transfer_p99_s']:.4f} s, "
                     f"load imbalance prefill {s['prefill_load_imbalance']:.3f}, decode "
                     f"{s['decode_load_imbalance']:.3f}")
        for r in s["by_instance"]:
            body.append([name, r["role"], str(r["instance"]), str(r["requests"]), f"{r['busy_s']:.1f}",
                         str(r["tokens"]), str(r["evictions"]), str(r["preemptions"]), str(r["held_max"])])
    if not body:
        return ""
    widths = [max(len(r[i]) for r in [header] + body) for i in range(len(header))]
    lines = ["", "per instance (disaggregated):"]
    lines += ["  ".join(v.rjust(w) if i > 1 else v.ljust(w) for i, (v, w) in enumerate(zip(r, widths)))
              for r in [header] + body]
    return "\n".join(lines + notes)


def disagg_figure(results: dict[str, Any], title: str = "Disaggregated") -> Any:
    """``disaggregated.png``: per role (rows: prefill, decode), instance and policy, requests
    served, busy time and held time (the held times of its requests, summed; bars)."""
    from fairsim.figures import legend_and_title_above, plt

    names = [n for n, r in results.items() if getattr(r, "decode_instances", ())]
    summaries = {n: disagg_summary(results[n]) for n in names}
    fig, axes = plt.subplots(2, 3, figsize=(12, 6.4), squeeze=False)
    width = 0.8 / max(1, len(names))
    for row, role in enumerate(("prefill", "decode")):
        count = 0
        for j, name in enumerate(names):
            per = [r for r in summaries[name]["by_instance"] if r["role"] == role]
            count = max(count, len(per))
            x = [r["instance"] + j * width for r in per]
            for ax, key in zip(axes[row], ("requests", "busy_s", "held_s")):
                ax.bar(x, [r[key] for r in per], width=width, label=name)
        for ax, label in zip(axes[row], ("requests served", "busy time (s)", "held time, summed (s)")):
            ax.set_xticks([k + (len(names) - 1) * width / 2 for k in range(count)], [str(k) for k in range(count)])
            ax.set_xlabel(f"{role} instance")
            ax.set_ylabel(label)
            ax.grid(alpha=0.3, axis="y")
    first = next(iter(summaries.values()), None)
    where = (f"{first['prefill_instances']} prefill behind {first['router']}, {first['decode_instances']} decode"
             if first else "")
    legend_and_title_above(fig, axes[0][0], f"{title}: {where}")
    return fig


def write_disagg_figure(folder: Path, results: dict[str, Any], title: str) -> None:
    """Write ``disaggregated.png`` in ``folder`` when any result is a disaggregated run's."""
    if not any(getattr(r, "decode_instances", ()) for r in results.values()):
        return
    from fairsim.figures import save

    save(disagg_figure(results, title), folder / "disaggregated.png")
