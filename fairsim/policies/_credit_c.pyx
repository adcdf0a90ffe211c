# cython: language_level=3
"""Compiled twins of some fast paths' hot parts (``fairsim.policies.compiled_twins`` loads them).

- ``drr_visits``, ``drr_dynamo_picks``, ``dlpm_passes``: the credit orders' lazy read loops as
  typed generators; references ``fairsim.policies.credit_fast.DRROrder._visits``,
  ``fairsim.policies.drr_dynamo.DRRDynamoOrder._pick_all``,
  ``fairsim.policies.credit_fast.DLPMOrder._passes``.
- ``CompiledCountedPrefixTree``: DFS-weight's tree with C fields per node; reference
  ``fairsim.policies.sglang.CountedPrefixTree``.
- ``CompiledHeadHeapOrder``: PEEK's head-and-heap order with C helper methods; reference
  ``fairsim.policies.peek_order.HeadHeapOrder``.
- ``in_batch_deprioritized``, ``hrrn_keyed``: SGLang's in-batch de-prioritisation and HRRN's
  keyed sort, which HRRN runs over the whole queue in every step at or below 128 waiting (its
  ratios move every step); references ``fairsim.policies.sglang.in_batch_deprioritized_python``
  and ``hrrn_keyed_python`` (``tests/test_sglang_sort_speed.py`` compares them).

Each twin is its reference statement for statement: the same visits, picks and placements in
the same order, the same entries logged into the policy's ``Replay`` (``_changes``, ``_marks``,
``ids``), the same snapshots resolved and costs or charges kept (``_hc``, ``_lo``,
``head_cost``, DLPM's first refill) at the same points, the same tree, head, heap and journal.
``_visits``'s inner functions (``current``, ``price``, ``end_visit``, ``skip_rounds``) are
methods of ``_Scratch``, which holds the order's scratch overlays and the counters they shared
through ``nonlocal``. ``tests/test_credit_compiled.py`` compares each with its reference on
random operations and engine runs.

Why compiled: on the conversation trace at its native rate DRR's ring holds about 2,800 classes
and every order makes about seven idle visits (DRR-Dynamo's scans about six) before the one that
serves, each a handful of dict operations that the interpreter's dispatch dominates; DFS-weight
walks a request's cached prefix node by node at every add and removal; PEEK's order makes a few
Python method calls per change. The arithmetic is the reference's: deficits are Python floats
(``float + float``), charges Python ints, compared as Python compares them; ``math.ceil`` and
``//`` of the same float quotients. Where a twin saved nothing measurable it was not kept (VTC's
merge and the aging orders' lazy-key read were tried: 0.0 % and 0.3 % of the instructions).
"""

import math
from bisect import bisect_left, insort
from fairsim.policies._sorted_c cimport heapify, heappop, heappush  # heapq's, keys compared in C
from itertools import islice


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


cdef object _dynamo_price(dict cost, dict queues, dict head, dict ch, dict hcost, object x):
    """The cost of ``x``'s head: its oldest request's is kept (``head_cost``) across reads."""
    i = head.get(x, 0)
    c = cost[(<list>queues[x])[i][1]]
    if i:
        ch[x] = c
    else:
        hcost[x] = c
    return c


