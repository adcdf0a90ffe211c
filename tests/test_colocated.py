"""Colocated mode (prefill + decode on one engine): hand-computed steps, invariants, metrics."""

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from fairsim.metrics import decode_summary, meets_slo, parse_slo
from fairsim.policies import make_policy
from fairsim.sim import EngineConfig, simulate
from fairsim.sim.keys import blocks_for
from fairsim.types import Request
from tests.strategies import BLOCK, profiles, traces
from tests.utils import constant_profile

PROFILE = constant_profile(step_s=1.0)


def req(rid, arrival, prompt, output, hashes=()):
    return Request(rid, arrival, prompt, tuple(hashes), 4, output, {})


def by_id(result):
    return result.requests.set_index("request_id")


def colocated(**kw):
    return EngineConfig(block_size=4, mode="colocated", **kw)


class TestHandComputed:
    def test_two_requests_step_by_step(self):
        # Budget 8, 1 s steps. Step 0 [0,1): A 6 prompt tokens, B 2 (budget left). A's prefill is
        # done: first token at 1. Step 1: A decodes 1, B its last 3 -> B's first token at 2.
        # Step 2: both decode 1; A has 3 tokens, B 2: both finish at 3.
        reqs = [req("A", 0.0, 6, 3), req("B", 0.0, 5, 2)]
        res = simulate(reqs, make_policy("fcfs"), PROFILE, colocated(budget_tokens=8, kv_blocks=20))
        t = by_id(res)
        assert res.steps["tokens"].tolist() == [8, 4, 2]
        assert res.steps["decode_tokens"].tolist() == [0, 1, 2]
        assert t.loc["A", "first_token_s"] == 1.0 and t.loc["B", "first_token_s"] == 2.0
        assert t.loc["A", "finish_s"] == 3.0 and t.loc["B", "finish_s"] == 3.0
        assert t.loc["A", "ttft_s"] == 1.0 and t.loc["A", "e2e_s"] == 3.0
        # vLLM's TPOT = (e2e - ttft) / (output_tokens - 1).
        assert t.loc["A", "tpot_s"] == pytest.approx((3 - 1) / 2)
        assert t.loc["B", "tpot_s"] == pytest.approx((3 - 2) / 1)
        assert t.loc["A", "output_tokens"] == 3 and t.loc["B", "finish_step"] == 2
        gaps = res.token_gaps
        a_row = int(np.flatnonzero(res.requests["request_id"] == "A")[0])
        assert gaps[gaps["request_row"] == a_row]["itl_s"].tolist() == [1.0, 1.0]
        assert len(gaps) == (3 - 1) + (2 - 1)

    def test_preemption_of_the_latest_admitted(self):
        # 4 blocks of 4 tokens, budget 8. A and B (4-token prompts, 6 outputs) each need 3 blocks
        # at their end (4 + 5 tokens). Steps 0-4 fit (2 blocks each). Step 5: A's 9th token needs
        # a 3rd block, none is free -> B (admitted last) is preempted, no admission that step.
        # B's freed blocks go tail first to the free queue, so A's new block evicts B's 2nd block:
        # B resumes at step 6 hitting its 1st block (4 tokens), recomputes 5 (prompt + outputs).
        reqs = [req("A", 0.0, 4, 6), req("B", 0.0, 4, 6)]
        res = simulate(reqs, make_policy("fcfs"), PROFILE, colocated(budget_tokens=8, kv_blocks=4))
        t = by_id(res)
        assert res.steps["tokens"].tolist() == [8, 2, 2, 2, 2, 1, 5]
        assert res.steps["decode_tokens"].tolist() == [0, 2, 2, 2, 2, 1, 0]
        assert res.steps["preemptions"].tolist() == [0, 0, 0, 0, 0, 1, 0]
        assert t.loc["A", "finish_s"] == 6.0 and t.loc["A", "preemptions"] == 0
        assert t.loc["B", "finish_s"] == 7.0 and t.loc["B", "preemptions"] == 1
        assert t.loc["B", "discarded_tokens"] == 8 and t.loc["B", "resume_cached_tokens"] == 4
        assert t.loc["B", "tpot_s"] == pytest.approx((7 - 1) / 5)
        b_row = int(np.flatnonzero(res.requests["request_id"] == "B")[0])
        gaps = res.token_gaps
        assert gaps[gaps["request_row"] == b_row]["itl_s"].tolist() == [1.0, 1.0, 1.0, 1.0, 2.0]

    def test_max_num_seqs_caps_running(self):
        # One running sequence at a time: B waits until A has decoded all its tokens.
        reqs = [req("A", 0.0, 4, 3), req("B", 0.0, 4, 1)]
        res = simulate(reqs, make_policy("fcfs"), PROFILE, colocated(budget_tokens=8, kv_blocks=20, max_num_seqs=1))
        t = by_id(res)
        assert t.loc["A", "finish_s"] == 3.0
        assert t.loc["B", "first_scheduled_step"] == 3 and t.loc["B", "ttft_s"] == 4.0
        assert math.isnan(t.loc["B", "tpot_s"])

    def test_prefill_only_ignores_output_len(self):
        reqs = [req("A", 0.0, 6, 3), req("B", 0.0, 5, 2)]
        res = simulate(reqs, make_policy("fcfs"), PROFILE, EngineConfig(block_size=4, budget_tokens=8, kv_blocks=20))
        assert res.steps["tokens"].tolist() == [8, 3] and res.token_gaps is None
        assert "tpot_s" not in res.requests.columns

    def test_output_too_long_for_the_cache_is_refused(self):
        from fairsim.errors import CapacityError

        with pytest.raises(CapacityError, match="prompt and output"):
            simulate([req("A", 0.0, 4, 10)], make_policy("fcfs"), PROFILE, colocated(kv_blocks=2))


