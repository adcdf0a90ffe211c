"""Eviction strategies a policy can hand to the simulator's block pool (``policy.eviction_hook``).

The simulator's block pool evicts LRU by default (vLLM). A policy that changes eviction exposes
an ``eviction_hook`` object; the engine then builds a hooked pool that asks the hook which free
blocks an allocation takes. Hooks are pure Python over block ids and block keys (content
identities of full blocks); they never import the simulator, SimPy or vLLM.

Hook protocol (duck-typed; every method but ``select`` is optional):

- ``bind(pool)``: called once by the hooked pool; ``pool`` offers ``num_blocks``,
  ``block_key[b]`` (key or None), ``ref_cnt[b]`` and ``iter_free()`` (free ids, LRU front first).
- ``select(pool, n) -> list[int]``: ``n`` distinct free block ids, in the order to take them.
  Cached ones among them are evicted. Called only with ``n <= pool.num_free``.
- ``attach(block_size, prompts)``: called once by the engine with the block size (tokens) and
  every request's block-key sequence (so a hook can know each key's parent and depth).
- ``protect(hit_key_runs)``: called by the engine after each ordering with, for the first
  ``max_num_seqs`` waiting requests in the policy's order, the keys their prefix hit would use.
- ``on_cache(b, key)``, ``on_touch(b)``, ``on_free(b)`` (``ref_cnt`` reached 0),
  ``on_evict(b, key)``: notifications from the hooked pool.
- ``pool_rule`` (class attribute): a choice the compiled pool makes natively. Only
  ``ProtectWaitingHits``'s, read from its ``protected`` dict (``fairsim.sim.block_pool.
  compiled_rule``); a hook with ``bind`` or an ``on_*`` method keeps the hooked pool.

Only the simulator runs these: the live vLLM hook reorders the queue but keeps vLLM's LRU, and
must say so when asked to run a policy with an eviction hook (POLICIES.md, last section).
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Sequence
from itertools import islice
from typing import Any

from fairsim.errors import EngineInvariantError


class ProtectWaitingHits:
    """PEEK's soft protection: evict blocks that no soon-to-run request would hit first.

    Contract (POLICIES.md "PEEK"): when an allocation takes ``n`` free blocks, it first takes free
    blocks (LRU order, front of the free queue first) whose key is not protected - empty blocks
    and cached blocks no protected request would hit; only if still short does it take protected
    blocks, again in LRU order. It never refuses an allocation the LRU pool would grant, so it
    cannot deadlock.

    Protected keys: the prefix-hit keys of the first ``max_num_seqs`` waiting requests in the
    policy's order, refreshed by the engine each time the policy orders the queue (so the
    continuing chunks of running requests at the start of the next step see the previous step's
    set). With an empty set it is exactly LRU.
    """

    #: Declares this choice to the simulator's block pool (``fairsim.sim.pool_choice.PROTECTED_LAST``,
    #: same text): the compiled pool then takes it natively, reading ``protected`` at each
    #: allocation, instead of calling ``select`` (same blocks: ``tests/test_block_pool_peek.py``).
    pool_rule = "unprotected LRU first, then protected LRU"

    def __init__(self) -> None:
        # The protected keys, each with the number of protected hits that use it (a key is
        # protected while its count is above 0), so the engine can change the set by whole hits.
        self.protected: dict[Hashable, int] = {}

    def attach(self, block_size: int, prompts: Iterable[Sequence[Hashable]]) -> None:
        """Start of a run: forget any protected set of a previous run."""
        self.protected = {}

    def protect(self, hit_key_runs: Iterable[Sequence[Hashable]]) -> None:
        """Replace the protected set with the keys of these prefix hits."""
        self.protected = {}
        self.update_runs((), hit_key_runs)

    def update_runs(self, removed: Iterable[Sequence[Hashable]], added: Iterable[Sequence[Hashable]]) -> None:
        """Change the protected set by whole prefix hits: take out the keys of ``removed`` (hits
        given before by ``protect`` or ``added``), put in those of ``added``. The set is then
        the one ``protect`` gives for the hits kept plus the added ones."""
        counts = self.protected
        for run in removed:
            for key in run:
                left = counts[key] - 1
                if left:
                    counts[key] = left
                else:
                    del counts[key]
        for run in added:
            for key in run:
                counts[key] = counts.get(key, 0) + 1

    def select(self, pool: Any, n: int) -> list[int]:
        """``n`` free blocks: unprotected ones in LRU order, then protected ones in LRU order."""
        protected = self.protected
        if not protected:
            return list(islice(pool.iter_free(), n))
        key_of = pool.block_key
        out: list[int] = []
        held: list[int] = []
        for b in pool.iter_free():
            key = key_of[b]
            if key is not None and key in protected:
                if len(held) < n:
                    held.append(b)
            else:
                out.append(b)
                if len(out) == n:
                    return out
        return out + held[: n - len(out)]


class PGDSFEviction:
    """RAGCache's PGDSF replacement (prefix-aware Greedy-Dual-Size-Frequency), per cached block.

    Contract (POLICIES.md "RAGCache ordering", optional part): every cached block (a node of the
    prefix tree: one block key) has priority ``Clock + Frequency x Cost / Size`` where

    - Frequency: accesses during the block's current stay in the cache (the request that computed
      it counts 1, each prefix hit adds 1; reset when evicted). This is our reading of "hits in
      the window": the window is the block's residency.
    - Cost: ``T(B | depth x B)``, the profile's time to recompute the block's ``B`` tokens given
      its prefix of ``depth`` blocks (s); Size: ``B`` tokens.
    - Clock: the priority of the last evicted block (starts at 0); the priority is recomputed at
      caching and at every hit with the clock of that moment.

    An allocation first takes empty free blocks (no eviction; LRU order), then evicts the
    lowest-priority free cached *leaf* (no cached child key); equal priorities go to the block
    freed earliest. Non-leaf free blocks are used only if no leaf is left, so it never deadlocks.

    Args:
        prefill_time: ``T(c | h)`` in seconds (``Profile.prefill_time(new_tokens, cached_tokens)``).

    Source: Jin et al., RAGCache (PGDSF); POLICIES.md fixes the per-node terms above.
    """

    def __init__(self, prefill_time: Callable[[int, int], float]) -> None:
        self.prefill_time = prefill_time
        self.block_size = 1
        self._parent: dict[Hashable, Hashable | None] = {}
        self._depth: dict[Hashable, int] = {}
        self._reset(0)

    def _reset(self, num_blocks: int) -> None:
        self.clock = 0.0
        self._cost_by_depth: dict[int, float] = {}
        self._freq = [0] * num_blocks
        self._prio = [0.0] * num_blocks
        self._ver = [0] * num_blocks
        self._heap: list[tuple[float, int, int, int]] = []
        self._seq = 0
        self._children: dict[Hashable, int] = {}
        self._not_leaf: dict[Hashable, list[tuple[float, int, int, int]]] = {}
        self._empty: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self._pool: Any = None

    # -- set-up ----------------------------------------------------------------------------------
    def bind(self, pool: Any) -> None:
        """Start a run on ``pool`` (all blocks empty and free)."""
        self._reset(pool.num_blocks)
        self._pool = pool

    def attach(self, block_size: int, prompts: Iterable[Sequence[Hashable]]) -> None:
        """Learn the block size (tokens) and each key's parent and depth from the prompts."""
        self.block_size = block_size
        parent, depth = self._parent, self._depth
        parent.clear()
        depth.clear()
        for keys in prompts:
            prev = None
            for j, key in enumerate(keys):
                parent[key] = prev
                depth[key] = j
                prev = key

    def cost(self, key: Hashable) -> float:
        """Recompute time of the block with ``key`` given its prefix, seconds."""
        d = self._depth.get(key, 0)
        c = self._cost_by_depth.get(d)
        if c is None:
            c = self._cost_by_depth[d] = self.prefill_time(self.block_size, d * self.block_size)
        return c

    def _priority(self, b: int, key: Hashable) -> float:
        return self.clock + self._freq[b] * self.cost(key) / self.block_size

    # -- notifications ---------------------------------------------------------------------------
    def on_cache(self, b: int, key: Hashable) -> None:
        """A scheduled block got its key: first access."""
        self._freq[b] = 1
        self._prio[b] = self._priority(b, key)
        p = self._parent.get(key)
        if p is not None:
            self._children[p] = self._children.get(p, 0) + 1

    def on_touch(self, b: int) -> None:
        """A prefix hit took a reference on ``b``: one more access."""
        self._ver[b] += 1
        key = self._pool.block_key[b]
        if key is not None:
            self._freq[b] += 1
            self._prio[b] = self._priority(b, key)

    def on_free(self, b: int) -> None:
        """``b`` joined the free queue."""
        self._ver[b] += 1
        if self._pool.block_key[b] is None:
            self._empty[b] = None
        else:
            self._seq += 1
            heapq.heappush(self._heap, (self._prio[b], self._seq, b, self._ver[b]))

    def on_evict(self, b: int, key: Hashable) -> None:
        """``b`` lost its key: advance the clock, release its parent if that is now a leaf."""
        self.clock = max(self.clock, self._prio[b])
        self._freq[b] = 0
        p = self._parent.get(key)
        if p is not None:
            left = self._children[p] - 1
            if left:
                self._children[p] = left
            else:
                del self._children[p]
                for entry in self._not_leaf.pop(p, ()):
                    heapq.heappush(self._heap, entry)

    # -- the choice ------------------------------------------------------------------------------
    def _valid(self, entry: tuple[float, int, int, int]) -> bool:
        b = entry[2]
        return entry[3] == self._ver[b] and self._pool.ref_cnt[b] == 0

    def select(self, pool: Any, n: int) -> list[int]:
        """Empty free blocks first (LRU), then lowest-priority free cached leaves."""
        out: list[int] = []
        empty = self._empty
        while empty and len(out) < n:
            b, _ = empty.popitem(last=False)
            out.append(b)
        heap = self._heap
        key_of = pool.block_key
        while len(out) < n and heap:
            entry = heapq.heappop(heap)
            if not self._valid(entry):
                continue
            key = key_of[entry[2]]
            if key in self._children:  # has a cached child: evicting it would strand the child
                self._not_leaf.setdefault(key, []).append(entry)
                continue
            out.append(entry[2])
            self._ver[entry[2]] += 1
        if len(out) < n:  # only non-leaves left: lowest priority first (never deadlock)
            rest = sorted(e for es in self._not_leaf.values() for e in es if self._valid(e))
            for entry in rest[: n - len(out)]:
                out.append(entry[2])
                self._ver[entry[2]] += 1
        if len(out) != n:
            raise EngineInvariantError(f"PGDSF selected {len(out)} of {n} blocks")
        return out
