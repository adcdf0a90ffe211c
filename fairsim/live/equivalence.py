"""Decision equivalence: the simulator's engine decisions against a live vLLM engine.

The same trace runs through ``fairsim.sim.simulate`` and through ``replay_virtual`` (a live
vLLM engine on a virtual clock driven by the same profile), with the same policy, budget,
``max_num_seqs``, block size and usable KV blocks. Per request three decisions are compared:
cached tokens at first admission, the step in which it was first scheduled, and the step in
which it finished. The figure is the share of requests for which all three are identical.

Session traces (``session_trace``) replay closed-loop on both sides: a turn is released when its
predecessor finished in *that* engine plus its think time, so a difference in one finish step
would also show up in the release, first-scheduled and finish steps of every later turn.

Colocated mode (``compare(..., colocated=True)``): both sides decode every request to its
``output_len`` (``equivalence_trace_colocated`` draws them), the finish step is that of the last
token, and the preemption count is compared too (``DECISIONS_COLOCATED``); a small KV cache makes
running decodes preempt one another.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from fairsim.costmodel import Profile
from fairsim.live.engine import LiveConfig
from fairsim.live.replay import replay_virtual
from fairsim.policies import make_policy
from fairsim.sim import EngineConfig, simulate
from fairsim.traces import RagSpec, generate_rag
from fairsim.traces.agent import AgentSpec, generate_agent
from fairsim.types import Request

#: Decisions compared per request.
DECISIONS = ("cached_tokens", "first_scheduled_step", "finish_step")
#: Decisions compared per request in colocated mode.
DECISIONS_COLOCATED = DECISIONS + ("preemptions",)


@dataclass(frozen=True)
class Equivalence:
    """Per-request comparison of simulator and vLLM decisions.

    Attributes:
        policy: Policy name.
        table: One row per request: ``request_id``, ``sim_<d>`` and ``vllm_<d>`` for each decision
            ``d`` in ``DECISIONS``, and ``same`` (all three equal).
        evictions: Blocks the simulator evicted (evidence of eviction pressure).
        preemptions: Preemptions in the simulator (evidence of KV pressure in colocated mode).
    """

    policy: str
    table: pd.DataFrame
    evictions: int
    preemptions: int = 0

    @property
    def fraction_identical(self) -> float:
        """Share of requests (0-1) whose three decisions are identical."""
        return float(self.table["same"].mean()) if len(self.table) else 1.0

    def first_difference(self) -> pd.Series | None:
        """The earliest-arriving request that differs, or None."""
        diff = self.table[~self.table["same"]]
        return None if diff.empty else diff.iloc[0]


def equivalence_trace(num_requests: int = 40, seed: int = 1, rate_per_s: float = 4.0) -> list[Request]:
    """A small RAG trace with short prompts (<= 2,248 tokens) for live comparisons."""
    spec = RagSpec(num_requests=num_requests, rate_per_s=rate_per_s, num_docs=12, zipf_s=1.0,
                   system_tokens=512, excerpt_tokens=512, max_excerpts=3,
                   question_tokens=(32, 200), seed=seed)
    return list(generate_rag(spec).requests)


def session_trace(num_sessions: int = 10, seed: int = 1, session_rate_per_s: float = 8.0) -> list[Request]:
    """A small agent trace (``fairsim.traces.agent``) for live closed-loop comparisons.

    Contexts stay short (a 512-token shared system prompt, at most ~3,300 tokens) and hash blocks
    are 128 tokens (the CPU engine's block), so growing session prefixes hit at block granularity
    and a 48-block cache is under eviction pressure. Think times: median 0.2 s (virtual).
    """
    spec = AgentSpec(num_sessions=num_sessions, session_rate_per_s=session_rate_per_s,
                     system_tokens=512, task_tokens=(32, 256), turns=(2, 5),
                     output_tokens=(16, 128), tool_result_tokens=(32, 384), think_median_s=0.2,
                     think_sigma=1.0, think_max_s=5.0, subagent_prob=0.2,
                     subagent_system_tokens=256, subagent_turns=(1, 3), hash_block_size=128,
                     seed=seed)
    return list(generate_agent(spec, "agent-equivalence").requests)


def equivalence_trace_colocated(num_requests: int = 40, seed: int = 1, rate_per_s: float = 4.0,
                                max_output: int = 256) -> list[Request]:
    """``equivalence_trace`` with output lengths drawn uniformly from 1..``max_output`` tokens
    (numpy ``default_rng(seed)``), for colocated comparisons.

    Raises:
        ValueError: ``max_output < 1``.
    """
    import numpy as np
    from dataclasses import replace

    if max_output < 1:
        raise ValueError(f"max_output={max_output}: need >= 1 token")
    rng = np.random.default_rng(seed)
    reqs = equivalence_trace(num_requests, seed, rate_per_s)
    outs = rng.integers(1, max_output + 1, size=len(reqs))
    return [replace(r, output_len=int(o)) for r, o in zip(reqs, outs)]


def compare(requests: Sequence[Request], policy: str, profile: Profile, config: LiveConfig,
            profile_ref: str | None = None, colocated: bool = False, *, replay: str | None = None,
            think_scale: float = 1.0) -> Equivalence:
    """Run ``requests`` in the simulator and in vLLM (virtual clock) and compare decisions.

    Args:
        requests: The trace.
        policy: Registered policy name (with ``config.params``).
        profile: Cost model for step times (both sides) and ``T_idle``.
        config: Live engine settings; ``kv_blocks`` must be set (both sides use it).
        profile_ref: Name or path of ``profile`` for the hook (default: ``config.profile``).
        colocated: Decode to ``output_len`` on both sides and compare preemptions too.
        replay: ``"open"``, ``"closed"`` or ``None`` (closed where the trace has sessions), on
            both sides.
        think_scale: Closed loop: multiplies ``delay_s`` on both sides.

    Raises:
        ValueError: ``config.kv_blocks`` is None.
        SessionError: Closed loop: an unknown ``after`` or a cycle.
    """
    if config.kv_blocks is None:
        raise ValueError("set LiveConfig.kv_blocks so the simulator and vLLM have the same cache")
    from dataclasses import replace

    config = replace(config, policy=policy, profile=profile_ref or config.profile)
    sim = simulate(requests, make_policy(policy, profile, **config.params), profile,
                   EngineConfig(budget_tokens=config.budget_tokens, max_num_seqs=config.max_num_seqs,
                                block_size=config.block_size, kv_blocks=config.kv_blocks,
                                mode="colocated" if colocated else "prefill-only"),
                   replay=replay, think_scale=think_scale)
    live = replay_virtual(requests, config, profile, replay=replay, think_scale=think_scale,
                          colocated=colocated)
    decisions = list(DECISIONS_COLOCATED if colocated else DECISIONS)
    s = sim.requests.set_index("request_id")[decisions]
    v = live.requests.set_index("request_id")[decisions]
    table = s.add_prefix("sim_").join(v.add_prefix("vllm_"))
    same = pd.Series(True, index=table.index)
    for d in decisions:
        same &= table[f"sim_{d}"].astype("Int64") == table[f"vllm_{d}"].astype("Int64")
    table["same"] = same.fillna(False).astype(bool)
    return Equivalence(policy, table.reset_index(), int(sim.steps["evictions"].sum()),
                       int(sim.steps["preemptions"].sum()))
