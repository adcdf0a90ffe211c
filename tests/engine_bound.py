"""Shared harness of the cross-step bound properties: engine runs recorded step by step.

Used by tests/test_fairway_carry.py, tests/test_fairway_patience.py and
tests/test_fairway_deadline.py. ``Recorder`` wraps a policy and keeps, per step, the waiting
snapshots it ordered and the ids the engine admitted (in admission order); the trace strategies
draw long misses among bursts of short cache hits; the checkers walk those records.
"""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import strategies as st

from fairsim.costmodel import DEFAULT_PROFILE, load_profile
from fairsim.policies import make_policy
from fairsim.policies.base import arrival_key
from fairsim.sim.config import EngineConfig
from fairsim.sim.engine import Engine
from fairsim.types import Request

PROFILE = load_profile(DEFAULT_PROFILE)
BUDGET = 2048


def const_slo(L: int) -> float:
    return 1.0  # SLO = max(1, 3 x 1) = 3 s for every request


def ids(order):
    return [r.request_id for r in order]


class Recorder:
    """Wraps a policy; records, per step, the waiting snapshots it ordered and what was admitted.

    ``steps`` holds ``(now, waiting snapshots, admitted ids)``; ``observe(waiting, now)``, when
    given, is called after every ``order()`` and its result kept in ``states`` (one per step), e.g.
    a copy of the policy's deadlines.
    """

    def __init__(self, inner, observe: Callable | None = None):
        self.inner = inner
        self.name = inner.name
        self.observe = observe
        self.steps: list[tuple[float, list, list]] = []
        self.states: list = []

    def order(self, waiting, now):
        self.steps.append((now, list(waiting), []))
        out = self.inner.order(waiting, now)
        if self.observe is not None:
            self.states.append(self.observe(waiting, now))
        return out

    def on_admitted(self, admitted, now):
        if self.steps and self.steps[-1][0] == now:
            self.steps[-1][2].extend(a.request_id for a in admitted)
        inner = getattr(self.inner, "on_admitted", None)
        if inner is not None:
            inner(admitted, now)


def run_recorded(name_or_policy, requests, observe: Callable | None = None) -> Recorder:
    """Run ``requests`` on the default profile (400 KV blocks) under a recorded policy."""
    policy = make_policy(name_or_policy, PROFILE) if isinstance(name_or_policy, str) else name_or_policy
    rec = Recorder(policy, observe)
    Engine(requests, rec, PROFILE, EngineConfig(kv_blocks=400)).run()
    return rec


def bound_excess(steps, ratio: float, budget: int = BUDGET,
                 armed: Callable[[float, object], bool] | None = None) -> list[tuple[str, float, float]]:
    """Requests whose work admitted ahead (while they are the oldest) exceeds the bound.

    The work counted is the order-time ``c`` of the requests admitted ahead of ``o`` from the
    step it becomes the oldest waiting request (``armed(now, o)``: only from the first step at
    which that holds) until its admission; the bound is ``ratio x max_t c_t(o) + max c(A) +
    budget``. Returns ``(request_id, work_ahead, bound)`` per violation.
    """
    bad = []
    oldest = None
    ahead = max_c = max_own = 0.0
    for now, waiting, admitted in steps:
        if not waiting:
            continue
        snaps = {r.request_id: r for r in waiting}
        o = min(waiting, key=arrival_key)
        if o.request_id != oldest:
            oldest, ahead, max_c, max_own = o.request_id, 0.0, 0.0, 0.0
        if armed is not None and not armed(now, o):
            if oldest in admitted:
                oldest = None
            continue  # not armed yet: only the paper's per-step bound is claimed
        max_own = max(max_own, o.uncached_len)
        for rid in admitted:
            if rid == oldest:
                bound = ratio * max_own + max_c + budget
                if ahead > bound:
                    bad.append((oldest, ahead, bound))
                oldest = None
                break
            if rid in snaps:  # resumed preempted requests are not the order's
                ahead += snaps[rid].uncached_len
                max_c = max(max_c, snaps[rid].uncached_len)
    return bad


@st.composite
def long_miss_traces(draw):
    """Long misses among bursts of short cache hits on a few documents (512-token blocks)."""
    reqs = []
    for i in range(draw(st.integers(1, 3))):
        L = draw(st.integers(2048, 16384))
        reqs.append(Request(f"m{i}", draw(st.floats(0.0, 1.0)), L,
                            tuple(10_000 + 100 * i + b for b in range(L // 512)), 512))
    n_docs = draw(st.integers(1, 4))
    doc_blocks = [draw(st.integers(1, 6)) for _ in range(n_docs)]
    for j in range(draw(st.integers(5, 60))):
        d = draw(st.integers(0, n_docs - 1))
        q = draw(st.integers(16, 1024))
        L = doc_blocks[d] * 512 + q
        hashes = tuple(d * 100 + b for b in range(doc_blocks[d])) + tuple(
            20_000 + 10 * j + b for b in range(q // 512))
        reqs.append(Request(f"h{j}", draw(st.floats(0.0, 4.0)), L, hashes, 512))
    return reqs


@st.composite
def overload_traces(draw):
    """Long misses at t <= 1 s, then short hits on a few documents arriving for 5-20 s, often
    faster than the engine serves them, so the backlog outlasts a miss's patience (512-token blocks)."""
    reqs = []
    for i in range(draw(st.integers(1, 3))):
        L = draw(st.integers(8192, 16384))
        reqs.append(Request(f"m{i}", draw(st.floats(0.0, 1.0)), L,
                            tuple(10_000 + 100 * i + b for b in range(L // 512)), 512))
    n_docs = draw(st.integers(1, 4))
    doc_blocks = [draw(st.integers(1, 6)) for _ in range(n_docs)]
    span = draw(st.floats(5.0, 20.0))
    for j in range(draw(st.integers(40, 160))):
        d = draw(st.integers(0, n_docs - 1))
        q = draw(st.integers(256, 2048))
        L = doc_blocks[d] * 512 + q
        hashes = tuple(d * 100 + b for b in range(doc_blocks[d])) + tuple(
            20_000 + 10 * j + b for b in range(q // 512))
        reqs.append(Request(f"h{j}", draw(st.floats(0.0, span)), L, hashes, 512))
    return reqs
