"""``fairsim.npfloat`` and the offered load computed with it: numpy's floats, to the bit.

A run's offered load and summary are computed in plain Python floats (no numpy at start-up);
they must be the floats numpy gives. The reference here is numpy itself, and for the offered
load the numpy code it replaced (kept below, as it was).
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from fairsim.costmodel import Profile
from fairsim.npfloat import float_sum, percentiles, plain
from fairsim.traces.offered import _both_works, _busiest, offered_load, prefill_work
from fairsim.types import Request
from tests.test_run_fixed_costs import reference_prefill_work


def bits(values) -> list[int]:
    return np.asarray(values, dtype=np.float64).view(np.int64).tolist()


FINITE = st.floats(allow_nan=False, allow_infinity=False, min_value=-1e300, max_value=1e300)


@settings(max_examples=300, deadline=None)
@given(st.lists(FINITE, max_size=300))
def test_float_sum_is_numpys(values):
    assert bits([float_sum(values)]) == bits([np.asarray(values, dtype=np.float64).sum()])


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 127, 128, 129, 136, 1000, 8191, 8192, 8193, 12031, 40000])
def test_float_sum_is_numpys_at_every_block_boundary(n):
    # The pairwise sum's branches: < 8 values, one unrolled block (<= 128), halves a multiple of 8.
    rng = random.Random(n)
    values = [rng.uniform(-1, 1) * 10 ** rng.randint(0, 12) for _ in range(n)]
    assert bits([float_sum(values)]) == bits([np.asarray(values).sum()])
    assert float_sum([0.1] * 10) == np.full(10, 0.1).sum() != sum([0.1] * 10)  # pairwise, not left to right


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(FINITE.map(lambda v: v + 0.0), st.sampled_from([0.0, 5e-324, 1.5])), min_size=1, max_size=200),
       st.lists(st.one_of(st.sampled_from([0, 50, 90, 99, 100]), st.floats(0, 100)), min_size=1, max_size=5))
def test_percentiles_are_numpys(values, qs):
    assert plain(values)
    assert bits(percentiles(values, qs)) == bits(np.percentile(np.asarray(values), qs))


def test_plain():
    assert plain([0.0, 1.0, -2.5, 5e-324]) and plain([])
    for bad in (math.nan, math.inf, -math.inf, -0.0):
        assert not plain([1.0, bad])


# -- the offered load: the previous numpy code, as it was -------------------------------------

def _reference_works(requests, budget, profile, colocated):
    """``(cold, ideal)`` as the numpy code built them (``tests/test_run_fixed_costs.py``)."""
    return tuple(reference_prefill_work(requests, budget, reuse, profile, colocated) for reuse in (False, True))


def _numpy_busy(profile, budget, new, pairs, chunks, dt=0.0, ds=0.0):
    steps = np.ceil((np.asarray(new, dtype=np.float64) + dt) / budget)
    return profile.a_s * steps + profile.b_s_per_token * new + profile.k_s_per_pair * pairs + profile.d_s_per_request * chunks + ds


def _numpy_busiest(work, profile, budget, window_s):
    t = work.arrival_s
    cum = [np.concatenate(([0.0], np.cumsum(x)))
           for x in (work.new_tokens, work.pairs, work.chunks, work.decode_tokens, work.decode_s)]
    ends = np.searchsorted(t, t + window_s, side="left")
    starts = np.arange(len(t))
    busy = _numpy_busy(profile, budget, *(c[ends] - c[starts] for c in cum))
    best = int(np.argmax(busy))
    return float(busy[best] / window_s), float(t[best]), best


@st.composite
def loads(draw):
    n = draw(st.integers(1, 60))
    t = 0.0
    reqs = []
    for i in range(n):
        t += draw(st.sampled_from([0.0, 0.003, 0.5, 7.0, 31.0]))
        shared = draw(st.integers(0, 4))
        hashes = tuple(range(shared)) + tuple(1000 + 10 * i + j for j in range(draw(st.integers(0, 3))))
        prompt = max(1, len(hashes) * 16 + draw(st.integers(0, 15)))
        reqs.append(Request(f"r{i}", t, prompt, hashes, 16, draw(st.integers(1, 400)), {}))
    profile = Profile("p", "prior", draw(st.sampled_from([0.011, 0.02])), draw(st.sampled_from([1.3e-4, 7e-5])),
                      draw(st.sampled_from([0.0, 3.1e-9])), draw(st.sampled_from([0.0, 1.7e-3])), (1, 10**6),
                      (0.01, 5.0), budget_tokens=2048, e_s_per_decode_ctx_token=draw(st.sampled_from([0.0, 2e-8])),
                      f_s_per_decode=draw(st.sampled_from([0.0, 4e-4])))
    return reqs, profile, draw(st.sampled_from([1, 7, 64, 2048])), draw(st.sampled_from([1e-3, 1.0, 30.0])), draw(st.booleans())


@settings(max_examples=200, deadline=None)
@given(loads())
def test_offered_load_is_the_numpy_codes(case):
    requests, profile, budget, window, colocated = case
    for got, ref in zip(_both_works(requests, budget, profile, colocated), _reference_works(requests, budget, profile, colocated)):
        for name in ("arrival_s", "new_tokens", "pairs", "chunks", "decode_tokens", "decode_s"):
            assert bits(getattr(got, name)) == bits(getattr(ref, name)), name
        assert bits(_busiest(got, profile, budget, window)[:2]) == bits(_numpy_busiest(ref, profile, budget, window)[:2])
        assert _busiest(got, profile, budget, window)[2] == _numpy_busiest(ref, profile, budget, window)[2]
    cold, ideal = _reference_works(requests, budget, profile, colocated)
    load = offered_load(requests, profile, budget, window_s=max(window, 1e-3), colocated=colocated)
    busy = float(_numpy_busy(profile, budget, cold.new_tokens.sum(), cold.pairs.sum(), cold.chunks.sum(),
                             cold.decode_tokens.sum(), cold.decode_s.sum()))
    assert bits([load.busy_s]) == bits([busy])
    assert bits([load.ideal_uncached_tokens_per_s * 1.0]) == bits([
        float(ideal.new_tokens.sum()) / (float(cold.arrival_s[-1] - cold.arrival_s[0]) or math.nan)])
    work = prefill_work(requests, budget, ideal_reuse=True, profile=profile, colocated=colocated)
    assert isinstance(work.pairs, np.ndarray) and bits(work.pairs) == bits(ideal.pairs)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 2**40), max_size=300), st.sampled_from([1.0, 2.0]), st.sampled_from([1, 2**12]))
def test_whole_sum_is_numpys(numerators, divisor, scale):
    # Multiples of 0.5 (tokens, chunks, pairs): exact below 2**52, numpy's order above (scale
    # 2**12 pushes the larger cases over it).
    from fairsim.traces.offered import _whole_sum

    values = [n * scale / divisor for n in numerators]
    assert bits([_whole_sum(values)]) == bits([np.asarray(values, dtype=np.float64).sum()])
