"""The flood stress test: a backlog of cache misses, then a large stream of highly cached requests.

At ``t = 0`` one warm-up request per flood prefix arrives (``klass`` = "warmup"), so the flood's
prefixes are in the cache (without it the first flood requests would be misses too, and a policy
ordering by hits would see nothing to prefer). At ``t`` in ``[0, backlog_s)`` arrive ``num_miss``
long prompts with nothing in common (``klass``
= "miss"): each must be computed in full. From ``flood_start_s`` on, ``num_flood`` requests arrive
at ``flood_rate_per_s`` (``klass`` = "flood"): each is one of ``flood_docs`` long shared prefixes
plus a unique short question, so after the first one per prefix almost all of a flood request is a
cache hit. A policy that always prefers high hit ratios (LPM, RAGCache, PEEK) serves the flood and
leaves the misses waiting as long as the flood lasts; FCFS serves the misses first and makes the
flood wait. The figures of interest are the worst miss wait and the flood requests' median TTFT.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fairsim.traces.prefix import BLOCK, check_block_multiples, check_tail_range, PrefixIds, make_request
from fairsim.traces.trace import Trace


@dataclass(frozen=True, slots=True)
class FloodSpec:
    """Parameters of the flood stress test (tokens, seconds)."""

    num_miss: int = 20
    """Backlogged cache misses."""
    miss_tokens: tuple[int, int] = (6144, 12288)
    """Miss prompt length, inclusive range, tokens."""
    backlog_s: float = 2.0
    """Misses arrive uniformly in ``[0, backlog_s)``, seconds."""
    flood_start_s: float = 2.0
    """First flood arrival, seconds."""
    num_flood: int = 1500
    """Flood requests."""
    flood_rate_per_s: float = 20.0
    """Poisson rate of the flood, requests/s."""
    flood_docs: int = 4
    """Distinct shared prefixes in the flood."""
    flood_prefix_tokens: int = 6144
    """Shared prefix of a flood request, tokens (multiple of 512)."""
    question_tokens: tuple[int, int] = (32, 480)
    """Unique question of a flood request, inclusive range (< 512)."""
    seed: int = 0
    """Seed of the numpy Generator."""

    def __post_init__(self) -> None:
        if self.num_miss < 0 or self.num_flood < 0 or self.num_miss + self.num_flood == 0:
            raise ValueError(f"num_miss={self.num_miss}, num_flood={self.num_flood}: need >= 0, "
                             "not both 0")
        check_block_multiples(self, "flood_prefix_tokens")
        if not BLOCK < self.miss_tokens[0] <= self.miss_tokens[1]:
            raise ValueError(f"miss_tokens={self.miss_tokens}: need {BLOCK} < lo <= hi")
        if not (self.backlog_s > 0 and self.flood_rate_per_s > 0 and self.flood_start_s >= 0):
            raise ValueError("backlog_s and flood_rate_per_s must be > 0, flood_start_s >= 0")
        check_tail_range("question_tokens", self.question_tokens)


def generate_flood(spec: FloodSpec = FloodSpec(), name: str = "flood") -> Trace:
    """Generate the flood trace of ``spec`` (deterministic in ``spec.seed``).

    Returns:
        A ``Trace`` sorted by arrival; labels ``klass`` ("warmup"/"miss"/"flood") and ``doc_id``.
    """
    rng = np.random.default_rng(spec.seed)
    ids = PrefixIds()
    rows = []
    per_doc = spec.flood_prefix_tokens // BLOCK
    for d in range(spec.flood_docs):
        rows.append((0.0, f"{name}-warm-{d:02d}", [("flood", d, b) for b in range(per_doc)], 1,
                     {"klass": "warmup", "doc_id": d}))
    miss_t = np.sort(rng.uniform(0.0, spec.backlog_s, size=spec.num_miss))
    for i, t in enumerate(miss_t):
        total = int(rng.integers(spec.miss_tokens[0], spec.miss_tokens[1] + 1))
        tail = total % BLOCK or 1
        contents = [("miss", i, b) for b in range(total // BLOCK)]
        rows.append((float(t), f"{name}-miss-{i:04d}", contents, tail, {"klass": "miss", "doc_id": -1}))
    flood_t = spec.flood_start_s + np.cumsum(rng.exponential(1.0 / spec.flood_rate_per_s,
                                                             size=spec.num_flood))
    docs = rng.integers(spec.flood_docs, size=spec.num_flood)
    qs = rng.integers(spec.question_tokens[0], spec.question_tokens[1] + 1, size=spec.num_flood)
    for i in range(spec.num_flood):
        d = int(docs[i])
        contents = [("flood", d, b) for b in range(per_doc)]
        rows.append((float(flood_t[i]), f"{name}-flood-{i:05d}", contents, int(qs[i]),
                     {"klass": "flood", "doc_id": d}))
    rows.sort(key=lambda row: (round(row[0], 3), row[1]))
    requests = [make_request(ids, rid, t, contents, tail, labels)
                for t, rid, contents, tail, labels in rows]
    return Trace(name=name, source=f"generate_flood({spec})", requests=tuple(requests))
