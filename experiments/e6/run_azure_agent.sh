#!/usr/bin/env bash
# E6 (part): does prefill ordering still matter behind a router, beyond the conversation trace?
# Two workloads, N = 4 and 8 instances, every router the workload allows x {fcfs, lpm, fairway, suf},
# at LOAD (default 0.9) one-engine capacities per instance (--target-load N x LOAD, on the raw
# offered prompt tokens; each instance its own engine and cache):
#  - azure: the Azure LLM inference conversation CSV, its first WINDOW_END (default 1800) trace
#    seconds, open loop. No prefix identity and no sessions: dynamo-kv, llm-d, sglang-cache-aware
#    and session-affinity refuse it (exit 2), so round-robin and least-work only.
#  - agent: generated closed-loop agent sessions (fairsim.scenarios "agent", seed 1, 60 sessions
#    at 1 session/s, written as a canonical trace), closed loop, with the scenario's own KV capacity
#    (338 blocks of 512 tokens per instance); every router.
# One compare per (workload, N, router): OUT/WORKLOAD/nN/ROUTER/summary.json; then a table.
# WORKLOADS (default "azure agent") picks the workloads.
set -euo pipefail
OUT=${OUT:-results/e6-more}
LOAD=${LOAD:-0.9}
AZURE=${AZURE:-../shared/data/traces/AzureLLMInferenceTrace_conv.csv}
WINDOW_END=${WINDOW_END:-1800}
WORKLOADS=${WORKLOADS:-azure agent}
mkdir -p "$OUT"
python - "$OUT/agent.jsonl" <<'PY'
import sys
from fairsim.costmodel import load_profile
from fairsim.scenarios import build_scenario
from fairsim.traces.canonical import write_canonical
from fairsim.traces.trace import Trace
sc = build_scenario("agent", load_profile("a6000-llama3.1-8b-vllm-prior"), seed=1, num_sessions=60,
                    session_rate_per_s=1.0)
assert sc.engine.kv_blocks == 338, sc.engine.kv_blocks  # the capacity passed below
write_canonical(Trace(name="agent", source="agent scenario, seed 1, 60 sessions, 1 session/s",
                      requests=list(sc.requests), hash_block_size=512), sys.argv[1])
PY
for n in 4 8; do
  load=$(python -c "print($n * $LOAD)")
  for router in round-robin least-work; do
    [[ " $WORKLOADS " == *" azure "* ]] || break
    python -m fairsim compare --trace "$AZURE" --window-end "$WINDOW_END" --policies fcfs,lpm,fairway,suf \
        --instances $n --router $router --target-load "$load" --format json --out "$OUT/azure/n$n/$router" > /dev/null
  done
  for router in round-robin least-work session-affinity dynamo-kv llm-d sglang-cache-aware; do
    [[ " $WORKLOADS " == *" agent "* ]] || break
    python -m fairsim compare --trace "$OUT/agent.jsonl" --kv-blocks 338 --policies fcfs,lpm,fairway,suf \
        --instances $n --router $router --target-load "$load" --format json --out "$OUT/agent/n$n/$router" > /dev/null
  done
done
python - "$OUT" <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
pols = ("fcfs", "lpm", "fairway", "suf")
for work in ("azure", "agent"):
    if not (out / work).is_dir():
        continue
    for nd in sorted((out / work).iterdir()):
        print(f"\n{work}, {nd.name[1:]} instances")
        print("| router | " + " | ".join(f"{p} p50 / p99 s" for p in pols) + " | hit rate (fcfs) | load imbalance (fcfs) |")
        print("|---|" + "---|" * (len(pols) + 2))
        for rd in sorted(nd.iterdir()):
            s = json.loads((rd / "summary.json").read_text())
            cells = [f"{s[p]['ttft_p50_s']:.2f} / {s[p]['ttft_p99_s']:.2f}" for p in pols]
            print(f"| {rd.name} | " + " | ".join(cells) + f" | {s['fcfs']['hit_rate']:.3f} | {s['fcfs']['load_imbalance']:.3f} |")
PY