@st.composite
def colocated_runs(draw):
    base = draw(traces(max_requests=8))
    reqs = [Request(r.request_id, r.arrival_time, r.prompt_len, r.block_hashes, BLOCK,
                    draw(st.integers(1, 12)), {}) for r in base]
    longest = max(blocks_for(r.prompt_len + r.output_len - 1, BLOCK) for r in reqs)
    config = EngineConfig(budget_tokens=draw(st.sampled_from([3, 4, 8, 16, 64])),
                          max_num_seqs=draw(st.integers(1, 6)), block_size=BLOCK,
                          kv_blocks=longest + draw(st.integers(0, 6)), mode="colocated")
    policy = draw(st.sampled_from(["fcfs", "lpm", "fairway"]))
    return reqs, draw(profiles()), config, policy


@settings(max_examples=150, deadline=None)
@given(colocated_runs())
def test_colocated_invariants(run):
    reqs, profile, config, policy = run
    res = simulate(reqs, make_policy(policy, profile), profile, config)
    t, steps = res.requests, res.steps
    out = {r.request_id: r.output_len for r in reqs}
    prompt = {r.request_id: r.prompt_len for r in reqs}
    # Every request finishes exactly once, with all its output tokens, after its first token.
    assert len(t) == len(reqs) and t["request_id"].is_unique
    assert t["finish_s"].notna().all()
    assert (t["output_tokens"] == t["request_id"].map(out)).all()
    assert (t["first_token_s"] <= t["finish_s"]).all() and (t["arrival_s"] <= t["first_scheduled_s"]).all()
    # Token conservation: each request computes L + O - 1 tokens, minus its prefix hits, plus
    # what preemptions threw away (recomputed later).
    expected = (t["request_id"].map(prompt) + t["output_tokens"] - 1 - t["cached_tokens"]
                + t["discarded_tokens"] - t["resume_cached_tokens"]).sum()
    assert steps["tokens"].sum() == expected
    # Generated tokens after the first are decodes, unless a recompute after a preemption
    # covered them; each request's gaps number O - 1.
    assert steps["decode_tokens"].sum() <= (t["output_tokens"] - 1).sum()
    assert (t["discarded_tokens"] > 0).sum() <= t["preemptions"].sum()
    assert len(res.token_gaps) == (t["output_tokens"] - 1).sum()
    assert (steps["tokens"] <= config.budget_tokens).all()
    assert (steps["decode_tokens"] <= steps["requests"]).all()
    assert (steps["kv_blocks_used"] <= res.kv_blocks).all()
    assert (steps["running"] <= config.max_num_seqs).all()
    assert steps["preemptions"].sum() == t["preemptions"].sum()
    # TPOT is vLLM's (e2e - ttft) / (O - 1).
    many = t[t["output_tokens"] > 1]
    assert np.allclose(many["tpot_s"], (many["e2e_s"] - many["ttft_s"]) / (many["output_tokens"] - 1))


