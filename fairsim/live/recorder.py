"""Record the requests a live vLLM engine sees as a fairsim trace (``"record": PATH``).

The scheduler hook calls a ``TraceRecorder`` when a request is added, when it is first
scheduled, and after every step; the recorder writes one line per request, in the order requests
were added, to ``PATH`` in fairsim's canonical trace format (Mooncake-style JSONL, the format
``fairsim convert`` writes, with a ``PATH.meta.json`` sidecar giving the hash block size):

- ``timestamp``: arrival, ms after the first recorded arrival (vLLM ``Request.arrival_time``);
- ``input_length``, ``output_length`` (tokens generated, at least 1);
- ``hash_ids``: vLLM's own block hashes (``Request.block_hashes``, one per full block of the
  engine's hash block, which is the sidecar's ``hash_block_size``), each mapped to a 63-bit
  integer by hashing it, so equal blocks get equal ids with no table to keep in memory; the
  partial last block gets an id of its own (``ceil(input_length / block)`` ids, as Mooncake);
- ``request_id`` (vLLM's), ``session_id`` where the client passes one in
  ``SamplingParams.extra_args["session_id"]`` (OpenAI server: ``"vllm_xargs"``);
- observed columns (outputs of this engine, never inputs of a simulation):
  ``observed_cached_tokens`` (prefix hit at first admission), ``observed_first_scheduled_ms``
  (same clock as ``timestamp``), ``observed_ttft_ms`` (end of the step that produced the first
  token, minus the arrival: on the virtual clock of ``replay --virtual``, the replay table's
  ``ttft_s``) and
  ``observed_finish`` (vLLM's finished status).

Memory: the recorder holds the requests in flight, and those finished behind the oldest one
still in flight (lines are written in arrival order); nothing per request stays after its line
is written. Lines are flushed as they are written, so a recording can be read while it grows.
If a request is added with an arrival earlier than a line already written (a client that
stamps arrival long before submitting), its timestamp is raised to that line's, counted in
``reordered`` and logged once: the file's timestamps never decrease.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import OrderedDict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TextIO

from fairsim import __version__

logger = logging.getLogger("fairsim.live")


def block_id(block_hash: Any) -> int:
    """A vLLM block hash (bytes) as a non-negative 63-bit integer (BLAKE2b of its bytes, so any
    hash layout maps evenly; equal hashes give equal ids)."""
    raw = bytes(block_hash) if isinstance(block_hash, (bytes, bytearray, memoryview)) else repr(block_hash).encode()
    return int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest(), "big") >> 1


def partial_id(request_id: str) -> int:
    """An id for a request's partial last block, unique to the request (it can never hit)."""
    return int.from_bytes(hashlib.blake2b(f"partial:{request_id}".encode(), digest_size=8).digest(), "big") >> 1


def sidecar_path(path: Path) -> Path:
    """``PATH.meta.json``, the canonical format's sidecar."""
    return path.with_name(path.name + ".meta.json")


class _Pending:
    __slots__ = ("request", "arrival", "first_scheduled", "cached", "ttft", "done")

    def __init__(self, request: Any) -> None:
        self.request = request
        self.arrival = float(request.arrival_time)
        self.first_scheduled: float | None = None
        self.cached: int | None = None
        self.ttft: float | None = None
        self.done = False


