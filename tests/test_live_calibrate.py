"""`fairsim calibrate` against a real vLLM engine (tiny grid), and the profile it writes."""

from __future__ import annotations

import json
import os

import pytest

pytestmark = pytest.mark.live

from fairsim.live.engine import ENGINE_ENV  # noqa: E402  (no vLLM import)

for _k, _v in ENGINE_ENV.items():  # in-process core, small KV space, one bound OpenMP thread
    os.environ.setdefault(_k, _v)

from fairsim.cli import main  # noqa: E402
from fairsim.costmodel import load_profile  # noqa: E402


class TestCalibrateCommand:
    """A small grid runs end to end; the profile carries metadata and fit error; run uses it."""

    def test_small_grid(self, tmp_path, capsys):
        out = tmp_path / "p.json"
        rc = main(["calibrate", "--new-tokens", "64,512", "--context-tokens", "0,256",
                   "--requests-per-step", "1,2", "--idle-lengths", "128,256", "--repeats", "1",
                   "--decodes", "1,4", "--decode-contexts", "128", "--mixed-new-tokens", "0,64",
                   "--max-model-len", "1024", "--force", "--out", str(out)])
        assert rc == 0
        data = json.loads(out.read_text())
        meta = data["metadata"]
        assert data["kind"] == "measured" and data["schema_version"] == 1
        for key in ("device", "model", "dtype", "vllm_version", "block_size", "budget_tokens", "date",
                    "grid", "fit", "raw_measurements"):
            assert key in meta, key
        assert meta["fit"]["num_holdout"] == 3 and meta["fit"]["holdout_mape"] >= 0
        steps = meta["raw_measurements"]["steps"]
        assert len(steps) == 8 + 4
        # Decode-heavy and mixed steps: 1 or 4 decodes at >= 128 tokens of context, + 0 or 64 new.
        decode_steps = [s for s in steps if any(s.get("decoding", []))]
        assert sorted((sum(s["decoding"]), sum(s["new_tokens"]) - sum(s["decoding"])) for s in decode_steps) == \
            [(1, 0), (1, 64), (4, 0), (4, 64)]
        assert all(min(k for k, d in zip(s["context_tokens"], s["decoding"]) if d) >= 128 for s in decode_steps)
        assert meta["fit"]["num_holdout_decode"] >= 1
        # The fit gives a one-decode step (128 tokens of context) a cost. Which terms carry it
        # (a decode term, the per-request or the fixed one) depends on one noisy repeat of a
        # loaded CPU, so the test asks for the step's fitted time, not for a given coefficient.
        c = data["coefficients"]
        one_decode = (c["a_s"] + c["b_s_per_token"] + c["d_s_per_request"] + c.get("f_s_per_decode", 0.0)
                      + 128 * c.get("e_s_per_decode_ctx_token", 0.0))
        assert one_decode > 0, c
        profile = load_profile(str(out))
        assert profile.idle_prefill_time(256) > 0
        # VLLM_CPU_KVCACHE_SPACE=1 GiB of 1 KiB tokens (tiny Llama): vLLM's pool of 8192 blocks of 128.
        assert (meta["kv_cache_blocks"], meta["kv_block_size"]) == (8192, 128)
        assert profile.kv_capacity_tokens == 8192 * 128 == meta["kv_cache_tokens"]
        assert profile.max_model_len == 1024
        capsys.readouterr()
        # The engine's max_model_len (1024) is the profile's: longer prompts of the input are
        # refused, or dropped with --skip-long.
        trace = tmp_path / "t.jsonl"
        trace.write_text("".join(json.dumps({"timestamp": 100 * i, "input_length": n, "output_length": 1,
                                             "hash_ids": list(range(10 * i, 10 * i + -(-n // 512)))}) + "\n"
                                 for i, n in enumerate([300, 700, 1023, 1024, 900])))
        assert main(["run", "--profile", str(out), "--trace", str(trace), "--policy", "fcfs", "--kv-blocks", "64",
                     "--skip-long", "--format", "json"]) == 0
        assert json.loads(capsys.readouterr().out)["fcfs"]["requests"] == 4
        assert main(["run", "--profile", str(out), "--trace", str(trace), "--policy", "fcfs"]) == 2
        assert f"{trace}:4: field 'input_length': prompt of 1,024 tokens" in capsys.readouterr().err