@settings(max_examples=60, deadline=None)
@given(colocated_runs())
def test_single_token_colocated_equals_prefill_only(run):
    reqs, profile, config, policy = run
    ones = [Request(r.request_id, r.arrival_time, r.prompt_len, r.block_hashes, BLOCK, 1, {}) for r in reqs]
    a = simulate(ones, make_policy(policy, profile), profile, config)
    b = simulate(ones, make_policy(policy, profile), profile,
                 EngineConfig(config.budget_tokens, config.max_num_seqs, BLOCK, config.kv_blocks))
    cols = list(b.requests.columns)
    assert a.requests[cols].equals(b.requests)
    assert a.steps.equals(b.steps)


def test_preemptions_under_pressure_and_all_finish():
    # 12 requests of 40-token prompts decoding 60 tokens each on 30 blocks of 4 tokens: each needs
    # 25 blocks at its end, so running sequences must preempt one another.
    reqs = [req(f"r{i}", 0.1 * i, 40, 60) for i in range(12)]
    res = simulate(reqs, make_policy("fcfs"), PROFILE, colocated(budget_tokens=64, kv_blocks=30))
    t = res.requests
    assert res.steps["preemptions"].sum() > 0 and t["preemptions"].sum() == res.steps["preemptions"].sum()
    assert t["finish_s"].notna().all() and (t["output_tokens"] == 60).all()
    assert (res.steps["kv_blocks_used"] <= 30).all()


class TestMetrics:
    def test_parse_slo(self):
        assert parse_slo("ttft=2,tpot=0.05") == {"ttft": 2.0, "tpot": 0.05}
        assert parse_slo(None) == {}
        for bad in ("ttft", "itl=1", "ttft=-1", "tpot=x"):
            with pytest.raises(ValueError, match="--slo"):
                parse_slo(bad)

    def test_goodput_and_rates(self):
        reqs = [req("A", 0.0, 6, 3), req("B", 0.0, 5, 2)]
        res = simulate(reqs, make_policy("fcfs"), PROFILE, colocated(budget_tokens=8, kv_blocks=20))
        # A: TTFT 1, TPOT 1; B: TTFT 2, TPOT 1. Span 3 s, 5 output tokens.
        s = decode_summary(res.requests, res.token_gaps, {"ttft": 1.5, "tpot": 1.0})
        assert s["goodput_share"] == 0.5 and s["goodput_rps"] == pytest.approx(1 / 3)
        assert s["output_tokens"] == 5 and s["output_tokens_per_s"] == pytest.approx(5 / 3)
        assert s["itl_max_s"] == 1.0 and s["e2e_max_s"] == 3.0 and s["tpot_p50_s"] == 1.0
        assert meets_slo(res.requests, {"tpot": 0.5}).tolist() == [False, False]


