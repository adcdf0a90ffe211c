# The readers' compiled twins (_mooncake_c, _azure_c) write a new ``Request``'s fields into its
# ``__slots__`` by offset instead of setting 11 attributes per row. Inline functions only:
# nothing is built from this file.

from cpython.object cimport PyObject, PyObject_GenericSetAttr
from cpython.ref cimport Py_INCREF

from fairsim._member_slots cimport PyMemberDef, PyMemberDescrObject, READONLY, T_OBJECT_EX


cdef inline tuple request_fields():
    """``Request``'s fields, in the order the readers set them (``make_request``'s)."""
    return ("request_id", "arrival_time", "prompt_len", "block_hashes", "hash_block_size",
            "output_len", "labels", "session_id", "after", "delay_s", "segments")


cdef inline bint request_slot_offsets(object request, tuple fields, Py_ssize_t* offsets) except -1:
    """Fill ``offsets[i]`` with where field ``fields[i]`` lives in a ``request`` object and return
    True, where each is a plain object slot of ``request`` (a ``member_descriptor`` of type
    ``T_OBJECT_EX``, writable) and they are all its slots; else False (``put_request_field``
    then sets attributes by ``PyObject_GenericSetAttr``).

    Writing a slot of a new object there is what setting the attribute does (the member
    descriptor's ``PyMember_SetOne``: the old value, NULL in a new object, is replaced), without
    looking the name up on the type for each field of every row."""
    cdef PyMemberDef* member
    cdef Py_ssize_t i
    if sorted(fields) != sorted(getattr(request, "__slots__", ())):
        return False
    for i, name in enumerate(fields):
        descr = request.__dict__.get(name)
        if type(descr) is not type(request.__dict__.get("prompt_len")) or type(descr).__name__ != "member_descriptor":
            return False
        if descr.__objclass__ is not request:
            return False
        member = (<PyMemberDescrObject*><PyObject*>descr).d_member
        if member.type != T_OBJECT_EX or member.flags & READONLY:
            return False
        offsets[i] = member.offset
    return True


cdef inline int put_request_field(object obj, bint direct, Py_ssize_t* offsets, tuple fields, Py_ssize_t i,
                                  object value) except -1:
    """Set field ``fields[i]`` of ``obj``, a request just made by ``object.__new__`` (each field
    set once): into its slot where ``direct`` (``request_slot_offsets`` succeeded), else as
    ``object.__setattr__`` does."""
    if direct:
        Py_INCREF(value)
        (<PyObject**>((<char*><PyObject*>obj) + offsets[i]))[0] = <PyObject*>value
        return 0
    return PyObject_GenericSetAttr(obj, fields[i], value)
