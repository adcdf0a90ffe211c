"""Record what ``fairsim`` commands print, return and write, to compare two versions of the code.

A restructure of the command line must leave every command's stdout, stderr, exit status and
``--out`` files byte-identical. This script runs a list of commands (the README's examples on the
shipped public traces, each command's ``--help``, and error cases) as ``python -m fairsim ...``
processes against a source tree, and stores each case as ``NAME.stdout``, ``NAME.stderr``,
``NAME.rc`` and ``NAME.files/`` (what the command wrote to its ``{out}`` folder)::

    python tests/cli_snapshot.py record REPO SNAPSHOT [--cases quick|full]
    python tests/cli_snapshot.py compare SNAPSHOT_A SNAPSHOT_B

``REPO`` is the source tree to import fairsim from (``PYTHONPATH``) and the working folder of
each command, so ``../shared/data/traces`` resolves as in the README. ``compare`` lists every
file that differs (with a unified diff for text) and exits 1 if any does.

Masked before storing, as they change from run to run of the same code (and only these):

- ``wall_time_s`` values in JSON (stdout and ``summary.json``) -> ``"<wall>"``;
- ``block_pool`` in ``run.json`` (``"compiled"`` where the extension is built, else ``"python"``)
  and ``bound_lines`` (``"compiled"`` or ``"numpy"``)
  -> ``"<pool>"``;
- the ``wall s`` column of ``run``/``compare`` tables (the last figure of each row) -> ``<wall>``;
- the run ids on ``sweep``'s ``computed:`` line, listed in the order the parallel workers
  finished them -> sorted;
- the output folder's path -> ``{out}``, the source tree's path -> ``{repo}``;
- ``sweep``: its run ids hash a digest of fairsim's source (``fairsim.sweep.runspec.code_digest``),
  so any change of code changes them; the sweep cases run with that digest pinned to
  ``"snapshot"`` (a ``sitecustomize`` on ``PYTHONPATH``, so the worker processes get it too).

``tests/test_cli_snapshot.py`` runs the quick cases against the snapshot stored in
``tests/data/cli_snapshot`` (record it again with ``--cases quick`` after an intended change of
output).
"""

from __future__ import annotations

import argparse
import difflib
import filecmp
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

CONV = "../shared/data/traces/conversation_trace.jsonl"
AZURE = "../shared/data/traces/AzureLLMInferenceTrace_code.csv"


@dataclass(frozen=True)
class Case:
    """One command: ``name`` (file stem), ``argv`` (after ``fairsim``; ``{out}`` is the case's
    output folder), whether its stdout holds a ``run``/``compare`` table (``table``) and whether
    ``{out}`` exists before it runs (``premade``), and whether the sweep's code digest is pinned
    (``pin_code``, module docstring)."""

    name: str
    argv: tuple[str, ...]
    table: bool = False
    premade: bool = False
    pin_code: bool = False


def case(name: str, command: str, table: bool = False, premade: bool = False) -> Case:
    """``Case`` of a command line (split on blanks); ``premade``: create ``{out}`` before it runs."""
    return Case(name, tuple(command.split()), table, premade, pin_code=command.startswith("sweep"))


PIN_CODE = """import fairsim.sweep.runspec as runspec
runspec.code_digest = lambda: "snapshot"
"""


QUICK = [
    case("version", "--version"),
    case("help", "--help"),
    case("help-run", "run --help"),
    case("help-accept", "accept --help"),
    case("compare-default", "compare", table=True),
    case("run-conv-out", f"run --trace {CONV} --policy fairway --max-requests 400 --out {{out}}", table=True),
    case("analyze-conv", f"analyze {CONV} --max-requests 600"),
    case("accept-conv", f"accept {CONV} --policy fairway --max-requests 600 --window-length 30"),
    # Error cases: unknown policy, bad option value, unknown option, bad trace path, a policy
    # parameter scoped to a policy not run, a capacity too small.
    case("err-unknown-policy", "run --policy nosuch --max-requests 10"),
    case("err-bad-option-value", "run --budget abc"),
    case("err-unknown-option", "compare --no-such-option 1"),
    case("err-trace-missing", "run --trace /nonexistent/trace.jsonl"),
    case("err-scoped-param", "compare --policies fcfs,lpm --param fairway.fast_weight=2"),
    case("err-kv-too-small", f"run --trace {CONV} --kv-blocks 2 --max-requests 10"),
]

