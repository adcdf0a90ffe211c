# cython: language_level=3
from cpython.ref cimport PyObject
from cpython.dict cimport PyDict_SetDefault
"""``CompiledWatch``: the engine's watcher-map updates as a typed extension class.

The pure-Python methods are the reference: ``fairsim.sim.engine.Engine._rewatch``, ``_drop`` and
``_unwatch`` and ``_snapshot``, ``_make_snapshot`` and ``fairsim.sim.lazy_hits.LazyHits.key_changed``, ``resolve`` and
``start_step``. Each method here is one of them,
statement for statement: the same entries added to and dropped from the map (``key -> live``,
or ``key -> {live: live}`` from a key's second watcher on: ``lazy_hits.watching``) in the same
order, the same ``_Live`` fields set, the same requests put in the engine's ``_dirty`` and the
lazy path's ``raised`` in the same order. ``tests/test_watch_compiled.py``
compares the two on random operation sequences and engine runs (tables and map at every step).

Why compiled: under overload these run tens of thousands of times per trace (Fairway on the
conversation trace at its native rate: 19,668 re-watches, 49,681 key changes visiting 77,197
watcher entries, 13,446 drops), a quarter of the Python operations of a Fairway run, each a few
dict operations that the interpreter's dispatch dominates. Inside, the methods call each other
from C (``make_snapshot``'s ``_rewatch``; ``snapshot`` and ``resolve``'s ``_make_snapshot`` where
the engine's ``_make_snapshot`` is this object's) and reach ``_Live``'s slots in place
(``_get``/``_set``), not through Python calls and attribute lookups
(``tests/test_watch_direct.py``).
"""

#: The snapshot's fields in ``fairsim.types.QueuedRequest``'s order: ``make_snapshot`` builds it
#: as that tuple (``tuple.__new__``, what ``QueuedRequest._make`` does, without the Python
#: ``__new__`` frame) and reads a kept one by position (``snapshot_class`` must have them).
SNAPSHOT_FIELDS = ("request_id", "arrival_time", "prompt_len", "cached_len", "uncached_len",
                   "num_computed_tokens", "handle", "block_keys", "block_size", "client",
                   "arrival_prefill_tokens", "output_len")

from fairsim.errors import PolicyContractError  # (CheckedOrder's errors: the engine's class)

cdef extern from *:
    """
    /* tuple.__new__(cls, items) without the Python call: tuple's own tp_new on (items,), as
       the slot wrapper calls it (cls is checked to be a tuple subclass in __init__). */
    static PyObject* __fs_tuple_new(PyObject* cls, PyObject* items) {
        PyObject* args = PyTuple_Pack(1, items);
        PyObject* made;
        if (args == NULL) return NULL;
        made = PyTuple_Type.tp_new((PyTypeObject*)cls, args, NULL);
        Py_DECREF(args);
        return made;
    }
    """
    object _tuple_new "__fs_tuple_new" (object cls, object items)


# -- ``_Live``'s slots, read and written in place -----------------------------------------------
# The engine's ``_Live`` keeps its fields in ``__slots__``: a read through the attribute protocol
# (type lookup, member descriptor) costs some hundred instructions, a few hundred thousand times a
# run (``key_changed``, ``rewatch``, ``make_snapshot``). For an object of exactly that type, whose
# fields are plain object slots (checked once, ``_bind_live_type``), ``_get``/``_set`` read and
# write the slot where ``getattr``/``setattr`` would (the member descriptor's offset): the same
# value, the same reference counts; an unset slot, or any other object, goes through
# ``getattr``/``setattr`` (so an ``AttributeError`` is the protocol's own).
cdef extern from *:
    """
    #include "structmember.h"
    /* The offset of a writable object slot (a __slots__ entry) from its member descriptor, or -1. */
    static Py_ssize_t __fs_slot_offset(PyObject* descr) {
        PyMemberDef* m;
        if (Py_TYPE(descr) != &PyMemberDescr_Type) return -1;
        m = ((PyMemberDescrObject*)descr)->d_member;
        if (m->type != T_OBJECT_EX || (m->flags & READONLY)) return -1;
        return m->offset;
    }
    """
    Py_ssize_t _slot_offset "__fs_slot_offset" (object descr)

