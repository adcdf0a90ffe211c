"""Tell an exception that escaped a policy's own code from a bug in the simulator.

``policy_failure`` walks the traceback of an exception raised during ``Engine.run``: when one of
its frames runs the policy's ``order()`` or ``on_admitted()`` (the two calls the engine makes into
a policy; ``fairsim/policies/base.py``), the exception came out of the policy and is wrapped in a
``PolicyError`` naming it. Broken contracts (``PolicyContractError``, raised by the engine's
``check_permutation`` after ``order()`` returned) and engine invariants are left as they are.
"""

from __future__ import annotations

from types import CodeType

from fairsim.errors import EngineInvariantError, PolicyContractError, PolicyError

#: The policy methods the engine calls; an exception raised through them is the policy's.
POLICY_METHODS = ("order", "on_admitted")


def _codes(policy: object) -> set[CodeType]:
    out = set()
    for method in POLICY_METHODS:
        fn = getattr(policy, method, None)
        fn = getattr(fn, "__func__", fn)
        code = getattr(fn, "__code__", None)
        if code is not None:
            out.add(code)
    return out


def policy_name(policy: object) -> str:
    """The policy's ``name`` attribute, else its class name."""
    name = getattr(policy, "name", None)
    return name if isinstance(name, str) else type(policy).__name__


def policy_failure(exc: BaseException, policy: object) -> tuple[PolicyError, BaseException] | None:
    """``(PolicyError, original)`` when ``exc`` or an exception it was raised from (``__cause__`` /
    ``__context__``: SimPy re-raises a process's exception as a copy caused by it) was raised
    inside ``policy``'s ``order()`` or ``on_admitted()`` (a frame of its traceback runs one of
    them); else ``None``. ``original`` is the exception the policy raised, with its traceback.

    A ``SystemExit`` raised in the policy (``sys.exit()`` in a team's code) is wrapped like any
    other exception: it must not end a run, a sweep or ``accept`` with exit status 0 and no result.
    ``KeyboardInterrupt``, ``PolicyContractError``, ``EngineInvariantError`` and ``MemoryError``
    (the CLI's out-of-memory advice applies) are never wrapped.
    """
    codes = _codes(policy)
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if not isinstance(cur, (Exception, SystemExit)) or isinstance(
                cur, (PolicyContractError, EngineInvariantError, PolicyError, MemoryError)):
            return None
        tb = cur.__traceback__
        while tb is not None:
            if tb.tb_frame.f_code in codes:
                return (PolicyError(policy_name(policy), type(policy).__name__, type(cur).__name__,
                                    str(cur)), cur)
            tb = tb.tb_next
        cur = cur.__cause__ or cur.__context__
    return None
