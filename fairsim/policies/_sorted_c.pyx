# cython: language_level=3
"""Compiled twin of ``sortedcontainers.SortedList`` for the orders' sorted keys.

``SortedKeys`` is the subset of ``SortedList`` that the orders use (``add``, ``remove``,
``discard``, ``update``, ``in``, iteration, ``len``, indexing, ``islice``, ``irange``,
``clear``), with the
same algorithm: the values in sublists of at most twice the load factor (``LOAD``), each sorted,
and the last value of each in ``_maxes``; ``add`` bisects right (an equal value goes after the
ones already held), ``remove`` bisects left (the first equal value goes), sublists split above
twice the load and merge with a neighbour at or below half of it, ``update`` re-chunks the
whole list when it adds a quarter of its length or more. So a ``SortedKeys`` holds the same
objects in the same order as a ``SortedList`` given the same calls, and raises the same errors
(``ValueError`` for a missing value, ``IndexError`` out of range, the keys' own ``TypeError``).

Why compiled: ``SortedList`` is pure Python; an add or remove runs some 3,000 instructions of
interpreted bookkeeping around its C-level ``bisect`` and ``list.insert``. LPM's, SJF's, SUF's,
LOF's and KLPM's kept orders, DLPM's sorted client heads, VTC's keys and SGLang's kept order
make one or two per waiting request and per re-key (about a tenth of an LPM run on the
conversation trace). Here the bisects compare as ``bisect`` does (``_lt``: Python's ``<``, with
the orders' key tuples compared in C), and the bookkeeping is C. ``tests/test_sorted_keys.py``
compares it with ``SortedList`` on random operation sequences, with a small load so that
sublists split and merge.
"""

from cpython.float cimport PyFloat_AS_DOUBLE
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.object cimport PyObject_RichCompareBool, Py_EQ, Py_LT
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE
from cpython.unicode cimport PyUnicode_Compare
from itertools import chain, islice


cdef extern from "Python.h":
    long PyLong_AsLongAndOverflow(object obj, int *overflow) except? -1


cdef int _lt(object a, object b) except -1:
    """``a < b`` as Python decides it, with C comparisons for the orders' keys.

    The keys are tuples of ints, floats and strings (``(-h, arrival_time, request_id)``, VTC's
    ``(counter, arrival, id)`` ...), where Python's tuple comparison costs a few hundred
    instructions: the first position whose items are not equal (``PyObject_RichCompareBool``
    with ``Py_EQ``, which takes an object as equal to itself), then those items' ``<``; equal up
    to the shorter length, the shorter is less. Here the same rule, each item pair of one exact
    type compared in C: floats as doubles (NaN equal to nothing but itself, ``-0.0 == 0.0``, as
    Python's), ints that fit a C long as longs, strings by ``PyUnicode_Compare`` (code point
    order, Python's). Any other pair (a bool, a big int, an int against a float, a tuple
    subclass, a non-tuple) goes to Python's own comparisons, so its result and errors are
    Python's. ``tests/test_sorted_keys.py`` checks it against ``<`` (hypothesis)."""
    cdef Py_ssize_t i, n, na, nb
    cdef object x, y
    cdef double dx, dy
    cdef long lx, ly
    cdef int ox = 0, oy = 0, c
    if type(a) is not tuple or type(b) is not tuple:
        return PyObject_RichCompareBool(a, b, Py_LT)
    na = PyTuple_GET_SIZE(a)
    nb = PyTuple_GET_SIZE(b)
    n = na if na < nb else nb
    for i in range(n):
        x = <object>PyTuple_GET_ITEM(a, i)
        y = <object>PyTuple_GET_ITEM(b, i)
        if x is y:
            continue
        if type(x) is float and type(y) is float:
            dx = PyFloat_AS_DOUBLE(x)
            dy = PyFloat_AS_DOUBLE(y)
            if dx == dy:
                continue
            return dx < dy
        if type(x) is str and type(y) is str:
            c = PyUnicode_Compare(x, y)
            if c == 0:
                continue
            return c < 0
        if type(x) is int and type(y) is int:
            lx = PyLong_AsLongAndOverflow(x, &ox)
            ly = PyLong_AsLongAndOverflow(y, &oy)
            if ox == 0 and oy == 0:
                if lx == ly:
                    continue
                return lx < ly
        if PyObject_RichCompareBool(x, y, Py_EQ):
            continue
        return PyObject_RichCompareBool(x, y, Py_LT)
    return na < nb


