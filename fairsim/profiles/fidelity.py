"""The fidelity table of docs/profiles.md: each source's step times and one E1 trace's TTFT, per GPU.

Run ``python -m fairsim.profiles.fidelity [TORCH_PROFILE.json ...]`` (ten seconds) to print it as
Markdown, with a row for each profile written by ``calibrate --backend torch`` that is given.

Rows: one per (GPU, model, source). Sources: ``prior`` (public figures: the shipped A6000 prior,
and ``build_decode_priors.build`` for the others, no longer shipped), ``aiconfigurator`` (the
shipped AIConfigurator-built profiles), ``llmservingsim`` (the A6000 tables), ``torch`` (a
profile written by ``calibrate --backend torch`` on that GPU, given as an argument). Step columns: the
profile's colocated step time (``Profile.step_time_colocated``, so a prior's weight-read floor
applies) at six points; ``db`` rows give the source's own time at the point (AIConfigurator's
SDK, LLMServingSim's tables) where it has one. TTFT: seed 0 of E1's ``sec-dyn1`` trace
(``fairsim.scenarios``; calm 600 s, burst 600 s, spike 60 s at fixed request rates, so a slower
GPU is more loaded) under Fairway, prefill-only, p50 and p99 over all its requests.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fairsim.costmodel import Profile, load_profile, profile_from_dict
from fairsim.profiles import build_decode_priors as priors
from fairsim.profiles.build_measured import AIC_MODELS, AIC_SYSTEMS, LLMSERVINGSIM_NAME, aic_name

#: (label, new tokens, cached context, decodes): the six points.
POINTS = (("1 token", 1, 0, 0), ("512 cold", 512, 0, 0), ("2,048 cold", 2048, 0, 0),
          ("2,048 on 16k", 2048, 16384, 0), ("2,048 on 64k", 2048, 65536, 0), ("64 decodes at 2k", 0, 2048, 64))


def step_ms(profile: Profile, new: int, cached: int, decodes: int) -> float:
    """The profile's step time at one point, milliseconds."""
    if decodes:
        return 1e3 * profile.step_time_colocated(decodes, decodes * (cached + 0.5), decodes, decodes, decodes * cached)
    return 1e3 * profile.step_time_colocated(new, new * (cached + new / 2), 1, 0, 0)


def source_ms(profile: Profile, new: int, cached: int, decodes: int) -> float | None:
    """The source's own time at the point (stored in the built profile), milliseconds, or None."""
    for p in profile.metadata.get("points", ()):
        if decodes and p["decoding"] and len(p["new_tokens"]) == decodes and p["context_tokens"][0] == cached \
                and all(p["decoding"]):
            return 1e3 * p["seconds"]
        if not decodes and p["new_tokens"] == [new] and p["context_tokens"] == [cached]:
            return 1e3 * p["seconds"]
    return None


def e1_ttft(profile: Profile) -> tuple[float, float]:
    """TTFT p50, p99 (s) of E1's sec-dyn1, seed 0, under Fairway."""
    from fairsim.policies import make_policy
    from fairsim.scenarios import build_scenario
    from fairsim.sim import simulate

    scenario = build_scenario("sec-dyn1", profile, seed=0, calm_s=600.0, burst_s=600.0)  # E1's full length
    result = simulate(scenario.requests, make_policy("fairway", profile), profile, scenario.engine)
    ttft = result.requests["ttft_s"].to_numpy(float)
    return float(np.percentile(ttft, 50)), float(np.percentile(ttft, 99))


def rows(torch_profiles: list[Profile] = ()) -> list[tuple[str, str, str, Profile]]:
    """(GPU, model, source, profile) of every row; ``torch_profiles`` (written by ``calibrate
    --backend torch``) are added as ``torch`` rows under their ``metadata.device``, 8B."""
    out = [("A6000", "8B", "prior", load_profile("a6000-llama3.1-8b-vllm-prior")),
           ("A6000", "8B", "llmservingsim", load_profile(LLMSERVINGSIM_NAME))]
    for gpu in AIC_SYSTEMS:
        for model in AIC_MODELS:
            label = {"llama3.1-8b": "8B", "llama3.1-70b": "70B TP4"}[model]
            device = priors.GPUS[gpu]["device"].replace("NVIDIA ", "")
            out.append((device, label, "prior", profile_from_dict(priors.build(gpu, model), priors.name_of(gpu, model))))
            out.append((device, label, "aiconfigurator", load_profile(aic_name(gpu, model))))
    out += [(p.metadata.get("device", "?"), "8B", "torch", p) for p in torch_profiles]
    return out


def table(torch_profiles: list[Profile] = ()) -> str:
    """The Markdown table (with ``torch`` rows for ``torch_profiles``)."""
    head = "| GPU | model | source | " + " | ".join(p[0] for p in POINTS) + " | E1 TTFT p50 / p99 (s) | fit MAPE worst region |"
    lines = [head, "|" + "---|" * (len(POINTS) + 5)]
    for gpu, model, source, profile in rows(torch_profiles):
        cells = []
        for _, new, cached, decodes in POINTS:
            fit = step_ms(profile, new, cached, decodes)
            own = source_ms(profile, new, cached, decodes) if source != "prior" else None
            cells.append(f"{fit:.1f}" + (f" ({own:.1f})" if own is not None else ""))
        p50, p99 = e1_ttft(profile)
        errors: dict[str, Any] = profile.metadata.get("fit_error_by_region", {})
        worst = max(errors.items(), key=lambda kv: kv[1]["mape"]) if errors else None
        fit_cell = f"{worst[0]} {100 * worst[1]['mape']:.1f} %" if worst else "–"
        lines.append(f"| {gpu} | {model} | {source} | " + " | ".join(cells) + f" | {p50:.3f} / {p99:.3f} | {fit_cell} |")
    return "\n".join(lines)


if __name__ == "__main__":
    import sys

    # Arguments: profiles written by `fairsim calibrate --backend torch`, added as torch rows.
    print(table([load_profile(path) for path in sys.argv[1:]]))
