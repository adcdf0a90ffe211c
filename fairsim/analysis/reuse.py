"""Prefix-cache hit rate for every KV capacity in one pass (LRU stack distances, Mattson 1970).

Mattson, Gecsei, Slutz and Traiger, "Evaluation techniques for storage hierarchies", IBM Systems
Journal 9(2), 1970: under LRU a block is in a cache of ``C`` blocks iff its *stack distance* (the
number of distinct blocks used since its last use, itself included) is at most ``C`` (the
inclusion property). One pass over the trace gives every block's distance, hence the hit rate at
every capacity. Distances are counted with a Fenwick tree over access times (Bennett and Kruskal,
"LRU stack processing", IBM J. R&D 19(4), 1975), O(log n) per block.

The prefix-cache semantics are vLLM's (``KVCacheManager.get_computed_blocks``; our
``fairsim/sim/block_pool.py``), played one request at a time in arrival order:

- A request's hit is the *leading run* of its full blocks present in the cache, capped at
  ``L - 1`` tokens (``(L - 1) // B`` blocks). Block ``j`` is hit at capacity ``C`` iff every block
  ``1..j`` is present, i.e. ``max(d_1..d_j) <= C``: the running maximum of the distances is a
  per-block capacity threshold, and the curve is the histogram of those thresholds.
- Distances are taken on the cache as it was when the request arrived; the request then uses all
  its full blocks, deepest first, so its first block ends most recent (vLLM frees a request's
  blocks deepest first: ``KVCacheManager.free``).
- A trailing partial block has no hash; once freed it sits at the front of the free queue and is
  reused first, so while it is there the cache holds ``C - 1`` hashed blocks. The threshold of a
  request that follows one with a partial block is therefore one block higher.

Approximation (the only one): vLLM does not de-duplicate cached blocks. When a request's whole
prompt is cached and ``L`` is a multiple of ``B``, the cap recomputes its last block into a second
copy, and the older copy keeps a slot until it is evicted; the stack model moves the block instead.
This affects only prompts that are an exact multiple of the block size and fully cached; the tests
compare the curve with an independent replay through the simulator's ``BlockPool``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fairsim.sim.keys import engine_block_keys
from fairsim.types import Request


class _Fenwick:
    """Prefix sums over positions ``1..n`` (Fenwick 1994, "A new data structure for cumulative
    frequency tables"), O(log n) update and query."""

    __slots__ = ("n", "tree")

    def __init__(self, n: int) -> None:
        self.n = n
        self.tree = [0] * (n + 1)

    def add(self, i: int, delta: int) -> None:
        tree, n = self.tree, self.n
        while i <= n:
            tree[i] += delta
            i += i & -i

    def prefix(self, i: int) -> int:
        tree = self.tree
        s = 0
        while i > 0:
            s += tree[i]
            i -= i & -i
        return s


@dataclass(frozen=True)
class HitCurve:
    """Token hit rate of an LRU prefix cache as a function of its capacity.

    Attributes:
        block_size: Tokens per KV block ``B``.
        prompt_tokens: Sum of prompt lengths of the requests, tokens.
        thresholds: Sorted capacity thresholds, blocks: one per block that an infinite cache would
            hit; the block is hit at every capacity ``C >= threshold``. Shape ``(n_hittable,)``.
        requests: Number of requests.
    """

    block_size: int
    prompt_tokens: int
    thresholds: np.ndarray
    requests: int

    @property
    def infinite_hit_rate(self) -> float:
        """Hit rate of an infinite cache (every block seen before is kept): the upper bound."""
        return self.thresholds.size * self.block_size / self.prompt_tokens

    def hit_rate(self, capacity_blocks: int | Sequence[int] | np.ndarray) -> float | np.ndarray:
        """Hit rate (cached tokens at admission / prompt tokens) at ``capacity_blocks`` blocks.

        Args:
            capacity_blocks: One capacity or an array of capacities, blocks.

        Returns:
            A float, or an array of the capacities' shape.
        """
        c = np.asarray(capacity_blocks)
        hits = np.searchsorted(self.thresholds, c, side="right") * self.block_size
        out = hits / self.prompt_tokens
        return float(out) if out.ndim == 0 else out

    def capacity_for(self, fraction_of_bound: float) -> int | None:
        """Smallest capacity (blocks) reaching ``fraction_of_bound`` of the infinite-cache hit
        rate, or None when the trace has no hittable block."""
        n = self.thresholds.size
        if n == 0:
            return None
        k = max(1, int(np.ceil(fraction_of_bound * n)))
        return int(self.thresholds[k - 1])


def lru_hit_curve(requests: Sequence[Request], block_size: int | None = None) -> HitCurve:
    """The LRU hit-rate curve of ``requests`` replayed one at a time in arrival order.

    Args:
        requests: Requests; sorted by arrival time here (stable, so ties keep file order; the
            simulator's FCFS breaks such ties by request id, docs/policies.md, so on a trace
            with equal timestamps the two orders, and their hits, may differ slightly).
        block_size: Engine block ``B``, tokens. Default: the trace's hash block (all requests must
            share it). Keys follow ``fairsim.sim.keys.engine_block_keys`` (as the simulator).

    Returns:
        A ``HitCurve``.

    Raises:
        ValueError: No requests, mixed hash block sizes without ``block_size``, or a block size
            that neither divides nor is a multiple of the hash block.
    """
    if not requests:
        raise ValueError("lru_hit_curve: no requests")
    if block_size is None:
        sizes = {r.hash_block_size for r in requests}
        if len(sizes) > 1:
            raise ValueError(f"trace mixes hash block sizes {sorted(sizes)}; give a block size")
        block_size = sizes.pop()
    ordered = sorted(requests, key=lambda r: r.arrival_time)
    keys_per = [engine_block_keys(r, block_size) for r in ordered]
    tree = _Fenwick(sum(len(k) for k in keys_per))
    last: dict = {}
    now = 0  # access counter; positions 1..now hold one mark per distinct key (its last use)
    live = 0  # distinct keys seen
    thresholds: list[int] = []
    prev_partial = 0
    for r, keys in zip(ordered, keys_per):
        cap = min(len(keys), (r.prompt_len - 1) // block_size)
        run_max = 0
        for key in keys[:cap]:
            t = last.get(key)
            if t is None:
                break
            # distinct keys used at or after t = the key's depth in the LRU stack
            d = live - tree.prefix(t - 1)
            if d > run_max:
                run_max = d
            thresholds.append(run_max + prev_partial)
        for key in reversed(keys):  # deepest first: the first block ends most recent
            t = last.get(key)
            if t is None:
                live += 1
            else:
                tree.add(t, -1)
            now += 1
            last[key] = now
            tree.add(now, 1)
        prev_partial = 1 if r.prompt_len % block_size else 0
    return HitCurve(block_size=block_size, prompt_tokens=sum(r.prompt_len for r in ordered),
                    thresholds=np.sort(np.asarray(thresholds, dtype=np.int64)),
                    requests=len(ordered))