FULL = QUICK + [
    *[case(f"help-{c}", f"{c} --help") for c in
      ("compare", "bench", "analyze", "sweep", "convert", "replay", "equivalence", "fidelity",
       "hook-overhead", "calibrate")],
    case("compare-conv-json", f"compare --trace {CONV} --policies fcfs,lpm,fairway --max-requests 400 "
                              f"--format json --out {{out}}"),
    case("analyze-conv-out", f"analyze {CONV} --max-requests 600 --out {{out}}"),
    case("accept-conv-out", f"accept {CONV} --policy fairway --max-requests 600 --window-length 30 --out {{out}}"),
    case("err-trace-format", f"run --trace {AZURE} --trace-format mooncake"),
    case("err-policies-empty", "compare --policies fcfs,,lpm"),
    case("err-accept-no-policy", f"accept {CONV}"),
    case("err-analyze-param", f"analyze {CONV} --param fast_weight=2"),
    case("err-bench-repeat", "bench --repeat 0"),
    case("err-no-command", ""),
    case("run-conv-target-load", f"run --trace {CONV} --target-load 0.9 --max-requests 2000", table=True),
    case("compare-colocated", f"compare --mode colocated --trace {CONV} --max-requests 500 "
                              f"--slo ttft=2,tpot=0.1 --out {{out}}", table=True),
    case("compare-all", f"compare --policies all --trace {CONV} --max-requests 300", table=True),
    case("run-param", "run --policy fairway --param fast_weight=8 --format json"),
    case("run-replay-warnings", "run --trace ../shared/data/traces/synthetic_trace.jsonl --replay closed "
                                "--window-end 120 --skip-long --out {out}", table=True),
    case("run-think-open", f"run --trace {CONV} --replay open --think-scale 2 --max-requests 50", table=True),
    case("analyze-conv-full", f"analyze {CONV} --out {{out}}"),
    case("accept-conv-json", f"accept {CONV} --policy fairway --time-scale 4 --format json --plots {{out}}"),
    case("convert-azure", f"convert {AZURE} {{out}}/azure.jsonl", premade=True),
    case("sweep-demo", "sweep examples/sweep-demo.toml --out {out}"),
    case("sweep-dry", "sweep examples/sweep-traces.toml --dry-run --out {out}"),
    case("err-sweep-missing", "sweep /nonexistent/spec.toml"),
    case("err-equivalence-policy", "equivalence --policies nosuch"),
    case("err-replay-policy", "replay --engine vllm --policy nosuch"),
]

WALL_JSON = re.compile(r'("wall_time_s":\s*)-?[0-9.eE+-]+')
BLOCK_POOL_JSON = re.compile(r'("block_pool":\s*)"(?:compiled|python)"')
BOUND_LINES_JSON = re.compile(r'("bound_lines":\s*)"(?:compiled|numpy)"')
WALL_COLUMN = re.compile(r"(?m)(?<=\s)\d+\.\d\d$")
SWEEP_DONE = re.compile(r"(?m)^(computed: )(.*)$")


def mask(text: str, out: Path, repo: Path, table: bool) -> str:
    """``text`` with the run-to-run varying parts replaced (module docstring)."""
    text = text.replace(str(out), "{out}").replace(str(repo), "{repo}")
    text = WALL_JSON.sub(r'\1"<wall>"', text)
    text = BLOCK_POOL_JSON.sub(r'\1"<pool>"', text)
    text = BOUND_LINES_JSON.sub(r'\1"<lines>"', text)
    if table:
        text = WALL_COLUMN.sub("<wall>", text)
    return SWEEP_DONE.sub(lambda m: m[1] + " ".join(sorted(m[2].split())), text)


