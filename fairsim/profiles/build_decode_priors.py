"""The decode-aware prior profiles: {A100-80G, H100-80G, H200, L40S} x Llama-3.1-{8B, 70B}.

These are PRIORS from public figures, not measurements. All eight are replaced in the package by
profiles built from AIConfigurator's measured vLLM kernel database
(``fairsim.profiles.build_measured``), so none is shipped now; ``build`` still gives each one (the
fidelity table in docs/profiles.md compares them), and ``python -m
fairsim.profiles.build_decode_priors`` writes only those without a measured replacement
(``tests/test_decode_priors.py`` checks both).

Form: COSTMODEL.md, with the colocated decode terms (``fairsim.costmodel``)::

    step = max(min_step_s, a + b*sum(n) + k*sum(n*(ctx + n/2)) + d*requests
                           + f*decodes + e*sum_decoding(ctx))

Where each number comes from (``SOURCES`` below holds the citation strings written into each file):

- ``a``, ``b`` (per-step and per-new-token time): BLIS's fitted vLLM v0.8.4 step coefficients
  ``beta_coeffs`` (microseconds: per step, per prefill token, per decode token) in
  ``defaults.yaml`` of github.com/inference-sim/inference-sim: Llama-3.1-8B-Instruct on A100-80 TP1
  (16,441.5 us, 47.84 us/token, 18.21 us/decode token) and H100 TP1 (5,752.7, 17.25, 6.00), and
  Llama-3.3-70B-Instruct (same architecture as Llama-3.1-70B) on H100 TP4 (12,601.3, 76.42, 66.84).
  They give a cold 2,048-token chunk of 114 ms (A100) and 41 ms (H100) for 8B, inside COSTMODEL.md's
  public ranges (110-150 ms, 41-62 ms).
  H200 has the H100's GH100 compute (989 dense BF16 TFLOP/s on both spec sheets) and only more/faster
  memory, so its compute-bound ``a``, ``b``, ``k`` are the H100's. No BLIS figure exists for the L40S:
  its ``a``, ``b`` are Preble's A6000 vLLM fit (5.67 ms + 0.131 ms/token, the shipped A6000 prior)
  scaled by dense BF16 throughput, 155/181 (A6000 vs L40S spec sheets). For 70B on A100 and L40S,
  the H100 70B-TP4 coefficients are scaled by the same GPU's 8B/H100-8B ratio (per coefficient).
- ``k`` (attention per new x context pair): COSTMODEL.md's measured 1.5 ns (A100, 7-8B) and 2.3 ns
  (A6000); H100/H200 = A100 x 312/989 and L40S = A6000 x 155/181 (dense BF16 ratios). For 70B at
  TP4 the per-GPU pair cost is the 8B one x (80 layers x 8,192 d_model) / (32 x 4,096) / 4 = x 1.25.
- ``e`` (per context token a decoding sequence reads): its KV bytes on one GPU / memory bandwidth;
  ``min_step_s``: the weights on one GPU / memory bandwidth (COSTMODEL.md: a step cannot be faster
  than reading the weights). Bandwidths from the NVIDIA spec sheets: A100 80GB SXM 2,039 GB/s,
  H100 SXM 3.35 TB/s, H200 4.8 TB/s, L40S 864 GB/s.
- ``d``, ``f`` = 0: no public figure separates a per-request or per-decoding-sequence term (BLIS's
  per-decode-token coefficient is mostly the KV read, which ``e`` models).
- ``kv_capacity`` (``fairsim.kvcapacity`` schema) and ``max_model_len``: device memory from the spec
  sheets (80, 80, 141, 48 GB, taken as GiB as for the A6000 prior), vLLM 0.32's default
  ``gpu_memory_utilization`` 0.92, weights = parameters x 2 bytes (BF16) / TP, an estimated 1 GiB
  activation reserve per GPU, KV bytes = 2 x layers x 8 KV heads x 128 x 2 bytes / TP; Llama-3.1's
  ``max_position_embeddings`` 131,072.

TP: 8B runs on one GPU; 70B at TP4, the tensor parallelism of BLIS's H100 figure (and the smallest
power of two that holds its 131 GiB of BF16 weights with room for KV on 80 GB and 48 GB cards).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fairsim.costmodel import PROFILE_DIR, Profile, model_idle_table

GIB = 2**30
BUDGET_TOKENS = 2048
LENGTHS = sorted({2**e for e in range(4, 19)} | {BUDGET_TOKENS * m for m in range(1, 129)})
GPU_MEMORY_UTILIZATION = 0.92
ACTIVATION_RESERVE_GIB = 1.0
MAX_MODEL_LEN = 131_072

BLIS = "BLIS defaults.yaml (github.com/inference-sim/inference-sim), vLLM v0.8.4 beta_coeffs"
GPUS: dict[str, dict[str, Any]] = {
    "a100-80g": {"device": "NVIDIA A100 80GB SXM", "memory_gb": 80, "bandwidth_Bps": 2.039e12,
                 "bf16_dense_tflops": 312,
                 "spec": "NVIDIA A100 datasheet: 80 GB HBM2e, 2,039 GB/s, 312 TFLOP/s dense BF16"},
    "h100-80g": {"device": "NVIDIA H100 80GB SXM", "memory_gb": 80, "bandwidth_Bps": 3.35e12,
                 "bf16_dense_tflops": 989,
                 "spec": "NVIDIA H100 datasheet: 80 GB HBM3, 3.35 TB/s, 989 TFLOP/s dense BF16 (SXM)"},
    "h200": {"device": "NVIDIA H200 SXM", "memory_gb": 141, "bandwidth_Bps": 4.8e12,
             "bf16_dense_tflops": 989,
             "spec": "NVIDIA H200 datasheet: 141 GB HBM3e, 4.8 TB/s, 989 TFLOP/s dense BF16"},
    "l40s": {"device": "NVIDIA L40S", "memory_gb": 48, "bandwidth_Bps": 864e9,
             "bf16_dense_tflops": 181,
             "spec": "NVIDIA L40S datasheet: 48 GB GDDR6, 864 GB/s, 362 TFLOP/s BF16 with sparsity "
                     "(181 dense)"},
}
MODELS: dict[str, dict[str, Any]] = {
    "llama3.1-8b": {"model": "meta-llama/Llama-3.1-8B", "params": 8_030_261_248, "layers": 32,
                    "d_model": 4096, "kv_heads": 8, "head_dim": 128, "tp": 1},
    "llama3.1-70b": {"model": "meta-llama/Llama-3.1-70B", "params": 70_553_706_496, "layers": 80,
                     "d_model": 8192, "kv_heads": 8, "head_dim": 128, "tp": 4},
}
# BLIS beta_coeffs (us per step, us per prefill token) for the entries that exist.
BLIS_BETA = {
    ("a100-80g", "llama3.1-8b"): (16441.531547147923, 47.837412108198656),
    ("h100-80g", "llama3.1-8b"): (5752.705191348184, 17.25086436834028),
    ("h100-80g", "llama3.1-70b"): (12601.271149123822, 76.42284100369776),
}
PREBLE_A6000 = (5670.0, 131.0)  # us per step, us per token (Preble's vLLM fit, A6000, Llama-2-7B)
A6000_DENSE_TFLOPS = 155
K_A100_8B = 1.5e-9  # COSTMODEL.md: 1.4-1.6 ns per pair on A100, 7-8B
K_A6000_8B = 2.3e-9  # COSTMODEL.md: 2.2-2.4 ns per pair on A6000, 7-8B


def _ab_8b(gpu: str) -> tuple[tuple[float, float], str]:
    """(a_us, b_us) for 8B on one GPU and where they come from."""
    if gpu == "h200":
        return BLIS_BETA[("h100-80g", "llama3.1-8b")], f"{BLIS}: H100 TP1 Llama-3.1-8B (H200 = H100 compute)"
    if gpu == "l40s":
        scale = A6000_DENSE_TFLOPS / GPUS["l40s"]["bf16_dense_tflops"]
        return ((PREBLE_A6000[0], PREBLE_A6000[1] * scale),
                f"Preble's A6000 vLLM fit 5.67 ms + 0.131 ms/token, per-token term x {scale:.4f} "
                f"(dense BF16 155/181)")
    name = {"a100-80g": "A100-80", "h100-80g": "H100"}[gpu]
    return BLIS_BETA[(gpu, "llama3.1-8b")], f"{BLIS}: {name} TP1 Llama-3.1-8B-Instruct"


def coefficients(gpu: str, model: str) -> tuple[dict[str, float], list[str]]:
    """Cost-model coefficients (seconds) of one prior and the source of each."""
    g, m = GPUS[gpu], MODELS[model]
    (a8, b8), src8 = _ab_8b(gpu)
    if model == "llama3.1-8b":
        a_us, b_us, ab_src = a8, b8, src8
    elif gpu in ("h100-80g", "h200"):
        a_us, b_us = BLIS_BETA[("h100-80g", "llama3.1-70b")]
        ab_src = f"{BLIS}: H100 TP4 Llama-3.3-70B-Instruct (Llama-3.1-70B architecture)"
        if gpu == "h200":
            ab_src += "; H200 = H100 compute"
    else:
        ah, bh = BLIS_BETA[("h100-80g", "llama3.1-8b")]
        a7, b7 = BLIS_BETA[("h100-80g", "llama3.1-70b")]
        a_us, b_us = a7 * a8 / ah, b7 * b8 / bh
        ab_src = (f"{BLIS}: H100 TP4 Llama-3.3-70B-Instruct, scaled per coefficient by this GPU's "
                  f"8B / H100 8B ({src8})")
    if gpu == "l40s":
        k8, k_src = K_A6000_8B * A6000_DENSE_TFLOPS / g["bf16_dense_tflops"], "A6000 2.3 ns x 155/181"
    elif gpu == "a100-80g":
        k8, k_src = K_A100_8B, "A100 1.5 ns (COSTMODEL.md, 1.4-1.6 ns)"
    else:
        k8, k_src = K_A100_8B * 312 / g["bf16_dense_tflops"], "A100 1.5 ns x 312/989"
    k = k8 * (m["layers"] * m["d_model"]) / (32 * 4096) / m["tp"]
    if model != "llama3.1-8b":
        k_src += " x 1.25 (70B layers x d_model / 8B, per GPU at TP4)"
    weights_bytes = m["params"] * 2 / m["tp"]
    kv_bytes = kv_bytes_per_token(model)
    bw = g["bandwidth_Bps"]
    coeffs = dict(
        a_s=round(a_us * 1e-6, 9), b_s_per_token=round(b_us * 1e-6, 12), k_s_per_pair=float(f"{k:.4g}"),
        d_s_per_request=0.0, e_s_per_decode_ctx_token=float(f"{kv_bytes / bw:.6g}"), f_s_per_decode=0.0,
        min_step_s=round(weights_bytes / bw, 9),
    )
    sources = [
        f"a_s, b_s_per_token: {ab_src}",
        f"k_s_per_pair: {k_src}",
        f"e_s_per_decode_ctx_token: {kv_bytes} KV bytes per token per GPU / {bw:.4g} B/s ({g['spec']})",
        f"min_step_s: {weights_bytes:.4g} weight bytes per GPU (BF16, TP{m['tp']}) / {bw:.4g} B/s",
        "d_s_per_request, f_s_per_decode: 0, no public figure separates them",
    ]
    return coeffs, sources


def kv_bytes_per_token(model: str) -> int:
    """KV bytes of one token on one GPU: 2 (K, V) x layers x KV heads x head dim x 2 bytes / TP."""
    m = MODELS[model]
    return 2 * m["layers"] * m["kv_heads"] * m["head_dim"] * 2 // m["tp"]


def name_of(gpu: str, model: str) -> str:
    """Profile name (file stem), e.g. ``h100-80g-llama3.1-70b-tp4-vllm-prior``."""
    tp = MODELS[model]["tp"]
    return f"{gpu}-{model}{'' if tp == 1 else f'-tp{tp}'}-vllm-prior"


PRIORS = [(gpu, model) for gpu in GPUS for model in MODELS]
"""The (GPU, model) pairs with a prior."""

REPLACED_BY_MEASURED = frozenset(PRIORS)
"""Pairs whose prior is not shipped: ``fairsim.profiles.build_measured`` builds a measured profile
for each (``tests/test_decode_priors.py`` checks the two lists agree)."""


def build(gpu: str, model: str) -> dict[str, Any]:
    """The JSON form of one prior (``Profile.to_dict`` plus ``kv_capacity`` and ``max_model_len``)."""
    g, m = GPUS[gpu], MODELS[model]
    coeffs, sources = coefficients(gpu, model)
    prefill = {k: coeffs[k] for k in ("a_s", "b_s_per_token", "k_s_per_pair", "d_s_per_request")}
    seconds = model_idle_table(**prefill, lengths=LENGTHS, budget_tokens=BUDGET_TOKENS)
    weights_gib = round(m["params"] * 2 / m["tp"] / GIB, 2)
    profile = Profile(
        name=name_of(gpu, model), kind="prior", idle_prompt_tokens=tuple(LENGTHS),
        idle_seconds=tuple(round(s, 9) for s in seconds), budget_tokens=BUDGET_TOKENS,
        metadata={
            "label": "PRIOR built from public figures; not measured by fairsim",
            "device": g["device"], "model": m["model"], "tensor_parallel": m["tp"],
            "engine": "vLLM", "block_size": 16, "max_num_batched_tokens": BUDGET_TOKENS,
            "sources": sources,
            "kv_capacity_sources": [
                f"device memory {g['memory_gb']} GB ({g['spec']}), taken as GiB",
                f"gpu_memory_utilization {GPU_MEMORY_UTILIZATION}: vLLM 0.32 default",
                f"weights {m['params']:,} parameters x 2 bytes (BF16) / TP{m['tp']} = {weights_gib} GiB",
                f"activation reserve {ACTIVATION_RESERVE_GIB} GiB per GPU: estimate",
                f"KV 2 x {m['layers']} layers x {m['kv_heads']} KV heads x {m['head_dim']} x 2 bytes "
                f"/ TP{m['tp']} = {kv_bytes_per_token(model)} bytes per token",
                f"max_model_len {MAX_MODEL_LEN:,}: Llama-3.1 max_position_embeddings",
            ],
            "idle_table": "cost-model chunked cold prefill at the budget (no measurement)",
        },
        **coeffs,
    )
    return profile_json(profile, float(g["memory_gb"]), weights_gib, kv_bytes_per_token(model), MAX_MODEL_LEN)


def profile_json(profile: Profile, device_memory_gib: float, weights_gib: float, kv_bytes_per_token: int,
                 max_model_len: int) -> dict[str, Any]:
    """``profile`` as a shipped prior's JSON: its fields, then ``kv_capacity`` (how the KV capacity
    was derived, ``fairsim.kvcapacity``) and ``max_model_len``, then its metadata."""
    out = profile.to_dict()
    metadata = out.pop("metadata")
    out["kv_capacity"] = {
        "device_memory_gib": device_memory_gib,
        "gpu_memory_utilization": GPU_MEMORY_UTILIZATION,
        "weights_gib": weights_gib,
        "activation_reserve_gib": ACTIVATION_RESERVE_GIB,
        "kv_bytes_per_token": kv_bytes_per_token,
    }
    out["max_model_len"] = max_model_len
    out["metadata"] = metadata
    return out


def main() -> None:
    """Write every prior in ``PRIORS`` that no measured profile replaces into the package."""
    for gpu, model in PRIORS:
        if (gpu, model) in REPLACED_BY_MEASURED:
            print(f"skipped {name_of(gpu, model)}: replaced by a measured profile (build_measured)")
            continue
        path = Path(PROFILE_DIR) / f"{name_of(gpu, model)}.json"
        path.write_text(json.dumps(build(gpu, model), indent=2) + "\n")
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
