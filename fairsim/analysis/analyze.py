"""``fairsim analyze``: measure a trace before changing the scheduler (the paper's step 1).

Four measurements of one trace, each a function with its own module:

- whether ordering matters, for two reasons: the work spread of concurrently queued requests over
  time and the paper's rule (``spread.py``), from the trace's observed scheduling times when it
  has them, else from an FCFS simulation at its recorded load; and the prefix-cache hit rate that
  arrival order (FCFS) and a reuse-grouping order (LPM) keep at the run's KV capacity
  (``order_reuse.py``): ordering matters if either says so (``overall_verdict``);
- the infinite-cache prefix-hit bound and the LRU hit rate at every KV capacity (``reuse.py``);
- offered load over time and the busiest windows (``load.py``);
- figures and a one-page Markdown report (``write_report``).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fairsim.io import atomic_write_text, json_safe, plural

from fairsim.analysis.load import Window, busiest_windows, load_series
from fairsim.analysis.order_reuse import DEFAULT_REUSE_THRESHOLD, OrderReuse
from fairsim.analysis.reuse import HitCurve, lru_hit_curve
from fairsim.analysis.spread import DEFAULT_SPREAD_THRESHOLD, QueueSpread, queue_spread
from fairsim.costmodel import Profile
from fairsim.sim import EngineConfig, simulate
from fairsim.sim.capacity import resolve_capacity
from fairsim.sim.keys import block_keys, reusable_blocks
from fairsim.sim.result import Columns
from fairsim.types import Request

OBSERVED_CACHED = "observed_cached_tokens"
"""Trace field: prompt tokens the serving engine found cached at admission (``fairsim record``)."""
OBSERVED_SCHEDULED_MS = "observed_first_scheduled_ms"
"""Trace field: when the serving engine first scheduled the request, ms on the trace's clock."""
CURVE_FRACTIONS = (0.1, 0.2, 0.3, 0.5, 1.0)
"""Capacities listed in the report, as fractions of the trace's reusable content."""
MAX_BINS = 10_000_000
"""Most load bins ``--bin`` may ask for over the trace (a few numpy columns of this length)."""


