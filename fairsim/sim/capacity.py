"""KV cache sizing for a trace: block size and capacity in blocks.

The capacity comes from, in this order: an explicit ``kv_blocks``, ``kv_tokens`` (floored to whole
blocks of the engine's block size) or ``kv_fraction`` of the trace's reusable content; else, in
the CLI, the profile's ``kv_capacity`` (``with_profile_capacity``: tokens, from the device memory,
weights and KV bytes per token, ``fairsim.kvcapacity``); else 0.3 of the reusable content.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter
from typing import TYPE_CHECKING

from fairsim.errors import CapacityError
from fairsim.record import replace
from fairsim.sim.config import EngineConfig
from fairsim.sim.keys import block_keys, blocks_for, capacity_from_fraction, reusable_blocks
from fairsim.types import Request

if TYPE_CHECKING:
    from fairsim.costmodel import Profile

DEFAULT_KV_FRACTION = 0.3
"""Default KV capacity as a fraction of the trace's reusable content (the paper: 1/4 to 1/3)."""

MAX_KV_BLOCKS = 2**22
"""Largest KV cache the simulator builds, blocks (4,194,304). Its block pool costs ~165 bytes and
~0.25 us per block to build (measured: 0.7 GB, 1 s at this size); that is 67M tokens at 16 tokens
per block, far beyond a real GPU's KV space. A cache that holds every block of the trace never
evicts, so a larger one cannot change any result."""


def resolve_capacity(requests: Sequence[Request], config: EngineConfig) -> tuple[int, int]:
    """``(block_size, kv_blocks)`` for ``requests`` under ``config``.

    Raises:
        CapacityError: A request needs more blocks than the whole cache (it could never run).
        ValueError: Mixed hash block sizes with ``block_size=None``, or an incompatible size.
    """
    if config.block_size is not None:
        block_size = config.block_size
    else:
        sizes = set(map(attrgetter("hash_block_size"), requests))  # read in C, no Python frame per request
        if len(sizes) > 1:
            raise ValueError(f"trace mixes hash block sizes {sorted(sizes)}; set block_size")
        block_size = sizes.pop() if sizes else 16
    # Tokens a request holds in KV at its largest: the prompt, plus in colocated mode every
    # generated token but the last (which is sampled, never computed).
    extra = (lambda r: r.output_len - 1) if config.mode == "colocated" else (lambda r: 0)
    # The first request of the largest need, as max() picks it; prefill-only by attrgetter
    # (the same int keys without a Python call per request: ~1 ms of a 12,000-request start-up).
    need = (lambda r: r.prompt_len + r.output_len - 1) if config.mode == "colocated" else attrgetter("prompt_len")
    worst = max(requests, key=need, default=None)
    if config.kv_blocks is not None:
        kv_blocks = config.kv_blocks
    elif config.kv_tokens is not None:
        kv_blocks = config.kv_tokens // block_size
        if kv_blocks < 1:
            raise CapacityError(f"kv_tokens={config.kv_tokens}: less than one block of {block_size} tokens"
                                + (f" (block_size={block_size})" if config.block_size is not None else ""))
    elif config.kv_fraction is not None:
        reusable = reusable_blocks(block_keys(r, block_size) for r in requests)
        if reusable == 0 and requests:
            raise CapacityError(f"kv_fraction={config.kv_fraction:g}: the trace has no reusable content (no block "
                                f"of {block_size} tokens appears in two requests), so a fraction of it is no "
                                f"cache; size it with --kv-blocks or --kv-tokens (EngineConfig kv_blocks/kv_tokens)")
        kv_blocks = capacity_from_fraction(config.kv_fraction, reusable)
    else:
        # Default sizing: 0.3 of the reusable content, but never below the longest prompt, so a
        # trace with little reuse still runs. An explicit size is never raised silently.
        reusable = reusable_blocks(block_keys(r, block_size) for r in requests)
        kv_blocks = capacity_from_fraction(DEFAULT_KV_FRACTION, reusable)
        if worst is not None:
            kv_blocks = max(kv_blocks, blocks_for(worst.prompt_len + extra(worst), block_size))
    if kv_blocks > MAX_KV_BLOCKS:
        total = sum(blocks_for(r.prompt_len + extra(r), block_size) for r in requests)
        if config.kv_blocks is not None:
            source = f"kv_blocks={kv_blocks}"
        elif config.kv_tokens is not None:
            source = (f"kv_tokens={config.kv_tokens} gives {float(kv_blocks):.3g} blocks of "
                      f"{block_size} tokens, which")
        else:
            source = f"kv_fraction={config.kv_fraction} gives {float(kv_blocks):.3g} blocks, which"
        raise CapacityError(
            f"{source} is above the simulator's limit of {MAX_KV_BLOCKS} blocks; every prompt of "
            f"this trace together fills {total} blocks of {block_size} tokens, so kv_blocks={total} "
            f"(kv_tokens={total * block_size}) already never evicts")
    if worst is not None and blocks_for(worst.prompt_len + extra(worst), block_size) > kv_blocks:
        need = blocks_for(worst.prompt_len + extra(worst), block_size)
        colocated = config.mode == "colocated"
        what = " for its prompt and output" if colocated else ""
        # Colocated, the output counts too: a part of the trace without long prompts may not help.
        keep = (f"requests whose prompt and output pass {kv_blocks * block_size} tokens together "
                f"(--window-start, --window-end or --max-requests), or cap outputs with --max-model-len"
                if colocated else
                f"prompts over {kv_blocks * block_size} tokens (--window-start, --window-end or --max-requests)")
        raise CapacityError(
            f"request {worst.request_id!r} needs {need} blocks of {block_size} tokens{what} "
            f"but the KV cache holds {kv_blocks}; raise the capacity "
            f"(--kv-tokens, --kv-blocks to at least {need}, or "
            f"--kv-fraction; EngineConfig kv_tokens/kv_blocks/kv_fraction), or keep a part of the "
            f"trace without {keep}"
        )
    return block_size, kv_blocks


