"""--max-model-len and the shipped long-context prior (fairsim/profiles/build_long_context_prior.py)."""

from __future__ import annotations

import json

import pytest

from fairsim.cli import main
from fairsim.costmodel import PROFILE_DIR, builtin_profiles, load_profile
from fairsim.profiles.build_long_context_prior import NAME, build

LONG = "h200-qwen2.5-7b-1m-vllm-prior"


def test_shipped_long_context_profile_equals_its_construction():
    assert NAME == LONG
    assert json.loads((PROFILE_DIR / f"{LONG}.json").read_text()) == build()


def test_long_context_profile_figures():
    p = load_profile(LONG)
    assert p.kind == "prior" and p.metadata["label"].startswith("PRIOR")
    assert p.max_model_len == 1_010_000
    # 28 layers x (q 3584x3584+3584, k and v 3584x512+512 each, o 3584x3584, MLP 3 x 3584 x 18944,
    # two norms) + final norm + two 152,064 x 3,584 embeddings.
    layer = (3584 * 3584 + 3584) + 2 * (3584 * 512 + 512) + 3584 * 3584 + 3 * 3584 * 18944 + 2 * 3584
    assert 28 * layer + 3584 + 2 * 152064 * 3584 == 7_615_616_512
    assert p.kv_capacity.kv_bytes_per_token == 2 * 28 * 4 * 128 * 2 == 57_344
    # (141 x 0.92 - 14.19 - 1.0) GiB / 57,344 bytes = 2,144,525.17 tokens.
    assert p.kv_capacity_tokens == 2_144_525
    # b: the H100 8B per-token time x the non-embedding parameter ratio.
    assert p.b_s_per_token == pytest.approx(17.25086436834028e-6 * 6_525_618_176 / 6_979_588_096, rel=1e-9)


@pytest.mark.parametrize("name", builtin_profiles())
def test_every_shipped_profile_holds_one_max_length_request(name):
    p = load_profile(name)  # vLLM refuses to start otherwise (check_enough_kv_cache_memory)
    if p.kv_capacity is not None and p.max_model_len is not None:
        assert p.kv_capacity_tokens >= p.max_model_len


@pytest.fixture()
def long_trace(tmp_path):
    path = tmp_path / "long.jsonl"
    lengths = [1000, 200_000, 791_000, 5000]
    path.write_text("".join(json.dumps({"timestamp": i * 1000, "input_length": n, "output_length": 1,
                                        "hash_ids": [], "request_id": f"r{i}"}) + "\n"
                            for i, n in enumerate(lengths)))
    return path


def _run(trace, *extra):
    return main(["run", "--trace", str(trace), "--policy", "fcfs", "--format", "json", *extra])


def test_a_791k_prompt_runs_on_the_long_context_profile(long_trace, capsys):
    assert _run(long_trace) == 2
    assert "long.jsonl:2: field 'input_length'" in capsys.readouterr().err
    assert _run(long_trace, "--profile", LONG) == 0
    assert json.loads(capsys.readouterr().out)["fcfs"]["requests"] == 4


def test_max_model_len_sets_the_limit_skip_long_drops_by(long_trace, capsys, tmp_path):
    out = tmp_path / "out"
    assert _run(long_trace, "--profile", LONG, "--max-model-len", "100000", "--skip-long", "--out", str(out)) == 0
    captured = capsys.readouterr()
    assert "dropped 2 requests with prompts of 100,000 tokens or more (--max-model-len 100,000)" in captured.err
    assert json.loads(captured.out)["fcfs"]["requests"] == 2
    info = json.loads((out / "run.json").read_text())
    assert info["max_model_len"] == 100_000 and info["skipped_long"] == 2


def test_a_prompt_over_max_model_len_names_the_limit_once(long_trace, capsys):
    assert _run(long_trace, "--profile", LONG, "--max-model-len", "100000") == 2
    err = capsys.readouterr().err
    assert ("does not fit --max-model-len 100,000 (vLLM rejects a prompt of max_model_len tokens or more); "
            "--skip-long drops such requests") in err, err


def test_max_model_len_above_the_kv_cache_is_refused_as_vllm_does(long_trace, capsys):
    # h200-llama3.1-8b (the prior's memory figures, kept by the AIConfigurator profile): 931,921 KV tokens = 1,820 blocks of 512 (the trace's block) = 931,840 tokens.
    args = ["--profile", "h200-llama3.1-8b-vllm-aiconfigurator", "--skip-long"]
    assert _run(long_trace, *args, "--max-model-len", "931841") == 2
    err = capsys.readouterr().err
    assert "--max-model-len 931,841: one request of that length needs 1,821 KV blocks" in err
    assert "Use --max-model-len 931,840 or less" in err
    assert "above the max_model_len of profile h200-llama3.1-8b-vllm-aiconfigurator (131,072 tokens" in err
    assert _run(long_trace, *args, "--max-model-len", "931840") == 0
    assert json.loads(capsys.readouterr().out)["fcfs"]["requests"] == 4


@pytest.mark.parametrize("value", ["1", "0", "-5", str(2**31)])
def test_bad_max_model_len_is_named_exit_2(long_trace, capsys, value):
    assert _run(long_trace, "--max-model-len", value) == 2
    err = capsys.readouterr().err
    assert f"--max-model-len {value}: need an integer number of tokens from 2 to 2,147,483,647" in err


def test_max_model_len_not_an_integer_exit_2(long_trace, capsys):
    with pytest.raises(SystemExit) as exc:
        _run(long_trace, "--max-model-len", "1e6")
    assert exc.value.code == 2
    assert "--max-model-len: invalid int value: '1e6'" in capsys.readouterr().err
