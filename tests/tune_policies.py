"""Policies of a team's own for tests/test_tune.py (``tune_policies:ShortFirst``)."""

from fairsim.policies.space import IntRange


class ShortFirst:
    """Requests of at most ``limit`` x 1000 prompt tokens first, then the others; each by arrival."""

    name = "short-first"
    search_space = {"limit": IntRange(0, 10)}

    def __init__(self, limit: int = 0):
        self.limit = limit

    def order(self, waiting, now):
        return sorted(waiting, key=lambda r: (r.prompt_len > self.limit * 1000, r.arrival_time, r.request_id))


class Undeclared(ShortFirst):
    """ShortFirst without a search_space of its own: tune searches none of its parameters."""

    name = "undeclared"


class Crashes:
    """Raises once more than three requests wait (a team's policy with a bug)."""

    search_space = {}

    def order(self, waiting, now):
        if len(waiting) > 3:
            raise RuntimeError("crashed on a long queue")
        return list(waiting)


class BreaksContract:
    """Returns its first waiting request twice (breaks the order contract)."""

    search_space = {}

    def order(self, waiting, now):
        return list(waiting) + list(waiting)[:1]
