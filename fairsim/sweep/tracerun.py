"""A sweep's trace-file run is the ``fairsim run`` it stands for: the same options, the same code.

A ``[[traces]]`` point (``RunSpec.trace``: path, time scale, window, max_requests) becomes the
options of ``fairsim run`` (``run_options``), parsed by the parser of ``fairsim run``'s common
options (``fairsim.options.add_common``, so every default is run's), then

- loaded and shaped by ``fairsim.description.describe_run`` (``fairsim.options.load_requests``,
  after the same option checks): any format or folder ``--trace`` reads,
  session replay resolved (closed loop where the trace has sessions, session starts placed for a
  format without absolute time), the window and ``max_requests``, a kept turn whose predecessor
  was cut sent at its own timestamp, the profile's ``max_model_len`` check, the time scale and
  the arrival-range checks;
- sized by ``fairsim.options.engine_config`` (run's engine defaults), the run's ``[engine]`` point
  (``fairsim.sweep.engine.run_engine``) and ``fairsim.sim.capacity.with_profile_capacity`` (the
  profile's ``kv_capacity`` when the point sets no capacity), exactly as ``fairsim run`` sizes it;
- simulated by ``fairsim.run.run_one`` with the replay mode and think scale ``load_requests``
  resolved.

The planner (``fairsim.sweep.plan``) calls these same functions to validate every point, so a
point that passes ``--dry-run`` is prepared the same way when it runs.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
from dataclasses import dataclass
from typing import Any

from fairsim.costmodel import Profile
from fairsim.sim.config import EngineConfig
from fairsim.traces.trace import Trace
from fairsim.types import Request

SPEC_TERMS = (("--window-start/--window-end/--max-requests", "window/max_requests"),
              ("--window-start", "window start"), ("--window-end", "window end"),
              ("--max-requests", "max_requests"), ("--time-scale", "time_scale"),
              ("--trace-format", "format"), ("--skip-long", "skip_long"),
              ("--kv-tokens", "engine.kv_tokens"), ("--kv-blocks", "engine.kv_blocks"),
              ("--kv-fraction", "engine.kv_fraction"), ("--block-size", "engine.block_size"),
              ("--budget", "engine.budget_tokens"), ("--max-num-seqs", "engine.max_num_seqs"),
              ("--mode", "engine.mode"))
"""``fairsim run`` option -> the spec key that sets it (a ``[[traces]]`` key or ``engine.KEY``),
for messages (``spec_terms``)."""


class _RunOptionsParser(argparse.ArgumentParser):
    """``fairsim run``'s common options; a bad value raises ``ValueError`` instead of exiting."""

    def error(self, message: str) -> Any:  # argparse's hook; it must not return
        raise ValueError(message)


@functools.lru_cache(maxsize=1)
def _parser() -> argparse.ArgumentParser:
    from fairsim.options import add_common

    parser = _RunOptionsParser(prog="fairsim run", add_help=False)
    add_common(parser)
    return parser


def run_options(trace: dict[str, Any]) -> list[str]:
    """The ``fairsim run`` options of a sweep trace point (``RunSpec.trace``).

    ``{"path": "t.jsonl", "time_scale": 2.0, "window_start_s": 5.0, "window_end_s": None,
    "max_requests": 30}`` -> ``["--trace=t.jsonl", "--trace-format=auto", "--time-scale=2.0",
    "--window-start=5.0", "--max-requests=30"]``; ``format`` sets ``--trace-format`` and
    ``skip_long: true`` adds ``--skip-long``. Floats are written with ``repr``, which reads
    back exactly.
    """
    argv = [f"--trace={trace['path']}", f"--trace-format={trace.get('format', 'auto')}",
            f"--time-scale={trace['time_scale']!r}",
            f"--window-start={trace['window_start_s']!r}"]
    if trace.get("window_end_s") is not None:
        argv.append(f"--window-end={trace['window_end_s']!r}")
    if trace.get("max_requests") is not None:
        argv.append(f"--max-requests={trace['max_requests']}")
    if trace.get("skip_long"):
        argv.append("--skip-long")
    return argv


def spec_terms(message: str) -> str:
    """``message`` with ``fairsim run`` option names replaced by the spec keys that set them."""
    for option, key in SPEC_TERMS:
        message = message.replace(option, key)
    return message


@dataclass(frozen=True)
class TraceInput:
    """A trace point loaded and shaped as ``fairsim run`` does it.

    Attributes:
        trace: The trace as read (name, format, warnings).
        requests: The shaped requests, sorted by arrival (seconds, after the time scale).
        args: ``fairsim run``'s options after ``load_requests`` resolved them: ``replay``
            (``"open"``/``"closed"``), ``think_scale``, ``session_rate``, ``time_scale``.
        notes: What ``load_requests`` told the user on stderr (``fairsim: ...`` lines: cut
            sessions, reader warnings), in order.
    """

    trace: Trace
    requests: list[Request]
    args: argparse.Namespace
    notes: tuple[str, ...]


def load_trace_input(trace: dict[str, Any], profile: Profile) -> TraceInput:
    """Load and shape the trace point ``trace`` (``RunSpec.trace``) with ``fairsim run``'s code.

    Raises:
        ValueError: What ``fairsim run`` refuses with the same options (a bad record, an
            empty window, a prompt over the profile's ``max_model_len``, a broken session link,
            an arrival beyond 1e9 s), its message as ``fairsim run`` gives it.
        OSError: The trace cannot be read.
    """
    from fairsim.description import Needs, describe_run

    args = _parser().parse_args(run_options(trace))
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        desc = describe_run(args, needs=Needs.TRACE, profile=profile)  # the engine: trace_engine
    notes = tuple(line for line in stderr.getvalue().splitlines() if line.strip())
    return TraceInput(desc.trace, desc.requests, args, notes)


def trace_engine(inp: TraceInput, point: dict[str, Any], profile: Profile) -> tuple[EngineConfig, str]:
    """The engine settings of a trace run: ``fairsim run``'s defaults, the ``[engine]`` point on
    top (``run_engine``), then the profile's ``kv_capacity`` when no capacity is set.

    Returns:
        ``(config, source)``: the config to simulate with and where its KV capacity comes from
        (``fairsim.sim.capacity.with_profile_capacity``).

    Raises:
        ValueError: A value ``EngineConfig`` refuses, or two capacity keys.
    """
    from fairsim.options import engine_config
    from fairsim.sim.capacity import with_profile_capacity
    from fairsim.sweep.engine import run_engine

    return with_profile_capacity(run_engine(engine_config(inp.args), point, inp.requests), profile)
