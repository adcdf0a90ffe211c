# cython: language_level=3, boundscheck=False, wraparound=False
"""The engine's per-request states and request table, typed: the compiled twin of
``fairsim.sim.engine.make_lives`` (after its sort) and of ``Engine._request_table``'s columns
read from those states.

``new_lives`` builds the same ``_Live`` objects as ``_Live(req, keys, block_size, out_len)`` with
``index = i`` (same field values; ``tests/test_live_compiled.py``), writing the 33 fields into the
object's slots (offsets from ``_Live``'s member descriptors, checked at import as
``_mooncake_c`` checks ``Request``'s) instead of 33 attribute stores and a Python call per
request. The keys and the client take the references' common cases in C (a request whose hash
block is the engine's and whose trace ids cover every full block: the keys are its
``block_hashes``; one without ids or segments, as an Azure row: a request-unique key per full
block; no labels and no session: no client) and call the Python functions otherwise.

``state_columns`` reads the request table's per-state columns in one pass over the states (each
object's cache lines once, where one list comprehension per column touched them once per
column: at 10x the trace they no longer stay in the cache between columns).

``Finisher`` is ``Engine._finish_batch`` (the end of a step: advance each scheduled request,
sample the tokens due, finish requests) reading and writing the states' slots in C: the compiled
engine read them through Python's generic attribute lookup, about 170 instructions each, some
20 reads and writes per request.
"""

from cpython.list cimport PyList_New, PyList_SET_ITEM
from cpython.long cimport PyLong_FromSsize_t
from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM


from fairsim._member_slots cimport PyMemberDef, PyMemberDescrObject, READONLY, T_OBJECT_EX, slot_peek, slot_put


# _Live's fields, in the order _Live.__init__ sets them (then ``index``, which make_lives sets).
FIELDS = ("req", "keys", "max_hit_blocks", "num_prompt_blocks", "computed", "blocks",
          "num_cached_blocks", "cached_at_admission", "first_scheduled_s", "first_scheduled_step",
          "finish_s", "finish_step", "preemptions", "preempted", "released_s", "snap", "out_len",
          "generated", "first_token_s", "last_token_s", "discarded", "resume_cached", "index",
          "dec_seq", "dec_step", "dec_c0", "dec_g0", "watched", "partial", "last_snap", "client",
          "arrival_prefill", "next_key")
DEF NFIELDS = 33
cdef enum:
    F_REQ, F_KEYS, F_MAX_HIT, F_PROMPT_BLOCKS, F_COMPUTED, F_BLOCKS, F_NUM_CACHED, F_CACHED_ADM,
    F_FIRST_S, F_FIRST_STEP, F_FINISH_S, F_FINISH_STEP, F_PREEMPTIONS, F_PREEMPTED, F_RELEASED,
    F_SNAP, F_OUT_LEN, F_GENERATED, F_FIRST_TOKEN, F_LAST_TOKEN, F_DISCARDED, F_RESUME_CACHED,
    F_INDEX, F_DEC_SEQ, F_DEC_STEP, F_DEC_C0, F_DEC_G0, F_WATCHED, F_PARTIAL, F_LAST_SNAP,
    F_CLIENT, F_ARRIVAL_PREFILL, F_NEXT_KEY

cdef Py_ssize_t _OFFSET[NFIELDS]
cdef object _LIVE = None  # the class whose offsets _OFFSET holds


