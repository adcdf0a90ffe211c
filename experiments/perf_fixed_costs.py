"""CPU of a run's two largest fixed costs, compiled twins against their Python references.

Issue 37 (docs/performance.md, "The offered load and the Mooncake rows, compiled"): times
``read_trace`` and ``offered_load`` on a trace, alternating calls with and without
``FAIRSIM_PURE_PYTHON=1`` in one process (garbage collection off, so the calls are compared and
not the collector), and prints the median CPU milliseconds of each.

    python -m experiments.perf_fixed_costs --trace ../shared/data/traces/conversation_trace.jsonl
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time

from fairsim.compiled import PURE_PYTHON_ENV
from fairsim.costmodel import DEFAULT_PROFILE, load_profile
from fairsim.io import plural
from fairsim.traces import load_trace
from fairsim.traces.offered import offered_load


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="perf_fixed_costs", description=__doc__.splitlines()[0])
    parser.add_argument("--trace", required=True, help="a trace file (any format fairsim reads)")
    parser.add_argument("--repeat", type=int, default=9, help="alternating pairs of calls, 1-1000 (default 9)")
    parser.add_argument("--budget", type=int, default=2048, help="step token budget, >= 1 (default 2048)")
    args = parser.parse_args(argv)
    # The project's error contract: one line naming the option or the file, exit 2.
    if not 1 <= args.repeat <= 1000:
        return _fail(f"--repeat {args.repeat}: need 1 to 1000")
    if args.budget < 1:
        return _fail(f"--budget {args.budget}: need >= 1 token per step")
    profile = load_profile(DEFAULT_PROFILE)
    try:
        requests = load_trace(args.trace).requests
    except (ValueError, OSError) as exc:  # (TraceFormatError is a ValueError: file, line and field)
        return _fail(str(exc))
    times: dict[tuple[str, str], list[float]] = {}
    gc.disable()
    for _ in range(args.repeat):
        for kind in ("compiled", "python"):
            if kind == "python":
                os.environ[PURE_PYTHON_ENV] = "1"
            try:
                t0 = time.process_time()
                load_trace(args.trace)
                t1 = time.process_time()
                offered_load(requests, profile, args.budget)
                t2 = time.process_time()
            finally:
                os.environ.pop(PURE_PYTHON_ENV, None)
            times.setdefault(("read_trace", kind), []).append(t1 - t0)
            times.setdefault(("offered_load", kind), []).append(t2 - t1)
            gc.collect()
    print(f"{len(requests):,} requests; median CPU ms of {plural(args.repeat, 'call')} each")
    print(f"{'part':<14}{'python':>10}{'compiled':>10}")
    for part in ("read_trace", "offered_load"):
        py, c = (statistics.median(times[(part, k)]) * 1000 for k in ("python", "compiled"))
        print(f"{part:<14}{py:>10.1f}{c:>10.1f}")
    return 0


def _fail(message: str) -> int:
    print(f"perf_fixed_costs: error: {message}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
