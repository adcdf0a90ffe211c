# Declarations that Cython reads beside engine.py when it compiles the module whole (setup.py,
# fairsim.compiled.WHOLE_MODULES); the source itself stays plain Python, the reference.
#
# They make the compiled ``Engine`` an extension type whose data attributes are C fields: the
# compiled methods read ``self.pool``, ``self._waiting`` ... as a field load instead of Python's
# generic attribute lookup (a type lookup and an instance-dict probe, about 150 instructions),
# which was about a fifth of the step loop's instructions on a light trace. Every field is a
# Python object, so values and arithmetic are the source's. ``__dict__`` keeps what is not
# declared here: the methods ``__init__`` replaces with compiled twins (``_snapshot``,
# ``_finish_batch`` ...), a subclass's own attributes, and any attribute a later edit of
# engine.py adds before it is declared here (slower, not wrong).
#
# The cost of an extension type: its methods cannot be replaced on the class (tests subclass
# Engine instead of patching it). Reading from Python (``engine.pool``) works as before.
cdef class Engine:
    cdef dict __dict__
    cdef public object policy, policy_name, profile, config, block_size, kv_blocks, pool
    cdef public object _burst_c, _step_coefficients, _protect, progress, colocated, fast_chunks
    cdef public object replay, _gap_rows, _gap_s, _member, _all, _arrivals, _waiting, _preempted
    cdef public object _running, _steps, _watchers, _skips_misfits, _on_admitted, prefill_tokens
    cdef public object _on_prefill_tokens, _step_snaps, _inc, _in_inc, _dirty, _order_changes
    cdef public object _protected_at, _protect_update, _protect_runs, _front_runs, _rekeyed
    cdef public object misfit, misfits, _record_misfits, _hit_free, _unwatched, _watch_c, _lazy, env

    # Called from the compiled methods as C functions (a subclass's override still runs: the call
    # checks for one).
    cpdef _order_waiting(self, now)
    cpdef _fast_order(self, now)
    cpdef _admit_waiting(self, now, budget, batch, ordered)
