"""Which block pool the engines run on: the compiled one or the pure-Python reference.

``fairsim.sim.block_pool.BlockPool`` is the reference; ``fairsim/sim/_block_pool_c.pyx``
(``CompiledBlockPool``, a typed Cython class built at install by ``setup.py``) makes the same
decisions (``tests/test_block_pool_compiled.py``, ``tests/test_block_pool_peek.py``). A policy's
eviction hook that only the hooked pool can run gets ``fairsim.sim.hooked_pool.HookedBlockPool``.
Kept apart from ``block_pool`` so that neither pool module imports the other's subclass.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from fairsim.compiled import compiled_twin
from fairsim.sim.block_pool import BlockPool

#: The optional extension (``fairsim/sim/_block_pool_c.pyx``), loaded by name: it is not a
#: Python source, and naming it in an import statement reads as importing the package
#: ``fairsim.sim``, which imports the engine, which imports this module.
COMPILED_MODULE = "fairsim.sim._block_pool_c"


def compiled_module() -> ModuleType | None:
    """The compiled extension (``CompiledBlockPool`` and the compiled chunk plan, built at
    install by ``setup.py``), or None where it was not built."""
    try:
        return importlib.import_module(COMPILED_MODULE)
    except ImportError:
        return None


def compiled_pool_class() -> type | None:
    """``fairsim.sim._block_pool_c.CompiledBlockPool`` (``BlockPool`` as a typed extension
    class), or None where the extension was not built."""
    module = compiled_module()
    return None if module is None else module.CompiledBlockPool


def block_pool_kind() -> str:
    """Which pool ``new_block_pool`` gives: ``"compiled"`` where the extension imports and
    ``FAIRSIM_PURE_PYTHON=1`` is not set, else ``"python"`` (run.json records it)."""
    return "python" if compiled_twin(COMPILED_MODULE) is None else "compiled"


#: The eviction rule a hook declares (class attribute ``pool_rule``) to run on the compiled pool:
#: an allocation takes free blocks whose key is not in ``hook.protected`` first, in LRU order, then
#: the protected ones in LRU order (PEEK's ``fairsim.policies.eviction.ProtectWaitingHits``).
PROTECTED_LAST = "unprotected LRU first, then protected LRU"

#: Hook methods only ``HookedBlockPool`` calls: a hook with any of them keeps that pool.
_HOOKED_ONLY = ("bind", "on_cache", "on_touch", "on_free", "on_evict")


def compiled_rule(hook: object) -> bool:
    """Whether the compiled pool can run ``hook``'s eviction itself: the hook declares
    ``pool_rule == PROTECTED_LAST`` and has none of the notifications or ``bind`` (which only
    ``HookedBlockPool`` calls)."""
    return (getattr(hook, "pool_rule", None) == PROTECTED_LAST
            and not any(hasattr(hook, name) for name in _HOOKED_ONLY))


def new_block_pool(num_blocks: int, hook: object = None) -> BlockPool:
    """The engines' pool of ``num_blocks`` blocks.

    Without an eviction ``hook``: the plain LRU pool, the compiled one (same behaviour, decision
    for decision: ``tests/test_block_pool_compiled.py``) or this module's ``BlockPool``, as
    ``block_pool_kind`` says. With one: the compiled pool with ``protection = hook`` where it is
    in use and the hook declares ``PROTECTED_LAST`` (``compiled_rule``; PEEK: same decisions as
    the hooked pool, ``tests/test_block_pool_peek.py``), else ``HookedBlockPool(num_blocks,
    hook)`` (RAGCache's PGDSF, or the pure-Python pool).

    Raises:
        ValueError: ``num_blocks < 1``, or a hook without ``select`` (``HookedBlockPool``).
    """
    compiled = block_pool_kind() == "compiled"
    if hook is None:
        return compiled_pool_class()(num_blocks) if compiled else BlockPool(num_blocks)
    if compiled and compiled_rule(hook):
        pool = compiled_pool_class()(num_blocks)
        pool.protection = hook
        return pool
    # Imported here: a run without a hooked policy does not need the module (start-up time).
    from fairsim.sim.hooked_pool import HookedBlockPool

    return HookedBlockPool(num_blocks, hook)
