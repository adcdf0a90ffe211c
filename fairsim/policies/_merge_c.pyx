# cython: language_level=3, boundscheck=False, wraparound=False
"""Compiled twins of Fairway's merge and of its lanes' plumbing (``fairsim.policies.incremental``).

- ``Merge``: ``incremental.merge_lanes`` (Fairway's merge of the Fast and Fair lanes, with
  Fairway-carry's carried debt taken off once the oldest is placed) as an iterator with C
  ledgers.
- ``Resolved``: ``ArrivalOrder._resolved`` (the Fair lane read through the lazy-hits resolver).
- ``LanePair``: ``LazyLanes.add``/``remove``/``stale`` over a Fast lane and an ``ArrivalOrder``
  (its ``add`` and ``remove`` inline, statement for statement).

Each is its reference statement for statement: the same lane reads in the same order (a lane's
head is read at the same ``next()`` as the generator reads it), the same ``placed`` set, the
same snapshots resolved and written back. The ledgers are C doubles, and the reference's are
Python floats: ``Merge`` is used only where the weights, the start ledger and the carried debt
are ``float`` objects (``incremental._merge_of``), so each ``weight * c`` is ``float * int``,
which Python computes by converting ``c`` with ``PyLong_AsDouble`` (as the ``<double>`` casts
here do) and multiplying in IEEE double, and every ``+=``/``-=`` is one IEEE addition; built
with ``-ffp-contract=off`` so no multiply-add is fused. Ties go to the Fast lane (``<=``), as
in the reference. ``tests/test_merge_compiled.py`` compares each twin with its reference.

Why compiled: at the conversation trace's native rate about 3,800 requests wait and every read,
join, leave and stale mark went through these few Python lines (py-spy: ``merge_lanes`` 13 %,
``Lanes.add`` 6 %, ``LazyLanes.stale`` 4 %, ``Lanes.remove`` 2.4 %, ``_resolved`` 2.5 % of
Fairway's loop), most of it the interpreter's dispatch.
"""

from fairsim.types import QueuedRequest

# Positions of the snapshot fields read here, in QueuedRequest's order (a NamedTuple: a snapshot
# of exactly that type is read by position, any other object by attribute).
cdef Py_ssize_t RID = QueuedRequest._fields.index("request_id")
cdef Py_ssize_t ARRIVAL = QueuedRequest._fields.index("arrival_time")
cdef Py_ssize_t UNCACHED = QueuedRequest._fields.index("uncached_len")
cdef type SNAPSHOT = QueuedRequest


cdef inline object rid_of(object q):
    if type(q) is SNAPSHOT:
        return (<tuple>q)[RID]
    return q.request_id


cdef inline double work_of(object q) except? -1.0:
    """``q.uncached_len`` as ``float * int`` converts it (``PyLong_AsDouble``)."""
    if type(q) is SNAPSHOT:
        return <double>((<tuple>q)[UNCACHED])
    return <double>q.uncached_len


cdef inline object step(object it):
    """``next(it)``; an exhausted lane raises RuntimeError, as a ``next()`` inside the
    reference generator does (PEP 479)."""
    try:
        return next(it)
    except StopIteration as exc:
        raise RuntimeError("generator raised StopIteration") from exc


