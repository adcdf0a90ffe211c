"""PEEK's fast path: its order kept as a sorted head and a heap, with the head's changes journaled.

PEEK (``fairsim.policies.peek``) orders by a key of the snapshot alone, as ``SortedKeyOrder``
does, and its soft block protection asks after each admitting step how the first
``max_num_seqs`` of the order changed (``head_changes``, read by ``Engine._update_protected``).
``SortedKeyOrder`` keeps every key in one ``SortedList`` (pure Python: an insertion or removal
is a few microseconds, and the positional index that ``head_changes`` reads is kept up to date
by every change). Here only the first ``cap`` keys (``cap``: the ``k`` of the last
``head_changes`` call; 0 before the first) are kept sorted, in a plain list (``bisect.insort``,
C-level); the others sit in a binary heap (``heapq``, C-level), where a removed key stays as a
dead copy until it comes to the top. Which request entered or left the head is known as it
happens, so ``head_changes`` costs what changed, not ``k``.

The class is ``SortedKeyOrder``'s contract with another inside (``tests/test_peek_order.py``
runs the two side by side on random operations and on a slice of the conversation trace).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable, Iterator
from fairsim.policies.sorted_keys import heapify, heappop, heappush
from itertools import islice

from fairsim.types import QueuedRequest


class HeadHeapOrder:
    """Waiting requests sorted by a per-snapshot key that does not depend on ``now``.

    Same contract as ``SortedKeyOrder`` (``fairsim.policies.incremental``): ``key(q)`` ends with
    ``request_id`` (keys are unique) and is a function of the snapshot alone; ``iter_order``
    yields the snapshots by ascending key; ``head_changes(k)`` says how the first ``k`` changed
    since its last call.

    Layout: ``_head``, a sorted list of the first ``min(cap, n)`` keys; ``_heap``, a heap holding
    the other keys (``_rest``: request id -> its key object there) and dead copies (keys whose
    request left or was re-keyed while in the heap: ``_rest`` no longer holds that object; a key
    that moves to the head is popped, so no copy of it stays). Invariant: every key in ``_head`` is below every live key in ``_heap``, and the heap
    holds no live key while ``len(_head) < cap``. A new key below the head's last goes into the
    head and pushes the last out to the heap; a key removed from the head is replaced by the
    heap's least. A read past the head takes keys off the heap; they go back before the next
    change (``_put_back``), so reading moves nothing (``moved_by``).

    Cost: a change in the head O(cap) memmove plus O(log n); elsewhere O(log n) (a heap push or
    a dict removal); ``head_changes`` O(changes since its last call); a read O(1) per head item,
    O(log n) per item past it.
    """

    #: The sequence is the held keys' (computed at ``add``), so it moves only with an add or a
    #: removal (``fairsim.policies.incremental``, ``moved_by``).
    moved_by = "snapshots"

    def __init__(self, key: Callable[[QueuedRequest], tuple]) -> None:
        self.key = key
        self._by_id: dict[str, tuple[tuple, QueuedRequest]] = {}  # request id -> (key, snapshot)
        self._cap = 0
        self._head: list[tuple] = []
        self._heap: list[tuple] = []
        self._rest: dict[str, tuple] = {}
        self._taken: list[tuple] = []  # live keys a read took off the heap
        self._reads = 0  # iter_order calls, so a read resumed after a later one can tell
        # head_changes' state, by request id (a string: its hash is kept, a key tuple's is not):
        # the head it last gave (-> (key, snapshot) then) minus what left it since (``_left``,
        # the same pairs), and the keys that entered since and are still in it. Dicts: ordered,
        # so the result is deterministic, and a request that leaves and comes back under the
        # same key is in neither. Before the first call the head is empty (``cap`` 0), so
        # nothing is noted and the first call gives its whole head as entered.
        self._shown: dict[str, tuple[tuple, QueuedRequest]] = {}
        self._entered: dict[str, tuple] = {}
        self._left: dict[str, tuple[tuple, QueuedRequest]] = {}

    def __len__(self) -> int:
        return len(self._by_id)

    # -- changes ---------------------------------------------------------------------------------
    def add(self, q: QueuedRequest) -> None:
        """A request joined the queue, or its snapshot changed (same ``request_id``: replace)."""
        rid = q.request_id
        k = self.key(q)
        by_id = self._by_id
        old = by_id.get(rid)
        if old is not None:
            if old[0] == k:  # same place: keep the key object (``_rest`` knows it by identity)
                by_id[rid] = (old[0], q)
                return
            self._take_out(rid, old[0])
        by_id[rid] = (k, q)
        self._put_in(k)

    def remove(self, request_id: str) -> None:
        """The request left the queue."""
        k, _ = self._by_id.pop(request_id)
        self._take_out(request_id, k)

    def _put_in(self, k: tuple) -> None:
        if self._taken:
            self._put_back()
        head = self._head
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

    def _take_out(self, rid: str, k: tuple) -> None:
        if self._taken:
            self._put_back()
        rest = self._rest
        if rest.get(rid) is k:  # in the heap: its copy there is dead from now on
            del rest[rid]
            if len(self._heap) > 2 * len(rest) + 64:
                self._compact()
            return
        head = self._head
        i = bisect_left(head, k)
        del head[i]
        self._note_out(k)
        self._refill()

    def _push_rest(self, k: tuple) -> None:
        heappush(self._heap, k)
        self._rest[k[-1]] = k

    def _refill(self) -> None:
        """Fill the head up to ``cap`` from the heap's least live keys."""
        head, heap, rest = self._head, self._heap, self._rest
        while len(head) < self._cap and heap:
            k = heappop(heap)
            if rest.get(k[-1]) is k:  # live (else a dead copy, dropped)
                del rest[k[-1]]
                head.append(k)  # above every key in the head (invariant)
                self._note_in(k)

    def _compact(self) -> None:
        """Rebuild the heap from its live keys (the dead ones outnumber them)."""
        heap = self._heap
        heap[:] = self._rest.values()
        heapify(heap)

    def _put_back(self) -> None:
        """The live keys the last read took off the heap go back (all of them: every change
        puts them back first, so none changed since)."""
        heap = self._heap
        for k in self._taken:
            heappush(heap, k)
        self._taken = []

    # -- head_changes' journal -------------------------------------------------------------------
    def _note_in(self, k: tuple) -> None:
        """``k`` entered the head."""
        rid = k[-1]
        was = self._left.get(rid)
        if was is not None and was[0] == k:  # back with the key it was shown with: no change
            del self._left[rid]
            self._shown[rid] = was
        else:
            self._entered[rid] = k

    def _note_out(self, k: tuple) -> None:
        """``k`` left the head (a request is in the head under one key at a time, so a
        shown request leaving is leaving under its shown key)."""
        rid = k[-1]
        was = self._shown.pop(rid, None)
        if was is not None:
            self._left[rid] = was
        else:
            self._entered.pop(rid, None)

    def head_changes(self, k: int) -> tuple[list[QueuedRequest], list[QueuedRequest]]:
        """How the first ``k`` of the order (all when fewer wait; none when ``k <= 0``) changed
        since the last call, by key: ``(entered, left)``, the current snapshots of the requests
        among them now that were not at the last call under the same key, and a snapshot (the
        one given then) of each of those that were and are no longer under that key. So a
        request re-keyed within the head is in both; one re-added with the same key, or pushed
        out and back before this call, in neither (``SortedKeyOrder.head_changes`` gives the
        same, except that it names a request re-keyed away and back to the same key in both;
        the engine reads a re-keyed request's hit again anyway, ``Engine._rekeyed``). The first
        call gives the whole head as entered. The head kept sorted is resized to ``k`` (keys
        move between it and the heap).
        """
        if self._taken:
            self._put_back()
        k = max(k, 0)
        head = self._head
        if k >= self._cap:
            self._cap = k
            self._refill()
        else:
            self._cap = k
            while len(head) > k:
                out = head.pop()
                self._note_out(out)
                self._push_rest(out)
        by_id, shown = self._by_id, self._shown
        entered = []
        for rid, key in self._entered.items():
            q = by_id[rid][1]
            shown[rid] = (key, q)
            entered.append(q)
        left = [q for _, q in self._left.values()]
        self._entered = {}
        self._left = {}
        return entered, left

    # -- reads -----------------------------------------------------------------------------------
    def iter_order(self, now: float = 0.0) -> Iterator[QueuedRequest]:
        """The snapshots by ascending key (``now`` unused)."""
        if self._taken:
            self._put_back()
        self._reads += 1
        return self._read(self._reads)

    def _read(self, read: int) -> Iterator[QueuedRequest]:
        by_id = self._by_id
        for k in self._head:
            yield by_id[k[-1]][1]
        heap, rest = self._heap, self._rest
        last = None  # the last key yielded from the heap
        while True:
            if self._reads != read:
                # A later read (a test's, say) took keys off the heap while this one waited: put
                # them back and go on after ``last`` (nothing changed: reads come before changes).
                self._put_back()
                self._reads += 1
                read = self._reads
            if not heap:
                return
            k = heappop(heap)
            rid = k[-1]
            if rest.get(rid) is not k:
                continue  # dead: dropped for good
            self._taken.append(k)
            if last is None or k > last:
                last = k
                yield by_id[rid][1]

    def head(self, k: int) -> list[QueuedRequest]:
        """The first ``k`` snapshots of the order (all when fewer wait)."""
        return list(islice(self.iter_order(), k))
