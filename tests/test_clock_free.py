"""``clock_free_order = True`` (policy contract, fairsim/policies/base.py): a repeated ``order()``
with the same snapshots and no ``on_admitted`` in between returns the same order and leaves the
same state, so the live hook may reuse the last order. Checked against a policy called once."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from fairsim.costmodel import load_profile
from fairsim.policies import make_policy
from fairsim.policies.registry import policy_names
from fairsim.types import QueuedRequest

PROFILE = load_profile("a6000-llama3.1-8b-vllm-prior")
CLOCK_FREE = [n for n in policy_names() if getattr(make_policy(n, PROFILE), "clock_free_order", False) is True]


def test_the_credit_policies_and_fcfs_declare_it():
    assert {"fcfs", "drr", "vtc", "dlpm"} <= set(CLOCK_FREE)
    assert not getattr(make_policy("fairway", PROFILE), "clock_free_order", False)  # its score moves with the clock


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), name=st.sampled_from(CLOCK_FREE), num_clients=st.sampled_from([0, 2, 5]))
def test_repeated_order_changes_nothing(seed, name, num_clients):
    rng = random.Random(seed)
    once, twice = make_policy(name, PROFILE), make_policy(name, PROFILE)
    waiting: dict[str, QueuedRequest] = {}
    for step in range(6):
        for i in range(rng.randint(1, 20)):
            L = rng.randint(2, 5000)
            h = rng.randint(0, L - 1)
            client = ("tenant", rng.randrange(num_clients)) if num_clients else None
            q = QueuedRequest(f"s{step}-{i}", step + i / 100, L, h, max(1, L - h), 0, None, client=client)
            waiting[q.request_id] = q
        snaps = list(waiting.values())
        a = once.order(snaps, float(step))
        twice.order(snaps, float(step))
        b = twice.order(list(reversed(snaps)), step + 5.0)
        assert [q.request_id for q in a] == [q.request_id for q in b]
        admitted = a[: rng.randint(0, 3)]
        for policy in (once, twice):
            if admitted and hasattr(policy, "on_admitted"):
                policy.on_admitted(admitted, float(step))
        for q in admitted:
            del waiting[q.request_id]