def record(repo: Path, snapshot: Path, cases: list[Case]) -> None:
    """Run ``cases`` against the source tree ``repo``; store their masked output in ``snapshot``."""
    repo = repo.resolve()
    snapshot.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(repo), "COLUMNS": "100", "PYTHONHASHSEED": "0"}
    for c in cases:
        with tempfile.TemporaryDirectory(prefix="fairsim-snap-") as tmp:
            out = Path(tmp) / "out"
            argv = [a.replace("{out}", str(out)) for a in c.argv]
            if c.premade:
                out.mkdir()
            run_env = env
            if c.pin_code:
                (Path(tmp) / "sitecustomize.py").write_text(PIN_CODE)
                run_env = {**env, "PYTHONPATH": f"{repo}{os.pathsep}{tmp}"}
            done = subprocess.run([sys.executable, "-m", "fairsim", *argv], cwd=repo, env=run_env,
                                  capture_output=True, text=True, stdin=subprocess.DEVNULL)
            (snapshot / f"{c.name}.stdout").write_text(mask(done.stdout, out, repo, c.table))
            (snapshot / f"{c.name}.stderr").write_text(mask(done.stderr, out, repo, False))
            (snapshot / f"{c.name}.rc").write_text(f"{done.returncode}\n")
            files = snapshot / f"{c.name}.files"
            shutil.rmtree(files, ignore_errors=True)
            if out.exists():
                shutil.copytree(out, files)
                for path in files.rglob("*.json"):
                    path.write_text(mask(path.read_text(), out, repo, False))
        print(f"{c.name}: exit {done.returncode}", file=sys.stderr)


def _same_parquet(a: Path, b: Path) -> bool:
    """Same columns, rows and ``fairsim`` schema metadata; the pandas and pyarrow version stamps
    that pyarrow also writes into the file are the installed libraries', not fairsim's output."""
    import pyarrow.parquet as pq

    ta, tb = pq.read_table(a), pq.read_table(b)
    return ta.equals(tb) and (ta.schema.metadata or {}).get(b"fairsim") == (tb.schema.metadata or {}).get(b"fairsim")


def differences(a: Path, b: Path) -> list[str]:
    """What differs between snapshot folders ``a`` and ``b``: one entry per file (a diff for text)."""
    found: list[str] = []
    names_a = {p.relative_to(a) for p in a.rglob("*") if p.is_file()}
    names_b = {p.relative_to(b) for p in b.rglob("*") if p.is_file()}
    for name in sorted(names_a ^ names_b):
        found.append(f"{name}: only in {a if name in names_a else b}")
    for name in sorted(names_a & names_b):
        if filecmp.cmp(a / name, b / name, shallow=False):
            continue
        if name.suffix == ".parquet" and _same_parquet(a / name, b / name):
            continue
        try:
            diff = difflib.unified_diff((a / name).read_text().splitlines(), (b / name).read_text().splitlines(),
                                        str(a / name), str(b / name), lineterm="", n=1)
            found.append("\n".join(list(diff)[:40]))
        except UnicodeDecodeError:
            found.append(f"{name}: binary files differ")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="action", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("repo", type=Path)
    rec.add_argument("snapshot", type=Path)
    rec.add_argument("--cases", choices=("quick", "full"), default="full")
    cmp = sub.add_parser("compare")
    cmp.add_argument("a", type=Path)
    cmp.add_argument("b", type=Path)
    args = parser.parse_args(argv)
    if args.action == "record":
        record(args.repo, args.snapshot, QUICK if args.cases == "quick" else FULL)
        return 0
    found = differences(args.a, args.b)
    for item in found:
        print(item)
    print(f"{len(found)} files differ" if found else "identical")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
