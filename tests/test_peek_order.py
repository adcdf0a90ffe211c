"""PEEK's fast path, ``HeadHeapOrder`` (a sorted head and a heap), against ``SortedKeyOrder``
(the order it replaces) on random operations, and the engine's tables with it against the
reference path (``fast_order=False``: ``PEEK.order`` and a protected set rebuilt at every step)
on a slice of the conversation trace."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from hypothesis import example, given, settings, strategies as st

from fairsim.costmodel import load_profile
from fairsim.policies import make_policy
from fairsim.policies.incremental import SortedKeyOrder
from fairsim.policies.peek_order import HeadHeapOrder
from fairsim.sim import EngineConfig, simulate
from fairsim.types import QueuedRequest
from tests.utils import same_as_reference

PROFILE = load_profile("a6000-llama3.1-8b-vllm-prior")
CONVERSATION = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces" / "conversation_trace.jsonl"


def _key(q: QueuedRequest) -> tuple:
    return (-q.cached_len, q.arrival_time, q.request_id)


def _snap(rid: str, score: int) -> QueuedRequest:
    return QueuedRequest(rid, arrival_time=float(score % 3), prompt_len=10, cached_len=score,
                         uncached_len=1, num_computed_tokens=0)


def test_head_and_heap_by_hand():
    order = HeadHeapOrder(_key)
    for rid, score in (("a", 5), ("b", 4), ("c", 3), ("d", 2)):
        order.add(_snap(rid, score))
    assert [q.request_id for q in order.iter_order()] == ["a", "b", "c", "d"]  # all in the heap
    entered, left = order.head_changes(2)
    assert [q.request_id for q in entered] == ["a", "b"] and left == []
    assert [k[-1] for k in order._head] == ["a", "b"] and set(order._rest) == {"c", "d"}
    order.add(_snap("e", 9))  # below the head's last key: enters, pushes "b" out to the heap
    assert [k[-1] for k in order._head] == ["e", "a"] and set(order._rest) == {"b", "c", "d"}
    order.remove("a")  # from the head: the heap's least ("b") comes back
    order.add(_snap("c", 3))  # same key again: stays where it was (the heap), in neither list
    entered, left = order.head_changes(2)  # "b" was pushed out and came back: no change
    assert [q.request_id for q in entered] == ["e"] and [q.request_id for q in left] == ["a"]
    entered, left = order.head_changes(3)  # grows by one: "c"
    assert [q.request_id for q in entered] == ["c"] and left == []
    order.add(_snap("d", 8))  # re-keyed from the heap into the head, "c" out
    entered, left = order.head_changes(3)
    assert [q.request_id for q in entered] == ["d"] and [q.request_id for q in left] == ["c"]
    entered, left = order.head_changes(0)
    assert entered == [] and sorted(q.request_id for q in left) == ["b", "d", "e"]
    assert [q.request_id for q in order.iter_order()] == ["e", "d", "b", "c"]


_OPS = st.lists(st.tuples(st.sampled_from(["add", "add", "remove", "read", "head"]), st.integers(0, 7),
                          st.integers(0, 5), st.integers(0, 6)), max_size=80)


@settings(max_examples=500, deadline=None)
@given(_OPS)
@example([("add", 0, 1, 0), ("head", 0, 0, 1), ("remove", 0, 0, 0), ("add", 0, 1, 0), ("head", 0, 0, 1)])
@example([("add", 0, 1, 0), ("add", 1, 2, 0), ("read", 0, 0, 1), ("add", 2, 3, 0), ("read", 0, 0, 3)])
@example([("add", 0, 1, 0), ("head", 0, 0, 1), ("add", 0, 2, 0), ("add", 0, 1, 0), ("head", 0, 0, 1)])
def test_same_as_the_sorted_list(ops):
    # Every read (whole, or its first few items before the next change) the same snapshots as
    # SortedKeyOrder's; every head_changes (sizes up and down) turns the head it gave last
    # into the head read afresh, naming only requests whose place under their key changed.
    fast, ref = HeadHeapOrder(_key), SortedKeyOrder(_key)
    held: set[str] = set()
    shown: dict[str, QueuedRequest] = {}  # the head as head_changes gave it, by request id
    for op, rid_n, score, k in ops:
        rid = f"r{rid_n}"
        if op == "add":
            q = _snap(rid, score)
            fast.add(q)
            ref.add(q)
            held.add(rid)
        elif op == "remove" and rid in held:
            fast.remove(rid)
            ref.remove(rid)
            held.discard(rid)
        elif op == "read":  # the first k + 1 items, a partial read as the engine's admission
            got = [q for q, _ in zip(fast.iter_order(0.0), range(k + 1))]
            assert got == [q for q, _ in zip(ref.iter_order(0.0), range(k + 1))]
        elif op == "head":
            entered, left = fast.head_changes(k)
            now = {q.request_id: q for q in ref.head(k)}
            for q in left:
                assert _key(shown.pop(q.request_id)) == _key(q)  # the snapshot it was shown with
                assert q.request_id not in now or _key(now[q.request_id]) != _key(q)
            for q in entered:
                assert q.request_id not in shown and now[q.request_id] is q  # the current snapshot
                shown[q.request_id] = q
            assert shown.keys() == now.keys()
            assert all(_key(shown[r]) == _key(now[r]) for r in now)
        assert len(fast) == len(ref) == len(held)
    assert list(fast.iter_order()) == list(ref.iter_order())


def test_a_read_resumed_after_a_later_read():
    # Reads come before changes; a read left waiting while another one takes keys off the heap
    # (the protection test's check does that) still yields the whole order.
    order = HeadHeapOrder(_key)
    for i in range(6):
        order.add(_snap(f"r{i}", i))
    order.head_changes(2)
    first = order.iter_order()
    a = [next(first) for _ in range(3)]  # the head's 2 and the heap's least
    assert len(list(order.iter_order())) == 6
    assert [q.request_id for q in a + list(first)] == ["r5", "r4", "r3", "r2", "r1", "r0"]


def _conversation(n: int):
    from fairsim.traces.formats import read_trace

    return list(read_trace(CONVERSATION).requests)[:n]


class _SortedKeyPEEK:
    """The registered PEEK with the fast path it had before (``SortedKeyOrder``)."""

    @staticmethod
    def make():
        policy = make_policy("peek", PROFILE)
        base = policy.incremental_order

        def incremental_order():
            return SortedKeyOrder(base().key)

        policy.incremental_order = incremental_order
        return policy


@pytest.mark.skipif(not CONVERSATION.exists(), reason="shared conversation trace not present")
@pytest.mark.parametrize("mode, n", [("prefill-only", 1500), ("colocated", 300)])
def test_tables_on_the_conversation_trace(mode, n):
    # The first requests with a small KV cache (blocks are evicted, the protection decides) and
    # 16 sequences (requests enter and leave the protected head): the same tables as the
    # reference path and as the previous fast path. Colocated: fewer (the reference orders the
    # whole queue at each of its many decode steps).
    reqs = _conversation(n)
    config = EngineConfig(kv_blocks=260, mode=mode, max_num_seqs=16)
    res = same_as_reference(reqs, "peek", PROFILE, config, {"fast_order": False})
    assert (res.steps["waiting"] > 16).sum() > 100  # a queue longer than the head
    before = simulate(reqs, _SortedKeyPEEK.make(), PROFILE, config)
    for name in ("requests", "steps"):
        pd.testing.assert_frame_equal(getattr(res, name), getattr(before, name), check_exact=True)
