# cython: language_level=3
"""``CompiledBlockPool``: ``fairsim.sim.block_pool.BlockPool`` as a typed extension class.

The pure-Python ``BlockPool`` is the reference: this class has its public behaviour (the same
blocks taken, free-queue order, lookups, counters, ``journal`` entries and ``on_key_change``
calls in the same order, the same errors) and ``tests/test_block_pool_compiled.py`` compares
the two operation by operation and engine run by engine run. What differs is the storage:

- reference counts in a C ``int`` array (``ref_cnt`` reads a copy as a list);
- the LRU free queue as an intrusive doubly linked list over C ``int`` arrays (``_prev``,
  ``_next``, head and tail), like vLLM's ``FreeKVCacheBlockQueue``: O(1) removal from the
  middle, push to either end, and the front ``n`` taken in O(n);
- ``block_key`` (a Python list), the lookup ``key -> first block`` (a dict, ``hit_table``) and
  the rare duplicates ``key -> {block: None}`` as in the reference.

Differences a caller can see, none of which the engines rely on: ``ref_cnt`` is a copy (assign
through the methods only); a block id outside ``0 .. num_blocks - 1`` raises ``IndexError`` (the
reference's lists wrap a negative id around); ``journal``, ``watched`` and ``on_key_change`` are
read once per call (a callback must not reassign them mid-call; the reference's bulk calls read
them once too); it cannot be subclassed from Python code that expects ``_free``.

PEEK's eviction choice is native too: with ``protection`` set to an object whose ``protected``
attribute is a dict (key -> count, a key protected while in it: ``ProtectWaitingHits``), an
allocation takes the free blocks whose key is not protected first, in LRU order, then the
protected ones in LRU order - what ``HookedBlockPool`` with that hook takes (the reference of this
path; ``tests/test_block_pool_peek.py``). ``protection.protected`` is read once per ``allocate``
and ``grow_chunks`` call (the engine replaces or changes it between calls, never inside one). Other
eviction hooks (RAGCache's PGDSF) stay on ``HookedBlockPool``.
"""

from cpython cimport array
import array
from cpython.dict cimport PyDict_Contains, PyDict_SetDefault
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc

from fairsim.sim.steplog import STEP_TYPECODES as _CODES


cdef extern from "Python.h":
    Py_ssize_t PyDict_GET_SIZE(object)

from fairsim.errors import EngineInvariantError


