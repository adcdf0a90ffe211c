"""SGLang's waiting-queue orderings: ``hrrn``, ``shortest-prefill-first``, ``dfs-weight``, ``lof``.

Source: sgl-project/sglang, ``python/sglang/srt/managers/schedule_policy.py`` (``SchedulePolicy``:
``calc_priority``, ``_determine_active_policy``, ``_compute_prefix_matches``, ``_sort_by_hrrn``,
``_sort_by_shortest_prefill``, ``_sort_by_longest_output``) and
``python/sglang/srt/mem_cache/base_prefix_cache.py`` (``_dfs_weight_order``), read at commit
00550cd11b35def9d584bf761a1e32729c20a21d. Full specifications and which choices are ours:
docs/policies.md, "SGLang's orderings".

Shared pieces (SGLang applies them to its cache-aware policies ``lpm``, ``hrrn`` and
``shortest-prefill-first``; ``LPM``'s switches use them too):

- In-batch de-prioritisation (``in_batch_group``, ``in_batch_deprioritized``): a request whose
  cached prefix is at most 32 tokens and that shares at least 32 prefix tokens with an earlier
  checked request (one whose cached prefix is at most 32 tokens too) goes behind every request
  that was not de-prioritised (SGLang's ``_compute_prefix_matches``).
- SGLang's FCFS fallback above 128 waiting (``lpm``, ``hrrn``): the queue is not re-sorted; it
  keeps the previous step's order, new arrivals at the back (``KeptOrder`` is its fast path).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Sequence
from bisect import bisect_left, insort
from itertools import chain
from typing import Any

from fairsim.policies.space import Choice
from fairsim.policies.base import arrival_key, param_text
from fairsim.policies.compiled_twins import COMPILED_MODULE, compiled_module
from fairsim.policies.sorted_keys import SortedKeys
from fairsim.policies.stale import resolve_stale
from fairsim.types import QueuedRequest

SGLANG_SORT_LIMIT = 128
"""SGLang sorts ``lpm`` and ``hrrn`` only up to this many waiting requests (``_determine_active_policy``)."""

SGLANG_DEDUP_TOKENS = 32
"""``IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD`` and ``..._DEPRIORITIZE_THRESHOLD`` (both 32 tokens)."""

_UNLOADED = object()

#: The module holding the compiled twins of ``in_batch_deprioritized_python`` and
#: ``hrrn_keyed_python`` (``fairsim/policies/_credit_c.pyx``) where built, else None
#: (``fairsim.compiled``; an extension built before they existed has neither: both then run in
#: Python). Loaded at the first call (``_compiled``), so the orders of this module that use
#: neither (LOF, shortest-prefill-first's fast path) do not load the extension at start-up.
_twins: Any = _UNLOADED


def _compiled() -> Any:
    global _twins
    if _twins is _UNLOADED:
        module = compiled_module(COMPILED_MODULE)
        _twins = module if hasattr(module, "hrrn_keyed") and hasattr(module, "in_batch_deprioritized") else None
    return _twins

SOURCE = ("sgl-project/sglang python/sglang/srt/managers/schedule_policy.py at "
          "00550cd11b35def9d584bf761a1e32729c20a21d")


def in_batch_group(q: QueuedRequest) -> tuple | None:
    """The shared-prefix group ``q`` is checked in, or ``None`` when SGLang would not check it.

    SGLang checks a request whose cached prefix is at most 32 tokens against the prefixes of the
    waiting requests it checked before; it is de-prioritised when it shares at least 32 tokens
    with one. Shared tokens are read in whole blocks (``block_keys``/``block_size``): the group is
    the first ``ceil(32 / block_size)`` block keys, so with 512-token blocks "shares 32 tokens"
    reads "shares the first block". No block keys in the snapshot: not checked.
    """
    if q.cached_len > SGLANG_DEDUP_TOKENS or q.block_size <= 0:
        return None
    m = -(-SGLANG_DEDUP_TOKENS // q.block_size)
    if len(q.block_keys) < m:
        return None
    return tuple(q.block_keys[:m])


def in_batch_deprioritized(waiting: Sequence[QueuedRequest]) -> set[str]:
    """Request ids SGLang's ``_compute_prefix_matches`` puts in ``temporary_deprioritized``
    (``in_batch_deprioritized_python``; its compiled twin where built)."""
    twins = _compiled()
    if twins is not None:
        return twins.in_batch_deprioritized(waiting, SGLANG_DEDUP_TOKENS)
    return in_batch_deprioritized_python(waiting)


def in_batch_deprioritized_python(waiting: Sequence[QueuedRequest]) -> set[str]:
    """Request ids SGLang's ``_compute_prefix_matches`` puts in ``temporary_deprioritized``.

    Walked in arrival order (SGLang walks its queue's current order; ours), the first request of
    each ``in_batch_group`` keeps its place and every later one is de-prioritised: per group, all
    members but the least by ``arrival_key``. The members are grouped in one pass and only groups
    of two or more are sorted, so a queue whose groups are all distinct (a trace without shared
    prefixes) costs no sort (HRRN and LPM call this in every sorted step).
    """
    first: dict[tuple, QueuedRequest] = {}  # group -> its first member met
    shared: dict[tuple, list[QueuedRequest]] = {}  # group -> all its members, where two or more
    for r in waiting:
        group = in_batch_group(r)
        if group is None:
            continue
        met = first.get(group)
        if met is None:
            first[group] = r
        elif group in shared:
            shared[group].append(r)
        else:
            shared[group] = [met, r]
    out: set[str] = set()
    for members in shared.values():
        members.sort(key=arrival_key)
        out.update(r.request_id for r in members[1:])
    return out


def hrrn_keyed_python(rest: list[QueuedRequest], p: int) -> list[QueuedRequest]:
    """``rest`` sorted by HRRN's key ``(-ratio, arrival_time, request_id)`` at the prefill-token
    counter ``p`` (``HRRN``). The keys are built in one comprehension and the indices sorted by
    them: no Python call per item, and the keys are unique, so the order is the keyed sort's."""
    keys = [(-(max(0, p - r.arrival_prefill_tokens) / r.uncached_len), r.arrival_time, r.request_id)
            for r in rest]
    return [rest[i] for i in sorted(range(len(keys)), key=keys.__getitem__)]


def keep_previous(previous: dict[str, int], waiting: Sequence[QueuedRequest]) -> list[QueuedRequest]:
    """SGLang's FCFS fallback: the previous order (``request_id -> position``) of the requests
    still waiting, then the new ones in arrival order."""
    known = sorted((r for r in waiting if r.request_id in previous), key=lambda r: previous[r.request_id])
    new = sorted((r for r in waiting if r.request_id not in previous), key=arrival_key)
    return known + new


class KeptOrder:
    """Fast path of a sort with SGLang's 128-waiting fallback (``fairsim.policies.incremental``).

    Holds the queue in its current order. Up to 128 waiting requests, ``iter_order`` sorts them
    with ``sort`` (the policy's own full sort) and keeps that order; above, it yields the kept
    order with the requests added since the last read appended in arrival order, as
    ``keep_previous``. A replaced snapshot keeps its place. ``add``/``remove`` O(1) amortised.
    ``clock_free``: ``sort`` depends on the snapshots alone (LPM), so a read with nothing added or
    removed since the last sort reuses it (HRRN's ratios move every step: always sorted).
    """

    #: Least removals before the dict is compacted (``ArrivalOrder.COMPACT_MIN``).
    COMPACT_MIN = 1024

    def __init__(self, sort: Callable[[list[QueuedRequest]], list[QueuedRequest]],
                 clock_free: bool = False) -> None:
        self.sort = sort
        self.clock_free = clock_free
        self._sorted = False  # items is sort's order of the present snapshots
        self.items: dict[str, QueuedRequest] = {}  # kept order
        self.new: dict[str, QueuedRequest] = {}  # added since the last read
        self._removed = 0
        self.resolve: Callable[[QueuedRequest], QueuedRequest] | None = None
        self._stale: set[str] = set()  # lazy hits: held snapshots out of date

    def set_resolver(self, resolve: Callable[[QueuedRequest], QueuedRequest]) -> None:
        """Lazy hits (``fairsim.sim.lazy_hits``): a stale request's snapshot is replaced by
        ``resolve(q)``, this step's, when a read reaches it; at or below 128 waiting the sort
        resolves every stale one first. Above, the kept order reads no snapshot, so the cache
        events of thousands of waiting requests cost nothing until they are read (the eager
        path rebuilt each snapshot at the next step)."""
        self.resolve = resolve

    def stale(self, request_ids: list[str], raised: list[str] | None = None) -> None:
        """Lazy hits: these snapshots are out of date (whichever way their hit moved: each is
        resolved before it is sorted or yielded); a clock-free sort kept from an earlier read
        is redone."""
        if request_ids or raised:
            self._stale.update(request_ids)
            if raised:
                self._stale.update(raised)
            self._sorted = False

    def __len__(self) -> int:
        return len(self.items) + len(self.new)

    def add(self, q: QueuedRequest) -> None:
        rid = q.request_id
        self._sorted = False
        self._stale.discard(rid)
        if rid in self.items:
            self.items[rid] = q
        else:
            self.new[rid] = q

    def remove(self, request_id: str) -> None:
        self._sorted = False
        self._stale.discard(request_id)
        if self.new.pop(request_id, None) is not None:
            return
        del self.items[request_id]
        self._removed += 1
        if self._removed >= self.COMPACT_MIN and self._removed >= len(self.items) >> 2:
            self.items = dict(self.items)
            self._removed = 0

    #: With lazy hits, no request is stale after a read at or below 128 waiting (the sort
    #: resolves each), so no silent fall of a hit can move the sorted first item before the
    #: next read (``DecodeFastEngine._head_unmoved``); above, the kept order reads no hit.
    falls_behind = True

    @property
    def head_moved_by(self) -> str | None:
        """What can move the first item before the next read (``fairsim.policies.incremental``):
        above 128 waiting only a new request (appended) or a removal, since the kept order is
        read as it is; at or below, the sort: the snapshots and, for HRRN's ratios, the
        prefill-token counter it is told (``on_prefill_tokens``; the colocated engine's skip
        then requires it unchanged, ``fairsim.sim.decode_fast``)."""
        return "queue" if len(self) > SGLANG_SORT_LIMIT else "snapshots"

    def iter_order(self, now: float = 0.0) -> Iterator[QueuedRequest]:
        if len(self) <= SGLANG_SORT_LIMIT:
            if self._stale:
                self._resolve_stale()
            if not (self.clock_free and self._sorted):
                out = self.sort([*self.items.values(), *self.new.values()])
                self.items = {q.request_id: q for q in out}
                self._removed = 0
                self._sorted = True
        else:
            items = self.items
            for q in sorted(self.new.values(), key=arrival_key):
                items[q.request_id] = q
        self.new = {}
        if self._stale:
            return self._fresh()
        return iter(self.items.values())

    def _resolve_stale(self) -> None:
        """Lazy hits: every held snapshot this step's (before a sort, which reads them all)."""
        resolve, items, new = self.resolve, self.items, self.new
        for rid in self._stale:
            held = items if rid in items else new if rid in new else None
            if held is not None:
                held[rid] = resolve(held[rid])
        self._stale.clear()

    def _fresh(self) -> Iterator[QueuedRequest]:
        """The kept order, each stale snapshot replaced by this step's as it is reached."""
        yield from resolve_stale(self.items, self._stale, self.resolve)


class _KeptSort:
    """An SGLang sort with the optional 128-waiting fallback (``sglang_sort_limit``)."""

    sglang_sort_limit = False

    def __init__(self) -> None:
        self._previous: dict[str, int] = {}

    def _sorted(self, waiting: Sequence[QueuedRequest]) -> list[QueuedRequest]:
        raise NotImplementedError

    def order(self, waiting: Sequence[QueuedRequest], now: float) -> list[QueuedRequest]:
        """Return ``waiting`` in the policy's order (a permutation of the input)."""
        if self.sglang_sort_limit and len(waiting) > SGLANG_SORT_LIMIT:
            out = keep_previous(self._previous, waiting)
        else:
            out = self._sorted(waiting)
        if self.sglang_sort_limit:
            self._previous = {r.request_id: i for i, r in enumerate(out)}
        return out


def _check_bools(name: str, **switches: Any) -> None:
    for key, value in switches.items():
        if not isinstance(value, bool):
            raise ValueError(f"{name} {key}={param_text(value)}: need true or false")


class HRRN(_KeptSort):
    """SGLang's ``hrrn``: highest response ratio next, with token-based aging.

    Ordering contract: descending ``(P - q.arrival_prefill_tokens) / q.uncached_len``, where
    ``P`` is the engine's prefill-token counter at the start of the step (``on_prefill_tokens``,
    policy contract rule 5): the prefill work the engine did while ``q`` waited, relative to its
    own uncached work (SGLang: ``waited_tokens / uncached``, ``_sort_by_hrrn``). In-batch
    de-prioritised requests go last (``sglang_dedup``). Above 128 waiting requests the queue is
    not re-sorted (``sglang_sort_limit``; SGLang's FCFS fallback). Ties (and the de-prioritised
    requests among themselves) by ``arrival_key``; SGLang breaks them by request id (ours).

    Source: ``SOURCE``. State: ``P`` and, with the fallback, the previous order.

    Args:
        sglang_sort_limit: SGLang's no-resort above 128 waiting (default on, as SGLang).
        sglang_dedup: SGLang's in-batch de-prioritisation (default on, as SGLang).

    Raises:
        ValueError: A switch that is not a bool.
    """

    name = "hrrn"

    search_space = {"sglang_sort_limit": Choice((False, True)), "sglang_dedup": Choice((False, True))}

    def __init__(self, *, sglang_sort_limit: bool = True, sglang_dedup: bool = True) -> None:
        _check_bools("HRRN", sglang_sort_limit=sglang_sort_limit, sglang_dedup=sglang_dedup)
        super().__init__()
        self.sglang_sort_limit = sglang_sort_limit
        self.sglang_dedup = sglang_dedup
        self.prefill_tokens = 0

    #: ``on_prefill_tokens`` only stores the latest count, read by the next sort: calls skipped
    #: between two orders change nothing (``fairsim.policies.base``).
    prefill_tokens_latest = True

    def on_prefill_tokens(self, total: int) -> None:
        """The engine's prefill-token counter before this step's order (contract rule 5)."""
        self.prefill_tokens = total

    def _sorted(self, waiting: Sequence[QueuedRequest]) -> list[QueuedRequest]:
        """``waiting`` by the key ``(0, -ratio, arrival_time, request_id)``, de-prioritised ones
        by ``(1, 0.0, arrival_time, request_id)``: the others first, each part sorted by the
        rest of its key (``hrrn_keyed_python``, or its compiled twin where built)."""
        late = in_batch_deprioritized(waiting) if self.sglang_dedup else ()
        p = self.prefill_tokens
        if late:
            rest = [r for r in waiting if r.request_id not in late]
            behind = sorted((r for r in waiting if r.request_id in late), key=arrival_key)
        else:
            rest, behind = list(waiting), []
        twins = _compiled()
        out = hrrn_keyed_python(rest, p) if twins is None else twins.hrrn_keyed(rest, p)
        out += behind
        return out

    def incremental_order(self) -> KeptOrder | None:
        """Fast path with the fallback on (``KeptOrder``); none without it (the ratio of every
        request changes every step: ``order()`` sorts anew)."""
        return KeptOrder(self._sorted) if self.sglang_sort_limit else None


class ShortestPrefillFirst:
    """SGLang's ``shortest-prefill-first``: fewest uncached tokens first.

    Ordering contract: SGLang's key ``(de-prioritised, max(1, L - h), wait_queue_entry_time)``,
    here ``(de-prioritised, uncached_len, arrival_time, request_id)``: requests not in-batch
    de-prioritised first, each part by ascending ``uncached_len``. No 128-waiting fallback (SGLang
    has none for it). Stateless. SGLang also caps a running chunked prefill to leave budget for
    shorter waiting requests (``shortest_prefill_chunk_limit``): an engine change, not modelled.

    Source: ``SOURCE`` (``_sort_by_shortest_prefill``).

    Args:
        sglang_dedup: SGLang's in-batch de-prioritisation (default on, as SGLang).
    """

    name = "shortest-prefill-first"
    clock_free_order = True

    search_space = {"sglang_dedup": Choice((False, True))}  # fairsim tune

    def __init__(self, *, sglang_dedup: bool = True) -> None:
        _check_bools("shortest-prefill-first", sglang_dedup=sglang_dedup)
        self.sglang_dedup = sglang_dedup

    def order(self, waiting: Sequence[QueuedRequest], now: float) -> list[QueuedRequest]:
        """Return ``waiting`` by fewest uncached tokens, de-prioritised ones last."""
        late = in_batch_deprioritized(waiting) if self.sglang_dedup else ()
        return sorted(waiting, key=lambda r: (r.request_id in late, *_spf_key(r)))

    def incremental_order(self) -> DedupSortedOrder:
        """Fast path: ``DedupSortedOrder`` by ``uncached_len``."""
        return DedupSortedOrder(_spf_key, self.sglang_dedup)


def _spf_key(q: QueuedRequest) -> tuple:
    return (q.uncached_len, q.arrival_time, q.request_id)


class DedupSortedOrder:
    """Requests sorted by ``key(q)`` (unique, ends with ``request_id``), in-batch de-prioritised
    ones after the others (``in_batch_deprioritized``), kept across steps.

    Per ``in_batch_group`` the members are kept by arrival; the first keeps its place, the others
    are de-prioritised, so a join or leave moves at most one other request between the two
    sorted lists. ``add``/``remove`` O(log n); iteration O(1) per item.
    """

    #: The sequence moves only with ``add`` (a new request or a replaced snapshot: the key and the
    #: in-batch group are both read from the snapshot) and ``remove``; reading changes nothing
    #: (``fairsim.policies.incremental``, ``moved_by``; the colocated engine's skip).
    moved_by = "snapshots"

    def __init__(self, key: Callable[[QueuedRequest], tuple], dedup: bool = True) -> None:
        self.key = key
        self.dedup = dedup
        self.kept = SortedKeys()
        self.late = SortedKeys()
        self._by_id: dict[str, tuple[tuple, QueuedRequest, tuple | None]] = {}
        self._by_key: dict[tuple, QueuedRequest] = {}
        self._groups: dict[tuple, SortedKeys] = {}

    def __len__(self) -> int:
        return len(self._by_id)

    def add(self, q: QueuedRequest) -> None:
        rid = q.request_id
        if rid in self._by_id:
            self.remove(rid)
        k = self.key(q)
        group = in_batch_group(q) if self.dedup else None
        self._by_id[rid] = (k, q, group)
        self._by_key[k] = q
        if group is None:
            self.kept.add(k)
            return
        members = self._groups.get(group)
        if members is None:
            members = self._groups[group] = SortedKeys()
        mine = (q.arrival_time, rid)
        members.add(mine)
        if members[0] != mine:
            self.late.add(k)
            return
        if len(members) > 1:  # the former first of the group is de-prioritised now
            former = self._by_id[members[1][1]][0]
            self.kept.remove(former)
            self.late.add(former)
        self.kept.add(k)

    def remove(self, request_id: str) -> None:
        k, q, group = self._by_id.pop(request_id)
        del self._by_key[k]
        if group is None:
            self.kept.remove(k)
            return
        members = self._groups[group]
        mine = (q.arrival_time, request_id)
        first = members[0] == mine
        members.remove(mine)
        if not first:
            self.late.remove(k)
            return
        self.kept.remove(k)
        if members:  # the next of the group keeps its place now
            nxt = self._by_id[members[0][1]][0]
            self.late.remove(nxt)
            self.kept.add(nxt)
        else:
            del self._groups[group]

    def iter_order(self, now: float = 0.0) -> Iterator[QueuedRequest]:
        return map(self._by_key.__getitem__, chain(self.kept, self.late))


class LOF:
    """SGLang's ``lof``: longest output first.

    Ordering contract: descending ``output_len`` (SGLang: ``sampling_params.max_new_tokens``);
    ties by ``arrival_key`` (SGLang's stable sort keeps the queue's previous order; ours). The
    simulator shows the trace's output length (1 when the trace has none: every request ties and
    the order is FCFS); the live hook shows vLLM's ``max_tokens`` (1 in the prefill-only live
    replay: FCFS there too). Cache-agnostic and stateless. SGLang's optional priority
    scheduling (priority first) is not modelled: traces carry no priority.

    Source: ``SOURCE`` (``_sort_by_longest_output``).
    """

    name = "lof"
    search_space: dict = {}  # nothing to search (fairsim tune)
    uses_prefix_hits = False
    clock_free_order = True

    def order(self, waiting: Sequence[QueuedRequest], now: float) -> list[QueuedRequest]:
        """Return ``waiting`` by longest requested output first."""
        return sorted(waiting, key=_lof_key)

    def incremental_order(self):
        """Fast path: ``SortedKeyOrder`` by ``(-output_len, arrival_time, request_id)``."""
        from fairsim.policies.incremental import SortedKeyOrder
        return SortedKeyOrder(_lof_key)


def _lof_key(q: QueuedRequest) -> tuple:
    return (-q.output_len, q.arrival_time, q.request_id)


def _path(q: QueuedRequest) -> tuple[Hashable, ...]:
    """The block keys of ``q``'s cached prefix: its node in SGLang's radix tree (``last_node``)."""
    return q.block_keys[: q.cached_len // q.block_size] if q.block_size > 0 else ()


class _Node:
    __slots__ = ("children", "own", "members")

    def __init__(self) -> None:
        self.children: dict[Hashable, _Node] = {}
        self.own = SortedKeys()  # (arrival_time, request_id) of the requests whose hit ends here
        self.members = SortedKeys()  # the same for the whole subtree: weight and first arrival


def _dfs(root: _Node) -> Iterator[tuple[float, str]]:
    """SGLang's ``append_dfs``: children by descending weight (ties: earliest arrival in the
    subtree), each subtree before the node's own requests (arrival order). Iterative: a cached
    prefix can be thousands of blocks deep."""
    def kids(node: _Node) -> Iterator[_Node]:
        return iter(sorted(node.children.values(), key=lambda c: (-len(c.members), c.members[0])))

    stack = [(root, kids(root))]
    while stack:
        node, it = stack[-1]
        child = next(it, None)
        if child is not None:
            stack.append((child, kids(child)))
            continue
        stack.pop()
        yield from node.own


class PrefixTreeOrder:
    """Fast path of ``DFSWeight``: the tree kept across steps, walked lazily by ``iter_order``.

    ``add``/``remove`` O(d log n) for a hit of ``d`` blocks; a read sorts the children of each
    node it enters.
    """

    #: The tree moves only with ``add`` (a new request or a replaced snapshot: its node is its
    #: snapshot's cached prefix) and ``remove``; a read sorts copies of the children and changes
    #: nothing (``fairsim.policies.incremental``, ``moved_by``; the colocated engine's skip).
    moved_by = "snapshots"

    def __init__(self) -> None:
        self.root = _Node()
        self._snaps: dict[str, QueuedRequest] = {}

    def __len__(self) -> int:
        return len(self._snaps)

    def add(self, q: QueuedRequest) -> None:
        rid = q.request_id
        if rid in self._snaps:
            self.remove(rid)
        self._snaps[rid] = q
        mine = (q.arrival_time, rid)
        node = self.root
        for key in _path(q):
            child = node.children.get(key)
            if child is None:
                child = node.children[key] = _Node()
            node = child
            node.members.add(mine)
        node.own.add(mine)

    def remove(self, request_id: str) -> None:
        q = self._snaps.pop(request_id)
        mine = (q.arrival_time, request_id)
        node = self.root
        for key in _path(q):
            child = node.children[key]
            child.members.remove(mine)
            if not child.members:
                del node.children[key]  # nothing waits below it any more
                return
            node = child
        node.own.remove(mine)

    def iter_order(self, now: float = 0.0) -> Iterator[QueuedRequest]:
        snaps = self._snaps
        return (snaps[rid] for _, rid in _dfs(self.root))


class _CountedNode:
    __slots__ = ("children", "own", "count", "first")

    def __init__(self, first: tuple | None) -> None:
        self.children: dict[Hashable, _CountedNode] = {}
        self.own: list[tuple[float, str]] = []  # sorted (arrival_time, request_id) of the hits ending here
        self.count = 0  # waiting requests at this node or below: the weight
        self.first = first  # least (arrival_time, request_id) below, or None: not known (recomputed)


def _first(node: _CountedNode) -> tuple:
    """``node.first``, recomputing the unknown ones below it (iterative: a path can be thousands of
    blocks deep). A known ``first`` is exact, so the recursion enters only the subtrees a removal
    left unknown."""
    stack = [node]
    while stack:
        n = stack[-1]
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


def _heaviest_first(node: _CountedNode) -> Iterator[_CountedNode]:
    """``_dfs``'s order of ``node``'s children, ``(-weight, first arrival)``, lazily: the best by
    ``min`` (a read usually takes only the first path down), the rest sorted when asked for."""
    children = node.children
    if not children:
        return
    if len(children) == 1:
        yield from children.values()
        return
    key = _child_key
    best = min(children.values(), key=key)
    yield best
    yield from sorted((c for c in children.values() if c is not best), key=key)


def _child_key(c: _CountedNode) -> tuple:
    return (-c.count, c.first if c.first is not None else _first(c))


class CountedPrefixTree:
    """Fast path of ``DFSWeight`` (``order()``'s ``PrefixTreeOrder`` is the reference): the same
    tree and walk, a node's weight kept as a count and its first arrival as a cached minimum.

    ``PrefixTreeOrder`` keeps every request of a subtree in a ``SortedList`` at each node of its
    path, for two numbers: the weight (its length) and the first arrival (its head): an add or
    remove cost O(d log n) ``SortedList`` work for a hit of ``d`` blocks (measured on the
    conversation trace: 9 ``SortedList`` adds per add, 45% of the loop). Here an add or remove
    adjusts a count per node; the first arrival is lowered by an add, and a remove of the node's
    first arrival marks it unknown (``None``), recomputed from the children's and the node's own
    when a read compares the node (``_first``). A known value is always exact (the minimum of
    the subtree), so the order is ``PrefixTreeOrder``'s: children by ``(-weight, first
    arrival)``, each subtree in full, then the node's own requests by ``(arrival, id)``.
    """

    moved_by = "snapshots"  # as PrefixTreeOrder: only add (a new or replaced snapshot) and remove

    def __init__(self) -> None:
        self.root = _CountedNode(None)
        self._snaps: dict[str, QueuedRequest] = {}

    def __len__(self) -> int:
        return len(self._snaps)

    def add(self, q: QueuedRequest) -> None:
        rid = q.request_id
        if rid in self._snaps:
            self.remove(rid)
        self._snaps[rid] = q
        mine = (q.arrival_time, rid)
        node = self.root
        for key in _path(q):
            child = node.children.get(key)
            if child is None:
                child = node.children[key] = _CountedNode(mine)
            elif child.first is not None and mine < child.first:
                child.first = mine
            child.count += 1
            node = child
        insort(node.own, mine)

    def remove(self, request_id: str) -> None:
        q = self._snaps.pop(request_id)
        mine = (q.arrival_time, request_id)
        node = self.root
        for key in _path(q):
            child = node.children[key]
            child.count -= 1
            if not child.count:
                del node.children[key]  # nothing waits below it any more
                return
            if child.first == mine:
                child.first = None  # the next one is found when a read needs it
            node = child
        own = node.own
        del own[bisect_left(own, mine)]

    def iter_order(self, now: float = 0.0) -> Iterator[QueuedRequest]:
        snaps = self._snaps
        stack = [(self.root, _heaviest_first(self.root))]
        while stack:
            node, it = stack[-1]
            child = next(it, None)
            if child is not None:
                stack.append((child, _heaviest_first(child)))
                continue
            stack.pop()
            for _, rid in node.own:
                yield snaps[rid]


class DFSWeight:
    """SGLang's ``dfs-weight``: a depth-first walk of the prefix tree, heaviest subtree first.

    Ordering contract: each waiting request sits at the node of its cached prefix (its first
    ``cached_len // block_size`` block keys; SGLang's ``req.last_node`` in the radix cache), so
    the tree is the cache's tree cut down to the prefixes the waiting requests hit. A node's
    weight is the number of waiting requests at it or below. The order is a depth-first walk
    from the root: children by descending weight, each child's subtree in full before the next,
    a node's own requests after all its children's (so requests with no hit come last). Ties:
    children of equal weight by the earliest arrival in their subtree (SGLang: the radix
    children's insertion order), requests at one node by ``arrival_key`` (SGLang: queue order).
    No block keys in the snapshot: every request is at the root (FCFS). Stateless.

    Source: ``SOURCE`` (``_sort_by_dfs_weight``) and base_prefix_cache.py ``_dfs_weight_order``
    at the same commit.
    """

    name = "dfs-weight"
    search_space: dict = {}  # nothing to search (fairsim tune)
    clock_free_order = True

    def order(self, waiting: Sequence[QueuedRequest], now: float) -> list[QueuedRequest]:
        """Return ``waiting`` in depth-first, heaviest-subtree-first order."""
        tree = PrefixTreeOrder()
        for q in waiting:
            tree.add(q)
        return list(tree.iter_order())

    def incremental_order(self) -> CountedPrefixTree:
        """Fast path: ``CountedPrefixTree`` (the same tree, counts instead of member lists), its
        compiled twin where built (``fairsim.policies._credit_c.CompiledCountedPrefixTree``; the
        Python class is the reference, chosen with ``FAIRSIM_PURE_PYTHON=1``)."""
        from fairsim.policies.compiled_twins import compiled_twin

        compiled = compiled_twin("CompiledCountedPrefixTree")
        return CountedPrefixTree() if compiled is None else compiled()
