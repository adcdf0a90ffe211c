# cython: language_level=3
"""``drr_visits``: DRR's lazy visit loop (``DRROrder._visits``) as a typed generator.

The pure-Python generator ``fairsim.policies.credit_fast.DRROrder._visits`` is the reference;
this is it statement for statement: the same visits, the same placements in the same order, the
same entries logged into the policy's ``Replay`` (``_changes``, ``_marks``, ``ids``), the same
snapshots resolved (``current``) and charges cached (``_hc``, ``_lo``) at the same points. Its
inner functions (``current``, ``price``, ``end_visit``, ``skip_rounds``) are methods of
``_Scratch``, which holds the order's scratch overlays (deficits, heads, ring links) and the
counters they shared through ``nonlocal``. ``tests/test_credit_compiled.py`` compares the two on
random queues and engine runs.

Why compiled: on the conversation trace at its native rate DRR's ring holds about 2,800 classes
and every order makes about seven idle visits before the one that serves (59,000 per run), each
a handful of dict operations that the interpreter's dispatch dominates. The arithmetic is the
reference's: deficits are Python floats (``float + float``), charges Python ints, compared as
Python compares them; ``math.ceil`` of the same float quotient.
"""

import math


cdef class _Scratch:
    """The state one ``drr_visits`` call shares between its visits (the reference's closure)."""

    cdef dict queues, items, lo, hc, ch, d, head, snxt, sprv, rnxt, rprv, deficit, cursor, emptied
    cdef list changes
    cdef object resolve, q
    cdef Py_ssize_t size
    cdef bint credited

    cdef object dget(self, object k):
        """``d[k] if k in d else dreal(k, 0.0)`` (a scratch deficit is never None)."""
        v = self.d.get(k)
        if v is None:
            v = self.deficit.get(k, 0.0)
        return v

    cdef object nxt(self, object k):
        """The next class in the scratch ring (``snxt`` overlays ``rnxt``)."""
        return self.snxt[k] if k in self.snxt else self.rnxt[k]

    cdef object current(self, object rid):
        """This step's snapshot of ``rid`` (lazy hits), kept: the bounds start from it."""
        cdef tuple item = <tuple>self.items[rid]
        if self.resolve is None:
            return item[1]
        r = self.resolve(item[1])
        if r is not item[1]:
            self.items[rid] = (item[0], r)
            self.lo.pop(rid, None)
        return r

    cdef object price(self, object k, Py_ssize_t i, object credit_to):
        """The charge of ``k``'s head (queue index ``i``), exact, or a stale head's lower bound
        when that bound already exceeds ``credit_to`` (None: price exactly)."""
        rid = (<list>self.queues[k])[i][1]
        c = self.lo.get(rid)
        if c is None:
            c = (<tuple>self.items[rid])[1].uncached_len
        elif credit_to is None or c <= credit_to:
            c = self.current(rid).uncached_len
        else:
            if not i:
                self.hc[k] = -c
            return c
        if i:
            self.ch[k] = c
        else:
            self.hc[k] = c
        return c

    cdef object end_visit(self, object k):
        """DRR.order's end_visit: an emptied class leaves the scratch ring, the cursor moves on."""
        n = self.nxt(k)
        if self.head.get(k, 0) == len(<list>self.queues[k]):
            self.d[k] = 0.0
            self.changes.append((self.deficit, k, 0.0))
            self.changes.append((self.emptied, k, True))
            p = self.sprv[k] if k in self.sprv else self.rprv[k]
            self.snxt[p] = n
            self.sprv[n] = p
            self.size -= 1
            if self.size == 0:
                n = None
        self.credited = False
        self.changes.append((self.cursor, "pos", n))
        self.changes.append((self.cursor, "credited", False))
        return n

    cdef skip_rounds(self, object k):
        """DRR.order's skip of empty rounds (exact charges)."""
        cdef list ring = [k]
        x = self.nxt(k)
        while x != k:
            ring.append(x)
            x = self.nxt(x)
        m = None
        for x in ring:
            cx = self.ch.get(x)
            if cx is None:
                cx = self.hc.get(x)
            if cx is None or cx < 0:
                cx = self.price(x, self.head.get(x, 0), None)
            mx = math.ceil((cx - self.dget(x)) / self.q)
            if m is None or mx < m:
                m = mx
        if m > 1:
            for x in ring:
                v = self.dget(x) + (m - 1) * self.q
                self.d[x] = v
                self.changes.append((self.deficit, x, v))


