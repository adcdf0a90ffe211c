# cython: language_level=3, boundscheck=False, wraparound=False
"""Re-chained hash ids, typed: the compiled twin of ``fairsim.traces.formats.bailian.chain_ids``.

``chain_ids`` names block ``j`` of a request by the pair (name of block ``j - 1``, id ``j``),
interned to ``0, 1, 2, ...`` in order of first appearance. The reference keys a dict by those
pairs as tuples: on a Qwen-Bailian trace (16-token blocks, hundreds of ids per request) that is
a tuple, a hash and a dict probe per id, most of a read's time and memory (3,000 requests of the
conversation trace at 16-token blocks, 2.5 M ids: ~1.3 s and ~300 MB of pair tuples). Here the
pairs are two 64-bit integers in an open-addressing table, and each name is one Python int
object shared by every request that has it. Ids that are not Python ints within 64 bits (a
``u64`` hash written as text, parsed to an int beyond ``2**63 - 1``) make it return None: the
reader then runs the reference. ``tests/test_chain_compiled.py`` compares the two.
"""

from cpython.array cimport array, clone
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.long cimport PyLong_AsLongLongAndOverflow
from cpython.object cimport Py_SIZE
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from libc.stdint cimport uint64_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memchr, memcmp, memcpy

from fairsim.traces.formats._json_bytes cimport after_colon, json_uint, object_key, skip_ws


cdef inline uint64_t _mix(long long parent, long long h) noexcept:
    """splitmix64's finaliser over the pair (a well-spread slot for sequential ids)."""
    cdef uint64_t z = (<uint64_t>h) ^ ((<uint64_t>parent) * 0x9E3779B97F4A7C15ULL)
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL
    return z ^ (z >> 31)


cdef class _Pairs:
    """``(parent, id) -> name`` for 64-bit integers: linear probing, at most half full."""
    cdef long long* parents
    cdef long long* ids
    cdef long long* names  # -1: an empty slot
    cdef Py_ssize_t capacity, count

    def __cinit__(self):
        self.capacity = 0
        self.count = 0
        self._allocate(1 << 12)

    def __dealloc__(self):
        free(self.parents)
        free(self.ids)
        free(self.names)

    cdef int _allocate(self, Py_ssize_t capacity) except -1:
        cdef Py_ssize_t i
        self.parents = <long long*>malloc(capacity * sizeof(long long))
        self.ids = <long long*>malloc(capacity * sizeof(long long))
        self.names = <long long*>malloc(capacity * sizeof(long long))
        if self.parents == NULL or self.ids == NULL or self.names == NULL:
            raise MemoryError()
        for i in range(capacity):
            self.names[i] = -1
        self.capacity = capacity
        return 0

    cdef int _grow(self) except -1:
        cdef long long* parents = self.parents
        cdef long long* ids = self.ids
        cdef long long* names = self.names
        cdef Py_ssize_t old = self.capacity, i, slot, mask
        self.parents = self.ids = self.names = NULL
        try:
            self._allocate(2 * old)
        except MemoryError:
            free(self.parents)
            free(self.ids)
            free(self.names)
            self.parents, self.ids, self.names, self.capacity = parents, ids, names, old
            raise
        mask = self.capacity - 1
        for i in range(old):
            if names[i] >= 0:
                slot = <Py_ssize_t>(_mix(parents[i], ids[i]) & <uint64_t>mask)
                while self.names[slot] >= 0:
                    slot = (slot + 1) & mask
                self.parents[slot], self.ids[slot], self.names[slot] = parents[i], ids[i], names[i]
        free(parents)
        free(ids)
        free(names)
        return 0

    cdef long long name(self, long long parent, long long h, long long new) except -2:
        """The pair's name; at its first sight it is given ``new`` (and ``count`` grows)."""
        cdef Py_ssize_t mask, slot
        if 2 * (self.count + 1) > self.capacity:
            self._grow()
        mask = self.capacity - 1
        slot = <Py_ssize_t>(_mix(parent, h) & <uint64_t>mask)
        while self.names[slot] >= 0:
            if self.parents[slot] == parent and self.ids[slot] == h:
                return self.names[slot]
            slot = (slot + 1) & mask
        self.parents[slot], self.ids[slot], self.names[slot] = parent, h, new
        self.count += 1
        return new


