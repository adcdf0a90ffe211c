"""The hook's lazily read waiting queue (``fairsim.live.waiting.PolicyQueue``).

Two checks: (1) against a plain list model, any sequence of vLLM's queue operations after any
order (also broken ones: a duplicate, a missing request, a raising source) leaves the same
queue, never loses or duplicates a request, and records every request that entered or left;
(2) in a real engine, with requests admitted, finishing and arriving every step, the requests
vLLM reads from the queue are, step by step, the front of the full ``order()`` of a copy of the
policy given the same snapshots (the reference the fast path must equal).

Marked ``live``: imports vLLM (the queue subclasses its ``FCFSRequestQueue``).
"""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.live

from fairsim.live.engine import ENGINE_ENV  # noqa: E402  (no vLLM import)

for _k, _v in ENGINE_ENV.items():
    os.environ.setdefault(_k, _v)

from fairsim.errors import PolicyContractError  # noqa: E402
from fairsim.live.waiting import PolicyQueue  # noqa: E402


class R:
    """A stand-in request (identity-hashed, as vLLM's ``Request``)."""

    def __init__(self, i: int) -> None:
        self.request_id = f"r{i}"

    def __repr__(self) -> str:
        return self.request_id


def _source(order, how):
    for j, r in enumerate(order):
        if how == "raise" and j == 2:
            raise ZeroDivisionError("policy bug")
        yield r
        if how == "duplicate" and j == 1:
            yield order[0]


ops = st.lists(st.tuples(st.sampled_from(["add", "pop", "peek", "prepend", "prepend2", "remove",
                                          "remove_many", "len", "iter", "index"]),
                         st.integers(0, 10_000)), max_size=40)


@settings(max_examples=300, deadline=None)
@given(n_heads=st.integers(0, 3), n_plain=st.integers(0, 12), seed=st.integers(0, 10_000),
       how=st.sampled_from(["ok", "ok", "none", "duplicate", "missing", "raise"]), ops=ops)
def test_queue_equals_a_list_model(n_heads, n_plain, seed, how, ops):
    import random

    rng = random.Random(seed)
    heads = [R(i) for i in range(n_heads)]
    plain = [R(100 + i) for i in range(n_plain)]
    order = plain[:]
    rng.shuffle(order)
    errors = []
    q = PolicyQueue()
    q.on_error = errors.append
    given_plain = dict.fromkeys(plain)
    q.set_order(heads, given_plain,
                None if how == "none" else _source(order[:-1] if how == "missing" else order, how))
    # The model: what the queue must read as. A broken order keeps its valid front, then the
    # rest in the plain (join) order.
    broken = {"duplicate": 2, "raise": 3, "missing": 1}.get(how)
    if how == "none":
        expect = heads + plain
    elif broken is None or n_plain < broken:
        expect = heads + order
        broken = None
    else:
        front = order[:2] if how != "missing" else order[:-1]
        expect = heads + front + [r for r in plain if r not in front]
    model = list(expect)
    changed = set()
    removed = set()
    made = 1000
    for op, x in ops:
        if op == "add":
            r = R(made)
            made += 1
            q.add_request(r)
            model.append(r)
            changed.add(r)
        elif op == "pop" and model:
            r = model.pop(0)
            assert q.pop_request() is r
            changed.add(r)
        elif op == "peek":
            if model:
                assert q.peek_request() is model[0]
            else:
                with pytest.raises(IndexError):
                    q.peek_request()
        elif op == "prepend":
            r = R(made)
            made += 1
            q.prepend_request(r)
            model.insert(0, r)
            changed.add(r)
        elif op == "prepend2":
            rs = [R(made), R(made + 1)]
            made += 2
            q.prepend_requests(rs)
            model[:0] = rs[::-1]  # deque.extendleft
            changed.update(rs)
        elif op == "remove" and model:
            r = model.pop(x % len(model))
            q.remove_request(r)
            changed.add(r)
            removed.add(r)
        elif op == "remove_many" and model:
            rs = set(model[x % len(model)::3])
            q.remove_requests(rs)
            model = [r for r in model if r not in rs]
            changed.update(rs)
            removed.update(rs)
        elif op == "len":
            assert len(q) == len(model) and bool(q) == bool(model)
        elif op == "iter":
            assert list(q) == model
        elif op == "index" and model:
            assert q[x % len(model)] is model[x % len(model)]
    assert list(q) == model
    assert len(q) == len(model)
    assert list(given_plain) == plain  # the caller's set is not modified (the hook reuses it)
    got = set(q.take_changes())
    assert changed <= got  # every request that entered or left is recorded
    assert q.take_changes() == []
    if how == "missing" and broken is not None and order[-1] in removed and not errors:
        broken = None  # the request the order left out was removed before the order ended
    if broken is None:
        assert not errors
    else:  # reported once, when the read reached it (list(q) above reads everything)
        assert len(errors) == 1
        if how == "raise":
            assert isinstance(errors[0], ZeroDivisionError)
        else:
            assert isinstance(errors[0], PolicyContractError)
            assert ("missing" if how == "missing" else "duplicate") in str(errors[0])


