"""The fast paths' compiled twins (``fairsim/policies/_credit_c.pyx``: DRR's ``drr_visits`` and
``drr_sync``,
DRR-Dynamo's ``drr_dynamo_picks``, DLPM's ``dlpm_passes``, DFS-weight's
``CompiledCountedPrefixTree``, PEEK's ``CompiledHeadHeapOrder``) are their Python references
(``DRROrder._visits`` and ``_sync_python``, ``DRRDynamoOrder._pick_all``, ``DLPMOrder._passes``,
``sglang.CountedPrefixTree``, ``peek_order.HeadHeapOrder``) statement for statement.

- Side by side on random queues (clients, arrivals, hits told lazily or as fresh snapshots,
  admissions of a prefix, quanta small enough to skip empty rounds): every read yields the same
  snapshots, logs
  the same entries into the policy's ``Replay``, resolves the same requests in the same order and leaves the same kept charges (DRR's ``_hc``, ``_lo``;
  DRR-Dynamo's ``head_cost`` and costs; DLPM's kept first refill) and snapshots (``items``); the
  committed state is the same after every admission.
- The counted prefix tree side by side on random adds (new and replaced snapshots), removals
  and partial and full reads: the same sequences.
- The head-and-heap order side by side on random adds, removals, partial reads (one resumed
  after a later one) and head resizes: the same reads, the same ``head_changes`` and the same
  head, heap, dead copies and journal after every operation.
- Engine runs on slices of the conversation trace give identical request and step tables with
  the compiled code and with the Python one (DRR, DRR-Dynamo, DLPM, DFS-weight, PEEK).

Skipped where the extension is not built (the Python generator then runs everywhere).
"""

from __future__ import annotations

import dataclasses
import random
from itertools import islice
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairsim.costmodel import load_profile
from fairsim.policies import compiled_twins, make_policy
from fairsim.policies.peek_order import HeadHeapOrder
from fairsim.policies.sglang import CountedPrefixTree
from fairsim.sim import simulate
from fairsim.sim.config import EngineConfig
from tests.utils import admit, assert_same_credit_state, random_arrivals

pytest.importorskip("fairsim.policies._credit_c")

PROFILE = load_profile("a6000-llama3.1-8b-vllm-prior")
CONVERSATION = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces" / "conversation_trace.jsonl"


def _python_order(policy):
    """``policy``'s fast path reading with the Python generator (the reference)."""
    inc = policy.incremental_order()
    inc._read = {"drr": "_visits", "drr-dynamo": "_pick_all", "dlpm": "_passes"}[policy.name]
    inc._read = getattr(inc, inc._read)
    if policy.name == "drr":
        inc._sync = inc._sync_python
    return inc


def _log(policy) -> tuple:
    """The policy's ``Replay`` log, each target dict named (the two policies own different dicts)."""
    names = {id(getattr(policy, name, None)): name for name in ("deficit", "cursor", "emptied")}
    replay = policy._replay
    return ([(names[id(t)], k, v) for t, k, v in replay._changes], list(replay._marks), list(replay.ids))


@settings(max_examples=120, deadline=None)
@given(seed=st.integers(0, 10_000), name=st.sampled_from(["drr", "drr-dynamo", "dlpm"]), n=st.integers(1, 40),
       num_clients=st.sampled_from([0, 1, 3, 8]), quantum=st.sampled_from([40, 300, 2048]),
       changed=st.integers(0, 20))
