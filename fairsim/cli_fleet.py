"""Fleet additions to ``run``/``compare``: ``--instances``, ``--router``, ``--router-param`` (the
options themselves are added by ``fairsim.deployment_options``), the per-instance summary and
table, and ``fleet.png``.

Kept apart from ``fairsim/run.py`` (as ``cli_colocated``): ``run_one`` calls ``FleetSpec.run``
when a fleet is asked for, and ``cmd_simulate`` adds ``fleet_summary`` to each policy's row.
A lone engine (``--instances 1`` and no ``--router``) never comes here: its path is unchanged.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fairsim.deployment_options import FLEET_HELP, add_fleet_options  # noqa: F401 (their former home)
from fairsim.io import echo, plural
from fairsim.types import Request

#: The largest ``--instances``: 100,000 engines is beyond any deployment a trace describes, and
#: each engine keeps its own block pool, queues and tables (a guard against a typo such as 1e9).
MAX_INSTANCES = 100_000


@dataclass(frozen=True)
class FleetSpec:
    """A fleet to simulate: ``instances`` engines behind ``router`` with ``params``."""

    instances: int
    router: str
    params: dict[str, Any] = field(default_factory=dict)
    seed: int = 0

    def run(self, name: str, requests: Sequence[Request], profile: Any, config: Any, policy_params: dict[str, Any],
            progress: Callable[[int], Any] | None = None, *, replay: str | None = None,
            think_scale: float = 1.0) -> Any:
        """Simulate ``requests`` under policy ``name`` on this fleet (one policy object per
        instance); a ``fairsim.sim.fleet.FleetResult``."""
        from fairsim.policies import make_policy
        from fairsim.routers import make_router
        from fairsim.sim.capacity import resolve_capacity
        from fairsim.sim.fleet import simulate_fleet

        _, kv_blocks = resolve_capacity(requests, config)
        router = make_router(self.router, self.instances, self.params, seed=self.seed, kv_blocks=kv_blocks)
        policies = [make_policy(name, profile, **policy_params) for _ in range(self.instances)]
        return simulate_fleet(requests, policies, router, profile, config, progress, replay=replay,
                              think_scale=think_scale, name=name, router_name=self.router)


def fleet_spec(args: argparse.Namespace) -> FleetSpec | None:
    """The fleet the options ask for; ``None`` for the single engine (``--instances 1``, no
    ``--router``). Checks the options alone (``check_fleet_trace`` checks them against the trace).

    Raises:
        ValueError: ``--instances`` below 1 or above ``MAX_INSTANCES``, ``--router-param``
            without a router, or a router parameter the router does not take or refuses.
    """
    from fairsim.options import parse_router_params
    from fairsim.routers import DEFAULT_ROUTER, make_router

    n = getattr(args, "instances", 1)
    router = getattr(args, "router", None)
    items = getattr(args, "router_param", [])
    if n < 1:
        raise ValueError(f"--instances {n}: need at least 1 instance")
    if n > MAX_INSTANCES:
        raise ValueError(f"--instances {n}: at most {MAX_INSTANCES:,} (each engine holds its own KV cache, "
                         f"queues and tables: a count beyond any real fleet only runs out of memory)")
    if n == 1 and router is None:
        if items:
            raise ValueError("--router-param needs --router (or --instances N > 1, which routes round-robin)")
        return None
    params = parse_router_params(items)
    spec = FleetSpec(n, router or DEFAULT_ROUTER, params, getattr(args, "seed", 0))
    make_router(spec.router, n, params, seed=spec.seed, kv_blocks=1)  # parameters checked up front
    return spec


def describe_deployment(deployment: dict[str, Any]) -> str:
    """A deployment record in words (bench's header, tune's report): a fleet's (``instances``,
    ``router``, ``router_params``) ``4 instances behind dynamo-kv (overlap_weight=2)``; a
    disaggregated one's (``DisaggSpec.run_info``) ``disaggregated: 2 prefill instances behind
    round-robin, 2 decode instances, KV link 400 Gbit/s``."""
    params = deployment.get("router_params") or {}
    router = deployment["router"] + (f" ({', '.join(f'{k}={json.dumps(v)}' for k, v in params.items())})"
                                     if params else "")
    if deployment.get("mode") == "disaggregated":
        size = deployment["decode_kv_blocks"]
        return (f"disaggregated: {plural(deployment['prefill_instances'], 'prefill instance')} behind {router}, "
                f"{plural(deployment['decode_instances'], 'decode instance')}"
                + (f" of {size:,} KV blocks" if size is not None else "")
                + f", KV link {echo(deployment['kv_link_gbps'])} Gbit/s")
    return f"{plural(deployment['instances'], 'instance')} behind {router}"


def check_fleet_trace(spec: FleetSpec | None, requests: Sequence[Request], source: str) -> None:
    """Refuse a router that needs what the trace lacks (sessions, prefix hashes), naming both.

    Raises:
        ValueError: The message names the trace, the router and what it needs.
    """
    if spec is None:
        return
    from fairsim.routers import missing_input

    missing = missing_input(spec.router, requests)
    if missing is not None:
        raise ValueError(f"{source}: {missing}")


def fleet_summary(result: Any) -> dict[str, Any]:
    """Fleet figures of one policy's run, for its summary row.

    Returns:
        ``instances``, ``router``; ``router_hit_rate`` (prefix the router counted as cached on the
        chosen instance / prompt tokens; ``cached_tokens``'s ``hit_rate`` is what the engines
        found); ``load_imbalance`` (the busiest instance's busy time, the sum of its step
        durations, over the mean: 1 = even); ``per_instance``: per instance ``instance``,
        ``requests``, ``hit_rate``, ``ttft_p50_s``, ``ttft_p99_s``, ``busy_s``, ``tokens``
        (computed), ``evictions`` (TTFT figures ``None`` for an instance that served nothing).
    """
    import numpy as np

    from fairsim.metrics import summarize

    per = []
    for k, part in enumerate(result.instances):
        reqs, steps = part.columns("requests"), part.columns("steps")
        row: dict[str, Any] = {"instance": k, "requests": len(reqs)}
        if len(reqs):
            s = summarize(reqs, steps)
            row.update(hit_rate=s["hit_rate"], ttft_p50_s=s["ttft_p50_s"], ttft_p99_s=s["ttft_p99_s"])
        else:
            row.update(hit_rate=None, ttft_p50_s=None, ttft_p99_s=None)
        row["busy_s"] = float(np.sum(steps["duration_s"])) if len(steps) else 0.0
        row["tokens"] = int(np.sum(steps["tokens"])) if len(steps) else 0
        row["evictions"] = int(np.sum(steps["evictions"])) if len(steps) else 0
        per.append(row)
    busy = [r["busy_s"] for r in per]
    mean = sum(busy) / len(busy)
    reqs = result.columns("requests")
    prompt = float(np.sum(reqs["prompt_tokens"]))
    return {
        "instances": len(per), "router": result.router,
        "router_hit_rate": float(np.sum(reqs["router_cached_tokens"]) / prompt) if prompt else float("nan"),
        "load_imbalance": max(busy) / mean if mean > 0 else float("nan"),
        "per_instance": per,
    }


def format_instances(rows: dict[str, dict[str, Any]]) -> str:
    """Plain-text per-instance table below ``run``/``compare``'s table (policies with a fleet)."""
    header = ["policy", "instance", "requests", "hit rate", "p50 s", "p99 s", "busy s", "tokens", "evictions"]
    body = []
    notes = []
    for name, s in rows.items():
        if "per_instance" not in s:
            continue
        notes.append(f"{name}: {plural(s['instances'], 'instance')} behind {s['router']}, load imbalance "
                     f"(max/mean busy) "
                     f"{s['load_imbalance']:.3f}, hit rate the router counted {s['router_hit_rate']:.3f}")
        for r in s["per_instance"]:
            def num(v: Any, fmt: str) -> str:
                return "n/a" if v is None else format(v, fmt)

            body.append([name, str(r["instance"]), str(r["requests"]), num(r["hit_rate"], ".3f"),
                         num(r["ttft_p50_s"], ".3f"), num(r["ttft_p99_s"], ".3f"), f"{r['busy_s']:.1f}",
                         str(r["tokens"]), str(r["evictions"])])
    if not body:
        return ""
    widths = [max(len(r[i]) for r in [header] + body) for i in range(len(header))]
    lines = ["", "per instance:"]
    lines += ["  ".join(v.rjust(w) if i else v.ljust(w) for i, (v, w) in enumerate(zip(r, widths)))
              for r in [header] + body]
    return "\n".join(lines + notes)


