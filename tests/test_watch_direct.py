"""The compiled lazy-hits path's per-step work (``fairsim/sim/_watch_c.pyx``) keeps the protocol.

- ``CompiledWatch.start_step`` hands the order the same ``stale(ids, raised)`` calls, in the same
  order with the same lists, as the reference ``LazyHits.start_step`` (the engine on the
  pure-Python watcher map), step by step on an overloaded slice of the conversation trace.
- ``snapshot`` and ``resolve`` run ``make_snapshot`` from C only where the engine's
  ``_make_snapshot`` is that method; an engine whose ``_make_snapshot`` was replaced before the
  run calls the replacement, and the tables stay the same.
- ``_Live``'s fields are read and written in place only for plain object slots, and a run through
  the attribute protocol instead gives the same tables.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from fairsim.costmodel import load_profile
from fairsim.policies import make_policy
from fairsim.sim import Engine, EngineConfig
from fairsim.sim import engine as engine_module
from fairsim.sim.lazy_hits import compiled_watch_class

pytestmark = pytest.mark.skipif(compiled_watch_class() is None, reason="fairsim.sim._watch_c not built")

PROFILE = load_profile("a6000-llama3.1-8b-vllm-prior")
CONVERSATION = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces" / "conversation_trace.jsonl"
CONFIG = EngineConfig(kv_blocks=451)


def _slice(n: int) -> list:
    from fairsim.traces.formats import read_trace

    if not CONVERSATION.exists():
        pytest.skip("shared conversation trace not present")
    return list(read_trace(CONVERSATION).requests)[:n]


def _engine(requests, policy: str, compiled: bool) -> Engine:
    with pytest.MonkeyPatch.context() as m:
        if not compiled:
            m.setattr(engine_module, "compiled_watch_class", lambda: None)
        engine = Engine(requests, make_policy(policy, PROFILE), PROFILE, CONFIG)
    assert (engine._watch_c is not None) == compiled
    assert engine._lazy is not None
    return engine


def _stale_calls(requests, policy: str, compiled: bool) -> list[tuple[tuple, tuple]]:
    """Every ``stale(ids, raised)`` the engine made, as tuples, in order."""
    engine = _engine(requests, policy, compiled)
    inc = engine._inc
    told = inc.stale
    calls = []

    def stale(request_ids, raised=None):
        calls.append((tuple(request_ids), None if raised is None else tuple(raised)))
        return told(request_ids, raised)

    inc.stale = stale  # (an instance attribute: the engine looks it up at each step)
    engine.run()
    return calls


@pytest.mark.parametrize("policy", ["fairway", "fairway-carry", "lpm-aging", "vtc"])
def test_start_step_tells_the_reference_stale_calls(policy):
    """The first 1,200 requests at their native rate under a 451-block cache: hundreds waiting,
    shared prefixes cached and evicted, so requests go stale (some raised) in many steps."""
    requests = _slice(1200)
    compiled = _stale_calls(requests, policy, compiled=True)
    reference = _stale_calls(requests, policy, compiled=False)
    assert compiled == reference
    assert sum(1 for ids, _ in compiled if ids) > 100  # stale requests named in many steps
    assert sum(1 for _, raised in compiled if raised) > 100  # and raised ones
    assert any(not ids and not raised for ids, raised in compiled)  # calls with none held stay


def _tables(engine: Engine) -> tuple[pd.DataFrame, pd.DataFrame]:
    result = engine.run()
    return result.requests, result.steps


def test_snapshots_made_in_c_only_for_the_engines_own_method():
    requests = _slice(600)
    direct = _engine(requests, "fairway", compiled=True)
    req_a, steps_a = _tables(direct)
    assert direct._watch_c.direct == 1

    replaced = _engine(requests, "fairway", compiled=True)
    made = replaced._make_snapshot
    count = [0]

    def counted(live, h, computed):
        count[0] += 1
        return made(live, h, computed)

    replaced._make_snapshot = counted
    req_b, steps_b = _tables(replaced)
    assert replaced._watch_c.direct == 0
    # Every new request's snapshot (``snapshot``) and every lazy read (``resolve``) went through it.
    assert count[0] >= len(requests)
    pd.testing.assert_frame_equal(req_a, req_b, check_exact=True)
    pd.testing.assert_frame_equal(steps_a, steps_b, check_exact=True)


def test_live_slots_reached_in_place_only_for_plain_slots():
    """``_bind_live_type`` takes the engine's ``_Live`` (every field a plain object slot) and
    refuses a type whose fields are not all slots or whose attribute protocol is its own."""
    from fairsim.sim import _watch_c
    from fairsim.sim.engine import _Live

    class Props:
        __slots__ = tuple(f for f in _watch_c.LIVE_FIELDS if f != "snap")
        snap = property(lambda self: None)

    class Hooked:
        __slots__ = _watch_c.LIVE_FIELDS

        def __getattribute__(self, name):
            return object.__getattribute__(self, name)

    try:
        assert _watch_c._bind_live_type(Props) is False
        assert _watch_c._bind_live_type(Hooked) is False
        assert _watch_c._bind_live_type(None) is False
    finally:
        assert _watch_c._bind_live_type(_Live) is True


def test_attribute_protocol_fallback_gives_the_same_tables():
    """With ``_Live``'s slots not reached in place (every read and write through ``getattr``/
    ``setattr``), a run's tables are those of the in-place run."""
    from fairsim.sim import _watch_c
    from fairsim.sim.engine import _Live

    requests = _slice(600)
    req_a, steps_a = _tables(_engine(requests, "fairway", compiled=True))
    plain = _engine(requests, "fairway", compiled=True)
    try:
        assert _watch_c._bind_live_type(None) is False
        req_b, steps_b = _tables(plain)
    finally:
        assert _watch_c._bind_live_type(_Live) is True
    pd.testing.assert_frame_equal(req_a, req_b, check_exact=True)
    pd.testing.assert_frame_equal(steps_a, steps_b, check_exact=True)


