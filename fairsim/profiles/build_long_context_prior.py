"""Build the shipped long-context prior: Qwen2.5-7B-Instruct-1M on one H200 with vLLM.

Run ``python -m fairsim.profiles.build_long_context_prior`` to rewrite
``fairsim/profiles/h200-qwen2.5-7b-1m-vllm-prior.json``; ``tests/test_max_model_len.py`` checks
that the shipped file equals this construction. A PRIOR from public figures and our scaling
choices, not a measurement; a profile measured with ``fairsim calibrate`` replaces it.

Why this model: the Llama-3.1 priors stop at its 131,072-token context, and agent sessions send
prompts of up to ~791k tokens. Qwen2.5-7B-Instruct-1M documents a 1,010,000-token context
(``max_position_embeddings`` of its ``config.json``; model card: "Context Length: Full 1,010,000
tokens"), and one H200 holds its KV for more than one such request, as vLLM requires at start-up.

Public figures (the model's ``config.json`` / model card, NVIDIA's H200 datasheet):

- 28 layers, 28 query heads and 4 KV heads of 128 dims (hidden 3,584), intermediate 18,944,
  vocabulary 152,064, untied embeddings: 7,615,616,512 parameters, 6,525,618,176 of them outside
  the two embedding matrices (model card: 7.61B, 6.53B non-embedding).
- H200: 141 GB HBM3e, 4.8 TB/s, 989 dense BF16 TFLOP/s (H100 compute).

Our choices (no public step-time fit exists for this model on this GPU):

- ``a``: the per-step time of BLIS's H100 TP1 Llama-3.1-8B fit (``build_decode_priors``: H200 =
  H100 compute), unchanged: a per-step overhead that does not depend on the model's width.
- ``b``: that fit's per-token time x 6,525,618,176 / 6,979,588,096, the ratio of non-embedding
  parameters (Qwen2.5-7B / Llama-3.1-8B): a prefill token's matmul work is proportional to them
  (vLLM applies the output embedding only to a prompt's last token).
- ``k``: the H200 8B pair cost of ``build_decode_priors`` (A100 1.5 ns x 312/989) x (28 layers x
  3,584 query width) / (32 x 4,096) = x 0.7656, the same rule as its 70B scaling. Dense attention
  is assumed; Qwen's own 1M serving recipe (dual-chunk and sparse attention) would be faster on
  prompts of hundreds of thousands of tokens, so long prefills here are on the slow side.
- ``e`` = 57,344 KV bytes per token / 4.8 TB/s; ``min_step_s`` = 15.23e9 weight bytes / 4.8 TB/s;
  ``d = f = 0``, as the other priors.
- ``kv_capacity``: 141 GB taken as GiB, ``gpu_memory_utilization`` 0.92 (vLLM 0.32 default),
  weights 7,615,616,512 x 2 bytes = 14.19 GiB (14.185, rounded as the other priors), an
  estimated 1 GiB activation reserve (a 2,048-token profile run: vLLM's profile run is sized by
  ``max_num_batched_tokens``, not ``max_model_len``), KV 2 x 28 x 4 x 128 x 2 bytes = 57,344
  bytes per token: (141 x 0.92 - 14.19 - 1.0) GiB / 57,344 B = 2,144,525 tokens, room for two
  1,010,000-token requests.
- ``max_model_len`` = 1,010,000, the model's documented context.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fairsim.costmodel import PROFILE_DIR, Profile, model_idle_table
from fairsim.profiles.build_decode_priors import (ACTIVATION_RESERVE_GIB, BLIS, BLIS_BETA, BUDGET_TOKENS, GIB, GPU_MEMORY_UTILIZATION,
                                                  GPUS, K_A100_8B, profile_json)

NAME = "h200-qwen2.5-7b-1m-vllm-prior"
MODEL = "Qwen/Qwen2.5-7B-Instruct-1M"
PARAMS = 7_615_616_512
NON_EMBEDDING_PARAMS = 6_525_618_176
LLAMA_8B_NON_EMBEDDING_PARAMS = 8_030_261_248 - 2 * 128_256 * 4_096
LAYERS, QUERY_WIDTH, KV_HEADS, HEAD_DIM = 28, 3_584, 4, 128
MAX_MODEL_LEN = 1_010_000
KV_BYTES_PER_TOKEN = 2 * LAYERS * KV_HEADS * HEAD_DIM * 2
LENGTHS = sorted({2**e for e in range(4, 21)} | {BUDGET_TOKENS * m for m in range(1, 65)} | {MAX_MODEL_LEN})
"""``T_idle`` lengths: powers of two to 1,048,576, the budget's multiples to 131,072, the context."""


