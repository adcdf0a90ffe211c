"""Tell an exception that escaped a policy's own code from a bug in the simulator.

``policy_failure`` walks the traceback of an exception raised during ``Engine.run``: when one of
its frames runs the policy's ``order()``, ``on_admitted()``, ``on_prefill_tokens()`` or
``incremental_order()`` (the calls the engine makes into a policy; ``fairsim/policies/base.py``),
or a method of a fast path or an eviction hook whose class is not fairsim's (a team's own
``IncrementalOrder``, or ``eviction_hook`` with its ``select``), the exception came out of the
policy and is wrapped in a ``PolicyError`` naming it. Broken contracts (``PolicyContractError``, raised
by the engine's ``check_permutation`` after ``order()`` returned) and engine invariants are left
as they are.
"""

from __future__ import annotations

import os
import sys
from types import CodeType, TracebackType

from fairsim.errors import EngineInvariantError, PolicyContractError, PolicyError

#: The policy methods the engine calls; an exception raised through them is the policy's.
POLICY_METHODS = ("order", "on_admitted", "on_prefill_tokens", "incremental_order")


def _codes(policy: object, fast_path: object = None) -> set[CodeType]:
    out = set()
    for method in POLICY_METHODS:
        fn = getattr(policy, method, None)
        fn = getattr(fn, "__func__", fn)
        code = getattr(fn, "__code__", None)
        if code is not None:
            out.add(code)
    # A fast path or an eviction hook of the team's own (its class defined outside fairsim):
    # every method of it is the policy's code; fairsim's own are fairsim's, so their failures
    # stay bugs.
    for helper in (fast_path, getattr(policy, "eviction_hook", None)):
        for klass in type(helper).__mro__ if helper is not None else ():
            if klass is object or klass.__module__.split(".")[0] == "fairsim":
                continue
            for fn in vars(klass).values():
                fn = getattr(fn, "__func__", fn)
                code = getattr(fn, "__code__", None)
                if code is not None:
                    out.add(code)
    return out


def _not_the_teams() -> tuple[str, ...]:
    """Folders whose code is not a team's policy: fairsim's package and the standard library."""
    import sysconfig  # here: only an error needs it, and it costs every run's start 0.7 ms

    paths = sysconfig.get_paths()
    return tuple(os.path.join(os.path.realpath(d), "") for d in
                 {os.path.dirname(os.path.dirname(os.path.abspath(__file__))), paths["stdlib"],
                  paths["platstdlib"]})


def raised_at(exc: BaseException, policy_class: type | None = None,
              start: TracebackType | None = None) -> str | None:
    """``"FILE, line N"`` where a policy's code raised ``exc``: the innermost frame of its
    traceback (from ``start``, the policy's own call, on; default: the whole traceback) in the
    module that defines ``policy_class``, else the innermost one outside fairsim and the standard
    library (a helper module of the team's, or a library it called); None where there is neither
    (a shipped policy's failure, or one raised in C)."""
    frames = []
    tb = exc.__traceback__ if start is None else start
    while tb is not None:
        frames.append(tb)
        tb = tb.tb_next
    skip = _not_the_teams()
    module = sys.modules.get(getattr(policy_class, "__module__", None) or "")
    home = getattr(module, "__file__", None)
    if home is not None and not os.path.realpath(home).startswith(skip):
        home = os.path.realpath(home)
        for tb in reversed(frames):
            if os.path.realpath(tb.tb_frame.f_code.co_filename) == home:
                return f"{tb.tb_frame.f_code.co_filename}, line {tb.tb_lineno}"
    for tb in reversed(frames):
        filename = tb.tb_frame.f_code.co_filename
        if filename.startswith("<") or os.path.realpath(filename).startswith(skip):
            continue
        return f"{filename}, line {tb.tb_lineno}"
    return None


def _teams_module_file(policy_class: type) -> str | None:
    """The file of the module that defines ``policy_class`` where it is a team's (not fairsim's
    nor the standard library's): code in it runs only when the policy calls it (the ``__iter__``
    of an object ``order()`` returned, a helper class), so what it raises is the policy's."""
    module = sys.modules.get(getattr(policy_class, "__module__", None) or "")
    home = getattr(module, "__file__", None)
    if home is None or os.path.realpath(home).startswith(_not_the_teams()):
        return None
    return os.path.realpath(home)


def policy_name(policy: object) -> str:
    """The policy's ``name`` attribute, else its class name."""
    name = getattr(policy, "name", None)
    return name if isinstance(name, str) else type(policy).__name__


def policy_failure(exc: BaseException, policy: object, name: str | None = None,
                   fast_path: object = None) -> tuple[PolicyError, BaseException] | None:
    """``(PolicyError, original)`` when ``exc`` or an exception it was raised from (``__cause__`` /
    ``__context__``: SimPy re-raises a process's exception as a copy caused by it) was raised
    inside ``policy``'s ``order()``, ``on_admitted()``, ``on_prefill_tokens()`` or
    ``incremental_order()``, or inside a method of ``fast_path`` (what ``incremental_order()``
    returned) or of the policy's ``eviction_hook`` whose class is not fairsim's (a frame of its
    traceback runs one of them); else ``None``. ``original`` is the exception the
    policy raised, with its traceback. ``name``: the policy's name in the message (default
    ``policy_name(policy)``).

    A ``SystemExit`` raised in the policy (``sys.exit()`` in a team's code) is wrapped like any
    other exception: it must not end a run, a sweep or ``accept`` with exit status 0 and no result.
    ``KeyboardInterrupt``, ``PolicyContractError``, ``EngineInvariantError`` and ``MemoryError``
    (the CLI's out-of-memory advice applies) are never wrapped.
    """
    codes = _codes(policy, fast_path)
    home = _teams_module_file(type(policy))
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if not isinstance(cur, (Exception, SystemExit)) or isinstance(
                cur, (PolicyContractError, EngineInvariantError, PolicyError, MemoryError)):
            return None
        tb = cur.__traceback__
        while tb is not None:
            code = tb.tb_frame.f_code
            if code in codes or home is not None and os.path.realpath(code.co_filename) == home:
                return (PolicyError(name if name is not None else policy_name(policy),
                                    type(policy).__name__, type(cur).__name__, str(cur),
                                    raised_at(cur, type(policy), tb)),
                        cur)
            tb = tb.tb_next
        cur = cur.__cause__ or cur.__context__
    return None