class TestCli:
    def _trace(self, tmp_path):
        import json

        path = tmp_path / "t.jsonl"
        rows = [{"timestamp": 100 * i, "input_length": 600 + 10 * i, "output_length": 5 + i,
                 "hash_ids": [0, 1 + i]} for i in range(6)]
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        return path

    def test_compare_colocated_json(self, tmp_path, capsys):
        import json

        from fairsim.cli import main

        rc = main(["compare", "--mode", "colocated", "--trace", str(self._trace(tmp_path)),
                   "--slo", "ttft=10,tpot=1", "--format", "json", "--out", str(tmp_path / "o")])
        assert rc == 0
        rows = json.loads(capsys.readouterr().out)
        for s in rows.values():
            assert s["output_tokens"] == sum(5 + i for i in range(6))
            assert s["decode_tokens"] <= s["output_tokens"] - 6
            assert 0 <= s["goodput_share"] <= 1 and s["tpot_p99_s"] >= s["tpot_p50_s"] > 0
        import pandas as pd

        t = pd.read_parquet(tmp_path / "o" / "requests-fcfs.parquet")
        assert {"first_token_s", "finish_s", "output_tokens", "preemptions", "tpot_s", "e2e_s"} <= set(t.columns)
        assert json.loads((tmp_path / "o" / "run.json").read_text())["mode"] == "colocated"

    def test_bad_options_exit_2(self, tmp_path, capsys):
        from fairsim.cli import main

        assert main(["compare", "--slo", "ttft=1"]) == 2
        assert main(["compare", "--mode", "colocated", "--slo", "ttft=0"]) == 2
        assert main(["run", "--mode", "colocated", "--trace", str(self._trace(tmp_path)), "--kv-blocks", "1"]) == 2
        err = capsys.readouterr().err
        assert "needs --mode colocated" in err and "must be a number of seconds > 0" in err
        assert "prompt and output" in err


    def test_output_capped_at_max_model_len_as_vllm(self, tmp_path, capsys):
        # vLLM v1 finishes a request once prompt + output tokens reach max_model_len (check_stop,
        # FINISHED_LENGTH_CAPPED): a 600-token prompt on a 1,000-token model yields 400 tokens.
        import json

        from fairsim.cli import main
        from fairsim.costmodel import PROFILE_DIR

        prof = json.loads((PROFILE_DIR / "a6000-llama3.1-8b-vllm-prior.json").read_text())
        prof["max_model_len"] = 1000
        (tmp_path / "p.json").write_text(json.dumps(prof))
        trace = tmp_path / "t.jsonl"
        trace.write_text(json.dumps({"timestamp": 0, "input_length": 600, "output_length": 900, "hash_ids": [1]})
                         + "\n" + json.dumps({"timestamp": 1, "input_length": 600, "output_length": 7,
                                               "hash_ids": [2]}) + "\n")
        argv = ["run", "--policy", "fcfs", "--trace", str(trace), "--profile", str(tmp_path / "p.json"),
                "--format", "json"]
        assert main(argv + ["--mode", "colocated"]) == 0
        out, err = capsys.readouterr()
        assert json.loads(out)["fcfs"]["output_tokens"] == 400 + 7
        assert "1 request asks for more output than the profile's max_model_len (1,000 tokens)" in err
        assert "first: 't:1'" in err
        assert main(argv) == 0  # prefill-only: one token each, nothing to cap or say
        assert "max_model_len" not in capsys.readouterr().err


class TestDecodeCostModel:
    def _profile(self, **decode):
        from fairsim.costmodel import Profile

        return Profile("p", "prior", 0.01, 1e-4, 2e-9, 1e-3, (1, 2048), (0.01, 0.2), 2048, {}, **decode)

    def test_decode_terms_and_floor(self):
        p = self._profile(e_s_per_decode_ctx_token=1e-7, f_s_per_decode=2e-4, min_step_s=0.012)
        # 3 decodes at contexts 1000, 2000, 3000: n = 3, pairs = sum(ctx + 0.5).
        pairs = 1000.5 + 2000.5 + 3000.5
        base = 0.01 + 1e-4 * 3 + 2e-9 * pairs + 1e-3 * 3
        assert p.step_time_colocated(3, pairs, 3, 3, 6000) == pytest.approx(base + 2e-4 * 3 + 1e-7 * 6000)
        # A tiny step is floored at the weight-read time; prefill-only times keep the old form.
        assert p.step_time_colocated(1, 0.5, 1, 0, 0) == 0.012
        assert p.step_time_from_sums(1, 0.5, 1) == pytest.approx(0.01 + 1e-4 + 1e-9 + 1e-3)

    def test_json_roundtrip_and_old_profiles(self):
        from fairsim.costmodel import ProfileError, load_profile, profile_from_dict

        p = self._profile(e_s_per_decode_ctx_token=1e-7, min_step_s=0.02)
        d = p.to_dict()
        assert d["coefficients"]["min_step_s"] == 0.02 and d["coefficients"]["f_s_per_decode"] == 0.0
        assert profile_from_dict(d).to_dict() == d
        # A profile written before colocated mode has no decode keys and loads with zeros, and
        # writes itself back without them.
        data = load_profile("a6000-llama3.1-8b-vllm-prior").to_dict()
        for key in ("min_step_s", "e_s_per_decode_ctx_token", "f_s_per_decode"):
            del data["coefficients"][key]
        old = profile_from_dict(data)
        assert old.min_step_s == old.e_s_per_decode_ctx_token == old.f_s_per_decode == 0.0
        assert old.to_dict() == data
        d["coefficients"]["min_step_s"] = "fast"
        with pytest.raises(ProfileError, match="coefficients.min_step_s"):
            profile_from_dict(d, "x.json")
        d["coefficients"]["min_step_s"] = -1.0
        with pytest.raises(ProfileError, match="min_step_s"):
            profile_from_dict(d, "x.json")
