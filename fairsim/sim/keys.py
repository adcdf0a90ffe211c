"""Map a trace's hash blocks onto the engine's KV blocks, and size the cache from a trace."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Iterable, Sequence

from fairsim.traces.segments import segment_block_keys
from fairsim.types import Request


def block_keys(request: Request, block_size: int) -> tuple[Hashable, ...]:
    """Prefix-cache keys of the request's full engine blocks that have a known content identity.

    Chained ``block_hashes`` (hash block ``H = hash_block_size`` tokens; id ``j`` names tokens
    ``[0, (j + 1) * H)``) are mapped onto engine blocks of ``B = block_size`` tokens by one rule:
    engine block ``k`` (tokens ``[k * B, (k + 1) * B)``) is identified by the first hash block
    whose end covers the engine block's end, ``j = ceil((k + 1) * B / H) - 1``, plus ``k``: key
    ``(hash_ids[j], k)``. Equal keys mean the first ``(j + 1) * H >= (k + 1) * B`` tokens are
    equal, so a key hit is always a true prefix hit.

    - ``B == H``: the hashes themselves (``j == k``).
    - ``B`` divides ``H`` or is a multiple of it: exact with respect to what the trace records
      (``fairsim.sim.keys`` tests check it against the token-level prefix identity).
    - Neither divides: conservative. An engine block that ends inside a hash block counts as a
      hit only if that whole hash block is shared; ``mapping_loss`` says how much that loses.

    Engine blocks past the last full hash block have no identity here (a partial hash block is
    never a hit); ``engine_block_keys`` gives them request-unique keys.

    With ``request.segments`` (exact token-level identity, RAGPulse) the keys are built from the
    segments instead, exactly at any ``B`` (``segment_block_keys``).

    Raises:
        ValueError: ``block_size < 1``.
    """
    if block_size < 1:
        raise ValueError(f"block_size={block_size}: need >= 1 token")
    if request.segments:
        return segment_block_keys(request.segments, block_size)
    h = request.hash_block_size
    hashes = request.block_hashes
    if block_size == h:
        return hashes
    n = len(hashes) * h // block_size  # engine blocks wholly inside the identified tokens
    return tuple((hashes[((k + 1) * block_size - 1) // h], k) for k in range(n))


def mapping_loss(requests: Sequence[Request], block_size: int) -> str | None:
    """A warning when ``block_size`` and a trace's hash block neither divide the other.

    The mapping of ``block_keys`` is then conservative: an engine block ending inside a hash
    block is a hit only when the whole hash block is shared. The warning states the share of
    the trace's infinite-cache prefix hits (in tokens, at its own hash block) that remain hits
    at ``block_size``.

    Returns:
        The warning, or None when every request's hash block divides or is a multiple of
        ``block_size`` (or it carries exact ``segments``).
    """
    odd = [r for r in requests if not r.segments and r.block_hashes
           and r.hash_block_size % block_size and block_size % r.hash_block_size]
    if not odd:
        return None
    h = sorted({r.hash_block_size for r in odd})
    native = _bound_tokens(odd, None)
    mapped = _bound_tokens(odd, block_size)
    share = f"{mapped / native:.1%}" if native else "n/a"
    return (f"--block-size {block_size} and the trace's {'/'.join(map(str, h))}-token hash blocks: "
            f"neither divides the other, so an engine block that ends inside a hash block counts as "
            f"cached only when that whole hash block is shared; of the {native:,} prompt tokens an "
            f"infinite cache would reuse at the hash block, {mapped:,} ({share}) stay reusable at "
            f"block {block_size}. Use a block size that divides or is a multiple of the hash block "
            f"for exact prefix identity.")


def _bound_tokens(requests: Sequence[Request], block_size: int | None) -> int:
    """Tokens of leading blocks already seen in an earlier request (infinite cache, arrival
    order); at the hash block itself when ``block_size`` is None."""
    seen: set[Hashable] = set()
    total = 0
    for r in sorted(requests, key=lambda r: r.arrival_time):
        keys = r.block_hashes if block_size is None else block_keys(r, block_size)
        size = r.hash_block_size if block_size is None else block_size
        hit = 0
        for key in keys:
            if key not in seen:
                break
            hit += 1
        total += hit * size
        seen.update(keys)
    return total


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
    return keys + tuple([("unique", rid, j) for j in range(len(keys), full)])


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
    return keys + tuple([("unique", rid, j) for j in range(len(keys), full)])


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
