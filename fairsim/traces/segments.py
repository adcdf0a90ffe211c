"""Exact token-level prefix identity from content segments (RAGPulse chunks).

A request's prompt is a sequence of ``(content_id, token_length)`` spans; the keys of its
engine blocks are chained digests of the spans each block covers. Pure functions, no engine
imports: used by the RAGPulse reader, ``fairsim convert`` and ``fairsim.sim.keys``.
"""

from __future__ import annotations

from functools import lru_cache
from collections.abc import Sequence


def segment_block_keys(segments: Sequence[tuple[int, int]], block_size: int) -> tuple[int, ...]:
    """Chained keys of the full ``block_size``-token blocks covered by ``segments``.

    ``segments`` are ``(content_id, token_length)`` spans in prompt order. Block ``k``'s key is a
    64-bit BLAKE2b digest of (block ``k - 1``'s digest, the ``content_id:start:end`` pieces of the
    spans that block ``k`` covers, offsets within each span), so two requests get equal keys for
    block ``k`` iff their first ``(k + 1) * block_size`` tokens are the same spans at the same
    offsets: exact prefix identity at any block size, including chunks that straddle blocks (as
    vLLM chains a block's hash with its parent's, ``vllm/v1/core/kv_cache_utils.py``
    ``hash_block_tokens``). Tokens after the last full block have no key. Results are cached
    (the engine asks once per request and run; a ``compare`` asks once per policy).

    Returns:
        One int per full block: ``sum(lengths) // block_size`` keys.
    """
    return _keys(tuple(segments), block_size)


@lru_cache(maxsize=1 << 16)
def _keys(segments: tuple[tuple[int, int], ...], block_size: int) -> tuple[int, ...]:
    import hashlib  # here: only traces with segments need it, and it costs every start 2-3 ms

    out: list[int] = []
    h = hashlib.blake2b(digest_size=8)
    filled = 0
    for cid, length in segments:
        pos = 0
        while pos < length:
            take = min(length - pos, block_size - filled)
            h.update(b"%d:%d:%d;" % (cid, pos, pos + take))
            pos += take
            filled += take
            if filled == block_size:
                digest = h.digest()
                out.append(int.from_bytes(digest, "big"))
                h = hashlib.blake2b(digest, digest_size=8)
                filled = 0
    return tuple(out)
