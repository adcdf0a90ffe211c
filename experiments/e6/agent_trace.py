"""The agent-session trace of E6: the ``agent`` scenario, seed 1, 60 sessions at 1 session/s.

Written as a canonical trace (``fairsim.traces.canonical``) so that ``fairsim compare`` replays it
closed loop; its KV capacity (the scenario's 0.3 x reusable content) is 338 blocks of 512 tokens,
which the e6 scripts pass as ``--kv-blocks 338``. The same trace as ``run_azure_agent.sh`` writes.

Run: ``python -m experiments.e6.agent_trace OUT.jsonl``
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from fairsim.costmodel import DEFAULT_PROFILE, load_profile
from fairsim.scenarios import build_scenario
from fairsim.traces.canonical import write_canonical
from fairsim.traces.trace import Trace

KV_BLOCKS = 338


def main(argv: Sequence[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if len(args) != 1:
        print("usage: python -m experiments.e6.agent_trace OUT.jsonl", file=sys.stderr)
        return 2
    sc = build_scenario("agent", load_profile(DEFAULT_PROFILE), seed=1, num_sessions=60, session_rate_per_s=1.0)
    if sc.engine.kv_blocks != KV_BLOCKS:  # the scripts pass KV_BLOCKS; a changed generator must say so
        raise SystemExit(f"agent scenario's KV capacity is {sc.engine.kv_blocks} blocks, the scripts pass {KV_BLOCKS}")
    write_canonical(Trace(name="agent", source="agent scenario, seed 1, 60 sessions, 1 session/s",
                          requests=list(sc.requests), hash_block_size=512), args[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
