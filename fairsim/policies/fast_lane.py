"""Fairway's Fast lane kept across steps: slope buckets with upper bounds, read lazily (a hot path).

The Fast-lane score of a waiting request ``i`` at clock ``t`` (seconds) is

    score_i(t) = h_i / max(c_i, 1) + min((t - arrival_i) / SLO_i, wait_cap)

(``Fairway.fast_score``; no cap unless Fairway-carry's ``wait_cap`` is set), a line in ``t`` of
slope ``s_i = 1 / SLO_i`` (capped: flat once the cap is reached). The lane is the waiting queue by
descending score, ties by earlier arrival, then ``request_id``. Because every request's score moves
at its own rate, no order can be kept as such; re-scoring the whole queue at every step (what the
first fast path did, in numpy) makes a step cost O(queue), which at deep overload (tens of
thousands waiting) dominates although a step admits one or two requests.

Scheme (a kinetic bound, exact; our own design after the issue's sketch):

- Requests are grouped in **buckets** by slope: bucket ``floor(log(s) / log(1 + DELTA))``, so the
  slopes in a bucket lie within a factor ``1 + DELTA`` of each other, and requests with the same
  SLO (all the prompts whose patience is the floor) share one bucket whose slopes are equal.
- A bucket has a reference time ``t0`` (its creation) and a slope bound ``s_hi`` (the largest
  slope of a request added to it). A request's key is made at some clock ``t_i >= t0`` (when it
  joined, or when it was last re-keyed; a clock before ``t0`` is raised to it): ``K_i =
  score_i(t_i) - (t_i - t0) * s_hi``, and the bucket keeps its requests sorted by ``K`` (a plain
  list, kept sorted with ``bisect``: a bucket holds tens to a few thousand requests, where a
  list's insert or delete, one ``memmove``, costs less than a ``SortedList``'s bookkeeping).
  For ``t >= t_i``, ``score_i(t) <= score_i(t_i) + (t - t_i) * s_i <= K_i + (t -
  t0) * s_hi`` (the score is a line of slope ``s_i <= s_hi``, flat once capped; a later rise of
  ``s_hi`` only loosens the bound, as ``t >= t0``), and the score never falls with time, so at
  ``te``, the latest clock of any read (``>= t_i``), the best request not yet taken from a bucket
  scores at most ``bound = K(first not taken) + (te - t0) * s_hi``, plus a float margin of ``1e-9
  x (1 + |K| + (te - t0) s_hi)``. The terms of ``K`` are ``score_i(t_i)`` and ``(t_i - t0) *
  s_hi``; the second is at most the margin's ``(te - t0) s_hi`` and the first at most ``|K|`` plus
  it, so the margin is at least ``1e-9`` of every term rounded (each rounding is ~1e-16 of its
  term). (Keyed before ``t0`` the two terms could cancel far below the margin; found in review.)
  A bucket's front is bounded by a line kept per bucket with twice that margin (``_sync``), so
  a read evaluates every bucket's bound in one pass over the lines; the bucket's next key
  after a take is bounded by the formula above.
- ``iter_order(now)`` computes every bucket's bound of its front (one value per bucket, not per
  request: ``CompiledBoundLines``, a C loop, or the numpy reference ``NumpyBoundLines``), then repeatedly takes the front of the bucket with the highest bound, scores it
  **exactly** (the same float operations as ``Fairway._fast_keys``, so the same floats as the
  reference) into a heap of candidates, and yields the best candidate once its exact score is
  strictly above every remaining bound (so a request tied in score, which may win on arrival or
  id, is always taken before the decision). The yielded sequence is therefore exactly the sorted
  order by ``(-score, arrival, request_id)``.
- Taken but not yielded requests are **waste**: their bounds were loose by ``(t - t_i) (s_hi -
  s_i)``. At the start of the next ``iter_order`` each of them that is not stale is re-keyed at
  ``t_i = now``, so (while clocks only grow) its bound is its exact score again and it sinks to its
  place: O(log m) per wasted take, and a request deep in a bucket, which no read reaches, is never
  touched. (Formerly a bucket whose waste reached a quarter of its size was
  re-keyed whole at a common ``t0 = now``: O(m log m) each time, and under overload, with the
  waste of a read proportional to the bucket's density, a cost per request that grew with the
  queue.)

Small mode: while the lane is short (at a stable load a read mostly finds 0-15 waiting) there are
no buckets: ``add`` stores the request, a read sorts the exact keys of all of them (the reference
floats) and Fairway merges the two lanes over plain lists (``small_lane``). A read that finds more
than ``SMALL_HI`` builds the buckets at ``t0 = now``; one that finds ``SMALL_LO`` or fewer drops
them (the gap keeps a queue near the threshold from rebuilding at every step).

Stale requests (lazy hits, ``fairsim.sim.lazy_hits``): ``stale(ids, raised)``. One whose hit may
have risen (``raised``) is keyed by the largest ``h / max(c, 1)`` any cache could give it until it
is read, the others keep their keys (their hits can only have fallen). A raised request whose
bound reaches the *frontier* (the exact score of the last request the last read yielded) would
be taken by the next read anyway: it is resolved at once (as of this step's start) and keyed by
its hit.

Cost: ``add``/``remove`` O(log n); ``iter_order`` O(B) in C (or numpy) for ``B`` buckets, once
and again per bucket opened, plus O((k + waste) log n) for ``k`` items read, independent
of the queue's length for a fixed slope spread. ``order()`` stays the reference; ``tests/test_fast_order.py`` checks identity.

Compiled: a lane on the compiled bound lines also runs ``add``, ``remove``, ``stale``, ``_settle``
and its bucketed reads in ``fairsim/policies/_fast_lane_c.pyx`` (typed twins of the methods
here, which stay the reference: same floats in the same operation order, same state;
``COMPILED_METHODS``, ``_compiled``, ``tests/test_fast_lane_compiled.py``) and makes its
buckets of the C struct ``Bucket``: its keys in blocks of at most 1,024 (an insertion or a
deletion moves at most a block: a policy whose requests share one slope keeps the whole queue in
one bucket), each block with its keys' ``-K`` in a C array of doubles in the keys' order, so the
compiled updates find a key's place by a binary search over it (``bisect``'s index; tuples
compared only on a tie), not over the scattered tuples.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Iterable, Iterator
from bisect import bisect_left, insort
from heapq import heappop, heappush
from types import MethodType, ModuleType
from typing import TYPE_CHECKING

from fairsim.compiled import compiled_twin
from fairsim.errors import EngineInvariantError
from fairsim.types import QueuedRequest

if TYPE_CHECKING:
    import numpy as np
else:
    #: numpy, imported by the first ``NumpyBoundLines`` (``_load_numpy``): this module is imported
    #: by every run's engine (``fairsim.policies.incremental``), and a run without the Fairway
    #: family, or with the compiled bound lines, starts without numpy (40-60 ms).
    np = None


def _load_numpy() -> None:
    global np
    import numpy

    np = numpy

#: Relative slope width of a bucket: slopes within a bucket differ by at most this factor - 1.
#: Narrower buckets waste fewer takes (a looser bound grows with a request's wait x DELTA) but
#: lengthen every read's vectors; 1/128 is the middle of 1/64-1/256, whose speed on this
#: project's benchmarks differed by less than the machine's noise.
DELTA = 1.0 / 128.0
#: Relative float margin on a bound (rounding of a few double operations is ~1e-16 relative).
MARGIN = 1e-9
#: Front key of an empty bucket: far below any score (|score| < 1e200 for any real queue).
EMPTY = -1e300
_EMPTY_BOUND = -1e299
#: After this many items a read sorts the rest at once (a full read: the live hook's).
_LONG_READ = 64
#: Small mode (no buckets): a read of a lane of more than ``SMALL_HI`` requests builds the
#: buckets; a read of a bucketed lane of at most ``SMALL_LO`` drops them. At a stable load the
#: queue holds a few requests, and a plain sort of their exact keys beats any structure.
SMALL_HI = 32
SMALL_LO = 12

_INV_LOG = 1.0 / math.log1p(DELTA)
#: Keep a bucketed read's first request for the later reads it provably stays first in
#: (``FastLane._lead_until``); False: every read is a full one (the tests' reference).
CACHE_FIRST = True


def _bucket_index(s: float) -> int:
    """The bucket of slope ``s`` (1/s): ``floor(log(s) / log(1 + DELTA))``."""
    return math.floor(math.log(s) * _INV_LOG) if s > 0 else -(1 << 62)


def max_hit(q: QueuedRequest) -> int:
    """The largest prefix hit ``h`` (tokens) any cache state could give ``q``: every full block
    of ``block_keys`` cached (at most ``L - 1`` tokens, as the engine); ``L - 1`` when the engine
    gives no blocks (``block_size`` 0). So ``max(1, L - max_hit(q) - computed)`` bounds its
    ``uncached_len`` from below."""
    L = q.prompt_len
    if q.block_size > 0:
        return min(len(q.block_keys), (L - 1) // q.block_size) * q.block_size
    return max(L - 1, 0)


def _hc_bound(q: QueuedRequest) -> float:
    """The largest ``h / max(c, 1)`` any cache state could give ``q`` (``max_hit``).
    ``h / max(L - h - computed, 1)`` rises with ``h``, and so does its rounded quotient."""
    h = max_hit(q)
    return h / max(q.prompt_len - h - q.num_computed_tokens, 1)


class NumpyBoundLines:
    """The buckets' bound lines ``c[j] + u x s[j]`` (slot ``j``, ``FastLane._sync``) and a read's
    scan of them, in numpy: the reference of ``fairsim.policies._fast_lane_c.CompiledBoundLines``
    (same floats, same indices; ``tests/test_fast_lane_kernel.py``), used where that extension
    was not built or ``FAIRSIM_PURE_PYTHON=1`` (``bound_lines_class``).

    Args:
        cap: Slots to start with (>= 1; ``ensure`` grows them).
    """

    def __init__(self, cap: int = 16) -> None:
        if np is None:
            _load_numpy()
        self.cap = cap
        self._c = np.full(cap, EMPTY)
        self._s = np.zeros(cap)
        # Views of the first nb slots of _c and _s (a read's vectors), made again only when the
        # number of slots or the arrays change: ``(nb, _c[:nb], _s[:nb])``.
        self._views: tuple[int, np.ndarray, np.ndarray] = (0, self._c[:0], self._s[:0])
        self._b = self._c[:0]  # the last evaluate's bounds (``take`` sets opened ones EMPTY)
        self.top = EMPTY  # the bound at the index the last evaluate or take returned

    def ensure(self, n: int) -> None:
        """At least ``n`` slots (doubling); new slots empty (intercept ``EMPTY``, slope 0)."""
        cap = self.cap
        if n <= cap:
            return
        while cap < n:
            cap *= 2
        grow = cap - self.cap
        self._c = np.concatenate([self._c, np.full(grow, EMPTY)])
        self._s = np.concatenate([self._s, np.zeros(grow)])
        self._views = (-1, self._c, self._s)  # views of the old arrays: make them again
        self.cap = cap

    def set_line(self, slot: int, c: float, s: float) -> None:
        self._c[slot] = c
        self._s[slot] = s

    def set_c(self, slot: int, c: float) -> None:
        self._c[slot] = c

    def clear(self) -> None:
        """Every intercept ``EMPTY`` (the slopes stay)."""
        self._c[:] = EMPTY

    def line(self, slot: int) -> tuple[float, float]:
        """``(c, s)`` of ``slot`` (tests)."""
        return self._c.item(slot), self._s.item(slot)

    def bound(self, slot: int) -> float:
        """The bound of ``slot`` as the last ``evaluate``/``take`` left it."""
        return self._b.item(slot)

    def evaluate(self, nb: int, u: float) -> int:
        """Bounds ``s[j] x u + c[j]`` of the first ``nb`` slots; returns their argmax (the first
        of equals; ``top``: its bound).

        Raises:
            ValueError: ``nb < 1`` (numpy's argmax of an empty vector)."""
        views = self._views
        if views[0] != nb:
            views = self._views = (nb, self._c[:nb], self._s[:nb])
        b = self._b = views[2] * u
        b += views[1]
        j = int(b.argmax())
        self.top = b.item(j)
        return j

    def take(self, slot: int) -> int:
        """Set ``slot``'s bound to ``EMPTY`` (its bucket opened) and return the argmax of the
        bounds left (``top``: its bound)."""
        b = self._b
        b[slot] = EMPTY
        j = int(b.argmax())
        self.top = b.item(j)
        return j

    def lead_limit(self, score: float, mag_f: float, grow: float, span: float,
                   s_f: float) -> float | None:
        """The unopened buckets' part of ``FastLane._lead_until`` over the last evaluate's bounds
        ``a`` (those above ``_EMPTY_BOUND``, slopes ``s``): ``None`` when some ``slack = score -
        a - grow (mag_f + |a| + 2 span s)`` is not positive, else the least ``slack / rate`` with
        ``rate = s - s_f + grow (s + s_f)`` over the lines whose rate is positive (``inf``: none)."""
        a = self._b
        s = self._s[:len(a)]
        live = a > _EMPTY_BOUND
        a, s = a[live], s[live]
        slack = score - a - grow * (mag_f + np.abs(a) + 2.0 * span * s)
        if not (slack > 0.0).all():
            return None
        rate = s - s_f + grow * (s + s_f)
        rising = rate > 0.0
        if not rising.any():
            return math.inf
        with np.errstate(over="ignore"):  # a ratio past the largest float is inf, as in C
            return float((slack[rising] / rate[rising]).min())


#: The optional extension (``fairsim/policies/_fast_lane_c.pyx``, built at install by
#: ``setup.py``), loaded by name as ``fairsim.sim.pool_choice`` loads the compiled pool.
COMPILED_MODULE = "fairsim.policies._fast_lane_c"


def bound_lines_class() -> type:
    """``CompiledBoundLines`` where the extension imports and ``FAIRSIM_PURE_PYTHON=1`` is not
    set, else ``NumpyBoundLines`` (the reference; same floats and decisions)."""
    module = compiled_twin(COMPILED_MODULE)
    return NumpyBoundLines if module is None else module.CompiledBoundLines


#: The methods a lane on the compiled bound lines runs compiled (``_fast_lane_c``, the same
#: decisions and state), each bound over the Python reference of the same name in
#: ``FastLane.__init__``; the read (``_bucket_order``) picks at each read instead.
COMPILED_METHODS = ("add", "remove", "stale", "_settle")
_COMPILED: list = []  # [the extension module, or None], once looked up


def _compiled() -> ModuleType | None:
    """The extension with its compiled Fast lane (``bucket_order``, ``Bucket`` and the update
    methods), or ``None`` where it is not built or predates them. A lane uses it only on the
    compiled lines, so ``FAIRSIM_PURE_PYTHON=1`` (numpy lines: ``bound_lines_class``) runs Python."""
    if not _COMPILED:
        try:
            mod = importlib.import_module(COMPILED_MODULE)
            for name in ("bucket_order", "Bucket", "settle", "slo_curve") + COMPILED_METHODS[:-1]:
                getattr(mod, name)
        except (ImportError, AttributeError):
            mod = None
        _COMPILED.append(mod)
    return _COMPILED[0]


def bound_lines_kind() -> str:
    """``"compiled"`` or ``"numpy"``: the bound lines ``bound_lines_class`` gives (``run.json``)."""
    return "numpy" if bound_lines_class() is NumpyBoundLines else "compiled"


class _Bucket:
    """Requests with slopes within ``1 + DELTA`` of each other, sorted by their keys ``K``
    (module docstring)."""

    __slots__ = ("keys", "t0", "s_hi", "slot", "front")

    def __init__(self, slot: int, t0: float) -> None:
        self.keys: list[tuple] = []  # (-K, arrival_time, request_id), ascending (front first)
        self.front: tuple | None = None  # keys[0], or None when empty
        self.t0 = t0
        self.s_hi = 0.0  # bound on the slopes of the members (the largest slope ever added)
        self.slot = slot


class FastLane:
    """Fairway's Fast lane as an incremental order (module docstring): descending
    ``h / max(c, 1) + wait / SLO``, ties by arrival then ``request_id``, read lazily.

    Args:
        slo: ``Fairway.slo``: patience in seconds of a prompt of ``L`` tokens (> 0).
        wait_cap: Cap on ``wait / SLO`` (Fairway-carry's ``wait_cap``), or ``None``.
    """

    def __init__(self, slo: Callable[[int], float], wait_cap: float | None = None) -> None:
        self.slo = slo
        self.wait_cap = wait_cap
        # prompt length -> (SLO, slope 1 / SLO, bucket index): what ``add`` needs of a new
        # request, computed once per length (the policy's ``slo`` and a logarithm are the cost).
        self._by_len: dict[int, tuple[float, float, int]] = {}
        # request_id -> [snapshot, h/max(c,1), arrival, SLO, slope, bucket, key tuple, the h/max(c,1)
        # the key was made with (>= the current one: the key is an upper bound), stale (lazy
        # hits: 0 fresh, 1 out of date with a hit that can only have fallen, 2 one that may have
        # risen), the largest h/max(c,1) any cache could give (None in small mode)]
        self._items: dict[str, list] = {}
        self._resolve: Callable[[QueuedRequest], QueuedRequest] | None = None
        self._buckets: dict[int, _Bucket] = {}  # log-slope index -> bucket
        self._by_slot: list[_Bucket] = []
        # Each bucket's bound on its front's score at a clock t is the line c + (t - _origin)
        # x s (per slot; _sync). EMPTY intercept: an empty bucket (or no bucket in that slot).
        # A read evaluates them all and scans for the highest (``bound_lines_class``).
        self._lines = bound_lines_class()(16)
        self._new_bucket: type = _Bucket
        # ``slo`` as the compiled updates call it (``_fast_lane_c.SloCurve``: the same floats and
        # memo entries as ``Fairway.slo``, without its Python frames), or None: they call ``slo``.
        self._slo_c = None
        mod = _compiled()
        if mod is not None and type(self._lines) is mod.CompiledBoundLines:
            # The compiled updates and buckets (same state, same floats as these methods'):
            # bound on the instance, so a call costs no dispatch.
            self._new_bucket = mod.Bucket
            self._slo_c = mod.slo_curve(slo)
            for name in COMPILED_METHODS:
                setattr(self, name, MethodType(getattr(mod, name.lstrip("_")), self))
        self._reads = 0  # reads that evaluated the lines (the kept first's state names its read)
        self._t0_max = -math.inf  # the latest t0 of any bucket
        # The clock the bound lines are measured from (set when the buckets are built): every
        # bucket's t0 is at least it, so the lines' terms are >= 0 for clocks of any sign.
        self._origin = 0.0
        self._waste: list = []  # the last read's candidates taken but not yielded (its heap)
        self._loose: list[str] = []  # taken requests whose key was made with a higher h/c
        # The clock of new buckets and new keys: a bucketed read's now (set at its first next(),
        # in _settle) or the clock at which the buckets were built (_to_buckets).
        self._clock = 0.0
        # The latest clock of any read: every key was made at or before it, so bounds are taken
        # there when a clock goes back (a score never falls with time).
        self._tmax = -math.inf
        # Exact score at ``_clock`` of the last request a bucketed read yielded: a request whose
        # bound reaches it is likely to be read next time (``stale`` reads it at once).
        self._frontier = math.inf
        # Small mode: no buckets; items hold [snapshot, h/c, arrival, SLO, slope, None, None,
        # h/c, stale, None] and a read sorts their exact keys (module docstring, "Small mode").
        self._small = True
        # Whether ``_items`` is in ``(arrival_time, request_id)`` order (the engine adds requests
        # in release order), and the largest such key added; a small read re-sorts otherwise.
        self._in_arrival = True
        self._last: tuple[float, str] | None = None
        # The first request of the last bucketed read and the clocks between which it stays
        # first while nothing but the clock moves: ``(request_id, read clock, valid until)``
        # (``_lead_until``); None after any change (add, remove, stale, a mode switch).
        self._first: tuple[str, float, float] | None = None
        # The state of the last read when it stopped right after its first item (the arguments
        # of ``_lead_until``): the window is computed from it only when asked, since a read that
        # goes on (an admission) or a change makes it useless. None: nothing pending.
        self._lead_state: tuple | None = None

    def __len__(self) -> int:
        return len(self._items)

    # -- keys ------------------------------------------------------------------------------------
    def _key(self, hc: float, arr: float, slo: float, t0: float) -> float:
        wait = (t0 - arr) / slo
        cap = self.wait_cap
        if cap is not None and wait > cap:
            wait = cap
        return hc + wait

    def _kt(self, hc: float, arr: float, slo: float, rid: str, b: _Bucket) -> tuple:
        """The sort key of a request in bucket ``b``, made at the lane's clock ``t`` (not before
        ``t0``): ``(-(score(t) - (t - t0) x s_hi), arrival, request_id)`` (module docstring)."""
        t = self._clock
        if t < b.t0:  # a clock gone back: key at t0 (valid for t >= t0; a score never falls)
            t = b.t0
        return (-(self._key(hc, arr, slo, t) - (t - b.t0) * b.s_hi), arr, rid)

    def _slope(self, prompt_len: int) -> tuple[float, float, int]:
        """``(SLO, 1 / SLO, bucket index)`` of a prompt of ``prompt_len`` tokens (``_by_len``)."""
        per = self._by_len.get(prompt_len)
        if per is None:
            slo = self.slo(prompt_len)
            s = 1.0 / slo
            per = self._by_len[prompt_len] = (slo, s, _bucket_index(s))
        return per

    def _sync(self, b: _Bucket) -> None:
        """Set ``b``'s bound line from its front key ``K``, ``t0`` and ``s_hi``: at a clock
        ``te >= t0`` the front scores at most ``K + (te - t0) s_hi`` (module docstring). With
        ``u = te - origin`` (``origin <= t0``, the clock the buckets were built at),

            c + u x s,  c = K + 2 MARGIN (1 + |K|) - (t0 - origin) s_hi,  s = s_hi (1 + 2 MARGIN),

        exceeds that by ``2 MARGIN (1 + |K| + u s_hi)``, at least twice the margin the bound
        needs (``MARGIN (1 + |K| + (te - t0) s_hi)``, as ``u >= te - t0 >= 0``; the rounding of
        these few operations is ~1e-16 of their terms). So a read costs one pass over the lines,
        not a recomputation of every bucket's margin. (Measured from 0 instead of ``origin``, a
        negative clock made the line fall below the score, and wall-clock times (1.7e9 s in the
        live hook) loosened it by ``2e-9 x te x s_hi``; found in review.)"""
        slot = b.slot
        if b.front is None:
            self._lines.set_c(slot, EMPTY)
            return
        k = -b.front[0]
        self._lines.set_line(slot, k + 2.0 * MARGIN * (1.0 + abs(k)) - (b.t0 - self._origin) * b.s_hi,
                             b.s_hi * (1.0 + 2.0 * MARGIN))

    def _sync_front(self, b: _Bucket) -> None:
        """``_sync`` after a change of ``b``'s front alone: the slope ``_s`` (``s_hi``'s) stays."""
        front = b.front
        if front is None:
            self._lines.set_c(b.slot, EMPTY)
            return
        k = -front[0]
        self._lines.set_c(b.slot, k + 2.0 * MARGIN * (1.0 + abs(k)) - (b.t0 - self._origin) * b.s_hi)

    def _set_head(self, b: _Bucket) -> None:
        keys = b.keys
        b.front = keys[0] if keys else None
        self._sync_front(b)

    def _insert(self, b: _Bucket, kt: tuple) -> None:
        insort(b.keys, kt)
        front = b.front
        if front is None:  # empty until now: its slope line may be unset (a new or emptied slot)
            b.front = kt
            self._sync(b)
        elif kt < front:
            b.front = kt
            self._sync_front(b)

    def _delete(self, b: _Bucket, kt: tuple) -> None:
        keys = b.keys
        if kt == b.front:
            del keys[0]
            self._set_head(b)
        else:
            del keys[bisect_left(keys, kt)]

    def _bucket(self, idx: int) -> _Bucket:
        """The bucket of index ``idx`` (``_bucket_index``), made if there is none."""
        b = self._buckets.get(idx)
        if b is None:
            slot = len(self._by_slot)
            self._lines.ensure(slot + 1)
            # t0 not before the origin (a clock gone back since the buckets were built): keys
            # are made at t0 or later (``_kt``), so a later t0 is valid.
            b = self._buckets[idx] = self._new_bucket(slot, max(self._clock, self._origin))
            self._by_slot.append(b)  # (its slot's intercept is EMPTY: new, or reset by _to_small)
            if b.t0 > self._t0_max:
                self._t0_max = b.t0
        return b

    # -- the incremental-order interface ---------------------------------------------------------
    def add(self, q: QueuedRequest) -> None:
        """A request joined the queue, or its snapshot changed (same ``request_id``: replace).

        A cache change that lowers ``h / max(c, 1)`` below the value its key was made with keeps
        the key (still an upper bound: the score rises with ``h / c``); only a rise above it
        re-keys, so a hit that flips between two values costs one re-key, not one per flip.
        """
        self._first = self._lead_state = None
        rid = q.request_id
        hc = q.cached_len / max(q.uncached_len, 1)
        item = self._items.get(rid)
        if item is None and self._in_arrival:
            last = self._last
            if last is None or (q.arrival_time, rid) > last:
                self._last = (q.arrival_time, rid)
            else:
                self._in_arrival = False
        if self._small:
            if item is None or q.arrival_time != item[2] or q.prompt_len != item[0].prompt_len:
                if item is not None:
                    del self._items[rid]  # a different request under the same id: a new item
                    self._in_arrival = False
                # (not _slope: small mode needs no bucket index, whose logarithm it would pay
                # for most requests, their prompt lengths being mostly distinct)
                slo = self.slo(q.prompt_len)
                self._items[rid] = [q, hc, q.arrival_time, slo, 1.0 / slo, None, None, hc, False, None]
            else:
                item[0] = q
                item[1] = item[7] = hc
                item[8] = False
            return
        if item is None:
            L = q.prompt_len
            per = self._by_len.get(L)
            slo, s, idx = per if per is not None else self._slope(L)
            b = self._buckets.get(idx)
            if b is None:
                b = self._bucket(idx)
            if s > b.s_hi:
                b.s_hi = s
                self._sync(b)
            arr = q.arrival_time
            # _kt, inlined (hot: once per request); the same float operations
            t = self._clock
            t0 = b.t0
            if t < t0:
                t = t0
            wait = (t - arr) / slo
            cap = self.wait_cap
            if cap is not None and wait > cap:
                wait = cap
            kt = (-(hc + wait - (t - t0) * b.s_hi), arr, rid)
            # max(hc, _hc_bound(q)), inlined (hot: once per request)
            bs = q.block_size
            h = min(len(q.block_keys), (L - 1) // bs) * bs if bs > 0 else max(L - 1, 0)
            top = h / max(L - h - q.num_computed_tokens, 1)
            self._items[rid] = [q, hc, arr, slo, s, b, kt, hc, False, top if top > hc else hc]
        elif q.arrival_time != item[2] or q.prompt_len != item[0].prompt_len:
            self.remove(rid)  # not a cache change: a different request under the same id
            self._in_arrival = False
            self.add(q)
            return
        else:
            item[0] = q
            item[1] = hc
            item[8] = False
            if hc > item[7]:  # else the key (made with h/c = item[7]) still bounds the score
                self._rekey_as(item, rid, hc)
            return
        self._insert(b, kt)

    def _rekey_as(self, item: list, rid: str, hc: float) -> None:
        """Key a bucketed request anew at the lane's clock, with ``h / c = hc``.

        The new key mostly keeps the request's place (a re-key at the step's clock moves it
        little, and a wasted take was the front of its bucket): then it is put in place, one
        store instead of a delete and an insert (two shifts of the bucket's list). The keys of
        a bucket are distinct (the request id is in each), so that place is the sorted one."""
        b = item[5]
        old = item[6]
        item[7] = hc
        kt = item[6] = self._kt(hc, item[2], item[3], rid, b)
        keys = b.keys
        i = 0 if old == b.front else bisect_left(keys, old)
        if (i == 0 or keys[i - 1] < kt) and (i + 1 == len(keys) or kt < keys[i + 1]):
            keys[i] = kt
            if i == 0:
                b.front = kt
                self._sync_front(b)
            return
        del keys[i]
        if i == 0:
            self._set_head(b)
        self._insert(b, kt)

    def _rekey(self, rid: str) -> None:
        """Tighten a key made with a higher ``h / c`` than the request's current one."""
        item = self._items.get(rid)
        if item is None or item[7] == item[1] or item[8] or self._small:
            return
        self._rekey_as(item, rid, item[1])

    # -- lazy hits (fairsim.sim.lazy_hits) -------------------------------------------------------
    def set_resolver(self, resolve: Callable[[QueuedRequest], QueuedRequest]) -> None:
        """Take lazy hits: ``resolve(q)`` gives this step's snapshot of ``q``'s request."""
        self._resolve = resolve
        self._first = self._lead_state = None

    def stale(self, request_ids: Iterable[str], raised: Iterable[str] | None = None) -> None:
        """These requests' snapshots are out of date (a hit changed); they are read through the
        resolver when next scored. ``raised``: those whose hit may have risen (the engine's
        ``LazyHits.key_changed`` says which; ``None``: all of them), keyed by the largest
        ``h / max(c, 1)`` any cache could give them until they are read. The others' hits can only have fallen, so their
        keys (made with at least their last ``h / c``) still bound their scores and stay.

        A request already keyed so costs one flag test, so a prefix block shared by thousands of
        waiting requests that is cached and evicted again and again costs no re-keying, and one
        that is only evicted moves none of them up the lane.

        Flag ``item[8]``: 0/False fresh, 1 stale (hit may only have fallen), 2 stale (may have
        risen)."""
        self._first = self._lead_state = None
        items = self._items
        if raised is None:
            raised, request_ids = request_ids, ()
        for rid in request_ids:
            item = items[rid]
            if not item[8]:
                item[8] = 1
        if self._small:
            for rid in raised:
                items[rid][8] = 2
            return
        # A request whose bound would reach the last read's frontier is likely read next time:
        # read its snapshot now (``resolve``: as of this step's start) and key it by its hit,
        # instead of keying it by the bound now and re-keying it once read.
        t, frontier, key, res = self._clock, self._frontier, self._key, self._resolve
        for rid in raised:
            item = items[rid]
            item[8] = 2
            if res is not None and key(item[9], item[2], item[3], t) >= frontier:
                self._fresh(item)
                if item[1] <= item[7]:
                    if item[1] < item[7]:
                        self._loose.append(rid)  # tightened by the next read's _settle
                    continue
                self._rekey_as(item, rid, item[1])
            elif item[7] < item[9]:
                self._rekey_as(item, rid, item[9])

    def _fresh(self, item: list) -> None:
        """Read a stale request's snapshot of this step (its key, an upper bound, stays)."""
        q = item[0] = self._resolve(item[0])
        item[1] = q.cached_len / max(q.uncached_len, 1)
        item[8] = False

    def remove(self, request_id: str) -> None:
        """The request left the waiting queue."""
        self._first = self._lead_state = None
        item = self._items.pop(request_id)
        if not self._small:
            self._delete(item[5], item[6])

    def _settle(self, now: float) -> None:
        """At the clock ``now``: tighten the loose keys the last read took, and re-key at ``now``
        the requests it took but did not yield (its waste; stale ones are left to ``_loose`` and
        ``stale``), so their bounds are their exact scores again while clocks only grow."""
        self._clock = now
        if self._loose:
            for rid in self._loose:
                self._rekey(rid)
            self._loose = []
        items = self._items
        for _, _, rid, counted in self._waste:
            item = items.get(rid)
            if counted < 0 or item is None or item[8]:
                continue  # stale ones were re-keyed by their hit in _loose, or will be by stale()
            self._rekey_as(item, rid, item[1])
        self._waste = []

    # -- small mode ------------------------------------------------------------------------------
    def _to_buckets(self, now: float) -> None:
        """Leave small mode: bucket every request, keys made at ``t0 = now`` (a stale one's with
        its largest possible ``h / c``, as ``stale`` would)."""
        self._small = False
        self._first = self._lead_state = None
        self._clock = self._origin = now
        per_bucket: dict[int, list] = {}
        key = self._key
        for rid, item in self._items.items():
            s = item[4]
            b = self._bucket(_bucket_index(s))
            if s > b.s_hi:
                b.s_hi = s  # the bound line is set once the bucket's keys are (_sync below)
            item[9] = max(item[1], _hc_bound(item[0]))
            item[7] = item[9] if item[8] == 2 else item[1]
            item[5] = b
            kt = item[6] = (-key(item[7], item[2], item[3], b.t0), item[2], rid)
            per_bucket.setdefault(b.slot, []).append(kt)
        for slot, kts in per_bucket.items():
            b = self._by_slot[slot]
            b.keys = sorted(kts)
            b.front = b.keys[0]
            self._sync(b)  # intercept and slope: the slot may hold an old bucket's slope

    def _to_small(self) -> None:
        """Enter small mode: drop the buckets (the items keep their snapshots and stale flags)."""
        self._small = True
        self._first = self._lead_state = None
        self._buckets = {}
        self._by_slot = []
        self._lines.clear()
        self._t0_max = -math.inf
        self._waste = []
        self._loose = []

    def small_lane(self, now: float) -> tuple[list[QueuedRequest], list[QueuedRequest]] | None:
        """The whole lane at ``now`` (seconds) when it is small: ``(by_arrival, fast)``, the
        snapshots of this step (stale ones read through the resolver) in ``(arrival_time,
        request_id)`` order (the Fair lane) and in the Fast lane's order; ``None`` when the lane
        is bucketed (read it with ``iter_order``).

        Switches mode first (``SMALL_HI``/``SMALL_LO``). The keys are ``Fairway._fast_keys``'s
        floats, sorted as tuples ``(-score, arrival, request_id)``: the reference order."""
        items = self._items
        n = len(items)
        if self._small:
            if n > SMALL_HI:
                self._to_buckets(now)
                return None
        elif n <= SMALL_LO:
            self._to_small()
        else:
            return None
        if not self._in_arrival:
            items = self._items = dict(sorted(items.items(), key=lambda kv: (kv[1][2], kv[0])))
            self._in_arrival = True
            if items:
                rid = next(reversed(items))
                self._last = (items[rid][2], rid)
        if self._resolve is not None:
            for item in items.values():
                if item[8]:
                    self._fresh(item)
        cap = self.wait_cap
        if cap is None:
            keys = [(-(it[1] + (now - it[2]) / it[3]), it[2], rid, i)
                    for i, (rid, it) in enumerate(items.items())]
        else:
            keys = [(-(it[1] + min((now - it[2]) / it[3], cap)), it[2], rid, i)
                    for i, (rid, it) in enumerate(items.items())]
        keys.sort()
        snaps = [it[0] for it in items.values()]
        return snaps, [snaps[k[3]] for k in keys]

    def iter_order(self, now: float) -> Iterator[QueuedRequest]:
        """The waiting snapshots by descending score at ``now`` (seconds), ties by arrival then
        id, as an iterator read lazily. A bucketed lane settles (re-keys the last read's loose and
        wasted takes) at the first
        ``next()``, not at the call. With lazy hits each item is ``resolve``d before it is
        yielded, so the engine gets its snapshot object of this step (``fairsim.sim.lazy_hits``)."""
        small = self.small_lane(now)
        if small is None:
            return self._bucket_order(now)
        seq = small[1]
        return iter(seq) if self._resolve is None else map(self._resolve, seq)

    def bucketed_order(self, now: float) -> Iterator[QueuedRequest]:
        """``iter_order(now)`` of a lane that ``small_lane(now)`` has just found bucketed (it
        returned ``None``): the mode is not checked again (Fairway's merge, once per read)."""
        return self._bucket_order(now)

    def _kept(self) -> tuple[str, float, float] | None:
        """``_first``, computed from the last read's pending state first (``_lead_state``)."""
        state = self._lead_state
        if state is not None:
            self._lead_state = None
            self._first = self._lead_until(*state)
        return self._first

    def kept_until(self, now: float) -> float | None:
        """The clock (s) up to which a read yields the last read's first request again, if
        ``now`` is in its kept window (``_first``: nothing told since, as any ``add``,
        ``remove`` or ``stale`` drops it), else ``None``. Such a read changes nothing, so an
        engine may skip it (``fairsim.sim.decode_fast``)."""
        first = self._kept()
        if first is not None and first[1] <= now <= first[2] and CACHE_FIRST:
            return first[2]
        return None

    def _bucket_order(self, now: float) -> Iterator[QueuedRequest]:
        """A bucketed read at ``now``: the compiled one (``_fast_lane_c.bucket_order``, the same
        decisions and state) on the compiled bound lines, else ``_bucket_order_py``."""
        mod = _COMPILED[0] if _COMPILED else _compiled()  # (once per read: no call once looked up)
        if mod is not None and type(self._lines) is mod.CompiledBoundLines:
            return mod.bucket_order(self, now)
        return self._bucket_order_py(now)

    def _bucket_order_py(self, now: float) -> Iterator[QueuedRequest]:
        """A bucketed read (module docstring, ``iter_order``): the reference of the compiled
        ``fairsim.policies._fast_lane_c.bucket_order``."""
        items = self._items
        n = len(items)
        if n == 0:
            return
        lead = None  # the first request, already yielded from the last read (_lead_until)
        if self._lead_state is not None or self._first is not None:
            first = self._kept()
            if first is not None and first[1] <= now <= first[2] and CACHE_FIRST:
                lead = first[0]
                q = items[lead][0]
                # Not stale (``stale`` clears ``_first``), so this step's snapshot, as a read yields.
                yield q if self._resolve is None else self._resolve(q)
                # Read on (the first was admitted): the full read, whose first must be the same.
        cap = self.wait_cap
        if self._loose or self._waste:
            self._settle(now)
        else:
            self._clock = now  # what _settle does when there is nothing to settle
        te = self._tmax
        if now > te:  # max(self._tmax, now)
            te = self._tmax = now
        nb = len(self._by_slot)
        # The bound lines hold for te >= t0; a later clock gives a looser bound, still valid (a
        # score never falls with time). Empty buckets: about EMPTY.
        t0_max = self._t0_max
        lines = self._lines
        nxt = lines.evaluate(nb, (t0_max if t0_max > te else te) - self._origin)  # the argmax
        nxt_bound = lines.top  # the unopened bucket with the highest bound, and its bound
        self._reads += 1
        by_slot = self._by_slot
        loose = self._loose
        out: list[QueuedRequest] = []  # yielded so far
        cand: list = []  # heap of exact keys (-score, arrival, request_id, slot or -1)
        self._waste = cand  # what is left in it when the engine stops reading
        opened: list = []  # heap of (-bound, slot, key tuple of the bucket's next, its position)
        ninf = -math.inf
        for i in range(n):
            if i == _LONG_READ and n - i > _LONG_READ:
                # A long read (the live hook reads the whole order): sort the rest at once. The
                # candidates left in the heap are yielded by _rest; re-keying them at the next read
                # is harmless (any key made by _kt is a valid bound).
                yield from self._rest(now, {q.request_id for q in out})
                return
            while True:
                top = -opened[0][0] if opened else ninf
                fresh = nxt_bound > top
                if fresh:
                    top = nxt_bound
                if top <= _EMPTY_BOUND or (cand and -cand[0][0] > top):
                    break
                if fresh:
                    slot = nxt
                    b = by_slot[slot]
                    nxt = lines.take(slot)  # its bound EMPTY: the next highest
                    nxt_bound = lines.top
                    kt = b.front  # b.keys[0]
                    pos = 0
                else:
                    _, slot, kt, pos = heappop(opened)
                    b = by_slot[slot]
                rid = kt[2]
                item = items[rid]
                if item[8]:
                    # Stale (keyed by its largest possible h/c): read now, re-keyed by _settle
                    # through ``loose`` (by its hit).
                    self._fresh(item)
                    loose.append(rid)
                    counted = -1
                else:
                    if item[7] != item[1]:
                        loose.append(rid)
                    counted = slot
                wait = (now - item[2]) / item[3]
                if cap is not None and wait > cap:  # min(wait, cap)
                    wait = cap
                heappush(cand, (-(item[1] + wait), item[2], rid, counted))
                # The bucket's next key by position (the keys do not change during a read; a
                # bucket is in ``opened`` at most once, so the heap never compares past ``slot``).
                pos += 1
                keys = b.keys
                if pos < len(keys):
                    nk = keys[pos]
                    d = te - b.t0
                    g = d * b.s_hi if d > 0.0 else 0.0
                    k = -nk[0]
                    heappush(opened, (-(k + g + MARGIN * (1.0 + abs(k) + g)), slot, nk, pos))
            neg, _, rid, counted = heappop(cand)
            self._frontier = -neg
            q = items[rid][0]
            out.append(q)
            if i == 0:
                if lead is not None:
                    if rid != lead:
                        raise EngineInvariantError(
                            f"Fast lane: the kept first request {lead!r} is not the read's first {rid!r} at {now!r}")
                    continue  # yielded above
                if te == now:  # (a clock gone back: bounds taken later than now; not kept)
                    # Kept only if the reader stops here (the state as it is now; below).
                    self._lead_state = (now, -neg, items[rid], cand, opened, self._reads, nb)
            # The engine's current snapshot object (same hit as ``q``, whose key was exact at the
            # step's start): admitting preempted requests may have made the engine rebuild it.
            yield q if self._resolve is None else self._resolve(q)
            self._lead_state = None  # read on: the state moved (and the first was admitted)

    def _lead_until(self, now: float, score: float, item: list, cand: list, opened: list,
                    read: int, nb: int) -> tuple[str, float, float] | None:
        """The first request of a read at ``now`` (``item``, exact score ``score``), kept for the
        later reads at clocks up to the returned ``valid until`` where nothing else changes
        (``_first``); ``None`` when it can lose its place at once.

        The read's state when it yields the first bounds every other request's score at a clock
        ``t >= now`` by a line ``a + s (t - now)``: a candidate taken (``cand``: exact score ``a``
        at ``now``, slope ``1 / SLO``), an opened bucket's next key (``opened``: its bound ``a``
        at ``now``, slope ``s_hi``), an unopened bucket (the read's bounds, ``read``: its number,
        kept in the lines until the next read; its line's slope). A score
        rises at most at its slope (capped: flat), so these lines bound the others, and the
        first's score stays at least ``score + s_f (t - now)`` (``s_f = 0`` with a cap: the
        computed score never falls, its rounding being monotone). So it stays strictly first
        while ``score - a - m > (s - s_f) (t - now) + m' (t - now)`` for every line, with
        ``m = 4 MARGIN x`` the two scores' magnitudes at ``now`` and ``m' = 4 MARGIN (s + s_f)``
        their growth: every operation of a score is correctly rounded (~1e-16 of its result,
        the wait ``t - arrival`` included, whatever the clock's size), far inside the margin.
        The window's end itself is a clock, rounded to the clock's precision: it is taken one
        ulp below the computed ``now + slack / rate``, so at or before the exact end.
        A full read at such a ``t`` yields it first (a read yields the exact order)."""
        s_f = item[4] if self.wait_cap is None else 0.0
        mag_f = 1.0 + abs(score) + 2.0 * item[1]
        grow = 4.0 * MARGIN
        until = math.inf
        items = self._items
        for neg, _, rid, _ in cand:
            other = items[rid]
            a = -neg
            s = other[4]
            slack = score - a - grow * (mag_f + abs(a) + 2.0 * other[1])
            if slack <= 0.0:
                return None
            rate = s - s_f + grow * (s + s_f)
            if rate > 0.0:
                until = min(until, now + slack / rate)
        # The buckets' lines are measured from the clock they were built at: their terms grow
        # with the span since then.
        span = max(now, self._t0_max) - self._origin
        by_slot = self._by_slot
        for neg, slot, _, _ in opened:
            a = -neg
            s = by_slot[slot].s_hi * (1.0 + 2.0 * MARGIN)
            slack = score - a - grow * (mag_f + abs(a) + 2.0 * span * s)
            if slack <= 0.0:
                return None
            rate = s - s_f + grow * (s + s_f)
            if rate > 0.0:
                until = min(until, now + slack / rate)
        if nb:
            # Unopened buckets (an opened or empty one reads about EMPTY: no limit), from the
            # bounds the read left in the lines (no read has evaluated them since: any change or
            # read computes the pending window first, ``_kept``).
            if read != self._reads:
                raise EngineInvariantError(f"Fast lane: the kept first's read {read} is not the last ({self._reads})")
            least = self._lines.lead_limit(score, mag_f, grow, span, s_f)
            if least is None:
                return None
            if least < math.inf:
                until = min(until, now + least)
        # ``now + slack / rate`` is rounded to the clock's precision, up by as much as half an
        # ulp of the clock (1.2e-7 s at wall-clock times of 1.7e9 s: more than the margins
        # above at a steep line): one ulp down keeps the window's end at or before the exact
        # one. (Found by the kept-first property test at a clock of 1.7e9 s.)
        if until < math.inf:
            until = math.nextafter(until, -math.inf)
        return (item[0].request_id, now, until)

    def _rest(self, now: float, done: set[str]) -> Iterator[QueuedRequest]:
        """Every request not in ``done`` by the exact key: the rest of the order once ``done``
        holds its first requests."""
        cap = self.wait_cap
        keys = []
        for rid, item in self._items.items():
            if rid in done:
                continue
            if item[8]:
                self._fresh(item)  # its key stays an upper bound, tightened at the next read
                self._loose.append(rid)
            wait = (now - item[2]) / item[3]
            if cap is not None:
                wait = min(wait, cap)
            keys.append((-(item[1] + wait), item[2], rid))
        keys.sort()
        items, res = self._items, self._resolve
        for k in keys:
            q = items[k[2]][0]
            yield q if res is None else res(q)
