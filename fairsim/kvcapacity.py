"""KV cache capacity of a device, in tokens, from its memory, the weights and the KV bytes per token.

This is how vLLM sizes its KV cache at start-up (vLLM v1 ``Worker.determine_available_memory`` in
``vllm/v1/worker/gpu_worker.py``, then ``num_blocks = available_memory // bytes_per_block`` in
``vllm/v1/core/kv_cache_utils.py``)::

    available_bytes   = device_memory x gpu_memory_utilization - weights - activation_reserve
    kv_bytes_per_token = 2 (K and V) x layers x kv_heads x head_dim x dtype_bytes / tensor_parallel
    kv_capacity_tokens = floor(available_bytes / kv_bytes_per_token)

``activation_reserve`` is what vLLM's profile run finds besides the weights: the peak activation
memory of a ``max_num_batched_tokens`` forward pass plus non-torch allocations (CUDA context,
cuBLAS/NCCL workspaces, CUDA graphs). vLLM logs the resulting figure at start-up ("Available KV
cache memory: X GiB", "GPU KV cache size: N tokens"); a measured profile should record it. The
per-token bytes are vLLM's attention page size (``AttentionSpec.page_size_bytes`` in
``vllm/v1/kv_cache_interface.py``: ``2 x block_size x num_kv_heads x head_size x dtype_size`` per
layer) divided by the block size. On vLLM's CPU backend the KV space is given explicitly
(``VLLM_CPU_KVCACHE_SPACE`` GiB, used as-is by ``CPUWorker.determine_available_memory``): record it
as ``device_memory_gib`` with utilisation 1 and no weights or reserve.

vLLM keeps one block of its pool as the "null" block; this one-block difference is not modelled
(the capacity here is the pool's full size).
"""

from __future__ import annotations

import math
from typing import Any

from fairsim.errors import ProfileError
from fairsim.record import record

GIB = 2**30
"""Bytes per GiB."""

VLLM_DEFAULT_GPU_MEMORY_UTILIZATION = 0.9
"""vLLM's default ``gpu_memory_utilization`` (``vllm/config/cache.py``)."""

FIELDS = ("device_memory_gib", "gpu_memory_utilization", "weights_gib", "activation_reserve_gib",
          "kv_bytes_per_token")
"""Keys of a profile's ``kv_capacity`` object (all required when the object is present)."""


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, dtype_bytes: int,
                       tensor_parallel: int = 1) -> int:
    """KV cache bytes one token occupies on one GPU: ``2 x layers x kv_heads x head_dim x dtype_bytes / TP``.

    The 2 counts K and V. E.g. Llama-3.1-8B in BF16: ``2 x 32 x 8 x 128 x 2 = 131,072`` bytes
    (128 KiB). Source: vLLM ``AttentionSpec.page_size_bytes`` (per block, per layer), see the
    module docstring.

    Raises:
        ValueError: A non-positive argument, or KV heads that tensor parallelism cannot split.
    """
    args = dict(layers=layers, kv_heads=kv_heads, head_dim=head_dim, dtype_bytes=dtype_bytes,
                tensor_parallel=tensor_parallel)
    for name, value in args.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"kv_bytes_per_token: {name}={value!r} must be an integer >= 1")
    total = 2 * layers * kv_heads * head_dim * dtype_bytes
    if total % tensor_parallel:
        raise ValueError(f"kv_bytes_per_token: {total} bytes per token do not split over "
                         f"tensor_parallel={tensor_parallel} GPUs")
    return total // tensor_parallel


