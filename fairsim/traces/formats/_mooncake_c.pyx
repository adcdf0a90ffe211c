# cython: language_level=3, boundscheck=False, wraparound=False
"""The Mooncake reader's plain rows, typed: the compiled twin of ``mooncake.read``'s common path.

A plain row has exactly ``timestamp``, ``input_length``, ``output_length`` and ``hash_ids``, of
the types ``mooncake._parse`` accepts at once (every row of the public Mooncake traces), and may
add a string ``request_id`` (``fairsim convert``'s and ``bench --tile``'s files). For a
file of plain rows only, ``plain_requests`` builds the same ``Request`` objects as
``mooncake.read`` (same fields, in the same order; ``tests/test_mooncake_compiled.py``) without
the per-row ``_Row`` and Python calls. Each line is first scanned from its bytes
(``_Scanner``: the four fields as unsigned integers of at most 18 digits, in any order and
spacing); a line it does not take is read by ``orjson.loads``, so JSON's rules are orjson's.
The conversation trace's read, with the cyclic collector paused as ``fairsim run`` reads it:
40 -> 13 ms (``orjson`` for every line: 24 ms of it); before this twin, 101 ms CPU.
At the first row it does not
take -- any other field, a value ``_parse`` would check field by field, a broken line, a
decreasing timestamp, a count of ids that fits no block, an id at two positions -- it returns
None, and ``mooncake.read`` reads the file with its Python path (the reference), which raises,
warns or skips exactly as before.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_FromLongLong
from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF, Py_XDECREF
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from libc.math cimport isfinite
from libc.stdlib cimport calloc, free, malloc, qsort, realloc
from libc.string cimport memcmp, memset

from fairsim.traces.formats._json_bytes cimport after_colon, json_uint, object_key, skip_ws

from fairsim.types import Request


from fairsim.traces.formats._request_slots cimport RequestSlots, fill_request, request_slots

cdef RequestSlots _SLOTS = request_slots(Request)


def slots_written_directly() -> bool:
    """Whether ``plain_requests`` writes a request's fields into its slots (``request_slots``)."""
    return _SLOTS.direct

cdef object _TS = "timestamp"
cdef object _IN = "input_length"
cdef object _OUT = "output_length"
cdef object _IDS = "hash_ids"
cdef object _RID = "request_id"
cdef double _INT_AS_FLOAT = 2.0 ** 1023  # mooncake._INT_AS_FLOAT
cdef bytes _DIGITS_TO_ZERO = bytes.maketrans(b"123456789", b"000000000")  # _common's
cdef bytes _LONG_DIGITS = b"0" * 19
cdef object _MAX_LEN = 2 ** 62  # longer prompts (none is real) take the Python path: no C overflow


cdef enum:
    _F_TS = 0
    _F_IN = 1
    _F_OUT = 2
    _F_IDS = 3
    _F_RID = 4  # optional: ``request_id``, a string of printable ASCII without escapes
    _ALL_FIELDS = 15  # the four required fields
    # ``_Scanner.leading``'s table of shared ids holds an id below 4 per id scanned so far plus
    # 65,536 (a window's ids start above 0): at most 32 bytes per id scanned, an int's size. Its
    # pages of 8,192 slots (64 KiB) stay below glibc's mmap threshold (128 KiB): freeing one
    # larger block would raise that threshold for the rest of the run, and the heap's later
    # large blocks would then fragment it (a colocated run's peak rose by 11 MB so).
    _SHARED_PER_ID = 4
    _SHARED_MIN = 65536
    _PAGE_BITS = 13
    _PAGE = 1 << _PAGE_BITS
    _PAGE_MASK = _PAGE - 1


cdef inline int _field(const unsigned char* p, Py_ssize_t start, Py_ssize_t length) noexcept:
    """Which of the four fields or ``request_id`` the key ``p[start:start + length]`` names, or -1."""
    cdef const char* k = <const char*>p + start
    if length == 9 and memcmp(k, b"timestamp", 9) == 0:
        return _F_TS
    if length == 12 and memcmp(k, b"input_length", 12) == 0:
        return _F_IN
    if length == 13 and memcmp(k, b"output_length", 13) == 0:
        return _F_OUT
    if length == 8 and memcmp(k, b"hash_ids", 8) == 0:
        return _F_IDS
    if length == 10 and memcmp(k, b"request_id", 10) == 0:
        return _F_RID
    return -1


