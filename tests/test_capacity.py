"""KV capacity from the profile, --kv-tokens, max_model_len / --skip-long, offered load, --target-load."""

import json
import math
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairsim.cli import main
from fairsim.costmodel import PROFILE_DIR, Profile, load_profile, profile_from_dict
from fairsim.errors import CapacityError, ProfileError, PromptTooLongError
from fairsim.kvcapacity import KVCapacity, kv_bytes_per_token
from fairsim.sim.capacity import resolve_capacity, with_profile_capacity
from fairsim.sim.config import EngineConfig
from fairsim.traces import load_mooncake, scale_time
from fairsim.traces.limits import drop_too_long
from fairsim.traces.offered import offered_load, time_scale_for_load
from fairsim.types import Request

CONVERSATION = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "traces" / "conversation_trace.jsonl"


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def prior_json() -> dict:
    return json.loads((PROFILE_DIR / "a6000-llama3.1-8b-vllm-prior.json").read_text())


class TestFormula:
    def test_kv_bytes_per_token_by_hand(self):
        # Llama-3.1-8B: 2 x 32 layers x 8 KV heads x 128 dims x 2 bytes = 128 KiB.
        assert kv_bytes_per_token(32, 8, 128, 2) == 131_072
        # Llama-3.1-70B on 2 GPUs: 2 x 80 x 8 x 128 x 2 = 320 KiB, half per GPU.
        assert kv_bytes_per_token(80, 8, 128, 2, tensor_parallel=2) == 163_840
        with pytest.raises(ValueError, match="tensor_parallel=3"):
            kv_bytes_per_token(1, 1, 1, 1, tensor_parallel=3)

    def test_capacity_by_hand(self):
        # 10 GiB x 0.5 - 2 - 1 = 2 GiB of KV at 1 KiB per token = 2 Mi tokens.
        assert KVCapacity(10.0, 0.5, 2.0, 1.0, 1024).tokens == 2 * 1024 * 1024
        # The A6000 prior: 48 x 0.92 - 14.96 - 1.0 = 28.2 GiB = 28.2 x 8192 tokens of 128 KiB.
        assert KVCapacity(48.0, 0.92, 14.96, 1.0, 131_072).tokens == 231_014

    def test_no_memory_left(self):
        with pytest.raises(ProfileError, match="leaves no memory"):
            KVCapacity(16.0, 0.9, 15.0, 1.0, 131_072)

    def test_shipped_profiles(self):
        prior = load_profile()
        assert prior.kv_capacity_tokens == 231_014 and prior.max_model_len == 131_072
        assert prior.kv_capacity.kv_bytes_per_token == 128 * 1024
        cpu = load_profile("cpu-tiny-llama-vllm-measured")
        # VLLM_CPU_KVCACHE_SPACE=1 GiB / (2 x 2 layers x 2 KV heads x 64 dims x 2 bytes) = 1 Mi tokens,
        # 8192 blocks of 128 (the engine's block size).
        assert cpu.kv_capacity_tokens == 1_048_576 and cpu.max_model_len == 8193


class TestProfileSchema:
    def test_roundtrip_keeps_fields(self):
        prior = load_profile()
        again = profile_from_dict(prior.to_dict())
        assert again.kv_capacity == prior.kv_capacity and again.max_model_len == 131_072

    def test_missing_field_named(self):
        data = prior_json()
        del data["kv_capacity"]["weights_gib"]
        with pytest.raises(ProfileError, match=r"x.json: missing key 'kv_capacity.weights_gib'"):
            profile_from_dict(data, "x.json")

    def test_mistyped_field_named(self):
        data = prior_json()
        data["kv_capacity"]["gpu_memory_utilization"] = "0.9"
        with pytest.raises(ProfileError, match="'kv_capacity.gpu_memory_utilization' must be a number"):
            profile_from_dict(data, "x.json")
        data = prior_json()
        data["max_model_len"] = 1.5
        with pytest.raises(ProfileError, match="'max_model_len' must be an integer"):
            profile_from_dict(data, "x.json")

    def test_absent_is_none(self):
        data = prior_json()
        del data["kv_capacity"], data["max_model_len"]
        p = profile_from_dict(data)
        assert p.kv_capacity_tokens is None and p.max_model_len is None


