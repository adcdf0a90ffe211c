"""``fairsim tune``: the command line (parser, checks, the study, the report)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

EXECUTORS = ("local", "ray")
REPORT_FILES = ("study.db", "trials.parquet", "front.parquet", "front.png", "tune.json", "policy-config.json")


def add_tune_command(sub: argparse._SubParsersAction, add_common: Callable, fmt: type) -> None:
    """Register ``fairsim tune``."""
    from fairsim.analysis.cli import retitle

    p = sub.add_parser("tune", formatter_class=fmt,
                       help="search policies and their parameters (Optuna) for your TTFT targets on training "
                            "windows of a trace; report the winner on held-out windows")
    p.add_argument("--policies", default="all",
                   help="comma-separated policies to search among, or 'all'")
    p.add_argument("--trials", type=int, default=50, help="trials in the study (a rerun continues up to N)")
    p.add_argument("--targets", default="accept",
                   help="comma-separated: STAT<=FxPOLICY (STAT p50, p99, max/worst; POLICY at its defaults, "
                        "same window), STAT<=Ns, no-starvation; 'accept' = fairsim accept's "
                        "(p50<=1.1xlpm,p99<=1.1xfcfs,no-starvation)")
    p.add_argument("--space", action="append", default=[], metavar="POLICY.KEY=RANGE",
                   help="search range of a parameter, replacing the policy's declared one: LOW:HIGH[:int][:log] "
                        "or A|B|C (repeatable)")
    p.add_argument("--folds", type=int, default=None,
                   help="cut the trace's span into N windows of equal length: 1st, 3rd, ... train, 2nd, 4th, ... "
                        "held out (default 4; not with --train/--holdout)")
    p.add_argument("--train", default=None, metavar="NAME:START-END,...",
                   help="training windows, trace seconds (with --holdout; replaces --folds)")
    p.add_argument("--holdout", default=None, metavar="NAME:START-END,...",
                   help="held-out windows, trace seconds (with --train)")
    p.add_argument("--warmup", type=float, default=None,
                   help="trace seconds replayed before each window, not scored (default: the window's length)")
    p.add_argument("--search-seed", type=int, default=0, metavar="N",
                   help="seed of the sampler (TPE): the same seed, trials and --batch give the same study")
    p.add_argument("--batch", type=int, default=1,
                   help="trials sampled together and run in parallel; the results depend on it, not on the executor")
    p.add_argument("--executor", choices=EXECUTORS, default="local",
                   help="where a batch runs: local processes, or Ray tasks")
    p.add_argument("--address", default=None, help="Ray cluster address (with --executor ray; default: a local Ray)")
    p.add_argument("--workers", type=int, default=None,
                   help="local processes, or CPUs of a Ray started here (default: --batch, at most the cores)")
    add_common(p, goodput=False)  # --slo refused: tune checks TTFT targets
    from fairsim.cli_disagg import add_disagg_options
    from fairsim.cli_fleet import add_fleet_options

    add_fleet_options(p)  # every trial, reference and held-out run on this fleet
    add_disagg_options(p)  # or on this disaggregated deployment
    retitle(p, "--out", "folder of the study (study.db, resumable) and its results: trials.parquet, "
                        "front.parquet, front.png, tune.json, policy-config.json (required)")
    retitle(p, "--format", "table for people, json (tune.json) for scripts")
    retitle(p, "--param", "fix a parameter instead of searching it: KEY=VALUE, or POLICY.KEY=VALUE for one policy (repeatable)")


def parse_spaces(items: list[str], names: list[str]) -> dict[str, dict[str, Any]]:
    """``--space`` items -> policy -> key -> range.

    Raises:
        ValueError: A malformed item, a policy not among ``--policies``, a parameter the policy
            does not accept, an empty range, or a key given twice; naming ``--space`` and the item.
    """
    from fairsim.options import param_scope
    from fairsim.policies.registry import accepted_params
    from fairsim.policies.space import parse_range
    from fairsim.policies.user import is_user_spec, load_user_class, user_params

    out: dict[str, dict[str, Any]] = {}
    for item in items:
        key, sep, text = item.partition("=")
        policy = param_scope(key)
        if not sep or policy is None or not text:
            raise ValueError(f"--space {item!r}: expected POLICY.KEY=LOW:HIGH[:int][:log] or POLICY.KEY=A|B|C")
        name = key.rpartition(".")[2]
        if policy not in names:
            raise ValueError(f"--space {item}: policy {policy!r} is not among --policies ({', '.join(names)})")
        accepted = user_params(load_user_class(policy)) if is_user_spec(policy) else accepted_params(policy)
        if name not in accepted:
            raise ValueError(f"--space {item}: unknown parameter {name!r} of policy {policy!r}; "
                             f"accepted: {', '.join(accepted) or 'none'}")
        if name in out.get(policy, {}):
            raise ValueError(f"--space {item}: {key} given more than once")
        out.setdefault(policy, {})[name] = parse_range(text, f"--space {item}")
    return out


def build_spaces(names: list[str], overrides: dict[str, dict[str, Any]], fixed: dict[str, dict[str, Any]],
                 profile: Any) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Each policy's search space (declared, then ``--space``, less ``--param``'s fixed keys)
    and the notes on policies that declare none; every range's bounds built once with the
    policy so a value it refuses is named before any trial.

    Raises:
        ValueError: A bound the policy refuses (naming the option or the declaration).
    """
    from fairsim.policies import make_policy
    from fairsim.policies.catalog import search_space
    from fairsim.policies.space import Choice

    spaces, notes = {}, []
    for name in names:
        declared, note = search_space(name)
        if note and name not in overrides:
            notes.append(note)
        space = {**declared, **overrides.get(name, {})}
        space = {k: v for k, v in space.items() if k not in fixed.get(name, {})}
        for key, rng in space.items():
            for value in (rng.values if isinstance(rng, Choice) else (rng.low, rng.high)):
                try:
                    make_policy(name, profile, **{**fixed.get(name, {}), key: value})
                except ValueError as exc:
                    where = "--space" if key in overrides.get(name, {}) else f"the search_space of policy {name!r}"
                    hint = ("; a whole-number range is LOW:HIGH:int" if isinstance(value, float)
                            and "takes a whole number" in str(exc) else "")
                    raise ValueError(f"{where}: {name}.{key}={value!r} is refused: {exc}{hint}") from None
        spaces[name] = space
    return spaces, notes


