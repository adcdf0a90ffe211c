"""The integer-nanosecond clock of Fairway-deadline, shared by the policy
(``fairsim.policies.fairway_deadline``) and its fast path (``fairsim.policies.deadline_fast``),
which imports it from here rather than from the policy that imports the fast path."""

from __future__ import annotations

import math

NS = 1_000_000_000  # nanoseconds per second: the unit of the deadline arithmetic


def to_ns(seconds: float) -> int:
    """``round(seconds x 1e9)``: a time of the deadline arithmetic in integer nanoseconds."""
    return round(seconds * 1e9)


def now_ns(now: float) -> int:
    """The clock for the due test, ``floor(now x 1e9)`` ns: for an integer ``X``, ``now x 1e9 >=
    X`` iff ``floor(now x 1e9) >= X``, so no due test is decided by this rounding."""
    return math.floor(now * 1e9)
