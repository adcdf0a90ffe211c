"""Fairway-deadline: Fairway's order until a request is due for a deadline set once from the backlog."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from fairsim.policies.base import arrival_key, param_text
from fairsim.policies.deadline_clock import NS, now_ns, to_ns
from fairsim.policies.fairway import Fairway, charge_merge
from fairsim.types import QueuedRequest

HORIZONS = ("max", "own", "now", "now-slack", "growth")
EXTENDING = ("now", "now-slack", "growth")  # horizons re-read at every step
LOOKAHEADS = ("none", "own", "queue")
ESTIMATES = ("cold", "dedup")
PATIENCES = ("slo", "deadline")
#: Largest ``slack`` (our own bound): with an SLO up to ``fairway.SLO_MAX`` x ``T_idle``, slack x
#: SLO x 1e9 (the deadlines are kept in nanoseconds, past 64 bits as Python ints) stays finite;
#: 1e300 overflowed to infinity.
SLACK_MAX = 1e100


class FairwayDeadline(Fairway):
    """Fairway whose tail protection is a deadline fixed at a request's first sight.

    Ordering contract (docs/POLICIES-more.md "Fairway-deadline"; times in seconds, the deadline
    arithmetic in integer nanoseconds, ``to_ns(x) = round(x x 1e9)``, so its sums are exact):

    - **Work estimate**, taken once, at the first step at which ``q`` is waiting (like its
      deadline): ``w_q = to_ns(work(q))``, ``work(q) = T_idle(L_q) x c_q / L_q``: ``q``'s uncached
      tokens then at the cold per-token time of a prompt of its length (``T_idle`` from the cost
      model). Running requests' remaining chunks are not visible to a policy and not counted.
      (Formerly the due test and ``W`` re-read every waiting request's current ``work``;
      a step with a new request then had to read every hit in the queue.)
    - **FCFS estimates**, at the first step at which ``r`` is waiting: ``W_r`` = the sum of
      ``w`` over the waiting requests ahead of ``r`` in arrival order (``arrival_time``, then
      ``request_id``), ``E_r = W_r + w_r``; ``H_r`` = the largest ``E`` of the requests first
      seen before ``r`` (a running maximum, ``horizon_ns``; ``horizon_s`` in seconds).
    - **Deadline**, fixed then, never recomputed (a request missing from the waiting queue at a
      call and waiting again at a later one gets a new one; the policy sees only the queue of
      each call): ``D(r) = to_ns(arrival(r)) + max(to_ns(SLO(r)), round(slack x
      W_r) + w_r, H_r)`` (``deadline_ns``; ``deadline`` in seconds),
      ``SLO(r) = max(slo_floor, slo_multiplier x T_idle(L_r))`` (the paper's patience), ``slack
      = 1 + fair_weight / fast_weight`` (1.25 with the paper's weights). ``horizon="own"``
      (ablation) drops ``H_r``. ``horizon="now"`` (ablation) re-reads ``H`` at every
      step: ``D_t(r) = arrival(r) + max(SLO(r), slack x W_r + w_r, H_t)``, ``H_t`` the running
      maximum as of step ``t`` (first sights of this step included), so the deadlines of waiting
      requests extend while a backlog grows (never shrink: ``H`` is monotone); a due request
      stays due. No fast path for this ablation (``order()`` runs every step).
      ``horizon="now-slack"`` (ablation): as ``"now"`` with the slack on ``H`` too,
      ``D_t(r) = arrival(r) + max(SLO(r), slack x W_r + w_r, slack x H_t)``. ``horizon="growth"``
      (ablation): ``D_t(r) = arrival(r) + max(SLO(r), E_r + slack x (H_t - E_r))`` -- the slack
      only on how much the worst FCFS estimate grew after ``r``'s (none for the request that sets
      it). Both: deadlines only extend, a due request stays due, no fast path.
    - **Estimate** (``estimate``): ``"cold"`` (default) -- ``W`` and ``E`` sum ``w``;
      ``"dedup"`` (ablation) -- ``fcfs_works`` at the first sight: a shared uncached prefix of
      two waiting requests is charged once, to the earlier (what the prefix cache does when FCFS
      serves them in that order), each request's charge taken once. The due test always sums
      ``w``.
    - **Due** at a step with clock ``now``, ``t = floor(now x 1e9)`` ns, the waiting requests in
      deadline order ``(D, arrival, request_id)``: ``lookahead="queue"`` (default) -- the
      ``k``-th is due iff ``t +`` the ``w`` of the first ``k`` ``>= D``; ``"own"`` -- iff ``t +
      w >= D``; ``"none"`` -- iff ``t >= D``. A due request stays due until it is admitted
      (``urgent``).
    - **Order.** The requests in deadline order up to the last due one; then the others in
      Fairway's lane merge (``fast_first``: the Fast ledger starts at 0 instead of
      ``fast_weight x c(front)``, as in ``fairway-plus``).

    Cross-step bound (proof in docs/POLICIES-more.md; property over engine runs in
    tests/test_fairway_deadline.py): from the first step at which ``r`` is due until its
    admission, the engine admits ahead of ``r`` only requests with a smaller ``(D, arrival,
    request_id)`` (plus, in the live hook, up to one step's budget of others, when vLLM skips a
    request it cannot schedule). With ``lookahead="none"`` these were all waiting at that step.

    Fast path: ``incremental_order()`` (``fairsim/policies/deadline_fast.py``) keeps the
    deadline order across steps in blocks under a segment tree, so a step reads only the blocks
    with a due request; it yields ``order()``'s sequence exactly (``tests/test_fast_order.py``,
    ``tests/test_deadline_fast.py``). ``order()`` stays the reference, ``O(n log n)``.

    Args:
        idle_prefill_time: ``T_idle(L)`` in seconds (``Profile.idle_prefill_time``).
        horizon: ``"max"`` (default: the deadline is at least the largest FCFS estimate seen
            before the request's first sight), ``"own"`` (only the request's own estimate) or
            ``"now"`` (at least the largest FCFS estimate seen so far, re-read every step),
            ``"now-slack"`` (at least ``slack x`` that) or ``"growth"`` (see above).
        fast_first: Do not pre-charge the Fast lane with its front in the merge (default true).
        slack: Multiplier on the FCFS wait estimate ``W`` (>= 1; default ``1 + fair_weight /
            fast_weight``).
        lookahead: ``"queue"`` (default), ``"own"`` or ``"none"``: when a request is due.
        estimate: ``"cold"`` (default) or ``"dedup"``: the FCFS estimates ``W``, ``E``, ``H``.
        patience: ``"slo"`` (default, the paper's Fast score ``h / c + wait / SLO``) or
            ``"deadline"`` (ablation: ``h / c + wait / (D(r) - arrival(r))``).
        **fairway: The ``Fairway`` parameters (``fast_weight``, ``fair_weight``,
            ``slo_multiplier``, ``slo_floor``, ``wait_mode``, ``fair_lane``).

    Raises:
        ValueError: As ``Fairway``; an unknown ``horizon``, ``lookahead``, ``estimate`` or
            ``patience``; a non-bool ``fast_first``; a ``slack`` that is not a finite number >= 1.
    """

    name = "fairway-deadline"
    # fairsim tune: Fairway's three parameters; the others are ablation switches.
    search_space = Fairway.search_space

    def __init__(
        self,
        idle_prefill_time: Callable[[int], float],
        *,
        horizon: str = "max",
        fast_first: bool = True,
        slack: float | None = None,
        lookahead: str = "queue",
        estimate: str = "cold",
        patience: str = "slo",
        **fairway: object,
    ) -> None:
        super().__init__(idle_prefill_time, **fairway)  # type: ignore[arg-type]
        if horizon not in HORIZONS:
            raise ValueError(f"Fairway-deadline horizon={param_text(horizon)}: need one of {', '.join(HORIZONS)}")
        if not isinstance(fast_first, bool):
            raise ValueError(f"Fairway-deadline fast_first={param_text(fast_first)}: need true or false")
        if lookahead not in LOOKAHEADS:
            raise ValueError(f"Fairway-deadline lookahead={param_text(lookahead)}: need one of {', '.join(LOOKAHEADS)}")
        if slack is not None and (isinstance(slack, bool) or not isinstance(slack, (int, float))
                                  or not 1 <= slack <= SLACK_MAX):
            raise ValueError(f"Fairway-deadline slack={param_text(slack)}: need a number from 1 to {SLACK_MAX:g} (beyond, "
                             f"slack x SLO in nanoseconds leaves the float range)")
        if estimate not in ESTIMATES:
            raise ValueError(f"Fairway-deadline estimate={param_text(estimate)}: need one of {', '.join(ESTIMATES)}")
        if patience not in PATIENCES:
            raise ValueError(f"Fairway-deadline patience={param_text(patience)}: need one of {', '.join(PATIENCES)}")
        self.estimate = estimate
        self.patience = patience
        self.horizon = horizon
        self.slack = 1.0 + self.fair_weight / self.fast_weight if slack is None else float(slack)
        self.lookahead = lookahead
        self.fast_first = fast_first
        # The deadline arithmetic is in integer nanoseconds (``ns``), so sums are exact in any
        # order and the fast path may keep them in blocks (fairsim/policies/deadline_fast.py).
        self.horizon_ns = 0  # H: running maximum of the FCFS estimates at first sights (ns)
        self.deadline_ns: dict[str, int] = {}  # request_id -> D(r) (ns), for waiting requests
        self.work_ns: dict[str, int] = {}  # request_id -> work at its first sight (ns)
        self.urgent: set[str] = set()  # waiting requests found urgent at some step (kept)
        self._est_ns: dict[str, int] = {}  # estimate="dedup": the FCFS-estimate work at first sight (ns)
        self._own: dict[str, int] = {}  # horizon="now": max(SLO, slack W + w) (ns), H left out
        self._est: dict[str, int] = {}  # horizon="growth": E = W + w at first sight (ns)
        self._rate: dict[int, float] = {}  # L -> T_idle(L) / L (s per token)
        self._shape: dict[str, tuple[float, int]] = {}  # request -> (arrival, prompt) at its deadline

    @property
    def deadline(self) -> dict[str, float]:
        """``D(r)`` in seconds of every waiting request with a deadline (a new dict)."""
        return {k: v / NS for k, v in self.deadline_ns.items()}

    @property
    def horizon_s(self) -> float:
        """``H`` in seconds."""
        return self.horizon_ns / NS

    def work(self, r: QueuedRequest) -> float:
        """``T_idle(L) x c / L``: seconds of cold prefill for ``r``'s uncached tokens."""
        rate = self._rate.get(r.prompt_len)
        if rate is None:
            rate = self._rate[r.prompt_len] = self.idle_prefill_time(r.prompt_len) / r.prompt_len
        return rate * r.uncached_len

    def _assign(self, waiting: Sequence[QueuedRequest]) -> None:
        """Fix ``D(r)`` and ``work_ns`` for requests seen for the first time; forget those that left."""
        deadline, shape = self.deadline_ns, self._shape
        # New requests, and (live hook: a streaming update) a request whose arrival or prompt
        # changed in place, which the hook feeds to the fast path as a new request too.
        new = [r for r in waiting if r.request_id not in deadline
               or shape.get(r.request_id, (r.arrival_time, r.prompt_len)) != (r.arrival_time, r.prompt_len)]
        if len(deadline) + len(new) > len(waiting):  # some left the queue (or changed): forget them
            keep = {r.request_id for r in waiting}
            self.deadline_ns = deadline = {k: v for k, v in deadline.items() if k in keep}
            self.work_ns = {k: v for k, v in self.work_ns.items() if k in keep}
            self.urgent &= keep
            self._shape = shape = {k: v for k, v in shape.items() if k in keep}
            if self._est_ns:
                self._est_ns = {k: v for k, v in self._est_ns.items() if k in keep}
            if self._own:
                self._own = {k: v for k, v in self._own.items() if k in keep}
                self._est = {k: v for k, v in self._est.items() if k in keep}
        if not new:
            return
        self.urgent -= {r.request_id for r in new}
        for r in new:
            shape[r.request_id] = (r.arrival_time, r.prompt_len)
        fresh = {r.request_id for r in new}
        fifo = sorted(waiting, key=arrival_key)
        work_ns = self.work_ns
        for r in new:
            work_ns[r.request_id] = to_ns(self.work(r))
        if self.estimate == "cold":
            est = work_ns
        else:
            est = self._est_ns
            for r, own in zip(fifo, self.fcfs_works(fifo)):
                if r.request_id in fresh:
                    est[r.request_id] = to_ns(own)
        ahead = 0  # FCFS estimate: estimated work of the requests ahead in arrival order (ns)
        slo, slack = self.slo, self.slack
        h = self.horizon_ns
        for r in fifo:
            rid = r.request_id
            own = est[rid]
            if rid in fresh:
                wait = round(slack * ahead) + own
                if self.horizon == "max" and h > wait:
                    wait = h
                floor = to_ns(slo(r.prompt_len))
                deadline[rid] = to_ns(r.arrival_time) + max(floor, wait)
                if self.horizon == "growth":
                    self._own[rid] = floor
                    self._est[rid] = ahead + own
                elif self.horizon in EXTENDING:
                    self._own[rid] = max(floor, wait)
                if ahead + own > h:
                    h = ahead + own
            ahead += own
        self.horizon_ns = h
        if self.horizon == "growth":  # D(r) = a + max(SLO, E + slack (H - E)), H with this step's sights
            for rid in fresh:
                e = self._est[rid]
                deadline[rid] = to_ns(shape[rid][0]) + max(self._own[rid], e + round(slack * (h - e)))

    def fcfs_works(self, fifo: Sequence[QueuedRequest]) -> list[float]:
        """Seconds of cold prefill of each request of ``fifo`` (arrival order) when served in that order.

        ``estimate="cold"``: ``work(q)`` each. ``estimate="dedup"``: a block of ``q``'s uncached
        part that an earlier request of ``fifo`` also has uncached (same leading ``block_keys``)
        is computed once, by the earlier one, so ``q`` is charged ``work`` of ``max(1, c - k x
        block_size)`` tokens, ``k`` the number of its leading uncached blocks already charged --
        what vLLM's prefix cache does when the two run in that order (the shared prefix is a hit
        for the second). Requests without ``block_keys`` are charged ``work(q)``.
        """
        if self.estimate == "cold":
            return [self.work(q) for q in fifo]
        seen: set = set()
        out = []
        for q in fifo:
            keys, bs = q.block_keys, q.block_size
            if not keys or bs <= 0:
                out.append(self.work(q))
                continue
            start = min(len(keys), (q.prompt_len - q.uncached_len) // bs)  # first uncached block
            k = 0
            for key in keys[start:]:
                if key not in seen:
                    break
                k += 1
            seen.update(keys[start:])
            rate = self._rate.get(q.prompt_len)
            if rate is None:
                rate = self._rate[q.prompt_len] = self.idle_prefill_time(q.prompt_len) / q.prompt_len
            out.append(rate * max(1, q.uncached_len - k * bs))
        return out

    def _extend(self, waiting: Sequence[QueuedRequest]) -> None:
        """``horizon="now"``: every waiting request's deadline at least ``arrival + H`` (current
        ``H``); ``"now-slack"``: at least ``arrival + slack x H``; ``"growth"``: see the class."""
        own, deadline, h = self._own, self.deadline_ns, self.horizon_ns
        if self.horizon == "growth":
            slack, est = self.slack, self._est
            for r in waiting:
                e = est[r.request_id]
                deadline[r.request_id] = to_ns(r.arrival_time) + max(own[r.request_id], e + round(slack * (h - e)))
            return
        if self.horizon == "now-slack":
            h = round(self.slack * h)
        for r in waiting:
            deadline[r.request_id] = to_ns(r.arrival_time) + max(own[r.request_id], h)

    def _fast_keys(self, waiting: Sequence[QueuedRequest], now: float) -> list[tuple[float, float, str]]:
        """Fast-lane keys; ``patience="deadline"``: the wait term is ``wait / (D(r) - arrival)``
        instead of ``wait / SLO(r)`` (the request's own deadline offset as its patience)."""
        if self.patience == "slo":
            return super()._fast_keys(waiting, now)
        deadline = self.deadline_ns
        return [(-(r.cached_len / max(r.uncached_len, 1)
                   + (now - r.arrival_time) / max(deadline[r.request_id] / NS - r.arrival_time, 1e-9)),
                 r.arrival_time, r.request_id) for r in waiting]

    def merge(self, waiting: Sequence[QueuedRequest], now: float) -> list[QueuedRequest]:
        """Fairway's lane merge of ``waiting`` (``fast_first``: the Fast ledger starts at 0)."""
        if not self.fast_first or not self.fair_lane or len(waiting) <= 1:
            return super().order(waiting, now)
        n = len(waiting)
        fast = sorted(range(n), key=self._fast_keys(waiting, now).__getitem__)
        fair = sorted(range(n), key=[arrival_key(r) for r in waiting].__getitem__)
        work = [r.uncached_len for r in waiting]
        fast_w, fair_w = self.fast_weight, self.fair_weight
        return charge_merge(waiting, fast, fair, work, fast_w, fair_w, 0.0, fair_w * work[fair[0]])

    def incremental_order(self):
        """Fast path (``fairsim.policies.deadline_fast.DeadlineOrder``, its bookkeeping compiled
        where built: ``deadline_order``), or ``None`` for a subclass
        that overrides a method it mirrors (``work``, ``fcfs_works``, ``_assign``, ``merge``) and for the
        ablations it does not mirror (extending horizons, ``estimate="dedup"``,
        ``patience="deadline"``). Fairway's own mirrored methods (``order``, ``_fast_keys``, ...:
        ``fairsim.policies.incremental.MIRRORED``) are checked by ``fast_path_of``, which the
        engine and the hook call."""
        cls = type(self)
        if self.horizon in EXTENDING or self.patience != "slo" or self.estimate != "cold":
            return None
        if any(getattr(cls, m) is not getattr(FairwayDeadline, m) for m in ("work", "fcfs_works", "_assign", "merge")):
            return None
        from fairsim.policies.deadline_fast import deadline_order
        return deadline_order(self)

    def order(self, waiting: Sequence[QueuedRequest], now: float) -> list[QueuedRequest]:
        """Urgent requests and those with earlier deadlines first (by deadline), then Fairway's merge."""
        if not waiting:
            self.deadline_ns, self.work_ns, self.urgent, self._own, self._est, self._est_ns = {}, {}, set(), {}, {}, {}
            return []
        self._assign(waiting)
        if self.horizon in EXTENDING:
            self._extend(waiting)
        deadline, urgent, work = self.deadline_ns, self.urgent, self.work_ns
        edf = sorted(waiting, key=lambda r: (deadline[r.request_id], r.arrival_time, r.request_id))
        cut = 0  # EDF prefix up to the last urgent request
        t = now_ns(now)
        finish = t
        mode = self.lookahead
        for k, r in enumerate(edf):
            rid = r.request_id
            if mode == "queue":
                finish += work[rid]
                due = finish >= deadline[rid]
            elif mode == "own":
                due = t + work[rid] >= deadline[rid]
            else:  # (an urgent request may follow one that is not due when a clock went back)
                due = t >= deadline[rid]
            if due or rid in urgent:
                urgent.add(rid)
                cut = k + 1
        if cut == 0:
            return self.merge(waiting, now)
        if cut == len(edf):
            return edf
        return edf[:cut] + self.merge(edf[cut:], now)
