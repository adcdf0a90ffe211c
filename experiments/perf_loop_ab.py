"""The simulation loop's CPU time under two source trees, their processes alternated.

A/B check of a change to the loop (docs/performance.md): each round runs one process per tree
(``PYTHONPATH=TREE``, so each tree's own compiled modules load), and each process runs the same
``fairsim run`` command ``--runs`` times in a row, timing only ``fairsim.run.run_one`` (the
``Engine`` set-up and run) in CPU seconds (``time.process_time``). CPU time, not wall time: on
this 2-core machine other tenants move wall time by 20-40 % within a minute. The rounds alternate
the trees, so a slow phase of the machine falls on both. Prints every figure, then each tree's
median and the ratio of the medians (B over A).

    python -m experiments.perf_loop_ab --trees /tmp/base . --rounds 4 --runs 4 -- \\
        --policy fairway --trace ../shared/data/traces/conversation_trace.jsonl

Everything after ``--`` is passed to ``fairsim run`` (``--format json`` is added). Each tree must
be built in place (``python setup.py build_ext --inplace``), or its sources run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

# Runs in the child: times run_one around the CLI's own path (same shaping, same policy set-up).
CHILD = r"""
import contextlib, io, sys, time
import fairsim.run as run
from fairsim.cli import main
runs, argv = int(sys.argv[1]), sys.argv[2:]
inner, cpu = run.run_one, []
def timed(*args, **kwargs):
    c0 = time.process_time()
    try:
        return inner(*args, **kwargs)
    finally:
        cpu.append(time.process_time() - c0)
run.run_one = timed
for _ in range(runs):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        code = main(["run", *argv, "--format", "json"])
    if code:
        sys.exit(f"fairsim run {' '.join(argv)}: exit {code}")
print(" ".join(repr(c) for c in cpu))
"""


def loop_cpu(tree: str, runs: int, argv: list[str]) -> list[float]:
    """CPU seconds of ``run_one`` in each of ``runs`` runs of ``fairsim run ARGV``, one process
    with ``tree`` first on the path. Raises ``CalledProcessError`` where the process fails."""
    env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
    # -P: no current directory first on the path, which would shadow TREE (a -c command's path
    # starts with it).
    out = subprocess.run([sys.executable, "-P", "-c", CHILD, str(runs), *argv], env=env, check=True,
                         capture_output=True, text=True).stdout
    return [float(x) for x in out.split()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trees", nargs=2, required=True, metavar=("A", "B"), help="two source trees")
    parser.add_argument("--rounds", type=int, default=4, help="processes per tree, alternated (4)")
    parser.add_argument("--runs", type=int, default=4, help="runs per process (4)")
    parser.add_argument("run_args", nargs=argparse.REMAINDER, help="-- then fairsim run's arguments")
    args = parser.parse_args(argv)
    run_args = args.run_args[1:] if args.run_args[:1] == ["--"] else args.run_args
    if not run_args:
        parser.error("give fairsim run's arguments after --")
    if args.rounds < 1 or args.runs < 1:
        parser.error("--rounds and --runs need an integer >= 1")
    got: dict[str, list[float]] = {tree: [] for tree in args.trees}
    for i in range(args.rounds):
        for tree in args.trees:
            cpu = loop_cpu(tree, args.runs, run_args)
            got[tree] += cpu
            print(f"round {i + 1} {tree}: " + " ".join(f"{c:.3f}" for c in cpu), flush=True)
    a, b = (statistics.median(got[tree]) for tree in args.trees)
    print(f"median loop CPU s: A {a:.3f}, B {b:.3f}; B/A {b / a:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