def lt(a, b):
    """``_lt(a, b)`` from Python (the tests)."""
    return bool(_lt(a, b))


cdef inline Py_ssize_t _bisect_right(list a, object x) except -1:
    """``bisect.bisect_right(a, x)``: the same comparisons (``x < a[mid]``, ``_lt``)."""
    cdef Py_ssize_t lo = 0, hi = PyList_GET_SIZE(a), mid
    while lo < hi:
        mid = (lo + hi) >> 1
        if _lt(x, <object>PyList_GET_ITEM(a, mid)):
            hi = mid
        else:
            lo = mid + 1
    return lo


cdef inline Py_ssize_t _bisect_left(list a, object x) except -1:
    """``bisect.bisect_left(a, x)``: the same comparisons (``a[mid] < x``, ``_lt``)."""
    cdef Py_ssize_t lo = 0, hi = PyList_GET_SIZE(a), mid
    while lo < hi:
        mid = (lo + hi) >> 1
        if _lt(<object>PyList_GET_ITEM(a, mid), x):
            lo = mid + 1
        else:
            hi = mid
    return lo


cdef inline Py_ssize_t _bisect(list a, object x, bint right) except -1:
    """``_bisect_right`` where ``right``, else ``_bisect_left``."""
    return _bisect_right(a, x) if right else _bisect_left(a, x)


# -- a binary heap of keys compared by ``_lt`` ----------------------------------------------------
# ``heapq``'s push, pop and heapify, the same algorithm step for step (CPython's
# ``Modules/_heapqmodule.c``: ``siftdown`` swaps a new item up past every parent it is less than;
# ``siftup`` moves the smaller child up to a leaf, ties to the right child, then sifts down), so
# the same calls leave the same list; the comparisons are ``_lt`` (Python's ``<``, the orders'
# key tuples compared in C) where ``heapq`` asks ``PyObject_RichCompareBool`` (a tuple's generic
# comparison). Lazy hits' kept orders (``LazyKeyOrder``, PEEK's heap) pop and push a few keys
# per step; ``tests/test_sorted_keys.py`` compares every list with ``heapq``'s.

cdef int _siftdown(list heap, Py_ssize_t startpos, Py_ssize_t pos) except -1:
    cdef Py_ssize_t parentpos
    newitem = <object>PyList_GET_ITEM(heap, pos)
    while pos > startpos:
        parentpos = (pos - 1) >> 1
        parent = <object>PyList_GET_ITEM(heap, parentpos)
        if not _lt(newitem, parent):
            break
        heap[pos] = parent
        pos = parentpos
    heap[pos] = newitem
    return 0


cdef int _siftup(list heap, Py_ssize_t pos) except -1:
    cdef Py_ssize_t endpos = PyList_GET_SIZE(heap), startpos = pos, childpos
    cdef Py_ssize_t limit = endpos >> 1
    newitem = <object>PyList_GET_ITEM(heap, pos)
    while pos < limit:
        childpos = 2 * pos + 1
        if childpos + 1 < endpos and not _lt(<object>PyList_GET_ITEM(heap, childpos),
                                             <object>PyList_GET_ITEM(heap, childpos + 1)):
            childpos += 1
        heap[pos] = <object>PyList_GET_ITEM(heap, childpos)
        pos = childpos
    heap[pos] = newitem
    return _siftdown(heap, startpos, pos)


cpdef heappush(list heap, item):
    """``heapq.heappush`` with ``_lt`` (the section's comment)."""
    heap.append(item)
    _siftdown(heap, 0, PyList_GET_SIZE(heap) - 1)


cpdef heappop(list heap):
    """``heapq.heappop`` with ``_lt``.

    Raises:
        IndexError: The heap is empty.
    """
    last = heap.pop()  # (IndexError on an empty heap, as heapq's)
    if not heap:
        return last
    top = <object>PyList_GET_ITEM(heap, 0)
    heap[0] = last
    _siftup(heap, 0)
    return top


cpdef heapify(list heap):
    """``heapq.heapify`` with ``_lt``."""
    cdef Py_ssize_t i
    for i in range((PyList_GET_SIZE(heap) >> 1) - 1, -1, -1):
        _siftup(heap, i)


#: Default load factor. ``SortedList``'s 1,000 weighs its Python-level bookkeeping per sublist;
#: here that bookkeeping is C, and what a sublist costs is the ``memmove`` of every insert and
#: removal (a kept order's oldest key leaves from the front of the first sublist): at 256 an LPM
#: run on the Azure conv trace ran 4.3 % fewer instructions, on the conversation trace 3.4 %
#: (at 128 no fewer). The values, their order and every result do not depend on the load.
LOAD = 256


