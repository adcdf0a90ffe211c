"""E1's SEC traces for a fleet: N tenants, each one seed of E1's full trace, overlaid in time.

Each tenant is what one engine served in E1 (``fairsim.scenarios`` ``sec-dynK`` at E1's full
lengths, ``experiments.common.FULL``: calm 600 s at 0.5, burst 600 s at 0.9, spike 60 s at 1.6
requests/s), seed ``k`` for tenant ``k``. Tenants share no prefix (their block hashes are moved
apart), so N tenants on N instances offer each instance E1's load, and a router that kept every
tenant on its own instance would reproduce E1's engines exactly. Time scaling one trace instead
would shorten the spike N-fold and with it the backlog an instance sees.

KV capacity per instance: the mean of the tenants' own E1 capacities (0.3 x each one's reusable
content), so the fleet holds what the N engines of E1 held together.

Run: ``python -m experiments.e6.sec_tenants --scenario sec-dyn1 --tenants 4 [--outputs] --out DIR``
writes ``DIR/fleet.jsonl`` (every tenant, arrival order), ``DIR/tenant-K.jsonl`` (tenant K alone) and
``DIR/kv_blocks`` (the capacity per instance, a number), and prints the request count.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path

from experiments.common import FULL
from experiments.e5_colocated import with_outputs
from fairsim.costmodel import DEFAULT_PROFILE, load_profile
from fairsim.scenarios import build_scenario
from fairsim.traces.canonical import write_canonical
from fairsim.traces.trace import Trace
from fairsim.types import Request

HASH_STRIDE = 10_000_000
"""Block-hash offset between tenants; one SEC seed uses a few thousand ids."""


def tenant(scenario: str, k: int, outputs: bool = False, **params: float) -> tuple[list[Request], int]:
    """Tenant ``k``: seed ``k`` of ``scenario`` (E1's full lengths unless ``params`` override them),
    ids prefixed ``tK-``, block hashes moved by ``k x HASH_STRIDE``; with ``outputs``, E5's log-normal
    output lengths (seed ``k``) for colocated runs. Returns the requests and the scenario's KV blocks.
    """
    sc = build_scenario(scenario, load_profile(DEFAULT_PROFILE), seed=k, **{**FULL.get(scenario, {}), **params})
    requests = with_outputs(sc.requests, k) if outputs else list(sc.requests)
    moved = [dataclasses.replace(r, request_id=f"t{k}-{r.request_id}",
                                 block_hashes=tuple(h + k * HASH_STRIDE for h in r.block_hashes),
                                 labels={key: v for key, v in r.labels.items() if not key.startswith("_")})
             for r in requests]
    return moved, sc.engine.kv_blocks


def tenants(scenario: str, n: int, outputs: bool = False, **params: float) -> tuple[list[list[Request]], int]:
    """Tenants ``0..n-1`` (see ``tenant``) and the KV blocks per instance: the mean of theirs, rounded."""
    parts = [tenant(scenario, k, outputs, **params) for k in range(n)]
    return [reqs for reqs, _ in parts], round(sum(kv for _, kv in parts) / n)


def overlay(parts: Sequence[Sequence[Request]]) -> list[Request]:
    """Every tenant's requests in arrival order (ties: tenant order, stable)."""
    return sorted((r for part in parts for r in part), key=lambda r: r.arrival_time)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", required=True, choices=("sec-dyn1", "sec-dyn2"))
    ap.add_argument("--tenants", type=int, required=True, help="tenants (seeds 0..N-1), >= 1")
    ap.add_argument("--outputs", action="store_true", help="E5's output lengths (colocated runs)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    if args.tenants < 1:
        ap.error(f"--tenants {args.tenants}: need at least 1")
    parts, kv = tenants(args.scenario, args.tenants, args.outputs)
    args.out.mkdir(parents=True, exist_ok=True)
    source = f"{args.scenario} (E1 full lengths), seeds 0..{args.tenants - 1} as tenants"
    write_canonical(Trace(name=f"{args.scenario}-x{args.tenants}", source=source,
                          requests=overlay(parts), hash_block_size=512), args.out / "fleet.jsonl")
    for k, part in enumerate(parts):
        write_canonical(Trace(name=f"{args.scenario}-t{k}", source=f"{args.scenario} seed {k}",
                              requests=part, hash_block_size=512), args.out / f"tenant-{k}.jsonl")
    (args.out / "kv_blocks").write_text(f"{kv}\n")
    print(sum(len(p) for p in parts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
