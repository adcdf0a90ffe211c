"""KV cache sizing for a trace: block size and capacity in blocks."""

from __future__ import annotations

from collections.abc import Sequence

from fairsim.errors import CapacityError
from fairsim.sim.config import EngineConfig
from fairsim.sim.keys import block_keys, blocks_for, capacity_from_fraction, reusable_blocks
from fairsim.types import Request

DEFAULT_KV_FRACTION = 0.3
"""Default KV capacity as a fraction of the trace's reusable content (the paper: 1/4 to 1/3)."""


def resolve_capacity(requests: Sequence[Request], config: EngineConfig) -> tuple[int, int]:
    """``(block_size, kv_blocks)`` for ``requests`` under ``config``.

    Raises:
        CapacityError: A request needs more blocks than the whole cache (it could never run).
        ValueError: Mixed hash block sizes with ``block_size=None``, or an incompatible size.
    """
    if config.block_size is not None:
        block_size = config.block_size
    else:
        sizes = {r.hash_block_size for r in requests}
        if len(sizes) > 1:
            raise ValueError(f"trace mixes hash block sizes {sorted(sizes)}; set block_size")
        block_size = sizes.pop() if sizes else 16
    # Tokens a request holds in KV at its largest: the prompt, plus in colocated mode every
    # generated token but the last (which is sampled, never computed).
    extra = (lambda r: r.output_len - 1) if config.mode == "colocated" else (lambda r: 0)
    worst = max(requests, key=lambda r: r.prompt_len + extra(r), default=None)
    if config.kv_blocks is not None:
        kv_blocks = config.kv_blocks
    elif config.kv_fraction is not None:
        reusable = reusable_blocks(block_keys(r, block_size) for r in requests)
        kv_blocks = capacity_from_fraction(config.kv_fraction, reusable)
    else:
        # Default sizing: 0.3 of the reusable content, but never below the longest prompt, so a
        # trace with little reuse still runs. An explicit size is never raised silently.
        reusable = reusable_blocks(block_keys(r, block_size) for r in requests)
        kv_blocks = capacity_from_fraction(DEFAULT_KV_FRACTION, reusable)
        if worst is not None:
            kv_blocks = max(kv_blocks, blocks_for(worst.prompt_len + extra(worst), block_size))
    if worst is not None and blocks_for(worst.prompt_len + extra(worst), block_size) > kv_blocks:
        need = blocks_for(worst.prompt_len + extra(worst), block_size)
        what = " for its prompt and output" if config.mode == "colocated" else ""
        raise CapacityError(
            f"request {worst.request_id!r} needs {need} blocks of {block_size} tokens{what} "
            f"but the KV cache holds {kv_blocks}; raise kv_blocks/kv_fraction "
            f"or drop requests longer than {kv_blocks * block_size} tokens"
        )
    return block_size, kv_blocks
