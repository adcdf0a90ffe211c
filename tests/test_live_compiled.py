"""The compiled per-request states (``fairsim/sim/_live_c.pyx``) are ``make_lives``' and
``Engine._request_table``'s twins.

- ``new_lives`` gives the reference's ``_Live`` objects field for field (value and type), over
  random requests that take its C shortcuts and the Python calls (hash block other than the
  engine's, too few ids, segments, labels, sessions; prefill-only and colocated keys).
- ``table_columns`` gives the reference comprehensions' columns.
- Whole runs: the request table is equal with and without the extension, and the compiled path
  is the one taken where the extension is built.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairsim.costmodel import load_profile
from fairsim.policies import make_policy
from fairsim.sim import Engine, EngineConfig
from fairsim.sim import engine as engine_module
from fairsim.types import Request
from tests.strategies import simulations

live_c = engine_module.compiled_lives()
pytestmark = pytest.mark.skipif(live_c is None, reason="fairsim.sim._live_c not built")

PROFILE = load_profile("a6000-llama3.1-8b-vllm-prior")


@st.composite
def requests(draw):
    """Up to 12 requests: hash blocks of 4 or 8 tokens, id counts that cover the prompt's full
    blocks or fall short, some with segments, labels (tenant, doc_id, private) or a session."""
    out = []
    for i in range(draw(st.integers(1, 12))):
        block = draw(st.sampled_from([4, 8]))
        prompt = draw(st.integers(1, 40))
        ids = draw(st.integers(0, prompt // block))
        labels = draw(st.sampled_from([{}, {"tenant": "a"}, {"doc_id": 7}, {"_raw": 1, "klass": "hit"}]))
        session = draw(st.sampled_from([None, "s1", "s2"]))
        segments = ((i % 3, prompt),) if draw(st.booleans()) and not ids else ()
        out.append(Request(f"r{i}", draw(st.sampled_from([0.0, 1.0, 2.5])), prompt,
                           tuple(100 * i + j for j in range(ids)), block, draw(st.integers(1, 9)),
                           labels, session_id=session, segments=segments))
    return out


def _reference(reqs, block_size, colocated):
    """``make_lives`` on its Python loop."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(engine_module, "compiled_lives", lambda: None)
        return engine_module.make_lives(reqs, block_size, colocated)


@settings(max_examples=300, deadline=None)
@given(reqs=requests(), block_size=st.sampled_from([1, 4, 8, 16]), colocated=st.booleans())
def test_new_lives_match_the_reference(reqs, block_size, colocated):
    compiled = engine_module.make_lives(reqs, block_size, colocated)
    reference = _reference(reqs, block_size, colocated)
    assert [type(x) for x in compiled] == [engine_module._Live] * len(reqs)
    assert len({id(x.blocks) for x in compiled}) == len(reqs)  # a list of its own each
    for x, y in zip(compiled, reference):
        for name in live_c.FIELDS:
            a, b = getattr(x, name), getattr(y, name)
            assert type(a) is type(b) and a == b, name


def test_keys_shortcut_shares_the_trace_tuple():
    """Hash block = engine block and ids for every full block: the keys are ``block_hashes``
    itself (as ``block_keys`` returns it); one id short: request-unique keys are appended."""
    full = Request("a", 0.0, 9, (1, 2), 4, 1, {})
    short = Request("b", 0.0, 9, (3,), 4, 1, {})
    a, b = engine_module.make_lives([full, short], 4, False)
    assert a.keys is full.block_hashes and a.max_hit_blocks == 2 and a.num_prompt_blocks == 3
    assert b.keys == (3, ("unique", "b", 1)) and b.client is None and b.index == 1


