"""The fleet's fast paths for the KV-aware routers and the fleet-wide tables, against the
straightforward code they replace (kept here as the reference):

* ``cached_prefixes`` (one walk per instance over its hit table, kept per request) gives every
  instance's ``cached_blocks(req.keys)``, on hand-built and random pools;
* a fleet behind ``dynamo-kv``, ``llm-d``, ``least-work`` or ``sglang-cache-aware`` routes every
  request to the same instance, with the same tables, as with a per-instance ``cached_blocks``
  lookup and the per-row merge of the instances' request tables, on traces with evictions
  (prefill-only and colocated, open and closed loop).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairsim.routers import InstanceView, RouteRequest
from fairsim.routers import base as router_base
from fairsim.routers import dynamo_kv, llmd
from fairsim.routers.sglang_cache_aware import SGLangCacheAware
from fairsim.sim.block_pool import BlockPool
from fairsim.sim.fleet import Fleet
from fairsim.sim.result import Columns
from fairsim.types import Request

from test_fleet_speed import CONVERSATION, _tables


def _instance(index: int, cached: list[str], blocks: int = 12) -> InstanceView:
    """An instance whose pool holds ``cached`` keys (duplicates allowed), evictable."""
    pool = BlockPool(blocks)
    if cached:
        ids = pool.allocate(len(cached))
        pool.cache_blocks(ids, cached, 0, len(cached))
        pool.free(reversed(ids))
    return InstanceView(index, SimpleNamespace(pool=pool))


def _request(keys: tuple[str, ...], bs: int = 4) -> RouteRequest:
    return RouteRequest(Request("r", 0.0, bs * len(keys) + 1, (), bs, 1, {}), keys, bs)


def test_cached_prefixes_counts_the_leading_run_on_each_instance():
    keys = ("a", "b", "c", "d")
    instances = [_instance(0, ["a", "b", "d"]), _instance(1, []), _instance(2, ["b", "c", "d"]),
                 _instance(3, ["a", "b", "c", "d", "a"])]
    req = _request(keys)
    assert req.prompt_blocks == 5  # 17 tokens in blocks of 4
    assert router_base.cached_prefixes(req, instances) == [2, 0, 0, 4]
    # Kept for the request: a later call answers the same list (the fleet reuses it).
    assert router_base.cached_prefixes(req, instances) is req.overlaps


@settings(max_examples=200, deadline=None)
@given(keys=st.lists(st.sampled_from("abcdef"), max_size=6, unique=True),
       pools=st.lists(st.lists(st.sampled_from("abcdefg"), max_size=10), min_size=1, max_size=5))
def test_cached_prefixes_is_cached_blocks_of_every_instance(keys, pools):
    instances = [_instance(k, cached) for k, cached in enumerate(pools)]
    req = _request(tuple(keys))
    assert router_base.cached_prefixes(req, instances) == [inst.cached_blocks(req.keys) for inst in instances]


# -- whole fleets against the reference ---------------------------------------------------------
def _reference_prefixes(req, instances):
    """The lookup before ``cached_prefixes``: ``cached_blocks`` per instance, nothing kept (so the
    fleet also counts the chosen instance's prefix with its own lookup)."""
    return [inst.cached_blocks(req.keys) for inst in instances]


def _reference_fleet_requests(self, parts):
    """The per-row merge of the instances' request tables before the column-wise one."""
    n = len(self.lives)
    names = None
    merged = {}
    for engine, part in zip(self.engines, parts):
        cols = part.columns("requests").columns
        if not cols:
            continue
        if names is None:
            names = list(cols)
            merged = {c: [None] * n for c in names}
        for c in names:
            dest = merged[c]
            for live, value in zip(engine._all, cols.get(c, [None] * len(engine._all))):
                dest[live.index] = value
    merged["instance"] = list(self.instance_of)
    merged["router_cached_tokens"] = list(self.router_cached)
    return Columns(merged)


def _reference_sglang_choose(self, req, instances, now):
    """SGLang's router before the faster evict and insert: a match per worker, then one more for
    the chosen one, and the prompt inserted key by key."""
    if now >= self._next_eviction:
        self.evict()
        self._next_eviction = now + self.interval
    loads = [inst.in_flight for inst in instances]
    hi, lo = max(loads), min(loads)
    if hi - lo > self.abs_threshold and hi > lo * self.rel_threshold:
        k = router_base.lowest(loads)
    else:
        matched = [self.match(req, k) for k in range(self.num_instances)]
        best = max(range(self.num_instances), key=lambda k: (matched[k], -k))
        rate = matched[best] / len(req.keys) if req.keys else 0.0
        k = best if rate > self.cache_threshold else router_base.lowest([len(t) for t in self.trees])
    self.last_match_blocks = self.match(req, k)
    tree = self.trees[k]
    for key in req.keys:
        tree[key] = now
    return k


def _reference_sglang_evict(self):
    """The eviction before the faster sort: (time, -position) per entry."""
    for k, tree in enumerate(self.trees):
        extra = len(tree) - self.max_tree_size
        if extra > 0:
            items = list(tree.items())
            order = sorted(range(len(items)), key=lambda i: (items[i][1], -i))
            keep = sorted(order[extra:])
            self.trees[k] = {items[i][0]: items[i][1] for i in keep}


def _reference(monkeypatch):
    monkeypatch.setattr(dynamo_kv, "cached_prefixes", _reference_prefixes)
    monkeypatch.setattr(llmd, "cached_prefixes", _reference_prefixes)
    monkeypatch.setattr(SGLangCacheAware, "choose", _reference_sglang_choose)
    monkeypatch.setattr(SGLangCacheAware, "evict", _reference_sglang_evict)
    monkeypatch.setattr(Fleet, "_fleet_requests", _reference_fleet_requests)


@settings(max_examples=200, deadline=None)
@given(entries=st.lists(st.tuples(st.integers(0, 30), st.integers(0, 4)), max_size=40),
       size=st.integers(1, 12))
def test_sglang_eviction_is_the_reference_one(entries, size):
    # Entries (key, time) inserted in order, times with many ties: the same trees, in the same
    # order, after the eviction.
    trees = [{}, {}]
    for key, t in entries:
        trees[key % 2][key] = t
    fast = SGLangCacheAware(2, max_tree_size=size)
    reference = SGLangCacheAware(2, max_tree_size=size)
    fast.trees = [dict(t) for t in trees]
    reference.trees = [dict(t) for t in trees]
    fast.evict()
    _reference_sglang_evict(reference)
    assert [list(t.items()) for t in fast.trees] == [list(t.items()) for t in reference.trees]
    assert all(len(t) == min(len(src), size) for t, src in zip(fast.trees, trees))


CASES = [("prefill-only", "dynamo-kv", ("--kv-blocks", "240")),
         ("prefill-only", "llm-d", ("--kv-blocks", "240")),
         ("prefill-only", "dynamo-kv", ("--kv-blocks", "240", "--router-param", "temperature=0.5")),
         ("prefill-only", "least-work", ("--kv-blocks", "240")),
         ("prefill-only", "sglang-cache-aware", ("--kv-blocks", "240")),
         ("prefill-only", "sglang-cache-aware", ("--kv-blocks", "240", "--router-param", "eviction_interval_s=5",
                                                 "--router-param", "max_tree_size=40")),
         ("colocated", "dynamo-kv", ("--kv-blocks", "250")),
         ("colocated", "llm-d", ("--replay", "closed", "--think-scale", "0.2", "--kv-blocks", "250"))]


def _run(mode, router, extra):
    """``fairsim run`` of 600 requests of the conversation trace on 4 instances behind ``router``
    (its options as the command line reads them), Fairway on each."""
    import contextlib
    import io

    from fairsim.cli import build_parser
    from fairsim.cli_fleet import fleet_spec
    from fairsim.costmodel import load_profile
    from fairsim.options import engine_config, load_requests

    args = build_parser().parse_args(["run", "--trace", CONVERSATION, "--policy", "fairway", "--mode", mode,
                                      "--time-scale", "1" if mode == "prefill-only" else "6",
                                      "--max-requests", "600", "--instances", "4", "--router", router, *extra])
    profile = load_profile(args.profile)
    with contextlib.redirect_stderr(io.StringIO()):
        _, requests = load_requests(args, profile)
    return fleet_spec(args).run("fairway", requests, profile, engine_config(args, profile), {},
                                replay=args.replay, think_scale=args.think_scale)


@pytest.mark.parametrize("mode,router,extra", CASES)
def test_kv_routers_route_as_the_per_instance_lookup(monkeypatch, mode, router, extra):
    fast = _run(mode, router, extra)
    assert sum(fast.columns("steps")["evictions"]) > 0  # the caches turn over between requests
    assert len(set(fast.columns("requests")["instance"])) == 4
    with monkeypatch.context() as m:
        _reference(m)
        reference = _run(mode, router, extra)
    assert _tables(fast) == _tables(reference)


def test_fleet_request_table_with_an_idle_instance_and_labels(monkeypatch):
    # Round robin over 4 instances with 2 requests: two instances serve nothing; the agent
    # trace's requests carry labels (klass, turn).
    from fairsim.costmodel import DEFAULT_PROFILE, load_profile
    from fairsim.policies import make_policy
    from fairsim.routers import make_router
    from fairsim.sim import EngineConfig
    from fairsim.sim.fleet import simulate_fleet
    from fairsim.traces.agent import AgentSpec, generate_agent

    profile = load_profile(DEFAULT_PROFILE)
    reqs = [r for r in generate_agent(AgentSpec(num_sessions=2, session_rate_per_s=1.0)).requests
            if r.after is None]

    def run():
        return simulate_fleet(reqs, [make_policy("fcfs", profile) for _ in range(4)],
                              make_router("round-robin", 4), profile, EngineConfig(block_size=16))

    fast = run()
    assert len(reqs) == 2 and [len(p.columns("requests")) for p in fast.instances] == [1, 1, 0, 0]
    assert "klass" in fast.columns("requests").columns
    monkeypatch.setattr(Fleet, "_fleet_requests", _reference_fleet_requests)
    assert _tables(fast) == _tables(run())


@pytest.mark.parametrize("router", ["dynamo-kv", "llm-d"])
def test_a_whole_cached_prompt_counts_one_block_less(monkeypatch, router):
    # Two equal prompts of exactly 2 blocks, the second after the first finished: both blocks
    # are cached, but vLLM recomputes the last token, so the hit (and what the router counted
    # on the chosen instance) is 1 block.
    from fairsim.costmodel import DEFAULT_PROFILE, load_profile
    from fairsim.policies import make_policy
    from fairsim.routers import make_router
    from fairsim.sim import EngineConfig
    from fairsim.sim.fleet import simulate_fleet

    profile = load_profile(DEFAULT_PROFILE)
    reqs = [Request(f"r{i}", 100.0 * i, 32, (7, 8), 16, 1, {}) for i in range(2)]

    def run():
        return simulate_fleet(reqs, [make_policy("fcfs", profile) for _ in range(2)],
                              make_router(router, 2), profile, EngineConfig(block_size=16, kv_blocks=10))

    fast = run()
    assert list(fast.columns("requests")["router_cached_tokens"]) == [0, 16]
    assert list(fast.columns("requests")["cached_tokens"]) == [0, 16]
    _reference(monkeypatch)
    assert _tables(fast) == _tables(run())
