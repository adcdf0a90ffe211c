"""The step grid shared by every profile source, the fit error per grid region, and the profile.

A source (AIConfigurator's database, LLMServingSim's tables, a plain-PyTorch run) gives the time
of each ``StepPoint`` of ``grid_points(grid)``; ``fit_profile`` fits the step-time model to those
times (``calibration.fit.fit_cost_model``), reports the error per region (``region_errors``) and
returns a ``Profile`` whose metadata carries the source, the grid, the fit and every point, so the
fit can be redone from the file alone.

Regions (``StepPoint.region``): ``cold prefill`` (one request, nothing cached), ``cached prefill``
(one request on a cached prefix), ``batched prefill`` (several requests share the step),
``decode`` (decoding requests only) and ``mixed`` (decodes plus one cold prompt).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from calibration.fit import StepSample, fit_cost_model, predict
from calibration.measure import Grid

REGIONS = ("cold prefill", "cached prefill", "batched prefill", "decode", "mixed")

MAX_REGION_MAPE = 0.15
"""Largest accepted MAPE of the fit over one grid region (fraction). Above it ``fit_profile``
warns and records ``fit_warning`` in the profile. Why 0.15: ``fairsim calibrate``'s default
``--max-mape`` (its held-out MAPE limit), so every source is held to the same bar."""


@dataclass(frozen=True)
class StepPoint:
    """One engine step of the grid.

    Attributes:
        region: One of ``REGIONS``.
        new_tokens: ``n_i`` per request, tokens, shape (r,).
        context_tokens: ``k_i`` per request (tokens already in its KV cache), shape (r,).
        decoding: Per request, whether it is a decode (one token on top of its context).
    """

    region: str
    new_tokens: tuple[int, ...]
    context_tokens: tuple[int, ...]
    decoding: tuple[bool, ...]

    def sample(self, seconds: float) -> StepSample:
        """This point with its time (s), as the fit takes it."""
        return StepSample(self.new_tokens, self.context_tokens, seconds, self.decoding)


def grid_points(grid: Grid) -> list[StepPoint]:
    """The steps of ``grid``, in the order of ``calibration.measure.measure``.

    Prefill: for each cached context ``k``, total new tokens ``N`` and requests ``r <= N``, ``r``
    requests of ``N // r`` new tokens each on ``k`` cached tokens. Decode: for each decode context
    ``c``, decodes ``r`` and added cold prompt ``m`` (``grid.mixed_new_tokens``), ``r`` decoding
    requests at context ``c`` plus, when ``m > 0``, one cold ``m``-token prompt.
    """
    points = []
    for k in grid.context_tokens:
        for total in grid.new_tokens:
            for r in grid.requests_per_step:
                if r > total:
                    continue
                region = "batched prefill" if r > 1 else ("cached prefill" if k else "cold prefill")
                points.append(StepPoint(region, (total // r,) * r, (k,) * r, (False,) * r))
    for c in grid.decode_contexts:
        for r in grid.decodes:
            for m in grid.mixed_new_tokens:
                extra = ((m,), (0,), (False,)) if m else ((), (), ())
                points.append(StepPoint("mixed" if m else "decode", (1,) * r + extra[0],
                                        (c,) * r + extra[1], (True,) * r + extra[2]))
    return points


def region_errors(coefficients: dict[str, float], samples: Sequence[StepSample],
                  regions: Sequence[str]) -> dict[str, dict[str, float]]:
    """Fit error per region over every point (fitted and held out).

    Returns:
        ``{region: {"points": count, "mape": fraction, "worst": fraction, "worst_at": str}}`` for
        each region present, ``worst_at`` naming the worst point (new tokens, context, decodes).
    """
    y = np.array([s.seconds for s in samples], dtype=np.float64)
    err = np.abs(predict(coefficients, samples) - y) / y
    out: dict[str, dict[str, Any]] = {}
    for region in REGIONS:
        idx = [i for i, r in enumerate(regions) if r == region]
        if not idx:
            continue
        worst = max(idx, key=lambda i: err[i])
        s = samples[worst]
        out[region] = {"points": len(idx), "mape": float(err[idx].mean()), "worst": float(err[worst]),
                       "worst_at": describe(s)}
    return out


def describe(s: StepSample) -> str:
    """A step in words: ``2 x 1024 new on 4096 cached`` or ``64 decodes at 2048 + 512 new``."""
    decodes = s.num_decodes
    if decodes:
        rest = [n for n, d in zip(s.new_tokens, s.decoding) if not d]
        ctx = s.context_tokens[0]
        return f"{decodes} decodes at {ctx}" + (f" + {sum(rest)} new" if rest else "")
    return f"{len(s.new_tokens)} x {s.new_tokens[0]} new on {s.context_tokens[0]} cached"


def format_region_errors(errors: dict[str, dict[str, Any]]) -> str:
    """One line per region: points, MAPE, worst error and where."""
    return "\n".join(f"  {region:<16} {e['points']:>4} points  MAPE {100 * e['mape']:5.1f} %  worst "
                     f"{100 * e['worst']:5.1f} % ({e['worst_at']})" for region, e in errors.items())


def fit_profile(points: Sequence[StepPoint], seconds: Sequence[float], *, name: str,
                idle: Callable[[int], float | None], idle_lengths: Sequence[int], budget_tokens: int,
                metadata: dict[str, Any], max_region_mape: float = MAX_REGION_MAPE,
                kv_capacity: Any = None, max_model_len: int | None = None,
                extra_a_s: float = 0.0, warn: Callable[[str], None] | None = None) -> Any:
    """Fit the step-time model to the grid's times and build the profile.

    Args:
        points: The grid (``grid_points``).
        seconds: Time of each point, seconds, > 0.
        name: Profile name.
        idle: ``T_idle(L)`` of the source (s): a cold ``L``-token prompt alone, chunked at the budget;
            None where the source has no such point (the fitted model's chunked prefill is used).
        idle_lengths: Lengths of the ``T_idle`` table, increasing.
        budget_tokens: Step budget (chunk size of a cold prefill).
        metadata: Provenance (source, versions, device, model); the fit, its errors per region,
            the grid and every point are added.
        max_region_mape: A region whose MAPE exceeds it is named in a warning (``warn``, default
            stderr) and in ``metadata["fit_warning"]``.
        kv_capacity, max_model_len: As ``Profile``.
        extra_a_s: A per-step term added to the fitted ``a`` and to every ``T_idle`` chunk (s), for a
            source that leaves out the engine's own per-step work (``metadata`` says where it
            comes from); the fit errors are those of the source's own times.

    Returns:
        ``(profile, fit, errors)``: the ``Profile`` (kind ``measured``), the ``FitResult`` and the
        errors per region (``region_errors``).

    Raises:
        ValueError: A time that is not a finite number > 0 (the message names the point), or too
            few points to fit (``fit_cost_model``).
    """
    from fairsim.costmodel import Profile

    for p, s in zip(points, seconds):
        if not (math.isfinite(s) and s > 0):
            raise ValueError(f"step time {s!r} s at grid point {describe(p.sample(1.0))}: need a finite number > 0")
    samples = [p.sample(float(s)) for p, s in zip(points, seconds)]
    fit = fit_cost_model(samples)
    errors = region_errors(fit.coefficients, samples, [p.region for p in points])
    over = {r: e for r, e in errors.items() if e["mape"] > max_region_mape}
    meta = dict(metadata)
    if extra_a_s:
        meta["a_s_fitted_before_overhead"] = fit.coefficients["a_s"]
    meta.update({
        "fit": fit.to_dict(),
        "fit_method": "calibration.fit.fit_cost_model: scipy.optimize.nnls on relative error, column-scaled; "
                      "every 4th point held out",
        "fit_error_by_region": errors,
        "max_region_mape": max_region_mape,
        "points": [{"region": p.region, "new_tokens": list(p.new_tokens), "context_tokens": list(p.context_tokens),
                    "decoding": list(p.decoding), "seconds": float(s)} for p, s in zip(points, seconds)],
    })
    if over:
        text = "; ".join(f"{r} {100 * e['mape']:.1f} %" for r, e in over.items())
        meta["fit_warning"] = (f"fit MAPE above {100 * max_region_mape:.0f} % in: {text}; step times in these "
                               f"regions are off by that much on average")
        (warn or (lambda m: print(f"fairsim: warning: {m}", file=sys.stderr)))(f"{name}: {meta['fit_warning']}")
    c = fit.coefficients
    a_s = c["a_s"] + extra_a_s
    model = Profile("fit", "measured", a_s, c["b_s_per_token"], c["k_s_per_pair"], c["d_s_per_request"],
                    (1, 2), (0.0, 0.0), budget_tokens)
    table, modelled = [], []
    for L in idle_lengths:
        t = idle(L)
        if t is None:  # the source does not cover it: the fitted model's chunked cold prefill
            modelled.append(L)
            table.append(model.prefill_time(L))
        else:
            table.append(t + extra_a_s * -(-L // budget_tokens))
    sourced = [L for L in idle_lengths if L not in modelled]
    if modelled and sourced:
        meta["idle_table_note"] = (f"T_idle from the source at {len(sourced)} lengths up to {max(sourced)} tokens; "
                                   f"the fitted model's chunked cold prefill at the {len(modelled)} it has no point "
                                   f"for, from {min(modelled)} tokens")
    elif modelled:
        meta["idle_table_note"] = (f"T_idle is the fitted model's chunked cold prefill at all {len(modelled)} lengths "
                                   f"(the source has no point for any of them)")
    for i in range(1, len(table)):  # a source's noise must not make T_idle decrease
        table[i] = max(table[i], table[i - 1])
    profile = Profile(name, "measured", a_s, c["b_s_per_token"], c["k_s_per_pair"], c["d_s_per_request"],
                      tuple(idle_lengths), tuple(table), budget_tokens, meta, kv_capacity=kv_capacity,
                      max_model_len=max_model_len, e_s_per_decode_ctx_token=c["e_s_per_decode_ctx_token"],
                      f_s_per_decode=c["f_s_per_decode"])
    return profile, fit, errors


def save_built_profile(profile: Any, path: Any, warn: Callable[[str], None] | None = None) -> float | None:
    """Write a built profile; state a wider ``idle_table_tolerance`` when its table needs one.

    A source's ``T_idle`` table and the fitted coefficients can disagree by more than
    ``fairsim.costmodel.IDLE_TABLE_TOLERANCE`` (a noisy machine, a step the model fits badly); the
    profile is then written with the tolerance it needs (the next 5 %), as ``fairsim calibrate
    --force`` does, and a warning says so.

    Returns:
        The tolerance written, or None when the default holds.
    """
    from fairsim.costmodel import IDLE_TABLE_TOLERANCE, check_idle_consistency, save_profile

    worst = check_idle_consistency(profile, str(path), tolerance=math.inf)
    tolerance = None
    if worst > IDLE_TABLE_TOLERANCE:
        tolerance = math.ceil(worst * 20 + 1e-9) / 20
        note = (f"the T_idle table differs from the fitted coefficients by up to {100 * worst:.1f} % (more than "
                f"{100 * IDLE_TABLE_TOLERANCE:.0f} %); written with idle_table_tolerance={tolerance}")
        before = profile.metadata.get("idle_table_note")  # (fit_profile's: which points are the model's)
        profile.metadata["idle_table_note"] = f"{before}; {note}" if before else note
        (warn or (lambda m: print(f"fairsim: warning: {m}", file=sys.stderr)))(f"{profile.name}: {note}")
    save_profile(profile, path, idle_table_tolerance=tolerance)
    return tolerance
