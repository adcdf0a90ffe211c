"""SGLang's cache-aware router: an approximate radix tree per worker, and balance thresholds.

Source: sgl-project/sglang, ``sgl-router/src/policies/cache_aware.rs`` (``CacheAwarePolicy::
select_worker``) and ``CacheAwareConfig::default`` in ``sgl-router/src/policies/mod.rs``.
The rule, per request:

1. Load = the worker's requests in flight. If ``max - min > balance_abs_threshold`` and
   ``max > min * balance_rel_threshold``, route to the least loaded worker.
2. Else find the worker whose tree matches the longest prefix of the prompt; if the match rate
   (matched / prompt) is above ``cache_threshold``, route there, else to the worker with the
   smallest tree (most room).
3. Either way, insert the prompt into the chosen worker's tree. Every ``eviction_interval_s``
   each tree is cut back to ``max_tree_size`` by least recently used entries.

The view is approximate, as SGLang's: the trees record what was routed, never what the engines
cached or evicted. Our choices: the tree holds block keys (full blocks of ``block_size`` tokens,
the engine's own hashing) where SGLang's holds characters, so the match rate is in blocks;
``max_tree_size`` counts blocks and defaults to one instance's KV capacity (SGLang's default counts
characters); eviction runs at routing times once the interval has passed (SGLang: a background
thread); ties go to the lowest index (SGLang: the first worker found). Defaults of
``CacheAwareConfig::default``: ``cache_threshold`` 0.5, ``balance_abs_threshold`` 32,
``balance_rel_threshold`` 1.1, ``eviction_interval_s`` 30.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from fairsim.routers.base import InstanceView, Router, RouteRequest, check_param, leading_runs, lowest, number


class SGLangCacheAware(Router):
    name = "sglang-cache-aware"
    needs = ("hashes",)
    view = "approximate"
    source = "sgl-project/sglang sgl-router/src/policies/cache_aware.rs"

    def __init__(self, num_instances: int, *, cache_threshold: float = 0.5, balance_abs_threshold: int = 32,
                 balance_rel_threshold: float = 1.1, eviction_interval_s: float = 30.0,
                 max_tree_size: int | None = None, **kw) -> None:
        super().__init__(num_instances, **kw)
        check_param(self.name, "cache_threshold", cache_threshold,
                    number(cache_threshold) and 0 <= cache_threshold <= 1, "a number in [0, 1]")
        check_param(self.name, "balance_abs_threshold", balance_abs_threshold,
                    number(balance_abs_threshold) and balance_abs_threshold >= 0, "a finite number >= 0")
        check_param(self.name, "balance_rel_threshold", balance_rel_threshold,
                    number(balance_rel_threshold) and balance_rel_threshold >= 0, "a finite number >= 0")
        check_param(self.name, "eviction_interval_s", eviction_interval_s,
                    number(eviction_interval_s) and eviction_interval_s > 0, "finite seconds > 0")
        if max_tree_size is None:
            max_tree_size = max(1, self.kv_blocks)
        check_param(self.name, "max_tree_size", max_tree_size,
                    isinstance(max_tree_size, int) and not isinstance(max_tree_size, bool) and max_tree_size >= 1,
                    "a whole number of blocks >= 1")
        self.cache_threshold = float(cache_threshold)
        self.abs_threshold = balance_abs_threshold
        self.rel_threshold = float(balance_rel_threshold)
        self.interval = float(eviction_interval_s)
        self.max_tree_size = max_tree_size
        # One approximate tree per worker: block key -> last routing time that touched it. The
        # keys chain their prefix (equal key = equal prefix), so a set of keys is a radix tree
        # over blocks and the longest match is the run of leading keys present.
        self.trees: list[dict[Hashable, float]] = [{} for _ in range(num_instances)]
        self._next_eviction = self.interval

    def match(self, req: RouteRequest, k: int) -> int:
        """Leading prompt blocks in worker ``k``'s tree."""
        tree = self.trees[k]
        n = 0
        for key in req.keys:
            if key not in tree:
                break
            n += 1
        return n

    def matches(self, req: RouteRequest) -> list[int]:
        """``[match(req, k) for every worker k]``, one call for all workers (``leading_runs``)."""
        return leading_runs(req.keys, self.trees)

    def choose(self, req: RouteRequest, instances: Sequence[InstanceView], now: float) -> int:
        if now >= self._next_eviction:
            self.evict()
            self._next_eviction = now + self.interval
        loads = [inst.in_flight for inst in instances]
        hi, lo = max(loads), min(loads)
        if hi - lo > self.abs_threshold and hi > lo * self.rel_threshold:
            k = lowest(loads)
            matched_k = self.match(req, k)
        else:
            matched = self.matches(req)
            top = max(matched)
            best = matched.index(top)  # the longest match, the lowest index on a tie
            rate = top / len(req.keys) if req.keys else 0.0  # keys: the prompt's full blocks
            k = best if rate > self.cache_threshold else lowest([len(t) for t in self.trees])
            matched_k = matched[k]
        #: Blocks of this prompt the chosen worker's tree held before it was inserted (the
        #: fleet reports it as what the router expected: ``router_cached_tokens``).
        self.last_match_blocks = matched_k
        # As ``tree[key] = now`` per key, in order: new keys appended, present ones keep their place.
        self.trees[k].update(dict.fromkeys(req.keys, now))
        return k

    def evict(self) -> None:
        """Cut every tree over ``max_tree_size`` blocks back to it, least recently used first
        (a deeper block is never touched before its prefix, so leaves go first)."""
        for k, tree in enumerate(self.trees):
            extra = len(tree) - self.max_tree_size
            if extra > 0:
                # Oldest time first and, among equal times, the later inserted (deeper) key first:
                # a stable sort by time of the positions taken last to first.
                keys, times = list(tree), list(tree.values())
                order = sorted(range(len(keys) - 1, -1, -1), key=times.__getitem__)
                keep = sorted(order[extra:])
                self.trees[k] = {keys[i]: times[i] for i in keep}
