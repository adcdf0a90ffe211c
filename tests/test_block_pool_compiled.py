"""The compiled block pool (``fairsim/sim/_block_pool_c.pyx``) against the pure-Python
``BlockPool``, its reference.

Operation level: random sequences of every pool operation (allocate, touch, free in any order
incl. keyless blocks and double frees, cache, cache_blocks, grow_chunks, duplicate keys, the
journal on and off, ``watched`` and ``on_key_change``) applied to both pools; after each one the
results, the errors raised, the free queue, lookups, counters, journal and the callbacks (each
with what the pool answered for its key when called) must be the same.

Engine level: the request and step tables of the same runs with each pool, exactly, for every
registered policy prefill-only and several policies colocated.

The compiled tests skip only on a machine without a C compiler (where ``pip install`` could not
build the extension); with a compiler and no extension they fail, telling to reinstall.
"""

from __future__ import annotations

from array import array

import contextlib
import dataclasses
import json
import os
import shutil
import sysconfig
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

from fairsim.costmodel import load_profile
from fairsim.errors import EngineInvariantError
from fairsim.policies import make_policy
from fairsim.policies.registry import policy_names
from fairsim.scenarios import build_scenario
from fairsim.sim import EngineConfig, simulate
from fairsim.sim.block_pool import BlockPool
from fairsim.compiled import PURE_PYTHON_ENV
from fairsim.sim.pool_choice import block_pool_kind, compiled_pool_class, new_block_pool
from fairsim.sim.engine import Engine
from tests.utils import rag_preempting

PROFILE = load_profile("a6000-llama3.1-8b-vllm-prior")
CONVERSATION = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces" / "conversation_trace.jsonl"
KEYS = "abcde"  # few keys: duplicates, and keys a call both evicts and caches


def _c_compiler() -> str | None:
    """The C compiler setuptools would use (``CC``, else Python's build compiler), if present."""
    cc = (os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc").split()[0]
    return shutil.which(cc)


Compiled = compiled_pool_class()
if Compiled is None and _c_compiler() is None:
    pytest.skip("no C compiler on this machine: the compiled block pool cannot be built "
                "(fairsim runs on the pure-Python pool)", allow_module_level=True)


@pytest.fixture(autouse=True, scope="module")
def _compiled_pool_is_built():
    assert Compiled is not None, (
        f"a C compiler is present ({_c_compiler()}) but fairsim.sim._block_pool_c does not import: "
        "reinstall (pip install -e .) to build the compiled block pool")


@contextlib.contextmanager
def _pure(value: str | None):
    """``FAIRSIM_PURE_PYTHON`` set to ``value`` (None: unset) inside the block."""
    old = os.environ.get(PURE_PYTHON_ENV)
    if value is None:
        os.environ.pop(PURE_PYTHON_ENV, None)
    else:
        os.environ[PURE_PYTHON_ENV] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(PURE_PYTHON_ENV, None)
        else:
            os.environ[PURE_PYTHON_ENV] = old


# -- operation level --------------------------------------------------------------------------------
class _Observed:
    """A pool with its callbacks recorded: ``(key, is_cached(key))`` per ``on_key_change``."""

    def __init__(self, pool) -> None:
        self.pool = pool
        self.calls: list[tuple] = []
        pool.on_key_change = self.record

    def record(self, key) -> None:
        self.calls.append((key, self.pool.is_cached(key)))

    def state(self) -> tuple:
        p = self.pool
        journal = None if p.journal is None else list(p.journal.items())
        return (p.free_queue(), list(p.iter_free()), list(p.ref_cnt), list(p.block_key),
                list(p._cached.items()), {k: list(v) for k, v in p._more.items()},
                p.num_evictions, p.num_frees, p.num_cached, p.num_used, p.num_free, p.num_blocks,
                journal, list(self.calls))


def _outcome(call):
    """``call()``'s result, or the error it raised (type and message)."""
    try:
        return ("ok", call())
    except (ValueError, EngineInvariantError, IndexError) as exc:
        return ("error", type(exc), str(exc))


def _both(pools: list[_Observed], op):
    """Apply ``op(pool)`` to both pools; assert the same outcome and state after it."""
    outcomes = [_outcome(lambda o=o: op(o.pool)) for o in pools]
    assert outcomes[0] == outcomes[1]
    assert pools[0].state() == pools[1].state()
    return outcomes[0]


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 9), st.data())
def test_random_operations_match_the_reference(num_blocks, data):
    random_operations([_Observed(BlockPool(num_blocks)), _Observed(Compiled(num_blocks))], data)


