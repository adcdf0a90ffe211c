"""DRR-Dynamo: the deficit round robin of NVIDIA Dynamo's router queue, as Dynamo implements it."""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections.abc import Hashable, Iterator, Sequence
from itertools import chain

from fairsim.policies.base import arrival_key
from fairsim.policies.clients import client_key
from fairsim.policies.credit import Replay
from fairsim.policies import compiled_twins
from fairsim.policies.credit_fast import ClassQueues
from fairsim.policies.drr import check_quantum
from fairsim.types import QueuedRequest
from fairsim.policies.space import IntRange


class DRRDynamo:
    """Dynamo's ``PolicyQueue::pop_next`` (``lib/kv-router/src/scheduling/policy_queue.rs``) over
    request classes, one request at a time, on a single engine.

    Ordering contract (docs/POLICIES-more.md "DRR-Dynamo"):

    - Classes: ``fairsim.policies.clients.client_key``, each a FIFO queue (``arrival_time``,
      then ``request_id``; Dynamo's ``fcfs`` queue policy). Dynamo's classes are a fixed,
      configured vector; here a class takes the next position of that vector when it is first
      seen (new classes of one call by their oldest request) and keeps it for the run.
    - A request's cost ``max(1, L - h)`` is fixed when it is first seen (Dynamo captures it at
      enqueue); later cache changes do not change it.
    - Each pick: (1) the class that made the last pick (the *carry*, kept only while it has
      waiting requests and a deficit > 0) is served again if its head's cost <= its deficit;
      (2) otherwise the classes are scanned in vector order from the *round cursor* (the
      position after the last class served): a class whose head's cost <= its deficit is
      served without a new quantum; else it gets ``+ quantum`` and is served if that suffices;
      (3) if the scan served nobody, every class gets ``rounds x quantum``,
      ``rounds = min over classes of ceil((cost - deficit) / quantum)``, and a second scan from
      the round cursor serves the first class that can pay.
    - Serving charges the head's cost; a class whose queue empties has its deficit reset to 0.
    - One ``order()`` picks until every waiting request is placed, on scratch state; the real
      state (deficits, round cursor, carry) advances only through the admitted prefix
      (``on_admitted``; ``fairsim.policies.credit``).

    How it differs from ``drr`` (classic DRR, Shreedhar & Varghese): the cost is the one at
    enqueue, not at order time; the class order is fixed, where ``drr`` puts a returning class
    at the end of its ring; and step (3) gives *every* class the rounds the first payer needs,
    so the classes after it in the scan keep that credit and get one more quantum when the next
    scan reaches them (classic DRR credits one quantum per visit): after such a skip, a class
    with a large head can be served before a class that ``drr`` would serve a second time.

    Source: ai-dynamo/dynamo, ``lib/kv-router/src/scheduling/policy_queue.rs``
    (``PolicyQueue::pop_next``, ``pop_candidate``, ``QueueSnapshot::scheduling_cost_tokens``),
    read at commit 0bebf6de3d18206c18bbd34e5ee28936b55d8628. Our choices: one quantum for all
    classes (default 2,048 tokens, as ``drr``), the class labels above, one engine (Dynamo's
    per-worker lanes and dispatchability checks have no meaning here).

    Args:
        quantum: Tokens a class gains per round (>= 1, ``drr.MIN_QUANTUM``; Dynamo's per-class ``quantum``).

    Raises:
        ValueError: ``quantum`` is not a finite number >= 1.
    """

    name = "drr-dynamo"
    search_space = {"quantum": IntRange(128, 65536, log=True)}  # fairsim tune: tokens per visit
    clock_free_order = True  # same snapshots, no on_admitted since: same order (base.py)

    def __init__(self, quantum: float = 2048) -> None:
        self.quantum = check_quantum("DRR-Dynamo", quantum)
        self.deficit: dict[Hashable, float] = {}
        self.position: dict[Hashable, int] = {}  # class -> its place in the class vector
        # "round": the vector position where the next scan starts; "carry": the class that made
        # the last pick, while it has credit left (Dynamo's round_cursor and carry_class).
        self.cursor: dict[str, object] = {"round": 0, "carry": None}
        self.cost: dict[str, int] = {}  # request_id -> cost when first seen
        self._replay = Replay()

    def _sync(self, classes: dict[Hashable, list[QueuedRequest]], waiting: Sequence[QueuedRequest]) -> None:
        """Fix the costs of new requests, place new classes, reset the classes that left."""
        cost = self.cost
        for r in waiting:
            cost.setdefault(r.request_id, r.uncached_len)
        if len(cost) > len(waiting):
            present = {r.request_id for r in waiting}
            self.cost = {rid: c for rid, c in cost.items() if rid in present}
        for k in sorted((k for k in classes if k not in self.position), key=lambda k: arrival_key(classes[k][0])):
            self.position[k] = len(self.position)
        for k in [k for k in self.deficit if k not in classes]:
            del self.deficit[k]  # Dynamo resets the deficit of a class with no waiting request
        if self.cursor["carry"] not in classes:
            self.cursor["carry"] = None

    def order(self, waiting: Sequence[QueuedRequest], now: float) -> list[QueuedRequest]:
        """Dynamo's picks over the waiting classes on scratch state (a permutation of ``waiting``)."""
        return list(self._picks(waiting))

    def incremental_order(self):
        """Fast path (``fairsim.policies.incremental``): the same picks from classes kept across
        steps, read lazily (``DRRDynamoOrder``): the engine reads the few it can admit, and a read
        costs what changed since the last one, not the whole queue."""
        return DRRDynamoOrder(self)

    def _picks(self, waiting: Sequence[QueuedRequest]) -> Iterator[QueuedRequest]:
        """Sync the state with ``waiting`` now, then a generator of the picks over it."""
        self._replay.commit(0)
        classes: dict[Hashable, list[QueuedRequest]] = {}
        for r in sorted(waiting, key=arrival_key):
            classes.setdefault(client_key(r), []).append(r)
        self._sync(classes, waiting)
        return self._pick_all(classes)

    def _pick_all(self, classes: dict[Hashable, list[QueuedRequest]]) -> Iterator[QueuedRequest]:
        log, cost, q = self._replay.log, self.cost, self.quantum
        deficit, cursor, position = self.deficit, self.cursor, self.position
        ring = sorted(classes, key=position.__getitem__)  # the backlogged classes, vector order
        ring_pos = [position[k] for k in ring]
        d = {k: deficit.get(k, 0.0) for k in ring}
        head = dict.fromkeys(ring, 0)
        round_pos, carry = cursor["round"], cursor["carry"]

        def head_cost(k: Hashable) -> int:
            return cost[classes[k][head[k]].request_id]

        def scan() -> Iterator[Hashable]:
            # The ring from the first class at or after the round cursor (wrapping). Lazy: a
            # scan usually stops at its first class, and each request may be its own class.
            n = len(ring)
            start = bisect_left(ring_pos, round_pos) % n
            for j in range(n):
                yield ring[(start + j) % n]

        def credit(k: Hashable, amount: float) -> None:
            d[k] += amount
            log(deficit, k, d[k])

        def serve(k: Hashable) -> QueuedRequest:
            # pop_candidate: charge the fixed cost; an emptied class leaves (deficit 0), else it
            # carries while it has credit.
            nonlocal round_pos, carry
            r = classes[k][head[k]]
            d[k] -= cost[r.request_id]
            head[k] += 1
            round_pos = position[k] + 1
            if head[k] == len(classes[k]):
                d[k] = 0.0
                i = bisect_left(ring_pos, position[k])
                del ring[i], ring_pos[i]
                carry = None
            else:
                carry = k if d[k] > 0 else None
            log(deficit, k, d[k])
            log(cursor, "round", round_pos)
            log(cursor, "carry", carry)
            self._replay.placed(r)
            return r

        while ring:
            carried, carry = carry, None
            if carried is not None and head_cost(carried) <= d[carried]:
                yield serve(carried)
                continue
            for k in scan():
                if head_cost(k) <= d[k]:  # credit carried from earlier rounds
                    break
                credit(k, q)
                if head_cost(k) <= d[k]:
                    break
            else:
                # Nobody could pay: every class gets the rounds the first payer needs.
                rounds = min(math.ceil((head_cost(k) - d[k]) / q) for k in ring)
                for k in ring:
                    credit(k, rounds * q)
                k = next(k for k in scan() if head_cost(k) <= d[k])
            yield serve(k)

    def on_admitted(self, admitted: Sequence[QueuedRequest], now: float) -> None:
        """Advance deficits, round cursor and carry through the admitted prefix of the last order."""
        self._replay.commit(self._replay.admitted_prefix(admitted))