@dataclass(frozen=True)
class Analysis:
    """Everything ``fairsim analyze`` measured on one trace.

    Attributes:
        trace: Trace name.
        requests: Requests analysed.
        spread: Work spread of the waiting queue.
        curve: LRU hit-rate curve.
        kv_blocks: The capacity a ``fairsim run`` with the same options would use, blocks.
        reusable_blocks: Distinct blocks seen in two or more requests.
        fcfs_hit_rate: Hit rate of the FCFS simulation at the replayed load.
        order_reuse: Hit rates FCFS and LPM keep at ``kv_blocks`` (their simulations).
        series: Offered load per bin (``load_series``).
        bin_s: Bin width, seconds.
        busiest: The busiest non-overlapping windows (empty when every request arrives at one
            instant).
        offered: ``OfferedLoad.describe()`` of the whole trace.
        window_s: Length of the busiest windows, seconds.
        time_scale: Arrival-time multiplier the FCFS simulation replayed (``--time-scale``).
    """

    trace: str
    requests: int
    spread: QueueSpread
    curve: HitCurve
    kv_blocks: int
    reusable_blocks: int
    fcfs_hit_rate: float
    order_reuse: OrderReuse
    series: pd.DataFrame
    bin_s: float
    busiest: list[Window]
    offered: str
    window_s: float = 60.0
    time_scale: float = 1.0
    span_s: float = float("nan")
    extra: dict[str, Any] = field(default_factory=dict)

    def curve_table(self) -> list[dict[str, Any]]:
        """Hit rate at fractions of the reusable content and at the run's default capacity."""
        rows = [{"capacity": f"{f:g} x reusable", "kv_blocks": max(1, int(np.ceil(f * self.reusable_blocks)))}
                for f in CURVE_FRACTIONS]
        rows.append({"capacity": "fairsim run default", "kv_blocks": self.kv_blocks})
        for r in rows:
            r["hit_rate"] = self.curve.hit_rate(r["kv_blocks"])
        return rows

    def verdict(self) -> str:
        """The verdict with its reasons (``overall_verdict``)."""
        return overall_verdict(self.spread, self.order_reuse)

    def summary(self) -> dict[str, Any]:
        """JSON-ready figures (``analysis.json``)."""
        rate = self.span_s > 0
        return {
            "trace": self.trace, "requests": self.requests, "offered_load": self.offered,
            "verdict": self.verdict(), "ordering_matters": self.spread.matters or self.order_reuse.matters,
            "spread": self.spread.summary(), "order_reuse": self.order_reuse.summary(),
            "block_size": self.curve.block_size, "kv_blocks_default": self.kv_blocks,
            "reusable_blocks": self.reusable_blocks,
            "infinite_hit_rate": self.curve.infinite_hit_rate,
            "lru_hit_rate_default": self.curve.hit_rate(self.kv_blocks),
            "fcfs_sim_hit_rate": self.fcfs_hit_rate,
            "capacity_for_90pct_of_bound": self.curve.capacity_for(0.9),
            "curve": self.curve_table(),
            "busiest_windows": [vars_window(w) for w in self.busiest],
            # All arrivals at one instant: no rate, so no load, bins or windows (not figures made
            # up from a default bin width).
            "window_s": self.window_s if rate else None, "bin_s": self.bin_s if rate else None,
            "peak_bin_load": float(self.series["load"].max()) if rate else None,
            "mean_load": float(self.series["load"].mean()) if rate else None,
        }

    def summary_json(self) -> str:
        """``summary()`` as strict JSON (non-finite figures as ``null``)."""
        return json.dumps(json_safe(self.summary()), indent=2, allow_nan=False)


def overall_verdict(spread: QueueSpread, reuse: OrderReuse) -> str:
    """One sentence: ordering matters if the queued work differs enough (the paper's rule) or if
    arrival order loses prefix-cache hits that a reuse-grouping order keeps; both reasons shown."""
    by_work = spread.verdict()
    if reuse.matters:
        return (f"ordering matters: arrival order loses prefix-cache hits that grouping shared "
                f"prefixes keeps: {reuse.reason()}; by work spread alone: {by_work}")
    return f"{by_work}; prefix cache: {reuse.reason()}"


def fmt_num(value: float | None, spec: str, suffix: str = "") -> str:
    """``value`` formatted with ``spec`` plus ``suffix``, or ``n/a`` when it is None or NaN."""
    if value is None or not np.isfinite(value):
        return "n/a"
    return format(value, spec) + suffix


def seconds_decimals(length_s: float) -> int:
    """Decimals that show times to a tenth of ``length_s`` (so windows of that length, which
    slide on a grid of a tenth of it, print distinct bounds): 0 for 60 s, 2 for 0.33 s."""
    return int(min(9, max(0, 1 - np.floor(np.log10(length_s))))) if length_s > 0 else 3


def window_decimals(windows: list[Window], length_s: float) -> int:
    """``seconds_decimals`` of the windows as listed: of ``length_s``, or of the trace's span where
    a trace shorter than ``length_s`` is its own busiest window (0.4 s under a 60 s length prints
    ``0.00-0.40 s``, not ``0-0 s``)."""
    return seconds_decimals(min([length_s, *(w.end_s - w.start_s for w in windows)]))


def format_windows(windows: list[Window], length_s: float, requests: int, unit: str = "s") -> str:
    """``START-END s load X`` for each window (``n/a`` when there are none: every request arrives
    at one instant, so no window has a length to divide by); ``unit`` names the clock where two
    differ (``trace s`` under ``--time-scale``)."""
    if not windows:
        return "n/a (the one request arrives alone)" if requests == 1 else \
            f"n/a (all {requests} requests arrive at one instant)"
    d = window_decimals(windows, length_s)
    return ", ".join(f"{w.start_s:.{d}f}-{w.end_s:.{d}f} {unit} load {fmt_num(w.load, '.2f')}" for w in windows)


