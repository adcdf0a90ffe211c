"""Colocated engine with aggregated decodes: the same decisions and floats, far fewer Python steps.

In colocated mode most steps are full of decoding requests, each taking one token. The reference
loop (``fairsim.sim.engine.Engine``) touches every running request in every step (its chunk, its
block growth, its sampled token, its inter-token gap) and yields one SimPy timeout per step.
``DecodeFastEngine`` keeps the running *decoders* in aggregate instead (their count ``m`` and the
sum of their context lengths) and touches a decoder only at its own events, kept in a heap keyed
by ``(step, admission order)``:

- it needs a new KV block (its context crosses a block boundary: ``computed % block_size == 0``),
- a block of its becomes full and is cached (``(computed + 1) % block_size == 0``),
- it samples its last token (``generated + 1 == output_len``) and finishes.

A decoder's ``computed``/``generated`` are ``dec_c0``/``dec_g0`` plus the steps run since step
``dec_step``; its inter-token gaps are kept as one segment of consecutive steps (each gap the
difference of two consecutive step ends) and expanded into ``SimResult.token_gaps`` at the end.

Per step, in vLLM's order (``Engine._schedule``): the policy's order is taken at the step's start
where a waiting request could be admitted (the same calls as the reference, so stateful policies
see the same sequence of calls); the decoders' due events run in admission order; the last
running request, if it is not a decoder (a chunked prefill: every other running request is a
decoder, since a prefill that does not finish in a step takes the rest of its budget), takes
its chunk; then waiting requests are admitted (``Engine._admit_waiting``). When no waiting or
preempted request exists, no request is prefilling and no decoder event or arrival is due, steps
run in one tight loop without a SimPy event per step ("stretch"); ``now`` accumulates with the
same float operation as the reference (``now + duration``).

Two more shortcuts keep the decisions: a step whose admission attempt is known to fail at the
request the last one failed at skips the order and the attempt (``_still_blocked``, its proof
there), and its pure decode steps stretch too; and the steps in which the last running request
prefills a chunk that takes the whole budget the decoders leave, with no decoder event due, run
in a tight loop of their own (``_chunk_run``).

Where the aggregate would not be exact the step falls back to the reference: every decoder is
written back to its explicit state and ``Engine._schedule`` runs the step. That happens when the
decoders' block needs in a step exceed the free blocks (a preemption: vLLM preempts the newest
running request, which may be any decoder), when ``m >= budget`` (decoders beyond the budget
wait a step), or when more than the last running request is not a decoder.

Exactness: a step's ``pair_sum`` is a sum of terms ``n * (ctx + n / 2)``, all multiples of 1/2 far
below 2**52, so every partial sum is exact and the aggregate ``ctx_sum + m / 2`` equals the
reference's sequential float sum bit for bit; the step time is the same
``Profile.step_time_colocated`` call on the same arguments. ``tests/test_decode_fast.py`` runs
both engines on traces with preemptions, long outputs and arrivals during decode and requires
identical request, step and token-gap tables.
"""

from __future__ import annotations

import heapq
import math
from array import array
from itertools import repeat

from fairsim import interrupt
from fairsim.errors import EngineInvariantError
from fairsim.sim.engine import Engine, _Live
from fairsim.sim.lazy_hits import NO_KEY
from fairsim.sim.result import Columns
from fairsim.sim.steplog import STEP_COLUMNS


def _batch_sums(batch: list, new_tokens: int, pair_sum: float, decodes: int,
                decode_ctx: int) -> tuple[int, float, int, int]:
    """The step-time arguments of ``batch`` (``[(request, new tokens, context tokens)]``) added to
    the given sums, as ``Engine._loop`` adds them: tokens, ``n * (ctx + n / 2)`` pairs, and the
    decodes (one generated token on top of the prompt) with their context."""
    for live, n, ctx in batch:
        new_tokens += n
        pair_sum += n * (ctx + n / 2)
        if n == 1 and ctx >= live.req.prompt_len:
            decodes += 1
            decode_ctx += ctx
    return new_tokens, pair_sum, decodes, decode_ctx