def random_operations(pools: list[_Observed], data, hook=None) -> None:
    """Random pool operations applied to both ``pools`` (the reference first), each compared
    with ``_both``. With ``hook`` (a ``ProtectWaitingHits`` both pools read), its protected
    set is also replaced, changed by whole runs or emptied between operations; a burst that
    fails on a block cached twice is then compared by its outcome only (the reference's
    per-chunk calls had not taken the later chunks' blocks off the queue)."""
    num_blocks = pools[0].pool.num_blocks
    # The requests holding blocks: (block ids, their keys, blocks cached), the same in both.
    held: list[tuple[list[int], tuple[str, ...], int]] = []
    keys_st = st.text(KEYS, min_size=0, max_size=8).map(tuple)
    protected_runs: list[tuple[str, ...]] = []
    for _ in range(data.draw(st.integers(1, 40))):
        ref = pools[0].pool
        op = data.draw(st.sampled_from(["allocate", "hit", "admit", "touch", "free", "cache", "cache_blocks", "grow",
                                        "journal", "watched", "query"] + (["protect"] * 2 if hook else [])))
        if op == "allocate":  # sometimes one more than free: the error, nothing changed
            n = data.draw(st.integers(0, ref.num_free + 1))
            got = _both(pools, lambda p: p.allocate(n))
            if got[0] == "ok":
                held.append((got[1], data.draw(keys_st), 0))
        elif op == "hit":  # a request's prefix hit: lookup, touch, then its own blocks
            keys = data.draw(keys_st)
            cap = data.draw(st.integers(-2, len(keys) + 1))
            _, hit = _both(pools, lambda p: p.lookup_prefix(keys, cap))
            assert _both(pools, lambda p: p.count_prefix(keys, cap)) == ("ok", len(hit))
            _both(pools, lambda p: p.num_evictable(hit))
            _both(pools, lambda p: p.touch(hit))
            held.append((list(hit), keys, len(hit)))
        elif op == "admit":  # a waiting request's admission: hit, gate, first chunk's blocks
            keys = data.draw(keys_st)
            cap = data.draw(st.integers(0, len(keys)))
            bs = data.draw(st.integers(1, 4))
            tokens = data.draw(st.integers(cap * bs + 1, cap * bs + 3 * bs))  # the hit is below the prompt
            full = -(-tokens // bs)
            reserve = data.draw(st.sampled_from([full, full - 1, 0]))  # the gate, and a loose one
            budget = data.draw(st.integers(1, 3 * bs))
            got = _both(pools, lambda p: p.admit(keys, cap, reserve, tokens, budget, bs))
            if got[0] == "ok" and not isinstance(got[1], int):
                blocks, hit, n, cached = got[1]
                assert hit * bs + n <= tokens and n <= budget and len(blocks) == -(-(hit * bs + n) // bs)
                held.append((blocks, keys, cached))
        elif op == "touch":
            ids = data.draw(st.lists(st.integers(0, num_blocks - 1), max_size=4))
            _both(pools, lambda p: p.touch(ids))
            held.append((ids, (), len(ids)))
        elif op == "free" and held:
            blocks, _, _ = held.pop(data.draw(st.integers(0, len(held) - 1)))
            order = data.draw(st.sampled_from(["deepest first", "given", "shuffled", "twice"]))
            ids = {"deepest first": blocks[::-1], "given": blocks,
                   "shuffled": data.draw(st.permutations(blocks)), "twice": blocks + blocks}[order]
            if _both(pools, lambda p: p.free(reversed(ids) if order == "deepest first" else ids))[0] == "error":
                break  # a double free: an engine bug, after which neither pool is consistent
        elif op == "cache":  # any block, any key: errors on a cached one
            b = data.draw(st.integers(0, num_blocks - 1))
            key = data.draw(st.sampled_from(KEYS))
            _both(pools, lambda p: p.cache(b, key))
        elif op == "cache_blocks" and held:
            i = data.draw(st.integers(0, len(held) - 1))
            blocks, keys, start = held[i]
            stop = data.draw(st.integers(start, max(start, min(len(blocks), len(keys)))))
            if _both(pools, lambda p: p.cache_blocks(blocks, keys, start, stop))[0] == "ok":
                held[i] = (blocks, keys, stop)
        elif op == "grow" and held:
            i = data.draw(st.integers(0, len(held) - 1))
            blocks, keys, start = held[i]
            needs = data.draw(st.lists(st.integers(0, 3), min_size=1, max_size=4))
            stops, stop, size = [], start, len(blocks)
            for need in needs:
                size += need
                stop = data.draw(st.integers(stop, max(stop, min(size, len(keys)))))
                stops.append(stop)
            grown = [list(blocks), list(blocks)]
            outcomes = [_outcome(lambda o=o, g=g: o.pool.grow_chunks(g, keys, start, needs, stops))
                        for o, g in zip(pools, grown)]
            assert outcomes[0] == outcomes[1]
            if hook is not None and outcomes[0][1] is EngineInvariantError:
                break
            assert grown[0] == grown[1] and pools[0].state() == pools[1].state()
            if outcomes[0][0] == "ok":
                held[i] = (grown[0], keys, max(start, stops[-1]))
            elif outcomes[0][1] is EngineInvariantError:
                break  # a block cached twice: an engine bug; the burst's later blocks are off the queue
        elif op == "journal":
            on = data.draw(st.booleans())
            for o in pools:
                o.pool.journal = {} if on else None
        elif op == "watched":
            watched = data.draw(st.none() | st.sets(st.sampled_from(KEYS)))
            for o in pools:
                o.pool.watched = watched
        elif op == "protect":  # PEEK's set between orderings: replaced, changed by runs, emptied
            runs = data.draw(st.lists(keys_st.map(lambda k: k[:4]), max_size=3))
            how = data.draw(st.sampled_from(["protect", "update", "clear"]))
            if how == "protect":
                hook.protect(runs)
                protected_runs = list(runs)
            elif how == "update":
                removed = [protected_runs.pop(data.draw(st.integers(0, len(protected_runs) - 1)))
                           for _ in range(data.draw(st.integers(0, len(protected_runs))))]
                hook.update_runs(removed, runs)
                protected_runs += runs
            else:
                hook.protected.clear()
                protected_runs = []
        elif op == "query":
            key = data.draw(st.sampled_from(KEYS))
            _both(pools, lambda p: (p.is_cached(key), key in p.hit_table))
        assert pools[0].state() == pools[1].state()


def test_hand_computed_lru_and_keyless_front():
    # 4 blocks; A takes 0,1 (cached a, b), B takes 2 (keyless); freeing B then A deepest first
    # puts 2 at the front (keyless), then 1, 0 at the back in that order; allocating 2 takes 2
    # and 3, then the next allocation evicts b (block 1) before a.
    pool = Compiled(4)
    changes: list[str] = []
    pool.on_key_change = changes.append
    a = pool.allocate(2)
    pool.cache_blocks(a, ("a", "b"), 0, 2)
    b = pool.allocate(1)
    assert (a, b, pool.num_free, pool.num_used, pool.num_cached) == ([0, 1], [2], 1, 3, 2)
    pool.free(b)
    pool.free(reversed(a))
    assert pool.free_queue() == [2, 3, 1, 0]
    assert pool.allocate(2) == [2, 3]
    assert pool.allocate(1) == [1] and pool.num_evictions == 1 and changes == ["a", "b", "b"]
    assert pool.lookup_prefix(("a", "b"), 2) == [0] and pool.count_prefix(("a", "b"), 2) == 1
    assert pool.ref_cnt == [0, 1, 1, 1] and pool.num_frees == 2


def test_duplicate_key_keeps_the_first_hittable():
    # Blocks 0 and 1 both cached under "k": lookups return 0; evicting 0 leaves 1 hittable and
    # reports no change; evicting 1 too reports one.
    pool = Compiled(3)
    changes: list[str] = []
    pool.on_key_change = changes.append
    pool.journal = {}
    pool.cache(pool.allocate(1)[0], "k")
    pool.cache(pool.allocate(1)[0], "k")
    assert pool.lookup_prefix(["k"], 1) == [0] and pool.num_cached == 2 and changes == ["k"]
    pool.free([0])
    pool.free([1])
    pool.allocate(2)  # takes 2 (never used), then 0
    assert pool.lookup_prefix(["k"], 1) == [1] and changes == ["k"]
    pool.allocate(1)
    assert not pool.is_cached("k") and changes == ["k", "k"] and pool.journal == {"k": False}


def test_errors_leave_the_pool_as_the_reference_does():
    for pool in (BlockPool(2), Compiled(2)):
        with pytest.raises(ValueError, match="cannot allocate 3 blocks: only 2 free"):
            pool.allocate(3)
        with pytest.raises(ValueError, match="cannot allocate 3 blocks: only 2 free"):
            pool.grow_chunks([], (), 0, [1, 2], [0, 0])
        assert pool.free_queue() == [0, 1]
        with pytest.raises(IndexError):
            pool.touch([2])
        pool.cache(0, "x")
        with pytest.raises(EngineInvariantError, match="block 0 is already cached under 'x'"):
            pool.cache(0, "y")
        with pytest.raises(EngineInvariantError, match="freed twice"):
            pool.free([1])
        with pytest.raises(ValueError, match="at least 1 block"):
            type(pool)(0)


def test_watched_filters_and_journal_records_every_key():
    pool = Compiled(4)
    changes: list[str] = []
    pool.on_key_change = changes.append
    pool.watched = {"b"}
    pool.journal = {}
    pool.cache_blocks(pool.allocate(3), "abc", 0, 3)
    assert changes == ["b"] and pool.journal == {"a": False, "b": False, "c": False}


# -- selection ---------------------------------------------------------------------------------------
def test_selection_follows_the_environment():
    with _pure("1"):
        assert block_pool_kind() == "python" and type(new_block_pool(3)) is BlockPool
    with _pure(None):
        assert block_pool_kind() == "compiled" and type(new_block_pool(3)) is Compiled
    with _pure("0"):
        assert block_pool_kind() == "compiled"


def test_engine_uses_the_selected_pool():
    # PEEK's and RAGCache's pools: tests/test_block_pool_peek.py.
    reqs = build_scenario("rag", PROFILE, seed=2).requests[:5]
    with _pure(None):
        assert type(Engine(reqs, make_policy("fcfs", PROFILE), PROFILE, EngineConfig()).pool) is Compiled
    with _pure("1"):
        assert type(Engine(reqs, make_policy("fcfs", PROFILE), PROFILE, EngineConfig()).pool) is BlockPool


# -- engine level ------------------------------------------------------------------------------------
def _same_tables(reqs, name, config, **kw):
    """Simulate with the compiled and the pure pool; assert identical tables (exact floats)."""
    results = []
    for pure in (None, "1"):
        with _pure(pure):
            results.append(simulate(reqs, make_policy(name, PROFILE), PROFILE, config, **kw))
    for table in ("requests", "steps"):
        pd.testing.assert_frame_equal(getattr(results[0], table), getattr(results[1], table), check_exact=True)
    if results[0].token_gaps is not None:
        pd.testing.assert_frame_equal(results[0].token_gaps, results[1].token_gaps, check_exact=True)
    return results[0]


@pytest.mark.parametrize("name", policy_names())
def test_every_policy_prefill_only_small_cache(name):
    # RAG prompts in a cache of three of the longest: chunk bursts, evictions, duplicates.
    reqs = build_scenario("rag", PROFILE, seed=2).requests[:200]
    config = EngineConfig(kv_tokens=3 * max(r.prompt_len for r in reqs), budget_tokens=1000, max_num_seqs=16)
    res = _same_tables(reqs, name, config)
    assert res.steps["evictions"].sum() > 0


@pytest.mark.parametrize("name", ["fcfs", "lpm", "fairway", "drr", "vtc", "dlpm"])
def test_colocated_with_preemptions(name):
    reqs, config = rag_preempting(PROFILE)
    res = _same_tables(reqs, name, config)
    assert res.requests["preemptions"].sum() > 0


@pytest.mark.skipif(not CONVERSATION.exists(), reason="shared conversation trace not present")
@pytest.mark.parametrize("name", ["fcfs", "lpm", "fairway"])
def test_conversation_time_scale_8(name):
    from fairsim.traces.formats import read_trace

    reqs = [dataclasses.replace(r, arrival_time=8 * r.arrival_time)
            for r in list(read_trace(CONVERSATION).requests)[:1500]]
    res = _same_tables(reqs, name, EngineConfig(kv_blocks=451))
    assert res.steps["evictions"].sum() > 0


@pytest.mark.parametrize("pure, kind", [(None, "compiled"), ("1", "python")])
def test_run_json_records_the_pool(tmp_path, capsys, pure, kind):
    from fairsim.cli import main

    with _pure(pure):
        assert main(["run", "--policy", "fcfs", "--max-requests", "20", "--out", str(tmp_path)]) == 0
    capsys.readouterr()
    assert json.loads((tmp_path / "run.json").read_text())["block_pool"] == kind


# -- the chunk burst's plan and rows -----------------------------------------------------------------
@settings(max_examples=300, deadline=None)
@given(total=st.integers(0, 40_000), computed=st.integers(0, 40_000), budget=st.integers(64, 4096),
       bs=st.integers(16, 600), num_blocks=st.integers(0, 80), free_left=st.integers(0, 200),
       stop=st.integers(0, 80), n_keys=st.integers(0, 90), now=st.floats(0, 1e6),
       limit=st.floats(0, 2e6) | st.just(float("inf")),
       coefficients=st.tuples(*[st.floats(0, 1.0, allow_subnormal=False)] * 4))
def test_plan_chunks_matches_the_reference(total, computed, budget, bs, num_blocks, free_left, stop, n_keys,
                                           now, limit, coefficients):
    from fairsim import interrupt
    from fairsim.costmodel import Profile
    from fairsim.sim import _block_pool_c
    from fairsim.sim.engine import plan_chunks

    # The profile's own step-time method, on these coefficients.
    profile = SimpleNamespace(a_s=coefficients[0], b_s_per_token=coefficients[1],
                              k_s_per_pair=coefficients[2], d_s_per_request=coefficients[3])
    args = (total, computed, budget, bs, num_blocks, free_left, stop, n_keys, now, limit)
    want = plan_chunks(*args, partial(Profile.step_time_from_sums, profile))
    got = _block_pool_c.plan_chunks(*args, *coefficients, interrupt)
    assert got == want  # floats to the bit (==, and the same types)
    assert [type(x) for x in got[3]] == [float] * len(want[3]) and type(got[5]) is float


def test_plan_chunks_hand_computed_and_interrupt(monkeypatch):
    from fairsim import interrupt
    from fairsim.sim import _block_pool_c

    # 10,000 tokens at budget 2,048 (512-token blocks, none held yet, 3 cached of 19 keys):
    # chunks end at 2,048 / 4,096 / 6,144 / 8,192 tokens, 4 blocks each; the 5th leaves exactly
    # the budget (1,808 left): not a burst chunk. Step time 1 + 0.001 per token (no pairs).
    got = _block_pool_c.plan_chunks(10_000, 0, 2048, 512, 0, 100, 3, 19, 5.0, float("inf"),
                                    1.0, 0.001, 0.0, 0.0, interrupt)
    step = 1.0 + 0.001 * 2048
    assert got == ([4, 4, 4, 4], [4, 8, 12, 16], [5.0, 5.0 + step, 5.0 + step + step, 5.0 + step + step + step],
                   [step] * 4, 8192, 5.0 + step + step + step + step, 16)
    assert abs(got[5] - 17.192) < 1e-9
    # Only 9 blocks free: two chunks. The next arrival at 8.0 s: one (the next would start at 8.048).
    assert _block_pool_c.plan_chunks(10_000, 0, 2048, 512, 0, 9, 3, 19, 5.0, float("inf"), 1.0, 0.001, 0.0, 0.0,
                                     interrupt)[0] == [4, 4]
    assert _block_pool_c.plan_chunks(10_000, 0, 2048, 512, 0, 100, 3, 19, 5.0, 8.0, 1.0, 0.001, 0.0, 0.0,
                                     interrupt)[0] == [4]
    monkeypatch.setattr(interrupt, "REQUESTED", True)
    assert _block_pool_c.plan_chunks(10_000, 0, 2048, 512, 0, 100, 3, 19, 5.0, 8.0, 1.0, 0.001, 0.0, 0.0,
                                     interrupt) == ([], [], [], [], 0, 5.0, 3)


def test_step_log_gives_the_reference_columns():
    """The compiled ``StepLog`` gives the columns (values and typecodes) the Python one gives,
    across its buffer's growth (rows past its first 1,024)."""
    from fairsim.sim import _block_pool_c
    from fairsim.sim.steplog import STEP_TYPECODES, StepLog

    logs = (_block_pool_c.StepLog(), StepLog())

    def columns(log):
        return [log.column(j) for j in range(12)]

    assert [c.tolist() for c in columns(logs[0])] == [[]] * 12
    for log in logs:
        log.add(6, 0.5, 1.0, 2048, 0, 1, 4, 1, 9, 8, 0, 0)
        log.add_burst(7, [1.5, 2.5], [1.0, 1.25], 2048, 3, 1, [10, 14], [9, 13], [0, 2])
    assert [c.tolist() for c in columns(logs[0])] == [c.tolist() for c in columns(logs[1])] == [
        [6, 7, 8], [0.5, 1.5, 2.5], [1.0, 1.0, 1.25], [2048] * 3, [0] * 3, [1] * 3, [4, 3, 3], [1] * 3,
        [9, 10, 14], [8, 9, 13], [0, 0, 2], [0] * 3]
    for log in logs:
        for i in range(3, 1500):
            log.add(i + 6, i / 3, 0.25, i, i % 7, 2, 3 * i, 4, 10**12 + i, 5, -1, 1)
        log.add_burst(1506, [9.0] * 700, [0.5] * 700, 2048, 3, 1, list(range(700)), [1] * 700, [0] * 700)
    got, want = columns(logs[0]), columns(logs[1])
    assert len(logs[0]) == len(logs[1]) == 3 + 1497 + 700
    assert [c.typecode for c in got] == list(STEP_TYPECODES)
    assert [c.tolist() for c in got] == [c.tolist() for c in want]
    for log in logs:
        for j in (-1, 12):
            with pytest.raises(IndexError, match=f"step column {j}"):
                log.column(j)


def test_engine_uses_the_compiled_burst_only_with_the_compiled_pool_and_a_float_profile():
    from tests.utils import constant_profile

    reqs = build_scenario("rag", PROFILE, seed=2).requests[:5]
    with _pure(None):
        assert Engine(reqs, make_policy("fcfs", PROFILE), PROFILE, EngineConfig())._burst_c is not None
        ints = dataclasses.replace(constant_profile(), a_s=1)
        assert Engine(reqs, make_policy("fcfs", PROFILE), ints, EngineConfig())._burst_c is None
    with _pure("1"):
        assert Engine(reqs, make_policy("fcfs", PROFILE), PROFILE, EngineConfig())._burst_c is None