from fairsim._member_slots cimport slot_peek as _slot_peek, slot_put as _slot_put

cdef extern from *:
    """
    /* An empty dict with room for n entries (CPython's BUILD_MAP call), where the interpreter
       exports it; else an empty dict. Either is an empty dict: only its resizes differ. */
    #if PY_VERSION_HEX < 0x030D0000
    #define __fs_dict_presized(n) _PyDict_NewPresized(n)
    #else
    #define __fs_dict_presized(n) PyDict_New()
    #endif
    """
    dict _dict_presized "__fs_dict_presized" (Py_ssize_t n)


cdef enum:
    SNAP = 0
    NEXT_KEY = 1
    PARTIAL = 2
    WATCHED = 3
    KEYS = 4
    MAX_HIT = 5
    LAST_SNAP = 6
    RELEASED = 7
    PREFILL = 8
    REQ = 9
    CLIENT = 10
    COMPUTED = 11
    N_SLOTS = 12

#: The ``_Live`` fields read or written here, by the codes above.
LIVE_FIELDS = ("snap", "next_key", "partial", "watched", "keys", "max_hit_blocks", "last_snap",
               "released_s", "arrival_prefill", "req", "client", "computed")
cdef object _LIVE_TYPE = None  # the type whose slots ``_get``/``_set`` reach in place (None: none)
cdef Py_ssize_t _OFF[N_SLOTS]


def _bind_live_type(live_type):
    """Reach ``live_type``'s fields in place where each of ``LIVE_FIELDS`` is a writable object
    slot of it and its attribute protocol is ``object``'s; else (and for ``None``) nowhere.
    Returns whether it does."""
    global _LIVE_TYPE
    cdef Py_ssize_t offs[N_SLOTS]
    cdef Py_ssize_t f
    _LIVE_TYPE = None
    if live_type is None or not isinstance(live_type, type):
        return False
    if (live_type.__getattribute__ is not object.__getattribute__
            or live_type.__setattr__ is not object.__setattr__):
        return False
    for f in range(N_SLOTS):
        descr = getattr(live_type, LIVE_FIELDS[f], None)
        if descr is None:
            return False
        offs[f] = _slot_offset(descr)
        if offs[f] < 0:
            return False
    for f in range(N_SLOTS):
        _OFF[f] = offs[f]
    _LIVE_TYPE = live_type
    return True


cdef inline object _get(object o, int f):
    """``getattr(o, LIVE_FIELDS[f])``."""
    cdef PyObject* v
    if type(o) is _LIVE_TYPE:
        v = _slot_peek(o, _OFF[f])
        if v != NULL:
            return <object>v
    return getattr(o, LIVE_FIELDS[f])


cdef inline int _set(object o, int f, object v) except -1:
    """``setattr(o, LIVE_FIELDS[f], v)``."""
    if type(o) is _LIVE_TYPE:
        _slot_put(o, _OFF[f], v)
        return 0
    setattr(o, LIVE_FIELDS[f], v)
    return 0


cdef inline bint _names_any(dict journal, keys, Py_ssize_t m) except -1:
    """Whether ``journal`` holds one of ``keys[:m]`` (``not journal.keys().isdisjoint(keys[:m])``,
    without the slice)."""
    cdef Py_ssize_t i
    if m > len(keys):
        m = len(keys)
    for i in range(m):
        if keys[i] in journal:
            return True
    return False


