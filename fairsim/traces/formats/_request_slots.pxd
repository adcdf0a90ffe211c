# The readers' compiled twins (_mooncake_c, _azure_c) write a new ``Request``'s fields into its
# ``__slots__`` by offset instead of setting 11 attributes per row. A struct and inline
# functions only: nothing is built from this file.

from cpython.object cimport PyObject, PyObject_GenericSetAttr
from libc.string cimport memset

from fairsim._member_slots cimport PyMemberDef, PyMemberDescrObject, READONLY, T_OBJECT_EX, slot_put


cdef struct RequestSlots:
    bint direct  # every field is a writable object slot: written at its offset
    Py_ssize_t offset[11]  # where field ``request_fields()[i]`` lives in the object


cdef inline tuple request_fields():
    """``Request``'s fields, in the order the readers set them (``make_request``'s)."""
    return ("request_id", "arrival_time", "prompt_len", "block_hashes", "hash_block_size",
            "output_len", "labels", "session_id", "after", "delay_s", "segments")


cdef inline RequestSlots request_slots(object request) except *:
    """Where each of ``request_fields()`` lives in a ``request`` object, ``direct`` where each is
    a plain object slot of ``request`` (a ``member_descriptor`` of type ``T_OBJECT_EX``,
    writable) and they are all its slots; else not ``direct`` (``put_field`` then sets
    attributes by ``PyObject_GenericSetAttr``).

    Writing a slot of a new object there is what setting the attribute does (the member
    descriptor's ``PyMember_SetOne``: the old value, NULL in a new object, is replaced), without
    looking the name up on the type for each field of every row."""
    cdef RequestSlots slots
    cdef PyMemberDef* member
    cdef Py_ssize_t i
    fields = request_fields()
    memset(&slots, 0, sizeof(slots))  # not direct, no offsets: nothing read is left unset
    if sorted(fields) != sorted(getattr(request, "__slots__", ())):
        return slots
    for i, name in enumerate(fields):
        descr = request.__dict__.get(name)
        if type(descr) is not type(request.__dict__.get("prompt_len")) or type(descr).__name__ != "member_descriptor":
            return slots
        if descr.__objclass__ is not request:
            return slots
        member = (<PyMemberDescrObject*><PyObject*>descr).d_member
        if member.type != T_OBJECT_EX or member.flags & READONLY:
            return slots
        slots.offset[i] = member.offset
    slots.direct = True
    return slots


cdef inline int put_field(RequestSlots* slots, object obj, Py_ssize_t i, object value) except -1:
    """Set field ``request_fields()[i]`` of ``obj``, a request just made by ``object.__new__``
    (each field set once): into its slot where ``slots.direct``, else as ``object.__setattr__``
    does."""
    if slots.direct:
        slot_put(obj, slots.offset[i], value)
        return 0
    return PyObject_GenericSetAttr(obj, request_fields()[i], value)


cdef inline int fill_request(RequestSlots* slots, object req, object request_id, object arrival_time,
                             object prompt_len, object block_hashes, object hash_block_size,
                             object output_len, object labels) except -1:
    """Every field of ``req``, a ``Request`` just made by ``object.__new__``, in
    ``request_fields()``' order, as ``make_request`` sets them for a row with no session, no
    ``after``, no delay and no segments (``put_field``)."""
    put_field(slots, req, 0, request_id)
    put_field(slots, req, 1, arrival_time)
    put_field(slots, req, 2, prompt_len)
    put_field(slots, req, 3, block_hashes)
    put_field(slots, req, 4, hash_block_size)
    put_field(slots, req, 5, output_len)
    put_field(slots, req, 6, labels)
    put_field(slots, req, 7, None)
    put_field(slots, req, 8, None)
    put_field(slots, req, 9, 0.0)
    put_field(slots, req, 10, ())
    return 0
