"""The fast path of ``fairway-deadline``: deadlines kept in blocks, the due test per block, the merge lazy.

``FairwayDeadline.order()`` (``fairsim/policies/fairway_deadline.py``) sorts the whole waiting
queue by deadline and walks it every step. Everything its due test reads is fixed at a request's
first sight -- the deadline ``D`` and the work ``w`` (integer nanoseconds) -- so the
``k``-th request in deadline order is due at clock ``t`` iff ``t >= D_k - P_k``
(``lookahead="queue"``: ``P_k`` the works of the first ``k``; ``"own"``: ``w_k``; ``"none"``:
0), and that *margin* changes only when a request with an earlier deadline joins (it falls by the
newcomer's work) or leaves (it rises). The sums are of integers, exact in any order, so they may be
kept in parts:

- ``DueBlocks`` keeps the deadline order in blocks of at most ``2 x BLOCK`` requests, each with
  its total work and the least margin (a lower bound on it, after a leave) of its requests that
  are not urgent *within the block* (``D - `` the block's own prefix sum); a request's margin is
  that less the totals of the blocks before it. A segment tree over the blocks (``DueBlocks``)
  gives (a lower bound on) the least margin of any run of them, so the due test descends only
  into the blocks that may hold a newly due request: O(log(n / BLOCK)) plus O(BLOCK) per such
  block. Joins and leaves are put into their blocks only when
  the blocks are next read (a walk or a due prefix; most steps read neither). A join re-sums
  its block (O(BLOCK), batched per read; one appended last updates it in O(1)). A leave
  re-sums nothing: it takes its work off its block's total and the tree's totals above it
  (O(log(n / BLOCK))) and leaves the leasts as they were, lower bounds of the margins (which a
  leave only raises), until a walk opens the block (``DueBlocks._drop_work``). A block split re-sets the tree's leaves from it on
  (O(n / BLOCK); newcomers mostly join the last block, so mostly O(1)); a block that leaves empty
  stays in place with a neutral leaf, so no leaf moves, and the empty and small blocks are
  compacted once the blocks outnumber ``2 n / BLOCK + 4`` (O(n), amortised O(1) per join or
  leave). Merging blocks at each leave instead re-set every later leaf, O(n / BLOCK) per about
  BLOCK leaves: the one cost per request that grew with the queue (measured: 8.5x per call at
  ten copies of the conversation trace).
- A step need not walk at all: ``floor``, a lower bound on every margin that is not urgent (the
  tree's least after a walk, itself a lower bound; a leave only raises margins), decides that nobody new is due
  while ``t < floor``. A newcomer with deadline ``d`` puts in ``d - `` all the work waiting
  (``lookahead="queue"``): at most its own margin, and at most the new margin of every request
  after it in deadline order, whose ``D >= d`` and whose ``P`` (which now counts the newcomer's
  work) is at most all the work; those before it keep their margins. (Formerly the floor was
  also lowered by the newcomer's work, a looser bound that walked more often.)
- The FCFS estimate ``W`` of a new request is the work of the waiting requests ahead of it in
  arrival order: when it arrives after all of them (the usual case) that is the running total of
  the waiting requests' works; otherwise (in the live hook, a request that became waiting after a
  later-arriving one, e.g. once its grammar or remote KV was ready, or an id reused) it is
  summed over the queue, as ``order()`` does.

The order's rest (the requests that are not in the due prefix) is ``fairway-plus``'s lazy merge
of the shared Fast and Fair lanes (``fairsim/policies/incremental.py``) with the due prefix
skipped. Lazy hits (``fairsim.sim.lazy_hits``): nothing here reads a request's current hit but
its first sight (the work is fixed then) and the items yielded, so a stale snapshot is resolved
only when it is yielded or first seen.

Exactness (``tests/test_fast_order.py``, ``tests/test_deadline_fast.py``): integers, so the same
deadlines, works and due decisions as ``order()`` (a block's sums run on 64-bit integers where the
extension is built, ``block_kernel``: the same ints, the Python sums wherever a value leaves 64
bits; ``tests/test_fast_lane_compiled.py``); ``W`` is summed from the same integers.
``DeadlineOrder`` uses ``DueBlocks``'s compiled twin where it is built (``due_blocks``,
``fairsim/policies/_deadline_c.pyx``: the same blocks, tree, walks, keys marked and floors,
call by call, ``tests/test_deadline_compiled.py``); this module's ``DueBlocks`` is the reference.
``FairwayDeadline.incremental_order`` builds ``deadline_order(policy)``: where the twin is built,
``CompiledDeadlineOrder``, whose joins, leaves, stale marks, first sights and state updates are
``_deadline_c.DeadlineCore``'s (this module's ``DeadlineOrder`` statement for statement, the same
state after every call, the same test file) and whose read is ``DeadlineOrder._read``.
State changes (new deadlines, the horizon ``H``, the sticky urgent set) are made when
``iter_order`` is called, not when it is read, and are mirrored into the policy's
``deadline_ns``/``work_ns``/``urgent``/``horizon_ns`` so both paths leave the policy in the same
state. ``order()`` sees only the waiting queue of each call, so a request that leaves and is back
before the next read (the live hook: the same id, arrival and prompt) keeps its deadline, work and
urgency here too. What still grows with the queue, slowly: the reads of the due prefix (its keys
and, past it, the set that the lanes skip) and the rare sum of ``W`` over the queue.
"""

