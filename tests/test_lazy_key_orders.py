"""Lazy prefix hits for LPM-aging, SJF-aging (``LazyKeyOrder``), SGLang's kept order (``hrrn``,
``lpm-sglang``) and Preble's group lanes: same order as ``order()`` over fresh snapshots.

The unit property plays the engine's side of ``fairsim.sim.lazy_hits`` by hand: between reads
some waiting requests get a new hit; the order is told only ``stale(ids, raised)`` (``raised``:
those whose hit rose above the one the order last saw) and reads this step's snapshots through
the resolver. Each read (a prefix, as the admission loop reads) must give the reference order's
requests and this step's snapshot objects. The engine tables on a slice of the conversation
trace are compared with the reference path (``fast_order=False``) and with the eager fast path
(the same order without ``set_resolver``).
"""

from __future__ import annotations

import random
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairsim.costmodel import load_profile
from fairsim.policies import make_policy
from fairsim.policies import incremental
from fairsim.policies.incremental import LazyKeyOrder, _bound
from fairsim.sim import simulate
from fairsim.sim.config import EngineConfig
from fairsim.sim.decode_fast import DecodeFastEngine
from fairsim.types import QueuedRequest

PROFILE = load_profile("a6000-llama3.1-8b-vllm-prior")
CONVERSATION = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces" / "conversation_trace.jsonl"
BS = 16  # tokens per block key in the unit property
LAZY = ["lpm-aging", "sjf-aging", "hrrn", "lpm-sglang", "preble"]


def _snap(rng: random.Random, rid: str, t: float, prefix_pool: int) -> QueuedRequest:
    blocks = rng.randint(1, 12)
    L = blocks * BS + rng.randint(0, BS - 1) + 1
    # A few shared first blocks, so SGLang's in-batch groups form.
    keys = (f"p{rng.randrange(prefix_pool)}",) + tuple(f"{rid}-{j}" for j in range(1, blocks))
    h = rng.randint(0, min(blocks, (L - 1) // BS)) * BS
    return QueuedRequest(rid, t, L, h, max(1, L - h), 0, None, keys, BS, None, rng.randint(0, 5000))


def _new_hit(rng: random.Random, q: QueuedRequest) -> QueuedRequest:
    h = rng.randint(0, min(len(q.block_keys), (q.prompt_len - 1) // BS)) * BS
    return q._replace(cached_len=h, uncached_len=max(1, q.prompt_len - h))


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 100_000), name=st.sampled_from(LAZY), n=st.integers(1, 40),
       pool=st.integers(1, 4), full=st.booleans())
def test_lazy_order_equals_order(seed, name, n, pool, full):
    rng = random.Random(seed)
    ref, fast = make_policy(name, PROFILE), make_policy(name, PROFILE)
    inc = fast.incremental_order()
    waiting: dict[str, QueuedRequest] = {}  # this step's snapshot of each waiting request
    seen: dict[str, int] = {}  # the hit of the snapshot the order last saw
    resolved: list[str] = []

    def resolve(q: QueuedRequest) -> QueuedRequest:
        resolved.append(q.request_id)
        seen[q.request_id] = waiting[q.request_id].cached_len
        return waiting[q.request_id]

    inc.set_resolver(resolve)
    t, prefill = 0.0, 0
    for step in range(8):
        # Step start: hits change (the order hears of it as lazy hits tell it), then arrivals.
        changed = rng.sample(sorted(waiting), k=min(len(waiting), rng.randint(0, 6)))
        for rid in changed:
            waiting[rid] = _new_hit(rng, waiting[rid])
        raised = [rid for rid in changed if waiting[rid].cached_len > seen[rid]]
        if changed:
            inc.stale(changed, raised)
        for i in range(rng.randint(0, n)):
            t += rng.choice([0.0, rng.random()])
            q = _snap(rng, f"r{rng.randrange(10**6):06d}-{step}-{i}", t, pool)
            waiting[q.request_id] = q
            seen[q.request_id] = q.cached_len
            inc.add(q)
        if not waiting:
            continue
        prefill += rng.randint(0, 4096)
        for policy in (ref, fast):
            if hasattr(policy, "on_prefill_tokens"):
                policy.on_prefill_tokens(prefill)
        now = t + rng.random()
        expected = ref.order(list(waiting.values()), now)
        it = inc.iter_order(now)
        k = len(expected) if full else min(len(expected), rng.randint(1, 5))
        got = [next(it) for _ in range(k)]
        assert [q.request_id for q in got] == [q.request_id for q in expected[:k]]
        assert all(q is waiting[q.request_id] for q in got)  # this step's snapshots
        assert getattr(fast, "admission_limit", None) == getattr(ref, "admission_limit", None)
        limit = getattr(ref, "admission_limit", None)
        admitted = got[: rng.randint(0, min(k, 3) if limit is None else min(k, 3, limit))]
        for policy in (ref, fast):
            if admitted and hasattr(policy, "on_admitted"):
                policy.on_admitted(admitted, now)
        for q in admitted:
            del waiting[q.request_id]
            inc.remove(q.request_id)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 100_000), n=st.integers(1, 300))
