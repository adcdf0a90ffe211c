"""The cyclic garbage collector around a run's set-up and exit (a run's fixed cost).

Reading a trace and building the engine's per-request state allocate hundreds of thousands of
long-lived containers (records, requests, key tuples) and no reference cycles, so the cyclic
collector's passes over them in that time find nothing to free and only cost time (about 15 % of
the trace read). ``paused()`` switches it off for such a phase; the simulation itself keeps it on
(``Engine.run`` freezes the trace instead, so its full collections do not rescan it).

At exit the interpreter runs one last full collection over every object still alive; the
``fairsim`` program skips it with ``freeze_for_exit()`` (objects are still freed by their
reference counts, files flushed and closed by the interpreter as usual). Python documents
``gc.freeze`` as moving all tracked objects to a permanent generation ignored by collections
(https://docs.python.org/3/library/gc.html#gc.freeze).
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused(freeze: bool = False) -> Iterator[None]:
    """Run the block with the cyclic collector off; restore its state (on or off) afterwards.

    Args:
        freeze: When the block ends without an exception, first move every tracked object to the
            permanent generation (``gc.freeze``), so the collector, back on, does not scan at
            once all that the block allocated (its young generation would hold all of it: ~0.02 s
            for a 12,000-request trace). Only where an ``Engine.run`` follows, whose ``finally``
            unfreezes (``gc.unfreeze``); a caller that may stop before it unfreezes itself.

    Nests; only for phases that create no reference cycles of their own (any made anyway are
    collected once the collector is back on and the objects unfrozen).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
        if freeze:
            gc.freeze()
    finally:
        if was_enabled:
            gc.enable()


def freeze_for_exit() -> None:
    """Skip the interpreter's final full collection: call it last, just before the process exits
    (the ``fairsim`` program's entry points; never inside a long-lived process such as a test run,
    where it would keep the cyclic garbage of everything alive until then).

    Not once PyTorch is imported (the live commands: vLLM, ``hook-overhead``, ``calibrate``):
    objects its extension modules made stay alive in cycles without the final collection, and
    triton's nanobind bindings then print hundreds of "leaked" lines at exit."""
    if "torch" in sys.modules:
        return
    gc.freeze()