cdef class SortedKeys:
    """A sorted list of comparable values (duplicates allowed): ``SortedList``'s layout and rules.

    Args:
        iterable: Initial values (any order), or None.
        load: Load factor (sublist size); ``LOAD`` (256), where ``SortedList``'s is 1,000.
            Tests pass a small one to exercise splits and merges.

    Raises:
        ValueError: ``load`` < 4 (``SortedList._reset``'s rule).
    """

    cdef list _lists
    cdef list _maxes
    cdef Py_ssize_t _len
    cdef Py_ssize_t _load

    def __init__(self, iterable=None, Py_ssize_t load=LOAD):
        if load < 4:
            raise ValueError(f"load must be >= 4, got {load}")
        self._lists = []
        self._maxes = []
        self._len = 0
        self._load = load
        if iterable is not None:
            self.update(iterable)

    def __len__(self):
        return self._len

    def __iter__(self):
        return chain.from_iterable(self._lists)

    def __repr__(self):
        return f"SortedKeys({list(self)!r})"

    def clear(self):
        """Remove every value."""
        self._lists = []
        self._maxes = []
        self._len = 0

    cpdef add(self, value):
        """Insert ``value`` after any equal values held."""
        cdef list lists = self._lists, maxes = self._maxes, sub
        cdef Py_ssize_t pos
        if maxes:
            pos = _bisect_right(maxes, value)
            if pos == PyList_GET_SIZE(maxes):
                pos -= 1
                sub = <list>PyList_GET_ITEM(lists, pos)
                sub.append(value)
                maxes[pos] = value
            else:
                sub = <list>PyList_GET_ITEM(lists, pos)
                sub.insert(_bisect_right(sub, value), value)
            self._expand(pos)
        else:
            lists.append([value])
            maxes.append(value)
        self._len += 1

    cdef void _expand(self, Py_ssize_t pos) except *:
        cdef list lists = self._lists, sub = <list>PyList_GET_ITEM(self._lists, pos), half
        cdef Py_ssize_t load = self._load
        if PyList_GET_SIZE(sub) > (load << 1):
            half = sub[load:]
            del sub[load:]
            self._maxes[pos] = sub[-1]
            lists.insert(pos + 1, half)
            self._maxes.insert(pos + 1, half[-1])

    def update(self, iterable):
        """Add every value of ``iterable`` (``SortedList.update``'s two regimes)."""
        cdef list values = sorted(iterable), sub
        cdef Py_ssize_t pos, n, load = self._load
        if self._maxes:
            if PyList_GET_SIZE(values) * 4 >= self._len:
                # The held values first, then the new ones: the stable sort keeps equal values
                # in that order, as SortedList's does.
                held = []
                for sub in self._lists:
                    held.extend(sub)
                held.extend(values)
                values = held
                values.sort()
                self.clear()
            else:
                for value in values:
                    self.add(value)
                return
        n = PyList_GET_SIZE(values)
        for pos in range(0, n, load):
            sub = values[pos:pos + load]
            self._lists.append(sub)
            self._maxes.append(sub[-1])
        self._len = n

    cdef Py_ssize_t _find(self, value, Py_ssize_t *idx) except -2:
        """Position of the first value equal to ``value`` (its sublist; ``idx`` its index), or -1."""
        cdef list maxes = self._maxes, sub
        cdef Py_ssize_t pos
        if not maxes:
            return -1
        pos = _bisect_left(maxes, value)
        if pos == PyList_GET_SIZE(maxes):
            return -1
        sub = <list>PyList_GET_ITEM(self._lists, pos)
        idx[0] = _bisect_left(sub, value)
        if <object>PyList_GET_ITEM(sub, idx[0]) == value:
            return pos
        return -1

    def __contains__(self, value):
        cdef Py_ssize_t idx = 0
        return self._find(value, &idx) >= 0

    cpdef remove(self, value):
        """Remove the first value equal to ``value``.

        Raises:
            ValueError: None is held.
        """
        cdef Py_ssize_t idx = 0
        cdef Py_ssize_t pos = self._find(value, &idx)
        if pos < 0:
            raise ValueError(f"{value!r} not in list")
        self._delete(pos, idx)

    def discard(self, value):
        """Remove the first value equal to ``value`` if one is held."""
        cdef Py_ssize_t idx = 0
        cdef Py_ssize_t pos = self._find(value, &idx)
        if pos >= 0:
            self._delete(pos, idx)

    cdef void _delete(self, Py_ssize_t pos, Py_ssize_t idx) except *:
        cdef list lists = self._lists, maxes = self._maxes
        cdef list sub = <list>PyList_GET_ITEM(lists, pos), prev_sub
        cdef Py_ssize_t n, prev
        del sub[idx]
        self._len -= 1
        n = PyList_GET_SIZE(sub)
        if n > (self._load >> 1):
            maxes[pos] = sub[-1]
        elif PyList_GET_SIZE(lists) > 1:
            if not pos:
                pos += 1
            prev = pos - 1
            prev_sub = <list>PyList_GET_ITEM(lists, prev)
            prev_sub.extend(<list>PyList_GET_ITEM(lists, pos))
            maxes[prev] = prev_sub[-1]
            del lists[pos]
            del maxes[pos]
            self._expand(prev)
        elif n:
            maxes[pos] = sub[-1]
        else:
            del lists[pos]
            del maxes[pos]

    def __getitem__(self, index):
        """The value at an ``int`` position (negative from the end), or a ``list`` for a slice.

        Raises:
            IndexError: The position is out of range.
        """
        cdef list sub
        cdef Py_ssize_t i, k
        if isinstance(index, slice):
            return list(self)[index]
        i = index
        if i < 0:
            i += self._len
        if i < 0 or i >= self._len:
            raise IndexError("list index out of range")
        if index < 0:  # from the end (``keys[-1]``: the last sublist)
            i = self._len - 1 - i  # positions counted back from the last value
            for k in range(PyList_GET_SIZE(self._lists) - 1, -1, -1):
                sub = <list>PyList_GET_ITEM(self._lists, k)
                if i < PyList_GET_SIZE(sub):
                    return <object>PyList_GET_ITEM(sub, PyList_GET_SIZE(sub) - 1 - i)
                i -= PyList_GET_SIZE(sub)
        else:
            for sub in self._lists:
                if i < PyList_GET_SIZE(sub):
                    return <object>PyList_GET_ITEM(sub, i)
                i -= PyList_GET_SIZE(sub)
        raise IndexError("list index out of range")  # not reached: the lengths sum to _len

    def islice(self, start=None, stop=None, reverse=False):
        """An iterator over the values at positions ``start`` to ``stop`` (``SortedList.islice``)."""
        start, stop, _ = slice(start, stop).indices(self._len)
        if start >= stop:
            return iter(())
        if reverse:
            return iter(list(self)[start:stop][::-1])
        return islice(chain.from_iterable(self._lists), start, stop)

    def irange(self, minimum=None, maximum=None, inclusive=(True, True), reverse=False):
        """An iterator over the values from ``minimum`` to ``maximum`` (``SortedList.irange``:
        None is unbounded; ``inclusive`` says whether each bound is included)."""
        cdef list lists = self._lists, maxes = self._maxes, out = []
        cdef Py_ssize_t pos, idx, max_pos, max_idx, p
        cdef bint right
        if not maxes:
            return iter(())
        if minimum is None:
            pos = idx = 0
        else:  # the first value past the lower bound: right of equals where it is excluded
            right = not inclusive[0]
            pos = _bisect(maxes, minimum, right)
            if pos == PyList_GET_SIZE(maxes):
                return iter(())
            idx = _bisect(<list>PyList_GET_ITEM(lists, pos), minimum, right)
        max_pos = PyList_GET_SIZE(maxes) - 1
        if maximum is None:
            max_idx = PyList_GET_SIZE(<list>PyList_GET_ITEM(lists, max_pos))
        else:  # the end of the range: right of equals where the upper bound is included
            right = bool(inclusive[1])
            p = _bisect(maxes, maximum, right)
            if p > max_pos:
                max_idx = PyList_GET_SIZE(<list>PyList_GET_ITEM(lists, max_pos))
            else:
                max_pos = p
                max_idx = _bisect(<list>PyList_GET_ITEM(lists, max_pos), maximum, right)
        if pos > max_pos or (pos == max_pos and idx >= max_idx):
            return iter(())
        if pos == max_pos:
            out = (<list>PyList_GET_ITEM(lists, pos))[idx:max_idx]
        else:
            out = (<list>PyList_GET_ITEM(lists, pos))[idx:]
            for p in range(pos + 1, max_pos):
                out.extend(<list>PyList_GET_ITEM(lists, p))
            out.extend((<list>PyList_GET_ITEM(lists, max_pos))[:max_idx])
        if reverse:
            out.reverse()
        return iter(out)
