#!/usr/bin/env bash
# E6 (disaggregated): does prefill ordering still matter in disaggregated serving behind a KV router?
# The paper ran Fairway as the prefill node of a disaggregated deployment. Here: the shipped
# conversation window and the full conversation trace, 8 GPUs split P prefill + D decode engines
# (4+4 and 6+2), routers round-robin and dynamo-kv on the prefill side, policies fcfs, lpm,
# fairway and suf (the best engine ordering on chat traces: docs/orderings.md), at LOAD (default
# 3.6) one colocated engine's capacity for the whole deployment (--target-load; the load line
# fairsim prints, decode counted), SLOs ttft=10 s, tpot=0.05 s for goodput. Default profile and
# its KV capacity on both sides, default link (400 Gbit/s per GPU). One compare per (trace,
# split, router), run one after another: OUT/TRACE/pPdD/ROUTER/summary.json; then the table.
set -euo pipefail
OUT=${OUT:-results/e6-disaggregated}
LOAD=${LOAD:-3.6}
WINDOW=${WINDOW:-fairsim/traces/data/conversation_window.jsonl}
FULL=${FULL:-../shared/data/traces/conversation_trace.jsonl}
SPLITS=${SPLITS:-"4:4 6:2"}
for trace in window full; do
  path=$WINDOW; [[ $trace == full ]] && path=$FULL
  for split in $SPLITS; do
    p=${split%:*}; d=${split#*:}
    for router in round-robin dynamo-kv; do
      dir="$OUT/$trace/p${p}d${d}/$router"
      mkdir -p "$dir"; start=$(date +%s)
      python -m fairsim compare --trace "$path" --policies fcfs,lpm,fairway,suf --mode disaggregated \
          --prefill-instances "$p" --decode-instances "$d" --router "$router" --target-load "$LOAD" \
          --slo ttft=10,tpot=0.05 --format json --out "$dir" > /dev/null 2> "$dir/log.txt" \
        || { cat "$dir/log.txt" >&2; exit 1; }
      echo "$trace p${p}d${d} $router: $(( $(date +%s) - start )) s" >&2
    done
  done
done
python - "$OUT" <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
print("| trace | P+D | router | policy | TTFT p50 s | TTFT p99 s | TPOT p50 ms | goodput | held p99 s | held requests |")
print("|---|---|---|---|---|---|---|---|---|---|")
for trace in ("window", "full"):
    for split in sorted((out / trace).iterdir()):
        for router in ("round-robin", "dynamo-kv"):
            rows = json.loads((split / router / "summary.json").read_text())
            for pol, s in rows.items():
                pd = f"{s['prefill_instances']}+{s['decode_instances']}"
                print(f"| {trace} | {pd} | {router} | {pol} | {s['ttft_p50_s']:.2f} | {s['ttft_p99_s']:.2f} | "
                      f"{1e3 * s['tpot_p50_s']:.1f} | {s['goodput_share']:.3f} | {s['held_p99_s']:.2f} | "
                      f"{s['held_requests']} |")
PY
