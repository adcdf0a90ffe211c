"""PEEK's protected set kept up to date instead of rebuilt at every admitting step.

``Engine._update_protected`` changes the set by the requests that entered or left the first
``max_num_seqs`` of the order (or were re-keyed), and ``_protect_stale`` skips steps in which
nothing that could change it happened. Both must give the set a rebuild gives, at every build,
so the decisions are those of the reference (``fast_order=False``, a rebuild at every step).
"""

from __future__ import annotations

import dataclasses

from hypothesis import example, given, settings, strategies as st

from fairsim.costmodel import load_profile
from fairsim.policies import make_policy
from fairsim.policies.eviction import ProtectWaitingHits
from fairsim.policies.incremental import SortedKeyOrder
from fairsim.scenarios import build_scenario
from fairsim.sim import EngineConfig
from fairsim.sim.decode_fast import DecodeFastEngine
from fairsim.sim.engine import Engine
from fairsim.types import QueuedRequest
from tests.utils import same_as_reference

PROFILE = load_profile("a6000-llama3.1-8b-vllm-prior")


def test_runs_in_and_out_by_hand():
    hook = ProtectWaitingHits()
    hook.protect([("a", "b"), ("a", "c")])
    assert hook.protected == {"a": 2, "b": 1, "c": 1}
    hook.update_runs([("a", "b")], [("d",)])
    assert set(hook.protected) == {"a", "c", "d"}  # "a" still used by ("a", "c")
    hook.update_runs([("a", "c"), ("d",)], [])
    assert hook.protected == {}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.lists(st.sampled_from("abcdef"), max_size=4)), max_size=30))
def test_the_kept_set_is_the_union_of_the_runs_kept(ops):
    hook = ProtectWaitingHits()
    kept: list[tuple[str, ...]] = []
    for remove, run in ops:
        if remove and kept:
            gone = kept.pop(len(run) % len(kept))
            hook.update_runs([gone], [])
        else:
            kept.append(tuple(run))
            hook.update_runs([], [tuple(run)])
        assert set(hook.protected) == {k for r in kept for k in r}
        assert all(n > 0 for n in hook.protected.values())


def _checking(engine_cls):
    """``engine_cls`` whose every build of the protected set is compared with a rebuild from
    the admission order's first ``max_num_seqs`` (preempted front, then the fast path's order);
    counts the builds and the admitting steps."""

    class Checking(engine_cls):
        builds = 0
        admitting = 0

        def _admit_waiting(self, now, budget, batch, ordered):
            if budget > 0 and len(self._running) < self.config.max_num_seqs and (self._waiting or self._preempted):
                type(self).admitting += 1
            return super()._admit_waiting(now, budget, batch, ordered)

        def _update_protected(self, front, k):
            super()._update_protected(front, k)
            type(self).builds += 1
            k = self.config.max_num_seqs
            order = list(self._preempted) + [q.handle for q in self._inc.iter_order(0.0)]
            want = {key for live in order[:k]
                    for key in live.keys[:self.pool.count_prefix(live.keys, live.max_hit_blocks)]}
            assert set(self.policy.eviction_hook.protected) == want

    return Checking


def _rag(output: bool):
    rag = build_scenario("rag", PROFILE, seed=2)
    longest = max(r.prompt_len for r in rag.requests)
    reqs = [dataclasses.replace(r, output_len=1 + (i * 53) % 700 if output else 1)
            for i, r in enumerate(rag.requests[:160])]
    return reqs, longest


def test_every_build_is_a_rebuilds_set_colocated_with_preemptions():
    reqs, longest = _rag(output=True)
    config = EngineConfig(kv_tokens=4 * longest, mode="colocated", max_num_seqs=16)
    cls = _checking(DecodeFastEngine)
    res = cls(reqs, make_policy("peek", PROFILE), PROFILE, config).run()
    assert res.requests["preemptions"].sum() > 0
    assert 0 < cls.builds < cls.admitting  # steps in which nothing changed are skipped


def test_every_build_is_a_rebuilds_set_prefill_only():
    reqs, longest = _rag(output=False)
    config = EngineConfig(kv_tokens=4 * longest, max_num_seqs=8)
    cls = _checking(Engine)
    cls(reqs, make_policy("peek", PROFILE), PROFILE, config).run()
    assert cls.builds > 0


def test_same_decisions_as_a_rebuild_every_step():
    # max_num_seqs below the queue's length, so requests enter and leave the protected head.
    reqs, longest = _rag(output=True)
    config = EngineConfig(kv_tokens=4 * longest, mode="colocated", max_num_seqs=4)
    res = same_as_reference(reqs, "peek", PROFILE, config, {"fast_order": False}, ("requests", "steps"))
    assert (res.steps["waiting"] > 4).sum() > 100


def _snap(rid: str, score: int) -> QueuedRequest:
    return QueuedRequest(rid, arrival_time=float(score % 3), prompt_len=10, cached_len=score,
                         uncached_len=1, num_computed_tokens=0)


def test_head_changes_by_hand():
    order = SortedKeyOrder(lambda q: (-q.cached_len, q.arrival_time, q.request_id))
    for rid, score in (("a", 5), ("b", 4), ("c", 3), ("d", 2)):
        order.add(_snap(rid, score))
    entered, left = order.head_changes(2)
    assert [q.request_id for q in entered] == ["a", "b"] and left == []
    order.add(_snap("e", 9))  # above the head's last key: enters, pushes "b" out
    order.remove("a")  # from the head
    order.add(_snap("c", 3))  # same key again: stays where it was (outside), in neither list
    entered, left = order.head_changes(2)
    assert sorted(q.request_id for q in entered) == ["e"]
    assert sorted(q.request_id for q in left) == ["a"]  # "b" stays: "a" left room for it
    entered, left = order.head_changes(3)  # grows by one: "c"
    assert [q.request_id for q in entered] == ["c"] and left == []
    entered, left = order.head_changes(0)
    assert entered == [] and sorted(q.request_id for q in left) == ["b", "c", "e"]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["add", "remove", "read"]), st.integers(0, 4),
                          st.integers(0, 3), st.integers(0, 4)), max_size=60))
@example([("add", 0, 1, 0), ("read", 0, 0, 1), ("remove", 0, 0, 0), ("add", 0, 1, 0), ("read", 0, 0, 1)])
@example([("add", 0, 1, 0), ("read", 0, 0, 1), ("add", 1, 2, 0), ("add", 1, 2, 0), ("read", 0, 0, 1)])
@example([("add", 0, 1, 0), ("read", 0, 0, 1), ("add", 0, 1, 0), ("read", 0, 0, 1)])
def test_head_changes_follow_the_head(ops):
    # Against the head read afresh at every call: what entered and left, by request id (entered:
    # the current snapshot), for random adds, re-keys, re-adds, removals and sizes.
    order = SortedKeyOrder(lambda q: (-q.cached_len, q.arrival_time, q.request_id))
    shown: dict[str, QueuedRequest] = {}
    started = False
    for op, rid_n, score, k in ops:
        rid = f"r{rid_n}"
        if op == "add":
            order.add(_snap(rid, score))
        elif op == "remove" and rid in order._by_id:
            order.remove(rid)
        elif op == "read" or not started:
            started = True
            entered, left = order.head_changes(k)
            now = {q.request_id: q for q in order.head(k)} if k > 0 else {}
            for q in left:
                shown.pop(q.request_id)
            for q in entered:
                assert q.request_id not in shown and now[q.request_id] is q  # the current snapshot
                shown[q.request_id] = q
            assert shown.keys() == now.keys()
