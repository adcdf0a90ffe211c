"""Closed-loop agent traffic: multi-session coding-agent workload with tool calls and sub-agents.

Model (all seeded; numpy ``default_rng(spec.seed)``), after the structure of public agent traces
(Claude Code session files, Dynamo agentic Mooncake rows; ``../shared/design/TRACES.md``):

- ``num_sessions`` sessions start as a Poisson process of ``session_rate_per_s``
  (the first at 0 s).
- Every session's context starts with the same system prompt (instructions + tool
  definitions, ``system_tokens``), shared by all sessions, then the user's task
  (``task_tokens``).
- A session has ``turns`` requests. Each turn's prompt is the whole context so far: after a
  turn, its answer (``output_tokens``: the model's tool call) and the tool's result
  (``tool_result_tokens``) are appended, so the next prompt extends the previous one (a
  growing per-session prefix; only the new tail is uncached).
- Think/tool time: turn ``k > 0`` is sent ``delay_s`` after turn ``k - 1`` finished, a
  log-normal time with median ``think_median_s`` and log-sd ``think_sigma``, capped at
  ``think_max_s`` (tool calls are mostly short with a long tail).
- Sub-agents: after a turn, with probability ``subagent_prob``, the session spawns a sub-agent
  that runs beside it (its first turn follows the spawning turn after a think time). A sub-agent
  is a session of its own with the sub-agent system prompt (``subagent_system_tokens``,
  shared by all sub-agents), a unique task and ``subagent_turns`` turns; sub-agents do not
  spawn sub-agents.

Prefix identity: block ``j`` (``hash_block_size`` tokens) of a context is a system-prompt block
(shared) when it lies wholly inside the system prompt, else it is the session's own content.
Contexts only grow, so the hash of a session's block ``j`` is the same in every turn that holds
it whole; hash ids are chained (``PrefixIds``, Mooncake convention).

Timestamps (``arrival_time``) are those of an engine with no service time (session start plus
the think times before the turn); they are only used by ``--replay open``. Closed loop (the
default for this trace) sends each turn when its predecessor finished in the simulation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fairsim.traces.prefix import PrefixIds
from fairsim.traces.trace import Trace
from fairsim.types import Request


@dataclass(frozen=True, slots=True)
class AgentSpec:
    """Parameters of the agent workload (tokens, seconds, sessions/s); ranges are inclusive."""

    num_sessions: int = 40
    """Top-level sessions (sub-agents come on top)."""
    session_rate_per_s: float = 0.2
    """Session starts per second (Poisson)."""
    system_tokens: int = 4096
    """Shared system prompt + tool definitions, tokens."""
    task_tokens: tuple[int, int] = (100, 1500)
    """The user's task, tokens (unique per session)."""
    turns: tuple[int, int] = (3, 10)
    """Requests per session."""
    output_tokens: tuple[int, int] = (32, 512)
    """Answer (tool call) per turn, tokens; appended to the context and used as ``output_len``."""
    tool_result_tokens: tuple[int, int] = (64, 2048)
    """Tool result appended after each turn, tokens."""
    think_median_s: float = 2.0
    """Median think/tool time between a finished turn and the next, seconds."""
    think_sigma: float = 1.0
    """Log-sd of the think/tool time (log-normal)."""
    think_max_s: float = 60.0
    """Cap on one think/tool time, seconds."""
    subagent_prob: float = 0.15
    """Probability that a turn spawns a sub-agent (0 disables sub-agents)."""
    subagent_system_tokens: int = 2048
    """Sub-agent system prompt, tokens (shared by all sub-agents)."""
    subagent_turns: tuple[int, int] = (2, 5)
    """Requests per sub-agent."""
    hash_block_size: int = 512
    """Tokens per hash block (512: Mooncake's)."""
    seed: int = 0
    """Seed of the numpy Generator."""

    def __post_init__(self) -> None:
        if self.num_sessions < 1:
            raise ValueError(f"num_sessions={self.num_sessions}: need >= 1")
        if not self.session_rate_per_s > 0:
            raise ValueError(f"session_rate_per_s={self.session_rate_per_s}: need > 0 sessions/s")
        for name in ("task_tokens", "turns", "output_tokens", "tool_result_tokens", "subagent_turns"):
            lo, hi = getattr(self, name)
            if not 1 <= lo <= hi:
                raise ValueError(f"{name}={(lo, hi)}: need 1 <= lo <= hi")
        for name in ("system_tokens", "subagent_system_tokens"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}={getattr(self, name)}: need >= 0 tokens")
        if not (self.think_median_s >= 0 and self.think_sigma >= 0 and self.think_max_s >= 0):
            raise ValueError("think_median_s, think_sigma and think_max_s must be >= 0")
        if not 0 <= self.subagent_prob <= 1:
            raise ValueError(f"subagent_prob={self.subagent_prob}: need 0..1")
        if self.hash_block_size < 1:
            raise ValueError(f"hash_block_size={self.hash_block_size}: need >= 1 token")


