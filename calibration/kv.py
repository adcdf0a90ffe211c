"""The KV capacity and ``max_model_len`` of the live engine being calibrated, for the profile JSON.

Read from the engine's own configuration after start-up (no extra measurement): the pool vLLM
allocated (``cache_config.num_gpu_blocks`` x ``block_size`` tokens), the KV bytes per token from
the model (``2 x layers x kv_heads per rank x head_dim x cache dtype bytes``), and the memory it was
carved from, so that ``KVCapacity.tokens`` equals vLLM's pool in tokens (``fairsim.kvcapacity``):

- explicit KV size (``kv_cache_memory_bytes``, e.g. the CPU backend's ``VLLM_CPU_KVCACHE_SPACE``) or
  an overridden block count: ``device_memory_gib`` = the pool's bytes, utilisation 1, no weights
  or reserve;
- sized from device memory (GPU): the device's total memory, vLLM's ``gpu_memory_utilization``,
  the weights vLLM loaded (``model_runner.model_memory_usage`` where the engine runs in-process,
  else 0 and everything but the pool counts as reserve), and the reserve as the remainder.
"""

from __future__ import annotations

from typing import Any

from fairsim.kvcapacity import GIB, KVCapacity, kv_bytes_per_token


def _cache_dtype_bytes(cache_dtype: str, model_dtype: Any) -> int:
    if str(cache_dtype).startswith("fp8"):
        return 1
    return int(getattr(model_dtype, "itemsize", 2))


def _weights_bytes(llm: Any) -> int | None:
    try:
        worker = llm.llm_engine.engine_core.engine_core.model_executor.driver_worker.worker
        return int(worker.model_runner.model_memory_usage)
    except (AttributeError, TypeError, ValueError):
        return None  # engine core in another process: not reachable


def engine_kv_capacity(llm: Any, total_device_bytes: int | None = None) -> tuple[KVCapacity, int, dict[str, Any]]:
    """``(kv_capacity, max_model_len, notes)`` of a started ``vllm.LLM``.

    Args:
        llm: The engine (``fairsim.live.engine.make_llm``).
        total_device_bytes: The GPU's total memory, bytes (``torch.cuda.mem_get_info()[1]``); None
            on CPU or where the KV size is explicit.

    Returns:
        The ``KVCapacity`` whose ``tokens`` equals the pool vLLM allocated, the engine's
        ``max_model_len`` (tokens), and ``notes`` for the profile metadata (blocks, block size,
        how the figures were obtained).
    """
    vc = llm.llm_engine.vllm_config
    cache, model, parallel = vc.cache_config, vc.model_config, vc.parallel_config
    per_token = kv_bytes_per_token(model.get_num_layers(parallel), model.get_num_kv_heads(parallel),
                                   model.get_head_size(), _cache_dtype_bytes(cache.cache_dtype, model.dtype))
    blocks = int(cache.num_gpu_blocks)
    pool = blocks * cache.block_size * per_token
    notes: dict[str, Any] = {"kv_cache_blocks": blocks, "kv_block_size": int(cache.block_size),
                             "kv_cache_tokens": blocks * int(cache.block_size)}
    explicit = cache.kv_cache_memory_bytes is not None or cache.num_gpu_blocks_override is not None
    if explicit or total_device_bytes is None:
        notes["kv_capacity_source"] = "the KV pool vLLM allocated (explicit size), as device_memory_gib"
        capacity = KVCapacity(pool / GIB, 1.0, 0.0, 0.0, per_token)
    else:
        weights = _weights_bytes(llm)
        usable = total_device_bytes * cache.gpu_memory_utilization
        reserve = max(0.0, usable - (weights or 0) - pool)
        notes["kv_capacity_source"] = ("device total memory, vLLM's gpu_memory_utilization, loaded weights, "
                                       "reserve = the rest outside the KV pool"
                                       + ("" if weights is not None else " (weights not reachable: in reserve)"))
        capacity = KVCapacity(total_device_bytes / GIB, float(cache.gpu_memory_utilization),
                              (weights or 0) / GIB, reserve / GIB, per_token)
    return capacity, int(model.max_model_len), notes