cdef class _Scanner:
    """Reads a plain row's fields straight from its bytes (no dict, no list): the four fields
    once each, integers of at most 18 digits, ids into a C buffer. Any other line -- another
    field, a repeated key, an escape, a float, a sign, a leading zero, anything after the object
    -- is not scanned (``scan`` returns False) and ``orjson.loads`` reads it, so what a line
    means is orjson's in every case; a scanned line gives the values ``loads`` would."""
    cdef long long values[3]
    cdef long long* ids
    cdef long long* sorted_ids
    cdef Py_ssize_t count, capacity
    cdef Py_ssize_t rid_start, rid_len  # the request_id string's bytes (rid_len -1: none)
    # The int object of each id made so far (NULL: none yet), one owned reference each, in
    # pages of ``_PAGE`` ids (``pages[v >> _PAGE_BITS]``, NULL: none made): ``leading``'s rule
    # that equal ids share one object.
    cdef PyObject*** pages
    cdef Py_ssize_t n_pages, scanned

    def __dealloc__(self):
        cdef Py_ssize_t p, i
        cdef PyObject** page
        free(self.ids)
        free(self.sorted_ids)
        for p in range(self.n_pages):
            page = self.pages[p]
            if page != NULL:
                for i in range(_PAGE):
                    Py_XDECREF(page[i])
                free(page)
        free(self.pages)

    cdef int _push(self, long long value) except -1:
        cdef Py_ssize_t grown
        cdef long long* a
        cdef long long* b
        if self.count == self.capacity:
            grown = 64 if self.capacity == 0 else 2 * self.capacity
            a = <long long*>realloc(self.ids, grown * sizeof(long long))
            if a == NULL:
                raise MemoryError()
            self.ids = a
            b = <long long*>realloc(self.sorted_ids, grown * sizeof(long long))
            if b == NULL:
                raise MemoryError()
            self.sorted_ids = b
            self.capacity = grown
        self.ids[self.count] = value
        self.count += 1
        return 0

    cdef bint scan(self, bytes line) except -1:
        cdef const unsigned char* p = <const unsigned char*>PyBytes_AS_STRING(line)
        cdef Py_ssize_t n = PyBytes_GET_SIZE(line), i, start
        cdef int seen = 0, f
        cdef long long v
        self.count = 0
        self.rid_len = -1
        i = skip_ws(p, 0, n)
        if i >= n or p[i] != 123:  # '{'
            return False
        i += 1
        while True:
            i = object_key(p, i, n, &start)
            if i < 0:
                return False
            f = _field(p, start, i - start)
            if f < 0 or seen & (1 << f):
                return False
            seen |= 1 << f
            i = after_colon(p, i, n)
            if i < 0:
                return False
            if f == _F_RID:
                # printable ASCII only: any escape, control or non-ASCII byte goes to orjson
                if i >= n or p[i] != 34:
                    return False
                i += 1
                start = i
                while i < n and p[i] != 34:
                    if p[i] == 92 or p[i] < 32 or p[i] > 126:
                        return False
                    i += 1
                if i >= n:
                    return False
                self.rid_start, self.rid_len = start, i - start
                i += 1
            elif f == _F_IDS:
                if i >= n or p[i] != 91:  # '['
                    return False
                i = skip_ws(p, i + 1, n)
                if i < n and p[i] == 93:  # ']'
                    i += 1
                else:
                    while True:
                        i = json_uint(p, i, n, &v)
                        if i < 0:
                            return False
                        self._push(v)
                        i = skip_ws(p, i, n)
                        if i < n and p[i] == 44:  # ','
                            i = skip_ws(p, i + 1, n)
                        elif i < n and p[i] == 93:
                            i += 1
                            break
                        else:
                            return False
            else:
                i = json_uint(p, i, n, &self.values[f])
                if i < 0:
                    return False
            i = skip_ws(p, i, n)
            if i < n and p[i] == 44:
                i += 1
            elif i < n and p[i] == 125:  # '}'
                i += 1
                break
            else:
                return False
        return seen & _ALL_FIELDS == _ALL_FIELDS and skip_ws(p, i, n) == n

    cdef object request_id(self, bytes line):
        """The scanned line's ``request_id`` (a str), or None where it has none."""
        if self.rid_len < 0:
            return None
        return line[self.rid_start:self.rid_start + self.rid_len].decode("ascii")

    cdef bint distinct(self) noexcept:
        """Whether the scanned ids are pairwise distinct (a sorted copy's neighbours differ)."""
        cdef Py_ssize_t k
        for k in range(1, self.count):
            if self.ids[k] <= self.ids[k - 1]:
                break
        else:
            return True  # increasing (Mooncake's chained ids mostly are): no sort needed
        for k in range(self.count):
            self.sorted_ids[k] = self.ids[k]
        qsort(self.sorted_ids, self.count, sizeof(long long), _compare)
        for k in range(1, self.count):
            if self.sorted_ids[k] == self.sorted_ids[k - 1]:
                return False
        return True

    cdef tuple leading(self, Py_ssize_t k):
        """The first ``k`` scanned ids as a tuple of Python ints; equal ids share one object.

        Mooncake's chained ids are dense from 0 and repeat wherever requests share a prefix (the
        conversation trace: 276,491 full-block ids, 170,899 distinct), and the engine keys its
        cache, its watchers and its hit lookups by them. One object per value saves the repeats'
        memory (32 bytes each, 3.0 MB of the conversation trace, ten times that at ``--tile
        10``) and lets a dict lookup of an id find it by identity, without comparing two int
        objects that may be cold (docs/performance.md, item 4; ``mooncake.read`` shares equal lengths
        for the same reason). The objects come from a table indexed by the id (``_slot``: pages
        of ``_PAGE`` slots), which takes an id below ``_SHARED_PER_ID`` times the ids scanned
        so far plus ``_SHARED_MIN`` (so sparse or huge ids never size it: they get an object
        each, as before)."""
        cdef tuple out = PyTuple_New(k)
        cdef object x
        cdef Py_ssize_t j
        self.scanned += k
        for j in range(k):
            x = self._shared(self.ids[j], None)
            Py_INCREF(x)
            PyTuple_SET_ITEM(out, j, x)
        return out

    cdef tuple shared_tuple(self, list ids, Py_ssize_t k):
        """``tuple(ids[:k])`` for ids that ``loads`` read (Python ints), each id that ``leading``
        shares replaced by the table's object of its value (the first one seen is kept)."""
        cdef tuple out = PyTuple_New(k)
        cdef object x
        cdef Py_ssize_t j
        cdef long long v
        cdef int overflow
        self.scanned += k
        for j in range(k):
            x = ids[j]
            v = PyLong_AsLongLongAndOverflow(x, &overflow)
            if not overflow and v >= 0:
                x = self._shared(v, x)
            Py_INCREF(x)
            PyTuple_SET_ITEM(out, j, x)
        return out

    cdef object _shared(self, long long v, object made):
        """The table's object of id ``v`` (>= 0) where it holds one; else ``made`` (an int of
        value ``v``; None: a new one), kept in the table where the table takes ``v``."""
        cdef PyObject** slot = self._slot(v)
        if slot != NULL and slot[0] != NULL:
            return <object>slot[0]
        x = PyLong_FromLongLong(v) if made is None else made
        if slot != NULL:
            Py_INCREF(x)  # the table's reference
            slot[0] = <PyObject*>x
        return x

    cdef PyObject** _slot(self, long long v) except? NULL:
        """The table's slot of id ``v`` (>= 0), its page made if the bound allows; NULL where it
        does not (the id is not shared)."""
        cdef Py_ssize_t p = <Py_ssize_t>(v >> _PAGE_BITS), n, i
        cdef PyObject*** grown
        cdef PyObject** page
        if p < self.n_pages and self.pages[p] != NULL:
            return &self.pages[p][v & _PAGE_MASK]
        if v >= self.scanned * _SHARED_PER_ID + _SHARED_MIN:
            return NULL
        if p >= self.n_pages:
            n = 2 * self.n_pages if 2 * self.n_pages > p else p + 1
            grown = <PyObject***>realloc(self.pages, n * sizeof(PyObject**))
            if grown == NULL:
                raise MemoryError()
            for i in range(self.n_pages, n):
                grown[i] = NULL
            self.pages = grown
            self.n_pages = n
        page = <PyObject**>calloc(_PAGE, sizeof(PyObject*))
        if page == NULL:
            raise MemoryError()
        self.pages[p] = page
        return &page[v & _PAGE_MASK]