class DRRDynamoOrder(ClassQueues):
    """``DRRDynamo.order`` kept across steps (``fairsim.policies.incremental``): the classes'
    FIFO queues (``ClassQueues``) and the ring of backlogged classes by vector position
    (a sorted list) are updated by ``add``/``remove``, so a read no longer regroups and re-sorts
    the whole queue.

    ``iter_order`` makes ``DRRDynamo._sync``'s changes for what changed since the last read only
    (the cost of each request added since, from this step's snapshot; positions for new classes
    by their oldest request; the deficit dropped for a class with no waiting request left; the
    carry dropped with its class), then yields the picks of ``DRRDynamo._pick_all`` one by one on
    scratch overlays (deficits, heads, classes emptied in this order), logging into the policy's
    ``Replay`` as far as they are read, so ``DRRDynamo.on_admitted`` commits the same state.

    ``moved_by = "queue"``: the picks depend on the classes' membership, the costs (fixed when
    first read; a new request counts as an ``add``, so it is priced at the read that follows its
    arrival) and the deficits, round cursor and carry, which change only when an admission is
    committed; not on the clock, later snapshots or the reads themselves. It takes lazy hits
    (``set_resolver``/``stale`` of ``ClassQueues``): a cache change moves nothing here; the
    snapshots priced and yielded are this step's.

    Cost per read: O(log n) comparisons (and a C memmove) per class that changed, plus the picks
    read, each O(classes its scans visit); a pick that no class can pay in one more quantum costs
    O(classes), as in ``order()``.
    """

    moved_by = "queue"

    def __init__(self, policy: DRRDynamo) -> None:
        super().__init__()
        self.policy = policy
        # Vector positions of the classes with waiting requests, sorted (a plain list: new classes
        # go at its end, and a scan iterates it several times per read).
        self.ring: list[int] = []
        self.class_at: dict[int, Hashable] = {}  # position -> class, for the classes in the ring
        self.unpriced: list[str] = []  # requests added since the last read (no cost yet)
        # class -> the cost of its oldest request (fixed once priced), set at the first scan that
        # reads it and dropped when the class's oldest request changes (a new older one, or a
        # removal): a scan visit reads one dict instead of queue, head id and cost.
        self.head_cost: dict[Hashable, int] = {}
        # The pick loop: its compiled twin where built (``compiled_twins``), else ``_pick_all``.
        compiled = compiled_twins.compiled_twin("drr_dynamo_picks")
        self._read = self._pick_all if compiled is None else (lambda: compiled(self))

    def add(self, q: QueuedRequest) -> None:
        rid = q.request_id
        if rid not in self.items:
            self.unpriced.append(rid)
            ClassQueues.add(self, q)  # (not super(): a cpdef method in the compiled class has no __class__ cell)
            u = self.items[rid][0]
            if self.queues[u][0][1] == rid:
                self.head_cost.pop(u, None)
        else:
            ClassQueues.add(self, q)

    def remove(self, request_id: str) -> None:
        self.head_cost.pop(self.items[request_id][0], None)
        ClassQueues.remove(self, request_id)
        self.policy.cost.pop(request_id, None)

    def _sync(self) -> None:
        """``DRRDynamo._sync`` for the requests and classes that changed since the last read."""
        policy = self.policy
        cost, items, queues = policy.cost, self.items, self.queues
        for rid in self.unpriced:
            if rid in items:
                cost.setdefault(rid, self.current(rid).uncached_len)
        self.unpriced = []
        position, deficit, ring, class_at = policy.position, policy.deficit, self.ring, self.class_at
        new = []
        for k in self.touched:
            p = position.get(k)
            if k not in queues:
                deficit.pop(k, None)  # Dynamo resets the deficit of a class with no waiting request
                if p in class_at:
                    del ring[bisect_left(ring, p)]
                    del class_at[p]
            elif p is None:
                new.append(k)
            elif p not in class_at:
                insort(ring, p)
                class_at[p] = k
        self.touched.clear()
        for k in sorted(new, key=lambda k: queues[k][0]):  # (arrival, id) of the oldest: arrival_key
            p = position[k] = len(position)
            ring.append(p)  # the largest position so far
            class_at[p] = k
        if policy.cursor["carry"] not in queues:
            policy.cursor["carry"] = None

    def iter_order(self, now: float) -> Iterator[QueuedRequest]:
        self.policy._replay.commit(0)
        self._sync()
        if not self.items:
            return iter(())
        return self._read()

    def _pick_all(self) -> Iterator[QueuedRequest]:
        """``DRRDynamo._pick_all`` over the kept ring: the same picks, credits and log.

        One loop with the helpers of ``DRRDynamo._pick_all`` (``head_cost``, ``scan``,
        ``credit``, ``serve``, ``Replay.log``/``placed``) written out: it runs for every class a
        scan visits, about six per pick on the conversation trace, where each helper was a
        Python call. The arithmetic is the same expressions in the same order (a credit is
        ``deficit + quantum``, a skip ``deficit + rounds * quantum``), so the floats are too."""
        policy = self.policy
        replay = policy._replay
        changes, marks, ids = replay._changes, replay._marks, replay.ids
        append = changes.append
        cost, q = policy.cost, policy.quantum
        deficit, cursor, position = policy.deficit, policy.cursor, policy.position
        dreal = deficit.get
        queues, ring, class_at, items, resolve = self.queues, self.ring, self.class_at, self.items, self.resolve
        hcost = self.head_cost
        hget = hcost.get
        ch: dict[Hashable, int] = {}  # class -> cost of its head once it moved in this order

        def price(x):
            # The cost of x's head: its oldest request's is kept (head_cost) across reads.
            i = head.get(x, 0)
            c = cost[queues[x][i][1]]
            if i:
                ch[x] = c
            else:
                hcost[x] = c
            return c

        n = len(ring)
        d: dict[Hashable, float] = {}  # scratch deficits of the classes changed in this order
        head: dict[Hashable, int] = {}  # class -> its head's index in its queue
        gone: set[int] = set()  # positions of the classes this order emptied
        left = n
        round_pos, carry = cursor["round"], cursor["carry"]

        while left:
            k = None
            if carry is not None:
                dk = d[carry] if carry in d else dreal(carry, 0.0)
                c = ch[carry] if carry in ch else hget(carry)
                if c is None:
                    c = price(carry)
                if c <= dk:
                    k = carry
            if k is None:
                # The scan: the ring from the first class at or after the round cursor, wrapping.
                start = bisect_left(ring, round_pos)
                for j in chain(range(start, n), range(start)):
                    p = ring[j]
                    if p in gone:
                        continue
                    x = class_at[p]
                    dk = d[x] if x in d else dreal(x, 0.0)
                    c = ch[x] if x in ch else hget(x)
                    if c is None:
                        c = price(x)
                    if c <= dk:  # credit carried from earlier rounds
                        k = x
                        break
                    dk += q
                    d[x] = dk
                    append((deficit, x, dk))
                    if c <= dk:
                        k = x
                        break
                else:
                    # Nobody could pay: every class gets the rounds the first payer needs.
                    backlogged = [class_at[p] for p in ring if p not in gone]  # vector order
                    rounds = min(math.ceil(((ch[x] if x in ch else hget(x) or price(x)) - (d[x] if x in d else dreal(x, 0.0)))
                                           / q) for x in backlogged)
                    for x in backlogged:
                        d[x] = v = (d[x] if x in d else dreal(x, 0.0)) + rounds * q
                        append((deficit, x, v))
                    for j in chain(range(start, n), range(start)):
                        p = ring[j]
                        if p not in gone:
                            x = class_at[p]
                            if (ch[x] if x in ch else hcost[x]) <= d[x]:
                                k = x
                                break
                    dk = d[k]
            # Serve k (pop_candidate): charge the fixed cost; an emptied class leaves (deficit
            # 0), else it carries while it has credit.
            queue = queues[k]
            i = head.get(k, 0)
            rid = queue[i][1]
            dk -= cost[rid]
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
            append((deficit, k, dk))
            append((cursor, "round", round_pos))
            append((cursor, "carry", carry))
            r = items[rid][1]
            if resolve is not None:
                r = resolve(r)
            ids.append(r.request_id)
            marks.append(len(changes))
            yield r
