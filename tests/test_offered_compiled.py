"""The offered load's compiled loops (``fairsim/traces/_offered_c.pyx``) against the Python ones
(``fairsim.traces.offered``, the reference): the same floats, bit for bit, and the same indices.

Skipped only where the twin is not in use (no C compiler, ``FAIRSIM_PURE_PYTHON=1``); with a
compiler and no extension it fails, telling to reinstall (``tests.utils.compiled_twin_or_skip``).
"""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given, settings, strategies as st

from fairsim.costmodel import DEFAULT_PROFILE, load_profile
from fairsim.traces.offered import _both_works, _busiest, _window_ends, compiled_kernel, offered_load
from fairsim.types import Request
from tests.strategies import traces
from tests.utils import compiled_twin_or_skip

PROFILE = load_profile(DEFAULT_PROFILE)
CONVERSATION = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces" / "conversation_trace.jsonl"
KERNEL = compiled_twin_or_skip("fairsim.traces._offered_c")


def bits(values) -> list[str]:
    """Floats as their exact hex (so -0.0, NaN and the last bit all count)."""
    return [float(v).hex() for v in values]


def same_works(a, b) -> bool:
    return all(bits(getattr(a, f)) == bits(getattr(b, f)) for f in a.__slots__)


@settings(max_examples=150, deadline=None)
@given(traces(max_requests=14), st.sampled_from([1, 7, 512, 2048]), st.booleans(), st.booleans())
def test_works_equal_the_python_loops(requests, budget, colocated, ideal):
    py = _both_works(requests, budget, PROFILE, colocated, ideal)
    c = _both_works(requests, budget, PROFILE, colocated, ideal, kernel=KERNEL)
    assert len(py) == len(c)
    assert all(same_works(x, y) for x, y in zip(py, c))


@settings(max_examples=150, deadline=None)
@given(traces(max_requests=14), st.sampled_from([1, 100, 2048]), st.booleans(),
       st.sampled_from([1e-3, 0.25, 1.0, 3.0, 60.0]))
def test_windows_and_busiest_equal_the_python_loops(requests, budget, colocated, window_s):
    cold, ideal = _both_works(requests, budget, PROFILE, colocated)
    ends = _window_ends(cold.arrival_s, window_s)
    assert KERNEL.window_ends(cold.arrival_s, window_s) == ends
    for work in (cold, ideal):
        py = _busiest(work, PROFILE, budget, window_s, ends)
        c = _busiest(work, PROFILE, budget, window_s, ends, KERNEL)
        assert bits(py) == bits(c)


def test_a_nan_coefficient_wins_at_once_as_in_python():
    # numpy's argmax (and the Python loop) stop at the first NaN; so does the compiled loop.
    reqs = [Request(f"q{i}", float(i), 600, (), 512, 1, {}) for i in range(4)]
    cold, = _both_works(reqs, 512, PROFILE, False, ideal_reuse=False)
    # (a Profile refuses a NaN coefficient; _busiest reads only these four)
    nan_profile = SimpleNamespace(a_s=PROFILE.a_s, b_s_per_token=PROFILE.b_s_per_token, k_s_per_pair=math.nan,
                                  d_s_per_request=PROFILE.d_s_per_request)
    py = _busiest(cold, nan_profile, 512, 2.0)
    c = _busiest(cold, nan_profile, 512, 2.0, kernel=KERNEL)
    assert math.isnan(py[0]) and math.isnan(c[0]) and py[1] == c[1] == 0.0


@pytest.mark.parametrize("budget", [2048, 10**20, 2**70 + 1])
def test_budgets_past_c_integers_give_the_python_figures(budget, monkeypatch):
    # A budget (or a length) no C integer holds: converted to a float as Python's ``float / int``.
    reqs = [Request("a", 0.0, 10**6, (1, 2), 512, 1, {}), Request("b", 100.0, 10**6, (1, 3), 512, 1, {})]
    compiled = offered_load(reqs, PROFILE, budget, 60.0)
    monkeypatch.setenv("FAIRSIM_PURE_PYTHON", "1")
    assert offered_load(reqs, PROFILE, budget, 60.0) == compiled


