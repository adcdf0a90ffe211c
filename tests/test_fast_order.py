"""The policies' fast paths (``incremental_order``) change no decision.

Every registered policy runs several traces with the engine's fast path on and off
(``fast_order=False``: ``order()`` over every waiting snapshot each step, the reference); the
per-request and per-step tables must be equal. The traces cover eviction pressure (a small KV
cache), closed-loop sessions, the flood, and a slice of the Mooncake conversation trace at its
native rate (thousands waiting). Unit properties compare each incremental order with ``order()``
over random queues, random cache changes and admissions.
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairsim.costmodel import load_profile
from fairsim.errors import PolicyContractError
from fairsim.policies import make_policy
from fairsim.policies.incremental import ArrivalOrder
from fairsim.policies.registry import policy_names
from fairsim.scenarios import build_scenario
from fairsim.sim import simulate
from fairsim.sim.config import EngineConfig
from fairsim.types import QueuedRequest
from tests.utils import admit, change_hits, credit_pair, shared_prefix_requests

PROFILE = load_profile("a6000-llama3.1-8b-vllm-prior")
CONVERSATION = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces" / "conversation_trace.jsonl"


def _traces():
    out = {}
    flood = build_scenario("flood", PROFILE, seed=1, num_flood=300, num_miss=8)
    out["flood"] = (flood.requests, flood.engine)
    rag = build_scenario("rag", PROFILE, seed=2)
    # Eviction pressure: a cache of a few prompts, so hits appear and vanish between steps.
    longest = max(r.prompt_len for r in rag.requests)
    out["rag-evicting"] = (rag.requests[:300], EngineConfig(kv_tokens=3 * longest))
    agent = build_scenario("agent", PROFILE, seed=3, num_sessions=12)
    out["agent-sessions"] = (agent.requests, agent.engine)
    # Colocated (decode in the running list) with a cache so small that running requests are
    # preempted and re-admitted from the front of the queue.
    out["rag-colocated-preempting"] = (
        [dataclasses.replace(r, output_len=1 + (i * 37) % 200) for i, r in enumerate(rag.requests[:200])],
        EngineConfig(kv_tokens=4 * longest, mode="colocated", max_num_seqs=16))
    # Preempted requests re-admitted first change the hit of waiting requests that share their
    # prefix blocks, mid-step, before a fast-first policy's Fast lane is read (found in review:
    # the lane yielded a snapshot the engine had rebuilt, a contract error).
    rng = random.Random(5)
    shared = shared_prefix_requests(rng, (30, 60))
    out["shared-prefix-preempting"] = (shared, EngineConfig(kv_tokens=rng.choice([7, 9, 13]) * 512,
                                                            mode="colocated", max_num_seqs=rng.choice([4, 8])))
    return out


def _conversation():
    from fairsim.traces.formats import read_trace

    trace = read_trace(CONVERSATION)
    return list(trace.requests)[:700], EngineConfig(kv_blocks=451)


def _run(requests, engine, name, fast):
    policy = make_policy(name, PROFILE)
    return simulate(requests, policy, PROFILE, engine, fast_order=fast)


def _assert_same(requests, engine, name):
    fast = _run(requests, engine, name, True)
    ref = _run(requests, engine, name, False)
    pd.testing.assert_frame_equal(fast.requests, ref.requests, check_exact=True)
    pd.testing.assert_frame_equal(fast.steps, ref.steps, check_exact=True)
    return fast


TRACES = _traces()


@pytest.mark.parametrize("trace", sorted(TRACES))
@pytest.mark.parametrize("name", policy_names())
def test_fast_path_same_tables(name, trace):
    requests, engine = TRACES[trace]
    result = _assert_same(requests, engine, name)
    if trace.endswith("preempting"):
        assert result.requests["preemptions"].sum() > 0  # the re-admission path is exercised


@pytest.mark.skipif(not CONVERSATION.exists(), reason="shared conversation trace not present")
@pytest.mark.parametrize("name", policy_names())
def test_fast_path_same_tables_conversation_native_rate(name):
    requests, engine = _conversation()
    result = _assert_same(requests, engine, name)
    assert result.steps["waiting"].max() >= 200  # really overloaded: a long waiting queue


def test_every_hot_policy_has_a_fast_path():
    for name in ("fcfs", "lpm", "klpm4", "klpm8", "peek", "ragcache", "preble", "fairway", "fairway-abswait",
                 "fairway-nofair", "fairway-carry", "fairway-plus", "fairway-patience", "fairway-deadline"):
        assert make_policy(name, PROFILE).incremental_order() is not None, name
    assert make_policy("lpm", PROFILE, sglang_dedup=True).incremental_order() is None


class _SwappedFCFS:
    """FCFS whose fast path puts the newest request first: a changed admission."""

    name = "fcfs"

    def order(self, waiting, now):
        return make_policy("fcfs").order(waiting, now)

    def incremental_order(self):
        inner = ArrivalOrder()

        class Swapped:
            add = inner.add
            remove = inner.remove
            __len__ = inner.__len__

            def iter_order(self, now):
                items = list(inner.iter_order(now))
                return iter(items[-1:] + items[:-1])

        return Swapped()


def test_a_changed_fast_path_is_detected():
    requests, engine = TRACES["flood"]
    fast = simulate(requests, _SwappedFCFS(), PROFILE, engine, fast_order=True)
    ref = simulate(requests, _SwappedFCFS(), PROFILE, engine, fast_order=False)
    with pytest.raises(AssertionError):
        pd.testing.assert_frame_equal(fast.requests, ref.requests)


class _Duplicating(_SwappedFCFS):
    def incremental_order(self):
        inner = ArrivalOrder()

        class Dup:
            add = inner.add
            remove = inner.remove
            __len__ = inner.__len__

            def iter_order(self, now):
                items = list(inner.iter_order(now))
                return iter(items[:1] + items)

        return Dup()


def test_fast_path_contract_is_checked():
    requests, engine = TRACES["flood"]
    with pytest.raises(PolicyContractError, match="duplicate"):
        simulate(requests, _Duplicating(), PROFILE, engine)


# -- unit properties: incremental order == order() over random queues ---------------------------

def _snap(rid, arrival, L, h):
    return QueuedRequest(rid, arrival, L, h, max(1, L - h), 0, None)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), name=st.sampled_from(
    ["fcfs", "lpm", "klpm4", "klpm8", "peek", "ragcache", "preble", "fairway", "fairway-abswait", "fairway-nofair",
     "fairway-carry", "fairway-plus", "fairway-patience"]),
    n=st.integers(1, 120), ties=st.booleans())
def test_incremental_equals_order(seed, name, n, ties):
    rng = random.Random(seed)
    ref = make_policy(name, PROFILE)
    fast = make_policy(name, PROFILE)
    inc = fast.incremental_order()
    waiting: dict[str, QueuedRequest] = {}
    t = 0.0
    next_id = 0
    for step in range(6):
        # As the engine: cache changes of queued requests, arrivals (in arrival order), then
        # one order and some admissions.
        change_hits(rng, waiting, inc, 5)
        for _ in range(rng.randint(0, n)):
            t += 0.0 if ties and rng.random() < 0.5 else rng.random()
            L = rng.choice([512, 1024, 4096]) if ties else rng.randint(2, 16_000)
            h = rng.choice([0, 512]) if ties else rng.randint(0, L - 1)
            # Ids in no relation to arrival, so the request_id tie-break is exercised.
            q = _snap(f"r{rng.randrange(10**6):06d}-{next_id}", t, L, min(h, L - 1))
            next_id += 1
            waiting[q.request_id] = q
            inc.add(q)
        if not waiting:
            continue
        now = t + rng.random() * 10
        snaps = list(waiting.values())
        expected = ref.order(snaps, now)
        got = list(inc.iter_order(now))
        assert [q.request_id for q in got] == [q.request_id for q in expected]
        assert getattr(fast, "admission_limit", None) == getattr(ref, "admission_limit", None)
        admitted = expected[: rng.randint(0, 3)]
        for policy in (ref, fast):
            if admitted and hasattr(policy, "on_admitted"):
                policy.on_admitted(admitted, now)
        admit(waiting, inc, admitted)
    if hasattr(ref, "turn"):
        assert ref.turn == fast.turn
    if hasattr(ref, "debt"):
        assert (ref.oldest, ref.debt) == (fast.oldest, fast.debt)


def test_subclass_overriding_order_gets_no_fast_path():
    from fairsim.policies.incremental import fast_path_of
    from fairsim.policies.lpm import LPM

    class Recording(LPM):
        def order(self, waiting, now):
            return super().order(waiting, now)

    assert fast_path_of(Recording()) is None
    assert fast_path_of(LPM()) is not None
    assert fast_path_of(make_policy("fairway-carry", PROFILE)) is not None


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), name=st.sampled_from(["drr", "drr-dynamo", "vtc", "dlpm"]),
       n=st.integers(1, 60), num_clients=st.sampled_from([0, 1, 3, 8]), quantum=st.sampled_from([300, 2048]))
def test_credit_incremental_equals_order(seed, name, n, num_clients, quantum):
    """DRR/DRR-Dynamo/VTC/DLPM fast paths == order() over random clients (0: each request its own class), cache
    changes, arrivals, and admissions of a prefix read lazily (the engine reads the admitted
    requests and the first misfit only)."""
    rng = random.Random(seed)
    ref, fast, inc = credit_pair(name, quantum, PROFILE)
    waiting: dict[str, QueuedRequest] = {}
    t = 0.0
    next_id = 0
    for step in range(10):
        change_hits(rng, waiting, inc, 5)
        for _ in range(rng.randint(0, n)):
            t += rng.choice([0.0, rng.random()])
            L = rng.randint(2, 6_000)
            h = rng.randint(0, L - 1)
            client = ("tenant", rng.randrange(num_clients)) if num_clients else None
            q = QueuedRequest(f"r{rng.randrange(10**6):06d}-{next_id}", t, L, h, max(1, L - h), 0, None,
                              client=client)
            next_id += 1
            waiting[q.request_id] = q
            inc.add(q)
        if not waiting:
            continue
        now = t + rng.random()
        expected = ref.order(list(waiting.values()), now)
        k = rng.randint(0, min(4, len(expected)))
        it = inc.iter_order(now)
        got = [next(it) for _ in range(min(len(expected), k + 1))]
        assert [q.request_id for q in got] == [q.request_id for q in expected[:len(got)]]
        if rng.random() < 0.3:
            assert [q.request_id for q in got + list(it)] == [q.request_id for q in expected]
        admitted = expected[:k]
        for policy in (ref, fast):
            if admitted:
                policy.on_admitted(admitted, now)
        admit(waiting, inc, admitted)
    if name == "drr":
        assert (ref.deficit, ref.cursor) == (fast.deficit, fast.cursor)
    elif name == "drr-dynamo":
        assert (ref.deficit, ref.cursor, ref.position) == (fast.deficit, fast.cursor, fast.position)
        # The reference drops the costs of the requests that left at its next read, the fast path at once.
        assert {rid: ref.cost.get(rid) for rid in waiting} == {rid: fast.cost.get(rid) for rid in waiting}
    elif name == "dlpm":
        assert ref.deficit == fast.deficit
    else:
        assert (ref.counter, ref._backlogged, ref._last_left) == (fast.counter, fast._backlogged, fast._last_left)
