# The compiled readers' (_mooncake_c, _chain_c) common steps over a JSON line's bytes. Inline
# functions only: each reader compiles them into itself, nothing is built from this file.


cdef inline Py_ssize_t skip_ws(const unsigned char* p, Py_ssize_t i, Py_ssize_t n) noexcept:
    """The index of the first byte at or after ``i`` that is not JSON whitespace."""
    while i < n and (p[i] == 32 or p[i] == 10 or p[i] == 13 or p[i] == 9):
        i += 1
    return i


cdef inline Py_ssize_t object_key(const unsigned char* p, Py_ssize_t i, Py_ssize_t n, Py_ssize_t* start) noexcept:
    """An object key from ``p[i]`` (whitespace, then a string without escapes or control bytes):
    the index of its closing quote, the key being ``p[start[0]:that index]``; -1 for anything
    else (a reader then hands the line to the JSON parser)."""
    i = skip_ws(p, i, n)
    if i >= n or p[i] != 34:  # "
        return -1
    start[0] = i + 1
    i += 1
    while i < n and p[i] != 34:
        if p[i] == 92 or p[i] < 32:  # an escape or a control byte
            return -1
        i += 1
    return i if i < n else -1


cdef inline Py_ssize_t after_colon(const unsigned char* p, Py_ssize_t i, Py_ssize_t n) noexcept:
    """From a key's closing quote at ``p[i]``: the index of the value after ``:`` (whitespace
    skipped on both sides), or -1."""
    i = skip_ws(p, i + 1, n)
    if i >= n or p[i] != 58:  # :
        return -1
    return skip_ws(p, i + 1, n)


cdef inline Py_ssize_t json_uint(const unsigned char* p, Py_ssize_t i, Py_ssize_t n, long long* value) noexcept:
    """A JSON integer of 1 to 18 digits, unsigned, without a leading zero, at ``p[i]``: the index
    after it (``value`` set), or -1 for anything else (a sign, a leading zero, 19 or more digits:
    below 2**63, no C overflow). A fraction or an exponent after the digits is the caller's to
    find: the readers take only whitespace, ``,``, ``]`` or ``}`` next."""
    cdef Py_ssize_t start = i
    cdef long long v = 0
    cdef unsigned char c
    while i < n:
        c = p[i] - 48  # (wraps above 9 for any byte below '0')
        if c > 9:
            break
        if i - start == 18:
            return -1
        v = v * 10 + c
        i += 1
    if i == start or (p[start] == 48 and i - start > 1):
        return -1
    value[0] = v
    return i
