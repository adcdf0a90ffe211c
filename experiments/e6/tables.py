"""E6 tables: one markdown table per (workload, N) from the runs the e6 scripts leave under OUT.

Layout read: ``OUT/WORKLOAD/nN/ROUTER/`` (one ``fairsim compare --format json --out`` per router:
``requests-POLICY.parquet`` and ``summary.json`` for the load imbalance); with ``--window W`` only
the requests whose ``window`` label is ``W``. ``OUT/WORKLOAD/nN/alone/tK/`` (optional): each tenant
on an engine of its own, pooled into a reference row ("one engine per tenant").

Cells: TTFT p50 / p99 in seconds (``np.percentile``, linear, as ``fairsim.metrics``); hit rate (of the
requests shown) and load imbalance (busiest instance's busy time over the mean) of the first policy (FCFS).
Run: ``python -m experiments.e6.tables OUT [--policies fcfs,lpm,fairway,suf] [--window spike]``
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

REFERENCE = "alone"


def p50_p99(ttft: pd.Series) -> str:
    """``"p50 / p99"`` of a TTFT column, seconds, two decimals."""
    p50, p99 = np.percentile(np.asarray(ttft, dtype=np.float64), [50, 99])
    return f"{p50:.2f} / {p99:.2f}"


def requests_of(run: Path, policy: str, window: str | None) -> pd.DataFrame:
    """A run folder's (or, for the reference, every tenant's pooled) requests, cut to ``window``."""
    files = sorted(run.glob(f"t*/requests-{policy}.parquet")) if run.name == REFERENCE \
        else [run / f"requests-{policy}.parquet"]
    reqs = pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)
    if window is None:
        return reqs
    if "window" not in reqs:
        raise SystemExit(f"{files[0]}: no window column; --window {window} needs a trace with window labels")
    return reqs[reqs["window"] == window]


def row(run: Path, policies: Sequence[str], window: str | None) -> str:
    """One router's (or the reference's) table row; the hit rate is of the requests shown."""
    first = requests_of(run, policies[0], window)
    hit = first["cached_tokens"].sum() / first["prompt_tokens"].sum()
    cells = [p50_p99(requests_of(run, p, window)["ttft_s"]) for p in policies]
    if run.name == REFERENCE:
        return "| one engine per tenant | " + " | ".join(cells) + f" | {hit:.3f} | – |"
    imbalance = json.loads((run / "summary.json").read_text())[policies[0]]["load_imbalance"]
    return f"| {run.name} | " + " | ".join(cells) + f" | {hit:.3f} | {imbalance:.3f} |"


def table(nd: Path, policies: Sequence[str], window: str | None) -> list[str]:
    """The markdown lines of one (workload, N) folder: routers by name, the reference last."""
    runs = sorted(d for d in nd.iterdir() if (d / "summary.json").is_file())
    if (nd / REFERENCE).is_dir():
        runs.append(nd / REFERENCE)
    head = "| router | " + " | ".join(f"{p} p50 / p99 s" for p in policies) \
        + f" | hit rate ({policies[0]}) | load imbalance ({policies[0]}) |"
    return [head, "|---|" + "---|" * (len(policies) + 2)] + [row(r, policies, window) for r in runs]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--policies", default="fcfs,lpm,fairway,suf")
    ap.add_argument("--window", help="only requests with this window label (e.g. spike)")
    args = ap.parse_args(argv)
    policies = args.policies.split(",")
    for work in sorted(d for d in args.out.iterdir() if d.is_dir()):
        for nd in sorted((d for d in work.iterdir() if d.is_dir() and d.name[1:].isdigit()),
                         key=lambda d: int(d.name[1:])):
            label = f", {args.window} window" if args.window else ""
            print(f"\n**{work.name}, {nd.name[1:]} instances{label}**\n")
            print("\n".join(table(nd, policies, args.window)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