def drr_visits(order):
    """``order._visits()`` (``fairsim.policies.credit_fast.DRROrder``), compiled: a generator
    of the same snapshots, with the same effects on the order and its policy's ``Replay``."""
    policy = order.policy
    replay = policy._replay
    cdef list changes = replay._changes
    cdef list marks = replay._marks
    cdef list ids = replay.ids
    cdef _Scratch s = _Scratch()
    s.changes = changes
    s.deficit = policy.deficit
    s.cursor = policy.cursor
    s.emptied = policy.emptied
    s.q = policy.quantum
    s.queues = order.queues
    s.items = order.items
    s.resolve = order.resolve
    s.lo = order._lo
    s.hc = order._hc
    s.rnxt = order._nxt
    s.rprv = order._prv
    s.snxt = {}
    s.sprv = {}
    s.d = {}
    s.head = {}
    s.ch = {}
    s.size = len(s.rnxt)
    cdef dict d = s.d, ch = s.ch, hc = s.hc, head = s.head, items = s.items, lo = s.lo
    cdef dict deficit = s.deficit, cursor = s.cursor
    q = s.q
    cdef list queue
    cdef Py_ssize_t idle_visits = 0, i, last
    cdef bint moved = False, ends

    k = cursor["pos"]
    s.credited = bool(cursor["credited"])
    while s.size:
        if not s.credited:
            # Visits that credit k until one can serve (a run of idle visits, then the serving
            # one); the charge is read after the credit is computed and before it is logged.
            while True:
                dk = s.dget(k) + q
                c = ch.get(k)
                if c is None:
                    c = hc.get(k)
                if c is None:
                    c = s.price(k, head.get(k, 0), dk)
                elif c < 0:  # a stale head: its bound decides an idle visit alone
                    c = -c if -c > dk else s.price(k, head.get(k, 0), dk)
                d[k] = dk
                changes.append((deficit, k, dk))
                if c <= dk:
                    break
                # An idle visit: its cursor entries are left out of the log (the reference's
                # comment says why).
                k = s.nxt(k)
                moved = True
                idle_visits += 1
                if idle_visits >= s.size:
                    s.skip_rounds(k)
                    idle_visits = 0
            if moved:
                changes.append((cursor, "pos", k))
                moved = False
            s.credited = True
            changes.append((cursor, "credited", True))
        else:
            # The visit of k goes on (the cursor was left credited on it).
            dk = s.dget(k)
            c = ch.get(k)
            if c is None:
                c = hc.get(k)
            if c is None or c < 0:
                c = s.price(k, head.get(k, 0), None)
            if c > dk:
                k = s.end_visit(k)
                idle_visits += 1
                if idle_visits >= s.size:
                    s.skip_rounds(k)
                    idle_visits = 0
                continue
        idle_visits = 0
        queue = <list>s.queues[k]
        last = len(queue) - 1
        i = head.get(k, 0)
        while True:
            r = s.current(queue[i][1])
            dk = dk - r.uncached_len
            d[k] = dk
            changes.append((deficit, k, dk))
            i += 1
            head[k] = i
            if i > last:
                ends = True
            else:
                rid = queue[i][1]
                c = (<tuple>items[rid])[1].uncached_len if rid not in lo else s.current(rid).uncached_len
                ch[k] = c
                ends = c > dk
            if ends:
                nk = s.end_visit(k)
            ids.append(r.request_id)
            marks.append(len(changes))
            yield r
            if ends:
                k = nk
                break
