"""``fairsim profile build``: a profile from measured third-party step data, fitted to fairsim's model.

Sources (``--from``):

- ``aiconfigurator``: AIConfigurator's measured vLLM kernel database for ``--system``,
  ``--vllm-version``, ``--model`` and ``--tp`` (``calibration.aiconfigurator``; needs
  ``pip install fairsim[profiles]``).
- ``llmservingsim``: LLMServingSim's A6000 Llama-3.1-8B operator tables in ``--tables``
  (``calibration.llmservingsim``), plus ``--step-overhead-s`` of engine work per step.

Each asks its source for the step time at every point of the grid (``calibration.grid``), fits
``a, b, k, d, f, e`` (``calibration.fit``), prints the fit error per grid region, and writes the
profile with its source, versions and errors in ``metadata``. A region whose MAPE exceeds
``--max-region-mape`` is named in a warning and in ``metadata.fit_warning``; the profile is
still written.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

from fairsim.io import name_arg, path_arg

#: Per-step engine work added to LLMServingSim's kernel-only steps (s): ``a_s`` of
#: ``cpu-tiny-llama-vllm-measured``, fairsim's own fit of a real vLLM 0.32 engine, whose per-step
#: intercept is engine work (scheduling, input preparation, sampling) on top of a tiny model.
DEFAULT_STEP_OVERHEAD_PROFILE = "cpu-tiny-llama-vllm-measured"

#: Each source's own options: one given with the other source is refused.
SOURCE_OPTIONS = {"aiconfigurator": ("--system", "--vllm-version", "--model", "--tp"),
                  "llmservingsim": ("--tables", "--step-overhead-s")}
DEFAULT_MODEL = "meta-llama/Meta-Llama-3.1-8B"


def add_profile_command(sub: Any) -> None:
    """Add ``profile build`` to the ``fairsim`` subparsers."""
    p = sub.add_parser("profile", help="build a profile from measured step data (AIConfigurator, LLMServingSim)")
    psub = p.add_subparsers(dest="profile_command", required=True)
    b = psub.add_parser("build", help="fit fairsim's step-time model to a source's step times and write a profile")
    b.add_argument("--from", dest="source", required=True, choices=("aiconfigurator", "llmservingsim"),
                   help="where the step times come from")
    b.add_argument("--system", default=None,
                   help="aiconfigurator: GPU system (h200_sxm, h100_sxm, a100_sxm, l40s, ...)")
    b.add_argument("--vllm-version", default=None,
                   help="aiconfigurator: vLLM version of the database (default: the system's current one)")
    b.add_argument("--model", default=None,
                   help=f"aiconfigurator: model id with a config in the package (default {DEFAULT_MODEL})")
    b.add_argument("--tp", type=int, default=None, help="aiconfigurator: tensor parallel size (default 1)")
    b.add_argument("--tables", type=path_arg, default=None,
                   help="llmservingsim: folder with layers.csv and attention.csv (default: the shared A6000 copy)")
    b.add_argument("--step-overhead-s", type=float, default=None,
                   help=f"llmservingsim: engine work added to every step, seconds (default: a_s of "
                        f"{DEFAULT_STEP_OVERHEAD_PROFILE})")
    b.add_argument("--budget", type=int, default=2048, help="step token budget (T_idle chunk size; default 2048)")
    b.add_argument("--max-region-mape", type=float, default=None,
                   help="warn (and record in the profile) when a grid region's fit MAPE exceeds this "
                        "fraction (default 0.15)")
    b.add_argument("--name", type=name_arg, default=None, help="profile name (default: the output file stem)")
    b.add_argument("--out", type=path_arg, required=True, help="profile JSON to write")


def build_source_profile(source: str, *, name: str, budget: int = 2048, system: str | None = None,
                         vllm_version: str | None = None, model: str = DEFAULT_MODEL, tp: int = 1,
                         tables: Path | None = None, step_overhead_s: float | None = None,
                         max_region_mape: float | None = None, idle_lengths: list[int] | None = None,
                         kv_capacity: Any = None, max_model_len: int | None = None,
                         extra_metadata: dict[str, Any] | None = None, log: Any = None) -> tuple[Any, Any, dict]:
    """Build a profile from ``source`` (``aiconfigurator`` or ``llmservingsim``).

    Returns:
        ``(profile, fit, errors)`` as ``calibration.grid.fit_profile``.

    Raises:
        ValueError: A system, version, model or folder the source lacks (named with the ones it
            has), or a bad option value (named).
    """
    from calibration.grid import MAX_REGION_MAPE, fit_profile, grid_points
    from fairsim.profiles.build_decode_priors import LENGTHS

    if budget < 1:
        raise ValueError(f"--budget {budget}: need >= 1 token")
    limit = MAX_REGION_MAPE if max_region_mape is None else max_region_mape
    if not limit > 0:
        raise ValueError(f"--max-region-mape {max_region_mape}: need a fraction > 0 (0.15 = 15 %)")
    lengths = idle_lengths or [L for L in LENGTHS if L <= (max_model_len or 131072)]
    extra = 0.0
    if source == "aiconfigurator":
        from calibration import aiconfigurator as aic
        from fairsim.deps import require

        require("aiconfigurator_core")
        if system is None:
            raise ValueError(f"--system: required with --from aiconfigurator; one of: {', '.join(aic.databases())}")
        src: Any = aic.AicSource(system, vllm_version, model, tp)
        grid = aic.DEFAULT_GRID
        points = grid_points(grid)
        seconds = [src.step_seconds(p) for p in points]
        left_out = 0
    else:
        from calibration import llmservingsim as lss
        from fairsim.costmodel import load_profile

        overhead_source = f"--step-overhead-s {step_overhead_s}"
        if step_overhead_s is None:
            step_overhead_s = load_profile(DEFAULT_STEP_OVERHEAD_PROFILE).a_s
            overhead_source = (f"a_s of {DEFAULT_STEP_OVERHEAD_PROFILE}: fairsim calibrate's fit of a real vLLM 0.32 "
                               f"engine (CPU backend, tiny model), its per-step intercept")
        if not (math.isfinite(step_overhead_s) and step_overhead_s >= 0):
            raise ValueError(f"--step-overhead-s {step_overhead_s}: need finite seconds >= 0")
        extra = float(step_overhead_s)
        src = lss.LLMServingSimSource(tables or lss.TABLES)
        grid = lss.DEFAULT_GRID
        points, seconds, left_out = [], [], 0
        for p in grid_points(grid):
            try:
                seconds.append(src.step_seconds(p))
                points.append(p)
            except lss.OutOfRange:
                left_out += 1
    metadata = {**src.metadata(), "grid": grid.to_dict(), "grid_points_left_out": left_out,
                "budget_tokens": budget, "command": "fairsim " + " ".join(sys.argv[1:])}
    if source == "llmservingsim":
        metadata["step_overhead_s"] = extra
        metadata["step_overhead_source"] = overhead_source
    metadata.update(extra_metadata or {})
    return fit_profile(points, seconds, name=name, idle=lambda L: src.idle_seconds(L, budget), idle_lengths=lengths,
                       budget_tokens=budget, metadata=metadata, max_region_mape=limit, kv_capacity=kv_capacity,
                       max_model_len=max_model_len, extra_a_s=extra, warn=log)


def print_fit(profile: Any, fit: Any, errors: dict) -> None:
    """The fitted coefficients and the error per region, on stdout."""
    from calibration.grid import format_region_errors

    c = fit.coefficients
    print(f"fit: a={profile.a_s:.4g} s, b={c['b_s_per_token']:.4g} s/token, k={c['k_s_per_pair']:.4g} s/pair, "
          f"d={c['d_s_per_request']:.4g} s/request, f={c['f_s_per_decode']:.4g} s/decode, "
          f"e={c['e_s_per_decode_ctx_token']:.4g} s/decode context token")
    print(f"fit error: held-out MAPE {100 * fit.holdout_mape:.1f}%, held-out worst {100 * fit.holdout_worst:.1f}% "
          f"({fit.num_holdout} held-out of {fit.num_train + fit.num_holdout} points); by grid region (all points):")
    print(format_region_errors(errors))


def cmd_profile(args: argparse.Namespace) -> int:
    """Run ``fairsim profile build``; exit 0 when the profile was written."""
    from calibration.grid import save_built_profile
    from fairsim.io import check_writable_file

    other = "llmservingsim" if args.source == "aiconfigurator" else "aiconfigurator"
    for option in SOURCE_OPTIONS[other]:
        if getattr(args, option[2:].replace("-", "_")) is not None:
            raise ValueError(f"{option}: only used with --from {other} (this is --from {args.source})")
    check_writable_file(args.out, "--out")
    name = args.name or args.out.stem
    profile, fit, errors = build_source_profile(
        args.source, name=name, budget=args.budget, system=args.system, vllm_version=args.vllm_version,
        model=DEFAULT_MODEL if args.model is None else args.model, tp=1 if args.tp is None else args.tp,
        tables=args.tables, step_overhead_s=args.step_overhead_s, max_region_mape=args.max_region_mape)
    print_fit(profile, fit, errors)
    meta = profile.metadata  # where the profile leaves the source's measurements, as metadata records it
    if meta.get("grid_points_left_out"):
        print(f"left out: {meta['grid_points_left_out']} grid points the source does not cover (the fit "
              f"extrapolates to them)" + (f"; {meta['range_note']}" if meta.get("range_note") else ""))
    if meta.get("idle_table_note"):
        print(f"T_idle: {meta['idle_table_note']}")
    save_built_profile(profile, args.out)
    print(f"wrote {args.out}")
    return 0
