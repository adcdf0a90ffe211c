# CPython's member-descriptor structures, for the compiled twins that write a new object's
# ``__slots__`` fields by their offsets (fairsim/sim/_live_c.pyx: ``_Live``;
# fairsim/traces/formats/_mooncake_c.pyx: ``Request``). Declarations only: nothing is built from
# this file.

cdef extern from "structmember.h":
    ctypedef struct PyMemberDef:
        int type
        Py_ssize_t offset
        int flags
    enum:
        T_OBJECT_EX
        READONLY


cdef extern from "Python.h":
    ctypedef struct PyMemberDescrObject:
        PyMemberDef* d_member
