"""What newuser-u's pass over cost-model profiles found (loading, ``profile build``), each by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fairsim.cli import main
from fairsim.costmodel import PROFILE_DIR, load_profile
from fairsim.errors import ProfileError

PRIOR = PROFILE_DIR / "a6000-llama3.1-8b-vllm-prior.json"


def prior_text() -> str:
    return json.dumps(json.loads(PRIOR.read_text()))


@pytest.mark.parametrize("old,new,message", [
    ('"a_s": 0.00567', '"a_s": 1' + "0" * 400,
     "'coefficients.a_s' must be a finite number >= 0 (s), got a whole number of 401 digits"),
    ('"device_memory_gib": 48.0', '"device_memory_gib": 1' + "0" * 400,
     "'kv_capacity.device_memory_gib' must be a finite number, got a whole number of 401 digits"),
    ('"kv_bytes_per_token": 131072', '"kv_bytes_per_token": 1' + "0" * 400,
     "'kv_capacity.kv_bytes_per_token' must be a finite number, got a whole number of 401 digits"),
    ('"a_s": 0.00567', '"a_s": 1' + "0" * 5000,
     "a whole number of more digits than Python reads (at most 4,300; reading it as a profile)"),
])
def test_a_whole_number_past_a_float_is_named_not_an_internal_error(tmp_path, capsys, old, new, message):
    # Was: a JSON integer past a float's range (10**400) ended in "internal error ... OverflowError"
    # (exit 1); one of 5,001 digits printed Python's digit-limit message without naming the file.
    path = tmp_path / "p.json"
    text = prior_text()
    assert old in text
    path.write_text(text.replace(old, new))
    with pytest.raises(ProfileError) as exc:
        load_profile(path)
    assert str(exc.value) == f"{path}: {message}"
    assert main(["run", "--policy", "fcfs", "--profile", str(path), "--max-requests", "2"]) == 2
    err = capsys.readouterr().err
    assert f"fairsim: error: {path}: {message}" in err and "internal error" not in err


def test_aiconfigurator_tp_that_does_not_split_the_heads_exits_2(tmp_path, capsys):
    # Was: --tp 3 on Llama-3.1-8B (32 attention heads) ended in "internal error ... AssertionError:
    # num_heads 32 should be divisible by tp_size 3" (exit 1): the SDK checks with an assert.
    pytest.importorskip("aiconfigurator_core")
    out = tmp_path / "p.json"
    assert main(["profile", "build", "--from", "aiconfigurator", "--system", "h200_sxm", "--tp", "3",
                 "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert ("fairsim: error: aiconfigurator-core cannot build meta-llama/Meta-Llama-3.1-8B at --tp 3 on h200_sxm "
            "vLLM 0.24.0: num_heads 32 should be divisible by tp_size 3") in err
    assert "internal error" not in err and not out.exists()


def write_prior(path: Path, **changes) -> Path:
    data = json.loads(PRIOR.read_text())
    for key, change in changes.items():
        change(data) if callable(change) else data.__setitem__(key, change)
    path.write_text(json.dumps(data))
    return path


def longer_table(data):
    data["idle_prefill"]["prompt_tokens"].append(10**15)
    data["idle_prefill"]["seconds"].append(1e9)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("changes,message", [
    # Was: loading never ended (the T_idle check costed 5e11 chunks of 2,048 tokens one by one).
    ({"table": longer_table},
     "'idle_prefill.prompt_tokens[135]'=1000000000000000: lengths must be at most 2,147,483,647 tokens "
     "(vLLM keeps token positions in int32)"),
    # Was: accepted, as was 10**400.
    ({"budget_tokens": 2**31},
     "'budget_tokens' must be at most 2,147,483,647 tokens (vLLM's int32 step offsets, the bound of --budget), "
     "got 2147483648"),
    ({"max_model_len": 10**400}, "'max_model_len' must be from 2 to 2,147,483,647 tokens, got 1" + "0" * 400),
    # Was: "'max_model_len' must be >= 1 token, got 0", while 1 is refused too (by another message).
    ({"max_model_len": 0}, "'max_model_len' must be from 2 to 2,147,483,647 tokens, got 0"),
    ({"max_model_len": 1}, "'max_model_len' must be from 2 to 2,147,483,647 tokens, got 1"),
])
def test_token_counts_of_a_profile_are_bounded(tmp_path, changes, message):
    path = write_prior(tmp_path / "p.json", **changes)
    with pytest.raises(ProfileError) as exc:
        load_profile(path)
    assert str(exc.value) == f"{path}: {message}"


def test_token_counts_at_the_bound_load(tmp_path):
    path = write_prior(tmp_path / "p.json", max_model_len=2**31 - 1)
    assert load_profile(path).max_model_len == 2**31 - 1


def test_llmservingsim_build_says_where_it_leaves_the_tables(tmp_path, capsys):
    # Was: the command printed the fit and its errors only; that 37 of the 148 grid points lie
    # outside the tables (so the pair slope k is extrapolated past ~2k context) and that T_idle
    # from 4,096 tokens on is the fitted model's were in the file's metadata alone.
    from calibration.llmservingsim import TABLES

    if not (TABLES / "layers.csv").is_file():
        pytest.skip("LLMServingSim's tables are not beside this clone")
    out = tmp_path / "p.json"
    assert main(["profile", "build", "--from", "llmservingsim", "--out", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    meta = json.loads(out.read_text())["metadata"]
    assert meta["grid_points_left_out"] == 37 and len(meta["points"]) == 111
    assert (f"left out: 37 grid points the source does not cover (the fit extrapolates to them); "
            f"{meta['range_note']}") in lines
    assert ("T_idle: T_idle from the source at 8 lengths up to 2048 tokens; the fitted model's chunked cold "
            "prefill at the 63 it has no point for, from 4096 tokens") in lines
    assert lines[-1] == f"wrote {out}"


def test_idle_table_note_names_the_lengths_the_source_gave(tmp_path, capsys):
    # Was: "T_idle from the source up to 15 tokens; from 16 tokens on the fitted model's ..." at
    # --budget 1, where the source (one-step prompts only) gave no point of the table at all; and
    # "up to 4095 tokens" at the default budget, where its longest point is 2,048 tokens.
    from calibration.llmservingsim import TABLES

    if not (TABLES / "layers.csv").is_file():
        pytest.skip("LLMServingSim's tables are not beside this clone")
    out = tmp_path / "p.json"
    assert main(["profile", "build", "--from", "llmservingsim", "--budget", "1", "--out", str(out)]) == 0
    note = json.loads(out.read_text())["metadata"]["idle_table_note"]
    assert note == ("T_idle is the fitted model's chunked cold prefill at all 71 lengths (the source has no "
                    "point for any of them)")
    shipped = load_profile("a6000-llama3.1-8b-llmservingsim")
    assert shipped.metadata["idle_table_note"].startswith("T_idle from the source at 8 lengths up to 2048 tokens")
    assert shipped.idle_prompt_tokens[7] == 2048 and shipped.idle_prompt_tokens[8] == 4096


def test_a_widened_idle_tolerance_keeps_the_note_on_modelled_points(tmp_path):
    # Was: save_built_profile replaced metadata.idle_table_note, so a built profile whose table
    # needed a wider tolerance lost the note saying which T_idle points are the fitted model's.
    from calibration.grid import save_built_profile
    from fairsim.costmodel import Profile

    note = "T_idle from the source at 1 lengths up to 100 tokens; the fitted model's chunked cold prefill at the 1"
    p = Profile("p", "measured", 0.01, 1e-4, 0.0, 0.0, (100, 1000), (0.04, 0.22), 2048, {"idle_table_note": note})
    warned = []
    # cold prefill by the model: 0.02 s at 100 tokens (table 0.04: 100 % apart), 0.11 s at 1,000 (100 %)
    assert save_built_profile(p, tmp_path / "p.json", warn=warned.append) == 1.05
    meta = json.loads((tmp_path / "p.json").read_text())["metadata"]
    wider = ("the T_idle table differs from the fitted coefficients by up to 100.0 % (more than 25 %); written "
             "with idle_table_tolerance=1.05")
    assert meta["idle_table_note"] == f"{note}; {wider}"
    assert warned == [f"p: {wider}"]