cdef class _FirstSight:
    """For dense ids ``0 <= h < size``: the name and parent of each id's first pair. Chained ids
    (the files' own, TRACES.md) always come with the same parent, so every later sight of ``h``
    is that pair: two array reads, no hashing; a pair with another parent goes to ``_Pairs``.
    Names are below the count of ids read, kept as 32-bit ints (the caller checks it fits)."""
    cdef int* parents
    cdef int* names  # -1: not seen yet

    def __cinit__(self, Py_ssize_t size):
        cdef Py_ssize_t i
        self.parents = <int*>malloc(size * sizeof(int))
        self.names = <int*>malloc(size * sizeof(int))
        if self.parents == NULL or self.names == NULL:
            raise MemoryError()
        for i in range(size):
            self.names[i] = -1

    def __dealloc__(self):
        free(self.parents)
        free(self.names)


#: Dense ids: at most this many table slots per id read (plus a constant), else only ``_Pairs``.
cdef Py_ssize_t _DENSE_PER_ID = 4


def chain_ids(list id_lists):
    """``bailian.chain_ids(id_lists)`` (the same tuples of the same ints), or None where an id is
    not a Python ``int`` within 64 bits (nothing is kept: the caller runs the reference).

    Names are handed out at each pair's first sight, as the reference does; ids in
    ``0 .. 4 x (ids read) + 65536`` (the files' remapped ids) are first looked up by id
    (``_FirstSight``), the rest and the pairs of an id seen with another parent in ``_Pairs``.

    Args:
        id_lists: Each request's ids (a list or tuple of ints, or an ``array('q')``), in the
            order the reader names them.
    """
    cdef object ids, x, name_obj
    cdef const long long* view = NULL  # an array('q')'s items, read in place (no buffer acquired)
    cdef Py_ssize_t j, m, total = 0
    cdef long long h, low = 0, high = -1
    cdef int overflow
    for ids in id_lists:  # first: every id an int within 64 bits, and their range
        if type(ids) is array:
            if (<array>ids).typecode != 'q':
                return None
            view = (<array>ids).data.as_longlongs
            m = Py_SIZE(ids)
            total += m
            for j in range(m):
                if view[j] < low:
                    low = view[j]
                if view[j] > high:
                    high = view[j]
            continue
        if type(ids) is not list and type(ids) is not tuple:
            return None
        m = len(ids)
        total += m
        for j in range(m):
            x = ids[j]
            if type(x) is not int:
                return None
            h = PyLong_AsLongLongAndOverflow(x, &overflow)
            if overflow:
                return None
            if h < low:
                low = h
            if h > high:
                high = h
    cdef _FirstSight first = None
    if low >= 0 and high < _DENSE_PER_ID * total + 65536 and total < 2**31 - 1:
        first = _FirstSight(high + 1)
    cdef _Pairs pairs = _Pairs()
    cdef list names = []  # name -> its Python int, made once
    cdef list out = []
    cdef tuple chained
    cdef long long parent, name, count = 0, seen
    cdef bint is_array
    for ids in id_lists:
        is_array = type(ids) is array
        if is_array:
            view = (<array>ids).data.as_longlongs
        m = len(ids)
        chained = PyTuple_New(m)
        parent = -1
        for j in range(m):
            h = view[j] if is_array else PyLong_AsLongLongAndOverflow(ids[j], &overflow)
            if first is not None and first.names[h] >= 0 and first.parents[h] == parent:
                name = first.names[h]
            elif first is not None and first.names[h] < 0:
                name = count
                first.names[h] = <int>count
                first.parents[h] = <int>parent
                count += 1
            else:
                seen = pairs.count
                name = pairs.name(parent, h, count)
                if pairs.count != seen:
                    count += 1
            if name == len(names):
                names.append(name)
            name_obj = names[name]
            Py_INCREF(name_obj)
            PyTuple_SET_ITEM(chained, j, name_obj)
            parent = name
        out.append(chained)
    return out


cdef bytes _IDS_KEY = b'"hash_ids"'
cdef array _Q = array("q")