class _Builder:
    def __init__(self, spec: AgentSpec) -> None:
        self.spec = spec
        self.rng = np.random.default_rng(spec.seed)
        self.ids = PrefixIds()
        self.requests: list[Request] = []
        self.subagents: dict[str, int] = {}  # session id -> sub-agents spawned so far

    def uniform(self, bounds: tuple[int, int]) -> int:
        return int(self.rng.integers(bounds[0], bounds[1] + 1))

    def think(self) -> float:
        s = self.spec
        if s.think_median_s == 0:
            return 0.0
        t = float(s.think_median_s * np.exp(s.think_sigma * self.rng.standard_normal()))
        return round(min(t, s.think_max_s), 3)

    def session(self, sid: str, start_s: float, system_key: str, system_tokens: int,
                turns: int, klass: str, after: str | None, delay_s: float,
                subagents: bool) -> None:
        """Append the turns of one session (and of the sub-agents it spawns)."""
        s = self.spec
        bs = s.hash_block_size
        context = system_tokens + self.uniform(s.task_tokens)
        t = start_s
        for k in range(turns):
            rid = f"{sid}-t{k}"
            full = context // bs
            contents = [(system_key, j) if (j + 1) * bs <= system_tokens else (sid, j)
                        for j in range(full)]
            chain = self.ids.chain(contents)
            out_len = self.uniform(s.output_tokens)
            tail = [self.ids.fresh()] if context % bs else []
            self.requests.append(Request(
                request_id=rid, arrival_time=round(t, 3), prompt_len=context,
                block_hashes=tuple(chain), hash_block_size=bs, output_len=out_len,
                labels={"klass": klass, "turn": k, "_hash_ids": chain + tail},
                session_id=sid, after=after, delay_s=delay_s))
            context += out_len + self.uniform(s.tool_result_tokens)
            if subagents and self.rng.random() < s.subagent_prob:
                spawn = self.think()
                n = self.subagents.get(sid, 0)
                self.subagents[sid] = n + 1
                self.session(f"{sid}.sub{n}", t + spawn, "subagent-system",
                             s.subagent_system_tokens, self.uniform(s.subagent_turns),
                             "subagent", rid, spawn, subagents=False)
            after, delay_s = rid, self.think()
            t += delay_s


def generate_agent(spec: AgentSpec = AgentSpec(), name: str = "agent") -> Trace:
    """Generate the agent trace of ``spec`` (deterministic in ``spec``; see the module docstring).

    Returns:
        A ``Trace`` sorted by (``arrival_time``, ``request_id``). Every request has
        ``session_id``; every turn but a top-level session's first has ``after`` and
        ``delay_s``. Labels: ``klass`` ("agent" or "subagent"), ``turn`` (0-based).
    """
    b = _Builder(spec)
    gaps = b.rng.exponential(1.0 / spec.session_rate_per_s, size=spec.num_sessions)
    starts = np.concatenate([[0.0], np.cumsum(gaps[1:])])
    for i, start in enumerate(starts):
        b.session(f"s{i}", float(start), "system", spec.system_tokens, b.uniform(spec.turns),
                  "agent", None, 0.0, subagents=spec.subagent_prob > 0)
    requests = sorted(b.requests, key=lambda r: (r.arrival_time, r.request_id))
    return Trace(name=name, source=f"generate_agent({spec})", requests=tuple(requests))