class DecodeFastEngine(Engine):
    """``Engine`` in colocated mode with running decodes kept in aggregate (module docstring).

    Same arguments, errors and results as ``Engine``; only for ``EngineConfig.mode ==
    "colocated"`` (``simulate(..., fast_decode=True)`` picks it there).

    Attributes:
        stretched_steps: Steps run by the tight decode loop (no SimPy event, no policy call).
        reference_steps: Steps that fell back to ``Engine._schedule`` (all decoders written back).
        skipped_attempts: Steps in which the reference would have read the policy's order and
            tried an admission that ``_still_blocked`` proves fails (stretched steps included).
        chunk_run_steps: Steps run by ``_chunk_run`` (a prefill chunk beside the decoders).

    Args:
        skip_blocked: Skip admission attempts that cannot succeed (``_still_blocked``); False:
            read the order and try in every step that can admit (the previous behaviour).

    Raises:
        ValueError: A prefill-only config (nothing decodes; use ``Engine``).
    """

    def __init__(self, *args, skip_blocked: bool = True, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if not self.colocated:
            raise ValueError("DecodeFastEngine models colocated mode only; use Engine for prefill-only")
        # The exact skip of admission attempts that cannot succeed (``_still_blocked``): for an
        # order that declares what moves it (``moved_by``, fairsim.policies.incremental) and a
        # policy that is told nothing else per order (no ``on_prefill_tokens``, or one that only
        # stores the latest count: ``prefill_tokens_latest``) and stops at its first misfit (no
        # ``skips_misfits``, no ``admission_limit``). A snapshot-moved order must be eager: lazy
        # hits change its snapshots without counting in ``_order_changes``.
        moved_by = getattr(self._inc, "moved_by", None)
        can_skip = (skip_blocked and not self._skips_misfits
                    and (self._on_prefill_tokens is None
                         or getattr(self.policy, "prefill_tokens_latest", False) is True)
                    and getattr(self.policy, "admission_limit", None) is None)
        # Checked once, so only for a policy not told the counter (else its value at the last
        # read would matter: ``_moves_only_with_changes``).
        self._skip = (can_skip and self._on_prefill_tokens is None
                      and self._moves_only_with_changes(moved_by, self.prefill_tokens))
        # Else an order that declares what moves its first item (``head_moved_by``, which may
        # change with the order's state: SGLang's kept order): asked at each skip.
        self._skip_head = can_skip and not self._skip and hasattr(self._inc, "head_moved_by")
        # Else an order whose first item moves with the clock but is known to stay until a
        # clock (``head_until``: the Fairway family's kept Fast-lane first), asked at each skip.
        self._head_until = (getattr(self._inc, "head_until", None)
                            if can_skip and not self._skip and not self._skip_head else None)
        # Else an order that skips misfits and serves its groups in turn, each read moving
        # whose turn it is (``skip_reads``: Preble's): skipped where the last attempt of every
        # group it serves failed and nothing since could change that (``_groups_blocked``).
        self._skip_groups = (skip_blocked and self._skips_misfits and self._on_prefill_tokens is None
                             and hasattr(self._inc, "skip_reads"))
        self._record_misfits = self._skip_groups
        #: Per served group, the last attempt at it that admitted nothing: ``(the next keys of
        #: the requests it tried, _order_changes at its read, pool.num_frees)``.
        self._group_blocked: dict[int, tuple[list, int, int]] = {}
        #: The clock (s) up to which the last ``_still_blocked`` that held holds (inf: any).
        self._blocked_until = math.inf
        #: The last admission attempt's misfit head: ``(request, its next key, _order_changes,
        #: pool.num_frees, prefill_tokens)`` as they were at its order read and attempt; None when
        #: the last attempt admitted or was not made.
        self._blocked: tuple | None = None
        self._events: list[tuple[int, int, _Live]] = []  # (step, dec_seq, decoder)
        self._seq = 0  # registration counter: admission order among decoders
        self._m = 0  # registered decoders
        self._ctx = 0  # sum of their computed tokens at the current step's start
        # Preemptions of a step that scheduled nothing, counted in the next reference step's row
        # (``Engine._loop``'s ``carried``): with no request running the next step is one.
        self._carried_preemptions = 0
        # Step table columns (the step number is the row number): start and duration in seconds,
        # then counts; typed arrays, so the table needs no per-value conversion at the end.
        self._cols: list[array] = [array("d"), array("d")] + [array("q") for _ in STEP_COLUMNS[3:]]
        # Token gaps: explicit rows (request row, step, seconds) and decoder segments (request
        # row, first step, last step), each step of a segment one gap between consecutive ends.
        self._xg: tuple[list[int], list[int], list[float]] = ([], [], [])
        self._sg: tuple[list[int], list[int], list[int]] = ([], [], [])
        self._append = [col.append for col in self._cols]
        self._budget = self.config.budget_tokens
        self._max_seqs = self.config.max_num_seqs
        self.stretched_steps = 0
        self.reference_steps = 0
        self.skipped_attempts = 0
        self.chunk_run_steps = 0

    # -- the step loop ---------------------------------------------------------------------------
    def _loop(self):
        env = self.env
        arrivals = self._arrivals
        waiting, preempted_q = self._waiting, self._preempted
        pool = self.pool
        budget_tokens = self.config.budget_tokens
        events = self._events
        intr = interrupt
        # A fleet member (fairsim.sim.fleet) routes what is due before each step, waits for its
        # inbox when idle, yields at each step's end (between its allocations and its
        # completions, as Engine._loop) and stretches only steps that start before the next
        # pending SimPy event (no routing can reach it before that).
        member = self._member
        now = env.now if env is not None else 0.0  # a lone engine has no environment (Engine.run)
        step = 0
        while arrivals or waiting or preempted_q or self._running:
            if intr.REQUESTED:  # a Ctrl-C swallowed by a finaliser still stops the run
                raise KeyboardInterrupt
            if member is not None:
                member.route_due(now)
            for released, _, live in arrivals.pop_due(now):
                live.released_s = released
                live.arrival_prefill = self.prefill_tokens
                waiting[live] = live
                self._watch(live)
            running = self._running
            if member is not None and not (waiting or preempted_q or running):
                now = yield from member.idle(now)
                continue
            if not (waiting or preempted_q or running):
                nxt = arrivals.next_time()
                if nxt is None:
                    raise EngineInvariantError(
                        f"at {now:.6f} s closed-loop turns are held but no request is queued or running")
                # A lone engine is its own only process: no event for the wait (as Engine._loop).
                now = now + (nxt - now)  # the reference's env.now after timeout(nxt - now)
                continue
            m = self._m
            tail = len(running) - m
            if m and m < budget_tokens and (
                    tail == 0 or (tail == 1 and running[-1].dec_seq is None)):
                while events and events[0][2].dec_seq != events[0][1]:
                    heapq.heappop(events)  # stale: the decoder left or was written back
                # Every decoder has a finish event, so the heap is never empty here.
                due_step = events[0][0]
                if due_step < step:
                    raise EngineInvariantError(f"step {step}: a decoder event of step {due_step} was missed")
                until = env.peek() if member is not None else None
                blocked = tail == 0 and due_step != step and (waiting or preempted_q) and self._still_blocked(now)
                if blocked and self._blocked_until < math.inf:
                    # A head kept up to a clock: no stretch step starts after it (_fast_start asks again).
                    cut = math.nextafter(self._blocked_until, math.inf)
                    until = cut if until is None or cut < until else until
                if (tail == 0 and due_step != step and (until is None or until > now)
                        and (not (waiting or preempted_q) or blocked)):
                    step, now = self._stretch(step, now, due_step, until)
                    if member is not None and not member.advance(now):
                        yield env.timeout(now - env.now)
                    continue
                if tail == 1 and member is None and due_step != step:
                    first = step
                    step, now = self._chunk_run(running[-1], step, now, due_step)
                    if step != first:
                        continue
                due = []
                while events and events[0][0] == step:
                    _, seq, live = heapq.heappop(events)
                    if live.dec_seq == seq:
                        due.append(live)
                if not due or self._blocks_needed(due, step) <= pool.num_free:
                    end_s, batch = self._fast_start(step, now, due)
                    if member is not None and not member.advance(end_s):
                        yield env.timeout(end_s - env.now)
                    now = self._fast_finish(step, now, end_s, due, batch)
                    step += 1
                    continue
            started = self._reference_start(step, now)
            if started is None:
                continue  # every running request preempted itself: vLLM schedules nothing
            end_s, batch = started
            if member is not None and not member.advance(end_s):
                yield env.timeout(end_s - env.now)
            now = self._reference_finish(step, now, end_s, batch)
            step += 1

    #: Stretches of at least this many steps are computed with numpy (below it, a Python loop
    #: is cheaper than the array set-up); the floats are the same either way.
    vector_min_steps = 48

    def _stretch(self, step: int, now: float, stop: int, until: float | None = None) -> tuple[int, float]:
        """Pure decode steps from ``step`` until step ``stop`` (the next decoder event) or an
        arrival is due, and (a fleet member) none starting at or after ``until`` (s); returns the
        next step and its start time (s). Requests may wait only if their admission is blocked
        (``_loop`` checks ``_still_blocked``): nothing in these steps changes that, and each row
        counts them as waiting.

        Step ``i`` of the stretch has ``ctx + i * m`` context tokens and lasts
        ``step_time_colocated(m, ctx_i + m / 2, m, m, ctx_i)``; it starts at the previous start
        plus the previous duration, the reference's ``env.now`` after each timeout. Long
        stretches take those durations from ``Profile.step_times_colocated`` and the starts from
        a sequential ``np.cumsum`` (the same float additions in the same order)."""
        m = self._m
        ctx = self._ctx
        half = 0.5 * m
        nxt = self._arrivals.next_time()
        if until is not None and (nxt is None or until < nxt):
            nxt = until  # stop as before an arrival due then
        starts, durs = self._cols[0], self._cols[1]
        intr = interrupt
        k0 = step
        chunk = 256
        while step < stop and not intr.REQUESTED and (nxt is None or nxt > now):
            left = stop - step
            if left < self.vector_min_steps:
                cost = self.profile.step_time_colocated
                while step < stop:
                    if nxt is not None and nxt <= now:
                        break
                    d = cost(m, ctx + half, m, m, ctx)
                    starts.append(now)
                    durs.append(d)
                    now = now + d
                    ctx += m
                    step += 1
                break
            import numpy as np

            k = min(left, chunk)
            chunk *= 2
            c = ctx + m * np.arange(k, dtype=np.int64)
            d = self.profile.step_times_colocated(m, c + half, m, m, c)
            acc = np.empty(k + 1, dtype=np.float64)
            acc[0] = now
            acc[1:] = d
            np.cumsum(acc, out=acc)  # acc[i] = start of step i; sequential, as now + d
            n = k if nxt is None else int(np.searchsorted(acc[:k], nxt, side="left"))
            starts.frombytes(acc[:n].tobytes())
            durs.frombytes(d[:n].tobytes())
            now = float(acc[n])
            ctx += m * n
            step += n
        count = step - k0
        if count:
            self.stretched_steps += count
            self._ctx = ctx
            pool = self.pool
            cols = self._cols
            num_waiting = len(self._waiting) + len(self._preempted)
            if num_waiting:
                self.skipped_attempts += count  # _loop stretches with a queue only when blocked
                if self._skip_groups and self._waiting and len(self._running) < self._max_seqs:
                    self._inc.skip_reads(count)  # each step would have read (_fast_start's can_admit)
            for col, value in zip(cols[2:], (m, m, m, num_waiting, m, pool.num_used, pool.num_cached, 0, 0)):
                col.extend(repeat(value, count))
        return step, now

    def _chunk_run(self, live: _Live, step: int, now: float, stop: int) -> tuple[int, float]:
        """Steps from ``step`` in which the decoders decode and ``live`` (the prefilling last
        running request) takes the rest of the budget, until step ``stop`` (the next decoder
        event), an arrival, its last chunk, or a chunk that needs more blocks than are free;
        returns the next step and its start time (s).

        Each is the step ``_fast_start`` and ``_fast_finish`` make when no decoder event is due
        and the chunk takes the whole budget left (the same calls, floats and row): nothing
        can be admitted (so the order is not read; ``_admit_waiting``, called with a queue,
        would stop at once and clear ``_blocked``), ``live`` samples no token (so it finishes
        nothing and ``_register`` would not take it), and every decoder's context grows by one.
        A lone engine only: a fleet member's step ends are where other engines' events fall
        (``_loop``). Most colocated steps under load are of this kind after each admission
        (66,323 of FCFS's 264,538 on the conversation trace at ``--time-scale 8``)."""
        pool = self.pool
        bs = self.block_size
        m = self._m
        ctx = self._ctx
        half = 0.5 * m
        n = self._budget - m  # the chunk: the budget the decoders leave
        total = live.req.prompt_len + live.generated
        keys, blocks = live.keys, live.blocks
        nxt = self._arrivals.next_time()
        num_waiting = len(self._waiting) + len(self._preempted)
        num_running = len(self._running)
        cost = self.profile.step_time_colocated
        a = self._append
        intr = interrupt
        first = step
        while (step < stop and total - live.computed > n and (nxt is None or nxt > now)
               and not intr.REQUESTED):
            computed = live.computed
            end = computed + n
            need = -(-end // bs) - len(blocks)
            evictions0 = pool.num_evictions
            if need > 0:
                if need > pool.num_free:
                    break  # _fast_start preempts it
                blocks.extend(pool.allocate(need))
            if end // bs > live.num_cached_blocks < len(keys):
                self._cache_blocks(live, end)
            batch = [(live, n, computed)]
            new_tokens, pair_sum, decodes, decode_ctx = _batch_sums(batch, m, ctx + half, m, ctx)
            self.prefill_tokens += new_tokens - decodes
            duration = cost(new_tokens, pair_sum, m + 1, decodes, decode_ctx)
            a[0](now)
            a[1](duration)
            a[2](new_tokens)
            a[3](decodes)
            a[4](m + 1)
            a[5](num_waiting)
            a[6](num_running)
            a[7](pool.num_used)
            a[8](pool.num_cached)
            a[9](pool.num_evictions - evictions0)
            a[10](0)
            end_s = now + duration
            self._finish_batch(batch, step, now, end_s)  # computed += n (no token: more to prefill)
            ctx += m
            now = end_s
            step += 1
        if step != first:
            self._ctx = ctx
            self.chunk_run_steps += step - first
            if num_waiting:
                self._blocked = None
                self._group_blocked.clear()
        return step, now

    def _still_blocked(self, now: float) -> bool:
        """Whether this step's admission attempt (``_fast_start``: after the due decoders'
        allocations and caching) fails at the request the last attempt failed at
        (``_blocked``), so that reading the order and trying can be skipped with the same result.

        The attempt tries the preempted requests first, then the policy's order, and stops at
        the first that does not fit: ``need > F``, with ``F`` the free blocks and ``need`` the
        head's blocks ``full`` minus those of its prefix hit already held by a running request
        (``BlockPool.admit``, from ``Engine._admit_waiting``: ``full - len(hit) +
        num_evictable(hit)``). Sufficient:

        - The head is the same request. ``_order_changes`` counts every arrival, admission and
          preemption (the preempted front and the order's membership), and, on the eager path,
          every change of a key a waiting request watches (each re-key of a snapshot); it is
          compared with its value at the last order read, not at the attempt, since a key
          changed in between (that step's caching) re-keys its snapshot at the next read. An
          order that moves only with its membership (``moved_by == "queue"``) or with its
          snapshots (``"snapshots"``, eager path only: ``__init__``) therefore yields the same
          head, and neither reads the clock nor changes when read: the skipped read is
          invisible. The same holds of an order whose first item alone is declared so
          (``head_moved_by``, asked now: the last read saw the same membership, so the same
          state where the declaration depends on it): an attempt that fails at its first
          request reads nothing after it. HRRN's ``on_prefill_tokens`` only stores the latest
          count for the next sort (``prefill_tokens_latest``), so skipping it is invisible too;
          where its sort reads it (``"snapshots"``: SGLang's kept order at or below 128
          waiting), the counter must also be the one told at the last read (it grows only
          with prefill chunks, not in the decode steps of a blocked queue). Or the order
          declares the clock up to which its first item stays the last read's and a read
          changes nothing while it is told nothing (``head_until(now)``, asked now: the
          Fairway family's Fast lane keeps its first with such a clock,
          ``FastLane._lead_until``), and it has nothing to be told: no snapshot change waits
          for the next read (``_dirty``, and with lazy hits ``raised`` and ``recheck``; every
          request the last read resolved has a snapshot, so a change of its hit is one of
          these). ``_blocked_until`` is then that clock, which ends a stretch (``_loop``).
        - ``need - F`` has not decreased since the last attempt. ``F`` rises only by ``free``
          (``BlockPool.num_frees`` unchanged); it falls by one per allocated block, and an
          allocation evicts at most that many cached blocks. The hit is the run of leading
          cached keys, so it grows only if its next key (``keys[len(hit)]``) is cached; while
          that key is not cached the hit can only shrink, and a held hit block stays held (a
          reference goes only by ``free`` and comes only by ``touch``, which only an admission
          does). An eviction can raise the held count by one (the key's next copy becomes the
          one looked up, and it may be held), but only with an allocation that lowered ``F`` by
          one. So ``need`` falls by at most what ``F`` fell, and ``need > F`` still holds.
        - The next key is not cached now, and this step caches none before the admission: a
          decoder caches only blocks past its prompt's hashed ones (``_register`` takes it with
          every block up to its context cached), whose keys are its own (``("unique", id, j)``,
          ``generated_block_keys``); and a prefilling request (the tail) is there in a step
          that can admit only for its last chunk (a chunk short of the budget), so it was
          admitted after the last attempt (which admitted nothing), and that changed
          ``_order_changes``.
        - PEEK's protected set would not be rebuilt (``_protect_stale``; it is with preempted
          requests waiting), so the eviction hook sees the same set.

        The budget and ``max_num_seqs`` need no check: an attempt that cannot start admits
        nothing either. ``tests/test_skip_blocked.py`` compares the tables with the attempts
        made (``skip_blocked=False``) and with the reference engine."""
        if self._skip_groups:
            return self._groups_blocked()
        blocked = self._blocked
        if blocked is None:
            return False
        _, next_key, read_at, frees, told = blocked
        self._blocked_until = math.inf
        if not self._skip and not (self._skip_head and self._head_unmoved(told)):
            if self._head_until is None or self._dirty or (
                    self._lazy is not None and (self._lazy.raised or self._lazy.recheck)):
                return False
            until = self._head_until(now)
            if until is None:
                return False
            self._blocked_until = until
        pool = self.pool
        if read_at != self._order_changes or frees != pool.num_frees:
            return False
        if self._protect is not None and self._protect_stale():
            return False
        return next_key is NO_KEY or not pool.is_cached(next_key)

    def _groups_blocked(self) -> bool:
        """``_still_blocked`` for an order that serves its groups in turn and skips misfits
        (``skip_reads``): whether every group a read can serve now had its last attempt fail
        with nothing admitted, under the same conditions as a blocked head, for each request
        that attempt tried. With the membership unchanged (``_order_changes``: every arrival,
        admission and preemption) a read serves the same group's same requests (the groups are
        fixed, each in arrival order, the cap the same) and the same preempted front, and each
        of them still does not fit: no block freed since, and its next key not cached
        (``_still_blocked``'s proof, which holds request by request, since an attempt that
        admits nothing changes no block). So the attempt admits nothing, and the read's only
        effect is to move whose turn it is (``skip_reads``). Needs a waiting request in the
        order (else no read, and the preempted front alone has no record); a valid record
        says no request arrived since its read, so every waiting request is in the order."""
        if not self._waiting:
            return False
        records = self._group_blocked
        changes, frees = self._order_changes, self.pool.num_frees
        is_cached = self.pool.is_cached
        groups = self._inc.turn_groups()
        if not groups:  # the waiting requests join the order at its next read
            return False
        for g in groups:
            record = records.get(g)
            if record is None or record[1] != changes or record[2] != frees:
                return False
            for key in record[0]:
                if key is not NO_KEY and is_cached(key):
                    return False
        return True

    def _head_unmoved(self, told: int) -> bool:
        """Whether the first item of an order that declares what moves it (``head_moved_by``) is
        the one of its last read, where ``told`` was the prefill-token counter.

        With lazy hits a ``"snapshots"`` head is declared only by an order whose first item a
        silent fall of a stale request's hit cannot move (``falls_behind``: ``LazyKeyOrder``,
        ``KeptOrder`` at or below 128, which resolves every request at each read so none is
        stale after it). Every other change of a hit since the last read is pending: a request
        with a snapshot is in ``_dirty`` when its hit changes, a stale one in ``raised`` when
        its hit may rise, and a snapshot built from the journal is in ``recheck``; with none
        pending the order holds what its last read held."""
        moved_by = self._inc.head_moved_by
        lazy = self._lazy
        if lazy is None or moved_by != "snapshots":
            return self._moves_only_with_changes(moved_by, told)
        return (getattr(self._inc, "falls_behind", False) is True
                and not (self._dirty or lazy.raised or lazy.recheck)
                and (self._on_prefill_tokens is None or told == self.prefill_tokens))

    def _moves_only_with_changes(self, moved_by: str | None, told: int) -> bool:
        """Whether an order (or its first item) declared moved by ``moved_by`` is the same as
        at its last read, where ``told`` was the prefill-token counter: moved only by its
        membership (``"queue"``), or by its snapshots too (``"snapshots"``) where every re-key
        counts, the eager path, and by the counter where the policy is told it (HRRN's sort)."""
        if moved_by == "queue":
            return True
        return (moved_by == "snapshots" and self._lazy is None
                and (self._on_prefill_tokens is None or told == self.prefill_tokens))

    def _blocks_needed(self, due: list[_Live], step: int) -> int:
        """New blocks the due decoders take this step (each crossing a block boundary)."""
        bs = self.block_size
        need = 0
        for live in due:
            c = live.dec_c0 + step - live.dec_step
            need += -(-(c + 1) // bs) - len(live.blocks)
        return need

    def _fast_start(self, step: int, now: float, due: list[_Live]) -> tuple[float, list]:
        """A step with the decoders in aggregate (``due``: those with an event at it), up to its
        end: allocations, caching, admissions, its row; returns its end (s) and its batch of
        non-decoders. ``_fast_finish`` ends it (a fleet member yields in between)."""
        pool = self.pool
        bs = self.block_size
        running = self._running
        m = self._m
        ctx = self._ctx
        budget = self._budget - m
        num_waiting = len(self._waiting) + len(self._preempted)
        evictions0 = pool.num_evictions
        tail = running[-1] if len(running) > m else None
        remaining = m
        if tail is not None:
            remaining += tail.req.prompt_len + tail.generated - tail.computed
        # Engine._schedule: the order at the step's start, where a waiting request could be
        # admitted - unless the attempt is known to fail at the last one's head (_still_blocked).
        can_admit = remaining < self._budget and len(running) < self._max_seqs
        skip = can_admit and (self._blocked is not None or self._skip_groups) and self._still_blocked(now)
        read = can_admit and bool(self._waiting) and not skip
        ordered = self._order_waiting(now) if read else []
        if skip and self._skip_groups:
            self._inc.skip_reads(1)  # the read skipped (_groups_blocked needs a waiting request)
        # As of the order (the eager path syncs changed snapshots there): a key change by this
        # step's caching below re-keys a snapshot at the next order, so it must count as a change.
        read_at = self._order_changes
        told = self.prefill_tokens  # told to the policy before the order (on_prefill_tokens)
        if self._on_admitted is not None and can_admit:
            for live in self._preempted:
                live.snap = None
                self._step_snaps[live] = self._snapshot(live)
        # Running requests in admission order: the due decoders' block growth and caching ...
        for live in due:
            c = live.dec_c0 + step - live.dec_step
            end = c + 1
            need = -(-end // bs) - len(live.blocks)
            if need > 0:
                live.blocks.extend(pool.allocate(need))  # _blocks_needed checked they are free
            if end // bs > live.num_cached_blocks < len(live.keys):
                self._cache_blocks(live, end)
        # ... then the chunk of the last running request, if it prefills (it can preempt only
        # itself: vLLM preempts from the end of the running list).
        batch: list[tuple[_Live, int, int]] = []
        preempted = 0
        if tail is not None and budget > 0:
            computed = tail.computed
            n = tail.req.prompt_len + tail.generated - computed
            if n > budget:
                n = budget
            end = computed + n
            need = -(-end // bs) - len(tail.blocks)
            if need > 0 and need > pool.num_free:
                victim = running.pop()
                if victim is not tail:
                    raise EngineInvariantError(f"step {step}: the prefilling request is not the last running one")
                self._preempt(victim)
                preempted = 1
            else:
                if need > 0:
                    tail.blocks.extend(pool.allocate(need))
                if end // bs > tail.num_cached_blocks < len(tail.keys):
                    self._cache_blocks(tail, end)
                batch.append((tail, n, computed))
                budget -= n
        if skip:
            self.skipped_attempts += 1
        elif not preempted and (self._waiting or self._preempted):
            before = len(running)
            self._admit_waiting(now, budget, batch, ordered)
            if self._lazy is not None:
                self._lazy.end_step()
            misfit = self.misfit
            self._blocked = None if misfit is None else (misfit[0], misfit[1], read_at, pool.num_frees, told)
            if read and self.misfits is not None and len(running) == before:
                # an attempt at the group this step's read served that admitted nothing
                self._group_blocked[self._inc.served] = (self.misfits, read_at, pool.num_frees)
        # ctx + m / 2 = the reference's sum of (ctx_i + 1/2) over the decoders, exactly (module docstring)
        new_tokens, pair_sum, decodes, decode_ctx = _batch_sums(batch, m, ctx + 0.5 * m, m, ctx)
        self.prefill_tokens += new_tokens - decodes
        size = m + len(batch)
        duration = self.profile.step_time_colocated(new_tokens, pair_sum, size, decodes, decode_ctx)
        a = self._append
        a[0](now)
        a[1](duration)
        a[2](new_tokens)
        a[3](decodes)
        a[4](size)
        a[5](num_waiting)
        a[6](len(running))
        a[7](pool.num_used)
        a[8](pool.num_cached)
        a[9](pool.num_evictions - evictions0)
        a[10](preempted)
        return now + duration, batch

    def _fast_finish(self, step: int, now: float, end_s: float, due: list[_Live], batch: list) -> float:
        """The end of the step ``_fast_start`` began at ``now`` (s): every decoder samples a token,
        the due ones and the batch's may finish, at ``end_s`` (s, returned)."""
        ctx = self._ctx
        # Step end: every decoder samples a token; the due ones may finish (in admission order,
        # before the batch's other requests, as Engine._finish_batch frees them).
        finished = 0
        for live in due:
            c = live.dec_c0 + step - live.dec_step
            g = live.dec_g0 + step - live.dec_step + 1
            if g >= live.out_len:
                live.computed = c + 1
                live.generated = g
                live.last_token_s = end_s
                self._close_segment(live, step)
                self._m -= 1
                ctx -= c  # the others' contexts grow by one below
                self._request_finished(live, end_s, step)
                self.pool.free(reversed(live.blocks))
                live.blocks = []
                finished += 1
            else:
                self._push_event(live, step + 1)
        self._ctx = ctx + self._m
        if batch:
            finished += self._finish_batch(batch, step, now, end_s)
        if finished:
            self._running = [r for r in self._running if r.finish_s is None]
            if self.progress is not None:
                self.progress(finished)
        for live, _, _ in batch:
            if live.finish_s is None:
                self._register(live, step + 1, end_s)
        return end_s

    def _reference_start(self, step: int, now: float) -> tuple[float, list] | None:
        """A step by ``Engine._schedule`` with every decoder written back, up to its end; returns
        its end (s) and batch, or None when it scheduled nothing (every running request
        preempted by its own growth). ``_reference_finish`` ends it."""
        self._write_back(step, now)
        self.reference_steps += 1
        self._blocked = None  # Engine._schedule tries as the reference does
        self._group_blocked.clear()
        num_waiting = len(self._waiting) + len(self._preempted)
        pool = self.pool
        evictions0 = pool.num_evictions
        batch, preempted = self._schedule(now)
        if not batch:
            if not preempted:
                raise EngineInvariantError(
                    f"step {step} at {now:.6f} s scheduled nothing although {num_waiting} requests "
                    f"wait and {len(self._running)} run")
            self._carried_preemptions += preempted
            return None
        if self._carried_preemptions:
            preempted += self._carried_preemptions
            self._carried_preemptions = 0
        new_tokens, pair_sum, decodes, decode_ctx = _batch_sums(batch, 0, 0.0, 0, 0)
        self.prefill_tokens += new_tokens - decodes
        duration = self.profile.step_time_colocated(new_tokens, pair_sum, len(batch), decodes, decode_ctx)
        for col, value in zip(self._cols, (now, duration, new_tokens, decodes, len(batch), num_waiting,
                                           len(self._running), pool.num_used, pool.num_cached,
                                           pool.num_evictions - evictions0, preempted)):
            col.append(value)
        return now + duration, batch

    def _reference_finish(self, step: int, now: float, end_s: float, batch: list) -> float:
        """The end of the step ``_reference_start`` began at ``now`` (s): completions at ``end_s``
        (s, returned), and the running decoders kept in aggregate from the next step."""
        finished = self._finish_batch(batch, step, now, end_s)
        if finished:
            self._running = [r for r in self._running if r.finish_s is None]
            if self.progress is not None:
                self.progress(finished)
        if len(self._running) < self._budget:  # else decoders beyond the budget wait: keep all explicit
            for live in self._running:
                self._register(live, step + 1, end_s)
        return end_s

    # -- decoders in aggregate -------------------------------------------------------------------
    def _register(self, live: _Live, step: int, last_end: float) -> None:
        """Keep ``live`` in aggregate from ``step`` on if it decodes: all its tokens but the one
        sampled at ``last_end`` (the previous step's end) computed, its blocks as the events
        predict."""
        if live.dec_seq is not None or live.generated < 1 or live.last_token_s != last_end:
            return
        c = live.computed
        if live.req.prompt_len + live.generated - c != 1:
            return
        bs = self.block_size
        if len(live.blocks) != -(-c // bs) or live.num_cached_blocks != min(c // bs, len(live.keys)):
            return
        self._seq += 1
        live.dec_seq = self._seq
        live.dec_step = step
        live.dec_c0 = c
        live.dec_g0 = live.generated
        self._m += 1
        self._ctx += c
        self._push_event(live, step)

    def _push_event(self, live: _Live, step: int) -> None:
        """Queue the decoder's first event at or after ``step`` (new block, full block, last token)."""
        bs = self.block_size
        c = live.dec_c0 + step - live.dec_step
        g = live.dec_g0 + step - live.dec_step
        k = step + min((-c) % bs, live.out_len - g - 1)
        if live.num_cached_blocks < len(live.keys):
            k = min(k, step + (-c - 1) % bs)
        heapq.heappush(self._events, (k, live.dec_seq, live))

    def _close_segment(self, live: _Live, last_step: int) -> None:
        """Record the decoder's gaps of steps ``dec_step .. last_step`` and leave the aggregate."""
        if last_step >= live.dec_step:
            rows, first, last = self._sg
            rows.append(live.index)
            first.append(live.dec_step)
            last.append(last_step)
        live.dec_seq = None

    def _write_back(self, step: int, now: float) -> None:
        """Give every decoder its explicit state at the start of ``step`` (at ``now``, s)."""
        if not self._m:
            return
        for live in self._running:
            if live.dec_seq is None:
                continue
            k = step - live.dec_step
            live.computed = live.dec_c0 + k
            live.generated = live.dec_g0 + k
            if k > 0:
                live.last_token_s = now  # the end of step - 1, when it sampled its last token
            self._close_segment(live, step - 1)
        self._events.clear()
        self._m = 0
        self._ctx = 0

    def _record_gap(self, live: _Live, step: int, gap_s: float) -> None:
        """A gap of a request not kept in aggregate, with its step (``_gap_table`` orders them)."""
        rows, steps, vals = self._xg
        rows.append(live.index)
        steps.append(step)
        vals.append(gap_s)

    # -- result tables ---------------------------------------------------------------------------
    def _step_table(self) -> Columns:
        import numpy as np

        cols = self._cols
        data = {"step": np.arange(len(cols[0]), dtype=np.int64)}
        for name, col in zip(STEP_COLUMNS[1:], cols):
            data[name] = np.frombuffer(col, dtype=np.float64 if col.typecode == "d" else np.int64)
        return Columns(data)

    def _gap_columns(self) -> Columns:
        import numpy as np

        starts = np.frombuffer(self._cols[0], dtype=np.float64)
        ends = starts + np.frombuffer(self._cols[1], dtype=np.float64)  # the loop's now + duration
        gap_at = np.full_like(ends, np.nan)  # a token at the end of step j after one at j - 1's
        np.subtract(ends[1:], ends[:-1], out=gap_at[1:])
        srow, sfirst, slast = (np.asarray(x, dtype=np.int64) for x in self._sg)
        xrow, xstep, xval = self._xg
        # Pieces (segments, then explicit rows) in (request row, first step) order; each piece
        # is a run of consecutive steps.
        prow = np.concatenate([srow, np.asarray(xrow, dtype=np.int64)])
        pfirst = np.concatenate([sfirst, np.asarray(xstep, dtype=np.int64)])
        plen = np.concatenate([slast - sfirst + 1, np.ones(len(xrow), dtype=np.int64)])
        order = np.lexsort((pfirst, prow))
        prow, pfirst, plen = prow[order], pfirst[order], plen[order]
        at = np.cumsum(plen) - plen  # first output row of each piece
        steps = np.arange(int(plen.sum()), dtype=np.int64) + np.repeat(pfirst - at, plen)
        vals = gap_at[steps]
        explicit = order >= len(srow)
        vals[at[explicit]] = np.asarray(xval, dtype=np.float64)[order[explicit] - len(srow)]
        return Columns({"request_row": np.repeat(prow, plen), "itl_s": vals})