cdef class Merge:
    """``merge_lanes(fast, fair, n, fast_weight, fair_weight, fast_ledger0, carried, oldest)``
    as an iterator: the same items, read from the lanes at the same calls (the two fronts at
    the first ``next()``). Arguments as the reference's; ``fast_ledger0``: ``None`` or a float."""

    cdef object fast, fair, fast_head, fair_head, oldest, ledger0
    cdef set placed
    cdef double fast_w, fair_w, fast_ledger, fair_ledger, carried
    cdef Py_ssize_t left
    cdef bint started, done

    def __init__(self, fast, fair, Py_ssize_t n, double fast_weight, double fair_weight,
                 fast_ledger0=None, double carried=0.0, oldest=None):
        self.fast = fast
        self.fair = fair
        self.left = n
        self.fast_w = fast_weight
        self.fair_w = fair_weight
        self.ledger0 = fast_ledger0
        self.carried = carried
        self.oldest = oldest
        self.placed = set()

    def __iter__(self):
        return self

    def __next__(self):
        if self.done:
            raise StopIteration
        try:
            return self._next()
        except BaseException:
            self.done = True  # a generator that raised is finished
            raise

    cdef object _next(self):
        cdef object x
        cdef set placed = self.placed
        if not self.started:
            self.started = True
            self.fast_head = step(self.fast)
            self.fair_head = step(self.fair)
            if self.ledger0 is None:
                self.fast_ledger = self.fast_w * work_of(self.fast_head) + self.carried
            else:
                self.fast_ledger = <double>self.ledger0 + self.carried
            self.fair_ledger = self.fair_w * work_of(self.fair_head)
        if self.left <= 0:
            self.done = True
            raise StopIteration
        self.left -= 1
        if self.fast_ledger <= self.fair_ledger:  # tie -> Fast
            while rid_of(self.fast_head) in placed:
                self.fast_head = step(self.fast)
            x = self.fast_head
            self.fast_ledger += self.fast_w * work_of(x)
        else:
            while rid_of(self.fair_head) in placed:
                self.fair_head = step(self.fair)
            x = self.fair_head
            self.fair_ledger += self.fair_w * work_of(x)
        rid = rid_of(x)
        placed.add(rid)
        # The reference takes the debt off after the yield, before its next placement: the same
        # ledgers at every comparison.
        if self.oldest is not None and rid == self.oldest:
            self.fast_ledger -= self.carried
            self.carried = 0.0
            self.oldest = None
        return x


cdef class Resolved:
    """``ArrivalOrder._resolved(resolve)`` over ``items`` (its ``OrderedDict``) as an iterator:
    each snapshot resolved in order, a changed one written back in place."""

    cdef object items, it, resolve
    cdef bint done

    def __init__(self, items, resolve):
        self.items = items
        self.resolve = resolve
        self.it = None

    def __iter__(self):
        return self

    def __next__(self):
        cdef tuple kv
        if self.done:
            raise StopIteration
        if self.it is None:
            self.it = iter(self.items.items())  # at the first next(), as the generator
        try:
            kv = <tuple>next(self.it)
            q = kv[1]
            r = self.resolve(q)
            if r is not q:
                self.items[kv[0]] = r  # a value change, not a size change: the iteration stays valid
        except BaseException:
            self.done = True
            raise
        return r


cdef class LanePair:
    """``LazyLanes.add``/``remove``/``stale`` over ``(fast, fair)``: the Fast lane's methods
    called as bound (its compiled ones where it has them), then ``ArrivalOrder.add``/``remove``
    inline (``fair`` must be exactly an ``ArrivalOrder``: ``incremental.LazyLanes``) and no
    call for its ``stale``, which does nothing."""

    cdef object fast_add, fast_remove, fast_stale, fair

    def __init__(self, fast, fair):
        self.fast_add = fast.add
        self.fast_remove = fast.remove
        self.fast_stale = fast.stale
        self.fair = fair

    def add(self, q):
        """``fast.add(q)``, then ``ArrivalOrder.add(fair, q)``."""
        self.fast_add(q)
        fair = self.fair
        rid = rid_of(q)
        items = fair.items
        if rid not in items:
            key = (q.arrival_time if type(q) is not SNAPSHOT else (<tuple>q)[ARRIVAL], rid)
            last = fair._last
            if last is not None and key < last:
                fair._sorted = False
            else:
                fair._last = key
        items[rid] = q

    def remove(self, request_id):
        """``fast.remove(request_id)``, then ``ArrivalOrder.remove(fair, request_id)``."""
        self.fast_remove(request_id)
        del self.fair.items[request_id]

    def stale(self, request_ids, raised=None):
        """``fast.stale(request_ids, raised)`` (``ArrivalOrder.stale`` does nothing)."""
        self.fast_stale(request_ids, raised)
