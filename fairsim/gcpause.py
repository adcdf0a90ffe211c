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

#: Requests simulated in this process since ``collect_before_run`` last collected.
_simulated = 0
#: A finished run's per-request state stays in reference cycles (a request's engine state and
#: its waiting-queue snapshot, ``QueuedRequest.handle``, point at each other; the engine's bound
#: methods at the engine), which only a full collection frees, and a run's ``gc.freeze`` hides
#: it from the collector's own schedule: in one process, every earlier run's state was kept
#: (``compare`` of 8 policies on 200,000 requests: 2.0 GB, against 0.4 GB for one run; on a
#: trace of a million requests, gigabytes per policy). A full collection before a run, once the
#: runs since the last one simulated this many requests, bounds that garbage to about 1 GB
#: (about 1 KB a request). Freeing costs about 5 us a request of garbage (0.9 s for a
#: 200,000-request run's), so the bound is set where a workload of a few hundred thousand
#: requests in all (``compare --policies all`` on a 12,000-request trace) never pays it, and a
#: lone ``fairsim run`` never does.
GARBAGE_REQUESTS = 1_000_000


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


def collect_before_run(requests: int) -> None:
    """Called by the simulation entry points (``fairsim.sim.simulate``, ``simulate_fleet``,
    ``simulate_disaggregated``) before a run of ``requests`` requests: a full collection first
    when the runs since the last one simulated ``GARBAGE_REQUESTS`` or more (their state is
    garbage in reference cycles by now; see ``GARBAGE_REQUESTS``)."""
    global _simulated
    if _simulated >= GARBAGE_REQUESTS:
        gc.collect()
        _simulated = 0
    _simulated += requests


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
