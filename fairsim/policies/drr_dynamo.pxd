# Declarations that Cython reads beside drr_dynamo.py when it compiles the module whole (setup.py,
# fairsim.compiled.WHOLE_MODULES); the source stays plain Python, the reference. As
# credit_fast.pxd: the kept order's data attributes become C fields and its add/remove C calls.

from fairsim.policies.credit_fast cimport ClassQueues


cdef class DRRDynamoOrder(ClassQueues):
    cdef public object policy, _read
    cdef public list ring, unpriced
    cdef public dict class_at, head_cost
    cpdef add(self, q)
    cpdef remove(self, request_id)