def test_hand_computed_hits_and_windows():
    # a: blocks (1, 2); b shares block 1 and ends in a new one; c repeats a whole: its hit is
    # the whole blocks within prompt_len - 1 tokens, one (vLLM computes the last token, and a hit
    # is whole blocks: the engine's hit for c is 512 too).
    reqs = [Request("a", 0.0, 1024, (1, 2), 512, 1, {}), Request("b", 1.0, 1100, (1, 3), 512, 1, {}),
            Request("c", 1.5, 1024, (1, 2), 512, 1, {})]
    assert KERNEL.ideal_hits(reqs) == [0.0, 512.0, 512.0]
    # the first arrival at or after t + 1 s: 1.0 for 0.0, then 4.0 for 1.0 and 1.5, none for 4.0
    assert KERNEL.window_ends([0.0, 1.0, 1.5, 1.5, 4.0], 1.0) == [1, 4, 4, 4, 5]
    new, pairs, chunks = KERNEL.work_lists([1024.0, 1100.0], [0.0, 512.0], 512)
    assert (new, pairs, chunks) == ([1024.0, 588.0], [524288.0, (1100.0**2 - 512.0**2) / 2], [2.0, 2.0])


@pytest.mark.skipif(not CONVERSATION.exists(), reason="shared conversation trace not present")
@pytest.mark.parametrize("colocated", [False, True])
def test_conversation_offered_load_is_the_python_one(monkeypatch, colocated):
    from fairsim.traces import load_trace

    requests = load_trace(CONVERSATION).requests
    compiled = offered_load(requests, PROFILE, 2048, 60.0, colocated)
    monkeypatch.setenv("FAIRSIM_PURE_PYTHON", "1")
    assert compiled_kernel() is None
    assert offered_load(requests, PROFILE, 2048, 60.0, colocated) == compiled


def _ideal_hits_reference(requests):
    """The reference walk of ``_both_works`` (a set of the ids seen), over requests in order."""
    seen, out = set(), []
    for r in requests:
        hit = 0
        for x in r.block_hashes:
            if x not in seen:
                break
            hit += 1
        out.append(float(min(hit, (r.prompt_len - 1) // r.hash_block_size) * r.hash_block_size))
        seen.update(r.block_hashes[hit:])
    return out


# Id sets that take each path of ``ideal_hits``: dense ints (a byte per id), and ids that force
# the set (negative, past the dense bound, past 64 bits, equal but not ints: 1.0 == True == 1).
ID_POOLS = {"dense": [0, 1, 2, 3, 5, 8], "negative": [-1, 0, 1, 2], "sparse": [0, 1, 10**7, 10**7 + 1],
            "past 64 bits": [0, 1, 2**64, 2**64 + 1], "equal non-ints": [1, 1.0, True, 2, 2.0]}


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(sorted(ID_POOLS)), st.data())
def test_ideal_hits_of_any_ids_equal_the_python_walk(pool, data):
    requests = []
    for i in range(data.draw(st.integers(0, 8))):
        ids = tuple(data.draw(st.lists(st.sampled_from(ID_POOLS[pool]), max_size=5)))
        requests.append(SimpleNamespace(block_hashes=ids, hash_block_size=16,
                                        prompt_len=data.draw(st.integers(1, 100))))
    assert bits(KERNEL.ideal_hits(requests)) == bits(_ideal_hits_reference(requests))


def test_columns_are_pythons_float_of_each_field():
    # ints (one past 2**53, rounded as float() rounds it) and floats, as _both_works' Python lists
    reqs = [SimpleNamespace(prompt_len=n, arrival_time=t) for n, t in ((7, 0), (2**53 + 1, 1.5), (3, 2**60 + 1))]
    lengths, arrival = KERNEL.columns(reqs)
    assert bits(lengths) == bits([float(r.prompt_len) for r in reqs]) == bits([7.0, 2.0**53, 3.0])
    assert bits(arrival) == bits([float(r.arrival_time) for r in reqs])
    with pytest.raises(OverflowError):  # as float() raises
        KERNEL.columns([SimpleNamespace(prompt_len=10**400, arrival_time=0.0)])


def test_ideal_hits_hand_computed_on_both_paths():
    def reqs(ids_lists):
        return [SimpleNamespace(block_hashes=ids, hash_block_size=512, prompt_len=2000) for ids in ids_lists]
    # the second shares the first's two leading ids, the third only its first (then a new one)
    for shift in (0, 10**9, -5):  # dense, past the dense bound, negative: the same hits
        got = KERNEL.ideal_hits(reqs([(shift + 0, shift + 1, shift + 2), (shift + 0, shift + 1, shift + 7),
                                      (shift + 0, shift + 9, shift + 1)]))
        assert got == [0.0, 1024.0, 512.0]
