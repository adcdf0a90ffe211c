# Declarations that Cython reads beside credit_fast.py when it compiles the module whole (setup.py,
# fairsim.compiled.WHOLE_MODULES); the source stays plain Python, the reference (as engine.pxd).
#
# They make the kept class queues and VTC's keys extension types whose data attributes are C
# fields, and the methods the module calls on itself C calls (after a check for a subclass's
# override): a compiled ``self._keys.add(key)`` was a generic attribute lookup and a Python
# method call, about 2,000 instructions, several per request with one class per request (the
# Azure traces). Every field is a Python object, so values and arithmetic are the source's.
# ``__dict__`` keeps what is not declared (a subclass's own attributes, ``COMPACT_MIN`` set on
# an instance by the tests, an attribute a later edit adds before it is declared here).

cdef class ClassQueues:
    cdef dict __dict__
    cdef public dict queues, items
    cdef public set touched
    cdef public object resolve
    cpdef add(self, q)
    cpdef remove(self, request_id)


cdef class RunSortedKeys:
    cdef dict __dict__
    cdef public object _sorted, _last, _removed
    cdef public dict _run
    cpdef first(self)
    cpdef add(self, key)
    cpdef remove(self, key)


cdef class VTCOrder(ClassQueues):
    cdef public object policy
    cdef public dict _key_of, _class_of_rid
    cdef public RunSortedKeys _keys
    cpdef _drop_key(self, u)
    cpdef _refresh(self, u)


cdef class DRROrder(ClassQueues):
    cdef public object policy, _first, _read, _sync
    cdef public dict _nxt, _prv, _lo, _hc
    cpdef add(self, q)
    cpdef remove(self, request_id)
    cpdef _link(self, u, before=*)
    cpdef _unlink(self, u)


cdef class DLPMOrder:
    cdef dict __dict__
    cdef public object policy, _pos, _version, _applied, _key, _refill, _read, _logged
    cdef public dict queues, items, _pos_key
    cdef public set touched
    cpdef add(self, q)
    cpdef remove(self, request_id)
    cpdef _refresh(self, u)
