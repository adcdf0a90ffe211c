"""Lazy prefix hits for the simulator's fast path: snapshots rebuilt when read, not when a block changes.

Under deep overload thousands of waiting requests can share a prefix block (a system prompt, a
long conversation); each time that block is cached or evicted every one of them gets a new
prefix hit ``h``. The eager fast path rebuilt all their snapshots at the next step and fed each
to the policy's incremental order (``add``), so a step cost O(queue) although it admits one or
two requests (measured: 261 snapshot rebuilds per request on the conversation trace tiled 10x,
3 at 1x).

With an incremental order that offers ``set_resolver(fn)`` and ``stale(request_ids)``
(``fairsim.policies.incremental``: FCFS's arrival order, Fairway's lanes) the engine instead:

- at the start of each ordering step calls ``stale(ids)`` with the waiting requests whose
  snapshot was invalidated since the last one (the order must then treat their stored snapshot
  as out of date: an upper bound of their score, not their score), and rebuilds none;
- gives the order ``resolve(q)``: the snapshot of ``q``'s request *as of the start of the current
  step* (policy contract rule 1), the same object for every call in a step. The order calls it
  for every request it yields or scores exactly. Reads happen lazily during the admission loop,
  after running chunks and earlier admissions changed the cache, so the hit is counted against
  the cache as it was at the step's start: a journal keeps, for each key whose hittability
  changed since then, whether it was hittable at the start (``BlockPool.journal``: the pool records
  exactly those changes, for every key).

A snapshot built from the journal is as of the step's start but may be out of date for the next
step (a key changed after the start); it is dropped at the next step's start (``recheck``).

The direction of a change is kept (``stale(ids, raised)``): a hit falls only when a key stops
being hittable and rises only when one becomes hittable, so a stale request whose hit cannot
have risen since the order last saw its snapshot keeps that snapshot's ``h / c`` as an upper
bound (Fairway's lane leaves it in place); ``raised`` names the others (which ones: next
paragraph but one). A request handed over as raised is ``bounded`` (keyed by its largest
possible hit) until it is next resolved, so a block shared by thousands of waiting requests
that is cached and evicted again and again names each of them once, not once per change
(``tests/test_lazy_direction.py`` checks the claim inside engine runs). Journal-built snapshots count as raised: a key may have become hittable between
the step's start and the read.

Of a stale request's watched keys only one can still raise its hit above what the order last
saw: the ``next_key`` (``keys[h]`` for the hit ``h`` of its last snapshot), because a hit is a
run of leading cached keys and cannot pass ``h`` while that key is missing. So a stale request
is ``raised`` only when its next key is cached (a key inside its old hit, evicted and cached
again, cannot lift it past the order's key), and a key's change drops from that key's watchers
the stale requests it can no longer concern (those for which it is not the next key, and every
``bounded`` one, whichever key changed); they are watched again from their next snapshot
(``_Live.partial``, ``Engine._rewatch``). Under overload this keeps a key change from visiting
the thousands of stale requests that share the block (measured: 33 M watcher visits on the
conversation trace tiled 10x, 0.24 M after).

The decisions are those of the eager path; ``tests/test_fast_order.py`` compares every policy's
tables with the reference (``order()`` over fresh snapshots each step), and
``tests/test_engine_watchers.py`` checks the watcher map at every step.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from fairsim.compiled import compiled_twin
from fairsim.types import QueuedRequest

#: ``_Live.next_key`` of a request whose hit cannot rise (equal to no block key).
NO_KEY = object()

#: The optional extension (``fairsim/sim/_watch_c.pyx``, built at install by ``setup.py``):
#: the watcher-map updates compiled, loaded by name as the compiled pool is.
COMPILED_MODULE = "fairsim.sim._watch_c"


def watching(bucket: Any) -> dict[Any, Any]:
    """A key's watchers (a value of the engine's watcher map ``Engine._watchers``) as
    ``{live: live}``, in the order they started watching.

    Most watched keys have one watcher (a Qwen-Bailian trace at 16-token blocks: 443,827 of
    446,915 watches), so the map holds a lone watcher itself instead of a dict per key: two
    watchers or more are a dict, which stays one until the key's last watcher leaves. Every
    reader of the map takes a bucket through this (``fairsim/sim/_watch_c.pyx`` follows the
    same rule)."""
    return bucket if type(bucket) is dict else {bucket: bucket}


def compiled_watch_class() -> type | None:
    """``fairsim.sim._watch_c.CompiledWatch`` (the compiled twin of ``Engine._rewatch``,
    ``_drop``, ``_unwatch`` and ``LazyHits.key_changed``: same map, same fields, same order of
    invalidations) where the extension imports and ``FAIRSIM_PURE_PYTHON=1`` is not set, else
    None: the engine runs the pure-Python methods (the reference)."""
    module = compiled_twin(COMPILED_MODULE)
    return None if module is None else module.CompiledWatch


class LazyHits:
    """The engine's side of lazy snapshots (module docstring) for one run.

    Args:
        engine: The ``fairsim.sim.engine.Engine``; its fast path must have ``set_resolver``.
    """

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.pool = engine.pool
        self.journal: dict[Hashable, bool] = {}  # key -> hittable at the start of this step
        # The pool writes the journal itself (BlockPool.journal): no Python call per changed key.
        self.pool.journal = self.journal
        self.recheck: list[Any] = []  # requests with a journal-built snapshot this step
        self.resolved: dict[Any, QueuedRequest] = {}  # live -> this step's snapshot
        # live -> live: waiting requests whose hit may have risen since the last ordering
        # step (one with a snapshot, a key of it became hittable; a stale one, its next key
        # did); for the others it can only have fallen.
        self.raised: dict[Any, Any] = {}
        # The requests handed over as raised and not resolved since: the order keys
        # them by their largest possible hit already, so a key's next rise need not name them.
        self.bounded: set[Any] = set()
        self._watchers = engine._watchers
        # The engine's callback, with the change's direction kept (lazy path only); compiled
        # where the engine runs the compiled watcher map (``compiled_watch_class``).
        compiled = getattr(engine, "_watch_c", None)
        if compiled is None:
            self.pool.on_key_change = self.key_changed
            engine._inc.set_resolver(self.resolve)
        else:
            compiled.attach_lazy(self)
            self.pool.on_key_change = compiled.key_changed
            engine._inc.set_resolver(compiled.resolve)
            self.start_step = compiled.start_step

    def key_changed(self, key: Hashable) -> None:
        """A key some waiting request may hit changed hittability (the pool calls this after the
        change; ``BlockPool.watched`` filters the other keys out). Its watchers that had a
        snapshot are invalidated (``engine._dirty``); the others are already stale in the order
        or not yet in it. If the key became hittable, the watchers with a snapshot are also
        noted in ``raised`` (their hit may rise, so the order must bound it anew), and so are
        the stale ones not already ``bounded`` for which it is the ``next_key``: the key right
        after the hit of the last snapshot built (which the order has seen: it reads snapshots
        only through ``resolve``). A stale watcher for which this key is another one (inside
        that hit, evicted and cached again) cannot have a hit above that snapshot's until its
        next key is cached (the hit is a run of leading keys), so the order's key, made with at
        least that snapshot's ``h / c``, still bounds it: under overload that was nine raises
        in ten, each re-reading a request.

        The stale watchers this change cannot concern (this key is not their next key, or they
        are ``bounded``) are dropped from the key's watchers and flagged ``partial``: the key
        can matter to them again only after their next snapshot, which watches ``keys[:h + 1]``
        anew (``Engine._rewatch``). So each such entry is visited once, not at every change of
        a block thousands of waiting requests share."""
        watchers = self._watchers
        bucket = watching(watchers[key])  # (a lone watcher: a dict of one, dropped below if it empties)
        dirty = self.engine._dirty
        raised, bounded = self.raised, self.bounded
        drop = []
        if self.pool.is_cached(key):
            for k, live in bucket.items():
                if live.snap is not None:
                    live.snap = None
                    dirty[k] = live
                    raised[k] = live
                elif live.next_key == key and k not in bounded:
                    raised[k] = live
                else:
                    drop.append(k)
        else:
            for k, live in bucket.items():
                if live.snap is not None:
                    live.snap = None
                    dirty[k] = live
                elif live.next_key != key or k in bounded:
                    drop.append(k)
        if drop:
            # Stale watchers this key can no longer concern until their next snapshot (which
            # watches their keys again: ``Engine._rewatch``): drop them here, once, instead of
            # visiting them at every change of a key thousands of waiting requests share.
            for k in drop:
                bucket.pop(k).partial = True
            if not bucket:
                del watchers[key]

    def start_step(self) -> None:
        """Start of an ordering step: hand the invalidated waiting requests to the order as stale
        (``stale(ids, raised)``: ``raised`` those whose hit may have risen), drop journal-built
        snapshots, and start a new journal."""
        e = self.engine
        dirty = e._dirty
        raised = self.raised
        for live in self.recheck:
            # As of the last step's start, not of when it was read: a key may have become
            # hittable in between, unnamed if the request was bounded then.
            live.snap = None
            dirty[live] = raised[live] = live
        self.recheck = []
        # A new step before the order hears of the changes: it may read snapshots at once.
        self.journal = self.pool.journal = {}
        self.resolved = {}
        if dirty or raised:
            held = e._in_inc
            up = [key for key in raised if key in held]
            self.bounded.update(up)
            e._dirty = {}
            self.raised = {}
            e._inc.stale([live.req.request_id for key, live in dirty.items() if key in held],
                         [raised[key].req.request_id for key in up])

    def end_step(self) -> None:
        """The step's admission is over: no read follows before the next ``start_step``, which
        starts a new journal before any, so stop recording changes until then (the chunk
        steps in between cache and evict thousands of keys no read could look up)."""
        self.pool.journal = None

    def resolve(self, q: QueuedRequest) -> QueuedRequest:
        """The snapshot of ``q``'s request as of the start of the current step (see the module)."""
        live = q.handle
        key = live
        snap = self.resolved.get(key)
        if snap is not None:
            return snap
        snap = live.snap
        if snap is None:
            self.bounded.discard(key)
            journal = self.journal
            cap = live.max_hit_blocks
            n = self.pool.count_prefix(live.keys, cap)  # the hit now
            touched = False
            # The hit at the step's start is the hit now unless the journal names one of the keys
            # that decide it (the hit's and the next one): then walk them, each as it was.
            if journal and not journal.keys().isdisjoint(live.keys[: n + 1 if n < cap else n]):
                n = 0
                is_cached = self.pool.is_cached
                for k in live.keys[:cap]:
                    present = journal.get(k)
                    if present is None:
                        present = is_cached(k)
                    else:
                        touched = True
                    if not present:
                        break
                    n += 1
            e = self.engine
            # Computed tokens 0: at the step's start the request was plainly waiting (preempted
            # ones are not in the order); it may have been admitted since (on_admitted reads).
            snap = live.snap = e._make_snapshot(live, n * e.block_size, 0)
            if touched:
                self.recheck.append(live)
        self.resolved[key] = snap
        return snap
