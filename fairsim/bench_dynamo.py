"""NVIDIA Dynamo's offline replay as ``fairsim bench --compare dynamo``'s peer.

Dynamo's ``dynamo.replay.run_trace_replay(...)`` (ai-dynamo 1.6.1) replays a Mooncake trace
through its mocker engine, written in Rust, offline (no GPU, no server). bench gives it the same
shaped requests as fairsim's runs and the same engine settings:

- the trace: one Mooncake JSONL row per request, ``timestamp`` = arrival (ms, after fairsim's
  shaping: window, ``--time-scale``), ``input_length`` = prompt tokens, ``output_length`` = 1
  (fairsim's default engine is prefill-only) or with ``--mode colocated`` the trace's output
  length, ``hash_ids`` = the request's prefix hashes (``trace_block_size`` = their block size);
- the engine: one worker, ``num_gpu_blocks`` = fairsim's KV blocks, ``block_size``,
  ``max_num_batched_tokens`` = ``--budget``, ``max_num_seqs``, prefix caching and chunked prefill
  on (vLLM backend, LRU eviction);
- the timing: Dynamo's own step model (a polynomial) times its steps. Its ``speedup_ratio``
  divides every step time, so bench sets it to Dynamo's time for one cold ``--budget``-token
  chunk over the profile's (``Profile.prefill_time(budget, 0)``): a full chunk then takes the same
  simulated time in both, and the load is comparable. Dynamo's time for that chunk is measured by
  a probe replay of one such request before the timed run (its process is not timed).

The timed run is one fresh process, ``python dynamo_replay.py dynamo-replay.json``, started like
fairsim's own (``fairsim.timed._timed``): its whole-process wall time and peak memory are those
of fairsim's rows. ``prepare_dynamo`` writes its files and runs the probe once; bench then runs
it (``DynamoReplay.run``) right before each policy run, pairing the two. Its ``loop_s`` is Dynamo's own ``wall_time_ms`` (the Rust runtime's
construction and run). Open loop only: Dynamo replays arrival times, so ``--replay closed`` has
no counterpart.

Install (the plain ``pip install ai-dynamo`` pulls ``aisimulate`` from an index these machines
cannot reach): ``DYNAMO_INSTALL``.
"""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fairsim.types import Request

DYNAMO_VERSION = "1.6.1"
DYNAMO_INSTALL = (f"pip install --no-deps ai-dynamo-runtime=={DYNAMO_VERSION} ai-dynamo=={DYNAMO_VERSION} && "
                  f'pip install "pydantic>=2.10.6,<=2.13.5" uvloop typing-extensions msgspec')
"""The install recipe (docs/performance.md, "Dynamo as the peer")."""

TRACE_NAME = "dynamo-trace.jsonl"
ARGS_NAME = "dynamo-replay.json"
SCRIPT_NAME = "dynamo_replay.py"

#: The peer's process: imports nothing of fairsim, replays the trace named in its arguments file
#: and prints one JSON line of Dynamo's summary figures (``parse_report`` reads it).
CHILD_SCRIPT = '''\
"""Replay a Mooncake trace with Dynamo's offline mocker; print its summary figures (fairsim bench)."""
import json
import sys

from dynamo.replay import run_trace_replay

with open(sys.argv[1]) as f:
    spec = json.load(f)
report = run_trace_replay(spec["trace"], extra_engine_args=spec["engine_args"], num_workers=1,
                          replay_mode="offline", trace_format="mooncake",
                          trace_block_size=spec["trace_block_size"])
keys = ("num_requests", "completed_requests", "wall_time_ms", "duration_ms", "median_ttft_ms",
        "p99_ttft_ms", "min_ttft_ms")
print(json.dumps({k: report.summary.get(k) for k in keys}))
'''


def dynamo_available() -> bool:
    """Whether ``dynamo.replay`` can be imported by this interpreter (the one that runs the peer)."""
    try:
        return importlib.util.find_spec("dynamo.replay") is not None
    except ModuleNotFoundError:  # no top-level ``dynamo`` package
        return False


def skip_line() -> str:
    """The line bench prints when Dynamo is absent (and runs fairsim's policies all the same)."""
    return (f"bench: --compare dynamo: skipped, Dynamo is not installed for {sys.executable} "
            f"(install: {DYNAMO_INSTALL})")


def trace_block_size(requests: Sequence[Request]) -> int:
    """The one hash-block size of ``requests``' prefix hashes (Dynamo's ``trace_block_size``).

    Raises:
        ValueError: The requests mix hash-block sizes (a Mooncake trace has one).
    """
    sizes = {r.hash_block_size for r in requests if r.block_hashes}
    if len(sizes) > 1:
        raise ValueError(f"bench: --compare dynamo: the requests mix hash-block sizes {sorted(sizes)}; "
                         f"a Mooncake trace for Dynamo has one")
    return sizes.pop() if sizes else requests[0].hash_block_size