def _read_all(order) -> tuple[list, str | None, bool]:
    """What a reader of ``order`` sees: the items, the error that ended it (``TYPE: message``,
    or None at its end), and whether a further ``next()`` ends it (a finished generator)."""
    items, error = [], None
    try:
        for live in order:
            items.append(live)
    except Exception as exc:  # noqa: BLE001 - compared with the reference's
        error = f"{type(exc).__name__}: {exc}"
    try:
        next(order)
        ended = False
    except StopIteration:
        ended = True
    return items, error, ended


class _Failing(Exception):
    pass


def _failing(snaps):
    yield from snaps
    raise _Failing("the order's own error")


def test_checked_order_is_the_reference_generator():
    """``CompiledWatch.checked`` (``_watch_c.CheckedOrder``) against ``Engine._checked`` on
    good and bad orders: the same lives, the same ``PolicyContractError`` messages (duplicate,
    foreign, stale, short), the order's own error passed on, the same snapshots kept for
    ``on_admitted``, and finished after an error or the end."""
    from fairsim.types import QueuedRequest

    engine = _engine(_slice(40), "fairway", True)
    assert engine._checked.__self__ is engine._watch_c  # the compiled one is bound
    lives = engine._all[:4]
    snaps = []
    for i, live in enumerate(lives):
        q = QueuedRequest(f"r{i}", float(i), 10, 0, 10, 0, live)
        live.snap = q if i != 2 else None  # (a request whose snapshot is not kept is accepted)
        snaps.append(q)
    engine._in_inc.clear()
    engine._in_inc.update(lives[:3])  # lives[3]: not held
    s0, s1, s2, s3 = snaps
    stale = QueuedRequest("r0", 0.0, 10, 0, 10, 0, lives[0])  # lives[0].snap is s0
    contract = "PolicyContractError: policy 'fairway': incremental_order() yielded "
    cases = [  # (order, n, the error that ends it)
        ([s0, s1, s2], 3, None), ([s2, s0, s1], 3, None), ([], 0, None),
        ([s0, s1, s0], 3, contract + "a duplicate entry 'r0'"),
        ([s0, "not a snapshot"], 3, contract + "a foreign or stale entry 'not a snapshot'"),
        # (a handle that cannot be hashed is no waiting request's: foreign, not a TypeError)
        ([s0, QueuedRequest("r9", 9.0, 10, 0, 10, 0, [lives[1]])], 3, contract + "a foreign or stale entry 'r9'"),
        ([s1, s3], 3, contract + "a foreign or stale entry 'r3'"),
        ([stale], 1, contract + "a foreign or stale entry 'r0'"),
        ([s0, s1], 3, contract + "2 of the 3 waiting requests"),
        ([s0, s1, s2], 2, contract + "3 of the 2 waiting requests"),
        (None, 3, "_Failing: the order's own error"),  # (None: _failing([s1]))
    ]
    for on_admitted in (None, lambda *args: None):
        engine._on_admitted = on_admitted
        for items, n, error in cases:
            seen = []
            for check in (engine._checked, lambda it, k: Engine._checked(engine, it, k)):
                engine._step_snaps = {}
                it = _failing([s1]) if items is None else iter(items)
                seen.append((_read_all(check(it, n)), dict(engine._step_snaps)))
            assert seen[0] == seen[1], (items, n)
            (got, got_error, ended), kept = seen[0]
            assert got_error == error and ended
            assert kept == ({} if on_admitted is None else {q.handle: q for q in snaps if q.handle in got})
