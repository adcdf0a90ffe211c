"""Run E1-E4 one after the other and report the total wall time.

Run: ``python -m experiments.run_all [--out results] [--tiny]``
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from experiments import e1_spike, e2_scenarios, e3_flood, e4_ablation

EXPERIMENTS = {"e1": e1_spike, "e2": e2_scenarios, "e3": e3_flood, "e4": e4_ablation}


def main(argv: Sequence[str] | None = None) -> int:
    """Run every experiment into ``OUT/eN``; print each one's and the total wall time."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("results"))
    p.add_argument("--tiny", action="store_true")
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    for name, module in EXPERIMENTS.items():
        t = time.perf_counter()
        module.main(["--out", str(args.out / name)] + (["--tiny"] if args.tiny else []))
        print(f"== {name}: {time.perf_counter() - t:.1f} s", flush=True)
    print(f"== E1-E4 total: {time.perf_counter() - t0:.1f} s wall")
    return 0


if __name__ == "__main__":
    sys.exit(main())
