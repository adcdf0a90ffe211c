"""The shipped decode-aware priors equal their construction and keep physical sense."""

import json

import pytest

from fairsim.costmodel import PROFILE_DIR, builtin_profiles, load_profile
from fairsim.profiles.build_decode_priors import GPUS, MODELS, PRIORS, build, kv_bytes_per_token, name_of


@pytest.mark.parametrize("gpu,model", PRIORS)
def test_shipped_file_equals_construction(gpu, model):
    name = name_of(gpu, model)
    assert name in builtin_profiles()
    assert json.loads((PROFILE_DIR / f"{name}.json").read_text()) == build(gpu, model)


@pytest.mark.parametrize("gpu,model", PRIORS)
def test_prior_is_labelled_and_physical(gpu, model):
    p = load_profile(name_of(gpu, model))
    g, m = GPUS[gpu], MODELS[model]
    assert p.kind == "prior" and "PRIOR" in p.metadata["label"] and p.metadata["sources"]
    # Floor: one read of this GPU's share of the BF16 weights; e: one token's KV on this GPU.
    assert p.min_step_s == pytest.approx(m["params"] * 2 / m["tp"] / g["bandwidth_Bps"], rel=1e-6)
    assert p.e_s_per_decode_ctx_token == pytest.approx(kv_bytes_per_token(model) / g["bandwidth_Bps"], rel=1e-5)
    # A cold 2,048-token chunk is compute-bound: above the floor, and at least the FLOP bound
    # 2 x params x tokens / (TP x dense BF16 peak) (COSTMODEL.md physics check).
    chunk = p.step_time_colocated(2048, 2048 * 1024, 1, 0, 0)
    assert chunk > p.min_step_s
    assert chunk >= 2 * m["params"] * 2048 / (m["tp"] * g["bf16_dense_tflops"] * 1e12)
    # One decode at 2k context costs at least the floor; 64 of them cost more than one.
    one = p.step_time_colocated(1, 2000.5, 1, 1, 2000)
    assert one >= p.min_step_s
    assert p.step_time_colocated(64, 64 * 2000.5, 64, 64, 64 * 2000) > one


def test_kv_bytes_per_token():
    assert kv_bytes_per_token("llama3.1-8b") == 131072  # 128 KiB, COSTMODEL.md
    assert kv_bytes_per_token("llama3.1-70b") * 4 == 327680  # 320 KiB over TP4
