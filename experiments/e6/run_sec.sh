#!/usr/bin/env bash
# E6 (part): E1's SEC traces behind a fleet. N tenants, each one seed of E1's full trace (calm 600 s
# at 0.5, burst 600 s at 0.9, spike 60 s at 1.6 requests/s; experiments/e6/sec_tenants.py), overlaid
# in time with no shared prefix, on N instances: each instance is offered what one engine was in E1
# (no time scaling), and its KV capacity is the mean of the tenants' E1 capacities. Every router
# the trace allows (no sessions: session-affinity refuses it) x {fcfs, lpm, fairway, suf}, N = 4
# and 8; a reference: each tenant alone on one engine (what a router that kept tenants apart gives).
# MODE=colocated: E5's output lengths (log-normal, median 128) and --mode colocated.
# One compare per (trace, N, router): OUT/TRACE/nN/ROUTER/ (its load line in ROUTER.log); then the
# whole-trace and spike-window tables.
# TRACES (default "sec-dyn1 sec-dyn2"), NS (default "4 8"), EXTRA: further compare options.
set -euo pipefail
OUT=${OUT:-results/e6-sec}
TRACES=${TRACES:-sec-dyn1 sec-dyn2}
NS=${NS:-4 8}
MODE=${MODE:-prefill-only}
POLICIES=fcfs,lpm,fairway,suf
outputs=""; mode_args=""
if [[ $MODE == colocated ]]; then outputs="--outputs"; mode_args="--mode colocated --slo ttft=10,tpot=0.1"; fi
for trace in $TRACES; do
  for n in $NS; do
    dir="$OUT/$trace/n$n"
    python -m experiments.e6.sec_tenants --scenario "$trace" --tenants "$n" $outputs --out "$dir/trace" > /dev/null
    kv=$(cat "$dir/trace/kv_blocks")
    mkdir -p "$dir/alone"
    for router in round-robin least-work dynamo-kv llm-d sglang-cache-aware; do
      python -m fairsim compare --trace "$dir/trace/fleet.jsonl" --kv-blocks "$kv" --policies $POLICIES \
          --instances "$n" --router "$router" $mode_args --format json --out "$dir/$router" ${EXTRA:-} > /dev/null 2> "$dir/$router.log"
    done
    for ((k = 0; k < n; k++)); do
      python -m fairsim compare --trace "$dir/trace/tenant-$k.jsonl" --kv-blocks "$kv" --policies $POLICIES \
          $mode_args --format json --out "$dir/alone/t$k" ${EXTRA:-} > /dev/null 2> "$dir/alone/t$k.log"
    done
  done
done
python -m experiments.e6.tables "$OUT" --policies $POLICIES
python -m experiments.e6.tables "$OUT" --policies $POLICIES --window spike