def test_table_columns_match_the_comprehensions():
    reqs = [Request(f"r{i}", float(i), 5 + i, (), 4, 2, {"klass": "x"} if i % 2 else {},
                    session_id=None if i % 3 else "s") for i in range(7)]
    lives = engine_module.make_lives(reqs, 4, False)
    for i, live in enumerate(lives):
        live.released_s, live.first_token_s, live.finish_s = float(i), i + 0.5, i + 1.0
        live.first_scheduled_s, live.first_scheduled_step, live.finish_step = i + 0.25, i, i + 1
        live.cached_at_admission, live.preemptions = 4 * i, i % 2
    got = live_c.table_columns(lives)
    want = tuple([eval(f"o.{name}", {}, {"o": o}) for o in lives] for name in live_c.TABLE_FIELDS)
    assert got == want
    assert got[9] == [f"r{i}" for i in range(7)] and got[6] == list(range(7))
    with pytest.raises(AttributeError):
        del lives[3].finish_s
        live_c.table_columns(lives)
    with pytest.raises(TypeError):
        live_c.table_columns(lives[:2] + [object()])


@settings(max_examples=40, deadline=None)
@given(sim=simulations(), policy=st.sampled_from(["fcfs", "lpm", "fairway"]),
       colocated=st.booleans())
def test_runs_give_the_reference_tables(sim, policy, colocated):
    reqs, profile, config = sim
    if colocated:
        config = EngineConfig(budget_tokens=config.budget_tokens, max_num_seqs=config.max_num_seqs,
                              block_size=config.block_size, kv_blocks=config.kv_blocks + 12,
                              mode="colocated")
    tables = []
    for compiled in (True, False):
        with pytest.MonkeyPatch.context() as m:
            if not compiled:
                m.setattr(engine_module, "compiled_lives", lambda: None)
            engine = Engine(reqs, make_policy(policy, profile), profile, config)
            assert isinstance(engine._finish_batch, live_c.Finisher) is compiled
            result = engine.run()
        tables.append([_as_columns(result.columns(name)) for name in ("requests", "steps", "token_gaps")])
    for a, b in zip(*tables):
        assert a == b or _nan_equal(a, b)


def _as_columns(table) -> dict | None:
    """A result table as ``name -> list`` (None for a prefill-only run's token gaps)."""
    if table is None:
        return None
    if hasattr(table, "as_list"):
        return {name: table.as_list(name) for name in table.columns}
    return table.to_dict("list")


def test_finisher_hands_a_foreign_batch_to_the_reference():
    """A batch item that is not a ``(state, n, context)`` tuple of the bound class: the whole
    batch goes to ``Engine._finish_batch`` (here a list item, which the reference unpacks)."""
    reqs = [Request(f"r{i}", 0.0, 6, (), 4, 1, {}) for i in range(3)]
    profile = PROFILE
    engines = [Engine(reqs, make_policy("fcfs", profile), profile, EngineConfig(block_size=4, kv_blocks=8))
               for _ in range(2)]
    finisher = engines[0]._finish_batch
    assert isinstance(finisher, live_c.Finisher)
    got = []
    for engine, batch_of in zip(engines, (lambda lives: [[lv, 6, 0] for lv in lives],
                                          lambda lives: [(lv, 6, 0) for lv in lives])):
        lives = engine._all[:2]
        for live in lives:
            live.blocks = engine.pool.allocate(2)
        done = engine._finish_batch(batch_of(lives), 3, 1.0, 2.0)
        got.append((done, [(lv.computed, lv.generated, lv.first_scheduled_s, lv.first_scheduled_step,
                             lv.first_token_s, lv.finish_s, lv.finish_step, lv.blocks) for lv in lives],
                    engine.pool.num_free, engine._arrivals.finished_count))
    assert got[0] == got[1]
    assert got[0][0] == 2 and got[0][1][0] == (6, 1, 1.0, 3, 2.0, 2.0, 3, [])
    assert got[0][3] == 2  # both told to the arrivals


def _nan_equal(a: dict, b: dict) -> bool:
    """Column dicts equal, NaN equal to NaN (``tpot_s`` of one-token requests)."""
    if list(a) != list(b):
        return False
    return all(len(a[k]) == len(b[k]) and all(x == y or (x != x and y != y) for x, y in zip(a[k], b[k]))
               for k in a)