from __future__ import annotations

import functools
import math
from bisect import bisect_left
from collections.abc import Callable, Iterator
from itertools import accumulate, compress, count, repeat
from operator import ge, gt, not_, sub
from typing import Any

from fairsim.compiled import compiled_twin
from fairsim.policies.deadline_clock import now_ns, to_ns
from fairsim.policies.fast_lane import COMPILED_MODULE
from fairsim.policies.incremental import ArrivalOrder, FastLane, _small_merge, merge_of
from fairsim.types import QueuedRequest

Key = tuple[int, float, str]  # (D in ns, arrival time in s, request_id): the deadline order


def block_kernel() -> Any:
    """The compiled block sums (``fairsim.policies._fast_lane_c``: ``block_sums``, ``open_due``,
    ``MODE_CODES``), or ``None`` where the extension is not built, predates them, or
    ``FAIRSIM_PURE_PYTHON=1`` (then ``DueBlocks`` sums in Python, the reference)."""
    mod = compiled_twin(COMPILED_MODULE)
    if mod is None or not all(hasattr(mod, name) for name in ("block_sums", "open_due", "MODE_CODES")):
        return None
    return mod


#: The compiled twin of ``DueBlocks`` (``fairsim/policies/_deadline_c.pyx``), optional.
TWIN_MODULE = "fairsim.policies._deadline_c"


def deadline_order(policy: Any) -> DeadlineOrder:
    """The fast path of ``policy`` (a ``FairwayDeadline``): ``DeadlineOrder`` with its bookkeeping
    compiled (``CompiledDeadlineOrder``: ``_deadline_c.DeadlineCore``, the same state call by
    call, ``tests/test_deadline_compiled.py``) where the twin is built and
    ``FAIRSIM_PURE_PYTHON`` is not ``1``, else the reference."""
    mod = compiled_twin(TWIN_MODULE)
    if mod is None or not hasattr(mod, "DeadlineCore"):
        return DeadlineOrder(policy)
    return _compiled_order_class(mod)(policy)


def due_blocks(lookahead: str) -> Any:
    """A ``DueBlocks`` for ``lookahead``: the compiled twin (``_deadline_c.DueBlocks``, the same
    blocks, walks, marks and floors, ``tests/test_deadline_compiled.py``) where it is built and
    ``FAIRSIM_PURE_PYTHON`` is not ``1``, else this module's reference."""
    mod = compiled_twin(TWIN_MODULE)
    if mod is None:
        return DueBlocks(lookahead)
    return mod.DueBlocks(lookahead, DueBlocks.BLOCK)


class _Block:
    """A run of the deadline order: keys, works (ns), urgent flags; its total work and least margin."""

    __slots__ = ("keys", "dl", "work", "urgent", "total", "least", "gone")

    def __init__(self, keys: list[Key], work: list[int], urgent: list[bool]) -> None:
        self.keys, self.work, self.urgent = keys, work, urgent
        self.dl = [k[0] for k in keys]  # the keys' deadlines again, for the margin sums (hot)
        self.total = 0
        self.least = math.inf
        self.gone: Key | None = None  # an emptied block's entry in ``DueBlocks.last`` (its place)