def drr_dynamo_picks(order):
    """``order._pick_all()`` (``fairsim.policies.drr_dynamo.DRRDynamoOrder``), compiled: a
    generator of the same picks, with the same effects on the order and its policy's
    ``Replay`` (the same expressions in the same order, so the same floats)."""
    policy = order.policy
    replay = policy._replay
    cdef list changes = replay._changes
    cdef list marks = replay._marks
    cdef list ids = replay.ids
    cdef dict cost = policy.cost
    q = policy.quantum
    cdef dict deficit = policy.deficit, cursor = policy.cursor, position = policy.position
    cdef dict queues = order.queues, class_at = order.class_at, items = order.items
    cdef list ring = order.ring
    resolve = order.resolve
    cdef dict hcost = order.head_cost
    cdef dict ch = {}  # class -> cost of its head once it moved in this order
    cdef Py_ssize_t n = len(ring)
    cdef dict d = {}  # scratch deficits of the classes changed in this order
    cdef dict head = {}  # class -> its head's index in its queue
    cdef set gone = set()  # positions of the classes this order emptied
    cdef Py_ssize_t left = n, start, jj, j, i
    cdef list queue, backlogged
    round_pos, carry = cursor["round"], cursor["carry"]

    while left:
        k = None
        if carry is not None:
            dk = d[carry] if carry in d else deficit.get(carry, 0.0)
            c = ch[carry] if carry in ch else hcost.get(carry)
            if c is None:
                c = _dynamo_price(cost, queues, head, ch, hcost, carry)
            if c <= dk:
                k = carry
        if k is None:
            # The scan: the ring from the first class at or after the round cursor, wrapping
            # (positions start..n-1, then 0..start-1).
            start = bisect_left(ring, round_pos)
            for jj in range(n):
                j = start + jj
                if j >= n:
                    j -= n
                p = ring[j]
                if p in gone:
                    continue
                x = class_at[p]
                dk = d[x] if x in d else deficit.get(x, 0.0)
                c = ch[x] if x in ch else hcost.get(x)
                if c is None:
                    c = _dynamo_price(cost, queues, head, ch, hcost, x)
                if c <= dk:  # credit carried from earlier rounds
                    k = x
                    break
                dk += q
                d[x] = dk
                changes.append((deficit, x, dk))
                if c <= dk:
                    k = x
                    break
            else:
                # Nobody could pay: every class gets the rounds the first payer needs.
                backlogged = [class_at[p] for p in ring if p not in gone]  # vector order
                rounds = min([math.ceil(((ch[x] if x in ch else hcost.get(x) or _dynamo_price(cost, queues, head, ch, hcost, x))
                                         - (d[x] if x in d else deficit.get(x, 0.0))) / q) for x in backlogged])
                for x in backlogged:
                    v = (d[x] if x in d else deficit.get(x, 0.0)) + rounds * q
                    d[x] = v
                    changes.append((deficit, x, v))
                for jj in range(n):
                    j = start + jj
                    if j >= n:
                        j -= n
                    p = ring[j]
                    if p not in gone:
                        x = class_at[p]
                        if (ch[x] if x in ch else hcost[x]) <= d[x]:
                            k = x
                            break
                dk = d[k]
        # Serve k (pop_candidate): charge the fixed cost; an emptied class leaves (deficit 0),
        # else it carries while it has credit.
        queue = <list>queues[k]
        i = head.get(k, 0)
        rid = queue[i][1]
        dk = dk - cost[rid]
        head[k] = i + 1
        round_pos = position[k] + 1
        if i + 1 == len(queue):
            dk = 0.0
            gone.add(position[k])
            left -= 1
            carry = None
        else:
            ch[k] = cost[queue[i + 1][1]]
            carry = k if dk > 0 else None
        d[k] = dk
        changes.append((deficit, k, dk))
        changes.append((cursor, "round", round_pos))
        changes.append((cursor, "carry", carry))
        r = (<tuple>items[rid])[1]
        if resolve is not None:
            r = resolve(r)
        ids.append(r.request_id)
        marks.append(len(changes))
        yield r


cdef class _CNode:
    """``fairsim.policies.sglang._CountedNode`` with C fields."""

    cdef dict children
    cdef list own  # sorted (arrival_time, request_id) of the hits ending here
    cdef Py_ssize_t count  # waiting requests at this node or below: the weight
    cdef object first  # least (arrival_time, request_id) below, or None: not known

    def __cinit__(self, first):
        self.children = {}
        self.own = []
        self.count = 0
        self.first = first


