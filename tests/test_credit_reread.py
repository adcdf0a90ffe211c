"""The credit fast paths read twice without an admission in between (the live hook reads the
order in every step, also when the head does not fit and nothing is admitted): each read equals
``order()`` of the reference policy, and the state after the admissions equals the reference's.
DLPM keeps its first refill across such reads (``DLPMOrder``), so this checks that cache."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from fairsim.costmodel import load_profile
from fairsim.types import QueuedRequest
from tests.utils import admit_both, assert_same_credit_state, credit_pair, random_arrivals, read_prefix

PROFILE = load_profile("a6000-llama3.1-8b-vllm-prior")


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 10_000), name=st.sampled_from(["drr", "vtc", "dlpm", "drr-dynamo"]),
       n=st.integers(1, 40), num_clients=st.sampled_from([0, 1, 3, 8]), quantum=st.sampled_from([300, 2048]))
def test_reads_without_admission_change_nothing(seed, name, n, num_clients, quantum):
    rng = random.Random(seed)
    ref, fast, inc = credit_pair(name, quantum, PROFILE)
    waiting: dict[str, QueuedRequest] = {}
    t = 0.0
    for step in range(12):
        t = random_arrivals(rng, t, step, n, num_clients, waiting, inc)
        if not waiting:
            continue
        now = t + rng.random()
        expected = [q.request_id for q in ref.order(list(waiting.values()), now)]
        for _ in range(rng.randint(1, 3)):  # reads of different lengths, none admitted
            k = rng.randint(1, len(expected))
            it = inc.iter_order(now)
            assert [next(it).request_id for _ in range(k)] == expected[:k]
        _, k = read_prefix(rng, inc, expected, now)
        admit_both(ref, fast, inc, waiting, expected[:k], now)
    assert_same_credit_state(name, ref, fast)