def bind(object live_type) -> bool:
    """Fill the slot offsets of ``live_type`` (``fairsim.sim.engine._Live``) and return True, where
    its slots and its bases' are exactly ``FIELDS``, each a writable object slot (a
    ``member_descriptor`` of type ``T_OBJECT_EX``) and it has no ``__dict__``; else False (the
    engine then uses ``make_lives``' Python loop). Writing a new object's slot is what the member
    descriptor's ``__set__`` does to a slot that holds NULL."""
    global _LIVE
    cdef PyMemberDef* member
    cdef Py_ssize_t i
    cdef Py_ssize_t offsets[NFIELDS]  # copied to _OFFSET only once every field checks out
    names = []
    for klass in live_type.__mro__:
        if klass is not object:
            names.extend(getattr(klass, "__slots__", ("__dict__",)))
    if len(FIELDS) != NFIELDS or sorted(names) != sorted(FIELDS):
        return False
    for i, name in enumerate(FIELDS):
        descr = getattr(live_type, name)
        if type(descr).__name__ != "member_descriptor" or not issubclass(live_type, descr.__objclass__):
            return False
        member = (<PyMemberDescrObject*><PyObject*>descr).d_member
        if member.type != T_OBJECT_EX or member.flags & READONLY:
            return False
        offsets[i] = member.offset
    for i in range(NFIELDS):
        _OFFSET[i] = offsets[i]
    _LIVE = live_type
    return True


cdef inline void _put(object obj, int i, object value) noexcept:
    """Field ``FIELDS[i]`` of ``obj`` set to ``value`` (its slot: new, or holding a value)."""
    slot_put(obj, _OFFSET[i], value)


cdef inline object _get(object obj, int i):
    """Field ``FIELDS[i]`` of ``obj`` (a borrowed slot value as a new reference)."""
    cdef PyObject* p = slot_peek(obj, _OFFSET[i])
    if p == NULL:
        raise AttributeError(FIELDS[i])
    return <object>p


cdef tuple _unique_keys(object request_id, Py_ssize_t full):
    """``engine_block_keys`` / ``generated_block_keys`` of a request without ids or segments: a
    request-unique key ``("unique", request_id, j)`` for each of its ``full`` full blocks."""
    cdef tuple keys = PyTuple_New(full)
    cdef Py_ssize_t j
    for j in range(full):
        key = ("unique", request_id, j)
        Py_INCREF(key)
        PyTuple_SET_ITEM(keys, j, key)
    return keys


