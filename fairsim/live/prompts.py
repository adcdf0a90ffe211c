"""Deterministic token-id prompts from a trace's block hashes (no vLLM import).

A trace gives each request prefix hashes of its full ``hash_block_size``-token blocks. The tokens
of hash block ``j`` are drawn from a generator seeded by ``(salt, hash_j)``, so the same hash gives
the same token ids in every request: a prefix shared in the trace is a prefix shared in vLLM, and
vLLM's own block hashes (of 128 or any engine block size dividing the hash block) match exactly
where the trace's do. Tokens after the last full hash block (the partial tail) are seeded by the
request id, so they are unique to the request and never hit the cache.
"""

from __future__ import annotations

import hashlib

import numpy as np

from fairsim.errors import EngineInvariantError
from fairsim.types import Request

#: Vocabulary of the shipped tiny Llama (token ids 0 .. VOCAB_SIZE - 1).
VOCAB_SIZE = 32000
#: Lowest id used, so prompts avoid BOS/EOS and other special ids.
LOW_ID = 3


def _seed(salt: int, key: str) -> list[int]:
    digest = hashlib.blake2b(key.encode(), digest_size=16).digest()
    return [salt, int.from_bytes(digest[:8], "little"), int.from_bytes(digest[8:], "little")]


def block_tokens(block_hash: object, size: int, salt: int = 0) -> list[int]:
    """Token ids of one hash block: ``size`` ids in ``[LOW_ID, VOCAB_SIZE)``, fixed by the hash."""
    rng = np.random.default_rng(_seed(salt, f"h:{block_hash!r}"))
    return rng.integers(LOW_ID, VOCAB_SIZE, size=size).tolist()


def prompt_tokens(request: Request, salt: int = 0) -> list[int]:
    """The ``prompt_len`` token ids of ``request`` (deterministic in the request and ``salt``).

    Raises:
        ValueError: Through ``Request`` validation only (lengths are taken as given).
    """
    size = request.hash_block_size
    out: list[int] = []
    for h in request.block_hashes:
        out.extend(block_tokens(h, size, salt))
    tail = request.prompt_len - len(out)
    if tail > 0:
        rng = np.random.default_rng(_seed(salt, f"r:{request.request_id}"))
        out.extend(rng.integers(LOW_ID, VOCAB_SIZE, size=tail).tolist())
    if len(out) != request.prompt_len:
        raise EngineInvariantError(f"request {request.request_id!r}: built {len(out)} prompt tokens "
                                   f"for prompt_len={request.prompt_len}")
    return out
