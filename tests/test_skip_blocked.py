"""The colocated engine's exact skip of admission attempts that cannot succeed.

``DecodeFastEngine._still_blocked`` lets a step skip reading the policy's order and trying an
admission when the last attempt failed at its first request and nothing that could change that
happened since. The decisions must be those of the attempts made: the request, step and
token-gap tables are compared with ``skip_blocked=False`` (the previous code, an attempt in
every step that can admit) and with the step-by-step engine (``fast_decode=False``), on traces
with preemptions, shared prefixes, long outputs and every registered policy.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

from fairsim.costmodel import load_profile
from fairsim.policies import make_policy
from fairsim.policies.registry import policy_names
from fairsim.scenarios import build_scenario
from fairsim.sim import EngineConfig, simulate
from fairsim.sim.decode_fast import DecodeFastEngine
from fairsim.sim.keys import blocks_for
from fairsim.sim.lazy_hits import NO_KEY
from fairsim.types import Request
from tests.strategies import BLOCK, colocated_traces, profiles
from tests.utils import constant_profile, rag_preempting

PROFILE = load_profile("a6000-llama3.1-8b-vllm-prior")
CONVERSATION = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces" / "conversation_trace.jsonl"
#: Policies whose fast path declares ``moved_by`` or ``head_moved_by`` (the skip applies to them).
SKIPPING = ["fcfs", "lpm", "klpm", "klpm4", "klpm8", "ragcache", "peek", "suf", "lpm-aging",
            "sjf-aging", "lof", "drr-dynamo", "vtc", "lpm-sglang", "hrrn", "shortest-prefill-first",
            "dfs-weight", "drr", "dlpm", "preble"]
#: Policies that declare what moves their order's first item only (``head_moved_by``: VTC's,
#: DRR's, and SGLang's kept order, which lpm-sglang has too).
HEAD_SKIPPING = ["vtc", "hrrn", "drr"]
#: Policies whose first item moves with the clock but is kept up to a known clock
#: (``head_until``: the Fast lane's kept first); they skip where their lane is bucketed.
CLOCK_SKIPPING = ["fairway", "fairway-abswait", "fairway-nofair", "fairway-carry", "fairway-plus",
                  "fairway-patience", "fairway-deadline"]
TABLES = ("requests", "steps", "token_gaps")


def _run(requests, policy, profile, config, skip=True):
    engine = DecodeFastEngine(requests, make_policy(policy, profile), profile, config, skip_blocked=skip)
    return engine, engine.run()


def _same_decisions(requests, policy, profile, config, reference=True):
    """Run with and without the skip (and, with ``reference``, the step-by-step engine); assert
    identical tables; return the skipping engine."""
    engine, fast = _run(requests, policy, profile, config)
    _, tried = _run(requests, policy, profile, config, skip=False)
    others = [tried]
    if reference:
        others.append(simulate(requests, make_policy(policy, profile), profile, config, fast_decode=False))
    for other in others:
        for name in TABLES:
            pd.testing.assert_frame_equal(getattr(fast, name), getattr(other, name), check_exact=True)
    return engine


def test_a_blocked_head_is_tried_once_by_hand():
    # A (6-token prompt, 2 blocks of 4) decodes 9 steps and grows to 4 blocks of the 4; B
    # (9 tokens: 3 blocks) arrives at 0.5 s and fits only once A finishes (end of step 9). Step 1
    # tries B and fails; steps 2-9 would try again with nothing freed: all skipped (inside
    # stretches of pure decode steps, or at A's block events), and B is admitted at step 10.
    reqs = [Request("A", 0.0, 6, (), BLOCK, 10, {}), Request("B", 0.5, 9, (), BLOCK, 2, {})]
    config = EngineConfig(block_size=BLOCK, kv_blocks=4, mode="colocated")
    engine = _same_decisions(reqs, "fcfs", constant_profile(step_s=1.0), config)
    assert engine.skipped_attempts == 8
    _, res = _run(reqs, "fcfs", constant_profile(step_s=1.0), config)
    assert res.requests.set_index("request_id").loc["B", "first_scheduled_step"] == 10
    assert res.steps["waiting"].tolist() == [1] * 11 + [0]  # at each step's start: A, then B


@pytest.mark.parametrize("name", policy_names())
def test_every_policy_same_tables_with_preemptions(name):
    reqs, config = rag_preempting(PROFILE)
    engine = _same_decisions(reqs, name, PROFILE, config, reference=False)
    if name not in CLOCK_SKIPPING:
        assert (engine.skipped_attempts > 0) == (name in SKIPPING)


def test_only_declared_orders_skip():
    # Fairway's order moves with the clock (wait / SLO), Preble's group pointer with each read,
    # DRR's first visit with the charges (lazy snapshots): none declares ``moved_by`` or
    # ``head_moved_by``. VTC's first item and HRRN's kept order (above 128 waiting) declare
    # theirs only.
    reqs, config = rag_preempting(PROFILE)
    for name in ("fairway", "fairway-deadline", "preble"):
        engine = DecodeFastEngine(reqs, make_policy(name, PROFILE), PROFILE, config)
        assert not engine._skip and not engine._skip_head
        assert (engine._head_until is not None) == (name in CLOCK_SKIPPING)
    for name in ("preble", "drr", "vtc", "fcfs"):
        engine = DecodeFastEngine(reqs, make_policy(name, PROFILE), PROFILE, config)
        assert engine._head_until is None
    for name in HEAD_SKIPPING:
        engine = DecodeFastEngine(reqs, make_policy(name, PROFILE), PROFILE, config)
        assert engine._skip_head and not engine._skip
    assert not DecodeFastEngine(reqs, make_policy("hrrn", sglang_sort_limit=False), PROFILE, config)._skip_head
    assert DecodeFastEngine(reqs, make_policy("lpm", PROFILE), PROFILE, config)._skip


def test_group_turns_end_the_skip_at_each_condition():
    # Preble serves its groups in turn and skips misfits: an attempt is skipped only where the
    # last attempt at every non-empty group admitted nothing and, for each request it tried,
    # nothing since could make it fit. The records are set by hand here.
    reqs = [Request("A", 0.0, 9, (1, 2), BLOCK, 4, {}), Request("B", 0.0, 13, (1, 2, 3), BLOCK, 2, {}),
            Request("C", 0.0, 13, (7, 8, 9), BLOCK, 2, {})]
    config = EngineConfig(block_size=BLOCK, kv_blocks=8, mode="colocated")
    engine = DecodeFastEngine(reqs, make_policy("preble"), constant_profile(), config)
    assert engine._skip_groups and not engine._skip and not engine._skip_head
    pool, inc = engine.pool, engine._inc
    b, c = engine._all[1], engine._all[2]
    for live, group in ((b, 3), (c, 0)):  # two waiting requests in two groups
        engine._waiting[live] = live
        engine.policy._group[live.req.request_id] = group  # as if seen with such a hit
        inc.add(engine._make_snapshot(live, 0, 0))
    assert inc.turn_groups() == [0, 3]

    def record(group, keys):
        engine._group_blocked[group] = (keys, engine._order_changes, pool.num_frees)

    record(3, [b.keys[2]])
    assert not engine._still_blocked(0.0)  # group 0 has no record: its attempt may admit
    record(0, [NO_KEY])
    assert engine._still_blocked(0.0)
    engine._order_changes += 1  # an arrival, admission or preemption
    assert not engine._still_blocked(0.0)
    record(3, [b.keys[2]])
    record(0, [c.keys[1]])
    ids = pool.allocate(3)  # allocations only lower the free blocks
    pool.cache(ids[0], ("other", 0))
    assert engine._still_blocked(0.0)
    pool.cache(ids[1], c.keys[1])  # the next key of a request group 0's attempt tried
    assert not engine._still_blocked(0.0)
    record(0, [NO_KEY])
    assert engine._still_blocked(0.0)
    pool.free(ids[2:])  # a free block more
    assert not engine._still_blocked(0.0)
    record(3, [b.keys[2]])
    record(0, [NO_KEY])
    engine._waiting.clear()  # nothing waiting: no read to skip
    assert not engine._still_blocked(0.0)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=10, max_size=10).filter(any), st.integers(0, 9),
       st.integers(0, 45))
def test_skip_reads_is_count_reads(sizes, pointer, count):
    # Preble's order after skip_reads(count) is in the state count reads leave it in.
    from fairsim.policies.incremental import PrebleOrder
    from fairsim.types import QueuedRequest

    def order_with_lanes():
        policy = make_policy("preble")
        policy.pointer = pointer
        inc = PrebleOrder(policy, 10, 10)
        for g, size in enumerate(sizes):
            for i in range(size):
                rid = f"g{g}-{i}"
                policy._group[rid] = g
                inc.add(QueuedRequest(rid, float(i), 8, 0, 8))
        return policy, inc

    read_policy, read = order_with_lanes()
    for _ in range(count):
        read.iter_order(0.0)
    skip_policy, skipped = order_with_lanes()
    skipped.skip_reads(count)
    assert (skip_policy.pointer, skip_policy.admission_limit, skipped.served) == (
        read_policy.pointer, read_policy.admission_limit, read.served)


def test_kept_order_declares_its_head_by_queue_length():
    # SGLang's kept order: above 128 waiting it is read as kept (only joins and leaves move its
    # first item); at or below it sorts by the snapshots (and HRRN by its counter: the engine's).
    from fairsim.policies.sglang import SGLANG_SORT_LIMIT, KeptOrder
    from fairsim.types import QueuedRequest

    def snap(i):
        return QueuedRequest(f"r{i}", float(i), 8, 0, 8)

    plain, clock_free = KeptOrder(list), KeptOrder(list, clock_free=True)
    for i in range(SGLANG_SORT_LIMIT):
        plain.add(snap(i))
        clock_free.add(snap(i))
    assert (plain.head_moved_by, clock_free.head_moved_by) == ("snapshots", "snapshots")
    plain.add(snap(SGLANG_SORT_LIMIT))
    clock_free.add(snap(SGLANG_SORT_LIMIT))
    assert (plain.head_moved_by, clock_free.head_moved_by) == ("queue", "queue")
    plain.remove("r0")
    assert plain.head_moved_by == "snapshots"


def test_hrrn_same_tables_across_the_sort_limit():
    # A (40-token prompt, 10 blocks of 4, 30 outputs) holds the cache while 140 requests of 11-15
    # blocks arrive: none fits until A finishes, then one at a time. HRRN keeps its order while
    # more than 128 wait and sorts by its ratios below, which move with its counter.
    reqs = [Request("A", 0.0, 40, (), BLOCK, 30, {})]
    for i in range(140):
        n = 44 + 4 * (i % 5)
        keys = (100 + i % 3,) + tuple(1000 * i + j for j in range(n // BLOCK - 1))
        reqs.append(Request(f"B{i:03d}", 0.5 + 0.01 * (i % 7), n, keys, BLOCK, 1 + i % 4, {}))
    config = EngineConfig(block_size=BLOCK, kv_blocks=22, mode="colocated")
    profile = constant_profile(step_s=1.0, per_token_s=0.001)
    engine = _same_decisions(reqs, "hrrn", profile, config)
    assert engine.skipped_attempts > 20
    assert engine._inc.head_moved_by == "snapshots"  # the queue ran down below the limit


def test_each_condition_ends_the_skip():
    # The blocked head's state set by hand: each event the proof names must end the skip.
    reqs = [Request("A", 0.0, 9, (1, 2), BLOCK, 4, {}), Request("B", 0.0, 13, (1, 2, 3), BLOCK, 2, {})]
    config = EngineConfig(block_size=BLOCK, kv_blocks=8, mode="colocated")
    engine = DecodeFastEngine(reqs, make_policy("fcfs"), constant_profile(), config)
    pool = engine.pool
    head = engine._all[1]

    def block_on(next_key):
        engine._blocked = (head, next_key, engine._order_changes, pool.num_frees, engine.prefill_tokens)

    block_on(head.keys[2])
    assert engine._still_blocked(0.0)
    engine._skip = False  # an order that does not declare what moves it
    assert not engine._still_blocked(0.0)
    engine._skip = True
    engine._order_changes += 1  # an arrival, admission, preemption or (eager) re-key
    assert not engine._still_blocked(0.0)
    block_on(head.keys[2])
    ids = pool.allocate(3)  # allocations only lower the free blocks
    pool.cache(ids[0], ("other", 0))  # a key that is not the head's next one
    assert engine._still_blocked(0.0)
    pool.cache(ids[1], head.keys[2])  # the head's next key: its hit may grow
    assert not engine._still_blocked(0.0)
    block_on(NO_KEY)  # a hit at its cap cannot grow
    assert engine._still_blocked(0.0)
    pool.free(ids[2:])  # a free block more
    assert not engine._still_blocked(0.0)


def test_clock_kept_head_ends_the_skip_at_its_clock_and_at_pending_changes():
    # An order whose first item is kept up to a clock (``head_until``, the Fairway family's):
    # the skip holds up to that clock only, and not while a snapshot change waits to be told.
    reqs = [Request("A", 0.0, 9, (1, 2), BLOCK, 4, {}), Request("B", 0.0, 13, (1, 2, 3), BLOCK, 2, {})]
    config = EngineConfig(block_size=BLOCK, kv_blocks=8, mode="colocated")
    # Fairway's engine has lazy hits (a recheck pending ends the skip too); its head_until is
    # replaced by a fixed clock.
    engine = DecodeFastEngine(reqs, make_policy("fairway", constant_profile()), constant_profile(), config)
    engine._skip = False
    engine._skip_head = False
    engine._head_until = lambda now: 5.0 if now <= 5.0 else None
    engine._blocked = (engine._all[1], NO_KEY, engine._order_changes, engine.pool.num_frees, 0)
    assert engine._still_blocked(4.0) and engine._blocked_until == 5.0
    assert engine._still_blocked(5.0)
    assert not engine._still_blocked(5.000001)
    engine._dirty[1] = engine._all[0]  # a snapshot changed, not yet told to the order
    assert not engine._still_blocked(4.0)
    engine._dirty.clear()
    engine._lazy.recheck.append(engine._all[0])
    assert not engine._still_blocked(4.0)
    engine._lazy.recheck.clear()
    assert engine._still_blocked(4.0)
    engine._head_until = None  # no kept head: as before
    assert not engine._still_blocked(4.0)


def test_hrrn_counter_ends_the_skip_below_the_sort_limit():
    # At or below 128 waiting HRRN sorts by its ratios, which move with the prefill-token
    # counter it is told: a skip needs the counter of the last read; above, it is not read.
    from fairsim.policies.sglang import SGLANG_SORT_LIMIT

    reqs = [Request("A", 0.0, 9, (1, 2), BLOCK, 4, {})]
    config = EngineConfig(block_size=BLOCK, kv_blocks=8, mode="colocated")
    engine = DecodeFastEngine(reqs, make_policy("hrrn"), constant_profile(), config)
    engine._blocked = (engine._all[0], NO_KEY, engine._order_changes, engine.pool.num_frees, 100)
    engine.prefill_tokens = 100
    assert engine._inc.head_moved_by == "snapshots" and engine._still_blocked(0.0)
    engine.prefill_tokens = 101  # a prefill chunk ran since the last read
    assert not engine._still_blocked(0.0)
    engine._inc.items = {f"r{i}": None for i in range(SGLANG_SORT_LIMIT + 1)}  # the order kept as is
    assert engine._inc.head_moved_by == "queue" and engine._still_blocked(0.0)


@st.composite
def colocated_runs(draw):
    reqs, config = draw(colocated_traces(max_spare_blocks=6))
    return reqs, draw(profiles()), config, draw(st.sampled_from(SKIPPING + CLOCK_SKIPPING))


@settings(max_examples=150, deadline=None)
@given(colocated_runs())
def test_same_tables_small_traces(run):
    reqs, profile, config, policy = run
    _same_decisions(reqs, policy, profile, config)


def test_sessions_open_loop():
    # Agent sessions replayed at their timestamps: a turn may wait while the one before it (whose
    # prompt it extends) still prefills or decodes, so its hit grows as that request's blocks are
    # cached.
    agent = build_scenario("agent", PROFILE, seed=3, num_sessions=8)
    reqs = [dataclasses.replace(r, output_len=1 + (i * 31) % 300) for i, r in enumerate(agent.requests)]
    longest = max(blocks_for(r.prompt_len + r.output_len - 1, 16) for r in reqs)
    config = EngineConfig(kv_blocks=2 * longest, block_size=16, mode="colocated")
    for name in ("fcfs", "lpm", "peek"):
        engine = _same_decisions(reqs, name, PROFILE, config, reference=True)
        assert engine.skipped_attempts > 0


@pytest.mark.skipif(not CONVERSATION.exists(), reason="shared conversation trace not present")
@pytest.mark.parametrize("name", ["fcfs", "lpm", "peek", "klpm4", "vtc", "hrrn", "fairway", "fairway-carry", "preble"])
def test_conversation_long_outputs(name):
    from fairsim.traces.formats import read_trace

    reqs = [dataclasses.replace(r, arrival_time=8 * r.arrival_time)
            for r in list(read_trace(CONVERSATION).requests)[:1500]]
    config = EngineConfig(kv_blocks=451, mode="colocated")
    engine = _same_decisions(reqs, name, PROFILE, config, reference=False)
    _, res = _run(reqs, name, PROFILE, config)
    assert res.requests["preemptions"].sum() > 0 and res.requests["output_tokens"].max() > 500
    assert engine.skipped_attempts > len(res.steps) / 4
    assert engine.chunk_run_steps > len(res.steps) / 10  # prefill chunks beside the decoders


@pytest.mark.parametrize("name", ["fcfs", "lpm", "vtc", "hrrn", "preble"])
def test_colocated_fleet_same_tables(name):
    # Fleet members stretch blocked steps only up to the fleet's next event (a routing may
    # reach them then): two instances against step-by-step ones.
    from fairsim.routers import make_router
    from fairsim.sim.fleet import Fleet, simulate_fleet

    reqs, config = rag_preempting(PROFILE)

    def policies():
        return [make_policy(name, PROFILE) for _ in range(2)]

    router = make_router("round-robin", 2)
    fleet = Fleet(reqs, policies(), router, PROFILE, config)
    fast = fleet.run()
    ref = simulate_fleet(reqs, policies(), make_router("round-robin", 2), PROFILE, config, fast_decode=False)
    for table in TABLES:
        pd.testing.assert_frame_equal(getattr(fast, table), getattr(ref, table), check_exact=True)
    assert fast.requests["preemptions"].sum() > 0
    assert all(engine.skipped_attempts > 0 for engine in fleet.engines)


def test_fairway_deadline_floor_exact_only_where_the_skip_asks():
    # A leave leaves fairway-deadline's floor a lower bound (cheaper walks prefill-only); the
    # colocated skip, whose kept clock ends at the floor, asks for exact leaves
    # (``DueBlocks.exact_leaves``): 177,370 attempts skipped on the conversation trace at
    # ``--time-scale 8`` against 132,628. Decisions are the same either way (above).
    from fairsim.sim.engine import Engine

    reqs, config = rag_preempting(PROFILE)
    engine, _ = _run(reqs, "fairway-deadline", PROFILE, config)
    assert engine._inc.due.exact_leaves and engine.skipped_attempts > 0
    plain = Engine(reqs, make_policy("fairway-deadline", PROFILE), PROFILE, dataclasses.replace(config, mode="prefill-only"))
    plain.run()
    assert not plain._inc.due.exact_leaves
