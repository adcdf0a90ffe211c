"""Running the hook in production: bounded state, a rate-limited log, counters, a profile check.

No vLLM import here, so everything is testable without an engine.

- ``BoundedDict``: a dict that forgets its oldest entries past a size (the hook's per-request
  admissions record, which otherwise grows by one entry per request forever).
- ``RateLimitFilter``: a ``logging.Filter`` that lets one record of each message template through
  per interval and reports how many it held back, so a policy that fails every step logs once a
  minute, not 50 times a second.
- ``HookCounters``: steps, steps the policy reordered, policy errors and time spent ordering,
  logged as one line per interval through vLLM's logging (logger ``fairsim.live``).
- ``profile_mismatch``: a warning text when the profile was measured on another model or block
  size than the engine serves (its ``T_idle`` then describes another engine).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import PurePath
from typing import Any

LOG_INTERVAL_S = 60.0
"""Seconds between two records of the same message, and between two counter lines."""
ADMISSIONS_KEPT = 65_536
"""Per-request admission records the hook keeps (the most recent; drivers read them right after
a request finishes)."""


class BoundedDict(OrderedDict):
    """An insertion-ordered dict keeping at most ``maxlen`` entries (oldest dropped first)."""

    def __init__(self, maxlen: int) -> None:
        if maxlen < 1:
            raise ValueError(f"maxlen={maxlen}: need >= 1")
        super().__init__()
        self.maxlen = maxlen

    def __setitem__(self, key: Any, value: Any) -> None:
        super().__setitem__(key, value)
        if len(self) > self.maxlen:
            self.popitem(last=False)


class RateLimitFilter(logging.Filter):
    """Pass one record per message template (``record.msg``) every ``interval_s`` seconds.

    The next record let through says how many were held back in between. Records below
    ``WARNING`` pass untouched (the counter lines are already paced).
    """

    def __init__(self, interval_s: float = LOG_INTERVAL_S, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.interval_s = interval_s
        self.clock = clock
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        key = str(record.msg)
        now = self.clock()
        last = self._last.get(key)
        if last is not None and now - last < self.interval_s:
            self._held[key] = self._held.get(key, 0) + 1
            return False
        self._last[key] = now
        held = self._held.pop(key, 0)
        if held:
            record.msg = f"{record.msg} [{held} more like this in the last {self.interval_s:g} s]"
        return True


class HookCounters:
    """What a team watches: steps, reordered steps, policy errors, time spent ordering.

    Attributes:
        steps: ``schedule()`` calls.
        reordered: Steps in which vLLM read the plainly waiting requests in another order than
            the one in which they joined the queue (the policy changed what vLLM considered).
        ordering_s: Seconds spent in the hook's reordering, in total.
    """

    def __init__(self, log: logging.Logger, interval_s: float = LOG_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.log = log
        self.interval_s = interval_s
        self.clock = clock
        self.steps = 0
        self.reordered = 0
        self.ordering_s = 0.0
        self._next = clock() + interval_s

    def step(self, reordered: bool, ordering_s: float, policy_errors: int) -> None:
        """Count one step; log the totals once per interval."""
        self.steps += 1
        self.reordered += bool(reordered)
        self.ordering_s += ordering_s
        now = self.clock()
        if now >= self._next:
            self._next = now + self.interval_s
            self.log.info("fairsim: %d steps, %d reordered by the policy, %d policy errors, "
                          "%.1f ms ordering in total (%.3f ms/step)", self.steps, self.reordered,
                          policy_errors, 1000 * self.ordering_s, 1000 * self.ordering_s / self.steps)

    def as_dict(self, policy_errors: int) -> dict[str, Any]:
        """The counters as a JSON-ready dict."""
        return {"steps": self.steps, "steps_reordered": self.reordered,
                "policy_errors": policy_errors, "ordering_s": self.ordering_s}


def profile_mismatch(metadata: dict[str, Any], served_model: str, block_size: int) -> str | None:
    """Why a profile does not describe the served engine, or None when nothing says so.

    The profile's ``block_size`` must equal the engine's, and the served model's last path
    component must appear in the profile's ``model`` (case-insensitive). Missing metadata is not
    a mismatch.
    """
    problems = []
    pb = metadata.get("block_size")
    if isinstance(pb, int) and pb != block_size:
        problems.append(f"block size {pb} (engine: {block_size})")
    pm = metadata.get("model")
    short = PurePath(str(served_model)).name.lower()
    if isinstance(pm, str) and short and short not in pm.lower():
        problems.append(f"model {pm!r} (engine: {served_model!r})")
    if not problems:
        return None
    return ("fairsim: the profile was measured with " + " and ".join(problems) + "; its T_idle "
            "describes another engine. Measure this one with fairsim calibrate.")