def coefficients() -> tuple[dict[str, float], list[str]]:
    """Cost-model coefficients (seconds) and the source of each (module docstring)."""
    gpu = GPUS["h200"]
    a_us, b8_us = BLIS_BETA[("h100-80g", "llama3.1-8b")]
    b_ratio = NON_EMBEDDING_PARAMS / LLAMA_8B_NON_EMBEDDING_PARAMS
    k_ratio = LAYERS * QUERY_WIDTH / (32 * 4096)
    k = K_A100_8B * 312 / gpu["bf16_dense_tflops"] * k_ratio
    bw = gpu["bandwidth_Bps"]
    coeffs = dict(a_s=round(a_us * 1e-6, 9), b_s_per_token=round(b8_us * b_ratio * 1e-6, 12),
                  k_s_per_pair=float(f"{k:.4g}"), d_s_per_request=0.0,
                  e_s_per_decode_ctx_token=float(f"{KV_BYTES_PER_TOKEN / bw:.6g}"), f_s_per_decode=0.0,
                  min_step_s=round(PARAMS * 2 / bw, 9))
    sources = [
        f"a_s: {BLIS}: H100 TP1 Llama-3.1-8B per-step time (H200 = H100 compute); ours: kept for this model",
        f"b_s_per_token: the same fit's per-token time x {b_ratio:.5f} (ours: non-embedding parameters "
        f"{NON_EMBEDDING_PARAMS:,} Qwen2.5-7B / {LLAMA_8B_NON_EMBEDDING_PARAMS:,} Llama-3.1-8B)",
        f"k_s_per_pair: A100 1.5 ns x 312/989 x {k_ratio:.4f} (ours: 28 layers x 3,584 query width / "
        f"32 x 4,096); dense attention assumed, Qwen's sparse 1M recipe would be faster on long prompts",
        f"e_s_per_decode_ctx_token: {KV_BYTES_PER_TOKEN} KV bytes per token / {bw:.4g} B/s ({gpu['spec']})",
        f"min_step_s: {PARAMS * 2:.4g} weight bytes (BF16) / {bw:.4g} B/s",
        "d_s_per_request, f_s_per_decode: 0, no public figure separates them",
        f"architecture: {MODEL} config.json (28 layers, 28 query / 4 KV heads x 128, hidden 3,584, "
        f"intermediate 18,944, vocabulary 152,064, untied embeddings): {PARAMS:,} parameters",
    ]
    return coeffs, sources


def build() -> dict[str, Any]:
    """The profile's JSON form (``Profile.to_dict`` plus ``kv_capacity`` and ``max_model_len``)."""
    gpu = GPUS["h200"]
    coeffs, sources = coefficients()
    prefill = {k: coeffs[k] for k in ("a_s", "b_s_per_token", "k_s_per_pair", "d_s_per_request")}
    seconds = model_idle_table(**prefill, lengths=LENGTHS, budget_tokens=BUDGET_TOKENS)
    weights_gib = round(PARAMS * 2 / GIB, 2)
    profile = Profile(
        name=NAME, kind="prior", idle_prompt_tokens=tuple(LENGTHS),
        idle_seconds=tuple(round(s, 9) for s in seconds), budget_tokens=BUDGET_TOKENS,
        metadata={
            "label": "PRIOR built from public figures and our scaling choices; not measured by fairsim",
            "device": gpu["device"], "model": MODEL, "tensor_parallel": 1,
            "engine": "vLLM", "block_size": 16, "max_num_batched_tokens": BUDGET_TOKENS,
            "sources": sources,
            "kv_capacity_sources": [
                f"device memory {gpu['memory_gb']} GB ({gpu['spec']}), taken as GiB",
                f"gpu_memory_utilization {GPU_MEMORY_UTILIZATION}: vLLM 0.32 default",
                f"weights {PARAMS:,} parameters x 2 bytes (BF16) = {weights_gib} GiB",
                f"activation reserve {ACTIVATION_RESERVE_GIB} GiB: estimate (sized by max_num_batched_tokens)",
                f"KV 2 x {LAYERS} layers x {KV_HEADS} KV heads x {HEAD_DIM} x 2 bytes = "
                f"{KV_BYTES_PER_TOKEN} bytes per token",
                f"max_model_len {MAX_MODEL_LEN:,}: {MODEL} max_position_embeddings (model card: "
                f"context length 1,010,000 tokens)",
            ],
            "idle_table": "cost-model chunked cold prefill at the budget (no measurement)",
        },
        **coeffs,
    )
    return profile_json(profile, float(gpu["memory_gb"]), weights_gib, KV_BYTES_PER_TOKEN, MAX_MODEL_LEN)


def main() -> None:
    """Write the profile into the package."""
    path = Path(PROFILE_DIR) / f"{NAME}.json"
    path.write_text(json.dumps(build(), indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
