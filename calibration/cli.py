"""``fairsim calibrate``: profile a live vLLM engine, fit the cost model, write a profile JSON.

COSTMODEL.md's procedure: start the engine (prefix caching on, the target budget), warm up, time
steps over a grid of new tokens x cached context x requests per step (``max_tokens=1``), then
decode-heavy and mixed steps (decoding requests x their context x an added cold prompt), measure
``T_idle(L)`` directly, fit ``a, b, k, d`` and the decode terms ``f, e`` by non-negative least
squares, report MAPE and the worst error on held-out points (also over the decode points alone),
and refuse a fit above the thresholds unless ``--force``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import sys
from pathlib import Path
from typing import Any

DEFAULT_OUT = "cpu-tiny-llama-vllm-measured.json"


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(v) for v in text.split(",") if v.strip())


def add_calibrate_command(sub: Any) -> None:
    """Add ``calibrate`` to the ``fairsim`` subparsers."""
    from calibration.measure import Grid

    g = Grid()
    p = sub.add_parser("calibrate", help="profile a live vLLM engine and write a measured profile")
    p.add_argument("--model", default=None,
                   help="model folder or HF name (default: the shipped tiny Llama with dummy weights)")
    p.add_argument("--load-format", default=None,
                   help="vLLM load_format (default: dummy for the tiny Llama, else auto)")
    p.add_argument("--dtype", default="auto", help="vLLM dtype")
    p.add_argument("--budget", type=int, default=2048,
                   help="step token budget (max_num_batched_tokens)")
    p.add_argument("--block-size", type=int, default=None,
                   help="KV block size (default: 128 on CPU, 16 on GPU)")
    p.add_argument("--max-model-len", type=int, default=None,
                   help="default: longest grid prompt + 1")
    p.add_argument("--new-tokens", type=_ints, default=g.new_tokens,
                   help="grid: new tokens per step, comma-separated")
    p.add_argument("--context-tokens", type=_ints, default=g.context_tokens,
                   help="grid: cached context per request")
    p.add_argument("--requests-per-step", type=_ints, default=g.requests_per_step,
                   help="grid: requests per step")
    p.add_argument("--idle-lengths", type=_ints, default=g.idle_lengths,
                   help="T_idle prompt lengths")
    p.add_argument("--decodes", type=_ints, default=g.decodes,
                   help="decode grid: decoding requests per step (empty: no decode grid)")
    p.add_argument("--decode-contexts", type=_ints, default=g.decode_contexts,
                   help="decode grid: prompt tokens of each decoding request")
    p.add_argument("--mixed-new-tokens", type=_ints, default=g.mixed_new_tokens,
                   help="decode grid: cold prefill tokens added to a decode step (0 = decode only)")
    p.add_argument("--repeats", type=int, default=g.repeats,
                   help="measurements per point, interleaved over the grid")
    p.add_argument("--statistic", choices=("median", "min"), default="median",
                   help="kept value of the repeats (min: intrinsic cost on a shared, noisy machine)")
    p.add_argument("--max-mape", type=float, default=0.15,
                   help="refuse a held-out MAPE above this (fraction)")
    p.add_argument("--max-worst", type=float, default=0.5,
                   help="refuse a held-out worst error above this (fraction)")
    p.add_argument("--force", action="store_true",
                   help="write the profile even if the fit is refused")
    p.add_argument("--name", default=None, help="profile name (default: the output file stem)")
    p.add_argument("--out", type=Path, default=Path(DEFAULT_OUT), help="profile JSON to write")


def _device() -> str:
    try:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.get_device_name(0)
    except Exception:  # noqa: BLE001 - description only
        pass
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import os

    return f"CPU: {cpu} ({os.cpu_count()} logical cores)"


def cmd_calibrate(args: argparse.Namespace) -> int:
    """Run the calibration; exit 0 when a profile was written, 3 when the fit was refused."""
    from calibration.fit import fit_cost_model
    from calibration.measure import Grid, Profiler, measure, monotone
    from fairsim.costmodel import Profile, save_profile
    from fairsim.live.engine import LiveConfig, make_llm, vllm_version

    grid = Grid(args.new_tokens, args.context_tokens, args.requests_per_step, args.idle_lengths, args.repeats,
                args.statistic, args.decodes, args.decode_contexts, args.mixed_new_tokens)
    on_gpu = _device().startswith("CPU") is False
    block = args.block_size or (16 if on_gpu else 128)
    longest = max(max(grid.context_tokens) + max(grid.new_tokens), max(grid.idle_lengths)) + 1
    if grid.decodes:  # a decoding request's prompt plus the tokens it generates while measured
        r, c = max(grid.decodes), max(grid.decode_contexts)
        longest = max(longest, c + -(-r * c // max(1, args.budget - r)) + 17)
    kwargs: dict[str, Any] = {}
    if args.model:
        kwargs = {"model": args.model, "load_format": args.load_format or "auto"}
    elif args.load_format:
        kwargs = {"load_format": args.load_format}
    cfg = LiveConfig(policy="fcfs", budget_tokens=args.budget, max_num_seqs=max(16, max(grid.requests_per_step), max(grid.decodes, default=0) + 1),
                     block_size=block, max_model_len=args.max_model_len or longest, **kwargs)
    log = lambda msg: print(f"calibrate: {msg}", file=sys.stderr, flush=True)  # noqa: E731
    log(f"device {_device()}, model {cfg.model}, budget {args.budget}, block {block}")
    llm = make_llm(cfg, dtype=args.dtype)
    model_cfg = llm.llm_engine.model_config
    profiler = Profiler(llm, block)
    profiler.warm_up()
    samples, idle, raw = measure(profiler, grid, args.budget, progress=log)
    fit = fit_cost_model(samples)
    lengths = sorted(idle)
    seconds = monotone([idle[L] for L in lengths])
    refused = fit.holdout_mape > args.max_mape or fit.holdout_worst > args.max_worst
    print(f"fit: a={fit.coefficients['a_s']:.4g} s, b={fit.coefficients['b_s_per_token']:.4g} s/token, "
          f"k={fit.coefficients['k_s_per_pair']:.4g} s/pair, d={fit.coefficients['d_s_per_request']:.4g} s/request, "
          f"f={fit.coefficients['f_s_per_decode']:.4g} s/decode, "
          f"e={fit.coefficients['e_s_per_decode_ctx_token']:.4g} s/decode context token")
    if fit.num_holdout_decode:
        print(f"decode/mixed steps: held-out MAPE {100 * fit.holdout_decode_mape:.1f}% "
              f"({fit.num_holdout_decode} held-out points)")
    print(f"fit error: train MAPE {100 * fit.train_mape:.1f}%, held-out MAPE {100 * fit.holdout_mape:.1f}%, "
          f"held-out worst {100 * fit.holdout_worst:.1f}% ({fit.num_holdout} held-out of {len(samples)} points); "
          f"condition number {fit.condition_number:.3g}")
    print("T_idle: " + ", ".join(f"{L}: {1e3 * s:.1f} ms" for L, s in zip(lengths, seconds)))
    if refused and not args.force:
        print(f"fairsim: error: fit refused: held-out MAPE {100 * fit.holdout_mape:.1f}% "
              f"(limit {100 * args.max_mape:.0f}%) or worst {100 * fit.holdout_worst:.1f}% "
              f"(limit {100 * args.max_worst:.0f}%); rerun on a quieter machine, more --repeats, "
              f"or --force to write it anyway", file=sys.stderr)
        return 3
    name = args.name or args.out.stem
    metadata = {
        "label": "measured by `fairsim calibrate` on a real vLLM engine" + (" (fit refused, written with --force)" if refused else ""),
        "device": _device(),
        "model": str(args.model or "fairsim tiny Llama (fairsim/live/tiny_llama, dummy random weights)"),
        "dtype": str(model_cfg.dtype),
        "vllm_version": vllm_version(),
        "block_size": block,
        "budget_tokens": args.budget,
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "grid": grid.to_dict(),
        "fit": fit.to_dict(),
        "fit_method": "scipy.optimize.nnls on relative error, column-scaled; every 4th point held out",
        "thresholds": {"max_mape": args.max_mape, "max_worst": args.max_worst, "forced": bool(refused)},
        "idle_prefill_note": f"{args.statistic} TTFT of a cold prompt alone on the idle engine; running max keeps it monotone",
        "raw_measurements": raw,
        "command": "fairsim " + " ".join(sys.argv[1:]),
    }
    c = fit.coefficients
    # The weight-read floor is not fitted (min_step_s = 0): the fitted a covers the smallest step.
    profile = Profile(name, "measured", c["a_s"], c["b_s_per_token"], c["k_s_per_pair"], c["d_s_per_request"],
                      tuple(lengths), tuple(seconds), args.budget, metadata,
                      e_s_per_decode_ctx_token=c["e_s_per_decode_ctx_token"], f_s_per_decode=c["f_s_per_decode"])
    save_profile(profile, args.out)
    print(f"wrote {args.out}")
    json.dumps(metadata)  # fail here, not later, if metadata is not JSON-ready
    return 0
