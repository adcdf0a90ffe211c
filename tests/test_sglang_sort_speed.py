"""HRRN's sort and SGLang's in-batch de-prioritisation (fairsim/policies/sglang.py) against their
plain formulations, kept here as the references: the fast versions build the keys in one pass
and sort only the groups that have two or more members, and must give the same sets and orders
on any queue (shared groups, hits above and below 32 tokens, keyless snapshots, ties). Both
paths are checked: the Python one (``_twins`` set to None) and the compiled twins
(``fairsim/policies/_credit_c.pyx``) where built."""

from __future__ import annotations

import contextlib

from hypothesis import given, settings
from hypothesis import strategies as st

import pytest

from fairsim.policies import sglang
from fairsim.policies.base import arrival_key
from fairsim.policies.sglang import HRRN, in_batch_deprioritized, in_batch_group
from fairsim.types import QueuedRequest

TWINS = sglang._compiled()
PATHS = ["python"] + (["compiled"] if TWINS is not None else [])


@contextlib.contextmanager
def on_path(path):
    """The Python path (``_twins`` None) or, where built, the compiled twins."""
    sglang._twins = None if path == "python" else TWINS
    try:
        yield
    finally:
        sglang._twins = TWINS


def reference_deprioritized(waiting):
    seen, out = set(), set()
    for r in sorted(waiting, key=arrival_key):
        group = in_batch_group(r)
        if group is None:
            continue
        if group in seen:
            out.add(r.request_id)
        else:
            seen.add(group)
    return out


def reference_hrrn_sorted(waiting, p, dedup):
    late = reference_deprioritized(waiting) if dedup else ()

    def key(r):
        if r.request_id in late:
            return (1, 0.0, r.arrival_time, r.request_id)
        ratio = max(0, p - r.arrival_prefill_tokens) / r.uncached_len
        return (0, -ratio, r.arrival_time, r.request_id)

    return sorted(waiting, key=key)


@st.composite
def queues(draw):
    n = draw(st.integers(0, 30))
    bs = draw(st.sampled_from([0, 8, 16, 32, 512]))
    out = []
    for i in range(n):
        L = draw(st.integers(1, 3000))
        h = draw(st.sampled_from([0, 16, 32, 33, 512, L - 1 if L > 1 else 0]))
        h = min(h, max(0, L - 1))
        keys = tuple(draw(st.lists(st.sampled_from("ABCD"), max_size=4))) if bs else ()
        t = float(draw(st.integers(0, 5)))  # ties on arrival: request_id decides
        arr_p = draw(st.integers(0, 5000))
        out.append(QueuedRequest(f"r{i:02d}", t, L, h, max(1, L - h), 0, None, keys,
                                 bs if keys else draw(st.sampled_from([0, bs])), None, arr_p, 1))
    order = draw(st.permutations(range(n)))
    return [out[i] for i in order]


@pytest.mark.parametrize("path", PATHS)
@settings(max_examples=300, deadline=None)
@given(waiting=queues())
def test_deprioritized_set_is_the_arrival_walk(path, waiting):
    with on_path(path):
        assert in_batch_deprioritized(waiting) == reference_deprioritized(waiting)


@pytest.mark.parametrize("path", PATHS)
@settings(max_examples=300, deadline=None)
@given(waiting=queues(), p=st.integers(0, 6000), dedup=st.booleans())
def test_hrrn_sort_is_the_keyed_sort(path, waiting, p, dedup):
    policy = HRRN(sglang_dedup=dedup)
    policy.on_prefill_tokens(p)
    with on_path(path):
        got = [r.request_id for r in policy._sorted(waiting)]
    assert got == [r.request_id for r in reference_hrrn_sorted(waiting, p, dedup)]


@pytest.mark.parametrize("path", PATHS)
def test_shared_group_keeps_its_oldest_member_ahead(path):
    # Hand example: x2 and x3 share x1's first 16-token blocks (32 tokens) with no hit; x1 is the
    # oldest of the group, so x2 and x3 go behind. y hits 48 tokens (> 32): never checked.
    def q(rid, t, keys, h=0, arr_p=0, L=100):
        return QueuedRequest(rid, t, L, h, L - h, 0, None, keys, 16, None, arr_p, 1)

    w = [q("x3", 3.0, ("A", "B", "C")), q("x1", 1.0, ("A", "B")), q("y", 0.5, ("A", "B"), h=48),
         q("x2", 2.0, ("A", "B", "D"))]
    policy = HRRN()
    policy.on_prefill_tokens(50)
    with on_path(path):
        assert in_batch_deprioritized(w) == {"x2", "x3"}
        # ratios: y 50 / 52, x1 50 / 100: y first; x2 and x3 behind by arrival.
        assert [r.request_id for r in policy._sorted(w)] == ["y", "x1", "x2", "x3"]
