# cython: language_level=3, boundscheck=False, wraparound=False
"""The CSV readers' plain rows, typed: the compiled twin of ``azure.read``'s and
``burstgpt.read``'s common path.

A plain row is one line of the CSV's body without quotes, carriage returns inside the line,
NUL or non-ASCII bytes, with at least the header's named columns, where each count is 1 to 18
ASCII digits and the time field is, for Azure, ``YYYY-MM-DD HH:MM[:SS][.digits][Z|+HH:MM|-HH:MM]``
(``T`` may replace the space; every row of the public 2023 and 2024 traces), for BurstGPT
(``seconds``) digits with at most one ``.`` (every row of the release), and each label field
(``label_at``) has no white space at either end. For a file of plain rows only,
``plain_requests`` builds the same ``Request`` objects as the reader's Python path (same fields,
same order; ``tests/test_csv_compiled.py``) without ``csv``, the regular expression, ``datetime``
and the per-row Python calls: an Azure date-time is turned into POSIX seconds with integer
arithmetic (days from the civil date; exact, as ``datetime.timestamp()`` is for whole seconds)
and its fraction, like a BurstGPT number, is parsed by CPython's own ``float()`` routine
(``PyOS_string_to_double``), so ``t`` is the Python path's to the bit.

At the first line it does not take -- a quote, a space around a field, a short row, a time it
does not check itself, a count that is not plain digits or below 1, a decreasing timestamp -- it
returns None, and the reader reads the whole file with its Python path (the reference), which
raises, warns, sorts or skips exactly as before.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.ref cimport PyObject
from libc.math cimport fabs, rint

import builtins

from fairsim.types import Request

from fairsim.traces.formats._request_slots cimport RequestSlots, fill_request, request_slots

cdef RequestSlots _SLOTS = request_slots(Request)


def slots_written_directly() -> bool:
    """Whether ``plain_requests`` writes a request's fields into its slots (``request_slots``)."""
    return _SLOTS.direct

cdef extern from "Python.h":
    double PyOS_string_to_double(const char* s, char** endptr, PyObject* overflow_exception) except? -1.0

cdef object _round = builtins.round


cdef inline object _round_ms(double x):
    """``round(x, 3)`` for ``0 <= x``, the same float, mostly without ``round``'s decimal
    conversion (about 1,500 instructions a row).

    ``round(x, 3)`` is the double nearest to ``r / 1000``, where ``r`` is the integer nearest
    to the exact ``1000 * x`` (ties to even; CPython ``double_round``: ``_Py_dg_dtoa`` mode 3,
    then ``_Py_dg_strtod``). ``y = 1000 * x`` in doubles is within half an ulp of the exact
    product: ``2**-22`` below ``2**32`` (50 days in ms), ``2**-14`` below ``2**40`` (35 years).
    So where ``y`` is more than that bound from a half (``1e-6``, ``1e-4``), ``rint(y)`` is that
    ``r``; ``r`` and ``1000.0`` are exact and IEEE division rounds to nearest, so ``r / 1000.0``
    is the double nearest ``r / 1000``. Near a half, or at ``2**40`` and above, ``round``
    itself decides."""
    cdef double y = x * 1000.0
    cdef double r, tolerance
    if y < 1099511627776.0:
        tolerance = 1e-6 if y < 4294967296.0 else 1e-4
        r = rint(y)
        if fabs(fabs(y - r) - 0.5) > tolerance:
            return r / 1000.0
    return _round(x, 3)


def round_ms(double x) -> float:
    """``_round_ms`` for the tests (``tests/test_csv_compiled.py``): ``round(x, 3)``, 0 <= x."""
    return _round_ms(x)


#: csv's default ``field_size_limit``: a longer line may hold a field ``csv`` refuses.
cdef Py_ssize_t _CSV_FIELD_LIMIT = 131072
cdef enum:
    _MAX_FRACTION = 60  # longest fraction handled here (``0.`` + digits in a stack buffer)
