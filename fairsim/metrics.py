"""Summaries computed from the per-request result table (never kept on the side).

Percentiles use numpy's default linear interpolation between order statistics (``percentiles``:
``np.percentile``'s result to the bit). A run's headline figures (``summarize``) are computed in
plain floats with numpy's operations (``fairsim.npfloat``), so a ``fairsim run`` on one engine
does not import numpy (60 ms of its start-up); values numpy and a sort could order differently
(NaN, ``-0.0``) take numpy's own path.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from fairsim import npfloat
from fairsim.io import plural_have

if TYPE_CHECKING:  # tables may be DataFrames or the engine's ``Columns``; pandas is not needed here
    import numpy as np
    import pandas as pd

STARVATION_FACTOR = 3.0  # the paper's criterion: worst TTFT above 3 x the policy's own p99


def percentiles(values: Any, qs: Sequence[float]) -> list[float]:
    """``np.percentile(values, qs)`` (method ``"linear"``, the default) as a list of floats.

    A list of floats without NaN or ``-0.0`` is done in plain floats (``npfloat.percentiles``,
    the same operations). Anything else follows numpy 2's ``_quantile`` for one axis, step for
    step, so the result is the same to the bit (``tests/test_percentiles.py`` checks both against
    ``np.percentile``, with NaN, infinities and signed zeros): virtual index ``(n - 1) * q /
    100``; its neighbours ``floor`` and ``floor + 1``, both the last element from index ``n - 1``
    on (where numpy's weight is then ``index + 1``); one ``partition`` of a copy at those
    positions and ``0``, ``-1``; numpy's ``_lerp`` (``a + (b - a) * t``, or ``b - (b - a) * (1 -
    t)`` where ``t >= 0.5``; an infinite neighbour can make it NaN, ``inf - inf`` or ``inf * 0``,
    with numpy's warnings); a NaN among the values makes every percentile that NaN.
    What it leaves out is ``np.unique`` over the partition positions (a ``sorted(set(...))``
    here): its first call imports ``numpy.ma``, 12 ms of every ``fairsim run``'s start-up.

    Args:
        values: Numbers of one dimension (converted to float64; any shape is flattened).
        qs: Percentiles, each in [0, 100].

    Raises:
        ValueError: No values, or a percentile outside [0, 100] (numpy's message). numpy raises
            IndexError for no values.
    """
    if type(values) is list and all(type(v) is float for v in values) and npfloat.plain(values):
        return npfloat.percentiles(values, qs)
    import numpy as np

    arr = np.array(values, dtype=np.float64).ravel()  # a copy: partitioned in place below
    n = arr.size
    if n == 0:
        raise ValueError("percentiles of no values")
    q = np.true_divide(np.asarray(qs, dtype=np.float64), np.float64(100))
    if not bool(((q >= 0) & (q <= 1)).all()):
        raise ValueError("Percentiles must be in the range [0, 100]")
    virtual = (n - 1) * q
    previous = np.floor(virtual)
    following = previous + 1
    last = virtual >= n - 1  # from the last index on: the last element, both sides
    previous[last] = -1
    following[last] = -1
    gamma = virtual - previous
    lo, hi = previous.astype(np.intp), following.astype(np.intp)
    arr.partition(sorted({0, -1, *lo.tolist(), *hi.tolist()}))
    a, b = arr[lo], arr[hi]
    diff = np.subtract(b, a)
    out = np.add(a, diff * gamma)
    np.subtract(b, diff * (1 - gamma), out=out, where=gamma >= 0.5, casting="unsafe", dtype=type(out.dtype))
    if np.isnan(arr[-1]):  # NaN sorts last
        np.copyto(out, arr[-1])
    return out.tolist()


def _column(table: Any, name: str) -> list:
    """Column ``name`` of a DataFrame or the engine's ``Columns`` as a list of Python values
    (``Columns.as_list``: no numpy)."""
    as_list = getattr(table, "as_list", None)
    return as_list(name) if as_list is not None else table[name].tolist()


def _float_column(table: Any, name: str) -> list[float]:
    """``_column`` as floats, as ``np.asarray(..., dtype=np.float64)`` converts (None -> NaN)."""
    return [math.nan if v is None else float(v) for v in _column(table, name)]


def _total(values: list) -> int | float:
    """``values.sum()`` as numpy gives it: exact for integers (or booleans), numpy's pairwise
    sum where any value is a float."""
    total = sum(values)  # an int unless a float is among the values
    if type(total) is int:
        return total
    return npfloat.float_sum([float(v) for v in values])


def _mean_max(values: list[float]) -> tuple[float, float]:
    """``(values.mean(), values.max())`` of float64 values, numpy's floats."""
    if npfloat.plain(values):
        return npfloat.float_sum(values) / len(values), max(values)
    import numpy as np

    arr = np.asarray(values, dtype=np.float64)
    return float(arr.mean()), float(arr.max())


def ttft_summary(requests: pd.DataFrame) -> dict[str, float]:
    """TTFT statistics of a request table, seconds.

    Args:
        requests: Rows with a ``ttft_s`` column (a DataFrame or the engine's ``Columns``).

    Returns:
        ``requests``, ``ttft_mean_s``, ``ttft_p50_s``, ``ttft_p90_s``, ``ttft_p99_s``, ``ttft_max_s``.

    Raises:
        ValueError: An empty table or a missing TTFT (a request that never finished).
    """
    ttft = _float_column(requests, "ttft_s")
    if not ttft:
        raise ValueError("no requests to summarise")
    missing = sum(1 for v in ttft if v != v)
    if missing:
        raise ValueError(f"{plural_have(missing, 'request')} no TTFT")
    p50, p90, p99 = percentiles(ttft, [50, 90, 99])
    mean, worst = _mean_max(ttft)
    return {
        "requests": len(ttft),
        "ttft_mean_s": mean,
        "ttft_p50_s": p50,
        "ttft_p90_s": p90,
        "ttft_p99_s": p99,
        "ttft_max_s": worst,
    }


def summarize(requests: pd.DataFrame, steps: pd.DataFrame | None = None) -> dict[str, Any]:
    """Headline figures of one run.

    ``requests``/``steps`` are DataFrames or the engine's ``fairsim.sim.result.Columns``
    (``SimResult.columns``): columns are read as lists, so neither pandas nor numpy is needed.

    Returns:
        ``ttft_summary`` plus ``hit_rate`` (cached tokens at admission / prompt tokens),
        ``queue_delay_p50_s``, ``queue_delay_p99_s``, ``starved`` (max TTFT > 3 x p99),
        ``sim_time_s`` (last finish minus first arrival), ``throughput_tokens_per_s`` (prompt
        tokens / sim time) and, with a step table, ``steps`` and ``evictions``.
    """
    out: dict[str, Any] = ttft_summary(requests)
    prompt_tokens = _total(_column(requests, "prompt_tokens"))
    out["hit_rate"] = float(_total(_column(requests, "cached_tokens")) / prompt_tokens)
    qd = _float_column(requests, "queue_delay_s")
    out["queue_delay_p50_s"], out["queue_delay_p99_s"] = percentiles(qd, [50, 99])
    out["starved"] = bool(out["ttft_max_s"] > STARVATION_FACTOR * out["ttft_p99_s"])
    sim_time = _extreme(_float_column(requests, "finish_s"), max) - _extreme(_float_column(requests, "arrival_s"), min)
    out["sim_time_s"] = sim_time
    out["throughput_tokens_per_s"] = float(prompt_tokens / sim_time) if sim_time > 0 else float("nan")
    if steps is not None:
        out["steps"] = int(len(steps))
        out["evictions"] = int(_total(_column(steps, "evictions")))
        out["preemptions"] = int(_total(_column(steps, "preemptions")))
    return out


def _extreme(values: list[float], pick: Any) -> float:
    """``values.max()`` / ``.min()`` (``pick``: ``max`` or ``min``) as numpy gives it (NaN wins)."""
    if any(v != v for v in values):
        return math.nan
    return float(pick(values))


# -- colocated mode (decode on the same engine) ------------------------------------------------

GROUP_LABELS = ("window", "klass", "length", "hops")
"""Label columns that metrics are broken down by when a trace carries them (arrival window,
request class, length class, hop count); free-form labels such as ``doc_id`` are not groups."""


def parse_slo(text: str | None) -> dict[str, float]:
    """``"ttft=2,tpot=0.1"`` -> ``{"ttft": 2.0, "tpot": 0.1}`` (seconds; ``--slo``).

    Both SLOs are optional; a missing one is not checked. ``None`` -> ``{}``.

    Raises:
        ValueError: An empty text, an unknown or repeated key, a missing ``=``, or a value that
            is not a number > 0 (the message names ``--slo``).
    """
    out: dict[str, float] = {}
    if text is None:
        return out
    if not text.strip():
        raise ValueError("--slo '': expected ttft=SECONDS,tpot=SECONDS (either may be left out)")
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or key not in ("ttft", "tpot"):
            raise ValueError(f"--slo {text!r}: expected ttft=SECONDS,tpot=SECONDS, got {item!r}")
        try:
            seconds = float(value)
        except ValueError:
            raise ValueError(f"--slo {text!r}: {key}={value!r} is not a number of seconds") from None
        if not (math.isfinite(seconds) and seconds > 0):
            raise ValueError(f"--slo {text!r}: {key}={value!r} must be a number of seconds > 0")
        if key in out:
            raise ValueError(f"--slo {text!r}: {key} given twice")
        out[key] = seconds
    return out


def _pcts(values: np.ndarray, name: str) -> dict[str, float]:
    """``{name}_p50_s``, ``_p90_s``, ``_p99_s``, ``_max_s`` of ``values`` (NaN when empty)."""
    if values.size == 0:
        return {f"{name}_{q}_s": float("nan") for q in ("p50", "p90", "p99", "max")}
    p50, p90, p99 = percentiles(values, [50, 90, 99])
    return {f"{name}_p50_s": float(p50), f"{name}_p90_s": float(p90), f"{name}_p99_s": float(p99),
            f"{name}_max_s": float(values.max())}


def meets_slo(requests: pd.DataFrame, slo: dict[str, float]) -> np.ndarray:
    """Boolean per request: TTFT <= ``slo["ttft"]`` and TPOT <= ``slo["tpot"]`` (where given).

    A one-token request has no TPOT and meets a TPOT SLO trivially (vLLM's benchmark counts
    goodput the same way: TPOT is undefined for it).
    """
    import numpy as np

    ok = np.ones(len(requests), dtype=bool)
    if "ttft" in slo:
        ok &= _floats(requests, "ttft_s") <= slo["ttft"]
    if "tpot" in slo:
        tpot = _floats(requests, "tpot_s")
        ok &= np.isnan(tpot) | (tpot <= slo["tpot"])
    return ok


def _floats(table: Any, name: str) -> np.ndarray:
    """Column ``name`` of a DataFrame or ``Columns`` as a float64 array."""
    import numpy as np

    return np.asarray(table[name], dtype=np.float64)


def decode_summary(requests: pd.DataFrame, token_gaps: pd.DataFrame | None,
                   slo: dict[str, float] | None = None) -> dict[str, Any]:
    """Decode-side figures of a colocated run (seconds; rates per simulated second).

    Args:
        requests: Request table with ``tpot_s``, ``e2e_s``, ``output_tokens``, ``ttft_s``,
            ``arrival_s``, ``finish_s`` (``SimResult.requests`` in colocated mode): a DataFrame,
            or the engine's ``Columns`` (``SimResult.columns``: every request, no pandas).
        token_gaps: ``SimResult.token_gaps`` (``request_row``, ``itl_s``; DataFrame or
            ``Columns``), or ``None``; a DataFrame's rows must be those the gaps index (pass
            ``requests.index`` intact), ``Columns`` are the whole table (every gap counts).
        slo: ``parse_slo`` output; with it, goodput is reported.

    Returns:
        ``tpot_{p50,p90,p99,max}_s`` (requests with >= 2 output tokens; TPOT = (e2e - ttft) /
        (output_tokens - 1), vLLM's definition), ``itl_*_s`` (every gap between consecutive tokens
        of a request, vLLM's ITL), ``e2e_*_s``, ``output_tokens``, ``output_tokens_per_s`` (output
        tokens / (last finish - first arrival)), and with an SLO ``goodput_share`` (share of
        requests meeting every given SLO) and ``goodput_rps`` (such requests per second).
    """
    import numpy as np

    out: dict[str, Any] = {}
    tpot = _floats(requests, "tpot_s")
    out.update(_pcts(tpot[~np.isnan(tpot)], "tpot"))
    if token_gaps is None:
        gaps = np.empty(0)
    elif not hasattr(requests, "index"):  # Columns, the whole table: every gap is one of its requests'
        gaps = _floats(token_gaps, "itl_s")
    else:
        rows = requests.index.to_numpy()
        gaps = _floats(token_gaps, "itl_s")[np.isin(np.asarray(token_gaps["request_row"]), rows)]
    out.update(_pcts(gaps, "itl"))
    out.update(_pcts(_floats(requests, "e2e_s"), "e2e"))
    span = float(requests["finish_s"].max() - requests["arrival_s"].min())
    total = int(requests["output_tokens"].sum())
    out["output_tokens"] = total
    out["output_tokens_per_s"] = total / span if span > 0 else float("nan")
    if slo:
        ok = meets_slo(requests, slo)
        out["goodput_share"] = float(ok.mean())
        out["goodput_rps"] = float(ok.sum() / span) if span > 0 else float("nan")
    return out


def group_summaries(requests: pd.DataFrame, token_gaps: pd.DataFrame | None = None,
                    slo: dict[str, float] | None = None) -> dict[str, dict[str, dict[str, Any]]]:
    """Per label value of each ``GROUP_LABELS`` column present: ``{label: {value: summary}}``.

    ``requests`` and ``token_gaps`` are DataFrames or the engine's ``Columns`` (converted, with
    pandas, only where a label is present). Each summary is ``ttft_summary`` plus, for a colocated table (with ``tpot_s``),
    ``decode_summary``. Values are keyed by their string form, in sorted order.
    """
    out: dict[str, dict[str, dict[str, Any]]] = {}
    present = [label for label in GROUP_LABELS if label in requests.columns]
    if present and hasattr(requests, "to_pandas"):  # the engine's Columns: group with pandas
        requests = requests.to_pandas()
        token_gaps = token_gaps.to_pandas() if hasattr(token_gaps, "to_pandas") else token_gaps
    for label in present:
        groups: dict[str, dict[str, Any]] = {}
        for value, part in sorted(requests.groupby(label, dropna=True), key=lambda kv: str(kv[0])):
            row: dict[str, Any] = ttft_summary(part)
            if "tpot_s" in part.columns:
                row.update(decode_summary(part, token_gaps, slo))
            groups[str(value)] = row
        if groups:
            out[label] = groups
    return out
