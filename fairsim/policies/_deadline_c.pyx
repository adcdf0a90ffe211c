# cython: language_level=3
"""Compiled twin of ``fairsim.policies.deadline_fast.DueBlocks`` (``fairway-deadline``'s due test).

``DueBlocks`` here is the reference statement for statement: the same blocks (split, emptied in
place, compacted at the same points), the same segment tree over them, the same walk, the same
keys marked and the same floor returned by ``mark_due`` (``tests/test_deadline_compiled.py``
compares the two call by call). The tree's totals and leasts are C 128-bit integers while every
leaf is a 64-bit int or ``inf`` (a node sums at most 2^40 leaves, so no sum overflows, and
``inf`` is a value above them all, never due, whatever is subtracted from it), and Python
objects, with the reference's code, from the first value past that on (``DueBlocks._go_big``):
the sums are the reference's at any size. A block holds its deadlines, works and urgent flags in
C arrays while each value is a 64-bit int, and sums its margins there with each sum checked
(``Block._margins_c``); a block with a value or a sum past that holds the reference's Python
lists from then on (``Block._to_objects``), summed by ``fairsim.policies._fast_lane_c``'s
``block_sums``/``open_due`` on 64-bit integers and by the Python expressions of the reference
where they leave 64 bits or that extension is absent.
``DeadlineCore`` compiles ``DeadlineOrder``'s bookkeeping the same way (see there).

Why compiled: at the conversation trace's native rate about 3,800 requests wait and every
admission and arrival goes through a block (a bisect, four list edits, a walk up the tree):
the interpreter's dispatch of those few lines dominated ``fairway-deadline``'s extra cost over
Fairway (docs/performance.md).
"""

import math

cimport cython
from itertools import accumulate, compress, count, repeat
from operator import ge, gt, not_, sub

try:  # the 64-bit block sums (optional like this module; the Python expressions otherwise)
    from fairsim.policies._fast_lane_c import MODE_CODES, block_sums, open_due
except ImportError:  # pragma: no cover - built together by setup.py
    MODE_CODES, block_sums, open_due = {"queue": 0, "own": 1, "none": 2}, None, None

from libc.math cimport fabs, floor as c_floor, isfinite, round as c_round
from cpython.long cimport (PyLong_AsLongLongAndOverflow, PyLong_FromDouble, PyLong_FromLongLong,
                           PyLong_FromUnsignedLongLong)
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from libc.string cimport memcpy, memmove

cdef extern from *:
    ctypedef long long i128 "__int128"

cdef extern from *:
    """
    static int __fsd_add_overflow(long long a, long long b, long long* r) { return __builtin_add_overflow(a, b, r); }
    static int __fsd_sub_overflow(long long a, long long b, long long* r) { return __builtin_sub_overflow(a, b, r); }
    """
    bint __builtin_add_overflow "__fsd_add_overflow" (long long a, long long b, long long* r) nogil
    bint __builtin_sub_overflow "__fsd_sub_overflow" (long long a, long long b, long long* r) nogil

cdef object _INF = math.inf
cdef object _floor_of = math.floor

# The segment tree in C (``DueBlocks._ct``/``_cl``): 128-bit values, the leaves 64-bit ints, so no
# sum of the tree overflows (a node sums at most 2^40 leaves) and ``inf`` has a value of its own.
cdef i128 _I_INF = (<i128>1) << 120  # the reference's ``math.inf`` (a least with no margin)
cdef i128 _T_CAP = (<i128>1) << 115  # a clock past 64 bits compares as this: every finite tree
# value, and a value less the totals before it, is below 2^112 in magnitude
cdef i128 _I64_MIN = -((<i128>1) << 63)
cdef i128 _I64_END = (<i128>1) << 63


cdef inline bint _to_i128(object x, i128* out) except -1:
    """``x`` as a C tree value: an int of 64 bits, or ``math.inf``; False for anything else
    (the tree then goes to Python objects, ``DueBlocks._go_big``)."""
    cdef int overflow = 0
    cdef long long v
    if type(x) is int:
        v = PyLong_AsLongLongAndOverflow(x, &overflow)
        if overflow:
            return False
        out[0] = v
        return True
    if type(x) is float and x == _INF:
        out[0] = _I_INF
        return True
    return False


cdef object _from_i128(i128 v):
    """A C tree value as the reference holds it: ``math.inf``, or an int."""
    if v == _I_INF:
        return _INF
    if _I64_MIN <= v < _I64_END:
        return PyLong_FromLongLong(<long long>v)
    return (PyLong_FromLongLong(<long long>(v >> 64)) << 64) + PyLong_FromUnsignedLongLong(
        <unsigned long long>(v & <i128>0xFFFFFFFFFFFFFFFF))


@cython.boundscheck(False)  # indices in range by construction (a bisect; tree nodes < 2 size)
@cython.wraparound(False)
cdef Py_ssize_t _bisect_key(list keys, tuple key) except -1:
    """``bisect_left(keys, key)`` for deadline keys ``(D, arrival, request_id)``: the deadlines
    compared first, as ints (the whole tuples only where they tie), the same index."""
    cdef Py_ssize_t lo = 0, hi = len(keys), mid
    cdef tuple k
    d = key[0]
    while lo < hi:
        mid = (lo + hi) >> 1
        k = <tuple>keys[mid]
        if k[0] < d:
            lo = mid + 1
        elif k[0] > d:
            hi = mid
        elif k < key:
            lo = mid + 1
        else:
            hi = mid
    return lo


cdef inline bint _i64(object x, long long* out):
    """``x`` an ``int`` of 64 bits: into ``out`` (False for a value past them, or not an int)."""
    cdef int overflow = 0
    cdef long long v
    if type(x) is not int:
        return False
    v = PyLong_AsLongLongAndOverflow(x, &overflow)
    if overflow:
        return False
    out[0] = v
    return True