def cmd_tune(args: argparse.Namespace) -> int:
    """Run ``fairsim tune``: 0 when a setting meets the targets on the training windows; 2 (an
    error naming the closest setting, after every result is written) when none does."""
    from fairsim.accept import parse_targets
    from fairsim.analysis.load import parse_windows
    from fairsim.costmodel import load_profile
    from fairsim.deps import require
    from fairsim.io import check_writable_dir
    from fairsim.options import (capacity_of, check_policies, engine_config, load_in_trace_time, params_for,
                                 parse_params, resolve_policies)
    from fairsim.cli_disagg import disagg_spec
    from fairsim.cli_fleet import check_fleet_trace, fleet_spec
    from fairsim.policies import make_policy
    from fairsim.tune import evaluate as ev

    if args.out is None:
        raise ValueError("--out DIR: tune keeps its study (study.db) and results there; give a folder")
    if args.trials < 1:
        raise ValueError(f"--trials {args.trials}: need at least 1")
    if args.search_seed < 0:
        raise ValueError(f"--search-seed {args.search_seed}: need an integer >= 0")
    if args.batch < 1:
        raise ValueError(f"--batch {args.batch}: need at least 1")
    if args.workers is not None and args.workers < 1:
        raise ValueError(f"--workers {args.workers}: need at least 1")
    if args.address is not None and args.executor != "ray":
        raise ValueError(f"--address {args.address}: only used with --executor ray")
    if getattr(args, "slo", None):
        raise ValueError("--slo: tune checks TTFT targets (--targets); goodput against an SLO is in run/compare")
    if args.warmup is not None and not (args.warmup >= 0 and math.isfinite(args.warmup)):
        raise ValueError(f"--warmup {args.warmup}: need a finite time >= 0 s")
    if (args.train is None) != (args.holdout is None):
        raise ValueError("--train and --holdout go together (or neither: --folds cuts the windows)")
    if args.folds is not None and args.train is not None:
        raise ValueError(f"--folds {args.folds}: --train and --holdout give the windows; --folds cuts them "
                         f"only without those")
    # --mode disaggregated (args.mode becomes colocated: the decode side's shaping), else a fleet.
    disagg = disagg_spec(args)
    fleet = disagg or fleet_spec(args)
    require("optuna")
    if args.executor == "ray":
        require("ray")
    check_writable_dir(args.out, files=(*REPORT_FILES, "closest-policy-config.json"))
    profile = load_profile(args.profile)
    if disagg is not None:
        disagg.link(profile)  # no bytes per token, or a link too slow: refused before any work
    # (all: with the generic klpm, the one whose k is searched; klpm4 and klpm8 fix it)
    names = resolve_policies(args.policies, include_generic=True)
    if args.trials < len(names):
        # The first trials are each policy at its defaults: with fewer, some policies never run and
        # "no trial meets the targets" can be said where an untuned policy meets them.
        raise ValueError(f"--trials {args.trials}: fewer than the {len(names)} policies searched, each of which "
                         f"runs first at its defaults; give --trials {len(names)} or more, or fewer --policies")
    params = parse_params(args.param)
    check_policies(names, profile, params)
    fixed = {n: params_for(n, params) for n in names}
    overrides = parse_spaces(args.space, names)
    for name, keys in overrides.items():
        both = sorted(set(keys) & set(fixed.get(name, {})))
        if both:
            raise ValueError(f"--space {name}.{both[0]}: --param fixes {name}.{both[0]}, so it is not searched; "
                             f"give one of the two")
    spaces, notes = build_spaces(names, overrides, fixed, profile)
    targets, no_starvation = parse_targets(args.targets)
    refs = list(dict.fromkeys([*(t.ref for t in targets if t.ref is not None), "fcfs"]))
    for ref in refs:
        try:
            make_policy(ref, profile)
        except ValueError as exc:
            raise ValueError(f"--targets {args.targets}: reference {exc}") from None
    for note in notes:
        print(f"fairsim: note: {note}", file=sys.stderr)

    trace, requests, scale = load_in_trace_time(args, profile)
    check_fleet_trace(fleet, requests, trace.source)
    base = engine_config(args, profile)
    # Under --mode disaggregated the prefill side's cache, each decode engine's checked.
    block_size, kv_blocks = (capacity_of if disagg is None else disagg.capacity)(requests, base, args)
    config = dataclasses.replace(base, block_size=block_size, kv_blocks=kv_blocks, kv_fraction=None, kv_tokens=None)
    if args.train is not None:
        train_w = _windows(parse_windows, args.train, "--train")
        held_w = _windows(parse_windows, args.holdout, "--holdout")
        overlap = [f"{a.name}/{b.name}" for a in train_w for b in held_w if a.overlaps(b)]
        if overlap:
            raise ValueError(f"--holdout {args.holdout}: overlaps --train ({', '.join(overlap)}); held-out windows "
                             f"must not be scored in training")
    else:
        train_w, held_w = ev.fold_windows(requests, 4 if args.folds is None else args.folds)
    train = ev.cut_windows(requests, train_w, args.warmup, scale, "--train" if args.train else "--folds")
    held = ev.cut_windows(requests, held_w, args.warmup, scale, "--holdout" if args.holdout else "--folds")

    sim = ev.Simulator(profile, config, args.replay, args.think_scale, fixed, fleet)
    fingerprint = _fingerprint(args, trace, profile, names, spaces, fixed, targets, no_starvation,
                               train_w, held_w, config, scale, fleet)
    objective = ev.Objective(tuple(targets), no_starvation,
                             ev.reference_stats(sim, refs, [*train, *held]))
    axes = objective.axis_labels()
    evaluate = ev.TrialEvaluator(sim, tuple(train), objective)
    from fairsim.sweep.lock import SweepLock

    with SweepLock(args.out):
        from fairsim.tune import search

        study = search.open_study(args.out, fingerprint)
        held_already = len(search._done_slots(study))
        if held_already > args.trials:  # the study is reported whole: say so, as it is not what N asked
            note = (f"--trials {args.trials}: the study in {args.out} already holds {held_already} trials; "
                    f"all of them are reported (a larger N continues it; a new --out starts afresh)")
            notes.append(note)
            print(f"fairsim: note: {note}", file=sys.stderr)
        workers = args.workers or min(args.batch, os.cpu_count() or 1)
        executor = (search.RayExecutor(args.address, workers) if args.executor == "ray"
                    else search.LocalExecutor(workers if args.batch > 1 else 1))
        try:
            with executor, _progress(args.trials, len(search._done_slots(study)), axes) as on_done:
                ran = search.run_study(study, trials=args.trials, batch=args.batch, seed=args.search_seed,
                                       policies=names, spaces=spaces, evaluate=evaluate, executor=executor,
                                       on_done=on_done, initial=_defaults_in_space(names, spaces))
        except KeyboardInterrupt:  # (the trials finished are in the study: say how to go on, as sweep does)
            print(f"fairsim: the finished trials are kept in {args.out}; run the same command to resume",
                  file=sys.stderr)
            raise
        return _report(args, study, objective, sim, train, held, names, axes, notes, trace, ran)


