"""Cost model: the formula by hand, T_idle interpolation, the shipped prior, profile errors."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairsim.costmodel import Profile, builtin_profiles, interp, load_profile, model_idle_table, save_profile
from fairsim.errors import ProfileError
from fairsim.profiles.build_prior import build_prior


def profile(**kw):
    base = dict(name="p", kind="prior", a_s=0.01, b_s_per_token=1e-4, k_s_per_pair=2e-9,
                d_s_per_request=1e-3, idle_prompt_tokens=(100, 1000), idle_seconds=(0.1, 0.5))
    return Profile(**{**base, **kw})


class TestFormula:
    """step_time = a + b*sum(n) + k*sum(n*(k_i + n/2)) + d*len(batch)."""

    def test_step_time_by_hand(self):
        p = profile()
        # n=(100, 50), context=(0, 1000): pairs = 100*50 + 50*1025 = 56250.
        expected = 0.01 + 1e-4 * 150 + 2e-9 * 56250 + 1e-3 * 2
        assert p.step_time([(100, 0), (50, 1000)]) == pytest.approx(expected)

    def test_prefill_time_chunks_by_budget(self):
        p = profile(budget_tokens=100)
        # 250 tokens on top of 0: chunks 100, 100, 50 with contexts 0, 100, 200.
        expected = sum(0.01 + 1e-4 * n + 2e-9 * n * (c + n / 2) + 1e-3 for n, c in [(100, 0), (100, 100), (50, 200)])
        assert p.prefill_time(250) == pytest.approx(expected)


class TestIdleTable:
    """T_idle interpolation: linear inside, scaled model outside."""

    def test_interpolation(self):
        p = profile()
        assert p.idle_prefill_time(550) == pytest.approx(0.3)
        assert p.idle_prefill_time(50) == pytest.approx(0.05)
        beyond = p.idle_prefill_time(5000)
        assert beyond == pytest.approx(p.prefill_time(5000) * 0.5 / p.prefill_time(1000))

    @pytest.mark.parametrize("name", builtin_profiles())
    def test_same_floats_as_numpy_interp(self, name):
        # idle_prefill_time interpolates in plain floats (costmodel.interp): bit for bit what
        # np.interp gave before, at every length of the table's range (odd lengths sampled
        # past 20,000 to keep the test short), knots included.
        p = load_profile(name)
        x, y = p.idle_prompt_tokens, p.idle_seconds
        lengths = np.unique(np.concatenate([np.arange(x[0], min(x[-1], 20_000) + 1),
                                            np.arange(x[0], x[-1] + 1, 37), np.asarray(x)]))
        expected = np.interp(lengths.astype(np.float64), np.asarray(x, dtype=np.float64),
                             np.asarray(y, dtype=np.float64))
        got = np.array([interp(int(n), x, y) for n in lengths])
        assert np.array_equal(got, expected)
        assert [p.idle_prefill_time(int(n)) for n in lengths[:500]] == list(expected[:500])

    def test_float32_table_gives_float64_times(self):
        # A table built in Python from float32 values: every time is computed in float64, as
        # when the table was converted to a float64 array (beyond the last point too).
        y32 = tuple(np.float32(v) for v in (0.1, 0.5))
        p = profile(idle_seconds=y32)
        ref = profile(idle_seconds=tuple(float(v) for v in y32))
        for n in (50, 100, 550, 1000, 5000):
            assert p.idle_prefill_time(n) == ref.idle_prefill_time(n)
            assert type(p.idle_prefill_time(n)) is float

    def test_interp_by_hand(self):
        assert interp(550, (100, 1000), (0.1, 0.5)) == (0.5 - 0.1) / 900 * 450 + 0.1
        assert interp(100, (100, 1000), (0.1, 0.5)) == 0.1  # a knot: its value, no arithmetic
        assert interp(1000, (100, 1000), (0.1, 0.5)) == 0.5

    def test_memoised_value_is_the_computed_one(self):
        p = profile()
        first = p.idle_prefill_time(5000)  # beyond the table: the scaled model
        assert p.idle_prefill_time(5000) == first == p.prefill_time(5000) * 0.5 / p.prefill_time(1000)
        with pytest.raises(ValueError, match="prompt_len=0"):
            p.idle_prefill_time(0)
        assert p == profile()  # the memo takes no part in equality

    def test_monotone_over_range(self):
        p = load_profile()
        values = [p.idle_prefill_time(L) for L in range(1, 300_000, 997)]
        assert all(b >= a for a, b in zip(values, values[1:]))


class TestShippedPrior:
    """The shipped prior equals its documented construction and is labelled a prior."""

    def test_matches_builder(self):
        assert load_profile("a6000-llama3.1-8b-vllm-prior").to_dict() == build_prior().to_dict()

    def test_labelled_prior_and_chunk_time(self):
        p = load_profile()
        assert p.kind == "prior" and "PRIOR" in p.metadata["label"]
        # Cold 2,048-token chunk ~ 270-280 ms (Preble's A6000 fit + attention), above the
        # ~185 ms physics floor in COSTMODEL.md.
        assert 0.26 < p.idle_prefill_time(2048) < 0.29

    def test_listed(self):
        assert "a6000-llama3.1-8b-vllm-prior" in builtin_profiles()


class TestProfileErrors:
    """A malformed profile is a clear error naming the file and key."""

    def test_roundtrip(self, tmp_path):
        consistent = profile(idle_seconds=tuple(model_idle_table(0.01, 1e-4, 2e-9, 1e-3, (100, 1000))))
        save_profile(consistent, tmp_path / "p.json")
        assert load_profile(tmp_path / "p.json") == consistent

    def test_missing_key(self, tmp_path):
        data = profile().to_dict()
        del data["coefficients"]["k_s_per_pair"]
        (tmp_path / "p.json").write_text(json.dumps(data))
        with pytest.raises(ProfileError, match=r"p\.json: missing key 'coefficients\.k_s_per_pair'"):
            load_profile(tmp_path / "p.json")

    def test_bad_json(self, tmp_path):
        (tmp_path / "p.json").write_text('{\n "schema_version": 1,\n oops}')
        with pytest.raises(ProfileError, match=r"p\.json:3: not valid JSON"):
            load_profile(tmp_path / "p.json")

    def test_negative_coefficient(self, tmp_path):
        data = profile().to_dict()
        data["coefficients"]["a_s"] = -1
        (tmp_path / "p.json").write_text(json.dumps(data))
        with pytest.raises(ProfileError, match=r"p\.json: 'coefficients\.a_s' must be a finite number >= 0 \(s\), got -1"):
            load_profile(tmp_path / "p.json")

    def test_unknown_name(self):
        with pytest.raises(ProfileError, match="neither a file nor a shipped profile"):
            load_profile("no-such-profile")

    def test_decreasing_idle_table(self):
        with pytest.raises(ProfileError, match="non-decreasing"):
            profile(idle_seconds=(0.5, 0.1))


@pytest.mark.parametrize("name", builtin_profiles())
def test_idle_time_is_interp_at_every_length(name):
    """``_idle_time`` interpolates with slopes made once (``Profile._idle_segments``): the float
    ``interp`` gives, at every length of the table's range (every 7th past 30,000) and the knots."""
    p = load_profile(name)
    x, y = p.idle_prompt_tokens, p.idle_seconds
    lengths = sorted(set(range(x[0], min(x[-1], 30_000) + 1)) | set(range(x[0], x[-1] + 1, 7)) | set(x))
    assert [p._idle_time(n) for n in lengths] == [interp(n, x, y) for n in lengths]