cdef object _node_first(_CNode node):
    """``sglang._first``: ``node.first``, recomputing the unknown ones below it (iterative)."""
    cdef list stack = [node]
    cdef list unknown, firsts
    cdef _CNode n, c
    while stack:
        n = <_CNode>stack[-1]
        if n.first is not None:
            stack.pop()
            continue
        unknown = [c for c in n.children.values() if c.first is None]
        if unknown:
            stack.extend(unknown)
            continue
        stack.pop()
        firsts = [c.first for c in n.children.values()]
        if n.own:
            firsts.append(n.own[0])
        n.first = min(firsts)
    return node.first


cdef tuple _node_key(_CNode c):
    """``sglang._child_key``: ``(-weight, first arrival)``."""
    return (-c.count, c.first if c.first is not None else _node_first(c))


def _node_key_py(c):
    return _node_key(<_CNode>c)


cdef class CompiledCountedPrefixTree:
    """``fairsim.policies.sglang.CountedPrefixTree`` (``dfs-weight``'s fast path, the reference)
    compiled: the same tree, counts, cached first arrivals and walk, so the same order."""

    moved_by = "snapshots"  # as CountedPrefixTree: only add (a new or replaced snapshot) and remove

    cdef _CNode root
    cdef dict _snaps

    def __init__(self):
        self.root = _CNode(None)
        self._snaps = {}

    def __len__(self):
        return len(self._snaps)

    def add(self, q):
        rid = q.request_id
        if rid in self._snaps:
            self.remove(rid)
        self._snaps[rid] = q
        mine = (q.arrival_time, rid)
        cdef _CNode node = self.root, child
        cdef Py_ssize_t bs = q.block_size
        path = q.block_keys[: q.cached_len // bs] if bs > 0 else ()
        for key in path:
            child = node.children.get(key)
            if child is None:
                child = _CNode(mine)
                node.children[key] = child
            elif child.first is not None and mine < child.first:
                child.first = mine
            child.count += 1
            node = child
        insort(node.own, mine)

    def remove(self, request_id):
        q = self._snaps.pop(request_id)
        mine = (q.arrival_time, request_id)
        cdef _CNode node = self.root, child
        cdef Py_ssize_t bs = q.block_size
        path = q.block_keys[: q.cached_len // bs] if bs > 0 else ()
        for key in path:
            child = <_CNode>node.children[key]
            child.count -= 1
            if not child.count:
                del node.children[key]  # nothing waits below it any more
                return
            if child.first == mine:
                child.first = None  # the next one is found when a read needs it
            node = child
        del node.own[bisect_left(node.own, mine)]

    def iter_order(self, now=0.0):
        return _counted_walk(self.root, self._snaps)


def _counted_walk(_CNode root, dict snaps):
    """``CountedPrefixTree.iter_order``: children heaviest first (the best by ``min``, the rest
    sorted when asked for: ``sglang._heaviest_first``), each subtree before the node's own."""
    cdef list stack = [[root, None, 0]]  # node, its children in order (None: none read yet), next index
    cdef list top, rest
    cdef _CNode node, best, c
    cdef Py_ssize_t i
    while stack:
        top = <list>stack[-1]
        node = <_CNode>top[0]
        child = None
        children = node.children
        if children:
            rest = <list>top[1]
            i = top[2]
            if rest is None:
                if len(children) == 1:
                    rest = list(children.values())
                else:
                    best = min(children.values(), key=_node_key_py)
                    rest = [best]
                top[1] = rest
            elif i == 1 and len(rest) == 1 and len(children) > 1:
                best = <_CNode>rest[0]
                rest.extend(sorted([c for c in children.values() if c is not best], key=_node_key_py))
            if i < len(rest):
                child = rest[i]
                top[2] = i + 1
        if child is not None:
            stack.append([child, None, 0])
            continue
        stack.pop()
        for _, rid in node.own:
            yield snaps[rid]


cdef class CompiledHeadHeapOrder:
    """``fairsim.policies.peek_order.HeadHeapOrder`` (PEEK's fast path, the reference) compiled:
    the same head, heap, dead copies, head-change journal and reads, method for method (its
    helpers are C methods here), so the same order and the same ``head_changes``."""

    moved_by = "snapshots"

    cdef readonly object key
    cdef readonly dict _by_id, _rest, _shown, _entered, _left
    cdef readonly Py_ssize_t _cap, _reads
    cdef readonly list _head, _heap, _taken

    def __init__(self, key):
        self.key = key
        self._by_id = {}
        self._cap = 0
        self._head = []
        self._heap = []
        self._rest = {}
        self._taken = []
        self._reads = 0
        self._shown = {}
        self._entered = {}
        self._left = {}

    def __len__(self):
        return len(self._by_id)

    def add(self, q):
        rid = q.request_id
        k = self.key(q)
        old = self._by_id.get(rid)
        if old is not None:
            if old[0] == k:  # same place: keep the key object (``_rest`` knows it by identity)
                self._by_id[rid] = (old[0], q)
                return
            self._take_out(rid, old[0])
        self._by_id[rid] = (k, q)
        self._put_in(k)

    def remove(self, request_id):
        k = self._by_id.pop(request_id)[0]
        self._take_out(request_id, k)

    cdef _put_in(self, tuple k):
        if self._taken:
            self._put_back()
        cdef list head = self._head
        if len(head) < self._cap:  # the heap holds no live key: every key belongs to the head
            insort(head, k)
            self._note_in(k)
        elif head and k < head[-1]:
            insort(head, k)
            self._note_in(k)
            out = head.pop()
            self._note_out(out)
            self._push_rest(out)
        else:
            self._push_rest(k)

    cdef _take_out(self, rid, tuple k):
        if self._taken:
            self._put_back()
        cdef dict rest = self._rest
        if rest.get(rid) is k:  # in the heap: its copy there is dead from now on
            del rest[rid]
            if len(self._heap) > 2 * len(rest) + 64:
                self._compact()
            return
        cdef list head = self._head
        i = bisect_left(head, k)
        del head[i]
        self._note_out(k)
        self._refill()

    cdef _push_rest(self, tuple k):
        heappush(self._heap, k)
        self._rest[k[-1]] = k

    cdef _refill(self):
        cdef list head = self._head, heap = self._heap
        cdef dict rest = self._rest
        while len(head) < self._cap and heap:
            k = heappop(heap)
            if rest.get(k[-1]) is k:  # live (else a dead copy, dropped)
                del rest[k[-1]]
                head.append(k)  # above every key in the head (invariant)
                self._note_in(k)

    cdef _compact(self):
        cdef list heap = self._heap
        heap[:] = self._rest.values()
        heapify(heap)

    cdef _put_back(self):
        cdef list heap = self._heap
        for k in self._taken:
            heappush(heap, k)
        self._taken = []

    cdef _note_in(self, tuple k):
        rid = k[-1]
        was = self._left.get(rid)
        if was is not None and was[0] == k:  # back with the key it was shown with: no change
            del self._left[rid]
            self._shown[rid] = was
        else:
            self._entered[rid] = k

    cdef _note_out(self, tuple k):
        rid = k[-1]
        was = self._shown.pop(rid, None)
        if was is not None:
            self._left[rid] = was
        else:
            self._entered.pop(rid, None)

    def head_changes(self, k):
        if self._taken:
            self._put_back()
        cdef Py_ssize_t n = max(k, 0)
        cdef list head = self._head
        if n >= self._cap:
            self._cap = n
            self._refill()
        else:
            self._cap = n
            while len(head) > n:
                out = head.pop()
                self._note_out(out)
                self._push_rest(out)
        cdef dict by_id = self._by_id, shown = self._shown
        cdef list entered = []
        for rid, key in self._entered.items():
            q = by_id[rid][1]
            shown[rid] = (key, q)
            entered.append(q)
        left = [q for _, q in self._left.values()]
        self._entered = {}
        self._left = {}
        return entered, left

    def iter_order(self, now=0.0):
        if self._taken:
            self._put_back()
        self._reads += 1
        return _head_heap_read(self, self._reads)

    def head(self, k):
        return list(islice(self.iter_order(), k))


def _head_heap_read(CompiledHeadHeapOrder order, Py_ssize_t read):
    """``HeadHeapOrder._read``: the head's snapshots, then the heap's live keys taken in order;
    a read resumed after a later read puts the later one's keys back and goes on after the last
    key it yielded."""
    cdef dict by_id = order._by_id
    for k in order._head:
        yield by_id[k[-1]][1]
    cdef list heap = order._heap
    cdef dict rest = order._rest
    last = None  # the last key yielded from the heap
    while True:
        if order._reads != read:
            order._put_back()
            order._reads += 1
            read = order._reads
        if not heap:
            return
        k = heappop(heap)
        rid = k[-1]
        if rest.get(rid) is not k:
            continue  # dead: dropped for good
        order._taken.append(k)
        if last is None or k > last:
            last = k
            yield by_id[rid][1]


def dlpm_passes(order):
    """``order._passes()`` (``fairsim.policies.credit_fast.DLPMOrder``), compiled: the same
    passes, placements and log entries (``Replay.log`` and ``placed`` written out), and the same
    first refill kept and reused (``order._refill``)."""
    policy = order.policy
    replay = policy._replay
    cdef dict real = policy.deficit
    q = policy.quantum
    cdef list changes = replay._changes, marks = replay._marks, ids = replay.ids
    cdef dict queues = order.queues, items = order.items
    cdef set logged = order._logged
    cdef dict d = {}
    cdef dict head = {}
    cdef Py_ssize_t left = len(items), i, n0
    cdef list heap = [], queue, backlogged
    cdef bint first = True
    source = iter(order._pos)  # pass 1: the persistent sorted heads
    state_key = order._key
    while left:
        nxt = next(source, None) if source is not None else None
        while True:  # one pass: merge of the clients with credit, in LPM order
            if heap and (nxt is None or heap[0][0] < nxt):
                key, u = heappop(heap)
            elif nxt is None:
                break
            else:
                key = nxt
                u = (<tuple>items[key[2]])[0]
                nxt = next(source, None)
            r = (<tuple>items[key[2]])[1]
            v = (d[u] if u in d else real.get(u, 0.0)) - r.uncached_len
            d[u] = v
            changes.append((real, u, v))
            logged.add(u)
            i = head.get(u, 0) + 1
            head[u] = i
            queue = <list>queues[u]
            if i == len(queue):  # its queue empties here: it leaves, deficit reset (DLPM.order)
                changes.append((real, u, 0.0))
            ids.append(r.request_id)
            marks.append(len(changes))
            left -= 1
            yield r
            if d[u] > 0 and i < len(queue):
                heappush(heap, (queue[i], u))
        source = None
        if not left:
            return
        # Every backlogged client now has a deficit <= 0: refill (DLPM.order), next pass.
        cached = order._refill if first else None
        if cached is not None and cached[0] == state_key:
            _, dvals, entries, heap0 = cached  # the same state as the last read's refill
            d.update(dvals)
            changes.extend(entries)
            logged.update(dvals)
            heap = list(heap0)
        else:
            backlogged = [u for u, queue in queues.items() if head.get(u, 0) < len(queue)]
            m = min([int(-(d[u] if u in d else real.get(u, 0.0)) // q) + 1 for u in backlogged])
            n0 = len(changes)
            for u in backlogged:
                v = (d[u] if u in d else real.get(u, 0.0)) + m * q
                d[u] = v
                changes.append((real, u, v))
                logged.add(u)
            heap = [(queues[u][head.get(u, 0)], u) for u in backlogged if d[u] > 0]
            heapify(heap)
            if first:
                order._refill = (state_key, {u: d[u] for u in backlogged}, changes[n0:], list(heap))
        first = False


def in_batch_deprioritized(waiting, Py_ssize_t tokens):
    """``fairsim.policies.sglang.in_batch_deprioritized_python`` (the reference), compiled: the
    same one pass grouping the requests whose hit is at most ``tokens`` by their first
    ``ceil(tokens / block_size)`` block keys, then every member but the least by
    ``(arrival_time, request_id)`` of each group of two or more."""
    cdef dict first = {}
    cdef dict shared = {}
    cdef list members
    cdef Py_ssize_t bs, m
    cdef set out = set()
    for r in waiting:
        bs = r.block_size
        if r.cached_len > tokens or bs <= 0:
            continue
        keys = r.block_keys
        m = -(-tokens // bs)
        if len(keys) < m:
            continue
        group = tuple(keys[:m])
        met = first.get(group)
        if met is None:
            first[group] = r
        else:
            members = shared.get(group)
            if members is None:
                shared[group] = [met, r]
            else:
                members.append(r)
    for members in shared.values():
        members.sort(key=_arrival_key)
        for j in range(1, len(members)):
            out.add(members[j].request_id)
    return out


def _arrival_key(r):
    return (r.arrival_time, r.request_id)


def hrrn_keyed(list rest, p):
    """``fairsim.policies.sglang.hrrn_keyed_python`` (the reference), compiled: ``rest`` sorted by
    ``(-(max(0, p - arrival_prefill_tokens) / uncached_len), arrival_time, request_id)``, the
    same Python objects compared (ints, then their true quotient, negated)."""
    cdef Py_ssize_t n = len(rest), i
    cdef list keys = [None] * n
    for i in range(n):
        r = rest[i]
        waited = p - r.arrival_prefill_tokens
        if not waited > 0:
            waited = 0
        keys[i] = (-(waited / r.uncached_len), r.arrival_time, r.request_id)
    return [rest[i] for i in sorted(range(n), key=keys.__getitem__)]


def drr_sync(order):
    """``order._sync_python()`` (``fairsim.policies.credit_fast.DRROrder``), compiled: the same
    leavers unlinked and joiners linked in the same order, the same cursor moves and deficit
    drops, the touched and emptied classes cleared. On a trace whose every request is its own
    class (no client labels) each admitting step links the new requests and unlinks the
    admitted ones, a few interpreted dict operations each."""
    policy = order.policy
    cdef dict nxt = order._nxt
    cdef dict prv = order._prv
    cdef dict queues = order.queues
    cdef dict cursor = policy.cursor
    cdef dict deficit = policy.deficit
    cdef dict emptied = policy.emptied
    cdef set touched = order.touched
    cdef list gone = []
    cdef list new = []
    first = order._first
    for u in (touched.union(emptied) if emptied else touched):
        if u in nxt:
            if u in emptied or u not in queues:
                gone.append(u)
                if u in queues:
                    new.append(u)
        elif u in queues:
            new.append(u)
    pos = cursor["pos"]
    if pos is not None and pos in gone:
        k = nxt[pos]
        while k in gone and k != pos:
            k = nxt[k]
        cursor.update(pos=None if k in gone else k, credited=False)
    elif pos is not None and pos not in nxt:
        cursor.update(pos=None, credited=False)
    for u in gone:  # DRROrder._unlink
        n = nxt.pop(u)
        p = prv.pop(u)
        if n == u:
            first = None
        else:
            nxt[p] = n
            prv[n] = p
            if first == u:
                first = n
        deficit.pop(u, None)
    if new:
        if len(new) > 1:
            new.sort(key=lambda u: queues[u][0])
        pos = cursor["pos"]
        for u in new:  # DRROrder._link(u, pos): before the cursor's class, the end of the round
            if first is None:
                nxt[u] = u
                prv[u] = u
                first = u
            else:
                at = first if pos is None else pos
                last = prv[at]
                nxt[last] = u
                prv[u] = last
                nxt[u] = at
                prv[at] = u
                if pos is not None and at == first:
                    first = u
    order._first = first
    emptied.clear()
    touched.clear()
    if cursor["pos"] is None and first is not None:
        cursor.update(pos=first, credited=False)