def test_compiled_loops_equal_the_python_generators(seed, name, n, num_clients, quantum, changed):
    rng = random.Random(seed)
    py_policy = make_policy(name, PROFILE, quantum=quantum)
    c_policy = make_policy(name, PROFILE, quantum=quantum)
    py_inc, c_inc = _python_order(py_policy), c_policy.incremental_order()
    assert not hasattr(c_inc._read, "__func__")  # the compiled loop, not the Python method
    if name == "drr":
        assert not hasattr(c_inc._sync, "__func__") and hasattr(py_inc._sync, "__func__")
    current: dict = {}  # this step's snapshots (the engine's)
    reads: dict = {"py": [], "c": []}
    lazy = name != "dlpm"  # DLPM's order takes fresh snapshots (add), the others lazy hits
    if lazy:
        py_inc.set_resolver(lambda q: reads["py"].append(q.request_id) or current[q.request_id])
        c_inc.set_resolver(lambda q: reads["c"].append(q.request_id) or current[q.request_id])
    t = 0.0
    for step in range(14):
        t = random_arrivals(rng, t, step, n, num_clients, current, py_inc)
        for q in current.values():
            if q.request_id not in c_inc.items:
                c_inc.add(q)
        stale = rng.sample(sorted(current), k=min(len(current), rng.randint(0, changed)))
        raised = []
        for rid in stale:
            q = current[rid]
            h = rng.randint(0, q.prompt_len - 1)
            if h > q.cached_len:
                raised.append(rid)
            current[rid] = q._replace(cached_len=h, uncached_len=max(1, q.prompt_len - h))
        for inc in (py_inc, c_inc):
            if lazy:
                inc.stale(stale, raised)
            else:
                for rid in stale:
                    inc.add(current[rid])
        if not current:
            continue
        k = rng.randint(0, min(4, len(current)))
        py_it, c_it = py_inc.iter_order(0.0), c_inc.iter_order(0.0)
        got = []
        for _ in range(min(len(current), k + 1)):
            q = next(py_it)
            assert next(c_it) is q
            got.append(q)
        assert _log(c_policy) == _log(py_policy)
        assert reads["c"] == reads["py"]
        assert c_inc.items == py_inc.items
        if name == "drr":
            assert (c_inc._hc, c_inc._lo) == (py_inc._hc, py_inc._lo)
        elif name == "drr-dynamo":
            assert (c_inc.head_cost, c_policy.cost) == (py_inc.head_cost, py_policy.cost)
        elif name == "dlpm":  # the first refill kept for the next read, and the clients logged
            assert c_inc._logged == py_inc._logged and list(c_inc._pos) == list(py_inc._pos)
            assert (c_inc._refill is None) == (py_inc._refill is None)
            if c_inc._refill is not None:
                (ck, cd, ce, ch), (pk, pd_, pe, ph) = c_inc._refill, py_inc._refill
                assert (ck, cd, ch) == (pk, pd_, ph)
                assert [e[1:] for e in ce] == [e[1:] for e in pe]
        admitted = got[:k]
        if admitted:
            py_policy.on_admitted(admitted, 0.0)
            c_policy.on_admitted(admitted, 0.0)
        admit(current, py_inc, admitted)
        for q in admitted:
            c_inc.remove(q.request_id)
        assert_same_credit_state(name, py_policy, c_policy)
        if name == "drr":
            assert c_policy.emptied == py_policy.emptied
            assert (c_inc._nxt, c_inc._prv, c_inc._first) == (py_inc._nxt, py_inc._prv, py_inc._first)


def test_compiled_visits_skip_empty_rounds_as_the_python_generator():
    """Quantum 40, classes a (head charge 1,000) then b (130): the first round (+40 each) serves
    nobody, so the skip adds m - 1 quanta to both, m = min(ceil(960 / 40), ceil(90 / 40)) = 3;
    both loops log the same entries and place b first."""
    from fairsim.types import QueuedRequest

    logs = []
    for compiled in (False, True):
        policy = make_policy("drr", PROFILE, quantum=40)
        inc = policy.incremental_order() if compiled else _python_order(policy)
        for q in (QueuedRequest("a1", 0.0, 1000, 0, 1000, 0, None, client=("tenant", "a")),
                  QueuedRequest("b1", 1.0, 130, 0, 130, 0, None, client=("tenant", "b"))):
            inc.add(q)
        assert [q.request_id for q in inc.iter_order(0.0)] == ["b1", "a1"]
        logs.append(_log(policy))
    assert logs[0] == logs[1]
    deficits = [v for name, k, v in logs[0][0] if name == "deficit"]
    # a +40, b +40 (idle round); the skip: both +80; a +40 (160: idle), b +40 (160 >= 130)
    # serves b (30 left), b empties (0).
    assert deficits[:8] == [40.0, 40.0, 120.0, 120.0, 160.0, 160.0, 30.0, 0.0]


def _conversation(n: int, scale: float = 1.0, clients: int = 0):
    from fairsim.traces.formats import read_trace

    requests = list(read_trace(CONVERSATION).requests)[:n]
    return [dataclasses.replace(r, arrival_time=r.arrival_time * scale,
                                labels={"tenant": i % clients} if clients else r.labels)
            for i, r in enumerate(requests)]


