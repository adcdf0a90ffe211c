"""``fairsim.metrics.percentiles`` against ``np.percentile``: the same floats to the bit.

It replaces ``np.percentile`` in the run summaries because numpy's partition indexes go through
``np.unique``, whose first call imports ``numpy.ma`` (12 ms of start-up); the values must not move.
"""

from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from fairsim.metrics import percentiles

SPECIAL = st.sampled_from([0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, 1.7976931348623157e308])
VALUES = st.lists(st.one_of(st.floats(allow_nan=True, allow_infinity=True), SPECIAL,
                            st.integers(-10**6, 10**6).map(float)), min_size=1, max_size=60)
QS = st.lists(st.one_of(st.sampled_from([0, 50, 90, 99, 100, 99.9]), st.floats(0, 100)),
              min_size=1, max_size=6)


def bits(values) -> list[int]:
    """Each float64's bit pattern (tells -0.0 from 0.0 and one NaN payload from another)."""
    return np.asarray(values, dtype=np.float64).view(np.int64).tolist()


@settings(max_examples=400, deadline=None)
@given(VALUES, QS)
def test_same_bits_as_numpy(values, qs):
    with warnings.catch_warnings():  # inf - inf in both: numpy's own warnings
        warnings.simplefilter("ignore", RuntimeWarning)
        expected = np.percentile(np.asarray(values, dtype=np.float64), qs)
        got = percentiles(values, qs)
    assert bits(got) == bits(expected), (values, qs, got, expected)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0, 1e6), min_size=1, max_size=200))
def test_run_summary_percentiles_match(values):
    # The run's calls: TTFT p50/p90/p99 and queue delay p50/p99 of finite seconds.
    arr = np.asarray(values)
    assert bits(percentiles(arr, [50, 90, 99])) == bits(np.percentile(arr, [50, 90, 99]))
    assert bits(percentiles(arr, [50, 99])) == bits(np.percentile(arr, [50, 99]))


def test_hand_computed():
    # n = 5, p90: virtual index 4 * 0.9 = 3.6 between 30 and 40, weight 0.6 >= 0.5:
    # 40 - (40 - 30) * 0.4 = 36; p50: index 2 exactly (weight 0): 20 + 0 = 20; p100: the last.
    assert percentiles([40.0, 10.0, 30.0, 0.0, 20.0], [50, 90, 100]) == [20.0, 36.0, 40.0]
    assert percentiles([7.5], [0, 50, 100]) == [7.5, 7.5, 7.5]
    assert np.isnan(percentiles([1.0, np.nan, 3.0], [0])[0])  # a NaN anywhere: NaN
    with pytest.warns(RuntimeWarning, match="invalid value"):  # inf - inf, inf * 0: as numpy
        assert percentiles([1.0, np.inf], [0, 50, 100]) == pytest.approx([np.nan] * 3, nan_ok=True)
    assert percentiles([1.0, 3.0], [25]) == [1.5]  # weight 0.25 < 0.5: 1 + 2 * 0.25


def test_values_are_not_changed():
    values = np.array([3.0, 1.0, 2.0])
    percentiles(values, [50])
    assert values.tolist() == [3.0, 1.0, 2.0]


def test_errors():
    with pytest.raises(ValueError, match="percentiles of no values"):
        percentiles([], [50])
    with pytest.raises(ValueError, match=r"Percentiles must be in the range \[0, 100\]"):
        percentiles([1.0], [101])
    with pytest.raises(ValueError, match=r"Percentiles must be in the range \[0, 100\]"):
        percentiles([1.0], [np.nan])


def test_does_not_import_numpy_ma():
    code = ("import sys; from fairsim.metrics import percentiles; percentiles([3.0, 1.0, 2.0], [50, 99]); "
            "print('numpy.ma' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_ttft_summary_names_the_requests_without_a_ttft_in_the_singular_and_plural():
    import math

    import pandas as pd

    from fairsim.metrics import ttft_summary

    with pytest.raises(ValueError, match="^1 request has no TTFT$"):
        ttft_summary(pd.DataFrame({"ttft_s": [0.5, math.nan]}))
    with pytest.raises(ValueError, match="^2 requests have no TTFT$"):
        ttft_summary(pd.DataFrame({"ttft_s": [math.nan, 0.5, math.nan]}))
