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
"""

from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from libc.math cimport INFINITY, fabs

#: ``fairsim.policies.fast_lane.EMPTY``: the intercept of an empty bucket.
cdef double EMPTY = -1e300
#: ``fairsim.policies.fast_lane._EMPTY_BOUND``: a bound at or below it is an empty bucket's.
cdef double EMPTY_BOUND = -1e299


cdef class CompiledBoundLines:
    """Bound lines ``c[j] + u x s[j]`` of the Fast lane's buckets (slot ``j``), evaluated at a
    read's clock, with the argmax of what is left (``NumpyBoundLines`` documents each method).

    Args:
        cap: Slots to start with (>= 1; ``ensure`` grows them).
    """

    cdef double* _c
    cdef double* _s
    cdef double* _b
    cdef readonly Py_ssize_t cap
    cdef Py_ssize_t _nb  # slots of the last evaluate
    cdef readonly double top  # the bound at the index the last evaluate or take returned

    def __cinit__(self, Py_ssize_t cap=16):
        if cap < 1:
            raise ValueError(f"CompiledBoundLines cap={cap}: need >= 1")
        self._c = <double*>PyMem_Malloc(cap * sizeof(double))
        self._s = <double*>PyMem_Malloc(cap * sizeof(double))
        self._b = <double*>PyMem_Malloc(cap * sizeof(double))
        if self._c == NULL or self._s == NULL or self._b == NULL:
            raise MemoryError()
        self.cap = cap
        self._nb = 0
        self.top = EMPTY
        self._fill(0)

    def __dealloc__(self):
        PyMem_Free(self._c)
        PyMem_Free(self._s)
        PyMem_Free(self._b)

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

    cdef Py_ssize_t _argmax(self):
        """First index of the largest bound among the first ``_nb`` (a NaN counts as the
        largest, as in ``numpy.argmax``); sets ``top``."""
        cdef double* b = self._b
        cdef Py_ssize_t j, best = 0
        cdef double v, hi = b[0]
        if hi != hi:
            self.top = hi
            return 0
        for j in range(1, self._nb):
            v = b[j]
            if v > hi:
                hi = v
                best = j
            elif v != v:
                self.top = v
                return j
        self.top = hi
        return best

    def evaluate(self, Py_ssize_t nb, double u):
        """Bounds ``s[j] x u + c[j]`` of the first ``nb`` slots (rounded after the product and
        after the sum, as numpy's two operations); returns the argmax (``top``: its bound).

        Raises:
            ValueError: ``nb`` < 1 or above ``cap`` (``numpy.argmax`` of an empty vector raises
                ValueError too).
        """
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
        return self._argmax()

    def take(self, Py_ssize_t slot):
        """Set ``slot``'s bound to ``EMPTY`` (its bucket opened) and return the argmax of the
        bounds left (``top``: its bound)."""
        if slot < 0 or slot >= self._nb:
            raise IndexError(f"take: slot {slot} outside 0..{self._nb - 1}")
        self._b[slot] = EMPTY
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