cdef class CompiledBlockPool:
    """A fixed pool of KV-cache blocks with a prefix-hash lookup and LRU eviction (module
    docstring; ``BlockPool`` documents each method).

    Args:
        num_blocks: Usable blocks (>= 1).

    Raises:
        ValueError: ``num_blocks < 1``.
    """

    cdef int* _ref
    cdef int* _prev
    cdef int* _next
    cdef int _head
    cdef int _tail
    cdef int _n_free
    cdef Py_ssize_t _num_cached
    cdef readonly int num_blocks
    cdef readonly list block_key
    cdef readonly dict _cached
    cdef readonly dict _more
    cdef list _ids  # the block ids as Python ints, made once (no int object per handed-out id)
    cdef public object num_evictions
    cdef public object num_frees
    cdef public object on_key_change
    cdef public object watched
    cdef public object journal
    cdef public object protection

    def __cinit__(self, int num_blocks):
        if num_blocks < 1:
            raise ValueError(f"num_blocks={num_blocks}: the pool needs at least 1 block")
        self._ref = <int*> PyMem_Malloc(num_blocks * sizeof(int))
        self._prev = <int*> PyMem_Malloc(num_blocks * sizeof(int))
        self._next = <int*> PyMem_Malloc(num_blocks * sizeof(int))
        if self._ref == NULL or self._prev == NULL or self._next == NULL:
            raise MemoryError()
        cdef int b
        for b in range(num_blocks):  # all free, in id order
            self._ref[b] = 0
            self._prev[b] = b - 1
            self._next[b] = b + 1 if b + 1 < num_blocks else -1
        self._head = 0
        self._tail = num_blocks - 1
        self._n_free = num_blocks
        self._num_cached = 0
        self.num_blocks = num_blocks
        self.block_key = [None] * num_blocks
        self._ids = list(range(num_blocks))
        self._cached = {}
        self._more = {}
        self.num_evictions = 0
        self.num_frees = 0
        self.on_key_change = None
        self.watched = None
        self.journal = None
        # None: plain LRU. Else an object whose ``protected`` dict (key -> count) names the keys
        # an allocation takes last (PEEK's ``ProtectWaitingHits``; module docstring).
        self.protection = None

    def __dealloc__(self):
        PyMem_Free(self._ref)
        PyMem_Free(self._prev)
        PyMem_Free(self._next)

    # -- the free queue ----------------------------------------------------------------------------
    cdef inline void _unlink(self, int b):
        cdef int p = self._prev[b]
        cdef int n = self._next[b]
        if p >= 0:
            self._next[p] = n
        else:
            self._head = n
        if n >= 0:
            self._prev[n] = p
        else:
            self._tail = p
        self._n_free -= 1

    cdef inline void _push_back(self, int b):
        self._prev[b] = self._tail
        self._next[b] = -1
        if self._tail >= 0:
            self._next[self._tail] = b
        else:
            self._head = b
        self._tail = b
        self._n_free += 1

    cdef inline void _push_front(self, int b):
        self._next[b] = self._head
        self._prev[b] = -1
        if self._head >= 0:
            self._prev[self._head] = b
        else:
            self._tail = b
        self._head = b
        self._n_free += 1

    cdef list _pop_front(self, int n):
        """The front ``n`` blocks (``n <= _n_free``), off the queue, in order."""
        cdef list out = [None] * n
        cdef list ids = self._ids
        cdef int b = self._head
        cdef int i
        for i in range(n):
            out[i] = ids[b]
            b = self._next[b]
        self._head = b
        if b >= 0:
            self._prev[b] = -1
        else:
            self._tail = -1
        self._n_free -= n
        return out

    cdef dict _protected_now(self):
        """``protection.protected`` when there is one and it is not empty, else None (LRU)."""
        if self.protection is None:
            return None
        cdef dict protected = self.protection.protected
        return protected if protected else None

    cdef list _take(self, Py_ssize_t n, dict protected):
        """``n`` free blocks (``n <= _n_free``), off the queue, in the order to take them: the
        front ``n`` without ``protected``; with it, the unprotected ones in LRU order, then the
        protected ones in LRU order (``ProtectWaitingHits.select``: the walk stops at the
        ``n``-th unprotected block, protected ones kept are at most ``n``)."""
        if protected is None:
            return self._pop_front(<int> n)
        cdef list block_key = self.block_key
        cdef list ids = self._ids
        cdef list out = []
        cdef list held = []
        cdef Py_ssize_t i
        cdef int b = self._head
        while b >= 0 and len(out) < n:
            key = block_key[b]
            if key is not None and key in protected:
                if len(held) < n:
                    held.append(ids[b])
            else:
                out.append(ids[b])
            b = self._next[b]
        if len(out) < n:
            out.extend(held[:n - len(out)])
        for i in range(n):
            self._unlink(out[i])
        return out

    cdef inline int _index(self, object block_id) except -1:
        cdef long b = block_id
        if b < 0 or b >= self.num_blocks:
            raise IndexError(f"block {block_id} is not in this pool of {self.num_blocks} blocks")
        return <int> b

    # -- queries -----------------------------------------------------------------------------------
    @property
    def num_free(self):
        """Blocks with ``ref_cnt == 0`` (empty or cached-but-evictable)."""
        return self._n_free

    @property
    def num_used(self):
        """Blocks held by at least one request (``ref_cnt > 0``)."""
        return self.num_blocks - self._n_free

    @property
    def num_cached(self):
        """Blocks that currently carry a hash (hittable)."""
        return self._num_cached

    @property
    def hit_table(self):
        """The hittable keys, for ``key in`` tests only (read-only)."""
        return self._cached

    @property
    def ref_cnt(self):
        """Reference count per block, a copy (``list[int]``)."""
        return [self._ref[b] for b in range(self.num_blocks)]

    def is_cached(self, key):
        """True when some block holds ``key``."""
        return key in self._cached

    def lookup_prefix(self, keys, Py_ssize_t max_blocks):
        """Block ids of the longest run of leading ``keys`` present in the cache, at most
        ``max_blocks`` (read as ``keys[:max_blocks]``)."""
        return self._lookup(keys, max_blocks)

    cdef list _lookup(self, keys, Py_ssize_t max_blocks):
        cdef dict cached = self._cached
        cdef list hit = []
        cdef Py_ssize_t i, n = _prefix_len(keys, max_blocks)
        for i in range(n):
            b = cached.get(keys[i])
            if b is None:
                break
            hit.append(b)
        return hit

    def count_prefix(self, keys, Py_ssize_t max_blocks):
        """Length in blocks of ``lookup_prefix(keys, max_blocks)``, without building the list."""
        cdef dict cached = self._cached
        cdef Py_ssize_t i, n = _prefix_len(keys, max_blocks)
        for i in range(n):
            if keys[i] not in cached:
                return i
        return n

    def num_evictable(self, block_ids):
        """How many of ``block_ids`` sit in the free queue."""
        return self._evictable(block_ids)

    cdef Py_ssize_t _evictable(self, block_ids) except -1:
        cdef Py_ssize_t count = 0
        for block_id in block_ids:
            if self._ref[self._index(block_id)] == 0:
                count += 1
        return count

    # -- mutations ---------------------------------------------------------------------------------
    def touch(self, block_ids):
        """Take a reference on cache-hit blocks, removing free ones from the free queue."""
        self._touch(block_ids)

    cdef int _touch(self, block_ids) except -1:
        cdef int b
        for block_id in block_ids:
            b = self._index(block_id)
            if self._ref[b] == 0:
                self._unlink(b)
            self._ref[b] += 1
        return 0

    def allocate(self, n):
        """Take ``n`` blocks from the front of the free queue, evicting cached ones; with
        ``protection``, unprotected free blocks first (LRU), then protected ones (LRU).

        Raises:
            ValueError: Fewer than ``n`` free blocks, or ``n < 0``.
        """
        return self._allocate(n)

    cdef list _allocate(self, n):
        if n > self._n_free:
            raise ValueError(f"cannot allocate {n} blocks: only {self._n_free} free")
        if n < 0:
            raise ValueError(f"cannot allocate {n} blocks: a count is >= 0")
        cdef list out = self._take(n, self._protected_now())
        cdef Py_ssize_t evicted = self._claim(out, 0, n, self.journal, self.on_key_change, self.watched)
        if evicted:
            self.num_evictions += evicted
            self._num_cached -= evicted
        return out

    cdef Py_ssize_t _claim(self, list taken, Py_ssize_t lo, Py_ssize_t hi, object journal,
                           object notify, object watched) except -1:
        """``taken[lo:hi]``, just off the free queue: ``ref_cnt = 1``, the cached ones evicted
        in order (lookup table, ``journal``, ``on_key_change`` when a key's last block goes).
        Returns the blocks evicted; the caller adds them to the counters."""
        cdef list block_key = self.block_key
        cdef dict cached = self._cached
        cdef Py_ssize_t i, evicted = 0
        cdef int b
        for i in range(lo, hi):
            b = taken[i]
            self._ref[b] = 1
            key = block_key[b]
            if key is not None:
                block_key[b] = None
                evicted += 1
                if self._more and key in self._more:
                    self._drop_duplicate(b, key)  # another block still holds the key
                    continue
                first = cached.pop(key)  # one lookup for the usual key (KeyError as cached[key])
                if <int> first != b:  # (b is not the key's first block: not in a consistent pool)
                    cached[key] = first
                    self._drop_duplicate(b, key)
                else:  # the key is no longer hittable
                    if journal is not None:
                        _journal(journal, key, True)
                    if notify is not None and _watched(watched, key):
                        notify(key)
        return evicted

    cdef int _drop_duplicate(self, int block_id, object key) except -1:
        cdef dict more = self._more[key]
        cdef object first = block_id
        if self._cached[key] == block_id:
            first = next(iter(more))
            self._cached[key] = first
        del more[first]
        if not more:
            del self._more[key]
        return 0

    cdef int _add_duplicate(self, int block_id, object key) except -1:
        more = self._more.get(key)
        if more is None:
            more = self._more[key] = {}
        more[block_id] = None
        return 0

    cdef int _cache_run(self, list blocks, keys, Py_ssize_t start, Py_ssize_t stop, object journal,
                        object notify, object watched) except -1:
        """``cache(blocks[j], keys[j])`` for ``j`` in ``range(start, stop)`` (``cache_blocks``)."""
        cdef list block_key = self.block_key
        cdef dict cached = self._cached
        cdef list ids = self._ids
        cdef Py_ssize_t j
        cdef int b
        for j in range(start, stop):
            b = self._index(blocks[j])
            key = keys[j]
            if block_key[b] is not None:
                raise EngineInvariantError(f"block {b} is already cached under {block_key[b]!r}")
            block_key[b] = key
            self._num_cached += 1  # per block: an error above leaves the earlier ones counted
            block_id = ids[b]
            if cached.setdefault(key, block_id) is not block_id:  # one lookup: set where absent
                self._add_duplicate(b, key)  # another block with the same content: hits do not change
                continue
            if journal is not None:
                _journal(journal, key, False)
            if notify is not None and _watched(watched, key):
                notify(key)
        return 0

    def cache(self, block_id, key):
        """Register a full, scheduled block under ``key`` so later lookups hit it.

        Raises:
            EngineInvariantError: The block already holds a key.
        """
        self._cache_run([block_id], (key,), 0, 1, self.journal, self.on_key_change, self.watched)

    def cache_blocks(self, block_ids, keys, Py_ssize_t start, Py_ssize_t stop):
        """``cache(block_ids[j], keys[j])`` for ``j`` in ``range(start, stop)``, in one call.

        Raises:
            EngineInvariantError: A block already holds a key (blocks before it are cached).
        """
        cdef list blocks = block_ids if type(block_ids) is list else list(block_ids)
        self._cache_run(blocks, keys, start, stop, self.journal, self.on_key_change, self.watched)

    def admit(self, keys, Py_ssize_t max_blocks, Py_ssize_t full_blocks, tokens, budget,
              Py_ssize_t block_size):
        """``BlockPool.admit`` (the reference): the same calls in the same order, each this
        class's own code, with no Python call between them."""
        cdef list hit = self._lookup(keys, max_blocks)
        cdef Py_ssize_t num_hit = len(hit), done, n, full
        if full_blocks - num_hit + self._evictable(hit) > self._n_free:
            return num_hit
        done = num_hit * block_size
        left = tokens - done  # Python ints: a C integer could overflow on a huge prompt
        n = budget if left > budget else left
        self._touch(hit)
        cdef list blocks = hit + self._allocate(-(-(done + n) // block_size) - num_hit)
        full = (done + n) // block_size
        if full > len(keys):
            full = len(keys)
        if full <= num_hit:
            return blocks, num_hit, n, num_hit
        self._cache_run(blocks, keys, num_hit, full, self.journal, self.on_key_change, self.watched)
        return blocks, num_hit, n, full

    def grow_chunks(self, list blocks, keys, Py_ssize_t start, needs, stops):
        """Several chunks of one request in a row, each ``blocks.extend(allocate(needs[i]))``
        then ``cache_blocks(blocks, keys, stops[i - 1], stops[i])``; same effects in the same
        order as those calls (``BlockPool.grow_chunks``).

        With ``protection``: every chunk's blocks are the next ones of the one sequence ``_take``
        gives for ``sum(needs)`` blocks at the start (the per-chunk ``allocate`` calls' blocks,
        in order). Why: a chunk's choice depends only on the free queue's order, the free blocks'
        keys and the protected dict. Within the call nothing joins the free queue (no free), the
        protected dict does not change (the engine changes it between calls only), and the free
        blocks' keys do not change (a chunk evicts only blocks it took and caches only the
        request's own blocks, none free). So after a chunk takes the first ``k`` of the sequence
        "unprotected in LRU order, then protected in LRU order", the rest of the queue - the same
        blocks in the same relative order, minus those ``k`` - gives that sequence without its
        first ``k``: taking the first ``k`` of the unprotected part leaves the rest of it and all
        the protected part; taking more leaves only the tail of the protected part. By
        induction, chunk ``i`` takes ``sequence[pos:pos + needs[i]]``.

        Returns:
            Per chunk, after it: ``num_used``, ``num_cached`` and the blocks it evicted.

        Raises:
            ValueError: Fewer than ``sum(needs)`` free blocks (nothing is changed then).
            EngineInvariantError: A block to cache already holds a key.
        """
        cdef list need_list = needs if type(needs) is list else list(needs)
        cdef list stop_list = stops if type(stops) is list else list(stops)
        total = sum(need_list)
        if total < 0:
            raise ValueError(f"cannot allocate {total} blocks: a count is >= 0")
        if total > self._n_free:
            raise ValueError(f"cannot allocate {total} blocks: only {self._n_free} free")
        cdef list taken = self._take(total, self._protected_now())
        journal, notify, watched = self.journal, self.on_key_change, self.watched
        cdef list used_after = []
        cdef list cached_after = []
        cdef list evicted_in = []
        cdef Py_ssize_t used = self.num_blocks - self._n_free - total
        cdef Py_ssize_t pos = 0, i, need, stop, evicted
        cdef Py_ssize_t chunks = min(len(need_list), len(stop_list))
        for i in range(chunks):
            need = need_list[i]
            stop = stop_list[i]
            evicted = 0
            if need > 0:
                evicted = self._claim(taken, pos, pos + need, journal, notify, watched)
                if evicted:
                    self.num_evictions += evicted
                    self._num_cached -= evicted
                blocks.extend(taken[pos:pos + need])
                pos += need
                used += need
            self._cache_run(blocks, keys, start, stop, journal, notify, watched)
            if stop > start:
                start = stop
            used_after.append(used)
            cached_after.append(self._num_cached)
            evicted_in.append(evicted)
        return used_after, cached_after, evicted_in

    def free(self, block_ids):
        """Drop one reference per block; blocks reaching 0 join the free queue: hashed ones at
        the back (LRU), ones without a hash at the front, both in the order given (vLLM
        ``BlockPool.free_blocks``).

        Raises:
            EngineInvariantError: A reference count went negative (the blocks before it are
                freed; keyless ones among them are then in no queue, as in the reference).
        """
        cdef list block_key = self.block_key
        cdef list keyless = []
        cdef int b, count
        cdef Py_ssize_t i
        self.num_frees += 1
        for block_id in block_ids:
            b = self._index(block_id)
            count = self._ref[b] - 1
            self._ref[b] = count
            if count:
                if count < 0:
                    raise EngineInvariantError(f"block {b}: ref_cnt went negative (freed twice)")
            elif block_key[b] is None:
                keyless.append(b)
            else:
                self._push_back(b)
        for i in range(len(keyless) - 1, -1, -1):
            self._push_front(keyless[i])

    def free_queue(self):
        """Free block ids in eviction order (front first). For tests and debugging."""
        cdef list out = []
        cdef int b = self._head
        while b >= 0:
            out.append(b)
            b = self._next[b]
        return out

    def iter_free(self):
        """Iterate free block ids in LRU order (front = next to evict); the queue must not change
        while iterating."""
        cdef int b = self._head
        while b >= 0:
            yield b
            b = self._next[b]


cdef inline int _journal(object journal, object key, object hittable) except -1:
    """``if key not in journal: journal[key] = hittable`` (the first change of a key since the
    journal was set is kept), in one lookup where the journal is a dict (``PyDict_SetDefault``)."""
    if type(journal) is dict:
        PyDict_SetDefault(journal, key, hittable)
    elif key not in journal:
        journal[key] = hittable
    return 0


cdef inline bint _watched(object watched, object key) except -1:
    """``watched is None or key in watched`` (the pool's filter of ``on_key_change`` calls), with
    no lookup in an empty dict: a policy shown no hits (FCFS) watches no key, and the lookups of
    every block cached or evicted were 2 % of its run's instructions. The same answer: an empty
    dict holds no key, and the key was already hashed as a key of the lookup table. The size is
    read per key (a callback may change the map)."""
    if watched is None:
        return True
    if type(watched) is dict:
        return PyDict_GET_SIZE(watched) != 0 and PyDict_Contains(watched, key) == 1
    return key in watched


cdef inline Py_ssize_t _prefix_len(keys, Py_ssize_t max_blocks) except -1:
    """``len(keys[:max_blocks])``."""
    cdef Py_ssize_t n = len(keys)
    if max_blocks < 0:
        max_blocks = n + max_blocks if n + max_blocks > 0 else 0
    return max_blocks if max_blocks < n else n


# -- the prefill-only chunk burst (fairsim.sim.engine.Engine._chunk_burst) ---------------------------
def plan_chunks(long long total, long long computed, long long budget, long long bs, long long num_blocks,
                long long free_left, long long stop, long long n_keys, double now, double limit,
                double a_s, double b_s_per_token, double k_s_per_pair, double d_s_per_request, interrupt):
    """``fairsim.sim.engine.plan_chunks`` (the reference) with the step time
    ``Profile.step_time_from_sums`` inlined from its coefficients: the same float operations in
    the same order (``a + b * budget + k * pair_sum + d * 1``), so the same durations to the bit.
    ``interrupt`` is the ``fairsim.interrupt`` module: its ``REQUESTED`` is read once, before the
    first chunk, which is the reference's read before each chunk: Python runs its signal handler
    (which sets it) only between bytecodes, and the loop runs none (no Python call, no allocation
    of a collected object that could start the cyclic collector and a finaliser).
    """
    cdef list needs = []
    cdef list stops = []
    cdef list starts_s = []
    cdef list durations = []
    cdef long long end, need, full
    cdef double duration, fbudget = <double> budget
    cdef bint requested = interrupt.REQUESTED
    while total - computed > budget and now < limit and not requested:
        end = computed + budget
        need = -((-end) // bs) - num_blocks  # Python's floor division (cdivision off): a ceiling
        if need > 0:
            if need > free_left:
                break
            free_left -= need
            num_blocks += need
        else:
            need = 0
        full = end // bs
        if full > stop and stop < n_keys:
            stop = full if full < n_keys else n_keys
        duration = (a_s + b_s_per_token * fbudget
                    + k_s_per_pair * (fbudget * (<double> computed + fbudget / 2.0))
                    + d_s_per_request * 1.0)
        needs.append(need)
        stops.append(stop)
        starts_s.append(now)
        durations.append(duration)
        computed = end
        now = now + duration
    return needs, stops, starts_s, durations, computed, now, stop


cdef struct _StepRow:
    long long step
    double start_s
    double duration_s
    long long tokens, decode_tokens, requests, waiting, running, used, cached, evictions, preemptions


cdef class StepLog:
    """``fairsim.sim.steplog.StepLog``, its rows in one growing C buffer of 12 numbers each: a
    row is written without creating a Python object (``add``'s counts: the engine's ints)."""

    cdef _StepRow* _rows
    cdef Py_ssize_t _n, _cap

    def __dealloc__(self):
        PyMem_Free(self._rows)

    def __len__(self):
        return self._n

    cdef _StepRow* _more(self, Py_ssize_t k) except NULL:
        """Room for ``k`` more rows; the first of them."""
        cdef Py_ssize_t cap
        cdef _StepRow* grown
        if self._n + k > self._cap:
            cap = max(self._n + k, 2 * self._cap, 1024)
            grown = <_StepRow*> PyMem_Realloc(self._rows, cap * sizeof(_StepRow))
            if grown == NULL:
                raise MemoryError()
            self._rows, self._cap = grown, cap
        return self._rows + self._n

    def add(self, long long step, double start_s, double duration_s, long long tokens, long long decode_tokens,
            long long requests, long long waiting, long long running, long long kv_blocks_used,
            long long kv_blocks_cached, long long evictions, long long preemptions):
        cdef _StepRow* r = self._more(1)
        r.step, r.start_s, r.duration_s, r.tokens, r.decode_tokens = step, start_s, duration_s, tokens, decode_tokens
        r.requests, r.waiting, r.running, r.used, r.cached = requests, waiting, running, kv_blocks_used, kv_blocks_cached
        r.evictions, r.preemptions = evictions, preemptions
        self._n += 1

    def add_burst(self, long long step, list starts_s, list durations, long long budget, long long num_waiting,
                  long long num_running, list used, list cached, list evicted):
        cdef Py_ssize_t i, k = min(len(starts_s), len(durations), len(used), len(cached), len(evicted))
        cdef _StepRow* r = self._more(k)
        for i in range(k):
            r[i].step, r[i].start_s, r[i].duration_s = step + i, starts_s[i], durations[i]
            r[i].tokens, r[i].decode_tokens, r[i].requests = budget, 0, 1
            r[i].waiting, r[i].running = num_waiting, num_running
            r[i].used, r[i].cached, r[i].evictions, r[i].preemptions = used[i], cached[i], evicted[i], 0
        self._n += k

    def column(self, Py_ssize_t j):
        """Column ``j`` (``STEP_COLUMNS`` order) as a new typed array
        (``fairsim.sim.steplog.StepLog.column``).

        Raises:
            IndexError: ``j`` not in 0..11.
        """
        cdef Py_ssize_t i, n = self._n
        cdef const char* at
        cdef array.array col
        if not 0 <= j < 12:
            raise IndexError(f"step column {j}: there are 12")
        col = array.clone(_D if _CODES[j] == "d" else _Q, n, False)
        at = (<const char*> self._rows) + 8 * j  # the j-th 8-byte field of each row
        if _CODES[j] == "d":
            for i in range(n):
                col.data.as_doubles[i] = (<const double*> (at + i * sizeof(_StepRow)))[0]
        else:
            for i in range(n):
                col.data.as_longlongs[i] = (<const long long*> (at + i * sizeof(_StepRow)))[0]
        return col


# A row is 12 fields of 8 bytes in declaration order, so field j lies at byte 8 * j (column).
assert sizeof(_StepRow) == 96
cdef array.array _Q = array.array("q")
cdef array.array _D = array.array("d")
