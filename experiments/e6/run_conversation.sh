#!/usr/bin/env bash
# E6 (part): does prefill ordering still matter behind a router? The conversation trace on a
# fleet of 4 instances, every router x {fcfs, lpm, fairway}. One compare per router; summary.json
# per router under OUT (default results/e6-conversation). EXTRA: further options, e.g.
# EXTRA="--target-load 3.6" (the whole fleet's offered load in one engine's capacity: 0.9 per
# instance of 4); default: the trace's native rate (7.0, 1.75 per instance).
set -euo pipefail
OUT=${OUT:-results/e6-conversation}
TRACE=${TRACE:-../shared/data/traces/conversation_trace.jsonl}
for router in round-robin least-work dynamo-kv llm-d sglang-cache-aware; do
  python -m fairsim compare --trace "$TRACE" --policies fcfs,lpm,fairway --instances 4 --router "$router" \
      --format json --out "$OUT/$router" ${EXTRA:-} > /dev/null
done
python - "$OUT" <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
print(f"{'router':20} {'policy':8} {'p50 s':>8} {'p99 s':>8} {'hit':>6} {'imbalance':>9}")
for d in sorted(p for p in out.iterdir() if p.is_dir()):
    for pol, s in json.loads((d / "summary.json").read_text()).items():
        print(f"{d.name:20} {pol:8} {s['ttft_p50_s']:8.2f} {s['ttft_p99_s']:8.2f} {s['hit_rate']:6.3f} {s['load_imbalance']:9.3f}")
PY