cdef class Block:
    """``deadline_fast._Block``: a run of the deadline order (keys, deadlines, works, urgent
    flags), its total work and least margin, and an emptied block's place (``gone``).

    The deadlines, works and flags are C arrays (``_d``, ``_w``, ``_u``) while every deadline and
    work is an ``int`` of 64 bits, so a block's sums, opens and bisects read contiguous memory,
    not scattered Python ints; the block holds Python lists instead (``_obj``, the reference's
    lists and code) from the first value past that on (``_to_objects``). ``dl``, ``work`` and
    ``urgent`` read either as the reference's lists (tests)."""

    cdef public list keys
    cdef public object total, least, gone
    cdef long long* _d
    cdef long long* _w
    cdef char* _u
    cdef Py_ssize_t _cap
    cdef readonly bint _obj  # the lists below hold the block (a value past 64 bits came)
    cdef list _odl, _owork, _ourg

    def __cinit__(self, *args):
        self._d = self._w = NULL
        self._u = NULL
        self._cap = 0
        self._obj = False

    def __init__(self, list keys, list work, list urgent):
        cdef Py_ssize_t j, n = len(keys)
        self.keys = keys
        self.total = 0
        self.least = _INF
        self.gone = None
        self._reserve(n)
        for j in range(n):
            if not (_i64((<tuple>keys[j])[0], &self._d[j]) and _i64(work[j], &self._w[j])):
                self._odl, self._owork, self._ourg = [k[0] for k in keys], list(work), list(urgent)
                self._obj = True
                return
            self._u[j] = urgent[j] is True

    def __dealloc__(self):
        PyMem_Free(self._d)
        PyMem_Free(self._w)
        PyMem_Free(self._u)

    cdef int _reserve(self, Py_ssize_t n) except -1:
        """Room for ``n`` values in the C arrays."""
        cdef Py_ssize_t cap = self._cap if self._cap else 16
        cdef void* p
        if n <= self._cap:
            return 0
        while cap < n:
            cap *= 2
        p = PyMem_Realloc(self._d, cap * sizeof(long long))
        if p is NULL:
            raise MemoryError()
        self._d = <long long*>p
        p = PyMem_Realloc(self._w, cap * sizeof(long long))
        if p is NULL:
            raise MemoryError()
        self._w = <long long*>p
        p = PyMem_Realloc(self._u, cap * sizeof(char))
        if p is NULL:
            raise MemoryError()
        self._u = <char*>p
        self._cap = cap
        return 0

    cdef int _to_objects(self) except -1:
        """From now on the block in Python lists (the reference's), with the same values."""
        cdef Py_ssize_t j, n
        if not self._obj:
            n = len(self.keys)
            self._odl = [PyLong_FromLongLong(self._d[j]) for j in range(n)]
            self._owork = [PyLong_FromLongLong(self._w[j]) for j in range(n)]
            self._ourg = [self._u[j] == 1 for j in range(n)]
            self._obj = True
        return 0

    @property
    def dl(self):
        """The keys' deadlines, as the reference's list."""
        if self._obj:
            return self._odl
        return [PyLong_FromLongLong(self._d[j]) for j in range(len(self.keys))]

    @property
    def work(self):
        """The works (ns), as the reference's list."""
        if self._obj:
            return self._owork
        return [PyLong_FromLongLong(self._w[j]) for j in range(len(self.keys))]

    @property
    def urgent(self):
        """The urgent flags, as the reference's list."""
        if self._obj:
            return self._ourg
        return [self._u[j] == 1 for j in range(len(self.keys))]

    cdef inline bint _is_urgent(self, Py_ssize_t j):
        return self._ourg[j] is True if self._obj else self._u[j] == 1

    @cython.boundscheck(False)
    @cython.wraparound(False)
    cdef Py_ssize_t _bisect(self, tuple key) except -1:
        """``bisect_left(keys, key)``: on the C deadlines (ints; the tuples only where they tie)."""
        cdef Py_ssize_t lo = 0, hi = len(self.keys), mid
        cdef long long d
        cdef long long* D = self._d
        if self._obj or not _i64(key[0], &d):
            return _bisect_key(self.keys, key)
        while lo < hi:
            mid = (lo + hi) >> 1
            if D[mid] < d:
                lo = mid + 1
            elif D[mid] > d:
                hi = mid
            elif <tuple>self.keys[mid] < key:
                lo = mid + 1
            else:
                hi = mid
        return lo

    cdef int _insert(self, Py_ssize_t j, tuple key, object work) except -1:
        """``key`` (work ``work``, not urgent) at index ``j`` of the four sequences."""
        cdef Py_ssize_t n = len(self.keys)
        cdef long long d, w
        if not self._obj:
            if _i64(key[0], &d) and _i64(work, &w):
                self._reserve(n + 1)
                if j < n:
                    memmove(&self._d[j + 1], &self._d[j], (n - j) * sizeof(long long))
                    memmove(&self._w[j + 1], &self._w[j], (n - j) * sizeof(long long))
                    memmove(&self._u[j + 1], &self._u[j], (n - j) * sizeof(char))
                self._d[j], self._w[j], self._u[j] = d, w, 0
                self.keys.insert(j, key)
                return 0
            self._to_objects()
        self.keys.insert(j, key)
        self._odl.insert(j, key[0])
        self._owork.insert(j, work)
        self._ourg.insert(j, False)
        return 0

    cdef object _delete(self, Py_ssize_t j):
        """Drop index ``j`` of the four sequences; returns its work."""
        cdef Py_ssize_t n = len(self.keys)
        del self.keys[j]
        if self._obj:
            w = self._owork[j]
            del self._odl[j], self._owork[j], self._ourg[j]
            return w
        w = PyLong_FromLongLong(self._w[j])
        if j < n - 1:
            memmove(&self._d[j], &self._d[j + 1], (n - 1 - j) * sizeof(long long))
            memmove(&self._w[j], &self._w[j + 1], (n - 1 - j) * sizeof(long long))
            memmove(&self._u[j], &self._u[j + 1], (n - 1 - j) * sizeof(char))
        return w

    cdef Block _cut(self, Py_ssize_t half):
        """Move the values from ``half`` on into a new block (returned), the rest kept here."""
        cdef Py_ssize_t n = len(self.keys), m = n - half
        cdef Block c
        if self._obj:
            c = Block(self.keys[half:], self._owork[half:], self._ourg[half:])
            del self.keys[half:], self._odl[half:], self._owork[half:], self._ourg[half:]
            return c
        c = Block.__new__(Block)
        c.keys = self.keys[half:]
        c.total, c.least, c.gone = 0, _INF, None
        c._reserve(m)
        memcpy(c._d, &self._d[half], m * sizeof(long long))
        memcpy(c._w, &self._w[half], m * sizeof(long long))
        memcpy(c._u, &self._u[half], m * sizeof(char))
        del self.keys[half:]
        return c

    cdef int _extend(self, Block b) except -1:
        """``b``'s values after this block's (``_compact``'s join)."""
        cdef Py_ssize_t n = len(self.keys), m = len(b.keys)
        if not self._obj and not b._obj:
            self._reserve(n + m)
            memcpy(&self._d[n], b._d, m * sizeof(long long))
            memcpy(&self._w[n], b._w, m * sizeof(long long))
            memcpy(&self._u[n], b._u, m * sizeof(char))
            self.keys += b.keys
            return 0
        self._to_objects()
        self.keys += b.keys
        self._odl += b.dl
        self._owork += b.work
        self._ourg += b.urgent
        return 0

    @cython.boundscheck(False)
    @cython.wraparound(False)
    cdef bint _margins_c(self, int code, long long* out, long long* total):
        """The margins ``D - P`` into ``out`` and the total work (``queue``; else 0) into
        ``total`` on C integers; False where a sum leaves 64 bits (the Python sums then)."""
        cdef Py_ssize_t j, n = len(self.keys)
        cdef long long p = 0, m
        cdef long long* D = self._d
        cdef long long* W = self._w
        for j in range(n):
            if code == 0:
                if __builtin_add_overflow(p, W[j], &p) or __builtin_sub_overflow(D[j], p, &m):
                    return False
            elif code == 1:
                if __builtin_sub_overflow(D[j], W[j], &m):
                    return False
            else:
                m = D[j]
            out[j] = m
        total[0] = p
        return True

    @cython.boundscheck(False)
    @cython.wraparound(False)
    cdef tuple _least_c(self, long long* margins, long long total, int code):
        """``(total, least)`` as the reference's ``_resum`` sets them (``inf``: no margin)."""
        cdef Py_ssize_t j, n = len(self.keys)
        cdef long long least = 0
        cdef bint found = False
        cdef char* U = self._u
        for j in range(n):
            if U[j]:
                continue
            if not found or margins[j] < least:
                least = margins[j]
                found = True
        tot = PyLong_FromLongLong(total) if code == 0 else 0
        if not found:
            return (tot, _INF)
        return (tot, PyLong_FromLongLong(least))


