# Declarations that Cython reads beside incremental.py when it compiles the module whole (setup.py,
# fairsim.compiled.WHOLE_MODULES); the source stays plain Python, the reference. As
# credit_fast.pxd: FCFS's order (and the Fair lane of Fairway's family) as an extension type whose
# data attributes are C fields, read in ``add``/``remove`` (once per request each) without a
# generic attribute lookup. ``__dict__`` keeps a subclass's own attributes (``StaleArrivalOrder``)
# and what the tests set on an instance.

cdef class ArrivalOrder:
    cdef dict __dict__
    cdef public object items, _last, _sorted, resolve, _resolved_twin
