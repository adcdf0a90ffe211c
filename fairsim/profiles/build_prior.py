"""Build the shipped prior profile for the Fairway paper's setting (A6000, Llama-3.1-8B, vLLM).

Run ``python -m fairsim.profiles.build_prior`` to rewrite
``fairsim/profiles/a6000-llama3.1-8b-vllm-prior.json``; ``tests/test_costmodel.py`` checks that the
shipped file equals this construction.

The coefficients are public figures (COSTMODEL.md), not measurements of ours:

- ``a = 5.67 ms``, ``b = 0.131 ms/token``: Preble's fitted vLLM equation on an A6000 (Llama-2-7B),
  ``0.131 ms/token * n + 5.67 ms``, i.e. about 274 ms for a cold 2,048-token chunk.
- ``k = 2.3 ns`` per (new x context) token pair: middle of the 2.2-2.4 ns measured on an A6000 for
  7-8B models.
- ``d = 0``: no public figure separates a per-request term.
- Decode terms (colocated mode only; ``fairsim.costmodel``): ``min_step_s`` = the BF16 weights
  (8,030,261,248 parameters x 2 bytes = 16.06 GB) / 768 GB/s (NVIDIA RTX A6000 datasheet) =
  20.9 ms; ``e`` = 128 KiB of KV per token (32 layers x 8 KV heads x 128 x 2 x 2 bytes) / 768 GB/s
  = 0.171 us per decoding context token; ``f = 0`` (no public figure). Prefill-only results do
  not use them.

``T_idle(L)`` is the model's own chunked cold prefill at a 2,048-token budget (no measured table
exists for a prior).

KV capacity (``fairsim.kvcapacity``; vLLM's start-up sizing):

- ``device_memory_gib = 48``: RTX A6000, 48 GB GDDR6 (NVIDIA spec sheet; ``nvidia-smi`` shows
  49,140 MiB).
- ``gpu_memory_utilization = 0.92``: vLLM's default (``vllm/config/cache.py``, vLLM 0.32; 0.9 in
  earlier releases).
- ``weights_gib = 14.96``: Llama-3.1-8B has 8,030,261,248 parameters (model card / safetensors
  index), 2 bytes each in BF16: 16.06e9 bytes = 14.96 GiB.
- ``activation_reserve_gib = 1.0``: an estimate, not a measurement: peak activations of a
  2,048-token profile run of an 8B model plus non-torch memory (vLLM logs the real figure).
- ``kv_bytes_per_token = 131,072``: 32 layers x 8 KV heads x 128 head dim x 2 bytes (BF16) x 2
  (K, V) = 128 KiB (Llama-3.1-8B ``config.json``).

That gives (48 x 0.92 - 14.96 - 1.0) GiB / 128 KiB = 231,014 tokens (451 blocks of 512), 6 % below
the 480 x 512 = 245,760 tokens the experiments set explicitly (``fairsim.scenarios.A6000_KV_BLOCKS``,
sized as 30 GiB of KV without the utilisation cap). ``max_model_len = 131,072``: Llama-3.1's
``max_position_embeddings``, vLLM's default ``max_model_len``.
"""

from __future__ import annotations

from pathlib import Path

from fairsim.costmodel import PROFILE_DIR, Profile, model_idle_table, save_profile
from fairsim.kvcapacity import GIB, KVCapacity, kv_bytes_per_token

NAME = "a6000-llama3.1-8b-vllm-prior"
COEFFICIENTS = dict(a_s=5.67e-3, b_s_per_token=1.31e-4, k_s_per_pair=2.3e-9, d_s_per_request=0.0)
BUDGET_TOKENS = 2048
# Powers of two from 16 to 256k tokens, plus the budget's multiples in between for long prompts.
LLAMA31_8B_PARAMS = 8_030_261_248
KV_CAPACITY = KVCapacity(
    device_memory_gib=48.0,
    gpu_memory_utilization=0.92,
    weights_gib=round(LLAMA31_8B_PARAMS * 2 / GIB, 2),
    activation_reserve_gib=1.0,
    kv_bytes_per_token=kv_bytes_per_token(layers=32, kv_heads=8, head_dim=128, dtype_bytes=2),
)
MAX_MODEL_LEN = 131_072
LENGTHS = sorted({2**e for e in range(4, 19)} | {BUDGET_TOKENS * m for m in range(1, 129)})


DECODE = dict(min_step_s=round(8_030_261_248 * 2 / 768e9, 9),
              e_s_per_decode_ctx_token=float(f"{131_072 / 768e9:.6g}"), f_s_per_decode=0.0)


def build_prior() -> Profile:
    """The prior profile, built from the public figures listed in this module's docstring."""
    seconds = model_idle_table(**COEFFICIENTS, lengths=LENGTHS, budget_tokens=BUDGET_TOKENS)
    return Profile(
        name=NAME,
        kind="prior",
        idle_prompt_tokens=tuple(LENGTHS),
        idle_seconds=tuple(round(s, 9) for s in seconds),
        budget_tokens=BUDGET_TOKENS,
        kv_capacity=KV_CAPACITY,
        max_model_len=MAX_MODEL_LEN,
        metadata={
            "label": "PRIOR built from public figures; not measured by fairsim",
            "device": "NVIDIA RTX A6000",
            "model": "meta-llama/Llama-3.1-8B",
            "engine": "vLLM",
            "block_size": 16,
            "max_num_batched_tokens": BUDGET_TOKENS,
            "sources": [
                "Preble (ICLR 2025) fitted vLLM equation on A6000: 0.131 ms/token * n + 5.67 ms",
                "attention slope 2.2-2.4 ns per (new x cached) pair on A6000, 7-8B models "
                "(COSTMODEL.md public figures)",
                "min_step_s: 16.06e9 weight bytes (Llama-3.1-8B BF16) / 768 GB/s (RTX A6000 "
                "datasheet); e_s_per_decode_ctx_token: 131,072 KV bytes per token / 768 GB/s; "
                "f_s_per_decode: 0, no public figure",
            ],
            "idle_table": "cost-model chunked cold prefill at the budget (no measurement)",
            "kv_capacity_sources": [
                "RTX A6000 48 GB (NVIDIA spec sheet)",
                "gpu_memory_utilization 0.92: vLLM default (vllm/config/cache.py, vLLM 0.32)",
                "Llama-3.1-8B 8,030,261,248 parameters x 2 bytes (BF16) = 14.96 GiB",
                "activation reserve 1.0 GiB: estimate (peak activations + non-torch memory)",
                "KV 2 x 32 layers x 8 KV heads x 128 dims x 2 bytes = 128 KiB per token",
                "max_model_len 131,072: Llama-3.1 max_position_embeddings",
            ],
        },
        **COEFFICIENTS,
        **DECODE,
    )


def main() -> None:
    """Write the prior profile JSON into the package."""
    path = Path(PROFILE_DIR) / f"{NAME}.json"
    save_profile(build_prior(), path)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
