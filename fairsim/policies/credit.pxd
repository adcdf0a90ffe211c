# Declarations that Cython reads beside credit.py when it compiles the module whole (setup.py,
# fairsim.compiled.WHOLE_MODULES); the source stays plain Python, the reference. The replay log
# of DRR, DLPM and DRR-Dynamo as an extension type: its lists are C fields, so ``commit`` (once
# per admitting step) and the compiled visit loops' appends read them without a generic lookup.

cdef class Replay:
    cdef dict __dict__
    cdef public list _changes, _marks, ids
    cdef public object applied