def new_lives(list ordered, object block_size, bint colocated, object keys_of, object client_of,
              object no_key):
    """``[_Live(r, keys_of(r, block_size), block_size, out_len) for r in ordered]`` with
    ``index = i``: ``make_lives``' loop (``out_len``: ``r.output_len`` when ``colocated``, else 1).

    Args:
        ordered: The requests, sorted (``make_lives``).
        block_size: Tokens per engine block (int >= 1).
        colocated: Whether the keys cover the output (``generated_block_keys``) or the prompt
            (``engine_block_keys``); ``keys_of`` is that function.
        client_of: ``client_of_request``.
        no_key: ``fairsim.sim.lazy_hits.NO_KEY``.

    Raises:
        RuntimeError: ``bind`` did not succeed. Whatever ``keys_of`` or ``client_of`` raise.
    """
    if _LIVE is None:
        raise RuntimeError("_live_c.bind() did not succeed")
    cdef Py_ssize_t n = len(ordered), i, bs = block_size, prompt_len, cap, nkeys, full
    cdef list lives = PyList_New(n)
    cdef object req, keys, hashes, live, client, out_len, labels, session_id
    cdef object new = object.__new__
    cdef object one = 1
    cdef object zero = 0
    cdef object live_type = _LIVE
    for i in range(n):
        req = ordered[i]
        # keys: engine_block_keys / generated_block_keys; their common case in C
        prompt_len = req.prompt_len
        out_len = req.output_len if colocated else one
        if bs < 1:  # block_keys' ValueError
            keys_of(req, block_size)
        hashes = req.block_hashes
        full = (prompt_len + <Py_ssize_t>out_len - 1) // bs if colocated else prompt_len // bs
        if (type(hashes) is tuple and not req.segments and req.hash_block_size == block_size
                and full <= len(<tuple>hashes)):
            keys = hashes
        elif type(hashes) is tuple and not hashes and not req.segments:
            keys = _unique_keys(req.request_id, full)  # no ids (an Azure row): every key its own
        else:
            keys = keys_of(req, block_size)
        # client: client_of_request; no labels and no session: None
        labels = req.labels
        session_id = req.session_id
        if not labels and session_id is None:
            client = None
        else:
            client = client_of(req, keys)
        nkeys = len(keys)
        cap = (prompt_len - 1) // bs
        live = new(live_type)
        _put(live, F_REQ, req)
        _put(live, F_KEYS, keys)
        _put(live, F_MAX_HIT, PyLong_FromSsize_t(cap if cap < nkeys else nkeys))
        _put(live, F_PROMPT_BLOCKS, PyLong_FromSsize_t(-(-prompt_len // bs)))
        _put(live, F_COMPUTED, zero)
        _put(live, F_BLOCKS, [])
        _put(live, F_NUM_CACHED, zero)
        _put(live, F_CACHED_ADM, None)
        _put(live, F_FIRST_S, None)
        _put(live, F_FIRST_STEP, None)
        _put(live, F_FINISH_S, None)
        _put(live, F_FINISH_STEP, None)
        _put(live, F_PREEMPTIONS, zero)
        _put(live, F_PREEMPTED, False)
        _put(live, F_RELEASED, None)
        _put(live, F_SNAP, None)
        _put(live, F_OUT_LEN, out_len)
        _put(live, F_GENERATED, zero)
        _put(live, F_FIRST_TOKEN, None)
        _put(live, F_LAST_TOKEN, None)
        _put(live, F_DISCARDED, zero)
        _put(live, F_RESUME_CACHED, zero)
        _put(live, F_INDEX, PyLong_FromSsize_t(i))
        _put(live, F_DEC_SEQ, None)
        _put(live, F_DEC_STEP, zero)
        _put(live, F_DEC_C0, zero)
        _put(live, F_DEC_G0, zero)
        _put(live, F_WATCHED, zero)
        _put(live, F_PARTIAL, False)
        _put(live, F_LAST_SNAP, None)
        _put(live, F_CLIENT, client)
        _put(live, F_ARRIVAL_PREFILL, zero)
        _put(live, F_NEXT_KEY, no_key)
        Py_INCREF(live)
        PyList_SET_ITEM(lives, i, live)
    return lives


#: What ``table_columns`` returns, in order: the states' fields, then their requests' fields.
TABLE_FIELDS = ("req", "released_s", "first_token_s", "first_scheduled_s", "finish_s",
                "cached_at_admission", "first_scheduled_step", "finish_step", "preemptions",
                "req.request_id", "req.arrival_time", "req.prompt_len", "req.session_id",
                "req.after", "req.labels")
_STATE = (F_REQ, F_RELEASED, F_FIRST_TOKEN, F_FIRST_S, F_FINISH_S, F_CACHED_ADM, F_FIRST_STEP,
          F_FINISH_STEP, F_PREEMPTIONS)
DEF NSTATE = 9
DEF NTABLE = 15


def table_columns(list lives):
    """``tuple([o.<f> for o in lives] for f in TABLE_FIELDS)`` (a dotted name read through
    ``req``), read in one pass over ``lives``: states made by ``new_lives`` (``_Live`` objects
    of the bound class). ``Engine._request_table``'s comprehensions are the reference.

    Raises:
        RuntimeError: ``bind`` did not succeed. TypeError: an object of another class.
        AttributeError: an unset field (as reading it in Python raises).
    """
    if _LIVE is None:
        raise RuntimeError("_live_c.bind() did not succeed")
    cdef Py_ssize_t n = len(lives), i
    cdef int j
    cdef int state[NSTATE]
    cdef list cols = [PyList_New(n) for j in range(NTABLE)]
    cdef object live, req, value
    for j in range(NSTATE):
        state[j] = _STATE[j]
    for i in range(n):
        live = lives[i]
        if type(live) is not _LIVE:
            raise TypeError(f"table_columns: a {type(live).__name__}, not a state of new_lives")
        for j in range(NSTATE):
            _set(cols[j], i, _get(live, state[j]))
        req = _get(live, F_REQ)
        _set(cols[NSTATE], i, req.request_id)
        _set(cols[NSTATE + 1], i, req.arrival_time)
        _set(cols[NSTATE + 2], i, req.prompt_len)
        _set(cols[NSTATE + 3], i, req.session_id)
        _set(cols[NSTATE + 4], i, req.after)
        _set(cols[NSTATE + 5], i, req.labels)
    return tuple(cols)


cdef inline void _set(list column, Py_ssize_t i, object value) noexcept:
    """Item ``i`` of ``column`` (a new list from ``PyList_New``: the item is NULL) set to ``value``."""
    Py_INCREF(value)
    PyList_SET_ITEM(column, i, value)


cdef class Finisher:
    """``Engine._finish_batch`` of one engine (the reference, statement for statement), called
    as ``finisher(batch, step, start, end)`` and returning the number of requests finished.

    The states are read and written in their slots (``bind``); the engine's ``pool``,
    ``_arrivals`` and ``_record_gap`` are looked up at each use, as the reference does.
    ``inline_finish``: the engine's ``_request_finished`` is ``Engine``'s (set ``finish_s``,
    ``finish_step``, then ``Arrivals.finished``), done here; else the engine's method is called.
    A batch with an item that is not a ``(state, new_tokens, context)`` tuple of the bound class
    is handed whole to ``reference`` (``Engine._finish_batch``, called with the engine).
    ``tests/test_live_compiled.py`` compares whole runs' tables with and without it.

    Raises:
        RuntimeError: ``bind`` did not succeed (at creation). Whatever the reference raises.
    """

    cdef object engine
    cdef object reference
    cdef bint inline_finish

    def __init__(self, engine, reference, bint inline_finish):
        if _LIVE is None:
            raise RuntimeError("_live_c.bind() did not succeed")
        self.engine = engine
        self.reference = reference
        self.inline_finish = inline_finish

    def __call__(self, list batch, object step, object start, object end):
        cdef Py_ssize_t finished = 0
        cdef object item, live, req, generated, computed
        cdef object live_type = _LIVE
        engine = self.engine
        for item in batch:
            if type(item) is not tuple or len(<tuple>item) != 3 or type((<tuple>item)[0]) is not live_type:
                return self.reference(engine, batch, step, start, end)
        for item in batch:
            live = (<tuple>item)[0]
            if _get(live, F_FIRST_S) is None:
                _put(live, F_FIRST_S, start)
                _put(live, F_FIRST_STEP, step)
            computed = _get(live, F_COMPUTED) + (<tuple>item)[1]
            _put(live, F_COMPUTED, computed)
            req = _get(live, F_REQ)
            generated = _get(live, F_GENERATED)
            if computed < req.prompt_len + generated:
                continue  # a chunk of a longer prefill: no token sampled
            generated = generated + 1
            _put(live, F_GENERATED, generated)
            if _get(live, F_FIRST_TOKEN) is None:
                _put(live, F_FIRST_TOKEN, end)
            else:
                engine._record_gap(live, step, end - _get(live, F_LAST_TOKEN))
            _put(live, F_LAST_TOKEN, end)
            if generated >= _get(live, F_OUT_LEN):  # (``_record_gap`` leaves ``generated`` as it is)
                if self.inline_finish:
                    _put(live, F_FINISH_S, end)
                    _put(live, F_FINISH_STEP, step)
                    engine._arrivals.finished(req.request_id, end)
                else:
                    engine._request_finished(live, end, step)
                # Deepest block first, so the tail is evicted before the shared prefix.
                engine.pool.free(reversed(_get(live, F_BLOCKS)))
                _put(live, F_BLOCKS, [])
                finished += 1
        return finished