class DueBlocks:
    """The waiting requests in deadline order, for the due test of ``fairway-deadline``.

    Blocks of at most ``2 x BLOCK`` requests in deadline order (an emptied one stays, neutral, until
    ``_compact``), each with its total work and the
    least margin of its requests that are not urgent, counted from the block's start (a lower
    bound on it after a leave, ``_drop_work``); over the blocks a segment tree of the pairs
    ``(total, least)`` combined as ``(t1 + t2, min(l1, l2 - t1))`` gives (a lower bound on) the
    least margin of any run of blocks, so a walk descends only into the blocks that may have a
    due request: O(log(n / BLOCK)) per such block plus O(BLOCK) to open it.

    Args:
        lookahead: ``"queue"``, ``"own"`` or ``"none"`` (``FairwayDeadline.lookahead``): what a
            request's margin ``D - P`` subtracts from its deadline (see the module docstring).
    """

    # A block holds up to 2 BLOCK requests (a compaction joins small ones up to BLOCK): re-sums
    # cost O(BLOCK). 64: fewer instructions per changed step than 32 or 128, at 1,000 and at
    # 10,000 waiting (callgrind, with the merge at each leave this replaced).
    BLOCK = 64

    def __init__(self, lookahead: str) -> None:
        self.mode = lookahead
        self._blocks: list[_Block] = []  # read through ``blocks``, which applies the pending changes
        self._adds: dict[Key, int] = {}  # added since the blocks were last read: key -> work (ns)
        self._removes: list[Key] = []  # removed since then, still in the blocks
        self.last: list[Key] = []  # the last key of each block (bisect here for a key's block)
        self._dirty: dict[int, _Block] = {}  # blocks to re-sum before the next walk
        #: Whether a leave re-sums its block at the next walk (the least exact again) rather
        #: than leaving the leasts as lower bounds (``_drop_work``): set by the colocated skip,
        #: whose kept clock (``DeadlineOrder.head_until``) ends at the floor, so a floor left
        #: low ends it early (attempts skipped on the conversation trace, colocated at
        #: ``--time-scale 8``: 132,628 with lower bounds, 177,370 exact).
        self.exact_leaves = False
        # Blocks whose total and least were kept up to date by appends (``_add_now``) and not
        # re-summed: only their leaves to set before the next walk.
        self._grown: dict[int, _Block] = {}
        self._moved: int | None = None  # blocks from this index on moved (a split, a compaction)
        self._size = 1  # leaves of the tree (a power of two >= len(blocks))
        self._leaves = 0  # leaves set from blocks (the others: no work, no margin)
        self._tot: list[int] = [0, 0]  # tree nodes (1 the root, 2i and 2i + 1 the children of i)
        self._lst: list[float] = [math.inf, math.inf]
        self.n = 0
        # The compiled block sums (``block_kernel``): a block's margins summed on 64-bit integers,
        # the same ints as ``_margins``/``_resum`` (Python's big-int arithmetic costs ~0.1 us
        # per request summed); ``None``: the Python reference. ``_code``: its mode's code.
        self.kernel = block_kernel()
        self._code = self.kernel.MODE_CODES.get(lookahead, 2) if self.kernel is not None else -1

    def __len__(self) -> int:
        return self.n

    def _block_of(self, key: Key) -> int:
        i = bisect_left(self.last, key)
        return min(i, len(self._blocks) - 1)

    def add(self, key: Key, work: int) -> None:
        """A request with deadline key ``key`` and work ``work`` (ns), not urgent.

        Put into its block when the blocks are next read (``blocks``, ``mark_due``, ``prefix``):
        a step that reads neither pays no bisect or list insert for it.
        """
        self.n += 1
        self._adds[key] = work

    def remove(self, key: Key) -> None:
        """Drop the request with deadline key ``key`` (it must be here); from its block when the
        blocks are next read, or at once if it was added since."""
        self.n -= 1
        if self._adds.pop(key, None) is None:
            self._removes.append(key)

    @property
    def blocks(self) -> list[_Block]:
        """The blocks in deadline order, with the adds and removes since the last read applied."""
        if self._adds or self._removes:
            self._apply()
        return self._blocks

    def _apply(self) -> None:
        """Apply the pending removes, then the pending adds (a key removed and added again since
        the last read is in both, in that order)."""
        removes, adds = self._removes, self._adds
        self._removes, self._adds = [], {}
        for key in removes:
            self._remove_now(key)
        for key, work in adds.items():
            self._add_now(key, work)
        if len(self._blocks) > 2 * self.n // self.BLOCK + 4:
            self._compact()

    def _add_now(self, key: Key, work: int) -> None:
        blocks = self._blocks
        if not blocks:
            b = _Block([key], [work], [False])
            blocks.append(b)
            self.last.append(key)
            self._dirty[id(b)] = b
            self._moved = 0
            return
        if key > self.last[-1]:  # after every key (the usual newcomer): at the end, no bisect
            i = len(blocks) - 1
            b = blocks[i]
            if id(b) not in self._dirty:
                self._append(i, b, key, work)
                return
            j = len(b.keys)
        else:
            i = self._block_of(key)
            b = blocks[i]
            j = bisect_left(b.keys, key)
        b.keys.insert(j, key)
        b.dl.insert(j, key[0])
        b.work.insert(j, work)
        b.urgent.insert(j, False)
        b.gone = None
        self.last[i] = b.keys[-1]
        self._dirty[id(b)] = b
        if len(b.keys) > 2 * self.BLOCK:
            self._split(i)

    def _append(self, i: int, b: _Block, key: Key, work: int) -> None:
        """Put ``key`` last in block ``i`` (``b``, the last block, not dirty): the margins before
        it do not move, so its own margin updates ``b``'s total and least in O(1), no re-sum."""
        b.keys.append(key)
        b.dl.append(key[0])
        b.work.append(work)
        b.urgent.append(False)
        b.gone = None
        self.last[i] = key
        if self.mode == "queue":
            b.total += work
            m = key[0] - b.total  # D - P, P its block's works up to and including it
        else:
            m = key[0] - work if self.mode == "own" else key[0]
        if m < b.least:
            b.least = m
        self._grown[id(b)] = b
        if len(b.keys) > 2 * self.BLOCK:
            self._split(i)

    def _split(self, i: int) -> None:
        """Cut block ``i`` in two halves."""
        b = self._blocks[i]
        half = len(b.keys) // 2
        c = _Block(b.keys[half:], b.work[half:], b.urgent[half:])
        del b.keys[half:], b.dl[half:], b.work[half:], b.urgent[half:]
        self._blocks.insert(i + 1, c)
        self.last[i] = b.keys[-1]
        self.last.insert(i + 1, c.keys[-1])
        self._dirty[id(b)] = b
        self._dirty[id(c)] = c
        self._moved_from(i)

    def _remove_now(self, key: Key) -> None:
        """Drop ``key`` from its block. A block that empties stays in place (its leaf becomes
        neutral: no work, no margin), so no later leaf of the tree moves; ``_compact`` drops the
        empty blocks and joins the small ones once they are many."""
        i = self._block_of(key)
        b = self._blocks[i]
        j = bisect_left(b.keys, key)
        w = b.work[j]
        del b.keys[j], b.dl[j], b.work[j], b.urgent[j]
        if b.keys:
            self.last[i] = b.keys[-1]
        else:
            # ``last[i]`` keeps the key just removed: between the blocks around it in deadline
            # order, so the bisects stay right, and a key that falls there fills this block again.
            b.gone = self.last[i]
        if id(b) not in self._dirty:  # (a dirty block is re-summed)
            if self.exact_leaves:
                self._dirty[id(b)] = b  # re-summed at the next walk: its least exact again
            elif self.mode == "queue":
                self._drop_work(i, b, w)
            # other modes: no total between blocks, and the least stays a lower bound

    def _drop_work(self, i: int, b: _Block, w: int) -> None:
        """Block ``i`` (``b``) lost a request of work ``w`` (``lookahead="queue"``): its total and
        those of the tree nodes above its leaf fall by ``w``; no re-sum and no least is touched.

        Exact where it matters: the walk's offsets (the totals before a block) and an append's
        margin (``_append``) are sums of totals. The leasts (a block's, and the tree's ``lst``)
        stay lower bounds: a leave only raises the margins after it, and a node's ``min(l1, l2 -
        t1)`` only rises as ``t1`` falls. So the walk prunes no subtree that holds a due request,
        and a block it opens has its margins summed anew and its least made exact
        (``mark_due``). Formerly the block was re-summed at the next walk (O(BLOCK)): about one
        re-sum per admission, for blocks the walk mostly never opened. A leaf that a pending
        re-set (``_retree``) or ``_leaf`` rewrites from ``b`` is left to it."""
        b.total -= w
        moved = self._moved
        if i < self._leaves and (moved is None or i < moved):
            tot = self._tot
            node = self._size + i
            while node:
                tot[node] -= w
                node >>= 1

    def _compact(self) -> None:
        """Drop the empty blocks and join neighbours while the joined block holds at most
        ``BLOCK``; every block re-summed, the tree re-set (O(n), once the blocks have grown to
        more than ``2 n / BLOCK + 4``: amortised O(1) per add or remove)."""
        out: list[_Block] = []
        for b in self._blocks:
            if not b.keys:
                continue
            if out and len(out[-1].keys) + len(b.keys) <= self.BLOCK:
                c = out[-1]
                c.keys += b.keys
                c.dl += b.dl
                c.work += b.work
                c.urgent += b.urgent
            else:
                b.gone = None
                out.append(b)
        self._blocks = out
        self.last = [b.keys[-1] for b in out]
        self._dirty = {id(b): b for b in out}
        self._grown = {}
        self._moved = 0

    def _moved_from(self, i: int) -> None:
        if self._moved is None or i < self._moved:
            self._moved = i

    def _margins(self, b: _Block) -> list[int]:
        """``D - P`` of each request of ``b``, ``P`` counted from the block's start."""
        if self.mode == "queue":
            return list(map(sub, b.dl, accumulate(b.work)))
        if self.mode == "own":
            return list(map(sub, b.dl, b.work))
        return b.dl

    def _resum(self, b: _Block, margins: list[int] | None = None) -> None:
        """``b``'s total work and least margin that is not urgent (``margins``: ``_margins(b)``)."""
        b.total = sum(b.work) if self.mode == "queue" else 0  # others: no offset between blocks
        if margins is None:
            margins = self._margins(b)
        if True not in b.urgent:
            b.least = min(margins, default=math.inf)  # an emptied block: no margin
        else:  # the margins of the requests not urgent (compress and map: no Python loop, hot)
            b.least = min(compress(margins, map(not_, b.urgent)), default=math.inf)

    def _leaf(self, i: int) -> None:
        """Block ``i``'s pair into its leaf, and up to the root (``_up`` for one path, inlined:
        two or three of these per due test).

        ``a if a <= c else c`` is ``min(a, c)`` (the first of equals) without the call."""
        b = self._blocks[i]
        tot, lst = self._tot, self._lst
        node = self._size + i
        tot[node], lst[node] = b.total, b.least
        node >>= 1
        while node:
            left = node << 1
            tl = tot[left]
            tot[node] = tl + tot[left + 1]
            a, c = lst[left], lst[left + 1] - tl
            lst[node] = a if a <= c else c
            node >>= 1

    def _up(self, lo: int, hi: int) -> None:
        """Combine the tree nodes ``lo..hi`` from their children, then their ancestors, to the root."""
        tot, lst = self._tot, self._lst
        while lo:
            for node in range(lo, hi + 1):
                left = 2 * node
                tot[node] = tot[left] + tot[left + 1]
                lst[node] = min(lst[left], lst[left + 1] - tot[left])
            lo, hi = lo >> 1, hi >> 1

    def _retree(self) -> None:
        """Re-set the leaves from the first moved block on, and their ancestors; the whole tree
        when the blocks outgrew it."""
        n, f = len(self._blocks), self._moved
        self._moved = None
        if n > self._size:
            size = self._size
            while size < n:
                size *= 2
            self._size, self._tot, self._lst = size, [0] * (2 * size), [math.inf] * (2 * size)
            f, self._leaves = 0, 0
        size, tot, lst = self._size, self._tot, self._lst
        end = max(n, self._leaves)
        for i in range(f, end):
            if i < n:
                b = self._blocks[i]
                tot[size + i], lst[size + i] = b.total, b.least
            else:
                tot[size + i], lst[size + i] = 0, math.inf
        self._leaves = n
        self._up((size + f) >> 1, (size + max(end, f + 1) - 1) >> 1)

    def mark_due(self, t: int) -> tuple[list[Key], float]:
        """Mark urgent every request that is due at clock ``t`` (ns) and not urgent yet.

        Returns:
            The keys marked (deadline order) and a lower bound on the least margin left among
            the requests that are not urgent (ns; ``inf`` if none; exact but for the blocks left
            since they were last opened, ``_drop_work``): nobody new is due before that clock.
        """
        if self._adds or self._removes:
            self._apply()
        margins_of: dict[int, list[int]] = {}  # id(block) -> its margins, for the walk below
        dirty = self._dirty
        kernel = self.kernel
        for key, b in dirty.items():
            if kernel is not None:
                sums = kernel.block_sums(b.dl, b.work, b.urgent, self._code)
                if sums is not None:  # (None: a value past 64 bits; the reference below)
                    b.total, b.least = sums
                    continue
            margins = margins_of[key] = self._margins(b)
            self._resum(b, margins)
        changed = list(dirty.values())
        if self._grown:
            changed += [b for key, b in self._grown.items() if key not in dirty]
            self._grown = {}
        moved = self._moved
        if moved is not None:
            self._retree()
        for b in changed:
            i = self._block_of(b.keys[-1] if b.keys else b.gone)
            if moved is None or i < moved:  # the others were re-set by _retree
                self._leaf(i)
        self._dirty = {}
        tot, lst, size = self._tot, self._lst, self._size
        newly: list[Key] = []
        # Nodes that may hold a due request (least - off <= t): (node, work of the blocks before it).
        # Each descends to the left child that may, the right one waiting on the stack (deadline
        # order); the children are tested before they are pushed (most are not due).
        stack = [(1, 0)] if lst[1] <= t else []
        while stack:
            node, off = stack.pop()
            while node < size:
                left = node << 1
                roff = off + tot[left]
                right = lst[left + 1] - roff <= t
                if lst[left] - off <= t:
                    if right:
                        stack.append((left + 1, roff))
                    node = left
                elif right:
                    node, off = left + 1, roff
                else:
                    break  # neither child may (after a leave a node's least is below its children's)
            else:
                self._open(node - size, off, t, margins_of, newly)
        return newly, lst[1]

    def _open(self, i: int, off: int, t: int, margins_of: dict[int, list[int]], newly: list[Key]) -> None:
        """Mark the requests of block ``i`` due at ``t`` (``off``: the work of the blocks before it)
        and not urgent yet, into ``newly``; re-sum the block (its least exact again) and its leaf."""
        b = self._blocks[i]
        urg, keys = b.urgent, b.keys
        if self.kernel is not None:
            sums = self.kernel.open_due(b.dl, b.work, urg, self._code, t + off, keys, newly)
            if sums is not None:  # (None: a value past 64 bits, nothing marked; the reference below)
                b.total, b.least = sums
                self._leaf(i)
                return
        margins = margins_of.get(id(b)) or self._margins(b)
        # The requests due (margin m <= t + off) and not urgent yet: (t + off >= m) > urgent.
        for j in list(compress(count(), map(gt, map(ge, repeat(t + off), margins), urg))):
            urg[j] = True
            newly.append(keys[j])
        self._resum(b, margins)
        self._leaf(i)

    def due_prefix(self, urgent: int) -> Iterator[Key]:
        """The keys in deadline order up to and including the last urgent one; ``urgent``: how
        many of them are urgent (``len(policy.urgent)``, >= 1)."""
        for b in self.blocks:
            for k, u in zip(b.keys, b.urgent):
                yield k
                if u:
                    urgent -= 1
                    if not urgent:
                        return


