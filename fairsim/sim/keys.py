"""Map a trace's hash blocks onto the engine's KV blocks, and size the cache from a trace."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Iterable, Sequence

from fairsim.types import Request


def block_keys(request: Request, block_size: int) -> tuple[Hashable, ...]:
    """Prefix-cache keys of the request's full engine blocks that have a known content identity.

    ``block_hashes`` are prefix hashes of ``hash_block_size``-token blocks. With an engine block
    size ``B``:

    - ``B == H``: the hashes themselves.
    - ``B`` divides ``H``: engine block ``j`` is sub-block ``j % (H // B)`` of hash block
      ``j // (H // B)``; key ``(hash, sub)``.
    - ``B`` a multiple ``m`` of ``H``: engine block ``j`` ends with hash block ``(j + 1) * m - 1``,
      whose prefix hash identifies the whole prefix; key = that hash.

    Tokens of a trailing partial hash block have no identity, so no key: they are never cached.

    Raises:
        ValueError: ``block_size`` neither divides nor is a multiple of ``hash_block_size``.
    """
    h = request.hash_block_size
    hashes = request.block_hashes
    if block_size == h:
        return hashes
    if h % block_size == 0:
        per = h // block_size
        return tuple((x, s) for x in hashes for s in range(per))
    if block_size % h == 0:
        m = block_size // h
        return tuple(hashes[(j + 1) * m - 1] for j in range(len(hashes) // m))
    raise ValueError(
        f"block_size={block_size} must divide or be a multiple of the trace's hash block size {h}"
    )


def engine_block_keys(request: Request, block_size: int) -> tuple[Hashable, ...]:
    """``block_keys`` plus a request-unique key for every further *full* engine block.

    vLLM hashes every full block of a prompt. Blocks past the trace's known hashes hold content
    unique to the request (e.g. a question), so they never hit another request, but they are
    cached and freed like any hashed block (to the back of the free queue, not the front), and a
    preempted request can hit them again. Only the trailing partial block stays keyless.
    """
    keys = block_keys(request, block_size)
    full = request.prompt_len // block_size
    if full <= len(keys):
        return keys
    rid = request.request_id
    return keys + tuple(("unique", rid, j) for j in range(len(keys), full))


def generated_block_keys(request: Request, block_size: int) -> tuple[Hashable, ...]:
    """``engine_block_keys`` extended over the request's output (colocated mode).

    vLLM hashes every full block of ``prompt + output`` tokens as tokens are appended and caches
    it when scheduled. A trace hashes prompt blocks only, so blocks past the prompt's known hashes
    (prompt tails and generated tokens) get request-unique keys ``("unique", id, j)``: they are
    cached and freed like any block, and the request can hit them after a preemption, but another
    request never does. Covers the ``prompt_len + output_len - 1`` tokens that are ever computed.
    """
    keys = block_keys(request, block_size)
    full = (request.prompt_len + request.output_len - 1) // block_size
    if full <= len(keys):
        return keys
    rid = request.request_id
    return keys + tuple(("unique", rid, j) for j in range(len(keys), full))


def reusable_blocks(keys_per_request: Iterable[Sequence[Hashable]]) -> int:
    """Distinct block keys that occur in two or more requests (the trace's reusable content)."""
    counts: Counter[Hashable] = Counter()
    for keys in keys_per_request:
        counts.update(set(keys))
    return sum(1 for c in counts.values() if c >= 2)


def blocks_for(tokens: int, block_size: int) -> int:
    """KV blocks needed to hold ``tokens`` tokens (``ceil(tokens / block_size)``)."""
    return -(-tokens // block_size)


def capacity_from_fraction(fraction: float, reusable: int) -> int:
    """KV capacity in blocks for ``fraction`` of ``reusable`` blocks (at least 1)."""
    return max(1, math.ceil(fraction * reusable))