@pytest.mark.skipif(not CONVERSATION.exists(), reason="shared conversation trace not present")
@pytest.mark.parametrize("name", ["drr", "drr-dynamo", "dlpm", "dfs-weight", "peek"])
@pytest.mark.parametrize("case", ["native", "ts8", "colocated-ts8", "native-5-tenants"])
def test_conversation_slice_same_tables_compiled_and_python(name, case, monkeypatch):
    if case == "native":
        requests, config = _conversation(1500), EngineConfig(kv_blocks=451)
    elif case == "ts8":
        requests, config = _conversation(600, scale=8.0), EngineConfig(kv_blocks=451)
    elif case == "colocated-ts8":
        requests, config = _conversation(400, scale=8.0), EngineConfig(kv_blocks=451, mode="colocated")
    else:
        requests, config = _conversation(500, clients=5), EngineConfig(kv_blocks=451)
    compiled = simulate(requests, make_policy(name, PROFILE), PROFILE, config)
    monkeypatch.setattr(compiled_twins, "compiled_twin", lambda name: None)
    python = simulate(requests, make_policy(name, PROFILE), PROFILE, config)
    pd.testing.assert_frame_equal(compiled.requests, python.requests, check_exact=True)
    pd.testing.assert_frame_equal(compiled.steps, python.steps, check_exact=True)
    assert len(compiled.requests) == len(requests)


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 100_000), branching=st.sampled_from([1, 2, 3]), depth=st.integers(0, 7),
       same_time=st.booleans())
def test_compiled_counted_tree_reads_as_the_python_tree(seed, branching, depth, same_time):
    """Random adds (new and replaced snapshots: another hit, so another node) and removals;
    after each change a partial read (the engine's lazy read) and a full read of both trees are
    equal, snapshot for snapshot. Few key letters make shared paths and equal weights (ties by
    the first arrival, which removals make unknown until a read compares the node)."""
    from fairsim.types import QueuedRequest

    rng = random.Random(seed)
    ref, fast = CountedPrefixTree(), make_policy("dfs-weight", PROFILE).incremental_order()
    assert type(fast).__name__ == "CompiledCountedPrefixTree"
    live: dict = {}
    for i in range(120):
        op = rng.random()
        if live and op < 0.3:
            rid = rng.choice(sorted(live))
            del live[rid]
            ref.remove(rid)
            fast.remove(rid)
        else:
            if live and op < 0.5:
                rid = rng.choice(sorted(live))
                t, keys = live[rid]
            else:
                rid = f"r{i:03d}"
                t = float(rng.randint(0, 5)) if same_time else i + rng.random()
                keys = tuple("ABC"[rng.randrange(branching)] + str(j) for j in range(rng.randint(0, depth)))
                live[rid] = (t, keys)
            L, h = 16 * len(keys) + 5, 16 * rng.randint(0, len(keys))
            snap = QueuedRequest(rid, t, L, h, max(1, L - h), 0, None, keys, rng.choice([16, 16, 0]))
            ref.add(snap)
            fast.add(snap)
        assert len(fast) == len(ref) == len(live)
        k = rng.randint(0, 3)
        part = fast.iter_order()
        assert [next(part) for _ in range(min(k, len(live)))] == list(ref.iter_order())[:k]
        assert list(fast.iter_order()) == list(ref.iter_order())


def _head_heap_state(order) -> tuple:
    return (order._head, order._heap, order._rest, order._by_id, order._cap, order._taken, order._reads,
            order._shown, order._entered, order._left)


@settings(max_examples=300, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from(["add", "add", "remove", "read", "head", "resume"]),
                              st.integers(0, 7), st.integers(0, 5), st.integers(0, 6)), max_size=80))
def test_compiled_head_heap_order_is_the_python_one(ops):
    from fairsim.types import QueuedRequest

    def key(q):
        return (-q.cached_len, q.arrival_time, q.request_id)

    py_order = HeadHeapOrder(key)
    c_order = make_policy("peek", PROFILE).incremental_order()
    assert type(c_order).__name__ == "CompiledHeadHeapOrder"
    c_order = type(c_order)(key)
    held: set = set()
    for op, n, score, k in ops:
        rid = f"r{n}"
        if op == "add":
            q = QueuedRequest(rid, float(score % 3), 10, score, 1, 0)
            py_order.add(q)
            c_order.add(q)
            held.add(rid)
        elif op == "remove" and rid in held:
            py_order.remove(rid)
            c_order.remove(rid)
            held.discard(rid)
        elif op == "read":  # the first k + 1 items, as the engine's admission reads
            assert list(islice(c_order.iter_order(0.0), k + 1)) == list(islice(py_order.iter_order(0.0), k + 1))
        elif op == "resume":  # a read left waiting while a later read takes keys off the heap
            py_first, c_first = py_order.iter_order(), c_order.iter_order()
            got = list(islice(c_first, k))
            assert got == list(islice(py_first, k))
            assert list(c_order.iter_order()) == list(py_order.iter_order())
            assert list(c_first) == list(py_first)  # the resumed read goes on after its last key
        elif op == "head":
            assert c_order.head_changes(k) == py_order.head_changes(k)
        assert _head_heap_state(c_order) == _head_heap_state(py_order)
        assert len(c_order) == len(py_order) == len(held)
    assert list(c_order.iter_order()) == list(py_order.iter_order())