def _defaults_in_space(names: list[str], spaces: dict[str, dict[str, Any]]) -> list[tuple[str, dict[str, Any] | None]]:
    """Each policy at its constructor defaults, the study's first trials: ``(name, params)`` with
    the searched keys' defaults where they all lie in its space, else ``(name, None)`` (the trial
    runs the constructor's defaults, ``search.run_study``), so every policy's untuned setting is
    a trial and the choice is never worse than it on the training windows."""
    import inspect

    from fairsim.policies.registry import _CLASSES
    from fairsim.policies.space import Choice
    from fairsim.policies.user import is_user_spec, load_user_class

    out = []
    for name in names:
        cls = load_user_class(name) if is_user_spec(name) else _CLASSES[name]
        defaults: dict[str, Any] = {}
        for klass in cls.__mro__:  # a subclass passing **kwargs on takes its base's defaults
            init = klass.__dict__.get("__init__")
            if init is not None:
                for p in inspect.signature(init).parameters.values():
                    if p.default is not inspect.Parameter.empty:
                        defaults.setdefault(p.name, p.default)
        params = {k: defaults.get(k) for k in spaces[name]}
        inside = all(v in r.values if isinstance(r, Choice) else
                     (v is not None and not isinstance(v, bool) and r.low <= v <= r.high)
                     for v, r in zip(params.values(), spaces[name].values()))
        out.append((name, params if inside else None))
    return out