def req(i, t, n, hashes=(), block=512):
    return Request(f"r{i}", t, n, tuple(hashes), block)


class TestCapacityResolution:
    def test_tokens_floor_to_blocks_and_survive_block_change(self):
        reqs = [req(0, 0.0, 600)]
        assert resolve_capacity(reqs, EngineConfig(block_size=512, kv_tokens=10_000)) == (512, 19)
        assert resolve_capacity(reqs, EngineConfig(block_size=16, kv_tokens=10_000)) == (16, 625)

    def test_one_of_three(self):
        with pytest.raises(ValueError, match="not kv_blocks and kv_tokens"):
            EngineConfig(kv_blocks=4, kv_tokens=100)

    def test_too_small_names_the_flags(self):
        with pytest.raises(CapacityError, match="--kv-tokens, --kv-blocks to at least 4, or --kv-fraction"):
            resolve_capacity([req(0, 0.0, 2000)], EngineConfig(block_size=512, kv_tokens=1024))

    def test_profile_default_and_fallback(self):
        prior = load_profile()
        config, source = with_profile_capacity(EngineConfig(), prior)
        assert config.kv_tokens == 231_014 and "profile kv_capacity" in source
        explicit, _ = with_profile_capacity(EngineConfig(kv_blocks=7), prior)
        assert explicit.kv_blocks == 7 and explicit.kv_tokens is None
        data = prior_json()
        del data["kv_capacity"]
        bare = profile_from_dict(data)
        config, source = with_profile_capacity(EngineConfig(), bare)
        assert config == EngineConfig() and "has no kv_capacity" in source


def toy_profile() -> Profile:
    return Profile("toy", "prior", a_s=0.01, b_s_per_token=0.001, k_s_per_pair=1e-6, d_s_per_request=0.002,
                   idle_prompt_tokens=(1, 2), idle_seconds=(0.0, 0.0), budget_tokens=100)


TOY = [req(0, 0.0, 150, (1, 2, 3), 50), req(1, 10.0, 50, (1,), 50), req(2, 20.0, 100, (7, 8), 50),
       req(3, 70.0, 300, (), 50)]


