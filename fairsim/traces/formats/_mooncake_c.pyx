# cython: language_level=3, boundscheck=False, wraparound=False
"""The Mooncake reader's plain rows, typed: the compiled twin of ``mooncake.read``'s common path.

A plain row has exactly ``timestamp``, ``input_length``, ``output_length`` and ``hash_ids``, of
the types ``mooncake._parse`` accepts at once (every row of the public Mooncake traces). For a
file of plain rows only, ``plain_requests`` builds the same ``Request`` objects as
``mooncake.read`` (same fields, in the same order; ``tests/test_mooncake_compiled.py``) without
the per-row ``_Row`` and Python calls (the conversation trace's read: 101 -> 55 ms CPU, of which
``orjson`` is about 20; ``experiments/perf_fixed_costs.py``). At the first row it does not
take -- any other field, a value ``_parse`` would check field by field, a broken line, a
decreasing timestamp, a count of ids that fits no block, an id at two positions -- it returns
None, and ``mooncake.read`` reads the file with its Python path (the reference), which raises,
warns or skips exactly as before.
"""

from cpython.object cimport PyObject_GenericSetAttr
from libc.math cimport isfinite

from fairsim.types import Request

cdef object _TS = "timestamp"
cdef object _IN = "input_length"
cdef object _OUT = "output_length"
cdef object _IDS = "hash_ids"
cdef double _INT_AS_FLOAT = 2.0 ** 1023  # mooncake._INT_AS_FLOAT
cdef bytes _DIGITS_TO_ZERO = bytes.maketrans(b"123456789", b"000000000")  # _common's
cdef bytes _LONG_DIGITS = b"0" * 19
cdef object _MAX_LEN = 2 ** 62  # longer prompts (none is real) take the Python path: no C overflow


def plain_requests(object lines_of_file, object loads, object safe, str stem, object block):
    """``(requests, locations, block)`` of a file whose records are all plain, else None.

    Args:
        lines_of_file: The file's lines as bytes (``open_binary(path)``), read once.
        loads: ``orjson.loads``.
        safe: ``_common._orjson_safe``: a line with a run of 19+ digits is read by ``loads`` only
            if it holds no integer beyond 64 bits (``iter_json_lines``' rule).
        stem: The file's stem (request ids are ``STEM:LINE``, as ``mooncake.read`` names them).
        block: The hash block size given (``--hash-block-size`` or the sidecar's), or None:
            512, which every row's id count must fit (else None: the Python path picks one).

    Returns:
        The requests in file order (which is arrival order: the timestamps do not decrease),
        ``{request_id: line}`` (the ids, ``STEM:LINE``, are distinct; no request has labels or
        an ``after``: nothing is left for ``Collector.finish`` to check or sort), and the hash
        block size; or None (a
        line ``iter_json_lines`` would not give as a plain record: a blank line before more
        records, broken JSON, a non-object, a byte-order mark; a row ``_parse`` would check
        field by field; a decreasing timestamp; an id count or a repeated id to report).
    """
    cdef list lines = [], ts_ms = [], lens = [], outs = [], idss = []
    cdef double previous = 0.0, t
    cdef object rec, ts, n, out, ids, x, raw
    cdef Py_ssize_t i, m, count, line = 0, blank = 0
    cdef long long L, bs, full
    if block is not None and (type(block) is not int or not 1 <= block <= _MAX_LEN):
        return None
    for raw in lines_of_file:
        line += 1
        if _LONG_DIGITS in (<bytes>raw).translate(_DIGITS_TO_ZERO) and not safe(raw):
            return None
        try:
            rec = loads(raw)
        except ValueError:  # orjson.JSONDecodeError: a blank line, or one to report
            if not (<bytes>raw).strip():
                blank = line
                continue
            return None
        if blank:  # a blank line before more records: an error the Python path reports
            return None
        if type(rec) is not dict or len(<dict>rec) != 4:
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
        if t < previous:
            return None
        previous = t
        lines.append(line)
        ts_ms.append(t)
        lens.append(n)
        outs.append(out)
        idss.append(ids)
    count = len(lines)
    bs = 512 if block is None else block
    cdef list requests = [None] * count
    cdef dict locations = {}
    cdef str rid
    cdef object req, prompt, block_obj = bs
    cdef object new = object.__new__
    for i in range(count):
        ids = idss[i]
        prompt = lens[i]
        L = prompt
        m = len(<list>ids)
        full = L // bs
        # The count must fit the block (ceil or floor); with none given it must fit 512.
        if (m != full and m != -(-L // bs)) or len(set(ids)) != m:
            return None
        req = new(Request)
        rid = f"{stem}:{lines[i]}"
        locations[rid] = lines[i]
        # Every field, as make_request sets them (a frozen dataclass: object.__setattr__'s way)
        PyObject_GenericSetAttr(req, "request_id", rid)
        PyObject_GenericSetAttr(req, "arrival_time", <double>ts_ms[i] / 1000.0)
        PyObject_GenericSetAttr(req, "prompt_len", prompt)
        PyObject_GenericSetAttr(req, "block_hashes", tuple(ids[:full]))
        PyObject_GenericSetAttr(req, "hash_block_size", block_obj)
        PyObject_GenericSetAttr(req, "output_len", outs[i])
        PyObject_GenericSetAttr(req, "labels", {})
        PyObject_GenericSetAttr(req, "session_id", None)
        PyObject_GenericSetAttr(req, "after", None)
        PyObject_GenericSetAttr(req, "delay_s", 0.0)
        PyObject_GenericSetAttr(req, "segments", ())
        # Request.__post_init__ has nothing to refuse here: lengths >= 1, arrival >= 0, delay 0,
        # no after, no segments, block >= 1, and at most L // block full blocks of ids.
        requests[i] = req
    return requests, locations, bs
