"""The shortcuts of the credit fast paths (``fairsim.policies.credit_fast``, ``drr_dynamo``) keep
the reference's decisions.

- Kept per-class values: DRR's head charge (``DRROrder._hc``: exact when > 0, a lower bound when
  < 0), DRR-Dynamo's head cost (``DRRDynamoOrder.head_cost``), VTC's keys (the lift's floor is the
  least key's counter), DLPM's clients with credit (``DLPMOrder._pos``, rebuilt in one sort
  when many clients changed). After every read each must equal what it stands for, recomputed from scratch,
  and the reads must equal ``order()`` (random clients, arrivals, stale hits told lazily,
  admissions of a prefix).
- Engine runs on slices of the Mooncake conversation trace (at 8x its time scale, colocated, and
  with several requests per class) give identical request and step tables with the fast path on
  and off (``order()`` over fresh snapshots every step). ``tests/test_fast_order.py`` covers the
  native rate.
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
from fairsim.policies import make_policy
from fairsim.sim import simulate
from fairsim.sim.config import EngineConfig
from fairsim.types import QueuedRequest
from tests.utils import admit_both, assert_same_credit_state, credit_pair, random_arrivals, read_prefix

PROFILE = load_profile("a6000-llama3.1-8b-vllm-prior")
CONVERSATION = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces" / "conversation_trace.jsonl"
CREDIT = ["drr", "drr-dynamo", "vtc", "dlpm"]


def _stale_events(rng, current: dict, inc, changed: int) -> None:
    """As the engine after cache events: new hits for up to ``changed`` waiting requests, told to
    the order only as stale (a hit that may have risen named in ``raised``), or, for an order
    without lazy hits (DLPM), as a fresh snapshot (``add``)."""
    stale = rng.sample(sorted(current), k=min(len(current), rng.randint(0, changed)))
    raised = []
    for rid in stale:
        q = current[rid]
        if rng.random() < 0.5:
            h = rng.randint(0, q.cached_len)  # only fell
        else:
            h = rng.randint(0, q.prompt_len - 1)
            raised.append(rid)
        current[rid] = q._replace(cached_len=h, uncached_len=max(1, q.prompt_len - h))
    if not hasattr(inc, "set_resolver"):
        for rid in stale:
            inc.add(current[rid])
    elif rng.random() < 0.3:
        inc.stale(stale)
    else:
        inc.stale(stale, raised)


def _check_kept_values(name: str, inc, policy, current: dict) -> None:
    """Each value the fast path keeps per class equals what it stands for (after a read)."""
    if name == "drr":
        for u, c in inc._hc.items():
            head = inc.queues[u][0][1]
            exact = current[head].uncached_len
            if c > 0:  # exact: the head is not stale and its stored snapshot's charge is this step's
                assert head not in inc._lo and c == exact == inc.items[head][1].uncached_len, (u, c)
            else:  # a lower bound of this step's charge
                assert 0 < -c <= exact, (u, c, exact)
    elif name == "drr-dynamo":
        for u, c in inc.head_cost.items():
            assert c == policy.cost[inc.queues[u][0][1]], (u, c)
    elif name == "vtc":
        assert list(inc._keys) == sorted((policy.counter[u], *queue[0]) for u, queue in inc.queues.items())
        assert policy._backlogged == set(inc.queues)
    else:
        want = {u: queue[0] for u, queue in inc.queues.items() if policy.deficit.get(u, 0.0) > 0}
        assert inc._pos_key == want and list(inc._pos) == sorted(want.values())


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 10_000), name=st.sampled_from(CREDIT), n=st.integers(1, 40),
       num_clients=st.sampled_from([0, 1, 3, 8]), quantum=st.sampled_from([300, 2048]),
       changed=st.integers(0, 20), rebuild_min=st.sampled_from([1, 256]))
def test_kept_values_and_reads_equal_the_reference(seed, name, n, num_clients, quantum, changed, rebuild_min):
    rng = random.Random(seed)
    ref, fast, inc = credit_pair(name, quantum, PROFILE)
    if name == "dlpm":  # 1: DLPM rebuilds its sorted clients with credit whenever a quarter changed
        inc.REBUILD_MIN = rebuild_min
    current: dict[str, QueuedRequest] = {}  # this step's snapshots (the engine's)
    if hasattr(inc, "set_resolver"):
        inc.set_resolver(lambda q: current[q.request_id])
    t = 0.0
    for step in range(14):
        t = random_arrivals(rng, t, step, n, num_clients, current, inc)
        _stale_events(rng, current, inc, changed)
        if not current:
            continue
        now = t + rng.random()
        expected = [q.request_id for q in ref.order(list(current.values()), now)]
        got, k = read_prefix(rng, inc, expected, now)
        assert all(q is current[q.request_id] for q in got)
        _check_kept_values(name, inc, fast, current)
        admit_both(ref, fast, inc, current, expected[:k], now)
    assert_same_credit_state(name, ref, fast)
    if name == "vtc":
        assert (ref._backlogged, ref._last_left) == (fast._backlogged, fast._last_left)


def test_drr_stale_head_bound_decides_idle_visits_then_resolves():
    """Quantum 300. a's head (L 2,000, hit 1,000: charge 1,000) goes stale with its hit fallen to
    500 (charge 1,500): _hc keeps -1,000 (the last charge read, a lower bound). b's head charges
    100. Visits: a +300 (300 < 1,000: idle by the bound, a's snapshot not read), b +300 serves b.
    Then a alone: +300 (600, idle by the bound), the skip of empty rounds needs the exact charge
    (read: 1,500), m = ceil((1,500 - 600) / 300) = 3, a gets 2 x 300 more (1,200), then +300
    (1,500) serves a."""
    ref, fast, inc = credit_pair("drr", 300, PROFILE)
    a = QueuedRequest("a1", 0.0, 2000, 1000, 1000, 0, None, client=("tenant", "a"))
    b = QueuedRequest("b1", 1.0, 100, 0, 100, 0, None, client=("tenant", "b"))
    current = {"a1": a, "b1": b}
    reads: list[str] = []
    inc.set_resolver(lambda q: reads.append(q.request_id) or current[q.request_id])
    for q in (a, b):
        inc.add(q)
    assert inc._hc == {("tenant", "a"): 1000, ("tenant", "b"): 100}
    current["a1"] = a._replace(cached_len=500, uncached_len=1500)
    inc.stale(["a1"], [])
    assert inc._hc[("tenant", "a")] == -1000
    assert [q.request_id for q in ref.order(list(current.values()), 0.0)] == ["b1", "a1"]
    it = inc.iter_order(0.0)
    assert next(it) is current["b1"] and reads == ["b1"]
    admit_both(ref, fast, inc, current, ["b1"], 0.0)
    assert fast.deficit == {("tenant", "a"): 300.0, ("tenant", "b"): 0.0}
    assert [q.request_id for q in ref.order(list(current.values()), 0.0)] == ["a1"]
    assert [q.request_id for q in inc.iter_order(0.0)] == ["a1"] and reads[1:] == ["a1", "a1"]
    assert inc._hc[("tenant", "a")] == 1500  # resolved: exact again
    admit_both(ref, fast, inc, current, ["a1"], 0.0)
    assert fast.deficit == {("tenant", "a"): 0.0}  # a emptied: its deficit reset
    assert_same_credit_state("drr", ref, fast)


def _conversation(n: int, scale: float = 1.0, clients: int = 0):
    from fairsim.traces.formats import read_trace

    requests = list(read_trace(CONVERSATION).requests)[:n]
    if scale != 1.0 or clients:
        requests = [dataclasses.replace(r, arrival_time=r.arrival_time * scale,
                                        labels={"tenant": i % clients} if clients else r.labels)
                    for i, r in enumerate(requests)]
    return requests


def _assert_same_tables(requests, config, name):
    fast = simulate(requests, make_policy(name, PROFILE), PROFILE, config, fast_order=True)
    ref = simulate(requests, make_policy(name, PROFILE), PROFILE, config, fast_order=False)
    pd.testing.assert_frame_equal(fast.requests, ref.requests, check_exact=True)
    pd.testing.assert_frame_equal(fast.steps, ref.steps, check_exact=True)
    return fast


@pytest.mark.skipif(not CONVERSATION.exists(), reason="shared conversation trace not present")
@pytest.mark.parametrize("name", CREDIT)
@pytest.mark.parametrize("case", ["ts8", "colocated-ts8", "native-5-tenants"])
def test_conversation_slice_same_tables(name, case):
    if case == "ts8":
        requests, config = _conversation(600, scale=8.0), EngineConfig(kv_blocks=451)
    elif case == "colocated-ts8":
        requests, config = _conversation(400, scale=8.0), EngineConfig(kv_blocks=451, mode="colocated")
    else:  # several requests per class: heads move, stale heads, visits that go on across reads
        requests, config = _conversation(500, clients=5), EngineConfig(kv_blocks=451)
    result = _assert_same_tables(requests, config, name)
    assert len(result.requests) == len(requests)
    if case == "native-5-tenants":
        assert result.steps["waiting"].max() >= 100  # a long queue, five classes


@settings(max_examples=200, deadline=None)
@given(ops=st.lists(st.tuples(st.booleans(), st.integers(0, 60), st.integers(0, 3)), max_size=300),
       compact_min=st.sampled_from([1, 4, 1024]))
def test_run_sorted_keys_equals_a_sorted_list(ops, compact_min):
    """VTC's key container (``RunSortedKeys``: a sorted list, then a run of keys added in
    increasing order) holds and iterates the same keys as a ``SortedList`` under random adds
    (mostly increasing, as VTC's one-request classes, some below the run or inside it) and
    removals (from the front, as admissions, or anywhere), with compaction at any size."""
    from sortedcontainers import SortedList

    from fairsim.policies.credit_fast import RunSortedKeys

    keys, ref = RunSortedKeys(), SortedList()
    keys.COMPACT_MIN = compact_min
    step = 0
    for is_add, value, where in ops:
        if is_add or not ref:
            step += 1
            # where 0-1: above every key so far (the run's case), 2: any value, 3: a repeat value
            key = (step if where < 2 else value, value, f"r{step}")
            keys.add(key)
            ref.add(key)
        else:
            key = ref[0] if where < 2 else ref[value % len(ref)]
            keys.remove(key)
            ref.remove(key)
        assert list(keys) == list(ref) and len(keys) == len(ref)
        if ref:
            assert keys.first() == ref[0]
    with pytest.raises(ValueError):
        keys.remove((-1, -1, "missing"))