@settings(max_examples=200, deadline=None)
@given(data=st.data(), points=st.integers(2, 8), float32=st.booleans())
def test_idle_time_is_interp_on_random_tables(data, points, float32):
    """Random tables (knots, non-decreasing values, float32 values too): the same float as
    ``interp`` at random lengths inside them, and a float."""
    x = tuple(sorted(data.draw(st.sets(st.integers(1, 100_000), min_size=points, max_size=points))))
    steps = data.draw(st.lists(st.floats(0, 10, allow_nan=False), min_size=points, max_size=points))
    y = tuple(np.cumsum(steps).tolist())
    if float32:
        y = tuple(np.float32(v) for v in y)
        if any(b < a for a, b in zip(y, y[1:])):
            return
    p = profile(idle_prompt_tokens=x, idle_seconds=y)
    for n in data.draw(st.lists(st.integers(x[0], x[-1]), min_size=1, max_size=20)) + list(x):
        got = p._idle_time(n)
        assert got == interp(n, x, y) and type(got) is float


def test_a_profile_with_a_key_given_twice_is_refused(tmp_path):
    # Was: json kept the second "a_s" without a word, so the file said one figure and ran another.
    text = (pytest.importorskip("fairsim.costmodel").PROFILE_DIR / "a6000-llama3.1-8b-vllm-prior.json").read_text()
    data = json.loads(text)
    twice = json.dumps(data, indent=1).replace('"coefficients": {', '"coefficients": {\n  "a_s": 5.0,', 1)
    path = tmp_path / "p.json"
    path.write_text(twice)
    with pytest.raises(ProfileError) as err:
        load_profile(path)
    assert str(err.value) == f"{path}: key 'a_s' given twice in one object (json keeps the last without a word)"


def test_a_folder_given_as_profile_is_named_as_one(tmp_path):
    with pytest.raises(ProfileError) as err:
        load_profile(tmp_path)
    assert str(err.value).startswith(f"profile {str(tmp_path)!r} is a folder, not a profile JSON file; shipped: ")