def _windows(parse: Callable, spec: str, option: str) -> list:
    try:
        return parse(spec)
    except ValueError as exc:
        raise ValueError(str(exc).replace("--windows", option)) from None


def _fingerprint(args, trace, profile, names, spaces, fixed, targets, no_starvation, train_w, held_w,
                 config, scale, fleet) -> dict[str, Any]:
    """What a study's results depend on (``fairsim.tune.search``: a change refuses the study).
    ``fleet`` enters the settings only when there is one, so a single engine's study made before
    fleets existed stays valid."""
    from fairsim.sweep.runspec import code_identity, file_sha256, trace_sha256

    def rng(r: Any) -> Any:
        return {"type": type(r).__name__, **dataclasses.asdict(r)}

    trace_id = trace_sha256(args.trace, args.trace_format) if args.trace else f"generated input, seed {args.seed}"
    setup = {
        "policies": names, "spaces": {n: {k: rng(r) for k, r in s.items()} for n, s in spaces.items()},
        "fixed": fixed, "targets": [t.label() for t in targets], "no_starvation": no_starvation,
        "train": [[w.name, w.start_s, w.end_s] for w in train_w],
        "holdout": [[w.name, w.start_s, w.end_s] for w in held_w], "warmup": args.warmup,
        "engine": {k: v for k, v in dataclasses.asdict(config).items()}, "time_scale": scale,
        "replay": args.replay, "think_scale": args.think_scale, "session_rate": args.session_rate,
        "window_start": args.window_start, "window_end": args.window_end, "max_requests": args.max_requests,
        "trace_format": args.trace_format, "trace_part": getattr(args, "trace_part", None),
        "skip_long": args.skip_long, "max_model_len": args.max_model_len, "seed": args.seed, "search_seed": args.search_seed, "batch": args.batch,
    }
    if fleet is not None:
        setup["fleet"] = _fleet_json(fleet, profile)
    from fairsim.sweep.plan import _policy_inputs

    # A class of your own (``package.module:Class``): its source file's content, as a sweep's
    # run id holds it, so editing the policy refuses the study instead of mixing trials of two
    # versions of its code. Only when there is one, so a study of registered policies made
    # before stays valid.
    refs = [t.ref for t in targets if t.ref is not None]  # a reference policy may be one too
    sources = {n: _policy_inputs(n) for n in dict.fromkeys([*names, *refs])}
    sources = {n: sha for n, src in sources.items() for sha in src.values()}
    if sources:
        setup["policy_source_sha256"] = sources
    from fairsim.costmodel import PROFILE_DIR

    profile_file = Path(args.profile) if Path(args.profile).is_file() else PROFILE_DIR / f"{args.profile}.json"
    return {"trace": trace_id, "profile": file_sha256(profile_file), "code": json.dumps(code_identity(), sort_keys=True),
            "setup": json.loads(json.dumps(setup, default=str))}


