"""The decode-aware priors keep physical sense; the shipped ones equal their construction.

The H200/H100/A100/L40S priors are no longer shipped (measured AIConfigurator profiles replace
them, ``fairsim.profiles.build_measured``); ``build`` still gives them for the fidelity table.
"""

import json

import pytest

from fairsim.costmodel import PROFILE_DIR, builtin_profiles, profile_from_dict
from fairsim.profiles.build_decode_priors import (GPUS, MODELS, PRIORS, REPLACED_BY_MEASURED, build,
                                                  kv_bytes_per_token, name_of)
from fairsim.profiles.build_measured import AIC_MODELS, AIC_SYSTEMS, aic_name


@pytest.mark.parametrize("gpu,model", PRIORS)
def test_prior_shipped_only_without_a_measurement(gpu, model):
    name = name_of(gpu, model)
    measured = gpu in AIC_SYSTEMS and model in AIC_MODELS
    assert measured is ((gpu, model) in REPLACED_BY_MEASURED)
    assert (name in builtin_profiles()) is not measured
    if measured:
        assert aic_name(gpu, model) in builtin_profiles()
    else:
        assert json.loads((PROFILE_DIR / f"{name}.json").read_text()) == build(gpu, model)


@pytest.mark.parametrize("gpu,model", PRIORS)
def test_prior_is_labelled_and_physical(gpu, model):
    p = profile_from_dict(build(gpu, model), name_of(gpu, model))
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
