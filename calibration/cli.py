"""``fairsim calibrate``: profile a live vLLM engine, fit the cost model, write a profile JSON.

COSTMODEL.md's procedure: start the engine (prefix caching on, the target budget), warm up, time
steps over a grid of new tokens x cached context x requests per step (``max_tokens=1``), then
decode-heavy and mixed steps (decoding requests x their context x an added cold prompt), measure
``T_idle(L)`` directly, fit ``a, b, k, d`` and the decode terms ``f, e`` by non-negative least
squares, report MAPE and the worst error on held-out points (also over the decode points alone),
and refuse a fit above the thresholds unless ``--force``.

Before the engine starts, the grid, the thresholds and ``--out`` are checked (``check_grid``,
``fairsim.io.check_writable_file``), so a typo costs a second, not a measurement. A refused fit
(or a ``T_idle`` table that disagrees with the fitted coefficients beyond
``fairsim.costmodel.IDLE_TABLE_TOLERANCE``) exits 3 and still writes every raw measurement to the
sibling file ``OUT.raw.json`` (``raw_path``) with ``"fit_refused": true``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import platform
import sys
from pathlib import Path
from typing import Any

from fairsim.io import count_arg, name_arg, path_arg
from fairsim.sim.config import MAX_STEP_TOKENS

DEFAULT_OUT = "cpu-tiny-llama-vllm-measured.json"



def _csv(values) -> str:
    """A grid default as the comma-separated list the option takes (empty: ``''``)."""
    return ",".join(str(v) for v in values) or "''"

def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(v) for v in text.split(",") if v.strip())


def add_calibrate_command(sub: Any) -> None:
    """Add ``calibrate`` to the ``fairsim`` subparsers."""
    from calibration.measure import Grid

    g = Grid()
    p = sub.add_parser("calibrate", help="profile a live vLLM engine (or a plain-PyTorch Llama) and write a "
                                         "measured profile")
    p.add_argument("--backend", choices=("vllm", "torch"), default="vllm",
                   help="vllm: a live vLLM engine; torch: a Llama built from --model-config with random weights "
                        "in plain PyTorch (no vLLM; labelled torch-level, not vLLM) (default: vllm)")
    p.add_argument("--model-config", type=path_arg, default=None,
                   help="torch: the model's config.json (default: the shipped tiny Llama)")
    p.add_argument("--device", choices=("cuda", "cpu"), default=None,
                   help="torch: where to run (default: cuda when available)")
    p.add_argument("--model", default=None,
                   help="model folder or HF name (default: the shipped tiny Llama with dummy weights)")
    p.add_argument("--load-format", default=None,
                   help="vLLM load_format (default: dummy for the tiny Llama, else auto)")
    p.add_argument("--dtype", default="auto", help="vLLM dtype (default auto)")
    p.add_argument("--budget", type=count_arg, default=2048,
                   help="step token budget (max_num_batched_tokens; default 2048)")
    p.add_argument("--block-size", type=count_arg, default=None,
                   help="KV block size (default: 128 on CPU, 16 on GPU)")
    p.add_argument("--max-model-len", type=int, default=None,
                   help="default: longest grid prompt + 1")
    p.add_argument("--new-tokens", type=_ints, default=g.new_tokens,
                   help=f"grid: new tokens per step, comma-separated (default {_csv(g.new_tokens)})")
    p.add_argument("--context-tokens", type=_ints, default=g.context_tokens,
                   help=f"grid: cached context per request (default {_csv(g.context_tokens)})")
    p.add_argument("--requests-per-step", type=_ints, default=g.requests_per_step,
                   help=f"grid: requests per step (default {_csv(g.requests_per_step)})")
    p.add_argument("--idle-lengths", type=_ints, default=g.idle_lengths,
                   help=f"T_idle prompt lengths (default {_csv(g.idle_lengths)})")
    p.add_argument("--decodes", type=_ints, default=g.decodes,
                   help=f"decode grid: decoding requests per step (empty: no decode grid; default {_csv(g.decodes)})")
    p.add_argument("--decode-contexts", type=_ints, default=g.decode_contexts,
                   help=f"decode grid: prompt tokens of each decoding request (default {_csv(g.decode_contexts)})")
    p.add_argument("--mixed-new-tokens", type=_ints, default=g.mixed_new_tokens,
                   help=f"decode grid: cold prefill tokens added to a decode step (0 = decode only; default {_csv(g.mixed_new_tokens)})")
    p.add_argument("--repeats", type=int, default=g.repeats,
                   help=f"measurements per point, interleaved over the grid (default {g.repeats})")
    p.add_argument("--statistic", choices=("median", "min"), default="median",
                   help="kept value of the repeats (min: intrinsic cost on a shared, noisy machine; default median)")
    p.add_argument("--max-mape", type=float, default=0.15,
                   help="refuse a held-out MAPE above this (fraction; default 0.15)")
    p.add_argument("--max-worst", type=float, default=0.5,
                   help="refuse a held-out worst error above this (fraction; default 0.5)")
    p.add_argument("--force", action="store_true",
                   help="write the profile even if the fit is refused")
    p.add_argument("--name", type=name_arg, default=None, help="profile name (default: the output file stem)")
    p.add_argument("--out", type=path_arg, default=Path(DEFAULT_OUT),
                   help=f"profile JSON to write (default: {DEFAULT_OUT}, in the working folder)")


def _grid(args: argparse.Namespace) -> Any:
    """The ``Grid`` of the options (``--repeats`` named when below 1: ``Grid`` refuses it without
    the option's name; the rest is ``check_grid``'s)."""
    from calibration.measure import Grid

    if args.repeats < 1:
        raise ValueError(f"--repeats {args.repeats}: need an integer >= 1")
    return Grid(args.new_tokens, args.context_tokens, args.requests_per_step, args.idle_lengths, args.repeats,
                args.statistic, args.decodes, args.decode_contexts, args.mixed_new_tokens)


def raw_path(out: Path) -> Path:
    """Where a refused calibration writes its raw measurements: ``OUT`` with suffix ``.raw.json``
    (``my-profile.json`` -> ``my-profile.raw.json``)."""
    return out.with_name(f"{out.stem}.raw.json")


def check_grid(grid: Any, budget: int, block: int, args: argparse.Namespace) -> None:
    """Refuse a grid or threshold that would fail (or fit nothing) only after measuring.

    Raises:
        ValueError: An empty list, a value < 1 (context, mixed new tokens: < 0), new tokens above
            ``--budget``, a decode grid that does not fit the budget,
            context not a multiple of the block size, more requests per step than new tokens
            everywhere, fewer than 5 grid points (4 fitted + 1 held out, ``fit_cost_model``), fewer
            than 2 ``--idle-lengths``, or a threshold that is not a finite fraction > 0. Each
            message names the option.
    """
    if budget < 1:
        raise ValueError(f"--budget {budget}: need >= 1 token per step")
    if budget > MAX_STEP_TOKENS:
        raise ValueError(f"--budget {budget}: need at most {MAX_STEP_TOKENS} tokens per step (2^31 - 1: vLLM "
                         f"counts a step's tokens in int32)")
    if block < 1:
        raise ValueError(f"--block-size {block}: need >= 1 token")
    for option, values, low in (("--new-tokens", grid.new_tokens, 1), ("--context-tokens", grid.context_tokens, 0),
                                ("--requests-per-step", grid.requests_per_step, 1),
                                ("--idle-lengths", grid.idle_lengths, 1)):
        if not values:
            raise ValueError(f"{option}: give at least one value")
        bad = [v for v in values if v < low]
        if bad:
            raise ValueError(f"{option} {bad[0]}: need integers >= {low}")
    # The decode grid (empty --decodes: none): checked here too, not after the engine loaded.
    for option, values, low in (("--decodes", grid.decodes, 1), ("--decode-contexts", grid.decode_contexts, 1),
                                ("--mixed-new-tokens", grid.mixed_new_tokens, 0)):
        if grid.decodes and not values:
            raise ValueError(f"{option}: give at least one value (or an empty --decodes: no decode grid)")
        bad = [v for v in values if v < low]
        if bad:
            raise ValueError(f"{option} {bad[0]}: need integers >= {low}")
    if grid.decodes and max(grid.decodes) + 1 > budget:
        raise ValueError(f"--decodes {max(grid.decodes)}: need decodes + 1 <= --budget {budget}")
    if grid.decodes and grid.mixed_new_tokens and max(grid.mixed_new_tokens) + max(grid.decodes) > budget:
        raise ValueError(f"--mixed-new-tokens {max(grid.mixed_new_tokens)}: need at most --budget {budget} "
                         f"minus the largest --decodes {max(grid.decodes)}")
    over = [n for n in grid.new_tokens if n > budget]
    if over:
        raise ValueError(f"--new-tokens {over[0]}: above --budget {budget} (a step computes at most the budget)")
    misaligned = [c for c in grid.context_tokens if c % block]
    if misaligned:
        raise ValueError(f"--context-tokens {misaligned[0]}: need a multiple of the block size {block} "
                         f"(cached context is whole blocks)")
    points = sum(1 for c in grid.context_tokens for n in grid.new_tokens for r in grid.requests_per_step if r <= n)
    if points < 5:
        raise ValueError(f"the grid (--new-tokens x --context-tokens x --requests-per-step, requests <= new "
                         f"tokens) has {points} points; the fit needs >= 5 (4 fitted, 1 held out)")
    if len(set(grid.idle_lengths)) < 2:
        raise ValueError(f"--idle-lengths: need >= 2 distinct lengths for the T_idle table, got {list(grid.idle_lengths)}")
    for option, value in (("--max-mape", args.max_mape), ("--max-worst", args.max_worst)):
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{option} {value}: need a finite fraction > 0 (0.15 = 15 %)")
    if args.max_model_len is not None:
        longest = max(max(grid.context_tokens) + max(grid.new_tokens), max(grid.idle_lengths)) + 1
        if args.max_model_len < longest:
            raise ValueError(f"--max-model-len {args.max_model_len}: the grid needs {longest} tokens "
                             f"(longest context + new tokens, or longest idle length, + 1)")
        decoding = grid_longest(grid, budget)  # vLLM: a decoding request holds what it generates too
        if getattr(args, "backend", "vllm") == "vllm" and args.max_model_len < decoding:
            raise ValueError(f"--max-model-len {args.max_model_len}: the decode grid needs {decoding} tokens "
                             f"(--decode-contexts {max(grid.decode_contexts)} + the tokens its requests "
                             f"generate while measured, + 1; an empty --decodes measures no decode steps)")


def grid_longest(grid: Any, budget: int) -> int:
    """The ``max_model_len`` the grid needs: its longest prompt + 1, and a decoding request's
    prompt plus the tokens it generates while measured (``Profiler.decode_sample``'s
    ``max_tokens``) + 1."""
    longest = max(max(grid.context_tokens) + max(grid.new_tokens), max(grid.idle_lengths)) + 1
    if grid.decodes:
        r, c = max(grid.decodes), max(grid.decode_contexts)
        longest = max(longest, c + -(-r * c // max(1, budget - r)) + 17)
    return longest


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


def _total_device_bytes() -> int | None:
    """Total memory of the current GPU, bytes, or None without CUDA."""
    try:
        import torch

        return int(torch.cuda.mem_get_info()[1]) if torch.cuda.is_available() else None
    except (ImportError, RuntimeError):
        return None


#: Options only one backend reads: ``(option, attribute, default)``. Given with the other backend
#: (a value other than the default), they are refused rather than ignored.
VLLM_ONLY = (("--model", "model", None), ("--load-format", "load_format", None), ("--dtype", "dtype", "auto"),
             ("--block-size", "block_size", None), ("--max-worst", "max_worst", 0.5), ("--force", "force", False))
TORCH_ONLY = (("--model-config", "model_config", None), ("--device", "device", None))


def check_backend_options(args: argparse.Namespace) -> None:
    """Refuse an option the chosen ``--backend`` does not read (given, i.e. not its default).

    Raises:
        ValueError: Naming the option and what that backend uses instead.
    """
    if args.backend == "torch":
        for option, attr, default in VLLM_ONLY:
            if getattr(args, attr) != default:
                raise ValueError(f"{option}: a vLLM-backend option, which --backend torch does not use (it builds "
                                 f"the model from --model-config on --device in plain PyTorch, in its own dtype: "
                                 f"bf16 on a GPU, fp32 on a CPU; its fit is never refused, so it has no "
                                 f"--max-worst or --force)")
    else:
        for option, attr, default in TORCH_ONLY:
            if getattr(args, attr) != default:
                raise ValueError(f"{option}: a --backend torch option, which the vLLM backend does not use "
                                 f"(it serves --model with --load-format and --dtype)")


def cmd_calibrate(args: argparse.Namespace) -> int:
    """Run the calibration; exit 0 when a profile was written, 3 when the fit was refused."""
    check_backend_options(args)
    if args.backend == "torch":
        return cmd_calibrate_torch(args)
    from calibration.fit import fit_cost_model
    from calibration.measure import Profiler, measure, monotone
    from fairsim.costmodel import IDLE_TABLE_TOLERANCE, Profile, check_idle_consistency, save_profile
    from fairsim.deps import require
    from fairsim.errors import ProfileError
    from fairsim.io import atomic_write_text, check_writable_file
    from fairsim.live.engine import LiveConfig, make_llm, shutdown_llm, vllm_version

    grid = _grid(args)
    on_gpu = _device().startswith("CPU") is False
    block = args.block_size if args.block_size is not None else (16 if on_gpu else 128)  # 0: refused
    check_grid(grid, args.budget, block, args)
    check_writable_file(args.out, "--out")
    check_writable_file(raw_path(args.out), "--out")
    require("vllm")
    longest = grid_longest(grid, args.budget)  # a decoding request's prompt plus what it generates
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
    try:
        model_cfg = llm.llm_engine.model_config
        from calibration.kv import engine_kv_capacity

        kv_capacity, max_model_len, kv_notes = engine_kv_capacity(llm, _total_device_bytes() if on_gpu else None)
        log(f"KV cache {kv_notes['kv_cache_tokens']:,} tokens ({kv_notes['kv_cache_blocks']} blocks of "
            f"{kv_notes['kv_block_size']}), max_model_len {max_model_len}")
        profiler = Profiler(llm, block)
        profiler.warm_up()
        samples, idle, raw = measure(profiler, grid, args.budget, progress=log)
    finally:
        shutdown_llm(llm)  # the engine's teardown now, not at interpreter exit
    fit = fit_cost_model(samples)
    lengths = sorted(idle)
    seconds = monotone([idle[L] for L in lengths])
    raised = [(L, idle[L], t) for L, t in zip(lengths, seconds) if t != idle[L]]
    if raised:  # said, not only in the profile's metadata: these values were not measured
        shown = ", ".join(f"{L}: {1e3 * m:.4g} -> {1e3 * t:.4g} ms" for L, m, t in raised)
        print(f"fairsim: warning: T_idle measured lower at a longer prompt (timing noise), raised to the "
              f"largest value at a shorter prompt so the table does not decrease: {shown}", file=sys.stderr)
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
    reasons = []
    if refused:
        reasons.append(f"held-out MAPE {100 * fit.holdout_mape:.1f}% (limit {100 * args.max_mape:.0f}%) or worst "
                       f"{100 * fit.holdout_worst:.1f}% (limit {100 * args.max_worst:.0f}%)")
    c = fit.coefficients
    name = args.name or args.out.stem
    idle_tolerance = None
    try:
        probe = Profile(name, "measured", c["a_s"], c["b_s_per_token"], c["k_s_per_pair"], c["d_s_per_request"],
                        tuple(lengths), tuple(seconds), args.budget)
        check_idle_consistency(probe, str(args.out))
    except ProfileError as exc:
        reasons.append(str(exc).split(": ", 1)[1])
        worst = check_idle_consistency(probe, str(args.out), tolerance=math.inf)
        idle_tolerance = math.ceil(worst * 20 + 1e-9) / 20  # next 5 %, stated in the profile
    if reasons and not args.force:
        raw = {"fit_refused": True, "reasons": reasons, "device": _device(), "vllm_version": vllm_version(),
               "block_size": block, "budget_tokens": args.budget, "grid": grid.to_dict(), "fit": fit.to_dict(),
               "idle_prefill": {"prompt_tokens": lengths, "seconds": seconds},
               "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
               "raw_measurements": raw, "command": "fairsim " + " ".join(sys.argv[1:])}
        atomic_write_text(raw_path(args.out), json.dumps(raw, indent=2) + "\n")
        print(f"fairsim: error: fit refused: {'; '.join(reasons)}; rerun on a quieter machine, more "
              f"--repeats, or --force to write it anyway. Raw measurements: {raw_path(args.out)}",
              file=sys.stderr)
        return 3
    refused = bool(reasons)
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
        **kv_notes,
    }
    if idle_tolerance is not None:
        metadata["idle_table_note"] = (f"the T_idle table differs from the fitted coefficients by more than "
                                       f"{100 * IDLE_TABLE_TOLERANCE:.0f} %; written with --force and "
                                       f"idle_table_tolerance={idle_tolerance}")
    # The weight-read floor is not fitted (min_step_s = 0): the fitted a covers the smallest step.
    json.dumps(metadata)  # fail here, before writing, if metadata is not JSON-ready
    profile = Profile(name, "measured", c["a_s"], c["b_s_per_token"], c["k_s_per_pair"], c["d_s_per_request"],
                      tuple(lengths), tuple(seconds), args.budget, metadata,
                      kv_capacity=kv_capacity, max_model_len=max_model_len,
                      e_s_per_decode_ctx_token=c["e_s_per_decode_ctx_token"], f_s_per_decode=c["f_s_per_decode"])
    save_profile(profile, args.out, idle_table_tolerance=idle_tolerance)
    print(f"wrote {args.out}")
    return 0


def cmd_calibrate_torch(args: argparse.Namespace) -> int:
    """``calibrate --backend torch``: time the grid on a plain-PyTorch Llama and write the profile.

    The same grid options as the vLLM backend (cached contexts need no block alignment here).
    The fit error per grid region is printed and stored; a region above ``--max-mape`` is a
    warning recorded in the profile (``calibration.grid.fit_profile``), not a refusal.
    """
    from calibration.grid import fit_profile, grid_points
    from calibration.profile_cli import print_fit
    from calibration.torch_backend import TINY_CONFIG, LlamaShape, TorchLlama, kv_bytes_per_token, weight_bytes
    from calibration.grid import save_built_profile
    from fairsim.deps import require
    from fairsim.io import check_writable_file
    from fairsim.kvcapacity import GIB, KVCapacity

    grid = _grid(args)
    check_grid(grid, args.budget, 1, args)  # (the decode grid's fit to the budget too)
    check_writable_file(args.out, "--out")
    require("torch")
    config = args.model_config or TINY_CONFIG
    shape = LlamaShape.from_file(config)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: torch sees no CUDA device here")
    model = TorchLlama(shape, args.device)
    log = lambda msg: print(f"calibrate: {msg}", file=sys.stderr, flush=True)  # noqa: E731
    device = model.describe() or _device()
    log(f"torch backend on {device}, {model.dtype}, config {config}")
    points = grid_points(grid)
    seconds, raw = [], []
    for i, point in enumerate(points):
        value, times = model.time_step(point, grid.repeats, grid.statistic)
        seconds.append(value)
        raw.append(times)
        log(f"step {i + 1}/{len(points)} ({point.region}): {1e3 * value:.2f} ms")
    on_gpu = model.device.type == "cuda"
    dtype_bytes = 2 if on_gpu else 4
    kv_capacity = None
    if on_gpu:
        kv_capacity = KVCapacity(device_memory_gib=round(_total_device_bytes() / GIB, 2), gpu_memory_utilization=0.92,
                                 weights_gib=round(weight_bytes(shape, dtype_bytes) / GIB, 2),
                                 activation_reserve_gib=1.0, kv_bytes_per_token=kv_bytes_per_token(shape, dtype_bytes))
    metadata = {
        "label": "torch-level, not vLLM: a Llama built from its config with random weights, timed in plain PyTorch "
                 "(SDPA with a cached prefix; no scheduler, paged KV, CUDA graphs or sampling)",
        "source": "torch",
        "device": device,
        "dtype": str(model.dtype),
        "torch_version": torch.__version__,
        "model_config": str(config),
        "model_shape": shape.__dict__,
        "parameters": shape.parameters(),
        "repeats": grid.repeats,
        "statistic": grid.statistic,
        "grid": grid.to_dict(),
        "budget_tokens": args.budget,
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "raw_step_seconds": raw,
        "command": "fairsim " + " ".join(sys.argv[1:]),
    }
    if kv_capacity is not None:
        metadata["kv_capacity_note"] = ("device memory from torch.cuda.mem_get_info; utilisation 0.92 (vLLM 0.32 "
                                        "default) and 1 GiB activation reserve as the priors")
    name = args.name or args.out.stem
    profile, fit, errors = fit_profile(
        points, seconds, name=name, idle=lambda L: model.idle_seconds(L, args.budget, grid.repeats, grid.statistic),
        idle_lengths=sorted(set(grid.idle_lengths)), budget_tokens=args.budget, metadata=metadata,
        max_region_mape=args.max_mape, kv_capacity=kv_capacity, max_model_len=args.max_model_len)
    print_fit(profile, fit, errors)
    save_built_profile(profile, args.out)
    print(f"wrote {args.out}")
    return 0
