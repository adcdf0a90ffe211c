"""``compare``'s ratios: each policy's TTFT p50, p99 and max divided by a baseline policy's.

So a team reads "0.3x FCFS's median" without arithmetic. ``compare --baseline NAME`` (default
``fcfs``) names the baseline; ``--baseline none`` shows no ratios. A baseline that is not among
``--policies`` is run too, first (``with_baseline``), so its row is there to divide by and
partial output after Ctrl-C has ratios as soon as it finished; it takes only its own
``--param NAME.KEY=VALUE`` parameters (the unscoped ones are for the policies named).
"""

from __future__ import annotations

import math
from typing import Any

#: Summary key of a figure -> key of its ratio to the baseline's (``add_ratios``).
RATIO_KEYS = {"ttft_p50_s": "ttft_p50_ratio", "ttft_p99_s": "ttft_p99_ratio", "ttft_max_s": "ttft_max_ratio"}

def ratio_text(value: float) -> str:
    """A ratio as the table prints it: two decimals (``0.45x``), or two significant digits
    below 0.01, where two decimals would print a real ratio as ``0.00x`` (``0.00074x``)."""
    return f"{value:.2f}x" if value == 0 or abs(value) >= 0.01 else f"{value:.2g}x"


#: The table's ratio columns, after ``max s``: (summary key, header, format).
RATIO_COLUMNS = [("ttft_p50_ratio", "p50 x", ratio_text), ("ttft_p99_ratio", "p99 x", ratio_text),
                 ("ttft_max_ratio", "max x", ratio_text)]

NO_BASELINE = "none"


def with_baseline(names: list[str], baseline: str) -> tuple[list[str], str | None]:
    """The policies to run and a note for stderr: ``names`` with ``baseline`` put first when it
    is not among them (note says so), else ``names`` unchanged (note ``None``).

    Raises:
        ValueError: ``baseline`` is neither ``none``, a registered policy, nor
            ``package.module:Class`` (the message names ``--baseline``).
    """
    from fairsim.policies.registry import POLICIES
    from fairsim.policies.user import is_user_spec

    if baseline == NO_BASELINE or baseline in names:
        return names, None
    if baseline not in POLICIES and not is_user_spec(baseline):
        raise ValueError(f"--baseline {baseline}: unknown policy; give one of: {', '.join(POLICIES)}, "
                         f"package.module:Class, or none (no ratios)")
    return [baseline] + names, (f"compare: the baseline {baseline!r} (--baseline) is not among --policies: "
                                f"running it too, first, for the ratio columns")


def ratio(value: Any, base: Any) -> float | None:
    """``value / base``, or ``None`` when either is missing or not finite, or ``base`` is 0."""
    if not _finite(value) or not _finite(base) or base == 0:
        return None
    return value / base


def add_ratios(rows: dict[str, dict[str, Any]], baseline: str) -> dict[str, dict[str, Any]]:
    """``rows`` (policy -> summary) with, in each summary, ``ttft_p50_ratio``, ``ttft_p99_ratio``,
    ``ttft_max_ratio`` (its figure over the baseline's; ``None`` where undefined) and
    ``ratio_baseline``; ``rows`` unchanged when the baseline has no row (``--baseline none``, or
    it has not finished). New dicts: the summaries given are not changed."""
    base = rows.get(baseline)
    if baseline == NO_BASELINE or base is None:
        return rows
    out = {}
    for name, summary in rows.items():
        extra = {to: ratio(summary.get(key), base.get(key)) for key, to in RATIO_KEYS.items()}
        out[name] = {**summary, **extra, "ratio_baseline": baseline}
    return out


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
