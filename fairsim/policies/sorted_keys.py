"""The sorted list that the kept orders hold their keys in.

``SortedKeys`` is ``sortedcontainers.SortedList`` (the reference), or, where it was built and
``FAIRSIM_PURE_PYTHON=1`` is not set, its compiled twin ``fairsim.policies._sorted_c.SortedKeys``:
the same algorithm and layout, so the same objects in the same order after the same calls, with
the bookkeeping in C (``tests/test_sorted_keys.py`` compares them). Construct it with no
argument or an iterable; use ``add``, ``remove``, ``discard``, ``update``, ``in``, iteration,
``len``, indexing, ``islice`` and ``irange`` (the subset the twin has). The heap functions below
are ``heapq``'s, or their compiled twins with the same comparisons in C.
"""

from __future__ import annotations

from fairsim.compiled import compiled_twin

_twin = compiled_twin("fairsim.policies._sorted_c")

#: The class to construct: the compiled twin where built, else ``SortedList`` (imported only then:
#: the ``sortedcontainers`` package costs a run about 2.5 ms of imports).
if _twin is None:
    from sortedcontainers import SortedList as SortedKeys
else:
    SortedKeys = _twin.SortedKeys

#: ``heapq``'s ``heappush``, ``heappop`` and ``heapify`` (the reference), or where the twin is
#: built their compiled versions: the same algorithm, so the same list after the same calls, with
#: the keys compared in C (``fairsim/policies/_sorted_c.pyx``). For heaps of the orders' key tuples.
if _twin is None:
    from heapq import heapify, heappop, heappush
else:
    heapify, heappop, heappush = _twin.heapify, _twin.heappop, _twin.heappush
