"""The pure-Python floor of one `fairsim run` on a Mooncake trace, and fairsim's distance from it.

Issue 37 (docs/performance.md, "Dynamo as the peer"): the least any pure-Python simulator of this
job must do is read the trace, run an LRU over every block of every prompt, and iterate once per
engine step. This script times exactly that, in one fresh process each (so the interpreter's start
counts, as it does for a `fairsim run`), then times `fairsim run` on the same trace with the same
block count, interleaved, and prints fairsim's CPU time over the floor's (medians of ``--repeat``).

The floor's parts (our own definition, the issue's wording):

- parse: each line with orjson (fairsim's own reader also checks every field);
- LRU: an ``OrderedDict`` of ``--kv-blocks`` entries over every request's ``hash_ids`` in arrival
  order: a hit moves the key to the back, a miss inserts it and evicts the front when full;
- steps: ``--steps`` empty iterations (pass fairsim's step count, printed by ``fairsim bench``).

    python -m experiments.perf_floor --trace ../shared/data/traces/conversation_trace.jsonl \\
        --steps 67659 -- --policy fcfs

Everything after ``--`` is passed to ``fairsim run`` (``--trace`` and ``--format json`` are added).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys

FLOOR = r"""
import sys
from collections import OrderedDict
import orjson

path, kv_blocks, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with open(path, "rb") as f:
    rows = [orjson.loads(line) for line in f if line.strip()]
rows.sort(key=lambda r: r["timestamp"])
lru = OrderedDict()
hits = 0
for r in rows:
    for key in r["hash_ids"]:
        if key in lru:
            lru.move_to_end(key)
            hits += 1
        else:
            lru[key] = None
            if len(lru) > kv_blocks:
                lru.popitem(last=False)
t = 0.0
for _ in range(steps):
    t += 1.0
print(len(rows), hits)
"""


def child_cpu(cmd: list[str]) -> float:
    """CPU seconds (user + system) of one child process running ``cmd`` (raises on failure)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    rest: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, rest = argv[:i], argv[i + 1:]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", required=True, help="a Mooncake JSONL trace")
    parser.add_argument("--kv-blocks", type=int, default=451, help="LRU size in blocks (fairsim's default 451)")
    parser.add_argument("--steps", type=int, required=True, help="engine steps of the fairsim run")
    parser.add_argument("--repeat", type=int, default=5, help="interleaved pairs (median)")
    args = parser.parse_args(argv)
    floor_cmd = [sys.executable, "-c", FLOOR, args.trace, str(args.kv_blocks), str(args.steps)]
    fairsim_cmd = [sys.executable, "-m", "fairsim", "run", "--trace", args.trace, "--format", "json", *rest]
    floors, runs = [], []
    for _ in range(args.repeat):
        floors.append(child_cpu(floor_cmd))
        runs.append(child_cpu(fairsim_cmd))
    floor, run = statistics.median(floors), statistics.median(runs)
    print(f"floor {floor:.3f} CPU-s, fairsim {run:.3f} CPU-s ({' '.join(rest)}): {run / floor:.2f}x the floor "
          f"(medians of {args.repeat} interleaved pairs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