def test_lazy_reads_only_what_is_taken():
    plain = [R(i) for i in range(1000)]
    pulled = []

    def source():
        for r in plain[::-1]:
            pulled.append(r)
            yield r

    q = PolicyQueue()
    q.set_order([], dict.fromkeys(plain), source())
    assert len(q) == 1000 and pulled == []
    assert q.pop_request() is plain[-1] and q.peek_request() is plain[-2]
    assert len(pulled) == 2 and len(q) == 999
    late = R(5000)
    q.add_request(late)  # behind every ordered request
    assert list(q)[-1] is late and len(pulled) == 1000


@pytest.mark.parametrize("name", ["fcfs", "lpm", "klpm4", "ragcache", "fairway", "fairway-carry",
                                  "fairway-patience", "drr", "vtc", "dlpm"])
def test_engine_reads_the_front_of_order(name):
    """Every step of a busy engine: what vLLM read equals the front of ``order()`` of a copy of
    the policy on the step's snapshots (so the lazy fast path decides as the reference)."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    from fairsim.live.engine import LiveConfig, live_scheduler, make_llm, shutdown_llm
    from fairsim.live.prompts import block_tokens
    from fairsim.live.scheduler import build_policy

    llm = make_llm(LiveConfig(policy=name, kv_blocks=400, max_num_seqs=8, budget_tokens=1024,
                              max_model_len=1024))
    try:
        engine = llm.llm_engine
        sched = live_scheduler(llm)
        params = SamplingParams(max_tokens=1, detokenize=False)
        shared = block_tokens("doc", 256)
        made = 0

        def arrive(k):
            nonlocal made
            for _ in range(k):
                i = made
                made += 1
                head = shared if i % 3 == 0 else block_tokens(f"h{i}", 128 * (1 + i % 3))
                engine.add_request(f"q{i}", TokensPrompt(prompt_token_ids=head + block_tokens(f"t{i}", 40 + i % 90)),
                                   params, arrival_time=1000.0 + i)

        sched.fairsim_reset()  # a fresh policy, and its reference twin fed the same inputs
        twin = build_policy(sched._fairsim_settings)
        inner_reorder, inner_admitted = sched.fairsim_reorder, sched._fairsim_on_admitted
        ref: list = []

        def reorder():
            out = inner_reorder()
            snaps = list(sched._fairsim_snapshots.values())
            ref[:] = [s.handle for s in twin.order(snaps, sched._fairsim_now)] if snaps else []
            return out

        def admitted(adm, now):
            inner_admitted(adm, now)
            twin.on_admitted(adm, now)

        sched.fairsim_reorder = reorder
        if inner_admitted is not None:
            sched._fairsim_on_admitted = admitted
        arrive(60)
        checked = 0
        for step in range(40):
            if step % 3 == 0:
                arrive(3)
            engine.step()
            read = sched.waiting.read
            assert len(read) <= len(ref)
            assert all(a is b for a, b in zip(read, ref)), (step, [r.request_id for r in read],
                                                            [r.request_id for r in ref[:len(read)]])
            checked += len(read)
        assert checked > 40 and sched.fairsim_policy_errors == 0
        while engine.has_unfinished_requests():
            engine.step()
    finally:
        shutdown_llm(llm)  # now, not at a later collection (fairsim.live.engine.make_llm)
        del llm