def with_profile_capacity(config: EngineConfig, profile: Profile) -> tuple[EngineConfig, str]:
    """``config`` with the profile's KV capacity when it sets none, and where the size comes from.

    Args:
        config: Engine settings; an explicit ``kv_blocks``, ``kv_tokens`` or ``kv_fraction`` wins.
        profile: The cost-model profile; its ``kv_capacity_tokens`` (None when the profile has no
            ``kv_capacity`` object) becomes ``kv_tokens``.

    Returns:
        ``(config, source)``: the config to simulate with and a phrase naming the source of the
        capacity, e.g. ``"profile kv_capacity 231,014 tokens"`` or, for a profile without
        ``kv_capacity``, a note that the 0.3-of-reusable-content default is used.
    """
    if config.kv_blocks is not None:
        return config, "set in blocks"
    if config.kv_tokens is not None:
        return config, f"set as {config.kv_tokens:,} tokens"
    if config.kv_fraction is not None:
        return config, f"kv_fraction {config.kv_fraction:g} of the trace's reusable content"
    tokens = profile.kv_capacity_tokens
    if tokens is None:
        # Colocated (and a disaggregated run's engines, which run colocated) the default is raised
        # to the largest prompt plus output (resolve_capacity's ``need``), not to the longest prompt.
        held = ("the largest prompt and output of a request" if config.mode == "colocated"
                else "the longest prompt")
        return config, (f"profile {profile.name!r} has no kv_capacity, so {DEFAULT_KV_FRACTION:g} x "
                        f"the trace's reusable content (raised to {held})")
    return replace(config, kv_tokens=tokens), f"profile kv_capacity {tokens:,} tokens"


def describe_capacity(profile_name: str, block_size: int, kv_blocks: int, source: str) -> str:
    """One line naming the profile, the KV capacity in blocks and tokens, and the block size."""
    return (f"profile {profile_name}; KV cache {kv_blocks:,} blocks x {block_size} tokens = "
            f"{kv_blocks * block_size:,} tokens ({source}); block size {block_size}")