cdef class DueBlocks:
    """``deadline_fast.DueBlocks`` compiled (see there for the structure and the bounds).

    Args:
        lookahead: ``"queue"``, ``"own"`` or ``"none"``.
        block: ``DueBlocks.BLOCK`` of the reference (settable, as the reference's, by tests).
    """

    cdef public str mode
    cdef public Py_ssize_t BLOCK, n
    cdef public bint exact_leaves
    cdef public list _blocks, _removes, last
    # The segment tree: ``_ct``/``_cl`` (C, 2 size values each) while every value fits
    # (``_to_i128``), else ``_otot``/``_olst`` (Python lists, the reference's code) from then on
    # (``_big``). ``_tot``/``_lst`` read it as the reference's lists.
    cdef list _otot, _olst
    cdef i128* _ct
    cdef i128* _cl
    cdef readonly bint _big
    cdef public dict _adds, _dirty, _grown
    cdef public object _moved
    cdef public Py_ssize_t _size, _leaves
    cdef int _code
    cdef bint _queue
    cdef long long* _scratch  # a block's margins (``_sums_c``), grown as needed
    cdef Py_ssize_t _scap

    def __init__(self, str lookahead, Py_ssize_t block):
        self.mode = lookahead
        self.BLOCK = block
        self._blocks = []
        self._adds = {}
        self._removes = []
        self.last = []
        self._dirty = {}  # block -> block (identity keys), as the reference's id(block) -> block
        self.exact_leaves = False
        self._grown = {}
        self._moved = None
        self._size = 1
        self._leaves = 0
        self._big = False
        self._otot, self._olst = None, None
        self._ct = <i128*>PyMem_Realloc(NULL, 2 * sizeof(i128))
        self._cl = <i128*>PyMem_Realloc(NULL, 2 * sizeof(i128))
        if self._ct is NULL or self._cl is NULL:
            raise MemoryError()
        self._ct[0] = self._ct[1] = 0
        self._cl[0] = self._cl[1] = _I_INF
        self.n = 0
        self._code = MODE_CODES.get(lookahead, 2)
        self._queue = lookahead == "queue"

    def __dealloc__(self):
        PyMem_Free(self._ct)
        PyMem_Free(self._cl)
        PyMem_Free(self._scratch)

    cdef long long* _margins_buf(self, Py_ssize_t n) except NULL:
        """Room for ``n`` margins (at least one)."""
        cdef void* p
        if n >= self._scap:
            p = PyMem_Realloc(self._scratch, (n + 1) * sizeof(long long))
            if p is NULL:
                raise MemoryError()
            self._scratch, self._scap = <long long*>p, n + 1
        return self._scratch

    def __len__(self):
        return self.n

    @property
    def _tot(self):
        """The tree's totals, as the reference's list."""
        if self._big:
            return self._otot
        return [_from_i128(self._ct[k]) for k in range(2 * self._size)]

    @property
    def _lst(self):
        """The tree's leasts, as the reference's list."""
        if self._big:
            return self._olst
        return [_from_i128(self._cl[k]) for k in range(2 * self._size)]

    cdef int _go_big(self) except -1:
        """From now on the tree in Python objects (a value that is not a 64-bit int or inf came)."""
        if not self._big:
            self._otot, self._olst = self._tot, self._lst
            self._big = True
        return 0

    cdef Py_ssize_t _block_of(self, object key) except -1:
        cdef Py_ssize_t i = _bisect_key(self.last, key)
        cdef Py_ssize_t top = len(self._blocks) - 1
        return i if i < top else top

    def add(self, key, work):
        self._add(key, work)

    def remove(self, key):
        self._remove(key)

    cdef inline int _add(self, object key, object work) except -1:
        self.n += 1
        self._adds[key] = work
        return 0

    cdef inline int _remove(self, object key) except -1:
        self.n -= 1
        if self._adds.pop(key, None) is None:
            self._removes.append(key)
        return 0

    @property
    def blocks(self):
        if self._adds or self._removes:
            self._apply()
        return self._blocks

    cdef int _apply(self) except -1:
        cdef list removes = self._removes
        cdef dict adds = self._adds
        self._removes, self._adds = [], {}
        for key in removes:
            self._remove_now(key)
        for key, work in adds.items():
            self._add_now(key, work)
        if len(self._blocks) > 2 * self.n // self.BLOCK + 4:
            self._compact()
        return 0

    cdef int _add_now(self, object key, object work) except -1:
        cdef list blocks = self._blocks
        cdef Block b
        cdef Py_ssize_t i, j
        if not blocks:
            b = Block([key], [work], [False])
            blocks.append(b)
            self.last.append(key)
            self._dirty[b] = b
            self._moved = 0
            return 0
        if key > self.last[len(self.last) - 1]:
            i = len(blocks) - 1
            b = blocks[i]
            if b not in self._dirty:
                self._append(i, b, key, work)
                return 0
            j = len(b.keys)
        else:
            i = self._block_of(key)
            b = blocks[i]
            j = b._bisect(key)
        b._insert(j, key, work)
        b.gone = None
        self.last[i] = b.keys[len(b.keys) - 1]
        self._dirty[b] = b
        if len(b.keys) > 2 * self.BLOCK:
            self._split(i)
        return 0

    cdef int _append(self, Py_ssize_t i, Block b, object key, object work) except -1:
        b._insert(len(b.keys), key, work)
        b.gone = None
        self.last[i] = key
        if self._queue:
            b.total += work
            m = key[0] - b.total
        else:
            m = key[0] - work if self._code == 1 else key[0]
        if m < b.least:
            b.least = m
        self._grown[b] = b
        if len(b.keys) > 2 * self.BLOCK:
            self._split(i)
        return 0

    cdef int _split(self, Py_ssize_t i) except -1:
        cdef Block b = self._blocks[i]
        cdef Py_ssize_t half = len(b.keys) // 2
        cdef Block c = b._cut(half)
        self._blocks.insert(i + 1, c)
        self.last[i] = b.keys[len(b.keys) - 1]
        self.last.insert(i + 1, c.keys[len(c.keys) - 1])
        self._dirty[b] = b
        self._dirty[c] = c
        self._moved_from(i)
        return 0

    cdef int _remove_now(self, object key) except -1:
        cdef Py_ssize_t i = self._block_of(key)
        cdef Block b = self._blocks[i]
        cdef Py_ssize_t j = b._bisect(key)
        w = b._delete(j)
        if b.keys:
            self.last[i] = b.keys[len(b.keys) - 1]
        else:
            b.gone = self.last[i]
        if b not in self._dirty:
            if self.exact_leaves:
                self._dirty[b] = b
            elif self._queue:
                self._drop_work(i, b, w)
        return 0

    @cython.boundscheck(False)  # indices in range by construction (a bisect; tree nodes < 2 size)
    @cython.wraparound(False)
    cdef int _drop_work(self, Py_ssize_t i, Block b, object w) except -1:
        cdef list tot
        cdef Py_ssize_t node
        cdef i128 cw
        b.total = b.total - w
        moved = self._moved
        if i < self._leaves and (moved is None or i < <Py_ssize_t>moved):
            node = self._size + i
            if not self._big:
                if _to_i128(w, &cw) and cw != _I_INF:
                    while node:
                        self._ct[node] -= cw
                        node >>= 1
                    return 0
                self._go_big()
            tot = self._otot
            while node:
                tot[node] = tot[node] - w
                node >>= 1
        return 0

    cdef int _compact(self) except -1:
        cdef list out = []
        cdef Block b, c
        for b in self._blocks:
            if not b.keys:
                continue
            if out and len((<Block>out[len(out) - 1]).keys) + len(b.keys) <= self.BLOCK:
                c = out[len(out) - 1]
                c._extend(b)
            else:
                b.gone = None
                out.append(b)
        self._blocks = out
        self.last = [(<Block>b).keys[len((<Block>b).keys) - 1] for b in out]
        self._dirty = {b: b for b in out}
        self._grown = {}
        self._moved = 0
        return 0

    cdef int _moved_from(self, Py_ssize_t i) except -1:
        if self._moved is None or i < <Py_ssize_t>self._moved:
            self._moved = i
        return 0

    cdef list _margins(self, Block b):
        """The reference's ``_margins`` (Python ints at any size; ``b`` in Python lists)."""
        if self._code == 0:
            return list(map(sub, b._odl, accumulate(b._owork)))
        if self._code == 1:
            return list(map(sub, b._odl, b._owork))
        return b._odl

    cdef int _resum(self, Block b) except -1:
        """``b``'s total work and least margin that is not urgent: on C integers while ``b``'s
        values and sums fit 64 bits, else the reference's sums on Python ints (``b`` then in
        Python lists, ``Block._to_objects``)."""
        cdef list margins
        cdef long long total
        cdef long long* buf
        if not b._obj:
            buf = self._margins_buf(len(b.keys))
            if b._margins_c(self._code, buf, &total):
                b.total, b.least = b._least_c(buf, total, self._code)
                return 0
            b._to_objects()
        if block_sums is not None:
            sums = block_sums(b._odl, b._owork, b._ourg, self._code)
            if sums is not None:
                b.total, b.least = sums
                return 0
        margins = self._margins(b)
        b.total = sum(b._owork) if self._queue else 0
        if True not in b._ourg:
            b.least = min(margins, default=_INF)
        else:
            b.least = min(compress(margins, map(not_, b._ourg)), default=_INF)
        return 0

    @cython.boundscheck(False)  # indices in range by construction (a bisect; tree nodes < 2 size)
    @cython.wraparound(False)
    cdef int _leaf(self, Py_ssize_t i) except -1:
        cdef Block b = self._blocks[i]
        cdef Py_ssize_t node = self._size + i, left
        cdef i128 ct, cl, ca, cc
        cdef i128* T = self._ct
        cdef i128* L = self._cl
        if not self._big:
            if _to_i128(b.total, &ct) and ct != _I_INF and _to_i128(b.least, &cl):
                T[node] = ct
                L[node] = cl
                node >>= 1
                while node:
                    left = node << 1
                    ct = T[left]
                    T[node] = ct + T[left + 1]
                    ca = L[left]
                    cc = L[left + 1]
                    if cc != _I_INF:
                        cc = cc - ct
                    L[node] = ca if ca <= cc else cc
                    node >>= 1
                return 0
            self._go_big()
        cdef list tot = self._otot, lst = self._olst
        tot[node] = b.total
        lst[node] = b.least
        node >>= 1
        while node:
            left = node << 1
            tl = tot[left]
            tot[node] = tl + tot[left + 1]
            a = lst[left]
            c = lst[left + 1] - tl
            lst[node] = a if a <= c else c
            node >>= 1
        return 0

    @cython.boundscheck(False)
    @cython.wraparound(False)
    cdef int _up(self, Py_ssize_t lo, Py_ssize_t hi) except -1:
        cdef Py_ssize_t node, left
        cdef i128 ca, cc
        cdef i128* T = self._ct
        cdef i128* L = self._cl
        if not self._big:
            while lo:
                for node in range(lo, hi + 1):
                    left = 2 * node
                    T[node] = T[left] + T[left + 1]
                    ca = L[left]
                    cc = L[left + 1]
                    if cc != _I_INF:
                        cc = cc - T[left]
                    L[node] = ca if ca <= cc else cc  # min(): the first of equals
                lo, hi = lo >> 1, hi >> 1
            return 0
        cdef list tot = self._otot, lst = self._olst
        while lo:
            for node in range(lo, hi + 1):
                left = 2 * node
                tot[node] = tot[left] + tot[left + 1]
                lst[node] = min(lst[left], lst[left + 1] - tot[left])
            lo, hi = lo >> 1, hi >> 1
        return 0

    cdef int _retree(self) except -1:
        cdef Py_ssize_t n = len(self._blocks), f = self._moved, size, end, i
        cdef Block b
        cdef i128 ct, cl
        cdef i128* grown
        self._moved = None
        if not self._big:  # every leaf to set fits, or the tree goes to Python objects first
            for i in range(0 if n > self._size else f, n):
                b = self._blocks[i]
                if not (_to_i128(b.total, &ct) and ct != _I_INF and _to_i128(b.least, &cl)):
                    self._go_big()
                    break
        if n > self._size:
            size = self._size
            while size < n:
                size *= 2
            if self._big:
                self._otot, self._olst = [0] * (2 * size), [_INF] * (2 * size)
            else:
                grown = <i128*>PyMem_Realloc(self._ct, 2 * size * sizeof(i128))
                if grown is NULL:
                    raise MemoryError()
                self._ct = grown
                grown = <i128*>PyMem_Realloc(self._cl, 2 * size * sizeof(i128))
                if grown is NULL:
                    raise MemoryError()
                self._cl = grown
                for i in range(2 * size):
                    self._ct[i] = 0
                    self._cl[i] = _I_INF
            self._size = size
            f, self._leaves = 0, 0
        size = self._size
        end = n if n > self._leaves else self._leaves
        if not self._big:
            for i in range(f, end):
                if i < n:
                    b = self._blocks[i]
                    _to_i128(b.total, &self._ct[size + i])
                    _to_i128(b.least, &self._cl[size + i])
                else:
                    self._ct[size + i], self._cl[size + i] = 0, _I_INF
            self._leaves = n
            self._up((size + f) >> 1, (size + (end if end > f + 1 else f + 1) - 1) >> 1)
            return 0
        cdef list tot = self._otot, lst = self._olst
        for i in range(f, end):
            if i < n:
                b = self._blocks[i]
                tot[size + i], lst[size + i] = b.total, b.least
            else:
                tot[size + i], lst[size + i] = 0, _INF
        self._leaves = n
        self._up((size + f) >> 1, (size + (end if end > f + 1 else f + 1) - 1) >> 1)
        return 0

    def mark_due(self, t):
        """The reference's ``mark_due``: ``(keys marked, floor)``."""
        return self._mark_due(t)

    cdef tuple _mark_due(self, object t):
        cdef Block b
        cdef list changed, stack, newly, tot, lst
        cdef Py_ssize_t node, left, size, i
        cdef i128 clock
        if self._adds or self._removes:
            self._apply()
        dirty = self._dirty
        for b in dirty:
            self._resum(b)
        changed = list(dirty)
        if self._grown:
            changed += [b for b in self._grown if b not in dirty]
            self._grown = {}
        moved = self._moved
        if moved is not None:
            self._retree()
        for b in changed:
            i = self._block_of(b.keys[len(b.keys) - 1] if b.keys else b.gone)
            if moved is None or i < <Py_ssize_t>moved:
                self._leaf(i)
        self._dirty = {}
        newly = []
        if not self._big:
            if type(t) is int:
                if not _to_i128(t, &clock):
                    clock = _T_CAP if t > 0 else -_T_CAP
                return self._walk(clock, t, newly)
            self._go_big()
        tot, lst, size = self._otot, self._olst, self._size
        stack = [(1, 0)] if lst[1] <= t else []
        while stack:
            node, off = stack.pop()
            while node < size:
                left = node << 1
                roff = off + tot[left]
                right = lst[left + 1] - roff <= t
                if lst[left] - off <= t:
                    if right:
                        stack.append((left + 1, roff))
                    node = left
                elif right:
                    node, off = left + 1, roff
                else:
                    break
            else:
                self._open(node - size, off, t, newly)
        return newly, lst[1]

    @cython.boundscheck(False)
    @cython.wraparound(False)
    cdef tuple _walk(self, i128 clock, object t, list newly):
        """``mark_due``'s walk over the C tree (``clock``: ``t``, or +-``_T_CAP`` past 64 bits):
        the reference's, ``inf`` never due; an opened block may send the tree to Python objects
        (``_go_big``), which changes no node the walk reads later (only the opened leaf's
        ancestors; the stack holds right siblings)."""
        cdef Py_ssize_t node_at[130]
        cdef i128 off_at[130]
        cdef Py_ssize_t depth = 0, node, left, size = self._size
        cdef i128 off, roff, v
        cdef i128* T = self._ct
        cdef i128* L = self._cl
        cdef bint right
        if L[1] != _I_INF and L[1] <= clock:
            node_at[0], off_at[0], depth = 1, 0, 1
        while depth:
            depth -= 1
            node, off = node_at[depth], off_at[depth]
            while node < size:
                left = node << 1
                roff = off + T[left]
                v = L[left + 1]
                right = v != _I_INF and v - roff <= clock
                v = L[left]
                if v != _I_INF and v - off <= clock:
                    if right:
                        node_at[depth], off_at[depth] = left + 1, roff
                        depth += 1
                    node = left
                elif right:
                    node, off = left + 1, roff
                else:
                    break
            else:
                self._open(node - size, _from_i128(off), t, newly)
        return newly, self._olst[1] if self._big else _from_i128(self._cl[1])

    @cython.boundscheck(False)
    @cython.wraparound(False)
    cdef int _open(self, Py_ssize_t i, object off, object t, list newly) except -1:
        cdef Block b = self._blocks[i]
        cdef list urg, keys = b.keys, margins
        cdef Py_ssize_t j, n = len(b.keys)
        cdef long long lim, total
        cdef long long* buf
        cdef char* U
        limit = t + off
        if not b._obj:  # C integers: the margins due are those <= limit (open_due's rule)
            buf = self._margins_buf(n)
            if _i64(limit, &lim) and b._margins_c(self._code, buf, &total):
                U = b._u
                for j in range(n):
                    if buf[j] <= lim and not U[j]:
                        U[j] = 1
                        newly.append(keys[j])
                b.total, b.least = b._least_c(buf, total, self._code)
                self._leaf(i)
                return 0
            b._to_objects()
        urg = b._ourg
        if open_due is not None:
            sums = open_due(b._odl, b._owork, urg, self._code, limit, keys, newly)
            if sums is not None:
                b.total, b.least = sums
                self._leaf(i)
                return 0
        margins = self._margins(b)
        for j in list(compress(count(), map(gt, map(ge, repeat(limit), margins), urg))):
            urg[j] = True
            newly.append(keys[j])
        b.total = sum(b._owork) if self._queue else 0
        if True not in urg:
            b.least = min(margins, default=_INF)
        else:
            b.least = min(compress(margins, map(not_, urg)), default=_INF)
        self._leaf(i)
        return 0

    def due_prefix(self, urgent):
        """The keys in deadline order up to and including the last urgent one, lazily."""
        cdef Block b
        cdef Py_ssize_t left = urgent, j
        for b in self.blocks:
            for j in range(len(b.keys)):
                yield b.keys[j]
                if b._is_urgent(j):
                    left -= 1
                    if not left:
                        return