cdef Py_ssize_t _scan_ids(const unsigned char* p, Py_ssize_t i, Py_ssize_t n, long long* out) noexcept:
    """From just after a ``[``: JSON integers (``0`` or 1-18 digits without a leading zero)
    separated by commas, up to the ``]``; their values into ``out`` (when not NULL). Returns the
    position of the ``]``, -1 where the text is anything else, and the count in ``out``'s absence
    is taken by the caller from a first pass (``split_ids``)."""
    cdef Py_ssize_t k = 0
    cdef long long v
    i = skip_ws(p, i, n)
    if i < n and p[i] == 93:  # ]
        return i
    while True:
        i = json_uint(p, i, n, &v)
        if i < 0:
            return -1
        if out != NULL:
            out[k] = v
        k += 1
        i = skip_ws(p, i, n)
        if i < n and p[i] == 44:  # ,
            i = skip_ws(p, i + 1, n)
        elif i < n and p[i] == 93:
            return i
        else:
            return -1


def split_ids(bytes raw):
    """A Bailian line's ``hash_ids`` read from its bytes: ``(rest, ids)``, ``rest`` the line with
    that array written ``[]`` and ``ids`` its integers as an ``array('q')``; or None.

    Taken only where that is exactly what a JSON parser sees: no backslash in the line (so no
    escaped key, and ``"hash_ids"`` followed by ``:`` can only be a key), exactly one
    ``"hash_ids"`` (one such key), and an array of non-negative integers of at most 18 digits
    (within 64 bits) in JSON's spelling. The caller parses ``rest`` and checks that its top-level
    ``hash_ids`` is the empty array put there (``iter_json_lines``' ``split``), so a nested key,
    or a line that is not JSON, goes to the parser whole.
    """
    cdef const unsigned char* p = <const unsigned char*>PyBytes_AS_STRING(raw)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(raw), at, i, j, k, end, count
    cdef array ids
    if memchr(p, 92, n) != NULL:  # a backslash
        return None
    at = raw.find(_IDS_KEY)
    if at < 0 or raw.find(_IDS_KEY, at + 1) >= 0:
        return None
    i = skip_ws(p, at + 10, n)
    if i >= n or p[i] != 58:  # :
        return None
    i = skip_ws(p, i + 1, n)
    if i >= n or p[i] != 91:  # [
        return None
    end = _scan_ids(p, i + 1, n, NULL)
    if end < 0:
        return None
    count = 0  # the commas between the brackets, plus one where there is an integer
    for j in range(i + 1, end):
        if p[j] == 44:
            count += 1
    k = skip_ws(p, i + 1, n)
    if k < end:
        count += 1
    ids = clone(_Q, count, False)
    _scan_ids(p, i + 1, n, ids.data.as_longlongs)
    return raw[:i] + b"[]" + raw[end + 1:], ids


# -- A Bailian line read whole from its bytes ---------------------------------------------------

cdef enum:
    _R_CHAT = 0
    _R_PARENT = 1
    _R_TS = 2
    _R_IN = 3
    _R_OUT = 4
    _R_IDS = 5
    _R_TYPE = 6
    _R_TURN = 7
    _R_REQUIRED = 63  # the six fields ``bailian._KNOWN`` requires


#: The plain row's keys, in the order of the codes above.
cdef tuple _ROW_KEYS = (b"chat_id", b"parent_chat_id", b"timestamp", b"input_length", b"output_length",
                        b"hash_ids", b"type", b"turn")


cdef inline int _row_field(const unsigned char* p, Py_ssize_t start, Py_ssize_t length) except? -2:
    """Which field of a plain Bailian row the key ``p[start:start + length]`` names, or -1."""
    cdef int f
    cdef bytes key
    for f in range(8):
        key = <bytes>_ROW_KEYS[f]
        if PyBytes_GET_SIZE(key) == length and memcmp(PyBytes_AS_STRING(key), p + start, length) == 0:
            return f
    return -1


