"""SEC-filing Q&A workload: long filings split into excerpts, retrieved per question.

Each request is a shared system prompt, the top ``k`` excerpts of one filing for one topic and a
unique question (FinanceBench-style Q&A over 10-K filings, as in the Fairway paper's dynamic
traces). Corpus model, all seeded:

- ``num_filings`` filings of ``excerpts_per_filing`` excerpts of ``excerpt_tokens`` tokens.
- Filing popularity is Zipf-like (``filing_zipf``): a few filings draw most questions.
- Each filing has ``topics_per_filing`` topics; a topic is a fixed relevance ranking of the
  filing's excerpts (a random permutation), topic popularity Zipf-like (``topic_zipf``).
- A request retrieves the first ``k`` excerpts of its topic's ranking, ``k`` uniform in
  ``excerpts`` (inclusive). Two questions on the same filing and topic therefore share the system
  prompt plus ``min(k, k')`` excerpts; different topics share the system prompt only (and more
  when their rankings happen to start alike, which prefix hashing picks up).

With the defaults a prompt is 1,024 + k x 2,048 + question tokens: up to about 16k tokens.
Arrivals come from a ``LoadShape``; ``dynamic_sec_traces`` gives the two calm/burst/spike traces.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fairsim.traces.loadshape import LoadShape, arrivals, calm_burst_spike, poisson
from fairsim.traces.prefix import BLOCK, check_block_multiples, check_tail_range, PrefixIds, make_request, zipf_weights
from fairsim.traces.trace import Trace


@dataclass(frozen=True, slots=True)
class SecSpec:
    """Parameters of the SEC-filing Q&A workload (tokens, seconds)."""

    shape: LoadShape = poisson(1.0, 300.0)
    """Arrival process (rates in requests/s)."""
    num_filings: int = 80
    """Filings in the corpus."""
    excerpts_per_filing: int = 24
    """Excerpts per filing."""
    excerpt_tokens: int = 2048
    """Tokens per excerpt (multiple of 512)."""
    system_tokens: int = 1024
    """Shared system prompt, tokens (multiple of 512)."""
    topics_per_filing: int = 3
    """Distinct retrieval rankings per filing."""
    filing_zipf: float = 1.0
    """Filing popularity skew (rank ``i`` weight ``i ** -filing_zipf``)."""
    topic_zipf: float = 1.0
    """Topic popularity skew inside a filing."""
    excerpts: tuple[int, int] = (1, 7)
    """Retrieved excerpts per request, inclusive range."""
    question_tokens: tuple[int, int] = (32, 480)
    """Unique question length, inclusive range (< 512, never cached)."""
    seed: int = 0
    """Seed of the numpy Generator."""

    def __post_init__(self) -> None:
        check_block_multiples(self, "excerpt_tokens", "system_tokens")
        lo, hi = self.excerpts
        if not 1 <= lo <= hi <= self.excerpts_per_filing:
            raise ValueError(f"excerpts={self.excerpts}: need 1 <= lo <= hi <= "
                             f"excerpts_per_filing={self.excerpts_per_filing}")
        check_tail_range("question_tokens", self.question_tokens)
        if self.num_filings < 1 or self.topics_per_filing < 1:
            raise ValueError("num_filings and topics_per_filing must be >= 1")


def generate_sec(spec: SecSpec = SecSpec(), name: str = "sec") -> Trace:
    """Generate the SEC-filing Q&A trace of ``spec`` (deterministic in ``spec.seed``).

    Returns:
        A ``Trace``; labels ``doc_id`` (filing), ``topic``, ``excerpts`` and ``window``.

    Raises:
        ValueError: The shape produced no request (rates too low for its duration).
    """
    rng = np.random.default_rng(spec.seed)
    rankings = [[rng.permutation(spec.excerpts_per_filing) for _ in range(spec.topics_per_filing)]
                for _ in range(spec.num_filings)]
    times, windows = arrivals(spec.shape, rng)
    n = len(times)
    if n == 0:
        raise ValueError(f"load shape {spec.shape} produced no requests; raise its rates")
    filings = rng.choice(spec.num_filings, size=n, p=zipf_weights(spec.num_filings, spec.filing_zipf))
    topics = rng.choice(spec.topics_per_filing, size=n,
                        p=zipf_weights(spec.topics_per_filing, spec.topic_zipf))
    ks = rng.integers(spec.excerpts[0], spec.excerpts[1] + 1, size=n)
    questions = rng.integers(spec.question_tokens[0], spec.question_tokens[1] + 1, size=n)
    ids = PrefixIds()
    sys_blocks = [("sys", b) for b in range(spec.system_tokens // BLOCK)]
    per_excerpt = spec.excerpt_tokens // BLOCK
    requests = []
    for i in range(n):
        f, t, k = int(filings[i]), int(topics[i]), int(ks[i])
        contents = list(sys_blocks)
        for e in rankings[f][t][:k]:
            contents += [("filing", f, int(e), b) for b in range(per_excerpt)]
        requests.append(make_request(
            ids, f"{name}-{i:05d}", float(times[i]), contents, int(questions[i]),
            {"doc_id": f, "topic": t, "excerpts": k, "window": windows[i]}))
    return Trace(name=name, source=f"generate_sec({spec})", requests=tuple(requests))


def dynamic_sec_traces(base_rate_per_s: float = 1.0, seeds: tuple[int, int] = (1, 2),
                       **shape_kw: float) -> list[Trace]:
    """The two "dynamic" SEC traces: calm, burst, then a 60 s spike, one per seed.

    Args:
        base_rate_per_s: Rate the engine roughly sustains (load 1.0), requests/s.
        seeds: One trace per seed (corpus, popularity and arrivals all change with the seed).
        **shape_kw: Passed to ``calm_burst_spike`` (multipliers and window lengths).
    """
    shape = calm_burst_spike(base_rate_per_s, **shape_kw)
    return [generate_sec(SecSpec(shape=shape, seed=s), name=f"sec-dyn{j + 1}")
            for j, s in enumerate(seeds)]
