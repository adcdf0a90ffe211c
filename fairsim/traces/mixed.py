"""Mixed-length workload: short chat-style prompts and long document prompts together.

Short requests (label ``length="short"``): one of ``short_templates`` system prompts
(``short_system_tokens``) plus unique user text of ``short_tokens`` tokens (inclusive range), so
they hit only their template. Long requests (``length="long"``, a fraction ``long_fraction``): the
first ``m`` blocks of a Zipf-popular document, ``m`` such that the prompt is ``long_tokens`` long
(inclusive range), plus a unique question; two long requests on one document share
``min(m, m')`` blocks. This is the setting where ordering by remaining work alone starves long
prompts, which the ablation (E4) reports separately for short and long prompts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fairsim.traces.loadshape import LoadShape, arrivals, poisson
from fairsim.traces.prefix import BLOCK, check_block_multiples, check_tail_range, PrefixIds, make_request, zipf_weights
from fairsim.traces.trace import Trace


@dataclass(frozen=True, slots=True)
class MixedSpec:
    """Parameters of the mixed-length workload (tokens, seconds)."""

    shape: LoadShape = poisson(3.0, 300.0)
    """Arrival process (rates in requests/s)."""
    long_fraction: float = 0.2
    """Fraction of long requests (0-1)."""
    short_templates: int = 4
    """Distinct system prompts of short requests."""
    short_system_tokens: int = 512
    """System prompt of short requests, tokens (multiple of 512)."""
    short_tokens: tuple[int, int] = (64, 1536)
    """Unique user text of a short request, inclusive range, tokens."""
    num_docs: int = 40
    """Documents behind long requests."""
    doc_zipf: float = 1.0
    """Popularity skew of documents."""
    long_tokens: tuple[int, int] = (6144, 16384)
    """Long prompt length, inclusive range, tokens."""
    question_tokens: tuple[int, int] = (32, 480)
    """Unique question after a long document, inclusive range (< 512)."""
    seed: int = 0
    """Seed of the numpy Generator."""

    def __post_init__(self) -> None:
        if not 0 <= self.long_fraction <= 1:
            raise ValueError(f"long_fraction={self.long_fraction}: need a fraction 0-1")
        check_block_multiples(self, "short_system_tokens")
        if not 1 <= self.short_tokens[0] <= self.short_tokens[1]:
            raise ValueError(f"short_tokens={self.short_tokens}: need 1 <= lo <= hi")
        if not BLOCK < self.long_tokens[0] <= self.long_tokens[1] - BLOCK:
            raise ValueError(f"long_tokens={self.long_tokens}: need {BLOCK} < lo <= hi - {BLOCK}")
        check_tail_range("question_tokens", self.question_tokens)


def generate_mixed(spec: MixedSpec = MixedSpec(), name: str = "mixed") -> Trace:
    """Generate the mixed-length trace of ``spec`` (deterministic in ``spec.seed``).

    Returns:
        A ``Trace``; labels ``length`` ("short"/"long"), ``doc_id`` (-1 for short) and ``window``.

    Raises:
        ValueError: The shape produced no request.
    """
    rng = np.random.default_rng(spec.seed)
    times, windows = arrivals(spec.shape, rng)
    n = len(times)
    if n == 0:
        raise ValueError(f"load shape {spec.shape} produced no requests; raise its rates")
    is_long = rng.random(n) < spec.long_fraction
    doc_p = zipf_weights(spec.num_docs, spec.doc_zipf)
    ids = PrefixIds()
    requests = []
    for i in range(n):
        if is_long[i]:
            doc = int(rng.choice(spec.num_docs, p=doc_p))
            total = int(rng.integers(spec.long_tokens[0], spec.long_tokens[1] + 1))
            q = int(rng.integers(spec.question_tokens[0], spec.question_tokens[1] + 1))
            lo, hi = spec.long_tokens
            # m shared blocks + the question lands inside [lo, hi] (m rounded towards total).
            m = min(max(round((total - q) / BLOCK), -(-(lo - q) // BLOCK)), (hi - q) // BLOCK)
            contents = [("doc", doc, b) for b in range(m)]
            labels = {"length": "long", "doc_id": doc, "window": windows[i]}
        else:
            tpl = int(rng.integers(spec.short_templates))
            user = int(rng.integers(spec.short_tokens[0], spec.short_tokens[1] + 1))
            contents = [("tpl", tpl, b) for b in range(spec.short_system_tokens // BLOCK)]
            contents += [("user", i, b) for b in range(user // BLOCK)]  # unique: never shared
            q = user % BLOCK or 1
            labels = {"length": "short", "doc_id": -1, "window": windows[i]}
        requests.append(make_request(ids, f"{name}-{i:05d}", float(times[i]), contents, q, labels))
    return Trace(name=name, source=f"generate_mixed({spec})", requests=tuple(requests))