cdef class CompiledWatch:
    """The watcher map ``watchers`` (the engine's ``_watchers``, shared, not copied: a key's lone
    watcher itself, or a dict of two or more, ``lazy_hits.watching``) and its updates for one
    engine. ``no_key``: ``fairsim.sim.lazy_hits.NO_KEY``. ``attach_lazy`` binds
    the lazy path: its ``raised``, ``bounded``, ``resolved``, ``journal`` and ``recheck`` and the
    engine's ``_dirty`` are held here too (no attribute lookup per ``key_changed`` or ``resolve``
    call). In the lazy path only ``start_step`` replaces them (``LazyHits.start_step`` is this
    class's once attached; ``Engine._fast_order`` replaces ``_dirty`` only without lazy hits), and
    it sets the attributes and these fields to the same new objects."""

    cdef dict watchers
    cdef dict waiting
    cdef object no_key
    cdef object engine
    cdef object lazy
    cdef object is_cached
    cdef object count_prefix
    cdef object snapshot_class
    cdef object block_size
    cdef bint hit_free
    cdef bint unwatched
    # 1: the engine's ``_make_snapshot`` is this object's ``make_snapshot``, so ``snapshot`` and
    # ``resolve`` run it from C; 0: they call the engine's; -1: not looked at yet (the engine
    # binds it after constructing this object: ``_snapshot_of``).
    cdef readonly int direct
    # The lazy path's per-step containers, the same objects as its attributes (attach_lazy)
    cdef dict dirty
    cdef dict raised
    cdef set bounded
    cdef dict resolved
    cdef object journal
    cdef list recheck

    def __init__(self, engine, no_key, snapshot_class):
        self.watchers = engine._watchers
        self.waiting = engine._waiting
        self.no_key = no_key
        self.engine = engine
        self.lazy = None
        self.is_cached = engine.pool.is_cached
        self.count_prefix = engine.pool.count_prefix
        if not (isinstance(snapshot_class, type) and issubclass(snapshot_class, tuple)
                and getattr(snapshot_class, "_fields", None) == SNAPSHOT_FIELDS):
            raise TypeError(f"snapshot_class must be a named tuple of {SNAPSHOT_FIELDS}, got {snapshot_class!r}")
        self.snapshot_class = snapshot_class
        self.block_size = engine.block_size
        self.hit_free = engine._hit_free
        self.unwatched = engine._unwatched
        self.direct = -1
        from fairsim.sim.engine import _Live  # (here: the engine module imports this one's loader)
        _bind_live_type(_Live)

    def attach_lazy(self, lazy):
        """Bind the lazy path (``fairsim.sim.lazy_hits.LazyHits``) for ``key_changed`` and
        ``resolve``."""
        self.lazy = lazy
        self.dirty = self.engine._dirty
        self.raised = lazy.raised
        self.bounded = lazy.bounded
        self.resolved = lazy.resolved
        self.journal = lazy.journal
        self.recheck = lazy.recheck

    cdef void _drop_range(self, object lid, object keys, Py_ssize_t start, Py_ssize_t stop) except *:
        cdef dict watchers = self.watchers
        cdef Py_ssize_t i
        cdef object bucket
        for i in range(start, stop):
            key = keys[i]
            bucket = watchers.get(key)
            if bucket is None:
                continue
            if type(bucket) is dict:
                if (<dict>bucket).pop(lid, None) is not None and not bucket:
                    del watchers[key]
            elif bucket is lid:
                del watchers[key]

    def rewatch(self, live, Py_ssize_t hit_blocks):
        """``Engine._rewatch``."""
        self._rewatch(live, hit_blocks)

    cdef int _rewatch(self, live, Py_ssize_t hit_blocks) except -1:
        """``rewatch``'s body, called from C by ``make_snapshot`` (no Python call per snapshot)."""
        cdef Py_ssize_t cap = _get(live, MAX_HIT)
        cdef Py_ssize_t w, old, i
        cdef dict watchers
        cdef object bucket
        keys = _get(live, KEYS)
        if hit_blocks < cap:
            w = hit_blocks + 1
            nk = keys[hit_blocks]
        else:
            w = cap
            nk = self.no_key
        _set(live, NEXT_KEY, nk)
        old = _get(live, WATCHED)
        if _get(live, PARTIAL):
            _set(live, PARTIAL, False)
            if old > w:
                self._drop_range(live, keys, w, old)
            _set(live, WATCHED, 0)
            old = 0
        if w == old:
            return 0
        lid = live
        if w > old:
            watchers = self.watchers
            for i in range(old, w):
                key = keys[i]
                # ``watchers.get(key)``, and ``watchers[key] = live`` where it was absent (a lone
                # watcher is the bucket: ``lazy_hits.watching``), in one lookup.
                bucket = <object>PyDict_SetDefault(watchers, key, live)
                if bucket is live:
                    continue
                if type(bucket) is dict:
                    (<dict>bucket)[lid] = live
                else:
                    watchers[key] = {bucket: bucket, lid: live}
        else:
            self._drop_range(lid, keys, w, old)
        _set(live, WATCHED, w)
        return 0

    def drop(self, live, keys):
        """``Engine._drop``: stop watching ``keys`` (a sequence) for ``live``."""
        self._drop_range(live, keys, 0, len(keys))

    def unwatch(self, live):
        """``Engine._unwatch``."""
        self._drop_range(live, _get(live, KEYS), 0, _get(live, WATCHED))
        _set(live, PARTIAL, False)
        _set(live, WATCHED, 0)
        _set(live, NEXT_KEY, self.no_key)

    def key_changed(self, key):
        """``LazyHits.key_changed`` (after ``attach_lazy``)."""
        cdef dict watchers = self.watchers
        cdef object held = watchers[key]
        cdef bint cached = self.is_cached(key)
        cdef list drop
        if type(held) is not dict:  # a lone watcher (``lazy_hits.watching``): no dict of one made
            if self._concerned(held, held, key, cached):
                return
            _set(held, PARTIAL, True)
            del watchers[key]
            return
        drop = [k for k, live in (<dict>held).items() if not self._concerned(k, live, key, cached)]
        if drop:
            for k in drop:
                _set((<dict>held).pop(k), PARTIAL, True)
            if not held:
                del watchers[key]

    cdef bint _concerned(self, object k, object live, object key, bint cached) except -1:
        """One watcher's part of ``key_changed``: a watcher with a snapshot is invalidated
        (``dirty``; ``raised`` too where the key became hittable), a stale one whose next key
        became hittable is raised unless ``bounded``; False where the key no longer concerns it
        (the caller drops it from the key's watchers, flagged ``partial``)."""
        if _get(live, SNAP) is not None:
            _set(live, SNAP, None)
            self.dirty[k] = live
            if cached:
                self.raised[k] = live
            return True
        if _get(live, NEXT_KEY) == key and k not in self.bounded:
            if cached:
                self.raised[k] = live
            return True
        return False

    def snapshot(self, live):
        """``Engine._snapshot``."""
        snap = _get(live, SNAP)
        if snap is None:
            h = 0 if self.hit_free else self.count_prefix(_get(live, KEYS), _get(live, MAX_HIT)) * self.block_size
            snap = self._snapshot_of(live, h, _get(live, COMPUTED))
            _set(live, SNAP, snap)
        return snap

    def start_step(self):
        """``LazyHits.start_step`` (after ``attach_lazy``)."""
        cdef object lazy = self.lazy
        cdef object e = self.engine
        cdef dict dirty = self.dirty
        cdef dict raised = self.raised
        cdef set held
        cdef set bounded
        cdef list up
        if self.recheck:  # (an empty one stays: it is the lazy path's ``recheck`` too)
            for live in self.recheck:
                _set(live, SNAP, None)
                dirty[live] = live
                raised[live] = live
            lazy.recheck = self.recheck = []
        # The new journal sized for as many entries as the last one took: a step writes a few
        # hundred keys at 16-token blocks, and a dict grown from empty resized five times a step.
        journal = _dict_presized(min(len(self.journal), 1 << 16) if type(self.journal) is dict else 0)
        lazy.journal = self.journal = journal
        lazy.pool.journal = journal
        lazy.resolved = self.resolved = {}
        if dirty or raised:
            held = e._in_inc
            bounded = self.bounded
            # ``raised``'s held requests, in its order, each bounded from now on (one pass: the
            # reference's list ``up`` of keys, then ``bounded.update(up)``, then their ids).
            up = []
            for key, live in raised.items():
                if key in held:
                    bounded.add(key)
                    up.append(_get(live, REQ).request_id)
            e._dirty = self.dirty = {}
            lazy.raised = self.raised = {}
            e._inc.stale([_get(live, REQ).request_id for key, live in dirty.items() if key in held], up)

    def checked(self, snaps, Py_ssize_t n):
        """``Engine._checked(snaps, n)``: the same items, checks and errors (``CheckedOrder``)."""
        return CheckedOrder(self.engine, snaps, n)

    def make_snapshot(self, live, h, computed):
        """``Engine._make_snapshot`` (``snapshot_class``: ``fairsim.types.QueuedRequest``)."""
        return self._make_snapshot(live, h, computed)

    cdef object _snapshot_of(self, live, h, computed):
        """The engine's ``_make_snapshot(live, h, computed)``, as ``snapshot`` and ``resolve``
        call it: this object's ``_make_snapshot`` from C where the engine's is this object's
        ``make_snapshot`` (``Engine.__init__`` binds it so), else the engine's, called."""
        if self.direct < 0:
            made = self.engine._make_snapshot
            self.direct = getattr(made, "__self__", None) is self and getattr(made, "__func__", None) is _MAKE_SNAPSHOT
        if self.direct:
            return self._make_snapshot(live, h, computed)
        return self.engine._make_snapshot(live, h, computed)

    cdef object _make_snapshot(self, live, h, computed):
        """``make_snapshot``'s body, called from C (``_snapshot_of``)."""
        cdef tuple kept
        if live in self.waiting and not self.unwatched:
            self._rewatch(live, h // self.block_size)
        old = _get(live, LAST_SNAP)
        released = _get(live, RELEASED)
        prefill = _get(live, PREFILL)
        if old is not None:  # (by position: cached_len, num_computed_tokens, arrival_time, arrival_prefill_tokens)
            if not isinstance(old, tuple):
                raise TypeError(f"a kept snapshot is {type(old).__name__}, not {self.snapshot_class.__name__}")
            kept = <tuple>old
            if kept[3] == h and kept[5] == computed and kept[1] == released and kept[10] == prefill:
                return old
            # The fields fixed per request from the kept snapshot: ``_Live.req``, ``keys`` and
            # ``client`` are set once, at its creation.
            rid, prompt_len, keys, client, out_len = kept[0], kept[2], kept[7], kept[9], kept[11]
        else:
            req = _get(live, REQ)
            rid, prompt_len, out_len = req.request_id, req.prompt_len, req.output_len
            keys, client = _get(live, KEYS), _get(live, CLIENT)
        snap = _tuple_new(self.snapshot_class, (
            rid, released, prompt_len, h, max(1, prompt_len - h - computed), computed, live, keys,
            self.block_size, client, prefill, out_len,
        ))
        _set(live, LAST_SNAP, snap)
        return snap

    def resolve(self, q):
        """``LazyHits.resolve`` (after ``attach_lazy``)."""
        cdef dict resolved = self.resolved
        cdef Py_ssize_t n, cap
        cdef bint touched
        # (``q.handle`` by position for a snapshot of ``snapshot_class``: no property call)
        live = (<tuple>q)[6] if type(q) is self.snapshot_class else q.handle
        key = live
        snap = resolved.get(key)
        if snap is not None:
            return snap
        snap = _get(live, SNAP)
        if snap is None:
            self.bounded.discard(key)
            journal = self.journal
            cap = _get(live, MAX_HIT)
            keys = _get(live, KEYS)
            n = self.count_prefix(keys, cap)
            touched = False
            if journal and _names_any(journal, keys, n + 1 if n < cap else n):
                n = 0
                for k in keys[:cap]:
                    present = journal.get(k)
                    if present is None:
                        present = self.is_cached(k)
                    else:
                        touched = True
                    if not present:
                        break
                    n += 1
            snap = self._snapshot_of(live, n * self.block_size, 0)
            _set(live, SNAP, snap)
            if touched:
                self.recheck.append(live)
        resolved[key] = snap
        return snap


#: ``CompiledWatch.make_snapshot`` as bound methods of it carry it (``__func__``): the engine's
#: ``_make_snapshot`` is run from C only where it is this function (``_snapshot_of``).
_MAKE_SNAPSHOT = CompiledWatch.make_snapshot


cdef class CheckedOrder:
    """``Engine._checked(snaps, n)`` (the reference, a generator) as an iterator: yields each
    snapshot's ``handle`` (a waiting ``_Live``) as it reads ``snaps``; raises the reference's
    ``PolicyContractError`` on an item that is not a held waiting request's snapshot of this
    step, on one read twice, or when ``snaps`` ends after other than ``n`` items; with the
    engine's ``_on_admitted`` set, keeps each item in its ``_step_snaps`` (``live -> q``).

    Why: the engine reads it once per admission candidate (tens of thousands of times per
    trace); a generator frame resumed per item was a few percent of a Fairway run's
    instructions. The engine's ``_in_inc``, ``_step_snaps`` and ``_on_admitted`` are read at
    creation (the reference reads them at the first item; the engine changes neither binding
    between the two, only ``_step_snaps``'s content), ``policy_name`` when it reports.
    ``tests/test_watch_direct.py`` compares it with the reference.
    """

    cdef object engine
    cdef object snaps
    cdef Py_ssize_t n
    cdef set seen
    cdef set held
    cdef dict keep
    cdef bint done

    def __init__(self, engine, snaps, Py_ssize_t n):
        self.engine = engine
        self.snaps = iter(snaps)
        self.n = n
        self.seen = set()
        self.held = engine._in_inc
        self.keep = engine._step_snaps if engine._on_admitted is not None else None
        self.done = False

    def __iter__(self):
        return self

    def __next__(self):
        if self.done:
            raise StopIteration
        cdef set seen = self.seen
        cdef bint ended = False
        try:
            q = next(self.snaps)
        except StopIteration:
            ended = True
        except BaseException:
            self.done = True  # (a generator that raised is finished)
            raise
        if ended:  # (raised outside the handler: no StopIteration as its context, as the reference)
            self.done = True
            if len(seen) != self.n:
                raise PolicyContractError(
                    f"policy {self.engine.policy_name!r}: incremental_order() yielded {len(seen)} "
                    f"of the {self.n} waiting requests")
            raise StopIteration
        try:
            live = q.handle
        except AttributeError:  # not a snapshot: reported below as foreign
            live = None
        cdef bint twice, foreign
        try:
            twice = live in seen
            foreign = not twice and live not in self.held
        except TypeError:  # an unhashable handle: no waiting request's
            twice, foreign = False, True
        # held: waiting _Live objects, so a held ``live`` is a _Live (has ``snap``).
        if twice or foreign or (_get(live, SNAP) is not q and _get(live, SNAP) is not None):
            self.done = True
            raise PolicyContractError(
                f"policy {self.engine.policy_name!r}: incremental_order() yielded "
                f"{'a duplicate' if twice else 'a foreign or stale'} entry "
                f"{getattr(q, 'request_id', q)!r}")
        seen.add(live)
        if self.keep is not None:
            self.keep[live] = q
        return live