class _progress:
    """A tqdm bar over the trials with the best result so far (meeting the targets first)."""

    def __init__(self, total: int, done: int, axes: tuple[str, str]) -> None:
        self.total, self.done, self.axes = total, done, axes
        self.best: tuple | None = None

    def __enter__(self) -> Callable:
        from tqdm import tqdm

        self.bar = tqdm(total=self.total, initial=min(self.done, self.total), desc="tune", unit="trial",
                        disable=None, leave=False)
        return self.on_done

    def on_done(self, item: tuple[str, dict[str, Any]], result: Any) -> None:
        self.bar.update(1)
        if result.error is not None:
            return
        key = (not result.attrs["holds"], result.values[0], result.values[1])
        if self.best is None or key < self.best[0]:
            self.best = (key, item[0])
            self.bar.set_postfix_str(f"best {item[0]}: {self.axes[0]} {key[1]:.3f}, {self.axes[1]} {key[2]:.3f}"
                                     f"{' (meets targets)' if not key[0] else ''}")

    def __exit__(self, *exc: object) -> None:
        self.bar.close()


def _report(args, study, objective, sim, train, held, names, axes, notes, trace, ran) -> int:
    """Write the results into ``--out`` and print them; raise when no trial meets the targets."""
    from fairsim.io import atomic_write, atomic_write_text
    from fairsim.policy_config import policy_config_text
    from fairsim.tune import report
    from fairsim.tune.evaluate import score_from_attrs

    rows = report.trial_rows(study)
    front = report.pareto_front(rows)
    chosen, meets = report.choose(rows)
    out: Path = args.out
    for name, table in (("trials", report.frame(rows)), ("front", report.frame(front))):
        atomic_write(out / f"{name}.parquet", lambda tmp, table=table: table.to_parquet(tmp, index=False))

    def both(policy: str, params: dict[str, Any]) -> tuple[Any, Any]:
        return (objective.score(train, sim.stats(policy, params, train)),
                objective.score(held, sim.stats(policy, params, held)))

    from fairsim.errors import PolicyContractError, PolicyError

    # A policy that fails at its defaults (its own error, or a broken contract) is a failed trial
    # in the study; it is left out of the untuned comparison, with a note, and the report goes on.
    untuned = {}
    for name in names:
        try:
            untuned[name] = both(name, {})
        except (PolicyError, PolicyContractError) as exc:
            note = (f"policy {name!r} at its defaults failed ({type(exc).__name__}: {exc}); it is left out of "
                    f"the best untuned policy")
            notes.append(note)
            print(f"fairsim: note: {note}", file=sys.stderr)
    best = report.choose([{"trial": i, "policy": n, "params": {}, "median": s[0].median, "tail": s[0].tail,
                           "holds": s[0].holds, "excess": s[0].excess, "error": None}
                          for i, (n, s) in enumerate(untuned.items())])[0]
    best_name = None if best is None else best["policy"]
    fairway = untuned.get("fairway") or both("fairway", {})
    entries = [("default fairway", *fairway)]
    if best_name is not None:
        entries.append((f"best untuned ({best_name})", *untuned[best_name]))
    payload: dict[str, Any] = {
        "trace": trace.source, "profile": sim.profile.name, "fleet": _fleet_json(sim.fleet, sim.profile),
        "policies": names, "targets": args.targets,
        "axes": list(axes), "trials": args.trials, "trials_in_study": len(rows), "trials_run_now": ran,
        "batch": args.batch, "search_seed": args.search_seed,
        "executor": args.executor, "train_windows": [_window(w) for w in train],
        "holdout_windows": [_window(w) for w in held], "notes": notes, "meets_targets": meets,
        "front": [_row(r) for r in front],
        "default_fairway": _scores(*fairway),
        "best_untuned": None if best_name is None else {"policy": best_name, **_scores(*untuned[best_name])},
    }
    # A config file of an earlier study in this folder (deleted study.db, other targets) must not
    # outlive it: the folder holds this study's policy-config.json or closest-policy-config.json
    # only, never a stale one to be deployed by mistake.
    keep = None if chosen is None else ("policy-config.json" if meets else "closest-policy-config.json")
    for name in ("policy-config.json", "closest-policy-config.json"):
        if name != keep:
            (out / name).unlink(missing_ok=True)
    if chosen is not None:
        c_train = score_from_attrs((chosen["median"], chosen["tail"]), study.trials[chosen["trial"]].user_attrs)
        c_held = objective.score(held, sim.stats(chosen["policy"], chosen["params"], held))
        label = "chosen" if meets else "closest"  # (no trial meets the targets: the closest, not a choice)
        entries.insert(0, (f"{label} ({chosen['policy']}, trial {chosen['trial']})", c_train, c_held))
        full = {**sim.fixed.get(chosen["policy"], {}), **chosen["params"]}
        payload["chosen"] = {"trial": chosen["trial"], "policy": chosen["policy"], "params": full,
                             **_scores(c_train, c_held)}
        payload["held_out_gain"] = {
            "over_default_fairway": {"median": report.gain(fairway[1].median, c_held.median),
                                     "tail": report.gain(fairway[1].tail, c_held.tail)},
            "over_best_untuned": None if best_name is None else {
                "median": report.gain(untuned[best_name][1].median, c_held.median),
                "tail": report.gain(untuned[best_name][1].tail, c_held.tail)}}
        config_file = out / ("policy-config.json" if meets else "closest-policy-config.json")
        atomic_write_text(config_file, policy_config_text(chosen["policy"], full))
        payload["policy_config"] = str(config_file)
    marks = {label: train_score for label, train_score, _ in entries}
    limits = (objective.median_axis.factor, objective.tail_axis.factor)
    from fairsim.figures import save

    save(report.figure(rows, front, axes, marks, limits, f"fairsim tune: {trace.label}, {len(rows)} trials"),
         out / "front.png")
    atomic_write_text(out / "tune.json", json.dumps(payload, indent=2, default=str) + "\n")
    if args.format == "json":
        print(json.dumps(payload, indent=2, default=str))
    else:
        _print_report(args, payload, front, entries, axes, train, held, len(rows))
    if not meets:
        failed = [r for r in rows if r["error"] is not None]
        closest = (f"; every trial failed (trials.parquet's error; first: trial {failed[0]['trial']}, "
                   f"{failed[0]['policy']}: {failed[0]['error']})" if failed else "") if chosen is None else (
            f"; closest: trial {chosen['trial']}, {chosen['policy']} {report.show_params(chosen['params'])} "
            f"({', '.join(f'{k}: {v:.3f}' for k, v in payload['chosen']['train']['ratios'].items())}"
            f"{', worst max/p99 %.2f' % payload['chosen']['train']['starvation'] if objective.no_starvation else ''}), "
            f"written to {payload['policy_config']}")
        raise ValueError(f"--targets {args.targets}: no trial of {len(rows)} meets the targets on the training "
                         f"windows{closest}; results kept in {out}")
    return 0