class TraceRecorder:
    """Streams requests to a canonical trace file.

    Args:
        path: The JSONL file (overwritten); its sidecar ``PATH.meta.json`` is written at once, and
            again with the request count at ``close``.
        block_size: The engine's hash block, tokens (vLLM ``Scheduler.hash_block_size``).
        clock: Seconds on the clock of ``Request.arrival_time`` when ``after_step`` is called: the
            end of the step just run, so a first token is stamped with the end of the step that
            produced it (the hook's ``fairsim_step_end_clock``, or its ``fairsim_clock``, which in
            real time has passed the step by then).
        source: Free text for the sidecar (engine, model, policy).

    Raises:
        OSError: ``path`` cannot be written (at start-up, not mid-serving).
        ValueError: ``block_size < 1``.
    """

    def __init__(self, path: str | Path, block_size: int, clock: Callable[[], float],
                 source: str = "") -> None:
        if block_size < 1:
            raise ValueError(f"record: block size {block_size}, need >= 1")
        self.path = Path(path)
        self.block_size = block_size
        self.clock = clock
        self.source = source
        self.written = 0
        self.reordered = 0
        self._pending: OrderedDict[str, _Pending] = OrderedDict()
        self._t0: float | None = None
        self._last_ms = 0.0
        self._fh: TextIO | None = None
        self._open()

    def _open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = self.path.open("w", encoding="utf-8")
        self._write_sidecar()

    def _write_sidecar(self, closed: bool = False) -> None:
        # Timestamps are arrivals on the engine clock from the first request (absolute trace time),
        # not offsets from a session start: replay them as they are, no Poisson session placement.
        meta = {"canonical": "fairsim/mooncake-jsonl", "hash_block_size": self.block_size,
                "absolute_time": True, "source": self.source,
                "source_format": "fairsim record", "time_origin_unix_s": self._t0,
                "reordered_timestamps": self.reordered, "fairsim_version": __version__}
        if closed:
            # The count only once it is final: an engine killed before ``close`` (vLLM ends a
            # slow worker) leaves a sidecar without one, which the reader then does not check,
            # rather than a count of 0 beside the lines written (read_sidecar refuses that).
            meta["requests"] = self.written
        side = sidecar_path(self.path)
        tmp = side.with_name(side.name + ".tmp")
        tmp.write_text(json.dumps(meta, indent=2) + "\n")
        tmp.replace(side)

    @property
    def in_memory(self) -> int:
        """Requests held (in flight, or finished behind the oldest in flight)."""
        return len(self._pending)

    # -- events from the hook ----------------------------------------------------------------
    def add(self, request: Any) -> None:
        """A request entered the scheduler (``Scheduler.add_request``)."""
        self._pending[request.request_id] = _Pending(request)

    def scheduled(self, request_id: str, cached_tokens: int, now: float) -> None:
        """A request was scheduled for the first time with ``cached_tokens`` already computed."""
        rec = self._pending.get(request_id)
        if rec is not None and rec.first_scheduled is None:
            rec.first_scheduled = now
            rec.cached = int(cached_tokens)

    def after_step(self, live: Mapping[str, Any]) -> None:
        """After a step (``update_from_output``): note first tokens; requests no longer in
        ``live`` (the scheduler's ``requests``) have finished or been aborted."""
        now = None
        for rid, rec in self._pending.items():
            if rec.done:
                continue
            req = live.get(rid)
            if rec.ttft is None and rec.request.num_output_tokens > 0:
                now = self.clock() if now is None else now
                rec.ttft = now - rec.arrival
            if req is None:
                rec.done = True
        self._flush()

    def _flush(self) -> None:
        fh = self._fh
        if fh is None:
            return
        wrote = False
        while self._pending:
            rid, rec = next(iter(self._pending.items()))
            if not rec.done:
                break
            del self._pending[rid]
            fh.write(json.dumps(self._row(rid, rec)) + "\n")
            self.written += 1
            wrote = True
        if wrote:
            fh.flush()

    def _row(self, rid: str, rec: _Pending) -> dict[str, Any]:
        req = rec.request
        if self._t0 is None:
            self._t0 = rec.arrival
            self._write_sidecar()
        ms = round((rec.arrival - self._t0) * 1000.0, 3)
        if ms < self._last_ms:
            if not self.reordered:
                logger.warning("fairsim record: request %s arrived %.3f ms before one already "
                               "written; its timestamp is raised to keep the file ordered", rid,
                               self._last_ms - ms)
            self.reordered += 1
            ms = self._last_ms
        self._last_ms = ms
        prompt = int(req.num_prompt_tokens)
        full = prompt // self.block_size
        ids = [block_id(h) for h in list(req.block_hashes)[:full]]
        if len(ids) < full:  # prefix caching off: no hashes; blocks of their own
            ids += [partial_id(f"{rid}:{j}") for j in range(len(ids), full)]
        if prompt % self.block_size:
            ids.append(partial_id(rid))
        row: dict[str, Any] = {"timestamp": int(ms) if ms == int(ms) else ms,
                               "input_length": prompt,
                               "output_length": max(1, int(req.num_output_tokens)),
                               "hash_ids": ids, "request_id": rid}
        extra = getattr(getattr(req, "sampling_params", None), "extra_args", None)
        if isinstance(extra, dict) and extra.get("session_id") is not None:
            row["session_id"] = str(extra["session_id"])
        if rec.cached is not None:
            row["observed_cached_tokens"] = rec.cached
            row["observed_first_scheduled_ms"] = round((rec.first_scheduled - self._t0) * 1000.0, 3)
        if rec.ttft is not None:
            row["observed_ttft_ms"] = round(rec.ttft * 1000.0, 3)
        status = getattr(req, "status", None)
        row["observed_finish"] = getattr(status, "name", str(status)).lower()
        return row

    def restart(self) -> None:
        """Drop everything recorded so far and start the file again (after a driver's warm-up)."""
        self.close()
        self._pending.clear()
        self._t0 = None
        self._last_ms = 0.0
        self.written = self.reordered = 0
        self._open()

    def close(self) -> None:
        """Write every finished request, update the sidecar and close. Requests still in flight
        are not written (their output length is unknown)."""
        if self._fh is None:
            return
        self._flush()
        left = 0
        for rid, rec in self._pending.items():  # finished behind one still in flight
            if rec.done:
                self._fh.write(json.dumps(self._row(rid, rec)) + "\n")
                self.written += 1
            else:
                left += 1
        self._pending.clear()
        if left:
            logger.info("fairsim record: %d requests still in flight at shutdown, not written", left)
        self._fh.close()
        self._fh = None
        self._write_sidecar(closed=True)