cdef class RowScanner:
    """``bailian.read``'s checks of one plain row, made on the line's bytes (no dict, no list).

    A plain row is a JSON object with exactly ``chat_id``, ``parent_chat_id``, ``timestamp``,
    ``input_length``, ``output_length`` and ``hash_ids``, and optionally ``type`` and ``turn``
    (the public files' eight fields), each once, keys without escapes, in any order and spacing:
    ``chat_id``, ``input_length``, ``output_length`` (both >= 1) and ``turn`` integers of 1-18
    digits; ``parent_chat_id`` such an integer or ``-1``; ``timestamp`` such an integer or one
    with a fraction (``digits.digits``, read by ``loads``, so its double is the JSON parser's);
    ``type`` a string of printable ASCII without escapes; ``hash_ids`` such integers, as many as
    ``check_hash_count`` takes for ``block``. Calling it on such a line returns what the reader's
    checks return for it: ``(chat, parent, timestamp, prompt, output, ids, labels)``, the
    timestamp a float (``need_number``'s), the ids an ``array('q')`` (``split_ids``'), the
    labels ``{"type": ..., "turn": ...}`` with those present, in the line's order. Any other
    line gives None and is read by the JSON parser and checked field by field, as before, so
    every error and every unusual value is the reference's (``tests/test_chain_compiled.py``).

    Args:
        block: The hash block size (``check_hash_count``'s).
        loads: ``orjson.loads`` (a timestamp with a fraction is read by it).
    """
    cdef long long block
    cdef object loads
    cdef long long* buf
    cdef Py_ssize_t capacity
    cdef bytes last_type_bytes  # the last ``type`` read, and its str: equal labels share one
    cdef str last_type

    def __cinit__(self, long long block, object loads):
        if block < 1:
            raise ValueError(f"block must be >= 1, got {block}")
        self.block = block
        self.loads = loads
        self.buf = NULL
        self.capacity = 0
        self.last_type_bytes = None
        self.last_type = None

    def __dealloc__(self):
        free(self.buf)

    cdef int _reserve(self, Py_ssize_t need) except -1:
        cdef long long* grown
        cdef Py_ssize_t size
        if need <= self.capacity:
            return 0
        size = 2 * self.capacity if 2 * self.capacity > need else need
        if size < 256:
            size = 256
        grown = <long long*>realloc(self.buf, size * sizeof(long long))
        if grown == NULL:
            raise MemoryError()
        self.buf = grown
        self.capacity = size
        return 0

    def __call__(self, bytes raw):
        cdef const unsigned char* p = <const unsigned char*>PyBytes_AS_STRING(raw)
        cdef Py_ssize_t n = PyBytes_GET_SIZE(raw), i, start, count = 0, ts_start = 0, ts_end = 0
        cdef Py_ssize_t type_start = 0, type_len = 0
        cdef int seen = 0, f, first_label = -1
        cdef long long v, values[8]
        cdef bint ts_fraction = False
        i = skip_ws(p, 0, n)
        if i >= n or p[i] != 123:  # {
            return None
        i += 1
        while True:
            i = object_key(p, i, n, &start)
            if i < 0:
                return None
            f = _row_field(p, start, i - start)
            if f < 0 or seen & (1 << f):
                return None
            seen |= 1 << f
            i = after_colon(p, i, n)
            if i < 0:
                return None
            if f == _R_IDS:
                if i >= n or p[i] != 91:  # [
                    return None
                i = skip_ws(p, i + 1, n)
                if i < n and p[i] == 93:  # ]
                    i += 1
                else:
                    while True:
                        i = json_uint(p, i, n, &v)
                        if i < 0:
                            return None
                        if count == self.capacity:
                            self._reserve(count + 1)
                        self.buf[count] = v
                        count += 1
                        i = skip_ws(p, i, n)
                        if i < n and p[i] == 44:  # ,
                            i = skip_ws(p, i + 1, n)
                        elif i < n and p[i] == 93:
                            i += 1
                            break
                        else:
                            return None
            elif f == _R_TYPE:
                if i >= n or p[i] != 34:
                    return None
                i += 1
                type_start = i
                while i < n and p[i] != 34:
                    if p[i] == 92 or p[i] < 32 or p[i] > 126:  # escapes and non-ASCII: the parser's
                        return None
                    i += 1
                if i >= n:
                    return None
                type_len = i - type_start
                i += 1
                if first_label < 0:
                    first_label = f
            elif f == _R_PARENT and i + 1 < n and p[i] == 45 and p[i + 1] == 49:  # -1
                i += 2
                values[f] = -1
                if i < n and 48 <= p[i] <= 57:  # -10 and beyond: the reader's message
                    return None
            else:
                start = i
                i = json_uint(p, i, n, &values[f])
                if i < 0:
                    return None
                if f == _R_TS and i < n and p[i] == 46:  # a fraction: the parser reads the number
                    i += 1
                    if i >= n or not 48 <= p[i] <= 57:
                        return None
                    while i < n and 48 <= p[i] <= 57:
                        i += 1
                    ts_fraction = True
                    ts_start, ts_end = start, i
                elif f == _R_TURN and first_label < 0:
                    first_label = f
            i = skip_ws(p, i, n)
            if i < n and p[i] == 44:
                i += 1
            elif i < n and p[i] == 125:  # }
                i += 1
                break
            else:
                return None
        if seen & _R_REQUIRED != _R_REQUIRED or skip_ws(p, i, n) != n:
            return None
        if values[_R_IN] < 1 or values[_R_OUT] < 1:  # (an output of 0 gets a label: the reader's)
            return None
        if count != values[_R_IN] // self.block and count != -(-values[_R_IN] // self.block):
            return None
        if ts_fraction:
            ts = self.loads(raw[ts_start:ts_end])
            if type(ts) is not float:
                return None
        else:
            ts = <double>values[_R_TS]  # float(int): rounded to nearest, ties to even
        cdef array ids = clone(_Q, count, False)
        if count:
            memcpy(ids.data.as_longlongs, self.buf, count * sizeof(long long))
        cdef dict labels = {}
        if seen & (1 << _R_TYPE) and first_label == _R_TYPE:
            labels["type"] = self._type(p, type_start, type_len)
        if seen & (1 << _R_TURN):
            labels["turn"] = values[_R_TURN]
        if seen & (1 << _R_TYPE) and first_label != _R_TYPE:
            labels["type"] = self._type(p, type_start, type_len)
        return (values[_R_CHAT], values[_R_PARENT], ts, values[_R_IN], values[_R_OUT], ids, labels)

    cdef str _type(self, const unsigned char* p, Py_ssize_t start, Py_ssize_t length):
        """The ``type`` string; the last one's object again where the bytes are equal."""
        cdef bytes b = self.last_type_bytes
        if b is not None and PyBytes_GET_SIZE(b) == length and memcmp(PyBytes_AS_STRING(b), p + start, length) == 0:
            return self.last_type
        b = (<const char*>p)[start:start + length]
        self.last_type_bytes = b
        self.last_type = b.decode("ascii")
        return self.last_type