def _fleet_json(fleet: Any, profile: Any) -> dict[str, Any] | None:
    """The fleet as tune.json and the fingerprint record it (``None``: a single engine; a
    disaggregated deployment as its ``run.json`` record, ``DisaggSpec.run_info``, its link as
    used with ``profile``)."""
    if fleet is None:
        return None
    from fairsim.cli_disagg import DisaggSpec

    if isinstance(fleet, DisaggSpec):
        return fleet.run_info(profile)
    return {"instances": fleet.instances, "router": fleet.router, "router_params": dict(fleet.params)}


def _window(w: Any) -> dict[str, Any]:
    return {"name": w.window.name, "start_s": w.window.start_s, "end_s": w.window.end_s, "requests": len(w.scored)}


def _row(r: dict[str, Any]) -> dict[str, Any]:
    return {k: r[k] for k in ("trial", "policy", "params", "median", "tail", "holds", "ratios")}


def _scores(train: Any, held: Any) -> dict[str, Any]:
    return {part: {"median": s.median, "tail": s.tail, "meets_targets": s.holds, "ratios": s.ratios,
                   "starvation": s.starvation, "windows": s.windows} for part, s in (("train", train), ("held_out", held))}


def _print_report(args, payload, front, entries, axes, train, held, n_rows) -> None:
    from fairsim.io import echo
    from fairsim.tune import report

    def names(ws: list) -> str:
        # The bounds as they are (echo: no rounding), so accept --windows NAME:START-END replays them.
        return ", ".join(f"{w.window.name} {echo(w.window.start_s)}-{echo(w.window.end_s)} trace s "
                         f"({len(w.scored)} req)" for w in ws)

    if payload["fleet"] is not None:
        from fairsim.cli_fleet import describe_deployment

        print(f"deployment: {describe_deployment(payload['fleet'])}")
    print(f"training windows: {names(train)}\nheld-out windows: {names(held)}\ntargets: {args.targets}")
    print(f"\nPareto front of {n_rows} trials (worst training window):")
    print(report.front_table(front, axes))
    print()
    print(report.comparison_table(entries, axes))
    chosen = payload.get("chosen")
    if chosen is not None:
        g = payload["held_out_gain"]
        print(f"\n{'chosen' if payload['meets_targets'] else 'closest (targets not met)'}: {chosen['policy']} "
              f"{report.show_params(chosen['params'])} -> {payload['policy_config']}")
        over_best = ("no untuned policy ran" if g["over_best_untuned"] is None else
                     f"{axes[0]} x{g['over_best_untuned']['median']:.2f}, {axes[1]} x{g['over_best_untuned']['tail']:.2f}")
        best = payload["best_untuned"]
        print(f"held-out gain over default fairway: {axes[0]} x{g['over_default_fairway']['median']:.2f}, "
              f"{axes[1]} x{g['over_default_fairway']['tail']:.2f}; over the best untuned policy"
              f"{'' if best is None else ' (' + best['policy'] + ')'}: {over_best} (x>1: lower, better)")
