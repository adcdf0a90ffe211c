"""numpy's float64 sum and percentile, to the bit, in plain Python floats.

A ``fairsim run`` on one engine needs a trace's sums and a few percentiles, and numpy's import
is 60 ms of its start-up (a tenth of a 12,000-request run). These give numpy's floats exactly,
so every printed and written figure is unchanged; ``tests/test_npfloat.py`` compares them with
numpy (hypothesis, to the bit).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import compress, repeat
from operator import eq

#: numpy's unrolled block of a pairwise sum (``PW_BLOCKSIZE`` in
#: ``numpy/_core/src/umath/loops_utils.h.src``).
_PW_BLOCK = 128


def _pairwise(a: Sequence[float], lo: int, n: int) -> float:
    """numpy's ``pairwise_sum`` of ``a[lo:lo + n]`` (loops_utils.h.src): below 8 values a plain
    loop from ``0.``, up to 128 eight running sums combined as a tree, else the halves (the
    first a multiple of 8 long) summed recursively."""
    if n < 8:
        res = 0.0
        for i in range(lo, lo + n):
            res += a[i]
        return res
    if n <= _PW_BLOCK:
        r0, r1, r2, r3, r4, r5, r6, r7 = a[lo:lo + 8]
        i = lo + 8
        end = lo + n - n % 8
        while i < end:
            r0 += a[i]
            r1 += a[i + 1]
            r2 += a[i + 2]
            r3 += a[i + 3]
            r4 += a[i + 4]
            r5 += a[i + 5]
            r6 += a[i + 6]
            r7 += a[i + 7]
            i += 8
        res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
        for j in range(i, lo + n):
            res += a[j]
        return res
    n2 = n // 2
    n2 -= n2 % 8
    return _pairwise(a, lo, n2) + _pairwise(a, lo + n2, n - n2)


def float_sum(values: Sequence[float]) -> float:
    """``float(np.asarray(values, dtype=np.float64).sum())``: numpy's pairwise sum of a
    contiguous float64 array, from ``0.0`` (``add.reduce`` of one axis: its identity plus the
    pairwise sum of every value). ``values`` must be floats (convert ints first)."""
    return 0.0 + _pairwise(values, 0, len(values))


def plain(values: Sequence[float]) -> bool:
    """Whether ``values`` are all finite and none is ``-0.0``: there a sort puts every order
    statistic where numpy's partition does (the same float), so ``percentiles`` may sort, and
    no operation of numpy's would warn (``inf - inf``)."""
    if not all(map(math.isfinite, values)):
        return False
    zeros = compress(values, map(eq, values, repeat(0.0)))  # read in C; 0.0 == -0.0: both kinds
    copysign = math.copysign
    return not any(copysign(1.0, z) < 0 for z in zeros)


def percentiles(values: Sequence[float], qs: Sequence[float]) -> list[float]:
    """``np.percentile(values, qs)`` (method ``"linear"``) of ``plain`` floats, as floats.

    numpy 2's ``_quantile`` steps in Python floats (the same IEEE operations, so the same
    results): virtual index ``(n - 1) * q / 100``, its neighbours ``floor`` and ``floor + 1``
    (both the last value from index ``n - 1`` on, where the weight is then ``index + 1``), and
    ``_lerp``: ``a + (b - a) * t``, or ``b - (b - a) * (1 - t)`` where ``t >= 0.5``. The order
    statistics come from a sort, which for ``plain`` values are numpy's partition's.

    Raises:
        ValueError: No values, or a percentile outside [0, 100] (numpy's message).
    """
    n = len(values)
    if n == 0:
        raise ValueError("percentiles of no values")
    ordered = sorted(values)
    out = []
    for q in qs:
        q = float(q) / 100.0
        if not 0 <= q <= 1:
            raise ValueError("Percentiles must be in the range [0, 100]")
        virtual = (n - 1) * q
        previous = float(math.floor(virtual))
        following = previous + 1
        if virtual >= n - 1:
            previous = following = -1.0
        gamma = virtual - previous
        a, b = ordered[int(previous)], ordered[int(following)]
        diff = b - a
        out.append(b - diff * (1 - gamma) if gamma >= 0.5 else a + diff * gamma)
    return out
