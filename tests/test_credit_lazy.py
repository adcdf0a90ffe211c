"""Lazy hits in the credit fast paths (VTC, DRR, DRR-Dynamo: ``fairsim.policies.credit_fast.ClassQueues``, ``drr_dynamo``).

As the engine with ``fairsim.sim.lazy_hits``: after a cache event a waiting request's new hit is
not re-added; the order is only told ``stale(ids)`` and reads the request's snapshot of the step
through the resolver. Every read must equal the reference ``order()`` over the current
snapshots, yield the resolver's objects (the engine rejects anything else as stale), and the
state after the admissions must equal the reference policy's.
"""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from fairsim.costmodel import load_profile
from fairsim.policies import make_policy
from fairsim.types import QueuedRequest
from tests.utils import admit_both, assert_same_credit_state, credit_pair, random_arrivals, read_prefix

PROFILE = load_profile("a6000-llama3.1-8b-vllm-prior")


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 10_000), name=st.sampled_from(["drr", "vtc", "drr-dynamo"]), n=st.integers(1, 40),
       num_clients=st.sampled_from([0, 1, 3, 8]), quantum=st.sampled_from([300, 2048]),
       changed=st.integers(0, 30), block=st.sampled_from([0, 512]))
def test_stale_hits_read_through_the_resolver(seed, name, n, num_clients, quantum, changed, block):
    rng = random.Random(seed)
    ref, fast, inc = credit_pair(name, quantum, PROFILE)
    current: dict[str, QueuedRequest] = {}  # this step's snapshots (the engine's)
    reads: list[str] = []
    inc.set_resolver(lambda q: reads.append(q.request_id) or current[q.request_id])
    t = 0.0
    for step in range(12):
        t = random_arrivals(rng, t, step, n, num_clients, current, inc, block)
        # Cache events: new hits, told to the order as stale only (the stored snapshots stay old).
        # As the engine: a hit that may have risen is named in ``raised`` (sometimes all are, as
        # ``stale(ids)`` says), one that only fell is not (DRR then bounds its charge by the last
        # snapshot it read).
        stale = rng.sample(sorted(current), k=min(len(current), rng.randint(0, changed)))
        raised = []
        for rid in stale:
            q = current[rid]
            unit = q.block_size or 1  # with block keys a hit is whole blocks, at most max_hit
            top = min(len(q.block_keys), (q.prompt_len - 1) // unit) if q.block_size else q.prompt_len - 1
            if rng.random() < 0.5:
                h = rng.randint(0, q.cached_len // unit) * unit  # only fell
            else:
                h = rng.randint(0, top) * unit
                raised.append(rid)
            current[rid] = q._replace(cached_len=h, uncached_len=max(1, q.prompt_len - h))
        if rng.random() < 0.3:
            inc.stale(stale)
        else:
            inc.stale(stale, raised)
        if not current:
            continue
        now = t + rng.random()
        expected = [q.request_id for q in ref.order(list(current.values()), now)]
        reads.clear()
        got, k = read_prefix(rng, inc, expected, now)
        assert all(q is current[q.request_id] for q in got)  # this step's objects, never the stored ones
        assert set(q.request_id for q in got) <= set(reads)
        admit_both(ref, fast, inc, current, expected[:k], now)
    assert_same_credit_state(name, ref, fast)


def test_credit_orders_take_lazy_hits_in_the_engine():
    """The engine gives VTC's and DRR's fast paths the resolver (no eager re-adds)."""
    from fairsim.sim.engine import Engine
    from tests.utils import make_request

    reqs = [make_request(f"r{i}", 0.1 * i, 40, hashes=(1, 2, 3), block=8) for i in range(4)]
    for name in ("vtc", "drr"):
        engine = Engine(reqs, make_policy(name, PROFILE), PROFILE)
        assert engine._lazy is not None and engine._inc.resolve is not None
        result = engine.run()
        assert len(result.requests) == 4


def test_drr_idle_visit_of_a_stale_head_reads_no_snapshot():
    """A stale head whose hit only fell keeps at least the charge of its last snapshot: a visit
    that cannot afford that is idle without reading the request (no rebuild of its snapshot)."""
    ref, fast, inc = credit_pair("drr", 300, PROFILE)
    big = QueuedRequest("big", 0.0, 2000, 1000, 1000, 0, None, client=("tenant", "a"))
    small = QueuedRequest("small", 1.0, 100, 0, 100, 0, None, client=("tenant", "b"))
    current = {"big": big, "small": small}
    reads: list[str] = []
    inc.set_resolver(lambda q: reads.append(q.request_id) or current[q.request_id])
    for q in (big, small):
        inc.add(q)
    current["big"] = big._replace(cached_len=500, uncached_len=1500)  # blocks evicted: fell
    inc.stale(["big"], [])
    expected = [q.request_id for q in ref.order(list(current.values()), 0.0)]
    assert expected == ["small", "big"]
    it = inc.iter_order(0.0)
    assert next(it) is current["small"]
    # "big" (first in the ring: 300 of credit < 1,000 <= its charge) was visited, idle, not read.
    assert "big" not in reads and "small" in reads
    assert [q.request_id for q in it] == ["big"] and reads[-1] == "big"  # read once it can be served
