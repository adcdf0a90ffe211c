"""Multi-hop Q&A workload (MuSiQue-like): excerpts from several linked documents per request.

A MuSiQue question (Trivedi et al., TACL 2022) composes 2-4 single-hop questions, each answered by
a paragraph of a different document. Model, all seeded:

- ``num_docs`` documents of ``excerpts_per_doc`` excerpts; each document links to
  ``links_per_doc`` others (fixed at corpus build): the next hop is drawn among them.
- The first hop's document is Zipf-popular (``doc_zipf``); in every hop the excerpt is
  Zipf-popular within its document (``excerpt_zipf``).
- A request is the system prompt, one excerpt per hop (``hops`` inclusive range), in hop order,
  then a unique question.

Prefix sharing ends at the first hop where two requests differ, so hits are shorter and partial
compared with the single-document SEC workload.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fairsim.traces.loadshape import LoadShape, arrivals, poisson
from fairsim.traces.prefix import BLOCK, check_block_multiples, check_tail_range, PrefixIds, make_request, zipf_weights
from fairsim.traces.trace import Trace


@dataclass(frozen=True, slots=True)
class MultiHopSpec:
    """Parameters of the multi-hop workload (tokens, seconds)."""

    shape: LoadShape = poisson(2.0, 300.0)
    """Arrival process (rates in requests/s)."""
    num_docs: int = 300
    """Documents in the corpus."""
    excerpts_per_doc: int = 6
    """Excerpts (paragraphs) per document."""
    excerpt_tokens: int = 1024
    """Tokens per excerpt (multiple of 512)."""
    system_tokens: int = 512
    """Shared system prompt, tokens (multiple of 512)."""
    links_per_doc: int = 3
    """Documents reachable as the next hop from each document."""
    hops: tuple[int, int] = (2, 4)
    """Hops (documents) per request, inclusive range."""
    doc_zipf: float = 1.0
    """Popularity skew of the first hop's document."""
    excerpt_zipf: float = 1.2
    """Popularity skew of the excerpt within a document."""
    question_tokens: tuple[int, int] = (32, 480)
    """Unique question length, inclusive range (< 512)."""
    seed: int = 0
    """Seed of the numpy Generator."""

    def __post_init__(self) -> None:
        check_block_multiples(self, "excerpt_tokens", "system_tokens")
        if not 1 <= self.hops[0] <= self.hops[1]:
            raise ValueError(f"hops={self.hops}: need 1 <= lo <= hi")
        if not 1 <= self.links_per_doc < self.num_docs:
            raise ValueError(f"links_per_doc={self.links_per_doc}: need 1..num_docs-1")
        check_tail_range("question_tokens", self.question_tokens)


def generate_multihop(spec: MultiHopSpec = MultiHopSpec(), name: str = "multihop") -> Trace:
    """Generate the multi-hop trace of ``spec`` (deterministic in ``spec.seed``).

    Returns:
        A ``Trace``; labels ``doc_id`` (first hop), ``hops`` and ``window``.

    Raises:
        ValueError: The shape produced no request.
    """
    rng = np.random.default_rng(spec.seed)
    links = np.stack([rng.choice(np.delete(np.arange(spec.num_docs), d), spec.links_per_doc,
                                 replace=False) for d in range(spec.num_docs)])
    times, windows = arrivals(spec.shape, rng)
    n = len(times)
    if n == 0:
        raise ValueError(f"load shape {spec.shape} produced no requests; raise its rates")
    doc_p = zipf_weights(spec.num_docs, spec.doc_zipf)
    exc_p = zipf_weights(spec.excerpts_per_doc, spec.excerpt_zipf)
    ids = PrefixIds()
    sys_blocks = [("sys", b) for b in range(spec.system_tokens // BLOCK)]
    per_excerpt = spec.excerpt_tokens // BLOCK
    requests = []
    for i in range(n):
        hops = int(rng.integers(spec.hops[0], spec.hops[1] + 1))
        doc = int(rng.choice(spec.num_docs, p=doc_p))
        first = doc
        contents = list(sys_blocks)
        for hop in range(hops):
            if hop:
                doc = int(links[doc][rng.integers(spec.links_per_doc)])
            e = int(rng.choice(spec.excerpts_per_doc, p=exc_p))
            contents += [("doc", doc, e, b) for b in range(per_excerpt)]
        q = int(rng.integers(spec.question_tokens[0], spec.question_tokens[1] + 1))
        requests.append(make_request(ids, f"{name}-{i:05d}", float(times[i]), contents, q,
                                     {"doc_id": first, "hops": hops, "window": windows[i]}))
    return Trace(name=name, source=f"generate_multihop({spec})", requests=tuple(requests))