def test_lazy_key_order_is_sorted_by_true_keys_and_resolves_only_what_it_must(seed, n):
    # LPM's key: stale requests behind the read prefix stay unresolved.
    rng = random.Random(seed)
    order = LazyKeyOrder(incremental.longest_key)
    waiting, calls = {}, []

    def resolve(q):
        calls.append(q.request_id)
        return waiting[q.request_id]

    order.set_resolver(resolve)
    for i in range(n):
        q = _snap(rng, f"r{i:04d}", float(i), 3)
        waiting[q.request_id] = q
        order.add(q)
    list(order.iter_order())  # a full read: every request exact
    calls.clear()
    # Hits fall only (nothing raised): the stored keys are lower bounds.
    fell = rng.sample(sorted(waiting), k=rng.randint(0, n))
    for rid in fell:
        q = waiting[rid]
        h = rng.randint(0, q.cached_len // BS) * BS
        waiting[rid] = q._replace(cached_len=h, uncached_len=max(1, q.prompt_len - h))
    order.stale(fell, [])
    first = next(order.iter_order())
    truth = sorted(waiting.values(), key=incremental.longest_key)
    assert first is truth[0]
    # Only stale requests stored ahead of the true first were resolved, each once.
    assert len(calls) == len(set(calls)) and set(calls) <= set(fell)
    stored_ahead = [rid for rid in calls if rid != first.request_id]
    assert all(incremental.longest_key(waiting[rid]) > incremental.longest_key(first) for rid in stored_ahead)
    assert [q.request_id for q in order.iter_order()] == [q.request_id for q in truth]


def test_bound_is_the_largest_possible_hit():
    q = QueuedRequest("a", 0.0, 70, 16, 54, 0, None, ("k0", "k1", "k2", "k3"), 16)
    b = _bound(q)
    # 70 tokens: 4 full blocks, but the last token is never a hit: (70 - 1) // 16 = 4 blocks.
    assert (b.cached_len, b.uncached_len) == (64, 6)
    q = QueuedRequest("b", 0.0, 64, 0, 64, 0, None, ("k0", "k1", "k2", "k3"), 16)
    assert _bound(q).cached_len == 48  # (64 - 1) // 16 = 3 blocks
    assert _bound(q._replace(block_size=0, block_keys=())) == q._replace(block_size=0, block_keys=())


def test_a_key_that_falls_with_a_falling_hit_is_refused():
    # A key increasing in h (the opposite of LPM) breaks the lower-bound rule: detected on read.
    waiting = {}
    order = LazyKeyOrder(lambda q: (q.cached_len, q.arrival_time, q.request_id))
    order.set_resolver(lambda q: waiting[q.request_id])
    for i, h in enumerate((32, 48)):
        waiting[f"r{i}"] = QueuedRequest(f"r{i}", float(i), 100, h, 100 - h, 0, None, ("a",) * 6, 16)
        order.add(waiting[f"r{i}"])
    waiting["r1"] = waiting["r1"]._replace(cached_len=0, uncached_len=100)
    order.stale(["r1"], [])
    with pytest.raises(RuntimeError, match="fell"):
        list(order.iter_order())


def _conversation(count=900):
    from fairsim.traces.formats import read_trace

    return list(read_trace(CONVERSATION).requests)[:count]


class _Eager:
    """The policy with its fast path made eager: the same order object without lazy hits."""

    def __init__(self, policy):
        self._policy = policy
        self.name = policy.name

    def __getattr__(self, item):
        return getattr(self._policy, item)

    def incremental_order(self):
        inc = self._policy.incremental_order()

        class NoResolver:
            def __init__(self):
                self.inner = inc

            def __getattr__(self, item):
                if item in ("set_resolver", "stale"):
                    raise AttributeError(item)
                return getattr(self.inner, item)

            def __len__(self):
                return len(self.inner)

        return NoResolver()


@pytest.mark.skipif(not CONVERSATION.exists(), reason="shared conversation trace not present")
@pytest.mark.parametrize("name", LAZY)
def test_conversation_slice_lazy_equals_reference_and_eager(name):
    requests = _conversation()
    config = EngineConfig(kv_blocks=451)
    lazy = simulate(requests, make_policy(name, PROFILE), PROFILE, config)
    ref = simulate(requests, make_policy(name, PROFILE), PROFILE, config, fast_order=False)
    eager = simulate(requests, _Eager(make_policy(name, PROFILE)), PROFILE, config)
    for other in (ref, eager):
        pd.testing.assert_frame_equal(lazy.requests, other.requests, check_exact=True)
        pd.testing.assert_frame_equal(lazy.steps, other.steps, check_exact=True)
    assert lazy.steps["waiting"].max() > 128  # above SGLang's sort limit: the kept order is read


@pytest.mark.skipif(not CONVERSATION.exists(), reason="shared conversation trace not present")
@pytest.mark.parametrize("name", ["lpm-aging", "sjf-aging", "hrrn", "lpm-sglang"])
def test_colocated_lazy_head_skips_with_the_same_tables(name):
    # The colocated skip of blocked admissions accepts a lazy order's first item when nothing
    # is pending (DecodeFastEngine._head_unmoved): same tables as the attempts made.
    import dataclasses

    requests = [dataclasses.replace(r, output_len=1 + (i * 37) % 300) for i, r in enumerate(_conversation(500))]
    config = EngineConfig(kv_blocks=451, mode="colocated")
    skipping = DecodeFastEngine(requests, make_policy(name, PROFILE), PROFILE, config)
    tried = DecodeFastEngine(requests, make_policy(name, PROFILE), PROFILE, config, skip_blocked=False)
    a, b = skipping.run(), tried.run()
    assert skipping._lazy is not None and skipping._skip_head
    for table in ("requests", "steps", "token_gaps"):
        pd.testing.assert_frame_equal(getattr(a, table), getattr(b, table), check_exact=True)
    assert skipping.skipped_attempts > 0