cdef class DeadlineCore:
    """The per-request bookkeeping of ``deadline_fast.DeadlineOrder`` compiled: ``add``,
    ``remove``, ``stale``, ``_current``, ``_restore``, ``_assign`` and ``iter_order``'s state
    updates, statement for statement the reference's (the same dicts, in the same insertion
    order, the same integers, the same calls to the lanes and the due blocks; ``_assign``'s
    usual case on C integers, ``_assign_ints``, with the same values), the attributes
    public under the reference's names. ``deadline_fast.CompiledDeadlineOrder`` puts it before
    ``DeadlineOrder``, whose read (``_read``, ``_read_due``), ``head_until`` and ``set_resolver`` it keeps
    (``tests/test_deadline_compiled.py`` compares the two call by call, state and all).

    Why compiled: at the conversation trace's native rate these few dict and attribute operations
    per join, leave and first sight were most of what ``fairway-deadline`` adds to Fairway's
    loop (docs/performance.md).

    Args:
        policy: The ``FairwayDeadline`` (its ``work_ns``, ``deadline_ns``, ``urgent``,
            ``horizon_ns`` are read and written as the reference does).
        fast: Its ``FastLane``; fair: its ``ArrivalOrder``; due: a ``DueBlocks`` of this module.
    """

    cdef public object policy, fast, fair, _resolve, _alast, _floor, _total
    cdef public dict snap, _stale, _pending, _key_of, _left, _slo_ns
    cdef public list _gone
    cdef public DueBlocks due
    # The Fast lane's methods, bound once (as ``_merge_c.LanePair``: a lane binds its compiled
    # ones in its ``__init__``); ``_fair_inline``: ``fair`` is exactly an ``ArrivalOrder``, whose
    # ``add``/``remove`` run inline here, statement for statement, and whose ``stale`` does nothing.
    cdef object _fast_add, _fast_remove, _fast_stale
    cdef readonly bint _fair_inline

    def __init__(self, policy, fast, fair, DueBlocks due):
        from fairsim.policies.incremental import ArrivalOrder
        self.policy = policy
        self.fast = fast
        self.fair = fair
        self._fast_add, self._fast_remove, self._fast_stale = fast.add, fast.remove, fast.stale
        self._fair_inline = type(fair) is ArrivalOrder
        self.snap = {}
        self._stale = {}
        self._resolve = None
        self._pending = {}
        self._key_of = {}
        self._gone = []
        self._left = {}
        self.due = due
        self._total = 0
        self._alast = None
        self._floor = None
        self._slo_ns = {}

    def __len__(self):
        return len(self.snap)

    def add(self, q):
        """The reference's ``add``."""
        rid = q.request_id
        if rid not in self.snap:
            back = self._left.pop(rid, None)
            if back is not None and (<tuple>back)[:2] == (q.arrival_time, q.prompt_len):
                self._restore(rid, back[2], back[3], back[4])
            else:
                self._pending[rid] = None
        self._stale.pop(rid, None)
        self._fast_add(q)
        if self._fair_inline:  # ArrivalOrder.add(self.fair, q)
            fair = self.fair
            items = fair.items
            if rid not in items:
                key = (q.arrival_time, rid)
                last = fair._last
                if last is not None and key < last:
                    fair._sorted = False
                else:
                    fair._last = key
            items[rid] = q
        else:
            self.fair.add(q)
        self.snap[rid] = q

    def remove(self, request_id):
        """The reference's ``remove``."""
        self._fast_remove(request_id)
        if self._fair_inline:  # ArrivalOrder.remove(self.fair, request_id)
            del self.fair.items[request_id]
        else:
            self.fair.remove(request_id)
        self._stale.pop(request_id, None)
        p = self.policy
        k = self._key_of.pop(request_id, None)
        if k is None:
            del self.snap[request_id]
            del self._pending[request_id]
            return
        q = self.snap.pop(request_id)
        # (the policy's state read as its exact types, so each edit is a direct C call; any
        # other type is read through its methods, as the reference does)
        work_ns, urgent = p.work_ns, p.urgent
        work = (<dict>work_ns).pop(request_id) if type(work_ns) is dict else work_ns.pop(request_id)
        flag = (request_id in <set>urgent) if type(urgent) is set else (request_id in urgent)
        self._left[request_id] = (q.arrival_time, q.prompt_len, k, work, flag)
        self._gone.append(k)
        self._total = self._total - work
        del p.deadline_ns[request_id]
        if type(urgent) is set:
            (<set>urgent).discard(request_id)
        else:
            urgent.discard(request_id)

    def _restore(self, rid, key, work, urgent):
        """The reference's ``_restore``."""
        p = self.policy
        self._gone.remove(key)
        self._key_of[rid] = key
        self._total = self._total + work
        p.work_ns[rid] = work
        p.deadline_ns[rid] = key[0]
        if urgent:
            p.urgent.add(rid)

    def stale(self, request_ids, raised=None):
        """The reference's ``stale``."""
        cdef dict st = self._stale
        self._fast_stale(request_ids, raised)
        if not self._fair_inline:  # (ArrivalOrder.stale does nothing)
            self.fair.stale(request_ids, raised)
        for rid in request_ids:
            st[rid] = None

    def _current(self, rid):
        """The reference's ``_current``."""
        return self._cur(rid)

    cdef object _cur(self, object rid):
        if rid in self._stale:
            del self._stale[rid]
            q = self._resolve(self.snap[rid])
            self.snap[rid] = q
            return q
        return self.snap[rid]

    def _assign(self):
        """The reference's ``_assign`` (``FairwayDeadline.work`` inlined: ``incremental_order``
        gives this path only to a policy that does not override it): ``_assign_ints`` where its
        integers fit 64 bits, else ``_assign_objects`` (Python ints)."""
        cdef list fresh = sorted([((<object>self.snap[rid]).arrival_time, rid) for rid in self._pending])
        self._pending = {}
        if not self._assign_ints(fresh):
            self._assign_objects(fresh)

    @cython.boundscheck(False)
    @cython.wraparound(False)
    cpdef bint _assign_ints(self, list fresh) except -1:
        """The reference's ``_assign`` for newcomers that arrived after every request with a
        deadline (the usual case), on C integers: the same float operations (``rate x c x 1e9``,
        ``slack x W``, ``arrival x 1e9``, ``SLO x 1e9``, each rounded as ``round`` does), the same
        integers (every one below 2^60 in magnitude, sums below 2^62, checked), the same dicts
        written in the same order. Returns False, having written nothing but the per-length
        caches (``_rate``, ``_slo_ns``: the values and order the reference gives them) and the
        resolved snapshots (``_cur``, as the reference), where that does not hold: then
        ``_assign_objects`` runs on Python ints."""
        cdef Py_ssize_t n = len(fresh), i
        cdef dict snap = self.snap, work, rates, slo_ns = self._slo_ns, deadline, key_of = self._key_of
        cdef DueBlocks due = self.due
        cdef long long ahead, ahead0, own, wait, h, h0, d, total, least, bound, cl
        cdef int overflow = 0
        cdef long long* ws
        cdef long long* pats
        cdef long long* arrs
        cdef double x
        cdef int mode
        cdef bint use_h
        cdef tuple item
        cdef list lens
        p = self.policy
        if self._alast is not None and not fresh[0] > self._alast:
            return False
        if not (_fits(self._total, &ahead0) and _fits(p.horizon_ns, &h0)):
            return False
        ahead, h = ahead0, h0
        slack = p.slack
        if type(slack) is not float:
            return False
        ws = <long long*>PyMem_Malloc(3 * n * sizeof(long long))
        if ws is NULL:
            raise MemoryError()
        pats, arrs = ws + n, ws + 2 * n
        try:
            work = p.work_ns
            rates, idle = p._rate, p.idle_prefill_time
            lens = []  # each newcomer's prompt_len (its snapshot is ``snap[rid]`` from here on)
            for i in range(n):  # the works (the reference's first loop: resolve, rate, round)
                rid = (<tuple>fresh[i])[1]
                q = self._cur(rid)
                length = q.prompt_len
                lens.append(length)
                rate = rates.get(length)
                if rate is None:
                    rate = rates[length] = idle(length) / length
                c = q.uncached_len
                cl = PyLong_AsLongLongAndOverflow(c, &overflow) if type(c) is int else _EXACT
                if type(rate) is float and not overflow and -_EXACT < cl < _EXACT:
                    x = <double>rate * <double>cl * 1e9  # float x int: the int made a double (exact)
                else:
                    overflow = 0
                    x = rate * c * 1e9
                if not _ns_of(x, &ws[i]):
                    return False
            slo = p.slo
            for i in range(n):  # the patience, arrival (the second loop's per-request floats)
                item = <tuple>fresh[i]
                length = lens[i]  # (the reference's ``snap[rid].prompt_len``: the same object)
                patience = slo_ns.get(length)
                if patience is None:
                    patience = slo_ns[length] = _round_any(slo(length) * 1e9)
                arrival = item[0]
                if not (_fits(patience, &pats[i]) and type(arrival) is float
                        and _ns_of(<double>arrival * 1e9, &arrs[i])):
                    return False
            total = ahead
            for i in range(n):
                total += ws[i]
                if not _small(total):
                    return False
            use_h = p.horizon == "max"
            mode = MODE_CODES.get(p.lookahead, 2)
            deadline = p.deadline_ns
            least = _LL_MAX
            for i in range(n):  # (checked before any write: the wait and the deadline fit)
                own = ws[i]
                x = <double>slack * <double>ahead
                if not (isfinite(x) and fabs(x) < _SMALL):
                    return False
                wait = _c_round(x) + own
                if use_h and h > wait:
                    wait = h
                d = arrs[i] + (pats[i] if pats[i] > wait else wait)
                if not _small(d):
                    return False
                if ahead + own > h:
                    h = ahead + own
                ahead += own
            ahead, h = ahead0, h0
            for i in range(n):  # the writes, in the reference's order per dict
                item = <tuple>fresh[i]
                rid = item[1]
                own = ws[i]
                w = own
                work[rid] = w
                wait = _c_round(<double>slack * <double>ahead) + own
                if use_h and h > wait:
                    wait = h
                d = arrs[i] + (pats[i] if pats[i] > wait else wait)
                dd = d
                deadline[rid] = dd
                if ahead + own > h:
                    h = ahead + own
                key = (dd, item[0], rid)
                key_of[rid] = key
                due._add(key, w)
                bound = d - total if mode == 0 else d - own if mode == 1 else d
                if bound < least:
                    least = bound
                ahead += own
            self._alast = fresh[n - 1]
            p.horizon_ns = h
            self._total = total
            if self._floor is not None and least < self._floor:
                self._floor = least
            return True
        finally:
            PyMem_Free(ws)

    cpdef int _assign_objects(self, list fresh) except -1:
        """The reference's ``_assign`` on Python ints (any size, any order of arrival)."""
        cdef list aheads
        cdef dict snap = self.snap, work, rates, slo_ns = self._slo_ns, deadline, key_of = self._key_of
        cdef DueBlocks due = self.due
        cdef bint use_h
        cdef int mode
        p = self.policy
        work = p.work_ns
        rates, idle = p._rate, p.idle_prefill_time
        if self._alast is None or fresh[0] > self._alast:
            ahead = self._total
            aheads = []
            for _, rid in fresh:
                q = self._cur(rid)
                length = q.prompt_len
                rate = rates.get(length)
                if rate is None:
                    rate = rates[length] = idle(length) / length
                w = _round(rate * q.uncached_len * 1e9)  # to_ns(work(q)): a float's round
                work[rid] = w
                aheads.append(ahead)
                ahead = ahead + w
            total = ahead
        else:
            for _, rid in fresh:
                q = self._cur(rid)
                length = q.prompt_len
                rate = rates.get(length)
                if rate is None:
                    rate = rates[length] = idle(length) / length
                work[rid] = _round(rate * q.uncached_len * 1e9)
            new = {rid for _, rid in fresh}
            ahead, by_id = 0, {}
            for q in sorted(snap.values(), key=_arrival_id):
                if q.request_id in new:
                    by_id[q.request_id] = ahead
                ahead = ahead + work[q.request_id]
            aheads = [by_id[rid] for _, rid in fresh]
            total = self._total + sum([work[rid] for _, rid in fresh])
        if self._alast is None or fresh[len(fresh) - 1] > self._alast:
            self._alast = fresh[len(fresh) - 1]
        slo, slack, use_h = p.slo, p.slack, p.horizon == "max"
        deadline = p.deadline_ns
        h = p.horizon_ns
        mode = MODE_CODES.get(p.lookahead, 2)
        least = _INF
        for i in range(len(fresh)):
            arrival, rid = <tuple>fresh[i]
            ahead = aheads[i]
            own = work[rid]
            wait = _round(slack * ahead) + own
            if use_h and h > wait:
                wait = h
            length = (<object>snap[rid]).prompt_len
            patience = slo_ns.get(length)
            if patience is None:
                patience = slo_ns[length] = _round_any(slo(length) * 1e9)
            d = _round(arrival * 1e9) + (patience if patience > wait else wait)
            deadline[rid] = d
            if ahead + own > h:
                h = ahead + own
            key = (d, arrival, rid)
            key_of[rid] = key
            due._add(key, own)
            bound = d - total if mode == 0 else d - own if mode == 1 else d
            if bound < least:
                least = bound
        p.horizon_ns = h
        self._total = total
        if self._floor is not None and least < self._floor:
            self._floor = least
        return 0

    def iter_order(self, now):
        """The reference's ``iter_order``: the state updates (``_update``) now, then its read
        (``_read``, the reference's, looked up on the instance) when anyone waits."""
        cdef Py_ssize_t n = self._update_c(now)
        return self._read(now, n) if n else iter(())

    def _update(self, now):
        """``iter_order``'s state updates (the reference's lines before its read); returns the
        number of waiting requests (0: nothing to read)."""
        return self._update_c(now)

    cdef Py_ssize_t _update_c(self, object now) except -1:
        cdef DueBlocks due = self.due
        cdef Py_ssize_t n
        cdef tuple marked
        cdef list newly
        if self._gone:
            for k in self._gone:
                due._remove(k)
            self._gone = []
        if self._left:
            self._left = {}
        n = len(self.snap)
        if n == 0:
            return 0
        if self._pending:
            self._assign()
        t = _floor_ns(now)  # deadline_clock.now_ns
        if self._floor is None or t >= self._floor:
            marked = due._mark_due(t)
            newly, self._floor = marked
            if newly:
                self.policy.urgent.update([(<tuple>k)[2] for k in newly])
        return n