@record(frozen=True, slots=True)
class KVCapacity:
    """Memory figures of one engine (one GPU, or one rank under tensor parallelism).

    Attributes:
        device_memory_gib: Device memory, GiB (spec sheet; > 0).
        gpu_memory_utilization: Share of it vLLM may use, in (0, 1] (vLLM default 0.9).
        weights_gib: Model weights on this device, GiB (>= 0).
        activation_reserve_gib: Peak activations plus non-torch memory, GiB (>= 0).
        kv_bytes_per_token: KV bytes per token on this device (``kv_bytes_per_token()``; >= 1).

    Raises:
        ProfileError: A value out of range, or no memory left for the KV cache.
    """

    device_memory_gib: float
    gpu_memory_utilization: float
    weights_gib: float
    activation_reserve_gib: float
    kv_bytes_per_token: int

    def __post_init__(self) -> None:
        for name in ("device_memory_gib", "weights_gib", "activation_reserve_gib"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ProfileError(f"kv_capacity.{name}={value!r}: need a finite number >= 0 GiB")
        if not self.device_memory_gib > 0:
            raise ProfileError(f"kv_capacity.device_memory_gib={self.device_memory_gib!r}: need > 0 GiB")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ProfileError(f"kv_capacity.gpu_memory_utilization={self.gpu_memory_utilization!r}: "
                               f"need a fraction in (0, 1]")
        if self.kv_bytes_per_token < 1:
            raise ProfileError(f"kv_capacity.kv_bytes_per_token={self.kv_bytes_per_token!r}: need >= 1")
        if self.available_gib > 0 and not math.isfinite(self.available_gib * GIB):  # near float's limit
            raise ProfileError(
                f"kv_capacity: {self.device_memory_gib} GiB x {self.gpu_memory_utilization} - "
                f"{self.weights_gib} GiB weights - {self.activation_reserve_gib} GiB reserve is beyond what a "
                f"float holds in bytes; give the device's memory in GiB")
        if self.tokens < 1:
            raise ProfileError(
                f"kv_capacity: {self.device_memory_gib} GiB x {self.gpu_memory_utilization} - "
                f"{self.weights_gib} GiB weights - {self.activation_reserve_gib} GiB reserve leaves "
                f"no memory for the KV cache")

    @property
    def available_gib(self) -> float:
        """Memory left for the KV cache, GiB: ``memory x utilisation - weights - reserve``."""
        return self.device_memory_gib * self.gpu_memory_utilization - self.weights_gib - self.activation_reserve_gib

    @property
    def tokens(self) -> int:
        """KV capacity in tokens: ``floor(available bytes / kv_bytes_per_token)`` (module docstring)."""
        available = self.available_gib * GIB
        if not available > 0:  # (also -inf: weights near float's limit)
            return 0
        return math.floor(available / self.kv_bytes_per_token + 1e-9)

    def to_dict(self) -> dict[str, Any]:
        """The profile JSON form (the keys of ``FIELDS``)."""
        return {name: getattr(self, name) for name in FIELDS}


def kv_capacity_from_dict(data: Any, source: str) -> KVCapacity:
    """Parse a profile's ``kv_capacity`` object.

    Raises:
        ProfileError: Not an object, a missing or mistyped key (named with ``source``), or a value
            out of range.
    """
    if not isinstance(data, dict):
        raise ProfileError(f"{source}: 'kv_capacity' must be an object with keys {', '.join(FIELDS)}")
    unknown = sorted(set(data) - set(FIELDS))
    if unknown:
        raise ProfileError(f"{source}: unknown key 'kv_capacity.{unknown[0]}' (known: {', '.join(FIELDS)})")
    values: dict[str, Any] = {}
    for name in FIELDS:
        if name not in data:
            raise ProfileError(f"{source}: missing key 'kv_capacity.{name}'")
        value = data[name]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ProfileError(f"{source}: 'kv_capacity.{name}' must be a number, got {value!r}")
        try:
            float(value)
        except OverflowError:  # JSON integers are unbounded: one past a float's range
            raise ProfileError(f"{source}: 'kv_capacity.{name}' must be a finite number, got a whole number of "
                               f"{len(str(abs(value)))} digits") from None
        if name == "kv_bytes_per_token":
            if not isinstance(value, int) and not float(value).is_integer():
                raise ProfileError(f"{source}: 'kv_capacity.kv_bytes_per_token' must be an integer, got {value!r}")
            value = int(value)
        else:
            value = float(value)
        values[name] = value
    try:
        return KVCapacity(**values)
    except ProfileError as exc:
        raise ProfileError(f"{source}: {exc}") from exc