def vars_window(w: Window) -> dict[str, Any]:
    """A window as a JSON object."""
    return {"name": w.name, "start_s": w.start_s, "end_s": w.end_s, "requests": w.requests,
            "load": w.load}


def spread_from_recorded(requests: Sequence[Request], time_scale: float = 1.0,
                         arrivals_redrawn: bool = False) -> bool:
    """Whether the spread is read from the trace's recorded scheduling times: every request has
    them, and its arrivals are the recording's (not time-scaled, not redrawn by
    ``--session-rate``); else it comes from an FCFS simulation."""
    return time_scale == 1.0 and not arrivals_redrawn and all(
        OBSERVED_CACHED in r.labels and OBSERVED_SCHEDULED_MS in r.labels for r in requests)


def observed_spread_inputs(requests: list[Request], clock_offset_s: float = 0.0,
                           where: Callable[[Request], str] | None = None,
                           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """``(arrival_s, first_scheduled_s, work, request_ids)`` from the trace's observed fields (every
    request has them: ``spread_from_recorded``). ``clock_offset_s``: seconds the arrivals were
    rebased by (``--window-start``), taken off the observed scheduling times too, which are on
    the trace's own clock. ``where``:
    how messages name a request's record (``FILE:LINE``; default ``request 'ID'``).

    Raises:
        ValueError: An observed field that is not a number, cached tokens outside ``0..prompt``,
            or a request scheduled before it arrived, naming the record and field.
    """
    where = where or (lambda r: f"request {r.request_id!r}")
    a, s, w = [], [], []
    for r in requests:
        cached, sched = r.labels[OBSERVED_CACHED], r.labels[OBSERVED_SCHEDULED_MS]
        for name, v in ((OBSERVED_CACHED, cached), (OBSERVED_SCHEDULED_MS, sched)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v):
                raise ValueError(f"{where(r)}: field '{name}': need a number, got {v!r}")
        if not 0 <= cached <= r.prompt_len:  # an engine cannot find more cached than it was sent
            raise ValueError(f"{where(r)}: field '{OBSERVED_CACHED}': {cached:g} is outside "
                             f"0..{r.prompt_len} (the prompt's tokens)")
        if sched / 1000.0 - clock_offset_s < r.arrival_time - 1e-9:  # (queue_spread's tolerance)
            raise ValueError(f"{where(r)}: field '{OBSERVED_SCHEDULED_MS}': {sched:g} ms is before the "
                             f"request's arrival, {1000 * (r.arrival_time + clock_offset_s):g} ms on the trace's clock")
        a.append(r.arrival_time)
        s.append(sched / 1000.0 - clock_offset_s)
        w.append(max(1, r.prompt_len - int(cached)))
    return np.array(a), np.array(s), np.array(w, dtype=np.float64), [r.request_id for r in requests]


def analyze(requests: list[Request], profile: Profile, config: EngineConfig, trace_name: str,
            offered: str, *, threshold: float = DEFAULT_SPREAD_THRESHOLD,
            window_s: float | None = None, bin_s: float | None = None,
            time_scale: float = 1.0, replay: str | None = None,
            think_scale: float = 1.0, reuse_threshold: float = DEFAULT_REUSE_THRESHOLD,
            clock_offset_s: float = 0.0, where: Callable[[Request], str] | None = None,
            arrivals_redrawn: bool = False) -> Analysis:
    """Measure ``requests`` (already windowed, not time-scaled).

    Args:
        requests: The trace's requests, arrival times in seconds of trace time.
        profile: Cost model (capacity, and the FCFS simulation when needed).
        config: Engine settings; its capacity options give the default capacity.
        trace_name: For the report.
        offered: The offered-load line of the whole input.
        threshold: Spread verdict threshold.
        window_s: Length of the busiest windows, seconds (default 60, or a third of the span).
        bin_s: Load bin width, seconds (default a sixth of the window length).
        time_scale: Arrival-time multiplier of the FCFS simulation and of the offered load
            (> 1 stretches: lower load). Observed scheduling times are used only at 1 (they
            belong to the recorded load). Bins and windows stay in trace time, as
            ``fairsim accept --windows`` takes them.
        replay, think_scale: How the FCFS and LPM simulations send session turns, as ``fairsim run``
            (``fairsim.sim.Engine``). In a closed-loop replay a turn joins the waiting queue when
            it is released (its ``released_s``), not at its timestamp; the spread uses that time.
        reuse_threshold: Verdict threshold of the prefix-cache check (``order_reuse.py``).
        clock_offset_s: Trace seconds the arrivals were rebased by (``--window-start``): the
            observed scheduling times, on the trace's clock, are moved by as much.
        where: How a bad observed field's message names its record (``observed_spread_inputs``).
        arrivals_redrawn: The arrivals are not the trace's own (``--session-rate`` drew the
            sessions' starts): the recorded scheduling times are then on another clock, so the
            spread comes from the FCFS simulation, as under a time scale.

    Raises:
        ValueError: Bad options or observed fields; ``CapacityError`` from capacity sizing.
    """
    block_size, kv_blocks = resolve_capacity(requests, config)
    t = [r.arrival_time for r in requests]
    span = max(t) - min(t)
    if window_s is None:
        window_s = min(60.0, span / 3) if span > 0 else 1.0
    option = "--bin"
    if bin_s is None:
        bin_s = window_s / 6
        option = f"--window-length {window_s:g} (the bin is a sixth of it)"
    if span / bin_s >= MAX_BINS:  # before the FCFS simulation: a bin count memory cannot hold
        raise ValueError(f"{option}: bins of {bin_s:g} s make {span / bin_s:.3g} over the trace's "
                         f"{span:.6g} s, more than {MAX_BINS:,}; use a wider bin or window")
    from fairsim.policies import make_policy
    from fairsim.run import progress_bar
    from fairsim.traces import scale_time

    observed = (observed_spread_inputs(requests, clock_offset_s, where)
                if spread_from_recorded(requests, time_scale, arrivals_redrawn) else None)
    cfg = EngineConfig(budget_tokens=config.budget_tokens, max_num_seqs=config.max_num_seqs,
                       block_size=block_size, kv_blocks=kv_blocks)
    scaled = scale_time(requests, time_scale)
    timing = "the trace's timing" if time_scale == 1.0 else f"arrivals x{time_scale:g}"

    def replay_with(policy: str) -> Columns:
        # The request table as columns, not a DataFrame, and the run's other tables dropped: on
        # a trace of a million requests each frame took gigabytes (a helper measured 6 GB).
        # run's progress bar on a terminal: minutes go by on a trace of millions of requests.
        with progress_bar(policy, len(scaled)) as progress:
            return simulate(scaled, make_policy(policy, profile), profile, cfg, replay=replay,
                            think_scale=think_scale, progress=progress).columns("requests")

    res = replay_with("fcfs")
    prompt = res["prompt_tokens"]
    cached = res["cached_tokens"]
    fcfs_hit = float(cached.sum() / prompt.sum())
    if observed is not None:
        a, s, w, ids = observed
        spread = queue_spread(a, s, w, source="observed scheduling times", threshold=threshold, ids=ids)
    else:
        work = np.maximum(1, prompt - cached).astype(np.float64)
        arrival = np.array(res.as_list("arrival_s"), dtype=np.float64)
        entry = np.array(res.as_list("released_s"), dtype=np.float64) if "released_s" in res else arrival
        entry = np.where(np.isnan(entry), arrival, entry)  # queue entry: the send time
        spread = queue_spread(entry, np.array(res.as_list("first_scheduled_s"), dtype=np.float64), work,
                              ids=[str(i) for i in res.as_list("request_id")],
                              source=f"FCFS simulation at {timing}" if time_scale == 1.0 else
                              f"FCFS simulation, {timing}", threshold=threshold)
    prompt_total, fcfs_cached = int(prompt.sum()), int(cached.sum())
    del res, prompt, cached  # (before the LPM run: one table at a time)
    grouped_cached = int(replay_with("lpm")["cached_tokens"].sum())
    order_reuse = OrderReuse(kv_blocks=kv_blocks, prompt_tokens=prompt_total, fcfs_cached_tokens=fcfs_cached,
                             grouped_cached_tokens=grouped_cached,
                             threshold=reuse_threshold, source=f"FCFS and LPM simulations at {timing}")
    curve = lru_hit_curve(requests, block_size)
    reusable = reusable_blocks(block_keys(r, block_size) for r in requests)
    colocated = config.mode == "colocated"
    series = load_series(requests, profile, bin_s, config.budget_tokens, colocated)
    for col in ("load", "prompt_tokens_per_s", "ideal_uncached_tokens_per_s"):
        series[col] /= time_scale  # per second of replayed time
    busiest = [dataclasses.replace(w, load=w.load / time_scale)
               for w in busiest_windows(requests, profile, window_s, 3, config.budget_tokens, colocated)
               ] if span > 0 else []
    return Analysis(trace=trace_name, requests=len(requests), spread=spread, curve=curve,
                    kv_blocks=kv_blocks, reusable_blocks=reusable, fcfs_hit_rate=fcfs_hit,
                    order_reuse=order_reuse,
                    series=series, bin_s=bin_s, busiest=busiest, offered=offered, window_s=window_s,
                    time_scale=time_scale, span_s=span)


def format_text(an: Analysis) -> str:
    """The printed summary (a few lines)."""
    sp = an.spread
    lines = [
        f"queue work spread ({sp.source}): p50 {fmt_num(sp.quantile(0.5), '.1f', 'x')}, "
        f"p90 {fmt_num(sp.quantile(0.9), '.1f', 'x')}; "
        f"two or more waiting {100 * sp.queued_share:.1f} % of the time",
        f"prefix cache by order ({an.order_reuse.source}): {an.order_reuse.describe()}",
        f"verdict: {an.verdict()}",
        f"prefix hit rate: infinite cache {an.curve.infinite_hit_rate:.3f}; LRU at "
        f"{an.kv_blocks:,} blocks of {an.curve.block_size:,} tokens (run default) "
        f"{an.curve.hit_rate(an.kv_blocks):.3f}",
        "busiest windows: " + format_windows(an.busiest, an.window_s, an.requests,
                                             "s" if an.time_scale == 1 else "trace s"),
    ]
    return "\n".join(lines)


def write_report(an: Analysis, out: Path) -> list[Path]:
    """Write ``load.png``, ``spread.png``, ``hit_curve.png``, ``analysis.json``, ``report.md``.

    Returns:
        The paths written.
    """
    from fairsim.analysis.figures import hit_curve_figure, load_figure, spread_figure
    from fairsim.figures import save

    out.mkdir(parents=True, exist_ok=True)
    # The figures last but the report (which links them): a Ctrl-C while drawing keeps the JSON.
    atomic_write_text(out / "analysis.json", an.summary_json() + "\n")
    paths = [
        save(load_figure(an.series, an.bin_s, an.busiest), out / "load.png"),
        save(spread_figure(an.spread), out / "spread.png"),
        save(hit_curve_figure(an.curve, {"run default": an.kv_blocks}), out / "hit_curve.png"),
        out / "analysis.json",
    ]
    summary = an.summary()
    sp = an.spread
    curve_rows = "\n".join(f"| {r['capacity']} | {r['kv_blocks']:,} | {r['hit_rate']:.3f} |"
                           for r in an.curve_table())
    d = window_decimals(an.busiest, an.window_s)
    win_rows = "\n".join(f"| {w.name} | {w.start_s:.{d}f} | {w.end_s:.{d}f} | {w.requests} | "
                         f"{fmt_num(w.load, '.2f')} |" for w in an.busiest) or \
        f"| n/a | | | {an.requests} | {'one request' if an.requests == 1 else 'all requests arrive at one instant'} |"
    fcfs = (f"The FCFS simulation ({'at the recorded load' if an.time_scale == 1 else f'arrivals x{an.time_scale:g}'}) "
            f"hit {an.fcfs_hit_rate:.3f} at "
            f"{an.kv_blocks:,} blocks" + (
                ": where requests overlap, running requests hold blocks and the cache differs from "
                "one-at-a-time replay.\n" if an.fcfs_hit_rate != an.curve.hit_rate(an.kv_blocks)
                else ", as the one-at-a-time replay above.\n"))
    if summary["bin_s"] is None:
        load_line, busiest_of = "every request arrives at one instant: no rate, so no load over time)", ""
    else:
        load_line = (f"{summary['bin_s']:g} s bins of trace time, at the replayed time scale); mean "
                     f"{fmt_num(summary['mean_load'], '.2f')}, peak bin {fmt_num(summary['peak_bin_load'], '.2f')}")
        busiest_of = f" of {summary['window_s']:g} s of trace time"
    text = f"""# fairsim analyze: {an.trace}

{plural(an.requests, 'request')}. {an.offered}.

## 1. Does ordering matter? (the paper's step 1)

Work = uncached prompt tokens at admission; spread = upper / lower decile (nearest rank; with nine
or fewer waiting: largest / smallest) of the work of the requests waiting at the same time,
weighted by time. Source: {sp.source}.

| figure | value |
|---|---|
| time with two or more waiting | {100 * sp.queued_share:.1f} % |
| spread p50 / p90 / max | {" / ".join(fmt_num(sp.quantile(q), ".1f", "x") for q in (0.5, 0.9, 1.0))} |
| time at or above {sp.threshold:g}x | {fmt_num(100 * sp.share_above(sp.threshold), '.1f', ' %')} |

By work spread: {sp.verdict()}. Rule: if the work of concurrently queued requests differs only a
few times, ordering matters little (the Fairway paper's advice to serving teams). The paper gives
no number; fairsim's threshold is {sp.threshold:g}x (`--spread-threshold`), applied to the median.

By prefix cache ({an.order_reuse.source}): {an.order_reuse.describe()}. When the shared prefixes
do not fit the cache together, arrival order evicts each before its next user while an order that
serves requests sharing a prefix together keeps it, even if all requests are the same size;
fairsim's threshold is {an.order_reuse.threshold:g}x the uncached prompt tokens (`--reuse-threshold`).

**Verdict: {an.verdict()}.**

![spread](spread.png)

## 2. Prefix reuse

Infinite-cache bound (every block seen before is kept): **{an.curve.infinite_hit_rate:.3f}** of
prompt tokens, at blocks of {an.curve.block_size} tokens. LRU hit rate by capacity (one pass over
LRU stack distances, requests one at a time in arrival order, vLLM's leading-run hit capped at
L - 1 tokens); reusable content = {an.reusable_blocks:,} blocks seen in two or more requests:

| capacity | KV blocks | hit rate |
|---|---|---|
{curve_rows}

{fcfs}
![hit curve](hit_curve.png)

## 3. Offered load over time

Load = the engine's best-case busy seconds for the prompts arriving in a stretch of time (every
step filled to the token budget, cold cache) / its length, as in `fairsim run`'s offered-load
line ({load_line}. Busiest windows{busiest_of}:

| window | start, trace s | end, trace s | requests | load |
|---|---|---|---|---|
{win_rows}

![load](load.png)
"""
    atomic_write_text(out / "report.md", text)
    paths.append(out / "report.md")
    return paths