class TestOfferedLoad:
    def test_mean_by_hand(self):
        load = offered_load(TOY, toy_profile(), budget_tokens=100, window_s=30.0)
        # 600 tokens -> 6 full steps (0.06 s) + 0.6 s per-token + pairs L^2/2 = 62,500 (0.0625 s)
        # + chunks 2+1+1+3 = 7 (0.014 s) = 0.7365 s busy over a 70 s span.
        assert load.busy_s == pytest.approx(0.7365)
        assert load.load == pytest.approx(0.7365 / 70)
        assert load.capacity_tokens_per_s == pytest.approx(600 / 0.7365)

    def test_ideal_reuse_by_hand(self):
        load = offered_load(TOY, toy_profile(), budget_tokens=100, window_s=30.0)
        # r1's one 50-token block was r0's, but a hit is whole blocks within L - 1 = 49 tokens
        # (vLLM computes the last token): none, so the ideal work is the cold work.
        assert load.ideal_busy_s == pytest.approx(0.7365)
        # A 60-token r1 hits that block: 10 new tokens on 50 cached, pairs (60^2 - 50^2)/2 = 550.
        # Tokens 150 + 10 + 100 + 300 = 560 (6 steps); chunks 2 + 1 + 1 + 3.
        longer = [TOY[0], req(1, 10.0, 60, (1,), 50), *TOY[2:]]
        load = offered_load(longer, toy_profile(), budget_tokens=100, window_s=30.0)
        busy = 0.01 * 6 + 0.001 * 560 + 1e-6 * (11_250 + 550 + 5_000 + 45_000) + 0.002 * 7
        assert load.ideal_busy_s == pytest.approx(busy)

    def test_busiest_window_by_hand(self):
        load = offered_load(TOY, toy_profile(), budget_tokens=100, window_s=30.0)
        # [0, 30): 300 tokens, 3 steps, pairs 17,500, 4 chunks -> 0.3555 s.
        # [70, 100): 300 tokens, 3 steps, pairs 45,000, 3 chunks -> 0.381 s: the busiest.
        assert load.peak_start_s == 70.0
        assert load.peak_load == pytest.approx(0.381 / 30)

    def test_budget_matters(self):
        small = offered_load(TOY, toy_profile(), budget_tokens=10)
        large = offered_load(TOY, toy_profile(), budget_tokens=1000)
        assert small.busy_s > large.busy_s  # more steps, more per-step overhead

    @settings(max_examples=30, deadline=None)
    @given(target=st.floats(0.05, 5.0), budget=st.integers(16, 4096))
    def test_target_load_round_trip(self, target, budget):
        scale = time_scale_for_load(TOY, toy_profile(), budget, target)
        assert offered_load(scale_time(TOY, scale), toy_profile(), budget).load == pytest.approx(target, abs=1e-6)

    def test_colocated_counts_decode_by_hand(self):
        import dataclasses

        prof = dataclasses.replace(toy_profile(), e_s_per_decode_ctx_token=1e-7, f_s_per_decode=1e-4)
        reqs = [dataclasses.replace(req(0, 0.0, 100), output_len=3), dataclasses.replace(req(1, 10.0, 100), output_len=3)]
        load = offered_load(reqs, prof, budget_tokens=100, window_s=30.0, colocated=True)
        # Prefill: 200 tokens + 4 decode tokens -> ceil(204 / 100) = 3 steps (0.03 s), 0.2 s per-token,
        # pairs 2 x 5,000 (0.01 s), chunks 2 (0.004 s). Decode per request (o - 1 = 2, L = 100):
        # 2 x (0.001 + 0.002 + 1e-4 + 0.5e-6) + (1e-6 + 1e-7) x (2 x 100 + 1) = 0.0066221 s.
        decode = 2 * (0.001 + 0.002 + 1e-4 + 0.5e-6) + (1e-6 + 1e-7) * 201
        assert load.busy_s == pytest.approx(0.03 + 0.2 + 0.01 + 0.004 + 2 * decode)
        assert load.colocated and "decode counted" in load.describe()
        prefill_only = offered_load(reqs, prof, budget_tokens=100, window_s=30.0)
        assert prefill_only.busy_s == pytest.approx(0.02 + 0.2 + 0.01 + 0.004)  # 200 tokens: 2 steps
        scale = time_scale_for_load(reqs, prof, 100, 0.5, colocated=True)
        assert offered_load(scale_time(reqs, scale), prof, 100, colocated=True).load == pytest.approx(0.5)

    def test_target_load_needs_a_span(self):
        with pytest.raises(ValueError, match="arrive at one instant"):
            time_scale_for_load([req(0, 1.0, 10), req(1, 1.0, 20)], toy_profile(), 100, 0.5)


class TestModelLen:
    def test_drop_and_error(self):
        reqs = [Request("a", 0.0, 99, labels={"_line": 1}), Request("b", 0.0, 100, labels={"_line": 2}),
                Request("c", 0.0, 150)]
        kept, dropped = drop_too_long(reqs, 100, "t.jsonl", skip_long=True)
        assert [r.request_id for r in kept] == ["a"] and [r.request_id for r in dropped] == ["b", "c"]
        with pytest.raises(PromptTooLongError, match=r"^t.jsonl:2: field 'input_length': prompt of 100 tokens"):
            drop_too_long(reqs, 100, "t.jsonl")
        with pytest.raises(PromptTooLongError, match=r"^t.jsonl: request 'c'"):
            drop_too_long(reqs[2:], 100, "t.jsonl")
        assert drop_too_long(reqs, None, "t.jsonl") == (reqs, [])

    def test_mooncake_records_lines(self, tmp_path):
        path = tmp_path / "t.jsonl"
        path.write_text('{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}\n'
                        '{"timestamp": 1, "input_length": 10, "output_length": 1, "hash_ids": [2]}\n')
        trace = load_mooncake(path)
        assert [trace.locations[r.request_id] for r in trace.requests] == [1, 2]
        assert all("_line" not in r.labels for r in trace.requests)  # labels stay the trace's own