def mooncake_rows(requests: Sequence[Request], decode: bool) -> list[dict[str, Any]]:
    """One Mooncake row per request, in arrival order: ``timestamp`` (ms), ``input_length``,
    ``output_length`` (1, or with ``decode`` the request's ``output_len``) and ``hash_ids``.

    ``hash_ids`` are the request's full-block prefix hashes, then one id per block that has none
    (a trailing partial block, or every block of a request without hashes): Dynamo wants
    ``ceil(input_length / trace_block_size)`` ids, and fairsim never caches such a block, so
    each gets a fresh id above every hash of the trace (shared by no other request).
    """
    ordered = sorted(requests, key=lambda r: r.arrival_time)
    fresh = 1 + max((h for r in ordered for h in r.block_hashes), default=-1)
    rows = []
    for r in ordered:
        wanted = -(-r.prompt_len // r.hash_block_size)
        ids = list(r.block_hashes)
        extra = wanted - len(ids)
        ids.extend(range(fresh, fresh + extra))
        fresh += extra
        rows.append({"timestamp": r.arrival_time * 1000.0, "input_length": r.prompt_len,
                     "output_length": r.output_len if decode else 1, "hash_ids": ids})
    return rows


def engine_args(*, budget: int, block_size: int, kv_blocks: int, max_num_seqs: int,
                speedup_ratio: float) -> dict[str, Any]:
    """Dynamo's mocker engine settings that match fairsim's engine (one aggregated vLLM worker)."""
    return {"engine": {"backend": "vllm", "num_gpu_blocks": kv_blocks, "block_size": block_size,
                       "max_num_batched_tokens": budget, "max_num_seqs": max_num_seqs,
                       "enable_prefix_caching": True, "enable_chunked_prefill": True,
                       "speedup_ratio": speedup_ratio}}


def parse_report(stdout: str, expected: int) -> dict[str, Any]:
    """Dynamo's figures from the peer's output (``CHILD_SCRIPT``'s last line): ``requests``,
    ``loop_s`` (its ``wall_time_ms``), ``sim_time_s`` (``duration_ms``), ``ttft_p50_s`` and
    ``ttft_p99_s`` (seconds), ``ttft_min_s``.

    Raises:
        ValueError: No JSON line, a missing figure, or a completed count other than ``expected``
            (a replay that dropped requests is no peer figure).
    """
    lines = stdout.strip().splitlines()
    try:
        got = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        got = None
    if not isinstance(got, dict):
        raise ValueError("bench: --compare dynamo: the replay printed no summary line")
    missing = [k for k in ("completed_requests", "wall_time_ms", "duration_ms", "median_ttft_ms", "p99_ttft_ms")
               if not isinstance(got.get(k), (int, float))]
    if missing:
        raise ValueError(f"bench: --compare dynamo: the replay's summary lacks {', '.join(missing)}")
    if got["completed_requests"] != expected:
        raise ValueError(f"bench: --compare dynamo: the replay completed {got['completed_requests']:,} of the "
                         f"{expected:,} requests it was given")
    bad = [k for k in ("wall_time_ms", "duration_ms", "median_ttft_ms", "p99_ttft_ms")
           if not (math.isfinite(got[k]) and got[k] >= 0)]
    if bad:  # (no peer figure is made up: a NaN or negative time is refused, not printed)
        raise ValueError(f"bench: --compare dynamo: the replay's {', '.join(f'{k} {got[k]!r}' for k in bad)} "
                         f"is not a time >= 0")
    if got["median_ttft_ms"] > got["p99_ttft_ms"]:
        raise ValueError(f"bench: --compare dynamo: the replay's median_ttft_ms {got['median_ttft_ms']!r} is above "
                         f"its p99_ttft_ms {got['p99_ttft_ms']!r}")
    return {"requests": expected, "loop_s": got["wall_time_ms"] / 1000.0,
            "sim_time_s": got["duration_ms"] / 1000.0, "ttft_p50_s": got["median_ttft_ms"] / 1000.0,
            "ttft_p99_s": got["p99_ttft_ms"] / 1000.0,
            "ttft_min_s": (got["min_ttft_ms"] / 1000.0 if isinstance(got.get("min_ttft_ms"), (int, float))
                           else float("nan"))}


def _write_spec(folder: Path, name: str, trace: str, args: dict[str, Any], hash_block: int) -> Path:
    from fairsim.io import atomic_write_text

    path = folder / name
    atomic_write_text(path, json.dumps({"trace": trace, "engine_args": args, "trace_block_size": hash_block}))
    return path


def _failure(code: int, err: str) -> ValueError:
    said = " | ".join(err.strip().splitlines())[-800:] or "(nothing on stderr)"
    return ValueError(f"bench: --compare dynamo: its replay exited {code}: {said}")


def probe_chunk_ms(folder: Path, *, budget: int, block_size: int, kv_blocks: int, max_num_seqs: int,
                   hash_block: int) -> float:
    """Dynamo's simulated time (ms) to prefill one cold ``budget``-token prompt at speedup 1: the
    TTFT of a replay of that one request (untimed; ``folder`` keeps its files).

    Raises:
        ValueError: The probe failed or printed no figure.
    """
    from fairsim.io import atomic_write_text

    trace = folder / "dynamo-probe.jsonl"
    blocks = budget // hash_block
    atomic_write_text(trace, json.dumps({"timestamp": 0.0, "input_length": budget, "output_length": 1,
                                         "hash_ids": list(range(1, blocks + 1))}) + "\n")
    spec = _write_spec(folder, "dynamo-probe.json", str(trace),
                       engine_args(budget=budget, block_size=block_size, kv_blocks=kv_blocks,
                                   max_num_seqs=max_num_seqs, speedup_ratio=1.0), hash_block)
    done = subprocess.run([sys.executable, str(folder / SCRIPT_NAME), str(spec)], capture_output=True, text=True)
    if done.returncode != 0:
        raise _failure(done.returncode, done.stderr)
    return parse_report(done.stdout, 1)["ttft_min_s"] * 1000.0


@dataclass(frozen=True)
class DynamoReplay:
    """Dynamo's timed replay, prepared once (``prepare_dynamo``) and run as often as bench pairs
    it with a policy's run: ``cmd`` (its files kept in the folder ``prepare_dynamo`` got), the
    number of requests it replays and the ``speedup_ratio`` it was given."""

    cmd: tuple[str, ...]
    requests: int
    speedup_ratio: float

    def run(self) -> dict[str, Any]:
        """One fresh timed process of the replay (``fairsim.timed._timed``); its row for bench's
        table: ``parse_report``'s figures, ``process_s``, ``requests_per_s``, ``peak_mib``,
        ``loop_requests_per_s``, ``speedup_ratio`` and ``command``.

        Raises:
            ValueError: The replay failed, or its figures are not whole (``parse_report``).
        """
        from fairsim.timed import _timed

        wall, peak, code, out, err = _timed(list(self.cmd))
        if code != 0:
            raise _failure(code, err)
        row = parse_report(out, self.requests)
        n = row["requests"]
        row.update(process_s=wall, requests_per_s=n / wall, peak_mib=peak,
                   loop_requests_per_s=n / row["loop_s"] if row["loop_s"] > 0 else float("inf"),
                   speedup_ratio=self.speedup_ratio, command=" ".join(self.cmd))
        return row


def prepare_dynamo(requests: Sequence[Request], folder: Path, *, budget: int, block_size: int, kv_blocks: int,
                   max_num_seqs: int, chunk_s: float, decode: bool) -> DynamoReplay:
    """Write the replay's script, trace and arguments to ``folder`` (kept, so the printed
    ``command`` can be run again) and run the untimed probe that sets ``speedup_ratio``.

    ``chunk_s``: fairsim's time for one cold ``budget``-token chunk (``Profile.prefill_time``),
    which Dynamo's ``speedup_ratio`` is set to match (module docstring).

    Raises:
        ValueError: The requests mix hash-block sizes, or the probe failed.
    """
    from fairsim.io import atomic_write_text

    hash_block = trace_block_size(requests)
    atomic_write_text(folder / SCRIPT_NAME, CHILD_SCRIPT)
    dyn_chunk_ms = probe_chunk_ms(folder, budget=budget, block_size=block_size, kv_blocks=kv_blocks,
                                  max_num_seqs=max_num_seqs, hash_block=hash_block)
    speedup = dyn_chunk_ms / 1000.0 / chunk_s
    trace = folder / TRACE_NAME
    atomic_write_text(trace, "".join(json.dumps(row) + "\n" for row in mooncake_rows(requests, decode)))
    spec = _write_spec(folder, ARGS_NAME, str(trace),
                       engine_args(budget=budget, block_size=block_size, kv_blocks=kv_blocks,
                                   max_num_seqs=max_num_seqs, speedup_ratio=speedup), hash_block)
    return DynamoReplay(cmd=(sys.executable, str(folder / SCRIPT_NAME), str(spec)), requests=len(requests),
                        speedup_ratio=speedup)


def bench_dynamo(requests: Sequence[Request], folder: Path, *, budget: int, block_size: int, kv_blocks: int,
                 max_num_seqs: int, chunk_s: float, decode: bool) -> dict[str, Any]:
    """Prepare Dynamo's replay of ``requests`` (``prepare_dynamo``) and run it once; its row.

    Raises:
        ValueError: As ``prepare_dynamo`` and ``DynamoReplay.run``.
    """
    return prepare_dynamo(requests, folder, budget=budget, block_size=block_size, kv_blocks=kv_blocks,
                          max_num_seqs=max_num_seqs, chunk_s=chunk_s, decode=decode).run()
