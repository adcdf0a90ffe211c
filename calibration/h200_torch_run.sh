#!/usr/bin/env bash
# One GPU run of `fairsim calibrate --backend torch` with Llama-3.1-8B's shape (random weights,
# bf16, no download, no vLLM), then the fidelity table with its row. Prepared for the device
# machine lent to some sessions (one H200); run from the repository root:
#
#     bash calibration/h200_torch_run.sh            # writes into $OUT (default: ./h200-run)
#
# Needs torch with CUDA and fairsim's dependencies (numpy, scipy, pandas) importable there.
# Budget: the grid below is AIConfigurator's (calibration/aiconfigurator.py DEFAULT_GRID) with
# decode contexts capped at 8,192 (decodes x context <= 2M tokens share one KV buffer per
# context, calibration/torch_backend.py make_caches); about 150 points x 6 runs, each below
# 0.3 s on an H200: 2-4 minutes, so a 420 s limit leaves room for a rerun within 15 minutes.
set -euo pipefail
OUT="${OUT:-h200-run}"
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
python - <<'PY'
import torch
assert torch.cuda.is_available(), "no CUDA device: this script is for the GPU machine"
print(torch.__version__, torch.cuda.get_device_name(0), torch.cuda.mem_get_info())
PY
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv > "$OUT/nvidia-smi.csv" || true
timeout 420 python -m fairsim calibrate --backend torch --device cuda \
    --model-config calibration/configs/llama-3.1-8b.json \
    --new-tokens 1,16,64,256,512,1024,2048 --context-tokens 0,1024,4096,16384,65536 \
    --requests-per-step 1,2,4,8 --decodes 1,8,32,64,128,256 --decode-contexts 512,2048,8192 \
    --mixed-new-tokens 0,512 --idle-lengths 16,128,512,1024,2048,4096,8192,16384,32768 \
    --budget 2048 --repeats 5 --statistic median --max-model-len 131072 \
    --name h200-llama3.1-8b-torch --out "$OUT/h200-llama3.1-8b-torch.json" 2>&1 | tee "$OUT/calibrate.log"
python -m fairsim.profiles.fidelity "$OUT/h200-llama3.1-8b-torch.json" > "$OUT/fidelity.md"
cat "$OUT/fidelity.md"