class DeadlineOrder:
    """Incremental order of a ``FairwayDeadline`` (the ``IncrementalOrder`` protocol, with lazy hits).

    Args:
        policy: The ``FairwayDeadline`` whose ``order()`` this mirrors (its ``work``, ``slo``,
            ``slack``, ``horizon``, ``lookahead``, ``fast_first``, weights and its state).
    """

    def __init__(self, policy: Any) -> None:
        self.policy = policy
        # The order starts from an empty queue, so the policy's per-request state starts empty
        # too (as after ``order([])``): the due prefix counts ``policy.urgent`` (``_read``), and
        # every request fed from now on gets its deadline at its first sight here anyway.
        policy.deadline_ns, policy.work_ns, policy.urgent = {}, {}, set()
        self.fast = FastLane(policy.slo)
        self.fair = ArrivalOrder()
        # ``merge_lanes`` or its compiled twin (``merge_of``: float weights), chosen once.
        self._merge = merge_of(policy.fast_weight, policy.fair_weight)
        self.snap: dict[str, QueuedRequest] = {}  # request_id -> stored snapshot
        self._stale: dict[str, None] = {}  # stored snapshot out of date (lazy hits), resolve at the read
        self._resolve: Callable[[QueuedRequest], QueuedRequest] | None = None
        self._pending: dict[str, None] = {}  # added, no deadline yet (first sight at the next read)
        self._key_of: dict[str, Key] = {}  # request_id -> its deadline key, once it has one
        self._gone: list[Key] = []  # keys of requests that left, still in the blocks
        # Requests that left since the last read: (arrival, prompt_len, key, work, urgent). One
        # back before the next read with the same arrival and prompt keeps its deadline, as in
        # order(), which sees only the waiting queue of each call.
        self._left: dict[str, tuple[float, int, Key, int, bool]] = {}
        self.due = due_blocks(policy.lookahead)
        self._total = 0  # work of the waiting requests with a deadline (ns)
        self._alast: tuple[float, str] | None = None  # latest (arrival, request_id) given a deadline
        self._floor: float | None = None  # nobody new is due before this clock (ns); None: walk
        # prompt length -> to_ns(policy.slo(length)): SLO depends only on the length (Fairway.slo)
        self._slo_ns: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self.snap)

    # -- feeding -----------------------------------------------------------------------------
    def add(self, q: QueuedRequest) -> None:
        """A new waiting request (deadline set at the next ``iter_order``), or a new snapshot."""
        rid = q.request_id
        if rid not in self.snap:
            back = self._left.pop(rid, None)
            if back is not None and back[:2] == (q.arrival_time, q.prompt_len):
                self._restore(rid, *back[2:])
            else:
                self._pending[rid] = None
        self._stale.pop(rid, None)
        self.fast.add(q)
        self.fair.add(q)
        self.snap[rid] = q

    def remove(self, request_id: str) -> None:
        """The request was admitted: drop it everywhere (its deadline is forgotten)."""
        self.fast.remove(request_id)
        self.fair.remove(request_id)
        self._stale.pop(request_id, None)
        p = self.policy
        k = self._key_of.pop(request_id, None)
        if k is None:
            del self.snap[request_id]
            del self._pending[request_id]
            return
        q = self.snap.pop(request_id)
        work = p.work_ns.pop(request_id)
        urgent = request_id in p.urgent
        self._left[request_id] = (q.arrival_time, q.prompt_len, k, work, urgent)
        self._gone.append(k)
        self._total -= work
        del p.deadline_ns[request_id]
        p.urgent.discard(request_id)

    def _restore(self, rid: str, key: Key, work: int, urgent: bool) -> None:
        """``rid`` left and is back before the next read: the state it had."""
        p = self.policy
        self._gone.remove(key)
        self._key_of[rid] = key
        self._total += work
        p.work_ns[rid] = work
        p.deadline_ns[rid] = key[0]
        if urgent:  # (its key never left the blocks, urgent flag and all)
            p.urgent.add(rid)

    # -- lazy hits (fairsim.sim.lazy_hits) ---------------------------------------------------
    def set_resolver(self, resolve: Callable[[QueuedRequest], QueuedRequest]) -> None:
        """Take lazy hits: ``resolve(q)`` gives this step's snapshot of ``q``'s request."""
        self._resolve = resolve
        self.fast.set_resolver(resolve)
        self.fair.set_resolver(resolve)

    def stale(self, request_ids: list[str], raised: list[str] | None = None) -> None:
        """These requests' stored snapshots are out of date: resolved when yielded (or first
        seen). ``raised``: those whose hit may have risen (``None``: all), for the Fast lane."""
        self.fast.stale(request_ids, raised)
        self.fair.stale(request_ids, raised)
        self._stale.update(dict.fromkeys(request_ids))

    def _current(self, rid: str) -> QueuedRequest:
        """``rid``'s snapshot of this step (resolved now if stale)."""
        if rid in self._stale:
            del self._stale[rid]
            q = self.snap[rid] = self._resolve(self.snap[rid])  # type: ignore[misc]
            return q
        return self.snap[rid]

    # -- first sights ------------------------------------------------------------------------
    def _assign(self) -> None:
        """``FairwayDeadline._assign`` for the pending requests (estimate ``"cold"``)."""
        p = self.policy
        snap, current = self.snap, self._current
        fresh = sorted(((snap[rid].arrival_time, rid) for rid in self._pending))
        self._pending = {}
        work = p.work_ns
        estimate = p.work
        if self._alast is None or fresh[0] > self._alast:
            ahead = self._total  # every waiting request with a deadline is ahead of them all
            aheads = []
            for _, rid in fresh:
                w = work[rid] = round(estimate(current(rid)) * 1e9)  # to_ns, inlined (hot)
                aheads.append(ahead)
                ahead += w
            total = ahead
        else:  # one arrived before a request already waiting: sum over the queue, as order() does
            for _, rid in fresh:
                work[rid] = to_ns(estimate(current(rid)))
            new = {rid for _, rid in fresh}
            ahead, by_id = 0, {}
            for q in sorted(snap.values(), key=lambda q: (q.arrival_time, q.request_id)):
                if q.request_id in new:
                    by_id[q.request_id] = ahead
                ahead += work[q.request_id]
            aheads = [by_id[rid] for _, rid in fresh]
            total = self._total + sum(work[rid] for _, rid in fresh)
        if self._alast is None or fresh[-1] > self._alast:
            self._alast = fresh[-1]
        slo, slack, use_h = p.slo, p.slack, p.horizon == "max"
        deadline, key_of, due = p.deadline_ns, self._key_of, self.due
        slo_ns = self._slo_ns
        h = p.horizon_ns
        mode = p.lookahead
        least = math.inf  # the least of the newcomers' bounds below (the floor's candidates)
        for (arrival, rid), ahead in zip(fresh, aheads):
            own = work[rid]
            wait = round(slack * ahead) + own
            if use_h and h > wait:
                wait = h
            length = snap[rid].prompt_len
            patience = slo_ns.get(length)
            if patience is None:
                patience = slo_ns[length] = round(slo(length) * 1e9)  # to_ns
            d = deadline[rid] = round(arrival * 1e9) + (patience if patience > wait else wait)  # to_ns, max
            if ahead + own > h:
                h = ahead + own
            key = key_of[rid] = (d, arrival, rid)
            due.add(key, own)
            # d - total bounds its own margin and the new margin of every request after it
            # (D >= d, P <= total); those before it keep theirs (module docstring). Other modes:
            # its own margin only.
            bound = d - total if mode == "queue" else d - own if mode == "own" else d
            if bound < least:
                least = bound
        p.horizon_ns = h
        self._total = total
        if self._floor is not None and least < self._floor:  # min(floor, least), the first of equals
            self._floor = least

    # -- reading ---------------------------------------------------------------------------
    def head_until(self, now: float) -> float | None:
        """The clock (s) up to which a read yields the last read's first request again and
        changes nothing, if one is known at ``now``; else ``None`` (the colocated engine's skip of
        blocked admissions, ``fairsim.sim.decode_fast``, asks it with nothing told since the read).

        With nothing told since the last read (no join or leave waits: ``_pending``, ``_gone``)
        a read changes state only by marking new urgent requests, which it does only from the
        clock ``_floor`` on (nobody new is due before it, module docstring). Below it the
        first item is the due prefix's first while any request is urgent (deadline order,
        fixed), else the merge's first, which is the Fast or the Fair lane's front chosen by
        their snapshots: the same while the Fast lane keeps its first (``FastLane.kept_until``,
        as Fairway's ``head_until``). The clock returned is the latest float whose due-test clock
        (``now_ns``) is below ``_floor``, capped by the Fast lane's when it counts."""
        # Asked by the colocated skip only: from now on a leave re-sums its block, so the floor
        # after a walk is the exact least (``DueBlocks.exact_leaves``; the same decisions).
        self.due.exact_leaves = True
        floor = self._floor
        if self._pending or self._gone or floor is None or now_ns(now) >= floor:
            return None
        limit = math.inf
        if floor != math.inf:
            limit = floor / 1e9
            while now_ns(limit) >= floor:  # at most a few ulps above the last clock below it
                limit = math.nextafter(limit, -math.inf)
        if self.policy.urgent:
            return limit
        kept = self.fast.kept_until(now)
        return None if kept is None else min(kept, limit)

    def iter_order(self, now: float) -> Iterator[QueuedRequest]:
        """``FairwayDeadline.order(snapshots, now)``'s sequence, lazily (state updated now)."""
        p = self.policy
        due = self.due
        for k in self._gone:
            due.remove(k)
        self._gone = []
        self._left = {}
        n = len(self.snap)
        if n == 0:  # (every removal has emptied the state; the blocks drop theirs at their next read)
            return iter(())
        if self._pending:
            self._assign()
        t = now_ns(now)
        if self._floor is None or t >= self._floor:
            newly, self._floor = due.mark_due(t)
            if newly:
                p.urgent.update(k[2] for k in newly)
        return self._read(now, n)

    def _read(self, now: float, n: int) -> Iterator[QueuedRequest]:
        """The due prefix (deadline order up to the last urgent request), then the other requests
        in the merge of ``FairwayDeadline.merge`` (``now`` in seconds). With nobody urgent (most
        reads) the merge itself, as ``fairway_order`` reads it: no generator around it."""
        if self.policy.urgent:  # the urgent flags in the blocks are those of policy.urgent
            return self._read_due(now, n)
        p = self.policy
        fast = self.fast
        if not p.fair_lane:
            return fast.iter_order(now)
        fast_ledger0 = 0.0 if p.fast_first else None
        merge = self._merge
        small = _small_merge(fast, now, p.fast_weight, p.fair_weight, fast_ledger0, merge=merge)
        if small is not None:  # (a short queue: both lanes from the Fast lane's one sort)
            return small
        return merge(fast._bucket_order(now), self.fair.iter_order(now), n, p.fast_weight,
                     p.fair_weight, fast_ledger0)

    def _read_due(self, now: float, n: int) -> Iterator[QueuedRequest]:
        """``_read`` with an urgent request: the due prefix first, then the merge of the rest."""
        current = self._current
        skip: set[str] = set()  # the due prefix, yielded first
        for k in self.due.due_prefix(len(self.policy.urgent)):
            skip.add(k[2])
            yield current(k[2])
        rest = n - len(skip)
        if rest == 0:
            return
        p = self.policy
        fast = (q for q in self.fast.iter_order(now) if q.request_id not in skip)
        fair = (q for q in self.fair.iter_order(now) if q.request_id not in skip)
        if not p.fair_lane:
            yield from fast
            return
        yield from self._merge(fast, fair, rest, p.fast_weight, p.fair_weight,
                               0.0 if p.fast_first else None)


@functools.cache
def _compiled_order_class(mod: Any) -> type:
    """``DeadlineOrder`` with ``mod.DeadlineCore``'s compiled ``add``, ``remove``, ``stale``,
    ``_current``, ``_assign``, ``iter_order`` and state updates first in its MRO; the read (``_read``, ``_read_due``),
    ``head_until`` and ``set_resolver`` are the reference's."""

    class CompiledDeadlineOrder(mod.DeadlineCore, DeadlineOrder):
        __doc__ = DeadlineOrder.__doc__

        def __init__(self, policy: Any) -> None:
            policy.deadline_ns, policy.work_ns, policy.urgent = {}, {}, set()
            mod.DeadlineCore.__init__(self, policy, FastLane(policy.slo), ArrivalOrder(),
                                      mod.DueBlocks(policy.lookahead, DueBlocks.BLOCK))
            self._merge = merge_of(policy.fast_weight, policy.fair_weight)  # as the reference's

        # (``iter_order`` is ``DeadlineCore``'s, first in the MRO: the reference's state updates
        # compiled, then the reference's ``_read``; no Python frame around them.)

    return CompiledDeadlineOrder