# -- The requests, their fields written into their slots -----------------------------------------

from fairsim.types import Request
from fairsim.traces.formats._request_slots cimport RequestSlots, put_field, request_slots

cdef RequestSlots _SLOTS = request_slots(Request)


def requests_of(list accepted, list named, object block):
    """``bailian.read``'s requests: for each ``(line, (request_id, arrival, prompt), (output,
    labels, session, after, delay), ids)`` of ``accepted`` and its names in ``named``,
    ``make_request(request_id, arrival, prompt, names, block, output, labels, session, after,
    delay, ())``, its fields written into the new object's slots (``_request_slots``); or None
    where ``Request``'s fields are not all plain slots (the reader then calls ``make_request``).

    ``Request.__post_init__`` has nothing to refuse in what the reader accepted (its prompt and
    output lengths >= 1, arrivals from the earliest, delays ``max(0.0, ...)``, ``after`` another
    chat, at most ``prompt // block`` names, ``block`` >= 1), and is run only where a value is
    outside those bounds (never, from the reader): so the objects and any error are
    ``make_request``'s (``tests/test_chain_compiled.py``).
    """
    if not _SLOTS.direct or len(accepted) != len(named):
        return None
    cdef list out = []
    cdef object new = object.__new__
    cdef tuple row, head, tail
    cdef object names, req
    cdef Py_ssize_t i
    for i in range(len(accepted)):
        row = <tuple>accepted[i]
        head = <tuple>row[1]
        tail = <tuple>row[2]
        names = named[i]
        req = new(Request)
        put_field(&_SLOTS, req, 0, head[0])
        put_field(&_SLOTS, req, 1, head[1])
        put_field(&_SLOTS, req, 2, head[2])
        put_field(&_SLOTS, req, 3, names)
        put_field(&_SLOTS, req, 4, block)
        put_field(&_SLOTS, req, 5, tail[0])
        put_field(&_SLOTS, req, 6, tail[1])
        put_field(&_SLOTS, req, 7, tail[2])
        put_field(&_SLOTS, req, 8, tail[3])
        put_field(&_SLOTS, req, 9, tail[4])
        put_field(&_SLOTS, req, 10, ())
        if not (type(head[2]) is int and head[2] >= 1 and type(tail[0]) is int and tail[0] >= 1
                and head[1] >= 0 and tail[4] >= 0 and type(block) is int and block >= 1
                and len(names) * block <= head[2] and (tail[3] is None or tail[3] != head[0])):
            req.__post_init__()  # (what make_request would raise)
        out.append(req)
    return out
