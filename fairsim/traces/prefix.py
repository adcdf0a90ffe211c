"""Prefix hash ids for generated workloads (Mooncake convention), shared by the generators.

A generated prompt is a sequence of 512-token content blocks (system prompt, excerpt blocks, ...)
followed by a unique tail shorter than a block (the question). Mooncake ``hash_ids`` are *prefix*
hashes: two requests share hash block ``j`` iff their first ``j + 1`` content blocks are equal
(kvcache-ai/Mooncake ``FAST25-release/README.md``). ``PrefixIds`` assigns such ids: the id of a
block is determined by (id of the previous block, content of this block), so equal prefixes get
equal ids and ids are handed out in order of first appearance (as in the Mooncake files).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

from fairsim.types import Request

BLOCK = 512
"""Tokens per hash block (Mooncake's 512)."""


def check_block_multiples(spec: Any, *names: str) -> None:
    """Raise ``ValueError`` unless each named field of ``spec`` is a positive multiple of 512 tokens
    (shared content must be block-aligned for prefix sharing to be block-aligned)."""
    for name in names:
        value = getattr(spec, name)
        if value <= 0 or value % BLOCK:
            raise ValueError(f"{name}={value}: need a positive multiple of {BLOCK}")


def check_tail_range(name: str, bounds: tuple[int, int]) -> None:
    """Raise ``ValueError`` unless ``1 <= lo <= hi < 512``: a unique tail (the question) stays a
    partial block, so it is never cacheable."""
    lo, hi = bounds
    if not 1 <= lo <= hi < BLOCK:
        raise ValueError(f"{name}={bounds}: need 1 <= lo <= hi < {BLOCK}")


class PrefixIds:
    """Assigns prefix hash ids to chains of content blocks (state kept per instance, per trace)."""

    def __init__(self) -> None:
        self._ids: dict[tuple[int, Hashable], int] = {}

    def chain(self, contents: Sequence[Hashable]) -> list[int]:
        """Prefix ids of ``contents`` (one content key per 512-token block), in order."""
        parent = -1
        out = []
        for content in contents:
            key = (parent, content)
            block_id = self._ids.get(key)
            if block_id is None:
                block_id = len(self._ids)
                self._ids[key] = block_id
            out.append(block_id)
            parent = block_id
        return out

    def fresh(self) -> int:
        """A new id that no other block has (for a request's unique partial tail)."""
        key = (-2, len(self._ids))
        self._ids[key] = len(self._ids)
        return self._ids[key]


def make_request(ids: PrefixIds, request_id: str, arrival_s: float, contents: Sequence[Hashable],
                 tail_tokens: int, labels: dict[str, Any], output_len: int = 1) -> Request:
    """A ``Request`` of ``len(contents)`` shared 512-token blocks plus a unique tail.

    Args:
        ids: The trace's ``PrefixIds``.
        request_id: Unique id.
        arrival_s: Arrival time, seconds (rounded to whole ms, as Mooncake stores it).
        contents: Content key of each full block (equal keys at equal prefixes share KV).
        tail_tokens: Unique tokens after the blocks (the question), 1..511: never cacheable.
        labels: Metric labels; ``_hash_ids`` (all ids, the tail's included) is added so the trace
            can be written with ``write_mooncake``.
        output_len: Output tokens.

    Raises:
        ValueError: ``tail_tokens`` outside 1..511.
    """
    if not 1 <= tail_tokens < BLOCK:
        raise ValueError(f"tail_tokens={tail_tokens}: need 1..{BLOCK - 1} (a partial block)")
    chain = ids.chain(contents)
    all_ids = chain + [ids.fresh()]
    return Request(
        request_id=request_id,
        arrival_time=round(arrival_s * 1000.0) / 1000.0,
        prompt_len=len(chain) * BLOCK + tail_tokens,
        block_hashes=tuple(chain),
        hash_block_size=BLOCK,
        output_len=output_len,
        labels={**labels, "_hash_ids": all_ids},
    )


def zipf_weights(n: int, s: float) -> "Any":
    """Normalised Zipf-like popularity: rank ``i`` (1-based) has weight ``i ** -s``.

    Raises:
        ValueError: ``n < 1`` or ``s < 0``.
    """
    import numpy as np

    if n < 1 or s < 0:
        raise ValueError(f"zipf_weights(n={n}, s={s}): need n >= 1 and s >= 0")
    w = np.arange(1, n + 1, dtype=np.float64) ** -s
    return w / w.sum()
