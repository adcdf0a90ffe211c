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
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from libc.stdint cimport uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memchr


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
    cdef const long long[:] view
    cdef Py_ssize_t j, m, total = 0
    cdef long long h, low = 0, high = -1
    cdef int overflow
    for ids in id_lists:  # first: every id an int within 64 bits, and their range
        if type(ids) is array:
            if (<array>ids).typecode != 'q':
                return None
            view = ids
            total += view.shape[0]
            for j in range(view.shape[0]):
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
            view = ids
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


cdef inline Py_ssize_t _skip_ws(const unsigned char* p, Py_ssize_t i, Py_ssize_t n) noexcept:
    """The first position from ``i`` that is not JSON whitespace (space, tab, LF, CR)."""
    while i < n and (p[i] == 32 or p[i] == 9 or p[i] == 10 or p[i] == 13):
        i += 1
    return i


cdef Py_ssize_t _scan_ids(const unsigned char* p, Py_ssize_t i, Py_ssize_t n, long long* out) noexcept:
    """From just after a ``[``: JSON integers (``0`` or 1-18 digits without a leading zero)
    separated by commas, up to the ``]``; their values into ``out`` (when not NULL). Returns the
    position of the ``]``, -1 where the text is anything else, and the count in ``out``'s absence
    is taken by the caller from a first pass (``split_ids``)."""
    cdef Py_ssize_t k = 0, start
    cdef long long v
    i = _skip_ws(p, i, n)
    if i < n and p[i] == 93:  # ]
        return i
    while True:
        if i >= n or not 48 <= p[i] <= 57:
            return -1
        start = i
        v = 0
        while i < n and 48 <= p[i] <= 57:
            v = v * 10 + (p[i] - 48)
            i += 1
            if i - start > 18:
                return -1
        if p[start] == 48 and i - start > 1:  # a leading zero: not JSON
            return -1
        if out != NULL:
            out[k] = v
        k += 1
        i = _skip_ws(p, i, n)
        if i < n and p[i] == 44:  # ,
            i = _skip_ws(p, i + 1, n)
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
    i = _skip_ws(p, at + 10, n)
    if i >= n or p[i] != 58:  # :
        return None
    i = _skip_ws(p, i + 1, n)
    if i >= n or p[i] != 91:  # [
        return None
    end = _scan_ids(p, i + 1, n, NULL)
    if end < 0:
        return None
    count = 0  # the commas between the brackets, plus one where there is an integer
    for j in range(i + 1, end):
        if p[j] == 44:
            count += 1
    k = _skip_ws(p, i + 1, n)
    if k < end:
        count += 1
    ids = clone(_Q, count, False)
    _scan_ids(p, i + 1, n, ids.data.as_longlongs)
    return raw[:i] + b"[]" + raw[end + 1:], ids
