# Declarations that Cython reads beside incremental.py when it compiles the module whole (setup.py,
# fairsim.compiled.WHOLE_MODULES); the source stays plain Python, the reference. As
# credit_fast.pxd: FCFS's order (and the Fair lane of Fairway's family) as an extension type whose
# data attributes are C fields, read in ``add``/``remove`` (once per request each) without a
# generic attribute lookup. ``__dict__`` keeps a subclass's own attributes (``StaleArrivalOrder``)
# and what the tests set on an instance.

cdef class ArrivalOrder:
    cdef dict __dict__
    cdef public object items, _last, _sorted, resolve, _resolved_twin


# The kept order of LPM, RAGCache, SUF, shortest-prefill-first, LOF and
# DFS-weight (``key`` per snapshot, a sorted list of keys): one add and one remove per request.
cdef class SortedKeyOrder:
    cdef dict __dict__
    cdef public object key, _keys, _head, _head_last
    cdef public dict _by_id, _by_key, _entered
    cdef public list _left
    cpdef _note_new(self, key)
    cpdef _note_gone(self, key)


# The lazy kept order of LPM-aging, SJF-aging, k-LPM's longest lane and the other orders whose keys take lazy hits
# (a heap of keys, stale ones re-keyed when read).
cdef class LazyKeyOrder:
    cdef dict __dict__
    cdef public object key, bound_key, resolve
    cdef public list _heap, _taken
    cdef public dict _by_id
    cdef public set _stale
    cpdef _compact(self)