cdef int _compare(const void* a, const void* b) noexcept nogil:
    cdef long long x = (<const long long*>a)[0], y = (<const long long*>b)[0]
    return (x > y) - (x < y)


def plain_requests(object lines_of_file, object loads, object safe, str stem, object block):
    """``(requests, locations, block)`` of a file whose records are all plain, else None.

    Each line is scanned first (``_Scanner``: the common row, read from its bytes); a line the
    scanner does not take is read by ``loads`` and checked as a dict.

    Args:
        lines_of_file: The file's lines as bytes (``open_binary(path)``), read once.
        loads: ``orjson.loads``, or a function that calls it.
        safe: ``_common._orjson_safe``: a line with a run of 19+ digits is read by ``loads`` only
            if it holds no integer beyond 64 bits (``iter_json_lines``' rule).
        stem: The file's stem (a row without a ``request_id``, or with an empty one, is named
            ``STEM:LINE``, as ``mooncake.read`` names it).
        block: The hash block size given (``--hash-block-size`` or the sidecar's), or None:
            512, which every row's id count must fit (else None: the Python path picks one).

    Returns:
        The requests in file order (which is arrival order: the timestamps do not decrease),
        ``{request_id: line}`` (the ids are distinct; no request has labels or an ``after``:
        nothing is left for ``Collector.finish`` to check or sort), and the hash block size; or
        None (a repeated ``request_id``, which ``Collector.finish`` reports; a
        line ``iter_json_lines`` would not give as a plain record: a blank line before more
        records, broken JSON, a non-object, a byte-order mark; a row ``_parse`` would check
        field by field; a decreasing timestamp; an id count or a repeated id to report).
    """
    cdef list requests = []
    cdef dict locations = {}
    cdef dict lengths = {}  # length -> the one int object of that value
    cdef double previous = 0.0, t
    cdef object rec, ts, n, out, ids, x, raw, req, hashes
    cdef Py_ssize_t m, line = 0, blank = 0
    cdef long long L, bs, full
    cdef _Scanner scanner = _Scanner()
    cdef str rid
    cdef object given
    cdef object new = object.__new__
    if block is not None and (type(block) is not int or not 1 <= block <= _MAX_LEN):
        return None
    bs = 512 if block is None else block
    cdef object block_obj = bs
    for raw in lines_of_file:
        line += 1
        if scanner.scan(raw):
            if blank:  # a blank line before more records: an error the Python path reports
                return None
            L = scanner.values[_F_IN]
            if L < 1 or scanner.values[_F_OUT] < 1:
                return None
            t = <double>scanner.values[_F_TS]  # as float(int): rounded to nearest, ties to even
            m = scanner.count
            full = L // bs
            # The count must fit the block (ceil or floor); with none given it must fit 512.
            if (m != full and m != -(-L // bs)) or not scanner.distinct():
                return None
            n = L
            out = scanner.values[_F_OUT]
            hashes = scanner.leading(full)
            given = scanner.request_id(raw)
        else:
            if _LONG_DIGITS in (<bytes>raw).translate(_DIGITS_TO_ZERO) and not safe(raw):
                return None
            try:
                rec = loads(raw)
            except ValueError:  # orjson.JSONDecodeError: a blank line, or one to report
                if not (<bytes>raw).strip():
                    blank = line
                    continue
                return None
            if blank:
                return None
            if type(rec) is not dict:
                return None
            given = (<dict>rec).get(_RID)
            if len(<dict>rec) != (4 if given is None else 5) or (given is not None and type(given) is not str):
                return None
            # (a missing field reads as None, which no type check below takes)
            ts = (<dict>rec).get(_TS)
            n = (<dict>rec).get(_IN)
            out = (<dict>rec).get(_OUT)
            ids = (<dict>rec).get(_IDS)
            if (type(n) is not int or not 1 <= n <= _MAX_LEN or type(out) is not int or out < 1
                    or type(ids) is not list):
                return None
            if type(ts) is float:
                t = ts
                if not (t >= 0 and isfinite(t)):
                    return None
            elif type(ts) is int:
                if not (0 <= ts < _INT_AS_FLOAT):
                    return None
                t = float(ts)
            else:
                return None
            for x in <list>ids:
                if type(x) is not int:
                    return None
            L = n
            m = len(<list>ids)
            full = L // bs
            if (m != full and m != -(-L // bs)) or len(set(ids)) != m:
                return None
            hashes = scanner.shared_tuple(<list>ids, full)
        if t < previous:
            return None
        previous = t
        # Equal lengths share one int object (``mooncake.read``'s rule, which see).
        n = lengths.setdefault(n, n)
        out = lengths.setdefault(out, out)
        req = new(Request)
        # ``mooncake.read``: ``row.request_id or f"{stem}:{line}"`` (an empty id is replaced)
        rid = given if given else f"{stem}:{line}"
        if rid in locations:  # a duplicate: Collector.finish reports it (the Python path)
            return None
        locations[rid] = line
        # Every field, as make_request sets them (a frozen dataclass: into its slots)
        fill_request(&_SLOTS, req, rid, t / 1000.0, n, hashes, block_obj, out, {})
        # Request.__post_init__ has nothing to refuse here: lengths >= 1, arrival >= 0, delay 0,
        # no after, no segments, block >= 1, and at most L // block full blocks of ids.
        requests.append(req)
    return requests, locations, bs


cdef const char* _U64_MAX_DIGITS = b"18446744073709551615"  # 2**64 - 1, 20 digits
cdef const char* _INT64_MIN_DIGITS = b"9223372036854775808"  # -(-2**63), 19 digits


def orjson_safe(bytes raw) -> bool:
    """``_common._orjson_safe(raw)``, the same answer for every line: False when a run of 19+
    digits (with a ``-`` right before it, negative) is an integer outside ``-2**63 .. 2**64 - 1``
    or longer than 20 digits; else True.

    One pass over the bytes, each run compared as digits (leading zeros dropped, then length,
    then ``memcmp`` with the bound) instead of the reference's ``int()`` of each run: a Dynamo
    request trace line holds hundreds of 19-20 digit u64 hashes, and the reference's check took
    four times as long as ``orjson`` parsing the line. ``tests/test_hot_parsing.py`` compares it
    with the reference.
    """
    cdef const unsigned char* p = <const unsigned char*>PyBytes_AS_STRING(raw)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(raw), i = 0, start, sig, length
    cdef bint neg
    while i < n:
        if p[i] < 48 or p[i] > 57:  # not a digit
            i += 1
            continue
        start = i
        while i < n and 48 <= p[i] <= 57:
            i += 1
        if i - start < 19:
            continue
        if i - start > 20:  # the reference never int()s such a run
            return False
        neg = start > 0 and p[start - 1] == 45  # "-"
        sig = start
        while sig < i - 1 and p[sig] == 48:  # leading zeros: the value is the rest
            sig += 1
        length = i - sig
        if neg:
            if length > 19 or (length == 19 and memcmp(p + sig, _INT64_MIN_DIGITS, 19) > 0):
                return False
        elif length == 20 and memcmp(p + sig, _U64_MAX_DIGITS, 20) > 0:
            return False
    return True


# -- A Dynamo row's 64-bit hashes checked in one pass --------------------------------------------

cdef extern from *:
    """
    /* 1 and the value in *out for an int in 0 .. 2**64 - 1; 0 for any other int. Where the
       interpreter exports them, the sign and bit count are read off the object and its digits
       taken by PyLong_AsUnsignedLongLongMask (a few instructions a digit); else
       PyLong_AsUnsignedLongLong (which goes through a byte array), its error cleared. */
    static int __fs_u64_of(PyObject* x, unsigned long long* out) {
    #if PY_VERSION_HEX < 0x030D0000
        if (_PyLong_Sign(x) < 0 || _PyLong_NumBits(x) > 64) return 0;
        *out = PyLong_AsUnsignedLongLongMask(x);
        return 1;
    #else
        unsigned long long v = PyLong_AsUnsignedLongLong(x);
        if (v == (unsigned long long)-1 && PyErr_Occurred()) { PyErr_Clear(); return 0; }
        *out = v;
        return 1;
    #endif
    }
    """
    int _u64_of "__fs_u64_of" (object x, unsigned long long* out)


# An open-addressing set of one row's ids, reused from row to row: a slot is taken in the
# current row when its stamp is the row's (no clearing between rows).
cdef unsigned long long* _seen_keys = NULL
cdef unsigned int* _seen_stamp = NULL
cdef Py_ssize_t _seen_capacity = 0
cdef unsigned int _seen_row = 0


cdef inline unsigned long long _spread(unsigned long long z) noexcept:
    """splitmix64's finaliser: any ids, sequential or hashed, to well-spread slots."""
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL
    return z ^ (z >> 31)


cdef int _seen_reserve(Py_ssize_t n) except -1:
    """Room for a row of ``n`` ids (at most half full); a new table starts every stamp at 0."""
    global _seen_keys, _seen_stamp, _seen_capacity, _seen_row
    cdef Py_ssize_t size = 64
    while size < 2 * n:
        size *= 2
    if size <= _seen_capacity:
        return 0
    free(_seen_keys)
    free(_seen_stamp)
    _seen_keys = <unsigned long long*>malloc(size * sizeof(unsigned long long))
    _seen_stamp = <unsigned int*>calloc(size, sizeof(unsigned int))
    if _seen_keys == NULL or _seen_stamp == NULL:
        free(_seen_keys)
        free(_seen_stamp)
        _seen_keys, _seen_stamp, _seen_capacity = NULL, NULL, 0
        raise MemoryError()
    _seen_capacity = size
    _seen_row = 0
    return 0


def distinct_u64_ids(list ids):
    """Whether ``ids`` (a parsed row's hash list) is what ``need_ids`` returns unchanged and
    ``check_chained`` passes: every item an exact ``int`` in ``0 .. 2**64 - 1``, no two equal.
    False for anything else (a bool, a float, a string of digits, a negative or longer int, a
    repeat): the reader's own checks then run, and name what they refuse.

    A Dynamo request trace's rows hold hundreds of u64 hashes each; the reference's type check,
    copy and ``set`` of them took about 275 instructions an id. Here each value is read as a C
    integer into a set of the row's values (Python ints within 64 bits are equal exactly when
    their values are). ``tests/test_hot_parsing.py`` compares it with the reference.
    """
    global _seen_row
    cdef Py_ssize_t n = len(ids), k, slot, mask
    cdef unsigned long long v
    cdef object x
    _seen_reserve(n)
    _seen_row += 1
    if _seen_row == 0:  # the stamps wrapped around: start them again
        memset(_seen_stamp, 0, _seen_capacity * sizeof(unsigned int))
        _seen_row = 1
    mask = _seen_capacity - 1
    for k in range(n):
        x = ids[k]
        if type(x) is not int or not _u64_of(x, &v):  # (negative, or beyond 64 bits: not taken)
            return False
        slot = <Py_ssize_t>(_spread(v) & <unsigned long long>mask)
        while _seen_stamp[slot] == _seen_row:
            if _seen_keys[slot] == v:
                return False
            slot = (slot + 1) & mask
        _seen_stamp[slot] = _seen_row
        _seen_keys[slot] = v
    return True