@pytest.fixture
def short_profile(tmp_path):
    data = prior_json()
    data["max_model_len"] = 1000
    path = tmp_path / "short.json"
    path.write_text(json.dumps(data))
    return path


@pytest.fixture
def long_trace(tmp_path):
    path = tmp_path / "long.jsonl"
    lines = [(0, 600), (100, 1000), (200, 1200), (300, 999)]
    path.write_text("".join(json.dumps({"timestamp": t, "input_length": n, "output_length": 1,
                                        "hash_ids": list(range(i * 10, i * 10 + math.ceil(n / 512)))}) + "\n"
                            for i, (t, n) in enumerate(lines)))
    return path


class TestCli:
    @pytest.mark.skipif(not CONVERSATION.exists(), reason="shared conversation trace not present")
    @pytest.mark.parametrize("max_requests", [500, 2000])
    def test_target_load_and_capacity_independent_of_window(self, capsys, tmp_path, max_requests):
        code, out, err = run_cli(capsys, "run", "--trace", CONVERSATION, "--target-load", "0.9",
                                 "--max-requests", max_requests, "--policy", "fcfs", "--format", "json",
                                 "--out", tmp_path)
        assert code == 0, err
        run = json.loads((tmp_path / "run.json").read_text())
        assert run["offered_load_figures"]["load"] == pytest.approx(0.9, abs=1e-6)
        assert run["target_load"] == 0.9 and run["time_scale"] > 1
        assert "-> load 0.90 " in err and "--target-load 0.9: time scale" in err
        row = json.loads(out)["fcfs"]
        assert row["requests"] == max_requests
        assert (row["kv_tokens"], row["kv_blocks"], row["block_size"]) == (451 * 512, 451, 512)
        assert row["profile"] == "a6000-llama3.1-8b-vllm-prior"

    def test_table_names_profile_and_capacity(self, capsys, tmp_path):
        code, out, _ = run_cli(capsys, "run", "--policy", "fcfs", "--max-requests", "50", "--kv-tokens",
                               "100000", "--block-size", "256", "--out", tmp_path)
        assert code == 0
        assert ("profile a6000-llama3.1-8b-vllm-prior; KV cache 390 blocks x 256 tokens = 99,840 tokens "
                "(set as 100,000 tokens); block size 256") in out
        meta = json.loads(pq.read_schema(tmp_path / "requests-fcfs.parquet").metadata[b"fairsim"])
        assert (meta["kv_blocks"], meta["kv_tokens"], meta["block_size"]) == (390, 99_840, 256)
        run = json.loads((tmp_path / "run.json").read_text())
        assert run["engine"]["kv_blocks"] == 390 and run["kv_tokens"] == 100_000
        assert run["offered_load_figures"]["window_s"] == 60.0

    def test_profile_without_capacity_says_so(self, capsys, tmp_path):
        data = prior_json()
        del data["kv_capacity"]
        path = tmp_path / "bare.json"
        path.write_text(json.dumps(data))
        code, out, _ = run_cli(capsys, "run", "--policy", "fcfs", "--max-requests", "50", "--profile", path)
        assert code == 0 and "has no kv_capacity, so 0.3 x the trace's reusable content" in out

    def test_too_long_is_an_error_naming_the_line(self, capsys, short_profile, long_trace):
        code, _, err = run_cli(capsys, "run", "--trace", long_trace, "--profile", short_profile)
        assert code == 2
        assert (f"fairsim: error: {long_trace}:2: field 'input_length': prompt of 1,000 tokens does not "
                f"fit max_model_len of profile a6000-llama3.1-8b-vllm-prior (1,000 tokens") in err
        assert "--skip-long" in err

    def test_skip_long_counts(self, capsys, short_profile, long_trace, tmp_path):
        code, out, err = run_cli(capsys, "run", "--trace", long_trace, "--profile", short_profile,
                                 "--skip-long", "--format", "json", "--out", tmp_path / "o")
        assert code == 0 and json.loads(out)["fairway"]["requests"] == 2
        assert "--skip-long dropped 2 requests" in err
        assert json.loads((tmp_path / "o" / "run.json").read_text())["skipped_long"] == 2

    def test_target_load_excludes_time_scale(self, capsys):
        with pytest.raises(SystemExit) as exc:
            main(["run", "--target-load", "0.9", "--time-scale", "2"])
        assert exc.value.code == 2
        assert "not allowed with argument" in capsys.readouterr().err

    @pytest.mark.parametrize("argv, message", [
        (["--target-load", "0"], "--target-load 0: need a finite load > 0"),
        (["--load-window", "-1"], "--load-window -1: need a finite number of seconds >= 0.001"),
        (["--kv-tokens", "0"], "--kv-tokens 0: need >= 1 token"),
    ])
    def test_bad_values(self, capsys, argv, message):
        code, _, err = run_cli(capsys, "run", "--max-requests", "20", *argv)
        assert code == 2 and message in err