# ``_assign_ints``'s range: each integer below 2^60 in magnitude, each sum of two below 2^62.
cdef long long _LL_MAX = 0x7FFFFFFFFFFFFFFF
cdef double _SMALL = 1152921504606846976.0  # 2^60
cdef long long _EXACT = 1LL << 53  # an int below this in magnitude is exact as a double


cdef inline bint _fits(object v, long long* out):
    """``v`` an int below 2^60 in magnitude: into ``out``."""
    cdef long long c
    if not _i64(v, &c) or not -(1LL << 60) < c < (1LL << 60):
        return False
    out[0] = c
    return True


cdef inline bint _small(long long v):
    return -(1LL << 62) < v < (1LL << 62)


cdef inline bint _ns_of(double x, long long* out):
    """``round(x)`` into ``out`` where ``x`` is finite and below 2^60 in magnitude."""
    if not (isfinite(x) and fabs(x) < _SMALL):
        return False
    out[0] = _c_round(x)
    return True


cdef inline long long _c_round(double x):
    """``round(x)`` of a finite float below 2^62 in magnitude (``_round``'s rule)."""
    cdef double r = c_round(x)
    if fabs(x - r) == 0.5:
        r = 2.0 * c_round(x / 2.0)
    return <long long>r


cdef object _round(double x):
    """Python's ``round(x)`` of a float ``x``, as CPython's ``float.__round__`` computes it
    (Objects/floatobject.c: C ``round``, then the halfway case to even; an int), without the
    call; an infinite or NaN ``x`` goes to ``round`` itself, which raises as it does there."""
    cdef double r
    if not isfinite(x):
        return round(x)
    r = c_round(x)
    if fabs(x - r) == 0.5:
        r = 2.0 * c_round(x / 2.0)
    return PyLong_FromDouble(r)


cdef object _round_any(object x):
    """``round(x)``: ``_round`` for a float (no call), ``round`` itself for anything else."""
    if type(x) is float:
        return _round(<double>x)
    return round(x)


cdef object _floor_ns(object now):
    """``deadline_clock.now_ns(now)``, ``math.floor(now x 1e9)``: for a finite float product C
    ``floor`` made an int (``math.floor`` of a float does the same, ``float.__floor__``),
    ``math.floor`` itself for anything else (it raises as there for inf and NaN)."""
    cdef double x
    v = now * 1e9
    if type(v) is float:
        x = <double>v
        if isfinite(x):
            return PyLong_FromDouble(c_floor(x))
    return _floor_of(v)


def floor_ns(now):
    """``_floor_ns(now)`` from Python (``tests/test_deadline_compiled.py`` checks it against ``now_ns``)."""
    return _floor_ns(now)


def round_any(x):
    """``_round_any(x)`` from Python (``tests/test_deadline_compiled.py``)."""
    return _round_any(x)


def _arrival_id(q):
    return (q.arrival_time, q.request_id)


def float_round(double x):
    """``_round(x)`` from Python (``tests/test_deadline_compiled.py`` checks it against ``round``)."""
    return _round(x)
