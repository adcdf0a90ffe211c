# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The offered load's loops, typed: the compiled twin of ``fairsim.traces.offered``'s.

Every run prints its trace's offered load before simulating (``fairsim.traces.offered``): an
ideal-reuse walk over every hash block, per-request work lists, and the busiest window, each a
Python loop over the requests (about 0.03 CPU-s of a 12,000-request run's start). These
functions compute the same floats with the same IEEE operations in the same order (built with
``-ffp-contract=off``: no fused multiply-add), so their results are the Python ones to the bit
(``tests/test_offered_compiled.py``). ``fairsim.traces.offered.compiled_kernel`` picks this
module where it is built and ``FAIRSIM_PURE_PYTHON=1`` is not set.
"""

from cpython.long cimport PyLong_AsLongLongAndOverflow
from cpython.number cimport PyNumber_Float
from libc.math cimport ceil


def columns(list ordered):
    """``(lengths, arrival)`` of ``_both_works``: ``float(r.prompt_len)`` and
    ``float(r.arrival_time)`` per request, in the order given (Python's ``float()`` each)."""
    cdef Py_ssize_t n = len(ordered), i
    cdef list lengths = [0.0] * n, arrival = [0.0] * n
    cdef object r
    for i in range(n):
        r = ordered[i]
        lengths[i] = PyNumber_Float(r.prompt_len)
        arrival[i] = PyNumber_Float(r.arrival_time)
    return lengths, arrival


def ideal_hits(list ordered):
    """Each request's ideal-reuse hit in tokens, as a float: the leading hash blocks seen in an
    earlier request that fit in ``prompt_len - 1`` tokens, times its hash block size
    (``_both_works``).

    Where every id is a Python ``int`` in ``0 .. 8 x (ids so far) + 65536`` (the public traces'
    ids, and the Bailian reader's re-chained names) the ids seen are a byte per id, read and
    marked in one pass over each request's ids (``_dense_walk``): no hashing, the same hits as
    the set of the reference, since such ids are equal exactly when they are the same integer.
    At the first other id the walk starts over with a set (``_walk``: any ids).

    Args:
        ordered: ``Request`` objects in arrival order (``block_hashes`` a tuple of ints).

    Returns:
        A list of floats, one per request.
    """
    cdef list out = _dense_walk(ordered)
    return out if out is not None else _walk(ordered)


cdef list _dense_walk(list ordered):
    """``ideal_hits`` with the ids seen as a byte per id (a ``bytearray`` grown as larger ids
    come), or None at the first id that is not an ``int`` in ``0 .. 8 x (ids so far) + 65536``.

    One pass per request: its leading ids are read until the first one not seen (the hit), and
    every id from there on is marked; marking as it goes is the reference's ``seen.update`` after
    the hit, as no id past the first miss is read again for this request."""
    cdef Py_ssize_t n = len(ordered), i, j, hit, m, size = 65536, total = 0
    cdef bytearray marks = bytearray(size)
    cdef unsigned char* seen = marks
    cdef list out = [0.0] * n
    cdef tuple ids
    cdef object r, x, tokens, cap
    cdef long long h
    cdef int overflow
    cdef bint leading
    for i in range(n):
        r = ordered[i]
        ids = tuple(r.block_hashes)
        m = len(ids)
        total += m
        hit = 0
        leading = True
        for j in range(m):
            x = ids[j]
            if type(x) is not int:
                return None
            h = PyLong_AsLongLongAndOverflow(x, &overflow)
            if overflow or h < 0:
                return None
            if h >= size:
                if h >= 8 * total + 65536:  # sparse ids: a byte per id would waste memory
                    return None
                marks.extend(bytes(max(h + 1, 2 * size) - size))
                size = len(marks)
                seen = marks
            if leading and seen[h]:
                hit += 1
            else:
                leading = False
                seen[h] = 1
        # Python integers, as in the reference (any length; float() raises where it does)
        cap = (r.prompt_len - 1) // r.hash_block_size  # whole blocks within L - 1 tokens
        out[i] = float((hit if hit < cap else cap) * r.hash_block_size)
    return out


cdef list _walk(list ordered):
    """``ideal_hits``' walk with the ids seen in a set (any ids: the reference's own rule)."""
    cdef set ids_seen = set()
    cdef Py_ssize_t n = len(ordered), i, j, hit, m
    cdef list out = [0.0] * n
    cdef tuple ids
    cdef object r, tokens, cap
    for i in range(n):
        r = ordered[i]
        ids = tuple(r.block_hashes)
        m = len(ids)
        hit = 0
        while hit < m and ids[hit] in ids_seen:
            hit += 1
        # Python integers, as in the reference (any length; float() raises where it does)
        cap = (r.prompt_len - 1) // r.hash_block_size  # whole blocks within L - 1 tokens
        out[i] = float((hit if hit < cap else cap) * r.hash_block_size)
        for j in range(hit, m):  # its first ``hit`` ids are in already
            ids_seen.add(ids[j])
    return out


def work_lists(list lengths, list hits, object budget):
    """``(new, pairs, chunks)`` of ``_both_works``'s ``work``: ``L - h``, ``(L * L - h * h) / 2``
    and ``ceil((L - h) / budget)`` per request, as floats (``lengths`` and ``hits`` floats)."""
    cdef Py_ssize_t n = len(lengths), i
    cdef list new = [0.0] * n, pairs = [0.0] * n, chunks = [0.0] * n
    cdef double L, h, c, b = <double>budget  # int -> float as Python's float / int does
    for i in range(n):
        L = lengths[i]
        h = hits[i]
        c = L - h
        new[i] = c
        pairs[i] = (L * L - h * h) / 2.0
        chunks[i] = ceil(c / b)
    return new, pairs, chunks


def window_ends(list t, double window_s):
    """For each arrival ``t[i]`` (non-decreasing), the index of the first arrival at or after
    ``t[i] + window_s`` (``_window_ends``'s ``bisect_left``, by one forward scan)."""
    cdef Py_ssize_t n = len(t), i, e = 0
    cdef list out = [0] * n
    cdef double limit
    for i in range(n):
        limit = <double>t[i] + window_s
        if e < i:
            e = i
        while e < n and <double>t[e] < limit:
            e += 1
        out[i] = e
    return out


def busiest(list new, list pairs, list chunks, list decode_tokens, list decode_s, list ends,
            double a, double b, double k, double d, object budget):
    """``(best, top)`` of ``_busiest``: the index of the first window whose busy time is the
    largest (a NaN wins at once, as numpy's ``argmax``) and that busy time, seconds, from running
    sums taken in order (``[0.0, *accumulate(x)]``)."""
    cdef Py_ssize_t n = len(new), i, e
    cdef double[::1] cn = _running(new), cp = _running(pairs), cc = _running(chunks)
    cdef double[::1] cdt = _running(decode_tokens), cds = _running(decode_s)
    cdef double bud = <double>budget, top = -float("inf"), busy, x
    cdef Py_ssize_t best = 0
    for i in range(n):
        e = ends[i]
        x = cn[e] - cn[i]
        busy = (a * ceil((x + (cdt[e] - cdt[i])) / bud) + b * x + k * (cp[e] - cp[i])
                + d * (cc[e] - cc[i]) + (cds[e] - cds[i]))
        if busy > top:
            best = i
            top = busy
        elif busy != busy:
            best = i
            top = busy
            break
    return best, top


cdef double[::1] _running(list values):
    """``[0.0, *accumulate(values)]`` as doubles (the same additions in the same order)."""
    cdef Py_ssize_t n = len(values), i
    cdef double[::1] out = _doubles(n + 1)
    cdef double acc
    out[0] = 0.0
    if n == 0:
        return out
    acc = <double>values[0]  # accumulate starts from the first value itself (not 0.0 + it)
    out[1] = acc
    for i in range(1, n):
        acc = acc + <double>values[i]
        out[i + 1] = acc
    return out


cdef double[::1] _doubles(Py_ssize_t n):
    from array import array
    return array("d", bytes(8 * n))
