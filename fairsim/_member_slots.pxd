# CPython's member-descriptor structures and the read and write of an object slot by its offset,
# for the compiled twins that read and write ``__slots__`` fields without Python's attribute
# lookup (fairsim/sim/_live_c.pyx and _watch_c.pyx: ``_Live``; fairsim/traces/formats/
# _request_slots.pxd: ``Request``). Declarations and inline functions only: nothing is built from
# this file.

from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF, Py_XDECREF


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


cdef inline PyObject* slot_peek(object obj, Py_ssize_t offset) noexcept:
    """The value in the slot at ``offset`` of ``obj``: a borrowed reference, NULL where unset."""
    return (<PyObject**>((<char*><PyObject*>obj) + offset))[0]


cdef inline void slot_put(object obj, Py_ssize_t offset, object value) noexcept:
    """The slot at ``offset`` of ``obj`` set to ``value``: what the member descriptor's
    ``__set__`` does (the new value in, then the old one, or NULL, released)."""
    cdef PyObject** at = <PyObject**>((<char*><PyObject*>obj) + offset)
    cdef PyObject* old = at[0]
    Py_INCREF(value)
    at[0] = <PyObject*>value
    Py_XDECREF(old)