cdef int _DAYS[13]
_DAYS[:] = [0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]


cdef inline bint _digits(const unsigned char* p, Py_ssize_t i, Py_ssize_t k) noexcept:
    """Whether ``p[i:i + k]`` are all ASCII digits."""
    cdef Py_ssize_t j
    for j in range(i, i + k):
        if p[j] < 48 or p[j] > 57:
            return False
    return True


cdef inline int _two(const unsigned char* p, Py_ssize_t i) noexcept:
    return (p[i] - 48) * 10 + (p[i + 1] - 48)


cdef inline long long _days_from_civil(long long y, int m, int d) noexcept:
    """Days from 1970-01-01 to ``y-m-d`` (proleptic Gregorian, ``y >= 1``; H. Hinnant's
    ``days_from_civil``), as ``date.toordinal() - 719163``."""
    cdef long long era, yoe, doy, doe
    if m <= 2:
        y -= 1
    era = y // 400  # y >= 0 here: C's division is floor division
    yoe = y - era * 400
    doy = (153 * (m - 3 if m > 2 else m + 9) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


cdef bint _stamp(const unsigned char* p, Py_ssize_t n, double* out) except -1:
    """``azure.parse_time`` of the field ``p[:n]``, into ``out``; False where this does not check
    the text itself (the Python path then reads the file).

    ``datetime.fromisoformat``'s checks of what is taken: year 1-9999, month 1-12, the month's
    days (leap years), hour 0-23, minute and second 0-59, a zone ``Z`` or ``+HH:MM``/``-HH:MM``
    with hour 0-23 and minute 0-59."""
    cdef Py_ssize_t i
    cdef int year, month, day, hour, minute, second = 0, zone = 0, dim
    cdef long long seconds
    cdef char buf[_MAX_FRACTION + 3]
    cdef Py_ssize_t f0 = 0, nf = 0
    cdef double fraction
    if n < 16 or not _digits(p, 0, 4) or p[4] != 45 or not _digits(p, 5, 2) or p[7] != 45 \
            or not _digits(p, 8, 2) or (p[10] != 32 and p[10] != 84) or not _digits(p, 11, 2) \
            or p[13] != 58 or not _digits(p, 14, 2):
        return False
    year = (p[0] - 48) * 1000 + (p[1] - 48) * 100 + _two(p, 2)
    month, day, hour, minute = _two(p, 5), _two(p, 8), _two(p, 11), _two(p, 14)
    i = 16
    if i < n and p[i] == 58:  # :SS
        if i + 3 > n or not _digits(p, i + 1, 2):
            return False
        second = _two(p, i + 1)
        i += 3
    if i < n and p[i] == 46:  # .digits (any number of them)
        f0 = i + 1
        i = f0
        while i < n and 48 <= p[i] <= 57:
            i += 1
        nf = i - f0
        if nf == 0 or nf > _MAX_FRACTION:
            return False
    if i < n:  # the zone
        if p[i] == 90 and i + 1 == n:  # Z
            i += 1
        elif (p[i] == 43 or p[i] == 45) and i + 6 == n and _digits(p, i + 1, 2) and p[i + 3] == 58 \
                and _digits(p, i + 4, 2):
            if _two(p, i + 1) > 23 or _two(p, i + 4) > 59:
                return False
            zone = _two(p, i + 1) * 3600 + _two(p, i + 4) * 60
            if p[i] == 45:
                zone = -zone
            i = n
        else:
            return False
    if year < 1 or not 1 <= month <= 12 or hour > 23 or minute > 59 or second > 59:
        return False
    dim = _DAYS[month]
    if month == 2 and year % 4 == 0 and (year % 100 != 0 or year % 400 == 0):
        dim = 29
    if not 1 <= day <= dim:
        return False
    # datetime.timestamp(): whole seconds from the epoch (exact in a double), less the zone
    seconds = _days_from_civil(year, month, day) * 86400 + hour * 3600 + minute * 60 + second - zone
    # float("0." + digits), as parse_time adds it ("0.0" where there are none)
    buf[0] = 48
    buf[1] = 46
    if nf == 0:
        buf[2] = 48
        buf[3] = 0
    else:
        for i in range(nf):
            buf[2 + i] = p[f0 + i]
        buf[2 + nf] = 0
    fraction = PyOS_string_to_double(buf, NULL, NULL)
    out[0] = <double>seconds + fraction
    return True


cdef inline bint _count(const unsigned char* p, Py_ssize_t n, long long* out) noexcept:
    """``int()`` of a field of 1 to 18 ASCII digits (leading zeros allowed, as ``int`` takes them)."""
    cdef Py_ssize_t i
    cdef long long v = 0
    if n < 1 or n > 18:
        return False
    for i in range(n):
        if p[i] < 48 or p[i] > 57:
            return False
        v = v * 10 + (p[i] - 48)
    out[0] = v
    return True


cdef bint _seconds(const unsigned char* p, Py_ssize_t n, double* out) except -1:
    """``float()`` of a field of ASCII digits with at most one ``.`` and at least one digit
    (``5``, ``110.5``, ``.5``, ``5.``), into ``out``; False for anything else (a sign, a space,
    an exponent, ``nan``: the Python path then reads the file)."""
    cdef char buf[_MAX_FRACTION + 3]
    cdef Py_ssize_t i, digits = 0, dots = 0
    if n < 1 or n > _MAX_FRACTION:
        return False
    for i in range(n):
        if 48 <= p[i] <= 57:
            digits += 1
        elif p[i] == 46:
            dots += 1
        else:
            return False
        buf[i] = p[i]
    if digits == 0 or dots > 1:
        return False
    buf[n] = 0
    out[0] = PyOS_string_to_double(buf, NULL, NULL)
    return True


cdef inline bint _space(unsigned char c) noexcept:
    """``str.isspace`` for an ASCII byte (what ``str.strip()`` takes off)."""
    return c == 32 or 9 <= c <= 13 or 28 <= c <= 31


cdef enum:
    _MAX_FIELDS = 64  # a wider header goes to the Python path


def plain_requests(object body_lines, Py_ssize_t i_time, Py_ssize_t i_context, Py_ssize_t i_generated,
                   Py_ssize_t width, str stem, object block, object max_requests, str observed_label,
                   bint seconds=False, bint rebase=True, tuple label_at=(), tuple label_names=()):
    """``(requests, locations)`` of a file whose body rows are all plain, else None.

    Args:
        body_lines: The file's lines after the header, as bytes (``open_binary(path)`` after one
            ``readline``), read at most once.
        i_time, i_context, i_generated: The positions of the time, prompt and output columns
            (``_csv.positions``).
        width: The header's number of fields (a value beyond them is the Python path's error;
            empty extra fields, as a trailing comma makes, are ignored as there).
        stem: The file's stem (request ids are ``STEM:LINE``, the header being line 1).
        block: The nominal hash block (an int >= 1).
        max_requests: Stop after this many requests (``azure.read``'s), or None.
        observed_label: ``_common.OBSERVED_OUTPUT``: an output count of 0 becomes 1 with
            this label set to 0 (``output_tokens``).
        seconds: The time field is a number of seconds (BurstGPT), not a date-time (Azure).
        rebase: Arrivals from the first row's time (Azure), else the time itself (BurstGPT).
        label_at, label_names: Columns kept as text labels, in header order, and their names; an
            empty field gives none (``burstgpt.read``).

    Returns:
        The requests in file order (arrival order: the timestamps do not decrease, and the
        rounded arrivals neither) and ``{request_id: line}`` (the ids are distinct, no request
        has an ``after``, and every label has one type: ``Collector.finish`` has nothing to
        check or sort); or None (module docstring).
    """
    cdef list requests = []
    cdef dict locations = {}, labels, shared = {}
    cdef object raw, req, arrival, value
    cdef const unsigned char* p
    cdef Py_ssize_t n, i, j, line = 1, nfield, start, at, ln
    cdef Py_ssize_t top = max(i_time, i_context, i_generated)
    cdef Py_ssize_t nlabels = len(label_at)
    cdef Py_ssize_t f_at[_MAX_FIELDS]
    cdef Py_ssize_t f_len[_MAX_FIELDS]
    cdef Py_ssize_t l_at[_MAX_FIELDS]
    cdef unsigned char c
    cdef long long prompt, gen
    cdef double t, t0 = 0.0, previous = 0.0
    cdef bint first = True, parsed
    cdef str rid
    cdef object new = object.__new__
    if width > _MAX_FIELDS or nlabels != len(label_names) or nlabels > _MAX_FIELDS:
        return None
    for j in range(nlabels):
        l_at[j] = label_at[j]
        if not 0 <= l_at[j] < width:
            return None
    for raw in body_lines:
        line += 1
        p = <const unsigned char*>PyBytes_AS_STRING(raw)
        n = PyBytes_GET_SIZE(raw)
        if n and p[n - 1] == 10:
            n -= 1
            if n and p[n - 1] == 13:
                n -= 1
        if n == 0:
            continue  # an empty row: csv gives [], which the reader skips (its line counted)
        if n > _CSV_FIELD_LIMIT:
            return None
        nfield = 0
        start = 0
        for i in range(n + 1):
            c = p[i] if i < n else 44  # the line's end closes its last field
            if c == 44:
                if nfield < width:
                    f_at[nfield], f_len[nfield] = start, i - start
                elif i > start:  # a value beyond the header's fields: the Python path's error
                    return None
                nfield += 1
                start = i + 1
            elif c == 34 or c == 13 or c == 0 or c >= 128:  # a quote, a line break csv sees, NUL, non-ASCII
                return None
        if nfield <= top:  # a short row: the Python path names the missing field
            return None
        if seconds:
            parsed = _seconds(p + f_at[i_time], f_len[i_time], &t)
        else:
            parsed = _stamp(p + f_at[i_time], f_len[i_time], &t)
        if not parsed or not _count(p + f_at[i_context], f_len[i_context], &prompt) \
                or not _count(p + f_at[i_generated], f_len[i_generated], &gen) or prompt < 1:
            return None
        if not first and t < previous:
            return None
        previous = t
        if first:
            t0 = t if rebase else 0.0
            first = False
        labels = {}
        for j in range(nlabels):
            if l_at[j] >= nfield:  # a short row's missing field: None, no label (as the Python path)
                continue
            at, ln = f_at[l_at[j]], f_len[l_at[j]]
            if ln == 0:
                continue
            if _space(p[at]) or _space(p[at + ln - 1]):  # str.strip() would change it
                return None
            value = (<bytes>raw)[at:at + ln].decode("ascii")
            labels[label_names[j]] = shared.setdefault(value, value)  # one str per distinct value
        if gen == 0:  # output_tokens: vLLM samples at least one token; the 0 is kept as a label
            labels[observed_label] = 0
            gen = 1
        arrival = _round_ms(t - t0 if t - t0 > 0.0 else 0.0)  # round(max(0.0, t - t0), 3)
        rid = f"{stem}:{line}"
        req = new(Request)
        # Every field, as make_request sets them (a frozen dataclass: into its slots);
        # Request.__post_init__ has nothing to refuse: lengths >= 1, arrival >= 0, block >= 1.
        fill_request(&_SLOTS, req, rid, arrival, prompt, (), block, gen, labels)
        requests.append(req)
        locations[rid] = line
        if max_requests is not None and len(requests) >= max_requests:
            break
    return requests, locations
