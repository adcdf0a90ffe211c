"""Build the shipped profiles that come from measured step data.

Run ``python -m fairsim.profiles.build_measured`` (needs ``pip install -e ".[profiles]"``) to
rewrite them:

- ``{gpu}-llama3.1-8b-vllm-aiconfigurator`` and ``{gpu}-llama3.1-70b-tp4-vllm-aiconfigurator``
  for the H200, H100, A100 and L40S: AIConfigurator's vLLM kernel database
  (``fairsim profile build --from aiconfigurator``), at each system's current vLLM version. They
  replace the priors of the same GPU and model, whose figures stay reproducible with
  ``fairsim.profiles.build_decode_priors.build`` (the fidelity table in docs/profiles.md).
- ``a6000-llama3.1-8b-llmservingsim``: LLMServingSim's A6000 tables plus the stated per-step
  engine overhead (``fairsim profile build --from llmservingsim``).

KV capacity and ``max_model_len`` are the priors' (datasheet memory, vLLM's utilisation default,
BF16 weights, KV bytes per token; ``build_decode_priors``): the databases time steps, not memory.
"""

from __future__ import annotations

from pathlib import Path

from fairsim.costmodel import PROFILE_DIR
from fairsim.profiles import build_decode_priors as priors

#: fairsim GPU name -> AIConfigurator system.
AIC_SYSTEMS = {"h200": "h200_sxm", "h100-80g": "h100_sxm", "a100-80g": "a100_sxm", "l40s": "l40s"}
#: fairsim model name -> (AIConfigurator model id, TP).
AIC_MODELS = {"llama3.1-8b": ("meta-llama/Meta-Llama-3.1-8B", 1), "llama3.1-70b": ("meta-llama/Meta-Llama-3.1-70B", 4)}
LLMSERVINGSIM_NAME = "a6000-llama3.1-8b-llmservingsim"
COMMAND = "python -m fairsim.profiles.build_measured"


def aic_name(gpu: str, model: str) -> str:
    """Profile name, e.g. ``h200-llama3.1-70b-tp4-vllm-aiconfigurator``."""
    return priors.name_of(gpu, model).replace("-vllm-prior", "-vllm-aiconfigurator")


def _memory(gpu: str, model: str) -> tuple[object, int]:
    from fairsim.kvcapacity import kv_capacity_from_dict

    prior = priors.build(gpu, model)
    return kv_capacity_from_dict(prior["kv_capacity"], priors.name_of(gpu, model)), prior["max_model_len"]


def build_aic(gpu: str, model: str, log=None):
    """``(profile, fit, errors)`` of one AIConfigurator profile."""
    from calibration.profile_cli import build_source_profile

    kv, max_len = _memory(gpu, model)
    model_id, tp = AIC_MODELS[model]
    return build_source_profile("aiconfigurator", name=aic_name(gpu, model), system=AIC_SYSTEMS[gpu],
                                model=model_id, tp=tp, kv_capacity=kv, max_model_len=max_len,
                                extra_metadata={"command": COMMAND, "device": priors.GPUS[gpu]["device"],
                                                "kv_capacity_sources": priors.build(gpu, model)["metadata"]["kv_capacity_sources"]},
                                log=log)


def build_llmservingsim(log=None):
    """``(profile, fit, errors)`` of the A6000 LLMServingSim profile (KV capacity of the A6000 prior)."""
    from calibration.profile_cli import build_source_profile
    from fairsim.costmodel import load_profile

    prior = load_profile("a6000-llama3.1-8b-vllm-prior")
    return build_source_profile("llmservingsim", name=LLMSERVINGSIM_NAME, kv_capacity=prior.kv_capacity,
                                max_model_len=prior.max_model_len,
                                extra_metadata={"command": COMMAND,
                                                "kv_capacity_sources": prior.metadata["kv_capacity_sources"]},
                                log=log)


def main() -> None:
    """Write every measured profile into the package."""
    from calibration.grid import save_built_profile
    from calibration.profile_cli import print_fit

    jobs = [(aic_name(g, m), lambda g=g, m=m: build_aic(g, m)) for g in AIC_SYSTEMS for m in AIC_MODELS]
    jobs.append((LLMSERVINGSIM_NAME, build_llmservingsim))
    for name, job in jobs:
        profile, fit, errors = job()
        print(name)
        print_fit(profile, fit, errors)
        path = Path(PROFILE_DIR) / f"{name}.json"
        save_built_profile(profile, path)
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