def test_sweep_grid_over_kv_tokens(tmp_path):
    from fairsim.sweep import run_sweep

    spec = {"scenarios": [{"name": "mixed", "params": {"duration_s": 20.0}}], "seeds": [0],
            "policies": ["fcfs"], "engine": {"kv_tokens": [60_000, 120_000]}}
    summary = run_sweep(spec, tmp_path / "s", workers=1, progress=False, log=lambda s: None)
    asked = sorted(json.loads(e)["kv_tokens"] for e in summary["engine"])
    got = summary.sort_values("kv_tokens")
    assert list(got["kv_blocks"]) == [t // b for t, b in zip(asked, got["block_size"])]
    assert list(got["kv_tokens"]) == list(got["kv_blocks"] * got["block_size"])
    assert set(got["profile"]) == {"a6000-llama3.1-8b-vllm-prior"}


def fake_llm(blocks, block_size, kv_bytes=None, override=None, weights=None, util=0.92):
    from types import SimpleNamespace as NS

    model = NS(get_num_layers=lambda p: 32, get_num_kv_heads=lambda p: 8, get_head_size=lambda: 128,
               dtype=NS(itemsize=2), max_model_len=131_072)
    cache = NS(num_gpu_blocks=blocks, block_size=block_size, kv_cache_memory_bytes=kv_bytes,
               num_gpu_blocks_override=override, gpu_memory_utilization=util, cache_dtype="auto")
    runner = NS(model_memory_usage=weights) if weights is not None else None
    core = NS(model_executor=NS(driver_worker=NS(worker=NS(model_runner=runner))))
    return NS(llm_engine=NS(vllm_config=NS(cache_config=cache, model_config=model, parallel_config=None),
                            engine_core=NS(engine_core=core)))


class TestCalibrationCapacity:
    """calibrate records the pool vLLM allocated, so the profile's capacity equals it."""

    def test_gpu_memory_sized(self):
        from calibration.kv import engine_kv_capacity

        gib = 2**30
        cap, max_len, notes = engine_kv_capacity(fake_llm(14_000, 16, weights=int(14.96 * gib)), 48 * gib)
        assert cap.tokens == 14_000 * 16 == notes["kv_cache_tokens"] and max_len == 131_072
        assert (cap.device_memory_gib, cap.gpu_memory_utilization) == (48.0, 0.92)
        assert cap.weights_gib == pytest.approx(14.96, abs=1e-9)
        # 48 x 0.92 - 14.96 GiB - 14,000 x 16 tokens x 128 KiB (27.34375 GiB) = 1.85625 GiB reserve.
        assert cap.activation_reserve_gib == pytest.approx(1.85625, abs=1e-6)

    def test_explicit_kv_space(self):
        from calibration.kv import engine_kv_capacity

        cap, _, notes = engine_kv_capacity(fake_llm(8192, 16, kv_bytes=2**34), None)
        assert cap.tokens == 8192 * 16 and cap.weights_gib == 0 and "explicit" in notes["kv_capacity_source"]
