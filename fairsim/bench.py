"""``fairsim bench``: simulator speed and peak memory per policy.

Each policy runs in a fresh process (spawned), so its peak resident memory (``ru_maxrss``) is its
own: trace loading + engine + result tables. Figures printed per policy:

- ``sim_time_s``: simulated span, first arrival to last finish (s);
- ``wall_time_s``: wall time of the simulation itself, trace loading excluded (s);
- ``speed_x``: ``sim_time_s / wall_time_s``, simulated seconds per wall second;
- ``requests_per_wall_s``: requests simulated per wall second;
- ``peak_mib``: peak resident memory of the process (MiB).

A line above the table names the profile, the KV capacity (blocks, tokens) and the block size, which
``bench.json`` also records per policy (``profile``, ``kv_tokens``, ``kv_blocks``, ``block_size``).
With ``--out DIR`` the figures are also written to ``DIR/bench.json``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import resource
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any


def bench_one(args: argparse.Namespace, name: str) -> dict[str, Any]:
    """Load, shape and simulate in this process; return the figures (run in a child)."""
    from fairsim.cli import engine_config, load_requests, params_for, parse_params
    from fairsim.costmodel import load_profile
    from fairsim.metrics import summarize
    from fairsim.policies import make_policy
    from fairsim.sim import simulate

    t0 = time.perf_counter()
    profile = load_profile(args.profile)
    _, requests = load_requests(args)
    load_s = time.perf_counter() - t0
    result = simulate(requests, make_policy(name, profile, **params_for(name, parse_params(args.param))), profile,
                      engine_config(args, profile), replay=args.replay, think_scale=args.think_scale)
    summary = summarize(result.requests, result.steps)
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return {
        "requests": summary["requests"],
        "steps": summary["steps"],
        "sim_time_s": summary["sim_time_s"],
        "wall_time_s": result.wall_time_s,
        "speed_x": summary["sim_time_s"] / result.wall_time_s,
        "requests_per_wall_s": summary["requests"] / result.wall_time_s,
        "peak_mib": peak_kb / 1024.0,
        "load_time_s": load_s,
        "ttft_p50_s": summary["ttft_p50_s"],
        "ttft_p99_s": summary["ttft_p99_s"],
        "profile": profile.name,
        "kv_tokens": result.kv_blocks * result.block_size,
        "kv_blocks": result.kv_blocks,
        "block_size": result.block_size,
    }


def cmd_bench(args: argparse.Namespace, names: list[str]) -> int:
    """Run ``bench_one`` for each policy in its own spawned process and print the figures."""
    from fairsim.cli import check_policies, parse_params
    from fairsim.costmodel import load_profile
    from fairsim.io import atomic_write_text, check_writable_dir

    if args.out is not None:
        check_writable_dir(args.out)
    if args.slo:
        raise ValueError("--slo: bench measures simulator speed; use run/compare for goodput")
    check_policies(names, load_profile(args.profile), parse_params(args.param))
    rows: dict[str, dict[str, Any]] = {}
    ctx = multiprocessing.get_context("spawn")
    try:
        for name in names:
            with ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:
                rows[name] = pool.submit(bench_one, args, name).result()
            print(f"bench: {name} done in {rows[name]['wall_time_s']:.1f} s", file=sys.stderr)
    except KeyboardInterrupt:  # keep the policies that finished (fairsim.cli.main exits 130)
        if args.out is not None and rows:
            atomic_write_text(args.out / "bench.json", json.dumps(rows, indent=2) + "\n")
        raise
    if args.out is not None:
        atomic_write_text(args.out / "bench.json", json.dumps(rows, indent=2) + "\n")
    if args.format == "json":
        print(json.dumps(rows, indent=2))
        return 0
    first = next(iter(rows.values()))
    print(f"profile {first['profile']}; KV cache {first['kv_blocks']:,} blocks x {first['block_size']} tokens = "
          f"{first['kv_tokens']:,} tokens; block size {first['block_size']}")
    header = f"{'policy':<18}{'requests':>9}{'steps':>9}{'sim s':>11}{'wall s':>9}{'speed x':>10}{'req/s':>10}{'peak MiB':>10}"
    print(header)
    for name, r in rows.items():
        print(f"{name:<18}{r['requests']:>9d}{r['steps']:>9d}{r['sim_time_s']:>11.1f}"
              f"{r['wall_time_s']:>9.2f}{r['speed_x']:>10.0f}{r['requests_per_wall_s']:>10.0f}"
              f"{r['peak_mib']:>10.0f}")
    return 0
