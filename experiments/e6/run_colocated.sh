#!/usr/bin/env bash
# E6 (part): the colocated mode behind a fleet (--mode colocated: each instance decodes what it
# prefilled, vLLM's colocated rules). Three workloads with recorded output lengths, N = 4 and 8,
# every router the workload allows x {fcfs, lpm, fairway, suf}, at LOAD (default 0.9) one-engine
# capacities per instance (--target-load N x LOAD; in colocated mode the capacity counts the
# decode work, the "(decode counted)" of the load line):
#  - conversation: the Mooncake conversation trace (12,031 requests), open loop, the profile's KV
#    capacity per instance; no sessions, so session-affinity refuses it.
#  - azure: the Azure conversation CSV's first WINDOW_END (default 1800) trace seconds, open loop;
#    no prefix identity and no sessions: round-robin and least-work only.
#  - agent: the agent sessions of run_azure_agent.sh (experiments/e6/agent_trace.py), closed loop,
#    338 KV blocks per instance; every router.
# Goodput SLOs as E5: TTFT <= 10 s, TPOT <= 100 ms. One compare per (workload, N, router):
# OUT/WORKLOAD/nN/ROUTER/ (its load line in ROUTER.log); then a table per (workload, N).
# WORKLOADS (default "conversation azure agent"), NS (default "4 8"), EXTRA: further compare options.
set -euo pipefail
OUT=${OUT:-results/e6-colocated}
LOAD=${LOAD:-0.9}
NS=${NS:-4 8}
CONVERSATION=${CONVERSATION:-../shared/data/traces/conversation_trace.jsonl}
AZURE=${AZURE:-../shared/data/traces/AzureLLMInferenceTrace_conv.csv}
WINDOW_END=${WINDOW_END:-1800}
WORKLOADS=${WORKLOADS:-conversation azure agent}
POLICIES=fcfs,lpm,fairway,suf
mkdir -p "$OUT"
python -m experiments.e6.agent_trace "$OUT/agent.jsonl"
run() {  # run WORKLOAD N ROUTER TRACE-OPTIONS...
  local work=$1 n=$2 router=$3; shift 3
  mkdir -p "$OUT/$work/n$n"
  python -m fairsim compare "$@" --mode colocated --slo ttft=10,tpot=0.1 --policies $POLICIES \
      --instances "$n" --router "$router" --target-load "$(python -c "print($n * $LOAD)")" \
      --format json --out "$OUT/$work/n$n/$router" ${EXTRA:-} > /dev/null 2> "$OUT/$work/n$n/$router.log"
}
for work in $WORKLOADS; do
  for n in $NS; do
    case $work in
      conversation) for router in round-robin least-work dynamo-kv llm-d sglang-cache-aware; do
                      run conversation "$n" "$router" --trace "$CONVERSATION"; done ;;
      azure) for router in round-robin least-work; do
               run azure "$n" "$router" --trace "$AZURE" --window-end "$WINDOW_END"; done ;;
      agent) for router in round-robin least-work session-affinity dynamo-kv llm-d sglang-cache-aware; do
               run agent "$n" "$router" --trace "$OUT/agent.jsonl" --kv-blocks 338; done ;;
      *) echo "unknown workload $work (conversation, azure, agent)" >&2; exit 2 ;;
    esac
  done
done
python -m experiments.e6.tables "$OUT" --policies $POLICIES
