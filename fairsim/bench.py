"""``fairsim bench``: simulator speed and peak memory per policy, whole process and loop alone.

Each policy runs as its own fresh process, ``python -m fairsim run ... --policy NAME --format
json`` with the same trace, shaping and engine options, so every figure is that of a user's run:

- ``process_s``: wall seconds of the whole process (interpreter start, imports, trace loading,
  simulation, summary); ``requests_per_s``: requests / ``process_s``;
- ``loop_s``: wall seconds of the simulation loop alone (``SimResult.wall_time_s``);
  ``loop_requests_per_s``: requests / ``loop_s``;
- ``peak_mib``: peak resident memory of that process (``ru_maxrss`` from ``os.wait4``, MiB; the
  process is started by a bare interpreter, ``_SPAWNER``, so bench's own memory is not in it);
- ``sim_time_s``, ``steps``, ``requests``: from the run's summary.

``--repeat N`` (default 3) runs each policy N times and keeps the run with the median process time.
``--tile N`` concatenates N copies of the trace, each shifted by the trace's span plus its mean
gap and with its own request ids, sessions and prefix content (hash ids offset), to measure how
cost per request grows with the trace length: each policy then also runs on the trace itself,
alternating with the tiled run (``--repeat`` times each), and the table gives the cost per
request over the untiled run's (``vs x1``, whole process; ``loop vs x1``): the median of the
ratios of the pairs run one after the other.

``--compare PATH`` also runs an installed peer simulator on the same (shaped) requests in the
same call and prints fairsim's requests per wall-second over the peer's, measured as whole
processes in interleaved pairs: the peer is prepared once before the first policy runs (its
files; Dynamo's probe), then runs once right before each policy run, and each policy's ratio is
the median over its ``--repeat`` pairs of the pair's ratio (``Peer``, ``_rounds``), so the
machine's drift over the call moves it little. ``--compare dynamo``:
NVIDIA Dynamo's offline replay (``fairsim.bench_dynamo``, which says how it is run and aligned),
with its TTFT p50/p99 beside fairsim's; where Dynamo is not installed a line says it is skipped and
fairsim's figures are printed as usual. Otherwise the peer is
sched-sim (``pip install sched-sim``, or the ``bench`` extra); PATH is its executable (or just
``sched-sim``). The peer gets a JSON trace of the same arrival times and prompt lengths with one
output token per request (fairsim's default engine is prefill-only; with ``--mode colocated`` the
trace's output lengths), its ``chunked`` scheduler
with the same token budget; it has no prefix identity, so it computes every prompt cold.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import math
import os
import re
import shutil
import statistics
import sys
import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from fairsim.timed import _SPAWNER, _timed  # noqa: F401  (tests and the Dynamo peer use them)

#: Options of ``bench`` that a ``run`` child does not take.
MAX_TILED_REQUESTS = 10_000_000
"""Most requests ``--tile`` may build (memory: a request costs about 1 KB in the simulator)."""

BENCH_ONLY = ("policies", "out", "format", "compare", "repeat", "tile", "vs_one_engine")

SCHED_SIM_INSTALL = 'pip install sched-sim (or pip install -e ".[bench]")'


def run_argv(args: argparse.Namespace) -> list[str]:
    """The ``fairsim run`` options that reproduce ``args``' trace, shaping and engine settings.

    Every option of ``fairsim.options.add_common``, ``fairsim.cli_fleet.add_fleet_options`` and
    ``fairsim.cli_disagg.add_disagg_options`` whose value differs from its default is passed on
    (``--time-scale`` and ``--target-load`` as ``args`` holds them: ``fairsim bench`` passes a
    plain run's ``--target-load`` as given, and a tiled or one-engine run's resolved scale;
    ``--mode disaggregated`` as such, though ``disagg_spec`` has set ``args.mode`` to
    ``colocated``).
    """
    from fairsim.cli_disagg import add_disagg_options
    from fairsim.cli_fleet import add_fleet_options
    from fairsim.options import add_common

    probe = argparse.ArgumentParser(add_help=False)
    add_common(probe)
    add_fleet_options(probe)
    add_disagg_options(probe)
    argv: list[str] = []
    for action in probe._actions:
        if not action.option_strings or action.dest in BENCH_ONLY:
            continue
        value = getattr(args, action.dest, action.default)
        if action.dest == "mode" and getattr(args, "disaggregated", None) is not None:
            value = "disaggregated"
        if value == action.default or value is None:
            continue
        opt = max(action.option_strings, key=len)
        if isinstance(action, argparse._StoreTrueAction):
            argv.append(opt)
        elif isinstance(action, argparse._AppendAction):
            for item in value:
                argv += [opt, str(item)]
        else:
            argv += [opt, str(value)]
    return argv


def tile_trace(trace: Any, copies: int) -> Any:
    """``copies`` concatenated copies of ``trace`` (a ``Trace``), each shifted in time.

    Copy ``k`` (0-based) arrives ``k x (span + mean gap)`` seconds later, its request ids, session
    ids and ``after`` links get the suffix ``#k``, and its hash ids / segment ids are offset past
    the previous copy's, so copies share no prefix content (copy 0 is the trace itself).

    Raises:
        ValueError: ``copies`` < 1.
    """
    if copies < 1:
        raise ValueError(f"--tile {copies}: need an integer >= 1")
    reqs = trace.requests
    if copies == 1:
        return trace
    times = [r.arrival_time for r in reqs]
    span = max(times) - min(times)
    gap = span / max(len(reqs) - 1, 1)
    shift = span + (gap if gap > 0 else 1.0)
    top = 1 + max((h for r in reqs for h in r.block_hashes), default=0)
    top = max(top, 1 + max((c for r in reqs for c, _ in r.segments), default=0))
    out = []
    for k in range(copies):
        sfx = "" if k == 0 else f"#{k}"
        for r in reqs:
            if k == 0:
                out.append(r)
                continue
            out.append(replace(
                r, request_id=r.request_id + sfx, arrival_time=r.arrival_time + k * shift,
                block_hashes=tuple(h + k * top for h in r.block_hashes),
                segments=tuple((c + k * top, n) for c, n in r.segments),
                session_id=None if r.session_id is None else r.session_id + sfx,
                after=None if r.after is None else r.after + sfx, labels=dict(r.labels)))
    return replace(trace, name=f"{trace.name}x{copies}", requests=tuple(out), locations={})


def child_argv(argv: list[str], name: str) -> list[str]:
    """``argv`` (``run_argv``'s) for policy ``name``'s own run: a ``--param POLICY.KEY=VALUE``
    scoped to another policy is left out (``fairsim run`` refuses a scope it does not run), as
    ``compare`` gives each policy only its own and the unscoped parameters."""
    from fairsim.options import param_scope

    out: list[str] = []
    i = 0
    while i < len(argv):
        if argv[i] == "--param" and i + 1 < len(argv):
            scope = param_scope(argv[i + 1].partition("=")[0])
            if scope is None or scope == name:
                out += argv[i:i + 2]
            i += 2
            continue
        out.append(argv[i])
        i += 1
    return out


def child_interpreter() -> list[str]:
    """How a policy's run is started: ``[python]``, with ``-P`` unless this fairsim's package
    sits in the working folder.

    ``python -m`` puts the working folder first on the module path, so a folder there named
    ``fairsim`` that is not this package (a clone's top folder, seen from its parent) was imported
    instead of an editable install's package (whose finder is consulted after the path), as a
    namespace package, and every run failed. ``-P`` (Python 3.11) leaves the working folder out,
    and the child finds the package where this process did (its install, or ``PYTHONPATH``,
    which it inherits); where the package is the working folder's own (a checkout run without
    installing), the working folder is that path."""
    import fairsim

    root = Path(fairsim.__file__).resolve().parent.parent
    return [sys.executable] if root == Path.cwd().resolve() else [sys.executable, "-P"]


def bench_policy(argv: list[str], name: str) -> dict[str, Any]:
    """One fresh ``fairsim run`` process for policy ``name``; its figures (module docstring).

    Raises:
        StatusError: The run failed: its own error lines (those that start ``fairsim:``, the
            prefix dropped; else its last line) under the policy's name, and its exit status.
    """
    from fairsim.errors import StatusError

    cmd = [*child_interpreter(), "-m", "fairsim", "run", *child_argv(argv, name), "--policy", name, "--format", "json"]
    wall, peak, code, out, err = _timed(cmd)
    if code != 0:
        lines = err.strip().splitlines()
        said = [ln.removeprefix("fairsim: ") for ln in lines if ln.startswith("fairsim: ")] or lines[-1:]
        status = code if code > 0 else 1  # killed by a signal: a failure, not bad input
        raise StatusError(f"bench: policy {name!r} (its fairsim run exited {code}): "
                            + " | ".join(said)[-800:], status)
    summary = json.loads(out)[name]
    n = summary["requests"]
    loop = summary["wall_time_s"]
    return {
        "requests": n, "steps": summary["steps"], "sim_time_s": summary["sim_time_s"],
        "process_s": wall, "requests_per_s": n / wall,
        "loop_s": loop, "loop_requests_per_s": n / loop if loop > 0 else float("inf"),
        "peak_mib": peak, "ttft_p50_s": summary["ttft_p50_s"], "ttft_p99_s": summary["ttft_p99_s"],
        "profile": summary["profile"], "kv_tokens": summary["kv_tokens"],
        "kv_blocks": summary["kv_blocks"], "block_size": summary["block_size"],
    }


def find_peer(path: str) -> str:
    """The peer's executable: ``path`` itself or found on ``PATH``.

    Raises:
        MissingDependencyError: Not found (exit 2 with the install command), or a file that is
            not executable.
    """
    from fairsim.deps import MissingDependencyError

    if os.path.isdir(path):
        raise MissingDependencyError(f"--compare {path}: is a folder; give the peer's executable, e.g. sched-sim")
    if os.sep in path and os.path.isfile(path) and not os.access(path, os.X_OK):
        raise MissingDependencyError(f"--compare {path}: the file is not executable (chmod +x it, or give "
                                     f"the peer's installed command, e.g. sched-sim)")
    found = path if os.sep in path and os.access(path, os.X_OK) else shutil.which(path)
    if found is None and os.path.isfile(path):  # a bare name of a file here, as a shell reads it
        why = ("the file is not executable (chmod +x it)" if not os.access(path, os.X_OK)
               else f"a bare name is looked up on PATH only; give it as .{os.sep}{path}")
        raise MissingDependencyError(f"--compare {path}: {why}, or give the peer's installed command, "
                                     f"e.g. sched-sim")
    if found is None or not os.path.isfile(found):
        raise MissingDependencyError(
            f"--compare {path}: no such executable; the peer simulator sched-sim is installed with "
            f"{SCHED_SIM_INSTALL}")
    return found


#: sched-sim's ``trace`` table row ``Completed / Total | N / N`` (rich box characters between).
_PEER_COUNT = re.compile(r"Completed / Total\D*?(\d+)\s*/\s*(\d+)")


def prepare_peer(peer: str, requests: list, budget: int, tmp: Path, decode: bool = False) -> list[str]:
    """Write ``requests`` as sched-sim's trace, ``tmp/sched-sim-trace.json``; the command of its
    ``trace`` run on it.

    Each request gets one output token, or with ``decode`` (fairsim's ``--mode colocated``) its
    trace ``output_len``.
    """
    from fairsim.io import atomic_write_text

    path = tmp / "sched-sim-trace.json"
    atomic_write_text(path, json.dumps([
        {"id": r.request_id, "timestamp": r.arrival_time, "prompt_tokens": r.prompt_len,
         "output_tokens": r.output_len if decode else 1}
        for r in requests]))
    return [peer, "trace", str(path), "--scheduler", "chunked", "--token-budget", str(budget), "--no-gantt"]


def run_peer(cmd: list[str], n: int) -> dict[str, Any]:
    """One timed run of sched-sim's ``cmd`` (``prepare_peer``'s) on its trace of ``n`` requests;
    its figures.

    Raises:
        ValueError: The peer failed, or exited 0 without printing TTFT figures and a
            ``Completed / Total`` count of ``n`` (not sched-sim's ``trace`` command run on this
            trace: its time would be no peer's figure).
    """
    peer = cmd[0]
    try:
        wall, peak, code, out, err = _timed(cmd)
    except OSError as exc:  # e.g. a script without a shebang, or one naming a missing interpreter
        raise ValueError(f"bench: --compare {peer}: cannot run it: {exc.strerror}") from None
    if code != 0:
        said = " | ".join(err.strip().splitlines())[-800:] or "(nothing on stderr)"  # one line
        raise ValueError(f"bench: --compare {peer}: its trace command exited {code}: {said}")
    counted = _PEER_COUNT.search(out)
    if "TTFT" not in out or counted is None or int(counted.group(2)) != n:
        said = (f"counted {counted.group(2)} requests, not the {n:,} it was given" if counted
                else "printed no TTFT figures and no 'Completed / Total' count")
        raise ValueError(f"bench: --compare {peer}: its trace command exited 0 but {said}, so it is not "
                         f"sched-sim's trace command run on this trace (which prints TTFT p50/p90/p99 and "
                         f"Completed / Total); {SCHED_SIM_INSTALL}")
    return {"requests": n, "process_s": wall, "requests_per_s": n / wall, "peak_mib": peak,
            "command": " ".join(cmd)}


def _median_row(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median process time (the lower middle one of an even count), with every
    run's process time when there are several."""
    runs = sorted(runs, key=lambda r: r["process_s"])
    row = runs[(len(runs) - 1) // 2]
    if len(runs) > 1:
        row["process_s_runs"] = [r["process_s"] for r in runs]
        row["process_s_median"] = statistics.median(r["process_s"] for r in runs)
    return row


class PeerError(ValueError):
    """A peer run failed or disagreed with the peer's first run (``Peer.run``): raised after
    fairsim's finished rows are printed and written (exit 2, as any ``ValueError``)."""


#: The peer's figures that do not depend on the machine (its simulation is deterministic): every
#: run must give the first run's (``Peer.run``). Wall times, rates and peak memory vary.
PEER_FIXED = ("requests", "sim_time_s", "ttft_p50_s", "ttft_p99_s", "ttft_min_s", "speedup_ratio", "command")


class Peer:
    """A peer simulator prepared once (its files written, Dynamo's probe run) before the first
    policy runs, then run once before each policy run (``_rounds``); every run's row is kept.

    ``name``: its row's name (``dynamo``, ``sched-sim``); ``compare``: the ``--compare`` value
    that named it (for messages); ``run_once``: one timed run, returning its row
    (``process_s``, ``requests_per_s``, ...) or raising ``ValueError``.
    """

    def __init__(self, name: str, compare: str, run_once: Callable[[], dict[str, Any]]) -> None:
        self.name = name
        self.compare = compare
        self._run_once = run_once
        self.runs: list[dict[str, Any]] = []

    def run(self) -> dict[str, Any]:
        """One more timed run; its row.

        Raises:
            PeerError: The run failed, or one of its ``PEER_FIXED`` figures differs from the
                first run's (the message names the figure and both values).
        """
        try:
            row = self._run_once()
        except ValueError as exc:
            raise PeerError(str(exc)) from None
        if self.runs:
            first = self.runs[0]
            for key in PEER_FIXED:
                if key in first and not _same(first[key], row.get(key)):
                    raise PeerError(f"bench: --compare {self.compare}: its run {len(self.runs) + 1} gave {key} "
                                    f"{row.get(key)!r}, its first run {first[key]!r}; the peer's simulation "
                                    f"must give the same figures every run")
        self.runs.append(row)
        return row

    def row(self) -> dict[str, Any]:
        """The peer's row: its run with the median process time over all its runs (``_median_row``)."""
        return _median_row([dict(r) for r in self.runs])


def _same(a: Any, b: Any) -> bool:
    """``a == b``, NaN equal to NaN (a figure the peer did not report is NaN every run)."""
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


def _rounds(name: str, repeat: int, argv: list[str], argv_other: list[str] | None = None,
            peer: Peer | None = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """``repeat`` rounds of policy ``name``'s runs: its run of ``argv`` (the row's run) and, with
    ``argv_other``, the run it is compared with (``--tile``'s untiled trace, ``--vs-one-engine``'s
    one engine). Without a peer each round is (other, run); with one it is (peer, run, other),
    so each pair the ratios use is two runs back to back: the peer's and the run after it, the
    run and the other run after it. Returns (runs, other runs, peer runs), in the order run.

    Raises:
        StatusError: A policy's run failed (``bench_policy``).
        PeerError: A peer run failed (``Peer.run``).
    """
    runs: list[dict[str, Any]] = []
    others: list[dict[str, Any]] = []
    peer_runs: list[dict[str, Any]] = []
    for _ in range(repeat):
        if peer is None and argv_other is not None:
            others.append(bench_policy(argv_other, name))
        if peer is not None:
            peer_runs.append(peer.run())
        runs.append(bench_policy(argv, name))
        if peer is not None and argv_other is not None:
            others.append(bench_policy(argv_other, name))
    return runs, others, peer_runs


def _add_peer_pairs(row: dict[str, Any], runs: list[dict[str, Any]], peer_runs: list[dict[str, Any]],
                    peer: Peer | None) -> dict[str, Any]:
    """``row`` with the peer's pairs: ``peer_pairs``, every pair's ``[peer process_s, policy
    process_s]`` (seconds, in the order run), and ``vs_<peer>`` (``peer_ratio_key``): the median
    over the pairs of the policy's requests per wall-second over the peer's in that pair (the
    same requests, so the peer's process time over the policy's). Unchanged without a peer."""
    if peer is None:
        return row
    pairs = list(zip(peer_runs, runs))
    row["peer_pairs"] = [[p["process_s"], r["process_s"]] for p, r in pairs]
    row[peer_ratio_key(peer.name)] = statistics.median(r["requests_per_s"] / p["requests_per_s"] for p, r in pairs)
    return row


def _median_run(argv: list[str], name: str, repeat: int, peer: Peer | None = None) -> dict[str, Any]:
    """``repeat`` runs of ``name`` (each after a peer run, with a peer); the median one
    (``_median_row``), with the peer's pairs (``_add_peer_pairs``)."""
    runs, _, peer_runs = _rounds(name, repeat, argv, peer=peer)
    return _add_peer_pairs(_median_row(runs), runs, peer_runs, peer)


def one_engine_args(args: argparse.Namespace, closed: bool) -> argparse.Namespace:
    """``--vs-one-engine``: ``args`` (a fleet of ``N = args.instances`` engines, its time scale
    resolved) for one engine at the same per-engine load: no router, arrival times stretched N
    times (``--time-scale`` x N) and, where the trace replays closed loop, think times too
    (``--think-scale`` x N); a ``--seed`` that seeded only the fleet's sampling router is
    dropped (the one engine has no router to seed)."""
    from fairsim.options import router_samples

    n = args.instances
    one = argparse.Namespace(**vars(args))
    one.instances, one.router, one.router_param = 1, None, []
    one.time_scale, one.target_load = args.time_scale * n, None
    if args.trace is not None and args.session_rate is None and router_samples(args):
        # --seed seeded only the fleet's sampling router: the one engine has no router, and
        # fairsim run refuses a seed that seeds nothing.
        one.seed = 0
    if closed:
        one.think_scale = args.think_scale * n
    return one


def _paired_runs(argv_base: list[str], argv_tiled: list[str], name: str, repeat: int,
                 peer: Peer | None = None) -> dict[str, Any]:
    """``--tile N``: the tiled run of ``name`` and, alternating with it, the trace itself
    (``repeat`` times each); the tiled row (its median run, ``_median_row``) with the untiled
    runs' medians ``tile1_process_s`` and ``tile1_loop_s``, and the cost per request over the
    untiled run's, whole process (``per_request_vs_tile1``) and loop alone
    (``loop_per_request_vs_tile1``): the median over the ``repeat`` pairs (an untiled run and
    the tiled run right after it; with a peer, the tiled run and the untiled run after it) of
    each pair's ratio, as an interleaved benchmark pairs its
    runs, so a drift of the machine's speed, or one slow run, moves neither ratio much.
    ``tile_pairs``: every pair's ``[untiled process_s, tiled process_s, untiled loop_s, tiled
    loop_s]`` (seconds), in the order run. With a peer, each round is the peer's run, the tiled
    run, then the untiled run (``_rounds``), and the peer pairs with the tiled runs
    (``_add_peer_pairs``): the row's req/s is theirs."""
    tiled, base, peer_runs = _rounds(name, repeat, argv_tiled, argv_base, peer)
    scale = base[0]["requests"] / tiled[0]["requests"]  # copies x fewer requests in the untiled run
    pairs = list(zip(base, tiled))
    row = _median_row(tiled)
    row["tile1_process_s"] = statistics.median(r["process_s"] for r in base)
    row["tile1_loop_s"] = statistics.median(r["loop_s"] for r in base)
    row["per_request_vs_tile1"] = statistics.median(t["process_s"] * scale / b["process_s"] for b, t in pairs)
    row["loop_per_request_vs_tile1"] = (
        statistics.median(t["loop_s"] * scale / b["loop_s"] for b, t in pairs)
        if all(b["loop_s"] > 0 for b in base) else float("nan"))
    row["tile_pairs"] = [[b["process_s"], t["process_s"], b["loop_s"], t["loop_s"]] for b, t in pairs]
    if repeat > 1:
        row["tile1_process_s_runs"] = sorted(r["process_s"] for r in base)
    return _add_peer_pairs(row, tiled, peer_runs, peer)


def _one_engine_pairs(argv_one: list[str], argv_fleet: list[str], name: str, repeat: int,
                      peer: Peer | None = None) -> dict[str, Any]:
    """``--vs-one-engine``: the fleet run of ``name`` and, alternating with it, the same requests
    on one engine at the same per-engine load (``one_engine_args``), ``repeat`` times each; the
    fleet row (its median run, ``_median_row``) with the one-engine runs' medians
    ``one_engine_process_s`` and ``one_engine_loop_s``, and the fleet's time over the one
    engine's, whole process (``vs_one_engine``) and loop alone (``loop_vs_one_engine``): the
    median over the ``repeat`` pairs of each pair's ratio (as ``_paired_runs``).
    ``one_engine_pairs``: every pair's ``[one-engine process_s, fleet process_s, one-engine
    loop_s, fleet loop_s]`` (seconds), in the order run. With a peer, each round is the peer's
    run, the fleet run, then the one-engine run (``_rounds``), and the peer pairs with the fleet
    runs (``_add_peer_pairs``): the row's req/s is theirs."""
    fleet, one, peer_runs = _rounds(name, repeat, argv_fleet, argv_one, peer)
    pairs = list(zip(one, fleet))
    row = _median_row(fleet)
    row["one_engine_process_s"] = statistics.median(r["process_s"] for r in one)
    row["one_engine_loop_s"] = statistics.median(r["loop_s"] for r in one)
    row["vs_one_engine"] = statistics.median(f["process_s"] / o["process_s"] for o, f in pairs)
    row["loop_vs_one_engine"] = (statistics.median(f["loop_s"] / o["loop_s"] for o, f in pairs)
                                 if all(o["loop_s"] > 0 for o in one) else float("nan"))
    row["one_engine_pairs"] = [[o["process_s"], f["process_s"], o["loop_s"], f["loop_s"]] for o, f in pairs]
    return _add_peer_pairs(row, fleet, peer_runs, peer)


def cmd_bench(args: argparse.Namespace, names: list[str]) -> int:
    """Bench each policy in a fresh process (and the peer with ``--compare``); print the figures.

    Raises:
        ValueError: Bad ``--repeat``/``--tile``, a bad trace or option (checked here, before any
            child runs), or a peer that cannot be prepared (Dynamo's probe failed), before any
            policy runs.
        PeerError: A peer run failed (``Peer.run``): raised after the policies that finished
            before it are printed and written, with their pairs and the peer's row so far (a
            peer failing on its first run: before any policy runs, so nothing is printed).
        StatusError: A policy's run failed (``bench_policy``): raised after the policies
            that finished before it are printed and written (no later peer run then).
        KeyboardInterrupt: Ctrl-C, likewise raised after the finished policies are printed
            and written.
        MissingDependencyError: ``--compare`` names no installed executable.
    """
    from fairsim.cli_disagg import disagg_spec
    from fairsim.description import Needs, describe_run
    from fairsim.errors import StatusError
    from fairsim.io import atomic_write_text, strict_json
    from fairsim.cli_fleet import check_fleet_trace, fleet_spec
    from fairsim.options import capacity_of, load_requests, read_trace, router_samples

    if args.repeat < 1:
        raise ValueError(f"--repeat {args.repeat}: need an integer >= 1")
    if args.tile < 1:
        raise ValueError(f"--tile {args.tile}: need an integer >= 1")
    if getattr(args, "slo", None):
        raise ValueError("--slo: bench measures simulator speed; use run/compare for goodput")
    vs_one = getattr(args, "vs_one_engine", False)
    if vs_one and getattr(args, "mode", None) == "disaggregated":
        raise ValueError("--vs-one-engine: compares a fleet of --instances N engines with one engine; --mode "
                         "disaggregated is not supported (its prefill and decode engines split every request, "
                         "so no one engine runs the same work)")
    if vs_one and getattr(args, "instances", 1) < 2:
        raise ValueError("--vs-one-engine: compares a fleet with one engine; give --instances N >= 2 "
                         "(a run has 1 instance unless --instances says more)")
    # --mode disaggregated: its options checked here (args.mode becomes colocated for the shaping
    # below; run_argv passes the mode on to the children as given).
    disagg = disagg_spec(args)
    fleet = fleet_spec(args) if disagg is None else None
    if disagg is not None and args.compare is not None:
        raise ValueError(f"--compare {args.compare}: the peer simulates one engine; --mode disaggregated has no "
                         f"counterpart there")
    # Each side's KV cache under --mode disaggregated (a prefill engine holds prompts, a decode
    # engine whole requests), else one engine's: a cache too small is refused before any child.
    check_capacity = capacity_of if disagg is None else disagg.capacity
    peer, peer_name = None, None
    dynamo_skipped = None  # the line that says the peer is skipped, printed once the trace passed
    if args.compare == "dynamo":
        from fairsim.bench_dynamo import dynamo_available, skip_line

        if getattr(args, "replay", "open") == "closed":
            raise ValueError("--compare dynamo: Dynamo's replay sends each request at its timestamp (open loop); "
                             "it has no counterpart of --replay closed")
        if dynamo_available():
            peer, peer_name = "dynamo", "dynamo"
        else:
            dynamo_skipped = skip_line()
    elif args.compare is not None:
        peer, peer_name = find_peer(args.compare), "sched-sim"
    # The options' own bounds before the tiling (seconds to minutes) and the children, which
    # would each refuse them under the bench's prefix; the trace is read below, after the tiling.
    desc = describe_run(args, needs=Needs.POLICIES, policies=names)
    profile, config = desc.profile, desc.config
    deployment = bench_deployment(fleet, disagg, profile)
    rows: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="fairsim-bench-") as tmpdir:
        tmp = Path(tmpdir)
        untiled = argparse.Namespace(**vars(args))  # the trace itself, for the ratio of --tile
        if args.tile > 1:
            from fairsim.traces import window
            from fairsim.traces.shaping import nothing_in_window
            from fairsim.traces.canonical import write_canonical

            # The trace itself loaded and shaped as each untiled child will, so what a child
            # would refuse (a closed-loop link, a too-long prompt, a too-small cache) is refused
            # here, once and before the tiling; its notes are printed by the load below.
            trace = read_trace(args)
            with contextlib.redirect_stderr(io.StringIO()):
                loaded, shaped = load_requests(argparse.Namespace(**vars(args)), profile, trace)
            # The reader's own notes (e.g. Bailian's think times taken as gaps) are not in the
            # tiled file, whose load prints the rest: said here, once (those the load kept: a
            # closed-loop note is not said under --replay open).
            for warning in trace.warnings:
                if warning in loaded.warnings:
                    print(f"fairsim: warning: {warning}", file=sys.stderr)
            check_capacity(shaped, config, args)
            check_fleet_trace(disagg or fleet, shaped, trace.source)  # a router that needs what the trace lacks
            # Cut first, then tile the part kept (the children then get the tiled file uncut).
            kept = window(list(trace.requests), args.window_start, args.window_end, args.max_requests)
            if not kept:
                raise ValueError(nothing_in_window(trace.requests, args.window_start, args.window_end))
            if len(kept) * args.tile > MAX_TILED_REQUESTS:
                raise ValueError(f"--tile {args.tile}: {len(kept):,} requests x {args.tile} copies is above "
                                 f"{MAX_TILED_REQUESTS:,} requests; use fewer copies or a shorter trace")
            trace = dataclasses.replace(trace, requests=tuple(kept), locations={})
            tiled = tmp / "tiled.jsonl"
            write_canonical(tile_trace(trace, args.tile), tiled)
            if args.trace is None and args.session_rate is None and not router_samples(args):
                args.seed = 0  # it chose the generated input, now in the tiled file
            args.trace, args.trace_format = str(tiled), "auto"
            args.window_start, args.window_end, args.max_requests = 0.0, None, None
        # Load and shape once here (the options checked again, at no cost, on the tiled file's):
        # bad input fails before any child runs, and --target-load is resolved to one
        # --time-scale for every child (and the peer); a cache too small for the trace is
        # refused before any child.
        try:
            described = describe_run(args, needs=Needs.TRACE, policies=names, profile=profile)
            requests = described.requests
            check_capacity(requests, config, args)
            check_fleet_trace(disagg or fleet, requests, described.trace.source)
        except ValueError as exc:
            if args.tile == 1:
                raise
            # The trace itself passed above: the tiling made it fail (e.g. arrivals beyond 1e9 s).
            raise ValueError(f"{exc} (in the trace tiled {args.tile} times by --tile {args.tile})") from None
        if args.compare == "dynamo":  # (installed or not, as --replay closed above)
            from fairsim.sim.arrivals import resolve_replay

            if resolve_replay(requests, args.replay) == "closed":  # --replay's default with sessions
                raise ValueError("--compare dynamo: the trace's requests follow others (sessions), so fairsim "
                                 "replays it closed loop (--replay's default there), and Dynamo's replay has no "
                                 "counterpart of that; give --replay open to compare the two on the trace's "
                                 "arrival times")
            if dynamo_skipped is not None:  # (after the checks above, which hold installed or not)
                print(dynamo_skipped, file=sys.stderr)
        args.target_load = None  # resolved to args.time_scale: the peer gets that scale
        argv = run_argv(args)
        if args.tile == 1 and not vs_one and untiled.target_load is not None:
            # A plain bench's children get --target-load as given, so each costs what the user's
            # run does (it resolves the option to the same --time-scale itself).
            argv = run_argv(untiled)
        untiled.time_scale, untiled.target_load = args.time_scale, None
        argv_base = run_argv(untiled)
        if vs_one:
            from fairsim.sim.arrivals import resolve_replay

            one = one_engine_args(args, resolve_replay(requests, args.replay) == "closed")
            argv_base = run_argv(one)
        # The peer prepared once, before any policy runs: one that cannot run (Dynamo's probe)
        # fails here, before the long work. Its trace goes to --out (kept, so the printed
        # command can be run again).
        runner = None
        if peer is not None:
            runner = _prepare_peer(peer_name, peer, requests, args.out if args.out is not None else tmp,
                                   config, profile, args)
        # What stopped the call (a failed child, a failed peer run, Ctrl-C): raised once the
        # policies that finished are printed and written. At most one: each ends the loop.
        stopped: BaseException | None = None
        try:
            for name in names:
                try:
                    if vs_one:
                        rows[name] = _one_engine_pairs(argv_base, argv, name, args.repeat, runner)
                        rows[name].update(one_engine_time_scale=one.time_scale,
                                          one_engine_think_scale=one.think_scale)
                    elif args.tile > 1:
                        rows[name] = _paired_runs(argv_base, argv, name, args.repeat, runner)
                    else:
                        rows[name] = _median_run(argv, name, args.repeat, runner)
                except (StatusError, PeerError) as exc:
                    stopped = exc
                    break
                r = rows[name]
                # The engine mode each run simulated: a colocated run decodes every output token,
                # so its figures are not a prefill-only run's (args.mode is colocated for the
                # shaping of a disaggregated deployment, which the row names as such).
                r["mode"] = "disaggregated" if disagg is not None else getattr(args, "mode", "prefill-only")
                if deployment is not None:
                    r["deployment"] = deployment
                versus = f"; x {peer_name} {r[peer_ratio_key(peer_name)]:.2f}" if runner is not None else ""
                print(f"bench: {name} done in {r['process_s']:.2f} s (loop {r['loop_s']:.2f} s){versus}",
                      file=sys.stderr)
        except KeyboardInterrupt as exc:  # fairsim.cli.main exits 130
            stopped = exc
    done = [name for name in names if name in rows]  # all but after a failed child or peer run
    # The peer's row: all its runs so far (those of an unfinished policy too), when a finished
    # policy has pairs with it.
    has_peer = runner is not None and bool(done)
    if has_peer:
        rows[peer_name] = runner.row()
    # Printed before bench.json is written, so a failed write loses no figure.
    if done:
        if args.format == "json":
            print(strict_json(rows))
        else:
            _print_table(args, done, rows, peer_name if has_peer else None)
        sys.stdout.flush()
        if args.out is not None:
            atomic_write_text(args.out / "bench.json", strict_json(rows) + "\n")
    if stopped is not None:
        raise stopped
    return 0


def bench_deployment(fleet: Any, disagg: Any, profile: Any) -> dict[str, Any] | None:
    """What each policy's run simulates beyond one engine, for its row (``deployment``): a
    fleet's ``instances``, ``router`` and ``router_params``, or a disaggregated deployment as its
    ``run.json`` records it (``DisaggSpec.run_info``: mode, counts, router, link as used);
    ``None`` for one engine (its row as before fleets).

    Raises:
        ValueError: A disaggregated link ``DisaggSpec.link`` refuses.
    """
    if disagg is not None:
        return disagg.run_info(profile)
    if fleet is not None:
        return {"mode": "fleet", "instances": fleet.instances, "router": fleet.router,
                "router_params": dict(fleet.params)}
    return None


def peer_ratio_key(peer_name: str) -> str:
    """The row field of fairsim's requests per wall-second over the peer's: ``vs_sched_sim``,
    ``vs_dynamo``."""
    return "vs_" + peer_name.replace("-", "_")


def _prepare_peer(peer_name: str, peer: str, requests: list, folder: Path, config: Any, profile: Any,
                  args: argparse.Namespace) -> Peer:
    """The peer of ``--compare``, prepared in ``folder`` before any policy runs: Dynamo's replay
    (``fairsim.bench_dynamo.prepare_dynamo``, its probe run) with this call's engine settings (the
    same KV blocks, block size, budget and ``max_num_seqs`` as the children, and the profile's
    time for one cold budget-sized chunk to align its step times to), or sched-sim's trace
    (``prepare_peer``; ``peer`` its executable). Both get the trace's output lengths with
    ``--mode colocated``, else one output token per request.

    Raises:
        ValueError: Dynamo's probe failed, or the requests mix hash-block sizes.
    """
    decode = getattr(args, "mode", "prefill-only") == "colocated"
    if peer_name == "dynamo":
        from fairsim.bench_dynamo import prepare_dynamo
        from fairsim.options import capacity_of

        block_size, kv_blocks = capacity_of(requests, config, args)
        replay = prepare_dynamo(requests, folder, budget=config.budget_tokens, block_size=block_size,
                                kv_blocks=kv_blocks, max_num_seqs=config.max_num_seqs,
                                chunk_s=profile.prefill_time(config.budget_tokens, 0, config.budget_tokens),
                                decode=decode)
        return Peer("dynamo", "dynamo", replay.run)
    cmd = prepare_peer(peer, requests, args.budget, folder, decode)
    return Peer("sched-sim", peer, lambda: run_peer(cmd, len(requests)))


def _seconds(value: float) -> str:
    """A TTFT cell: whole seconds from 100 s on, else three significant digits."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def _dynamo_installed() -> bool:
    from fairsim.bench_dynamo import dynamo_available

    return dynamo_available()


def _print_table(args: argparse.Namespace, names: list[str], rows: dict[str, dict[str, Any]],
                 peer: str | None) -> None:
    """The bench's table on stdout (``cmd_bench``): columns as wide as their widest cell;
    ``peer``: the peer's row name (``sched-sim``, ``dynamo``) when it has figures."""
    from fairsim.cli_fleet import describe_deployment

    first = rows[names[0]]
    print(f"profile {first['profile']}; KV cache {first['kv_blocks']:,} blocks x {first['block_size']} "
          f"tokens = {first['kv_tokens']:,} tokens; {first['requests']:,} requests; time scale "
          f"{args.time_scale:g}" + (f"; trace x{args.tile}" if args.tile > 1 else "")
          + ("; colocated (prefill and decode)" if first.get("mode") == "colocated" else "")
          + (f"; {describe_deployment(first['deployment'])}" if "deployment" in first else ""))
    vs_one = getattr(args, "vs_one_engine", False)
    tiled = args.tile > 1 and not vs_one  # with --vs-one-engine the tiled trace has no x1 runs
    ttft = peer == "dynamo"  # a peer with TTFT figures of the same requests: side by side
    header = (["policy", "steps", "sim s", "process s", "req/s", "loop s", "loop req/s", "peak MiB"]
              + (["TTFT p50 s", "TTFT p99 s"] if ttft else [])
              + ([f"x {peer}"] if peer else []) + (["x1 process s", "vs x1", "loop vs x1"] if tiled else [])
              + (["1 engine process s", "vs 1 engine", "loop vs 1 engine"] if vs_one else []))
    body = []
    for name in names:
        r = rows[name]
        body.append([name, f"{r['steps']:d}", f"{r['sim_time_s']:.1f}", f"{r['process_s']:.2f}",
                     f"{r['requests_per_s']:.0f}", f"{r['loop_s']:.2f}", f"{r['loop_requests_per_s']:.0f}",
                     f"{r['peak_mib']:.0f}"]
                    + ([_seconds(r['ttft_p50_s']), _seconds(r['ttft_p99_s'])] if ttft else [])
                    + ([f"{r[peer_ratio_key(peer)]:.2f}"] if peer else [])
                    + ([f"{r['tile1_process_s']:.2f}", f"{r['per_request_vs_tile1']:.2f}",
                        f"{r['loop_per_request_vs_tile1']:.2f}"] if tiled else [])
                    + ([f"{r['one_engine_process_s']:.2f}", f"{r['vs_one_engine']:.2f}",
                        f"{r['loop_vs_one_engine']:.2f}"] if vs_one else []))
    if peer == "sched-sim":
        p = rows["sched-sim"]
        body.append(["sched-sim", "", "", f"{p['process_s']:.2f}", f"{p['requests_per_s']:.0f}", "", "",
                     f"{p['peak_mib']:.0f}", "1.00"] + (["", "", ""] if tiled or vs_one else []))
    elif peer == "dynamo":
        p = rows["dynamo"]
        body.append(["dynamo", "", f"{p['sim_time_s']:.1f}", f"{p['process_s']:.2f}", f"{p['requests_per_s']:.0f}",
                     f"{p['loop_s']:.2f}", f"{p['loop_requests_per_s']:.0f}", f"{p['peak_mib']:.0f}",
                     _seconds(p['ttft_p50_s']), _seconds(p['ttft_p99_s']), "1.00"] + (["", "", ""] if tiled or vs_one else []))
    widths = [max(len(row[i]) for row in [header] + body) for i in range(len(header))]
    for row in [header] + body:
        print("  ".join(v.ljust(w) if i == 0 else v.rjust(w) for i, (v, w) in enumerate(zip(row, widths))).rstrip())
    if tiled:
        print(f"vs x1: cost per request of the x{args.tile} trace over the trace itself (whole process; "
              f"loop alone), the two run alternately; the median of the {args.repeat} pair ratio(s)")
    if vs_one:
        think = first["one_engine_think_scale"]
        print(f"vs 1 engine: time of the {args.instances}-instance fleet over one engine on the same requests "
              f"at the same per-engine load (time scale {first['one_engine_time_scale']:g}"
              + (f", think scale {think:g}" if think != args.think_scale else "")
              + f"), the two run alternately (whole process; loop alone); the median of the {args.repeat} "
              f"pair ratio(s)")
    if peer is not None:
        runs = len(rows[peer].get("process_s_runs", [None]))
        print(f"x {peer}: the median over the {args.repeat} pair(s) of the policy's req/s over {peer}'s, each "
              f"policy run right after a {peer} run ({peer}'s row: the median of its {runs} run(s))")
    tokens = ("the trace's output lengths" if getattr(args, "mode", "") == "colocated" else "one output token")
    kept = "" if args.out is not None else "; a temporary trace file: --out DIR keeps it"
    if peer == "sched-sim":
        print(f"sched-sim: {rows['sched-sim']['command']} (chunked prefill, same arrivals and prompt "
              f"lengths, {tokens}, no prefix cache{kept})")
    elif peer == "dynamo":
        p = rows["dynamo"]
        print(f"dynamo: {p['command']} (offline replay, one worker, same arrivals, prompts and prefix "
              f"hashes, {tokens}, same KV blocks, budget and max_num_seqs, prefix caching, chunked prefill; "
              f"speedup_ratio {p['speedup_ratio']:.4g} so a cold {args.budget:,}-token chunk takes the "
              f"profile's time; loop s: its wall_time_ms{kept})")
    elif args.compare == "dynamo" and not _dynamo_installed():
        from fairsim.bench_dynamo import DYNAMO_INSTALL

        print(f"dynamo: skipped, not installed for this interpreter (install: {DYNAMO_INSTALL})")
