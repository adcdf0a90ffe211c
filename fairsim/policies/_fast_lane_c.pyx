# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""``CompiledBoundLines``: the Fast lane's per-bucket bound lines and a read's scan of them, typed.

``fairsim.policies.fast_lane.NumpyBoundLines`` is the reference (numpy vectors): this class
computes the same floats (the same operations in the same order; built with
``-ffp-contract=off``, so no fused multiply-add rounds differently) and the same first index
of the maximum as ``numpy.argmax`` (NaN counts as the largest, the first of equals wins), and
``tests/test_fast_lane_kernel.py`` compares the two call by call and whole runs decision by
decision. A read of the Fast lane evaluates every bucket's bound once and finds the highest after
each bucket it opens: one C loop over a few hundred doubles each, where the numpy calls cost a
microsecond or two apiece. Where it is built, the Fast lane needs no numpy at all (its import is
35-60 ms of a run's start on this machine).

Storage: three C double arrays of ``cap`` slots: the intercepts ``c`` and slopes ``s`` of the
lines (``FastLane._sync``) and the bounds ``b`` of the last ``evaluate`` (read by ``take`` and
``lead_limit``).

Also here, each the typed twin of a Python reference that stays (same state, same floats or
ints, same decisions; ``tests/test_fast_lane_compiled.py`` compares them bit for bit):

- ``Bucket`` (``fast_lane._Bucket``'s fields as a C struct, its keys in blocks, each with a C
  array mirroring its keys' first field, searched in place of ``bisect``) and the Fast lane's ``add``,
  ``remove``, ``stale``, ``settle`` and bucketed read ``bucket_order``
  (``FastLane.add``/``remove``/``stale``/``_settle``/``_bucket_order_py``), used by a lane on
  ``CompiledBoundLines`` (``FastLane.__init__``, ``FastLane._bucket_order``): the key and bound
  arithmetic on C doubles, in Python's operation order, the bucket fields read without a lookup;
- ``block_sums`` and ``open_due``: ``fairway-deadline``'s block margins on 64-bit integers
  (``DueBlocks._margins``/``_resum``/``_open``), ``None`` where a value leaves 64 bits.
"""

from cpython.long cimport PyLong_FromDouble
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from libc.string cimport memmove
from libc.math cimport INFINITY, fabs, floor, isfinite, log

from fairsim.policies._sorted_c cimport heappop, heappush  # heapq's, keys compared in C

#: ``fairsim.policies.fast_lane.EMPTY``: the intercept of an empty bucket.
cdef double EMPTY = -1e300
#: ``fairsim.policies.fast_lane._EMPTY_BOUND``: a bound at or below it is an empty bucket's.
cdef double EMPTY_BOUND = -1e299


cdef enum:
    _SPAN = 32  # slots per block of ``CompiledBoundLines``'s argmax summaries


cdef class CompiledBoundLines:
    """Bound lines ``c[j] + u x s[j]`` of the Fast lane's buckets (slot ``j``), evaluated at a
    read's clock, with the argmax of what is left (``NumpyBoundLines`` documents each method).

    Args:
        cap: Slots to start with (>= 1; ``ensure`` grows them).
    """

    cdef double* _c
    cdef double* _s
    cdef double* _b
    # Per block of ``_SPAN`` slots of the last evaluate, its first NaN or else its largest
    # bound (``_bm``) and that slot (``_bi``): ``take`` rescans one block and the blocks' summaries
    # instead of every slot (the Fast lane takes ~2 buckets per read of hundreds).
    cdef double* _bm
    cdef Py_ssize_t* _bi
    cdef readonly Py_ssize_t cap
    cdef Py_ssize_t _nb  # slots of the last evaluate
    cdef readonly double top  # the bound at the index the last evaluate or take returned

    def __cinit__(self, Py_ssize_t cap=16):
        if cap < 1:
            raise ValueError(f"CompiledBoundLines cap={cap}: need >= 1")
        self._c = <double*>PyMem_Malloc(cap * sizeof(double))
        self._s = <double*>PyMem_Malloc(cap * sizeof(double))
        self._b = <double*>PyMem_Malloc(cap * sizeof(double))
        self._bm = <double*>PyMem_Malloc((cap // _SPAN + 1) * sizeof(double))
        self._bi = <Py_ssize_t*>PyMem_Malloc((cap // _SPAN + 1) * sizeof(Py_ssize_t))
        if self._c == NULL or self._s == NULL or self._b == NULL or self._bm == NULL or self._bi == NULL:
            raise MemoryError()
        self.cap = cap
        self._nb = 0
        self.top = EMPTY
        self._fill(0)

    def __dealloc__(self):
        PyMem_Free(self._c)
        PyMem_Free(self._s)
        PyMem_Free(self._b)
        PyMem_Free(self._bm)
        PyMem_Free(self._bi)

    cdef void _fill(self, Py_ssize_t start):
        cdef Py_ssize_t j
        for j in range(start, self.cap):
            self._c[j] = EMPTY
            self._s[j] = 0.0
            self._b[j] = EMPTY

    cdef inline void _check(self, Py_ssize_t slot) except *:
        if slot < 0 or slot >= self.cap:
            raise IndexError(f"bound line slot {slot} outside 0..{self.cap - 1}")

    def ensure(self, Py_ssize_t n):
        """At least ``n`` slots (doubling); new slots empty (intercept ``EMPTY``, slope 0)."""
        cdef Py_ssize_t cap = self.cap
        cdef double* c
        cdef double* s
        cdef double* b
        cdef double* bm
        cdef Py_ssize_t* bi
        if n <= cap:
            return
        while cap < n:
            cap *= 2
        c = <double*>PyMem_Realloc(self._c, cap * sizeof(double))
        if c == NULL:
            raise MemoryError()
        self._c = c
        s = <double*>PyMem_Realloc(self._s, cap * sizeof(double))
        if s == NULL:
            raise MemoryError()
        self._s = s
        b = <double*>PyMem_Realloc(self._b, cap * sizeof(double))
        if b == NULL:
            raise MemoryError()
        self._b = b
        bm = <double*>PyMem_Realloc(self._bm, (cap // _SPAN + 1) * sizeof(double))
        if bm == NULL:
            raise MemoryError()
        self._bm = bm
        bi = <Py_ssize_t*>PyMem_Realloc(self._bi, (cap // _SPAN + 1) * sizeof(Py_ssize_t))
        if bi == NULL:
            raise MemoryError()
        self._bi = bi
        old = self.cap
        self.cap = cap
        self._fill(old)

    def set_line(self, Py_ssize_t slot, double c, double s):
        self._check(slot)
        self._c[slot] = c
        self._s[slot] = s

    def set_c(self, Py_ssize_t slot, double c):
        self._check(slot)
        self._c[slot] = c

    def clear(self):
        """Every intercept ``EMPTY`` (the slopes stay)."""
        cdef Py_ssize_t j
        for j in range(self.cap):
            self._c[j] = EMPTY

    def line(self, Py_ssize_t slot):
        """``(c, s)`` of ``slot`` (tests)."""
        self._check(slot)
        return self._c[slot], self._s[slot]

    def bound(self, Py_ssize_t slot):
        """The bound of ``slot`` as the last ``evaluate``/``take`` left it."""
        self._check(slot)
        return self._b[slot]

    cdef void _summarise(self, Py_ssize_t blk):
        """Block ``blk``'s ``_bm``/``_bi`` from the bounds: its first NaN, else its first
        largest bound (``_argmax``'s rule within the block)."""
        cdef double* b = self._b
        cdef Py_ssize_t k, lo = blk * _SPAN, end = lo + _SPAN, best = lo
        cdef double v, hi = b[lo]
        if end > self._nb:
            end = self._nb
        if hi == hi:
            for k in range(lo + 1, end):
                v = b[k]
                if not v <= hi:  # above ``hi`` or a NaN: both rare
                    if v != v:
                        hi = v
                        best = k
                        break
                    hi = v
                    best = k
        self._bm[blk] = hi
        self._bi[blk] = best

    cdef Py_ssize_t _argmax(self):
        """First index of the largest bound among the first ``_nb`` (a NaN counts as the
        largest, as in ``numpy.argmax``: the first NaN); sets ``top``. From the blocks'
        summaries (``_summarise``): the first block holding a NaN gives its first NaN, else the
        first block holding the largest bound gives its first slot of it."""
        cdef double* bm = self._bm
        cdef Py_ssize_t q, nblk = (self._nb + _SPAN - 1) // _SPAN, best = 0
        cdef double v, hi = bm[0]
        if hi != hi:
            self.top = hi
            return self._bi[0]
        for q in range(1, nblk):
            v = bm[q]
            if not v <= hi:
                if v != v:
                    self.top = v
                    return self._bi[q]
                hi = v
                best = q
        self.top = hi
        return self._bi[best]

    def evaluate(self, Py_ssize_t nb, double u):
        """Bounds ``s[j] x u + c[j]`` of the first ``nb`` slots (rounded after the product and
        after the sum, as numpy's two operations); returns the argmax (``top``: its bound).

        Raises:
            ValueError: ``nb`` < 1 or above ``cap`` (``numpy.argmax`` of an empty vector raises
                ValueError too).
        """
        return self._evaluate(nb, u)

    cdef Py_ssize_t _evaluate(self, Py_ssize_t nb, double u) except -1:
        cdef Py_ssize_t j
        cdef double* b = self._b
        cdef double* c = self._c
        cdef double* s = self._s
        cdef double p
        if nb < 1 or nb > self.cap:
            raise ValueError(f"evaluate: nb={nb} outside 1..{self.cap}")
        for j in range(nb):
            p = s[j] * u
            b[j] = p + c[j]
        self._nb = nb
        for j in range((nb + _SPAN - 1) // _SPAN):
            self._summarise(j)
        return self._argmax()

    def take(self, Py_ssize_t slot):
        """Set ``slot``'s bound to ``EMPTY`` (its bucket opened) and return the argmax of the
        bounds left (``top``: its bound)."""
        return self._take(slot)

    cdef Py_ssize_t _take(self, Py_ssize_t slot) except -1:
        if slot < 0 or slot >= self._nb:
            raise IndexError(f"take: slot {slot} outside 0..{self._nb - 1}")
        self._b[slot] = EMPTY
        self._summarise(slot // _SPAN)
        return self._argmax()

    def lead_limit(self, double score, double mag_f, double grow, double span, double s_f):
        """The unopened buckets' part of ``FastLane._lead_until`` over the last evaluate's bounds:
        ``None`` when some live bound's slack is not positive, else the least ``slack / rate``
        over the rising lines (``inf`` when none rises). Same floats as
        ``NumpyBoundLines.lead_limit``."""
        cdef Py_ssize_t j
        cdef double a, s, slack, rate, q
        cdef double least = INFINITY
        cdef double two_span = 2.0 * span
        cdef bint rising = False
        for j in range(self._nb):
            a = self._b[j]
            if not a > EMPTY_BOUND:
                continue
            s = self._s[j]
            slack = (score - a) - grow * ((mag_f + fabs(a)) + two_span * s)
            if not slack > 0.0:
                return None
            rate = (s - s_f) + grow * (s + s_f)
            if rate > 0.0:
                q = slack / rate
                if not rising or q < least or q != q:
                    least = q
                rising = True
        return least


# -- the Fast lane's buckets and updates, typed -------------------------------------------------
cdef enum:
    _BLOCK_MAX = 1024  # keys per block of a ``Bucket``: a fuller one is split in two halves


cdef class Bucket:
    """``fairsim.policies.fast_lane._Bucket`` as a C struct (the same attributes, the same
    meaning): the compiled reads and updates below read its fields without a lookup. A lane on
    the compiled lines makes its buckets of this class (``FastLane.__init__``).

    Its keys are kept in blocks: a list of sorted lists of at most ``_BLOCK_MAX`` keys each, in
    order (the concatenation is ``keys``, ascending). A policy whose requests share one slope
    (``fairway-abswait``: one bucket for the whole queue) keeps tens of thousands of keys in one
    bucket under overload; in one list every insertion and deletion moved its tail (on a
    tool-and-agent trace 62 % of the run's instructions were ``memmove``), in blocks it moves at
    most a block's. Index ``i`` (the ``bisect`` index into ``keys``) is found by walking the
    blocks' lengths: a few blocks to a few hundred.

    Each block also mirrors the first field of its keys (``-K``, a float) in a C array, so that
    the compiled updates find a key's place by a binary search over contiguous doubles
    (``_search``) instead of ``bisect`` over the tuples: each of ``bisect``'s tuple comparisons
    was a cache miss or two under deep overload. A key whose first field is not a float, or is
    NaN, makes the bucket compare tuples from then on (``_exotic``) until ``keys`` is assigned.

    Only the compiled functions below change a compiled lane's buckets; ``keys`` hands out a new
    list (changing it changes nothing here) and assigning it rebuilds the blocks.
    """

    cdef list _blocks  # lists of keys (-K, arrival_time, request_id): each non-empty, ascending
    cdef Py_ssize_t _n  # keys in all blocks
    cdef Py_ssize_t _nb  # blocks (len(_blocks), kept in C for __dealloc__)
    cdef double** _kv  # _kv[j][l]: float(_blocks[j][l][0]) (not read while _exotic)
    cdef Py_ssize_t* _kcap  # doubles allocated at _kv[j]
    cdef Py_ssize_t _bcap  # entries allocated at _kv and _kcap
    cdef bint _exotic  # a key whose first field is not a float, or NaN: search the tuples instead
    cdef public tuple front  # keys[0], or None when empty
    cdef public double t0
    cdef public double s_hi
    cdef public Py_ssize_t slot

    def __cinit__(self, *args, **kwargs):
        self._blocks = []
        self._n = 0
        self._nb = 0
        self._kv = NULL
        self._kcap = NULL
        self._bcap = 0
        self._exotic = False

    def __init__(self, Py_ssize_t slot, double t0):
        self.front = None
        self.t0 = t0
        self.s_hi = 0.0
        self.slot = slot

    def __dealloc__(self):
        cdef Py_ssize_t j
        if self._kv != NULL:
            for j in range(self._nb):
                PyMem_Free(self._kv[j])
        PyMem_Free(self._kv)
        PyMem_Free(self._kcap)

    @property
    def keys(self):
        """The keys ``(-K, arrival_time, request_id)``, ascending (front first): a new list."""
        cdef list out = []
        for block in self._blocks:
            out.extend(<list>block)
        return out

    @keys.setter
    def keys(self, list value):
        cdef Py_ssize_t j, n = len(value), nb, lo
        self._clear()
        self._exotic = False
        nb = (n + _BLOCK_MAX // 2 - 1) // (_BLOCK_MAX // 2)
        for j in range(nb):
            lo = j * (_BLOCK_MAX // 2)
            self._new_block(j, value[lo:lo + _BLOCK_MAX // 2])
        self._n = n

    def search(self, tuple kt, bint right=False):
        """``_search`` (tests: the same index as ``bisect``)."""
        return self._search(kt, right)

    def insert_key(self, tuple kt):
        """Insert ``kt`` at its sorted place, as the compiled updates do (tests)."""
        self._put(self._search(kt, True), kt)

    def delete_at(self, Py_ssize_t i):
        """Delete ``keys[i]``, as the compiled updates do (tests)."""
        self._drop(i)

    def mirrored(self):
        """The mirror's doubles, or ``None`` where a key is not a plain float (tests)."""
        cdef Py_ssize_t j, l
        if self._exotic:
            return None
        return [self._kv[j][l] for j in range(len(self._blocks)) for l in range(len(<list>self._blocks[j]))]

    def block_lengths(self):
        """The blocks' lengths, in order (tests)."""
        return [len(<list>block) for block in self._blocks]

    # -- blocks ----------------------------------------------------------------------------------
    cdef int _clear(self) except -1:
        cdef Py_ssize_t j
        for j in range(self._nb):
            PyMem_Free(self._kv[j])
            self._kv[j] = NULL
        self._blocks = []
        self._n = self._nb = 0
        return 0

    cdef int _new_block(self, Py_ssize_t j, list keys) except -1:
        """Insert ``keys`` (sorted, non-empty) as block ``j``, its mirror made from them."""
        cdef Py_ssize_t nb = len(self._blocks), l, n = len(keys), cap = 16
        cdef double** kv
        cdef Py_ssize_t* kc
        if nb + 1 > self._bcap:
            self._bcap = 2 * self._bcap if self._bcap else 4
            kv = <double**>PyMem_Realloc(self._kv, self._bcap * sizeof(double*))
            if kv == NULL:
                raise MemoryError()
            self._kv = kv
            kc = <Py_ssize_t*>PyMem_Realloc(self._kcap, self._bcap * sizeof(Py_ssize_t))
            if kc == NULL:
                raise MemoryError()
            self._kcap = kc
        while cap < n + 1:
            cap *= 2
        cdef double* mirror = <double*>PyMem_Malloc(cap * sizeof(double))
        if mirror == NULL:
            raise MemoryError()
        if j < nb:
            memmove(&self._kv[j + 1], &self._kv[j], (nb - j) * sizeof(double*))
            memmove(&self._kcap[j + 1], &self._kcap[j], (nb - j) * sizeof(Py_ssize_t))
        self._kv[j] = mirror
        self._kcap[j] = cap
        self._blocks.insert(j, keys)
        self._nb += 1
        for l in range(n):
            self._store(j, l, <tuple>keys[l])
        return 0

    cdef int _del_block(self, Py_ssize_t j) except -1:
        """Drop block ``j`` (empty) and its mirror."""
        cdef Py_ssize_t nb = len(self._blocks)
        PyMem_Free(self._kv[j])
        if j + 1 < nb:
            memmove(&self._kv[j], &self._kv[j + 1], (nb - j - 1) * sizeof(double*))
            memmove(&self._kcap[j], &self._kcap[j + 1], (nb - j - 1) * sizeof(Py_ssize_t))
        del self._blocks[j]
        self._nb -= 1
        return 0

    cdef int _store(self, Py_ssize_t j, Py_ssize_t l, tuple kt) except -1:
        """The mirror's entry ``l`` of block ``j`` from ``kt`` (already its key ``l``)."""
        first = kt[0]
        cdef double x = 0.0
        if type(first) is not float:
            self._exotic = True
        else:
            x = first
            if x != x:
                self._exotic = True
        self._kv[j][l] = x
        return 0

    cdef inline Py_ssize_t _locate(self, Py_ssize_t* i) noexcept:
        """The block holding index ``i[0]``, which becomes the index in that block (an index
        equal to the keys' count is past the last block's last key)."""
        cdef Py_ssize_t j = 0, nb = len(self._blocks), m
        while j < nb - 1:
            m = len(<list>self._blocks[j])
            if i[0] < m:
                break
            i[0] -= m
            j += 1
        return j

    cdef Py_ssize_t _len(self) noexcept:
        """The number of keys."""
        return self._n

    cdef tuple _at(self, Py_ssize_t i):
        """``keys[i]``."""
        cdef Py_ssize_t j = self._locate(&i)
        return <tuple>(<list>self._blocks[j])[i]

    cdef inline int _cmp_at(self, Py_ssize_t i, tuple kt) except -2:
        """The sign of ``keys[i]`` against ``kt`` (-1 below, 0 equal, 1 above): by the mirror's
        double where the first fields differ, else by the tuples."""
        cdef Py_ssize_t j = self._locate(&i)
        cdef double x, y
        first = kt[0]
        key = (<list>self._blocks[j])[i]
        if not self._exotic and type(first) is float:
            x = first
            y = self._kv[j][i]
            if y < x:
                return -1
            if y > x:
                return 1
        if key < kt:
            return -1
        return 1 if kt < key else 0

    cdef Py_ssize_t _search(self, tuple kt, bint right) except -1:
        """``bisect_right(keys, kt)`` if ``right`` else ``bisect_left(keys, kt)``, the same
        index: keys whose first field is below ``kt[0]`` sort before it and those above after
        (a tuple compares by its first unequal field; floats compare as in Python), so only the
        keys whose first field equals ``kt[0]`` (a tie, rare) are compared as tuples."""
        cdef list blocks = self._blocks
        cdef Py_ssize_t j, nb = len(blocks), m, off = 0, lo, hi, mid
        cdef double x
        cdef double* kv
        cdef list block
        first = kt[0]
        if self._exotic or type(first) is not float or first != first:
            # ``bisect``'s own probes over the keys as one list (a NaN makes the comparisons no
            # order, and then only the same probes give the same index as ``insort``).
            lo, hi = 0, self._n
            while lo < hi:
                mid = (lo + hi) >> 1
                if (kt < self._at(mid)) if right else not (self._at(mid) < kt):
                    hi = mid
                else:
                    lo = mid + 1
            return lo
        x = first
        for j in range(nb):  # the first block whose last first field is not below x
            block = <list>blocks[j]
            m = len(block)
            kv = self._kv[j]
            if kv[m - 1] < x:
                off += m
                continue
            lo, hi = 0, m
            while lo < hi:  # the first index whose value is >= x
                mid = (lo + hi) >> 1
                if kv[mid] < x:
                    lo = mid + 1
                else:
                    hi = mid
            if kv[lo] != x:
                return off + lo
            # A tie on the first field: from here, the keys equal in it are compared as tuples
            # (the run may go on into the next blocks).
            off += lo
            while True:
                while lo < m and kv[lo] == x and ((block[lo] <= kt) if right else (block[lo] < kt)):
                    lo += 1
                    off += 1
                if lo < m or j + 1 == nb:
                    return off
                j += 1
                block = <list>blocks[j]
                m = len(block)
                kv = self._kv[j]
                lo = 0
        return off

    cdef int _put(self, Py_ssize_t i, tuple kt) except -1:
        """Insert ``kt`` at index ``i`` of ``keys`` (a block past ``_BLOCK_MAX`` is split)."""
        cdef Py_ssize_t j, m, half
        cdef list block
        cdef double* kv
        if not self._blocks:
            self._new_block(0, [kt])
            self._n = 1
            return 0
        j = self._locate(&i)
        block = <list>self._blocks[j]
        m = len(block)
        if m + 1 > self._kcap[j]:
            kv = <double*>PyMem_Realloc(self._kv[j], 2 * self._kcap[j] * sizeof(double))
            if kv == NULL:
                raise MemoryError()
            self._kv[j] = kv
            self._kcap[j] *= 2
        block.insert(i, kt)
        kv = self._kv[j]
        if i < m:
            memmove(&kv[i + 1], &kv[i], (m - i) * sizeof(double))
        self._store(j, i, kt)
        self._n += 1
        if m + 1 > _BLOCK_MAX:
            half = (m + 1) // 2
            self._new_block(j + 1, block[half:])
            del block[half:]
        return 0

    cdef int _replace(self, Py_ssize_t i, tuple kt) except -1:
        """``keys[i] = kt`` (its sorted place: the caller checked its neighbours)."""
        cdef Py_ssize_t j = self._locate(&i)
        (<list>self._blocks[j])[i] = kt
        return self._store(j, i, kt)

    cdef int _drop(self, Py_ssize_t i) except -1:
        """Delete index ``i`` of ``keys`` (an emptied block is dropped)."""
        cdef Py_ssize_t j = self._locate(&i)
        cdef list block = <list>self._blocks[j]
        cdef Py_ssize_t m = len(block)
        del block[i]
        self._n -= 1
        if m == 1:
            return self._del_block(j)
        if i < m - 1:
            memmove(&self._kv[j][i], &self._kv[j][i + 1], (m - 1 - i) * sizeof(double))
        return 0


cdef double _margin():
    return _fl.MARGIN


cdef inline int _load() except -1:
    global _fl, _QueuedRequest, _FastLane_slope
    if _fl is None:
        import fairsim.policies.fast_lane as fl
        from fairsim.types import QueuedRequest
        _fl = fl
        _QueuedRequest = QueuedRequest
        _FastLane_slope = fl.FastLane._slope
    return 0


#: ``fairsim.types.QueuedRequest`` (set by ``_load``): a snapshot of that type is read by position.
cdef object _QueuedRequest = None
#: ``FastLane._slope`` (set by ``_load``): ``_slope`` runs its own copy for a lane that keeps it.
cdef object _FastLane_slope = None
# Positions of the snapshot fields read here, in QueuedRequest's order (checked against its
# _fields by tests/test_fast_lane_compiled.py).
cdef enum:
    _ID = 0
    _ARRIVAL = 1
    _PROMPT = 2
    _CACHED = 3
    _UNCACHED = 4
    _COMPUTED = 5
    _KEYS = 7
    _BLOCK = 8


#: The positions above by field name (for tests/test_fast_lane_compiled.py).
SNAPSHOT_POSITIONS = {"request_id": _ID, "arrival_time": _ARRIVAL, "prompt_len": _PROMPT, "cached_len": _CACHED,
                      "uncached_len": _UNCACHED, "num_computed_tokens": _COMPUTED, "block_keys": _KEYS,
                      "block_size": _BLOCK}


cdef inline object _q(object q, Py_ssize_t i, str name):
    """Field ``name`` of snapshot ``q``: by position (``i``) for a ``QueuedRequest`` (no attribute
    lookup from C: a tuple read), else ``getattr`` (any other snapshot type)."""
    if type(q) is _QueuedRequest:
        return (<tuple>q)[i]
    return getattr(q, name)


cdef int _set_c(lines, Py_ssize_t slot, double c) except -1:
    """``lines.set_c(slot, c)``, direct on the compiled lines (a test may give a lane numpy ones)."""
    cdef CompiledBoundLines cl
    if type(lines) is CompiledBoundLines:
        cl = <CompiledBoundLines>lines
        cl._check(slot)
        cl._c[slot] = c
    else:
        lines.set_c(slot, c)
    return 0


cdef int _sync(lane, Bucket b) except -1:
    """``FastLane._sync``: ``b``'s bound line from its front key, ``t0`` and ``s_hi``."""
    cdef double k, m = _margin()
    if b.front is None:
        return _set_c(lane._lines, b.slot, EMPTY)
    k = -<double>b.front[0]
    lane._lines.set_line(b.slot, k + 2.0 * m * (1.0 + fabs(k)) - (b.t0 - <double>lane._origin) * b.s_hi,
                         b.s_hi * (1.0 + 2.0 * m))
    return 0


cdef int _sync_front(lane, Bucket b) except -1:
    """``FastLane._sync_front``: the intercept after a change of ``b``'s front alone."""
    cdef double k
    if b.front is None:
        return _set_c(lane._lines, b.slot, EMPTY)
    k = -<double>b.front[0]
    return _set_c(lane._lines, b.slot, k + 2.0 * _margin() * (1.0 + fabs(k)) - (b.t0 - <double>lane._origin) * b.s_hi)


cdef int _set_head(lane, Bucket b) except -1:
    b.front = b._at(0) if b._len() else None
    return _sync_front(lane, b)


cdef int _insert(lane, Bucket b, tuple kt) except -1:
    b._put(b._search(kt, True), kt)  # insort(b.keys, kt)
    front = b.front
    if front is None:
        b.front = kt
        _sync(lane, b)
    elif kt < front:
        b.front = kt
        _sync_front(lane, b)
    return 0


cdef int _delete(lane, Bucket b, tuple kt) except -1:
    if kt == b.front:
        b._drop(0)
        _set_head(lane, b)
    else:
        b._drop(b._search(kt, False))
    return 0


cdef double _key(lane, double hc, double arr, double slo, double t0) except? -1.0:
    """``FastLane._key``: ``hc + min((t0 - arr) / slo, wait_cap)``."""
    cdef double wait = (t0 - arr) / slo
    cap = lane.wait_cap
    if cap is not None and wait > <double>cap:
        wait = cap
    return hc + wait


cdef tuple _kt(lane, double hc, arr, double slo, rid, Bucket b):
    """``FastLane._kt``: the sort key in ``b`` made at the lane's clock (not before ``t0``)."""
    cdef double t = lane._clock
    if t < b.t0:
        t = b.t0
    return (-(_key(lane, hc, arr, slo, t) - (t - b.t0) * b.s_hi), arr, rid)


cdef inline bint _below(Bucket b, Py_ssize_t j, tuple kt) except -1:
    """``keys[j] < kt``, by the mirror's double where the first fields differ (a tie compares
    the tuples)."""
    return b._cmp_at(j, kt) < 0


cdef inline bint _above(Bucket b, Py_ssize_t j, tuple kt) except -1:
    """``kt < keys[j]``, as ``_below``."""
    return b._cmp_at(j, kt) > 0


cdef int _rekey_as(lane, list item, rid, hc) except -1:
    """``FastLane._rekey_as``: key ``item`` anew at the lane's clock with ``h / c = hc``."""
    cdef Bucket b = <Bucket?>item[5]
    cdef tuple old = item[6]
    cdef tuple kt
    cdef Py_ssize_t i
    item[7] = hc
    kt = _kt(lane, hc, item[2], item[3], rid, b)
    item[6] = kt
    i = 0 if old == b.front else b._search(old, False)
    if (i == 0 or _below(b, i - 1, kt)) and (i + 1 == b._len() or _above(b, i + 1, kt)):
        b._replace(i, kt)
        if i == 0:
            b.front = kt
            _sync_front(lane, b)
        return 0
    b._drop(i)
    if i == 0:
        _set_head(lane, b)
    return _insert(lane, b, kt)


cdef int _fresh(lane, list item) except -1:
    """``FastLane._fresh``: read a stale request's snapshot of this step."""
    q = lane._resolve(item[0])
    item[0] = q
    item[1] = _q(q, _CACHED, "cached_len") / max(_q(q, _UNCACHED, "uncached_len"), 1)
    item[8] = False
    return 0


cdef int _settle(lane, now) except -1:
    """``FastLane._settle``: tighten the last read's loose keys, re-key its waste at ``now``."""
    cdef dict items = lane._items
    cdef list item
    lane._clock = now
    loose = lane._loose
    if loose:
        small = lane._small
        for rid in loose:
            it = items.get(rid)
            if it is None:
                continue
            item = <list>it
            if item[7] == item[1] or item[8] or small:
                continue
            _rekey_as(lane, item, rid, item[1])
        lane._loose = []
    for entry in lane._waste:
        rid = (<tuple>entry)[2]
        it = items.get(rid)
        if (<tuple>entry)[3] < 0 or it is None or (<list>it)[8]:
            continue
        item = <list>it
        _rekey_as(lane, item, rid, item[1])
    lane._waste = []
    return 0


def settle(lane, now):
    """``FastLane._settle(now)`` of ``lane``, compiled (``_settle_py`` the reference)."""
    _load()
    _settle(lane, now)


cdef class SloCurve:
    """``Fairway.slo`` (the reference, with ``Profile.idle_prefill_time`` and ``_idle_time``) of
    one policy, for a lane's new prompt lengths: a length already asked, or one inside the
    profile's ``T_idle`` table, is answered here (the table's segment by a binary search over
    its C copy, ``slopes[j] * (float(L) - xs[j]) + ys[j]`` by the same double operations, then
    ``max(slo_floor, slo_multiplier * T)``) and memoised in the policy's ``_slo_by_len`` and
    the profile's ``_idle_memo`` as the reference does; any other length (below the table's
    first point, past its last, a non-``int``, a NaN), or a policy whose ``wait_mode`` is not
    ``"relative"``, calls the reference. ``slo_curve`` makes one only where the policy's and
    the profile's methods are those references. Why: the Fairway family meets a new prompt
    length at most adds (8,559 of 12,031 on the conversation trace), and the reference's three
    Python frames were ~8 k instructions each (2 % of a run). ``tests/test_fast_lane_compiled.py``
    compares it with the reference."""

    cdef readonly object reference  # the policy's bound ``slo`` (the fallback)
    cdef object policy
    cdef dict idle_memo
    cdef long long* x
    cdef double* xs
    cdef double* ys
    cdef double* slopes
    cdef Py_ssize_t n

    def __cinit__(self):
        self.x = NULL
        self.xs = self.ys = self.slopes = NULL

    def __init__(self, reference, policy, dict idle_memo, tuple x, tuple xs, tuple ys, tuple slopes):
        cdef Py_ssize_t j, n = len(x)
        if n < 2 or len(xs) != n or len(ys) != n or len(slopes) != n - 1:
            raise ValueError(f"SloCurve: a table of {n} points needs {n} floats and {n - 1} slopes")
        self.reference = reference
        self.policy = policy
        self.idle_memo = idle_memo
        self.n = n
        self.x = <long long*> PyMem_Malloc(n * sizeof(long long))
        self.xs = <double*> PyMem_Malloc(n * sizeof(double))
        self.ys = <double*> PyMem_Malloc(n * sizeof(double))
        self.slopes = <double*> PyMem_Malloc(n * sizeof(double))
        if self.x == NULL or self.xs == NULL or self.ys == NULL or self.slopes == NULL:
            raise MemoryError()
        for j in range(n):
            self.x[j] = x[j]
            self.xs[j] = xs[j]
            self.ys[j] = ys[j]
            self.slopes[j] = slopes[j] if j < n - 1 else 0.0

    def __dealloc__(self):
        PyMem_Free(self.x)
        PyMem_Free(self.xs)
        PyMem_Free(self.ys)
        PyMem_Free(self.slopes)

    def __call__(self, L):
        return self._get(L)

    cdef object _get(self, L):
        """``Fairway.slo(L)``: the same float, the same memo entries."""
        policy = self.policy
        cdef dict memo = policy._slo_by_len
        slo = memo.get(L)
        if slo is not None:
            return slo
        cdef long long Lc
        cdef Py_ssize_t lo, hi, mid, j
        cdef double t, m
        floor_obj = policy.slo_floor
        mult = policy.slo_multiplier
        if (type(L) is not int or type(floor_obj) is not float or type(mult) is not float
                or policy.wait_mode != "relative"):
            return self.reference(L)
        try:
            Lc = L
        except OverflowError:
            return self.reference(L)
        if Lc < self.x[0] or Lc > self.x[self.n - 1]:
            return self.reference(L)  # (below the first point, past the last: rare)
        t_obj = self.idle_memo.get(L)
        if t_obj is None:
            lo, hi = 0, self.n  # bisect_right(x, L) - 1: the last point at or below L
            while lo < hi:
                mid = (lo + hi) // 2
                if Lc < self.x[mid]:
                    hi = mid
                else:
                    lo = mid + 1
            j = lo - 1
            if j == self.n - 1 or self.x[j] == Lc:
                t = self.ys[j]
            else:
                t = self.slopes[j] * (<double> Lc - self.xs[j]) + self.ys[j]
                if t != t:
                    return self.reference(L)  # (NaN: numpy's other ways, in the reference)
            t_obj = self.idle_memo[L] = t
        else:
            t = t_obj
        m = <double> mult * t
        slo = m if m > <double> floor_obj else floor_obj  # max(slo_floor, m): the first of equals
        memo[L] = slo
        return slo


def slo_curve(slo):
    """A ``SloCurve`` of ``slo`` where it is ``Fairway.slo`` bound to a policy whose
    ``idle_prefill_time`` is ``Profile.idle_prefill_time`` bound to a ``Profile`` with the
    reference ``_idle_time``, integer table lengths and float ``slo_floor``/``slo_multiplier``;
    else ``None`` (the lane calls ``slo``)."""
    from fairsim.costmodel import Profile
    from fairsim.policies.fairway import Fairway
    policy = getattr(slo, "__self__", None)
    if getattr(slo, "__func__", None) is not Fairway.slo or not isinstance(policy, Fairway):
        return None
    idle = getattr(policy, "idle_prefill_time", None)
    profile = getattr(idle, "__self__", None)
    if (getattr(idle, "__func__", None) is not Profile.idle_prefill_time or not isinstance(profile, Profile)
            or type(profile)._idle_time is not Profile._idle_time
            or type(policy.slo_floor) is not float or type(policy.slo_multiplier) is not float
            or type(getattr(policy, "_slo_by_len", None)) is not dict):
        return None
    x = tuple(profile.idle_prompt_tokens)
    segments = profile._idle_segments
    if (type(profile._idle_memo) is not dict or len(segments) != 3
            or any(type(v) is not int or not 0 < v < 2 ** 53 for v in x)):
        return None
    xs, ys, slopes = segments
    return SloCurve(slo, policy, profile._idle_memo, x, tuple(xs), tuple(ys), tuple(slopes))


cdef inline object _lane_slo(lane, L):
    """``lane.slo(L)``: by the lane's ``SloCurve`` from C where it has one (``_slo_c``) of the
    ``slo`` it holds now (a lane whose ``slo`` was replaced calls the new one)."""
    slo = lane.slo
    curve = lane._slo_c
    if type(curve) is SloCurve and (<SloCurve> curve).reference is slo:
        return (<SloCurve> curve)._get(L)
    return slo(L)


cdef tuple _slope(lane, L):
    """``FastLane._slope(L)`` (the reference, called where ``lane``'s class replaces it): the
    lane's ``(SLO, 1 / SLO, bucket index)`` of a ``L``-token prompt, made once per length and
    kept in ``_by_len``. The index is ``_bucket_index``'s ``floor(log(s) * _INV_LOG)`` by the
    same libm ``log`` and double product (``math.log`` of a positive finite float is ``log``);
    any other ``s`` (not positive, or an infinite product) goes to ``_bucket_index`` itself.
    Why: the Fairway family meets a new prompt length at most adds (8,531 of 12,031 on the
    conversation trace), and two Python frames per add were ~1 % of a run's instructions."""
    if type(lane)._slope is not _FastLane_slope:
        return lane._slope(L)
    slo = _lane_slo(lane, L)
    s_obj = 1.0 / slo  # (Python's division: its error on a zero SLO, its float for any number)
    cdef double s = s_obj, x
    if s > 0.0:
        x = log(s) * <double>_fl._INV_LOG
        idx = PyLong_FromDouble(floor(x)) if isfinite(x) else _fl._bucket_index(s_obj)  # (math.floor's int)
    else:
        idx = _fl._bucket_index(s_obj)
    per = (slo, s_obj, idx)
    lane._by_len[L] = per
    return per


def add(lane, q):
    """``FastLane.add(q)`` of ``lane``, compiled (``_add_py`` the reference): the same items,
    keys and bound lines, by the same operations."""
    _load()
    lane._first = lane._lead_state = None
    rid = _q(q, _ID, "request_id")
    hc = _q(q, _CACHED, "cached_len") / max(_q(q, _UNCACHED, "uncached_len"), 1)
    arrival = _q(q, _ARRIVAL, "arrival_time")
    prompt = _q(q, _PROMPT, "prompt_len")
    cdef dict items = lane._items
    cdef object it = items.get(rid)
    cdef list item
    cdef Bucket b
    cdef double t, t0, wait, slo_v
    if it is None and lane._in_arrival:
        last = lane._last
        if last is None or (arrival, rid) > last:
            lane._last = (arrival, rid)
        else:
            lane._in_arrival = False
    if lane._small:
        if it is None or arrival != (<list>it)[2] or prompt != _q((<list>it)[0], _PROMPT, "prompt_len"):
            if it is not None:
                del items[rid]
                lane._in_arrival = False
            slo = _lane_slo(lane, prompt)
            items[rid] = [q, hc, arrival, slo, 1.0 / slo, None, None, hc, False, None]
        else:
            item = <list>it
            item[0] = q
            item[1] = hc
            item[7] = hc
            item[8] = False
        return
    if it is None:
        L = prompt
        per = lane._by_len.get(L)
        slo, s, idx = per if per is not None else _slope(lane, L)
        bo = lane._buckets.get(idx)
        if bo is None:
            bo = lane._bucket(idx)
        b = <Bucket?>bo
        if s > b.s_hi:
            b.s_hi = s
            _sync(lane, b)
        arr = arrival
        t = lane._clock
        t0 = b.t0
        if t < t0:
            t = t0
        slo_v = slo
        wait = (t - <double>arr) / slo_v
        cap = lane.wait_cap
        if cap is not None and wait > <double>cap:
            wait = cap
        kt = (-(<double>hc + wait - (t - t0) * b.s_hi), arr, rid)
        bs = _q(q, _BLOCK, "block_size")
        h = min(len(_q(q, _KEYS, "block_keys")), (L - 1) // bs) * bs if bs > 0 else max(L - 1, 0)
        top = h / max(L - h - _q(q, _COMPUTED, "num_computed_tokens"), 1)
        items[rid] = [q, hc, arr, slo, s, b, kt, hc, False, top if top > hc else hc]
    elif arrival != (<list>it)[2] or prompt != _q((<list>it)[0], _PROMPT, "prompt_len"):
        lane.remove(rid)
        lane._in_arrival = False
        lane.add(q)
        return
    else:
        item = <list>it
        item[0] = q
        item[1] = hc
        item[8] = False
        if hc > item[7]:
            _rekey_as(lane, item, rid, hc)
        return
    _insert(lane, b, kt)


def remove(lane, request_id):
    """``FastLane.remove(request_id)`` of ``lane``, compiled (``_remove_py`` the reference)."""
    _load()
    lane._first = lane._lead_state = None
    cdef list item = lane._items.pop(request_id)
    if not lane._small:
        _delete(lane, <Bucket?>item[5], item[6])


def stale(lane, request_ids, raised=None):
    """``FastLane.stale(request_ids, raised)`` of ``lane``, compiled (``_stale_py`` the
    reference)."""
    _load()
    lane._first = lane._lead_state = None
    cdef dict items = lane._items
    cdef list item
    cdef double t, frontier
    if raised is None:
        raised, request_ids = request_ids, ()
    for rid in request_ids:
        item = items[rid]
        if not item[8]:
            item[8] = 1
    if not raised:  # (none raised: nothing below runs; the lane's clock and frontier unread)
        return
    if lane._small:
        for rid in raised:
            (<list>items[rid])[8] = 2
        return
    t = lane._clock
    frontier = lane._frontier
    res = lane._resolve
    for rid in raised:
        item = items[rid]
        item[8] = 2
        if res is not None and _key(lane, item[9], item[2], item[3], t) >= frontier:
            _fresh(lane, item)
            if item[1] <= item[7]:
                if item[1] < item[7]:
                    lane._loose.append(rid)
                continue
            _rekey_as(lane, item, rid, item[1])
        elif item[7] < item[9]:
            _rekey_as(lane, item, rid, item[9])


# -- a bucketed read of the Fast lane, typed ---------------------------------------------------
#: ``fairsim.policies.fast_lane``, imported at the first read (it imports this module by name).
cdef object _fl = None


def bucket_order(lane, now):
    """``FastLane._bucket_order_py(now)`` of ``lane`` (a ``fairsim.policies.fast_lane.FastLane``
    on ``CompiledBoundLines``), typed: the same state read and written, the same floats (each
    bound and score by the same double operations in the same order; ``-ffp-contract=off``),
    the same heaps of the same tuples, so the same requests yielded in the same order and the
    same state left for the next read. ``FastLane._bucket_order`` picks it; the Python method
    stays the reference (``tests/test_fast_lane_kernel.py`` compares the two read by read).

    A generator, lazy as the reference: nothing runs before the first ``next()``."""
    _load()
    cdef dict items = lane._items
    cdef Py_ssize_t n = len(items)
    if n == 0:
        return
    cdef object lead = None  # the first request, already yielded from the last read
    cdef object first
    cdef bint cache_first = _fl.CACHE_FIRST
    if lane._lead_state is not None or lane._first is not None:
        first = lane._kept()
        if first is not None and first[1] <= now <= first[2] and cache_first:
            lead = first[0]
            q = (<list>items[lead])[0]
            resolve = lane._resolve
            q = q if resolve is None else resolve(q)
            try:
                yield q
            except GeneratorExit:  # closed unread (below)
                return
    cap = lane.wait_cap
    cdef bint has_cap = cap is not None
    cdef double cap_v = cap if has_cap else 0.0
    if lane._loose or lane._waste:
        lane._settle(now)  # (the compiled ``settle`` on a lane that runs the compiled updates)
    else:
        lane._clock = now
    te_obj = lane._tmax
    if now > te_obj:
        te_obj = lane._tmax = now
    cdef double te = te_obj
    cdef double now_v = now
    cdef list by_slot = lane._by_slot
    cdef Py_ssize_t nb = len(by_slot)
    cdef double t0_max = lane._t0_max
    cdef CompiledBoundLines lines = lane._lines
    cdef Py_ssize_t nxt = lines._evaluate(nb, (t0_max if t0_max > te else te) - <double>lane._origin)
    cdef double nxt_bound = lines.top
    lane._reads += 1
    cdef list loose = lane._loose
    cdef list out = []
    cdef list cand = []
    lane._waste = cand
    cdef list opened = []
    cdef double margin = _fl.MARGIN
    cdef double empty_bound = _fl._EMPTY_BOUND
    cdef Py_ssize_t long_read = _fl._LONG_READ
    cdef Py_ssize_t i, slot, pos
    cdef double top, wait, d, g, k, neg
    cdef bint fresh
    cdef tuple kt, nk, entry
    cdef list item, keys
    cdef Bucket b
    cdef object rid, counted
    for i in range(n):
        if i == long_read and n - i > long_read:
            yield from lane._rest(now, {q.request_id for q in out})
            return
        while True:
            top = -<double>(<tuple>opened[0])[0] if opened else -INFINITY
            fresh = nxt_bound > top
            if fresh:
                top = nxt_bound
            if top <= empty_bound or (cand and -<double>(<tuple>cand[0])[0] > top):
                break
            if fresh:
                slot = nxt
                b = <Bucket?>by_slot[slot]
                nxt = lines._take(slot)
                nxt_bound = lines.top
                kt = b.front
                if kt is None:  # (an opened bucket's bound is above EMPTY only with a front)
                    raise _fl.EngineInvariantError(f"Fast lane: bucket slot {slot} has a bound but no front")
                pos = 0
            else:
                entry = heappop(opened)
                slot = entry[1]
                kt = entry[2]
                pos = entry[3]
                b = <Bucket?>by_slot[slot]
            rid = kt[2]
            item = items[rid]
            if item[8]:
                _fresh(lane, item)
                loose.append(rid)
                counted = -1
            else:
                if item[7] != item[1]:
                    loose.append(rid)
                counted = slot
            wait = (now_v - <double>item[2]) / <double>item[3]
            if has_cap and wait > cap_v:
                wait = cap_v
            heappush(cand, (-(<double>item[1] + wait), item[2], rid, counted))
            pos += 1
            if pos < b._len():
                nk = b._at(pos)
                d = te - b.t0
                g = d * b.s_hi if d > 0.0 else 0.0
                k = -<double>nk[0]
                heappush(opened, (-(k + g + margin * (1.0 + fabs(k) + g)), slot, nk, pos))
        entry = heappop(cand)
        neg = entry[0]
        rid = entry[2]
        lane._frontier = -neg
        q = (<list>items[rid])[0]
        out.append(q)
        if i == 0:
            if lead is not None:
                if rid != lead:
                    raise _fl.EngineInvariantError(
                        f"Fast lane: the kept first request {lead!r} is not the read's first {rid!r} at {now!r}")
                continue
            if te == now_v:
                lane._lead_state = (now, -neg, items[rid], cand, opened, lane._reads, nb)
        resolve = lane._resolve
        q = q if resolve is None else resolve(q)
        try:
            yield q
        except GeneratorExit:
            # Closed (the reader stopped: most reads): return as the reference's frame ends,
            # without the traceback an escaping GeneratorExit builds at every close.
            return
        lane._lead_state = None


# -- fairway-deadline's block sums, on 64-bit integers ---------------------------------------
cdef object _INF = float("inf")
#: ``DueBlocks.mode`` -> the code the kernels below take.
MODE_CODES = {"queue": 0, "own": 1, "none": 2}


cdef int _margins_c(list dl, list work, int mode, long long* out, long long* total) except -1:
    """The margins ``D - P`` of a block (``DueBlocks._margins``) into ``out`` and its total work
    (``queue`` mode; else 0) into ``total``; 1 where a value or a sum leaves 64-bit integers or
    is not an ``int`` (the caller then runs the Python reference), else 0. Integer sums are
    exact in C as in Python while they fit, so the margins are Python's."""
    cdef Py_ssize_t j, n = len(dl)
    cdef long long p = 0, d, w, m
    if len(work) != n:
        raise ValueError(f"a block of {n} deadlines and {len(work)} works")
    for j in range(n):
        o = dl[j]
        if type(o) is not int:
            return 1
        try:
            d = o
        except OverflowError:
            return 1
        if mode == 2:
            m = d
        else:
            o = work[j]
            if type(o) is not int:
                return 1
            try:
                w = o
            except OverflowError:
                return 1
            if mode == 0:
                if __builtin_add_overflow(p, w, &p):
                    return 1
                if __builtin_sub_overflow(d, p, &m):
                    return 1
            elif __builtin_sub_overflow(d, w, &m):
                return 1
        out[j] = m
    total[0] = p
    return 0


cdef tuple _sums(long long* margins, list urgent, Py_ssize_t n, long long total, int mode):
    """``(total, least)`` as ``DueBlocks._resum`` sets them: the least margin of the requests not
    urgent (``inf`` when none)."""
    cdef Py_ssize_t j
    cdef long long least = 0
    cdef bint found = False
    for j in range(n):
        if urgent[j] is True:
            continue
        if not found or margins[j] < least:
            least = margins[j]
            found = True
    cdef object tot = total if mode == 0 else 0
    if not found:
        return (tot, _INF)  # (a C conditional would turn the int into a double)
    return (tot, least)


cdef extern from *:
    """
    static int __fs_add_overflow(long long a, long long b, long long* r) { return __builtin_add_overflow(a, b, r); }
    static int __fs_sub_overflow(long long a, long long b, long long* r) { return __builtin_sub_overflow(a, b, r); }
    """
    bint __builtin_add_overflow "__fs_add_overflow" (long long a, long long b, long long* r)
    bint __builtin_sub_overflow "__fs_sub_overflow" (long long a, long long b, long long* r)


def block_sums(list dl, list work, list urgent, int mode):
    """``(total, least)`` of a block (``DueBlocks._resum(b)``'s values, the same ints) from its
    deadlines, works and urgent flags (``mode``: ``MODE_CODES``), or ``None`` where a value leaves
    64-bit integers (the caller runs the Python reference)."""
    cdef Py_ssize_t n = len(dl)
    cdef long long total = 0
    cdef long long* margins = <long long*>PyMem_Malloc((n + 1) * sizeof(long long))
    if margins == NULL:
        raise MemoryError()
    try:
        if _margins_c(dl, work, mode, margins, &total):
            return None
        return _sums(margins, urgent, n, total, mode)
    finally:
        PyMem_Free(margins)


def open_due(list dl, list work, list urgent, int mode, limit, list keys, list newly):
    """``DueBlocks._open``'s marking: every request of the block whose margin is at most
    ``limit`` (``t + off``, ns) and not urgent yet is marked urgent and its key appended to
    ``newly`` (block order); returns the block's ``(total, least)`` after (``block_sums``), or
    ``None``, with nothing changed, where a value leaves 64-bit integers."""
    cdef Py_ssize_t j, n = len(dl)
    cdef long long total = 0, lim
    cdef long long* margins
    if type(limit) is not int:
        return None
    try:
        lim = limit
    except OverflowError:
        return None
    if len(urgent) != n or len(keys) != n:
        raise ValueError(f"a block of {n} deadlines, {len(urgent)} flags and {len(keys)} keys")
    margins = <long long*>PyMem_Malloc((n + 1) * sizeof(long long))
    if margins == NULL:
        raise MemoryError()
    try:
        if _margins_c(dl, work, mode, margins, &total):
            return None
        for j in range(n):
            if margins[j] <= lim and urgent[j] is not True:
                urgent[j] = True
                newly.append(keys[j])
        return _sums(margins, urgent, n, total, mode)
    finally:
        PyMem_Free(margins)
