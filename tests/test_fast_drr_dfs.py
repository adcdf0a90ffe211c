"""The cheaper fast paths of ``dfs-weight`` (``CountedPrefixTree``) and ``drr`` (``DRROrder``'s
idle visits) make the decisions of their references.

- ``CountedPrefixTree`` (weights as counts, first arrivals cached and recomputed after a removal)
  against ``PrefixTreeOrder`` (``DFSWeight.order``'s tree, SortedLists of every subtree's
  requests) under random adds, replaced snapshots and removals, full and partial reads.
- DRR's idle visits log no cursor entries of their own: after every commit the real state
  (deficits, cursor) is the reference's, for a hand-computed run of idle visits and at random.
- Whole runs on a slice of the conversation trace (thousands waiting, hits that come and go):
  the engine's fast path and the reference ``order()`` give equal tables.
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
from fairsim.policies.sglang import CountedPrefixTree, PrefixTreeOrder
from fairsim.sim import simulate
from fairsim.sim.config import EngineConfig
from fairsim.types import QueuedRequest
from tests.utils import admit_both, assert_same_credit_state, credit_pair

PROFILE = load_profile("a6000-llama3.1-8b-vllm-prior")
CONVERSATION = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces" / "conversation_trace.jsonl"


def _snap(rid: str, t: float, keys: tuple, hit_blocks: int, bs: int = 16) -> QueuedRequest:
    L = bs * len(keys) + 5
    h = bs * hit_blocks
    return QueuedRequest(rid, t, L, h, max(1, L - h), 0, None, keys, bs, None, 0, 1)


def _ids(it, k=None) -> list[str]:
    out = []
    for r in it:
        if k is not None and len(out) == k:
            break
        out.append(r.request_id)
    return out


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 100_000), branching=st.sampled_from([1, 2, 3]), depth=st.integers(0, 7),
       same_time=st.booleans())
def test_counted_tree_reads_as_the_reference_tree(seed, branching, depth, same_time):
    """Random adds (new and replaced snapshots) and removals; after each change a full read and a
    partial read (the engine's lazy read) of both trees are equal. Few key letters make shared
    paths (equal weights: ties by the first arrival, which removals keep moving)."""
    rng = random.Random(seed)
    ref, fast = PrefixTreeOrder(), CountedPrefixTree()
    live: dict[str, tuple] = {}
    for i in range(120):
        op = rng.random()
        if live and op < 0.3:
            rid = rng.choice(sorted(live))
            del live[rid]
            ref.remove(rid)
            fast.remove(rid)
        else:
            if live and op < 0.5:  # a fresh snapshot of a held request: another hit
                rid = rng.choice(sorted(live))
                t, keys = live[rid]
            else:
                rid = f"r{i:03d}"
                t = float(rng.randint(0, 5)) if same_time else i + rng.random()
                keys = tuple("ABC"[rng.randrange(branching)] + str(j) for j in range(rng.randint(0, depth)))
                live[rid] = (t, keys)
            snap = _snap(rid, t, keys, rng.randint(0, len(keys)))
            ref.add(snap)
            fast.add(snap)
        assert len(fast) == len(ref) == len(live)
        k = rng.randint(0, 3)
        assert _ids(fast.iter_order(), k) == _ids(ref.iter_order(), k)
        assert _ids(fast.iter_order()) == _ids(ref.iter_order())


def test_counted_tree_first_arrival_after_removing_it():
    """Hand-made: A holds a (t=0) and b (t=3), B holds c (t=1) and d (t=2). Equal weights: A first
    (a arrived first). Removing a leaves A's first arrival 3 against B's 1: B first now."""
    tree = CountedPrefixTree()
    for rid, t, keys in [("a", 0.0, ("A", "x")), ("c", 1.0, ("B", "y")), ("d", 2.0, ("B", "z")),
                         ("b", 3.0, ("A", "w"))]:
        tree.add(_snap(rid, t, keys, 2))
    assert _ids(tree.iter_order()) == ["a", "b", "c", "d"]
    tree.remove("a")
    assert tree.root.children["A"].first is None  # unknown until a read compares A
    assert _ids(tree.iter_order()) == ["c", "d", "b"]
    assert tree.root.children["A"].first == (3.0, "b")


def test_drr_idle_visits_commit_the_reference_cursor():
    """Quantum 100; classes a (head 250 tokens), b (120), c (c1 40, then c2 50); cursor at a, no
    credit. a +100 idle, b +100 idle, c +100 serves c1 (deficit 60) and, still in its visit, c2.
    Committing c1 alone leaves the cursor at c, credited (the serving visit's own entries; the
    idle visits logged none), deficits a 100, b 100, c 60. The next order serves c2 (c empties:
    deficit 0, cursor to a), a +100 (200) idle, b +100 (200) serves b. Fast path and reference
    commit the same state at each step."""
    ref, fast, inc = credit_pair("drr", 100, PROFILE)
    waiting = {}
    for i, (rid, client, L) in enumerate([("a", "a", 250), ("b", "b", 120), ("c1", "c", 40), ("c2", "c", 50)]):
        r = QueuedRequest(rid, float(i), L, 0, L, 0, None, (), 0, client, 0, 1)
        waiting[rid] = r
        inc.add(r)
    assert [r.request_id for r in ref.order(list(waiting.values()), 5.0)] == ["c1", "c2", "b", "a"]
    assert _ids(inc.iter_order(5.0), 1) == ["c1"]
    admit_both(ref, fast, inc, waiting, ["c1"], 5.0)
    assert_same_credit_state("drr", ref, fast)
    assert fast.deficit == {"a": 100.0, "b": 100.0, "c": 60.0}
    assert fast.cursor == {"pos": "c", "credited": True}
    assert [r.request_id for r in ref.order(list(waiting.values()), 6.0)] == ["c2", "b", "a"]
    assert _ids(inc.iter_order(6.0), 2) == ["c2", "b"]
    admit_both(ref, fast, inc, waiting, ["c2", "b"], 6.0)
    assert_same_credit_state("drr", ref, fast)
    assert fast.deficit == {"a": 200.0, "b": 0.0, "c": 0.0}
    assert fast.cursor == {"pos": "a", "credited": False}


def _conversation(n: int, scale: float) -> list:
    from fairsim.traces.formats import read_trace

    reqs = list(read_trace(CONVERSATION).requests)[:n]
    return [dataclasses.replace(r, arrival_time=r.arrival_time / scale) for r in reqs]


@pytest.mark.skipif(not CONVERSATION.exists(), reason="public conversation trace absent")
@pytest.mark.parametrize("name", ["drr", "dfs-weight"])
@pytest.mark.parametrize("n, scale, mode", [(1200, 1.0, "prefill-only"), (400, 8.0, "colocated")])
def test_conversation_slice_same_tables(name, n, scale, mode):
    requests = _conversation(n, scale)
    engine = EngineConfig(kv_blocks=451, mode=mode)
    fast = simulate(requests, make_policy(name, PROFILE), PROFILE, engine, fast_order=True)
    ref = simulate(requests, make_policy(name, PROFILE), PROFILE, engine, fast_order=False)
    assert len(fast.requests) == n
    pd.testing.assert_frame_equal(fast.requests, ref.requests, check_exact=True)
    pd.testing.assert_frame_equal(fast.steps, ref.steps, check_exact=True)