def fleet_figure(results: dict[str, Any], title: str = "Fleet") -> Any:
    """``fleet.png``: per instance and policy, requests served, busy time and hit rate (bars)."""
    from fairsim.figures import legend_and_title_above, plt

    names = [n for n, r in results.items() if getattr(r, "instances", ())]
    summaries = {n: fleet_summary(results[n]) for n in names}
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
    width = 0.8 / max(1, len(names))
    for j, name in enumerate(names):
        per = summaries[name]["per_instance"]
        x = [r["instance"] + j * width for r in per]
        for ax, key in zip(axes, ("requests", "busy_s", "hit_rate")):
            ax.bar(x, [r[key] or 0 for r in per], width=width, label=name)
    count = max((summaries[n]["instances"] for n in names), default=0)
    for ax, label in zip(axes, ("requests served", "busy time (s)", "prefix hit rate")):
        ax.set_xticks([k + (len(names) - 1) * width / 2 for k in range(count)], [str(k) for k in range(count)])
        ax.set_xlabel("instance")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3, axis="y")
    router = next(iter(summaries.values()))["router"] if summaries else ""
    legend_and_title_above(fig, axes[0], f"{title}: instances behind {router}")
    return fig


def write_fleet_figure(folder: Path, results: dict[str, Any], title: str) -> None:
    """Write ``fleet.png`` in ``folder`` when any result is a fleet's."""
    if not any(getattr(r, "instances", ()) for r in results.values()):
        return
    from fairsim.figures import save

    save(fleet_figure(results, title), folder / "fleet.png")
