"""Generate a small RAG workload: shared document excerpts with skewed popularity + a question.

Each request is a shared system prompt, the first ``m`` excerpts of one document (documents drawn
with Zipf-like popularity, ``m`` uniform in ``1..max_excerpts``) and a unique question. Requests
for the same document therefore share a prefix of the system prompt plus ``min(m, m')`` excerpts.
Lengths are multiples of the 512-token hash block so prefix sharing is block-aligned; the question
ends in a partial block, which is never cacheable.

Hash ids are prefix hashes (Mooncake convention): block ``b`` of excerpt ``e`` of document ``d``
has one id whatever request carries it, because its prefix (system prompt, excerpts ``0..e`` of
``d``) is the same. Question blocks get fresh ids.

The shipped default input ``fairsim/traces/data/rag_default.jsonl`` is
``generate_rag(RagSpec())`` written by ``write_mooncake``; ``tests/test_traces.py`` checks that it
still is.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fairsim.traces.prefix import BLOCK, check_block_multiples, check_tail_range
from fairsim.traces.trace import Trace
from fairsim.types import Request

DEFAULT_RAG_PATH = Path(__file__).parent / "data" / "rag_default.jsonl"


@dataclass(frozen=True, slots=True)
class RagSpec:
    """Parameters of the generated RAG workload (tokens and seconds)."""

    num_requests: int = 1200
    """Requests in the trace."""
    rate_per_s: float = 5.0
    """Mean Poisson arrival rate, requests/s."""
    num_docs: int = 200
    """Documents in the corpus."""
    zipf_s: float = 1.1
    """Popularity skew: document of rank ``i`` (1-based) has weight ``i ** -zipf_s``."""
    system_tokens: int = 512
    """Shared system prompt, tokens (multiple of 512)."""
    excerpt_tokens: int = 1024
    """Tokens per excerpt (multiple of 512)."""
    max_excerpts: int = 4
    """Most excerpts retrieved per request."""
    question_tokens: tuple[int, int] = (32, 480)
    """Question length range, tokens (inclusive), each below one block so it is never cached."""
    output_tokens: int = 1
    """Output tokens per request (prefill-only node)."""
    seed: int = 0
    """Seed of the numpy Generator."""

    def __post_init__(self) -> None:
        check_block_multiples(self, "system_tokens", "excerpt_tokens")
        check_tail_range("question_tokens", self.question_tokens)
        if self.num_requests < 1 or not self.rate_per_s > 0 or self.num_docs < 1 or self.max_excerpts < 1:
            raise ValueError("num_requests, rate_per_s, num_docs and max_excerpts must be positive")


def generate_rag(spec: RagSpec = RagSpec()) -> Trace:
    """Generate the RAG workload described by ``spec`` (deterministic in ``spec.seed``).

    Returns:
        A ``Trace`` whose requests carry labels ``doc_id`` and ``excerpts``.
    """
    rng = np.random.default_rng(spec.seed)
    weights = np.arange(1, spec.num_docs + 1, dtype=np.float64) ** -spec.zipf_s
    weights /= weights.sum()
    gaps = rng.exponential(1.0 / spec.rate_per_s, size=spec.num_requests)
    gaps[0] = 0.0
    arrivals_ms = np.round(np.cumsum(gaps) * 1000.0).astype(np.int64)
    docs = rng.choice(spec.num_docs, size=spec.num_requests, p=weights)
    excerpts = rng.integers(1, spec.max_excerpts + 1, size=spec.num_requests)
    questions = rng.integers(spec.question_tokens[0], spec.question_tokens[1] + 1, size=spec.num_requests)

    sys_blocks = spec.system_tokens // BLOCK
    exc_blocks = spec.excerpt_tokens // BLOCK
    per_doc = spec.max_excerpts * exc_blocks
    next_fresh = sys_blocks + spec.num_docs * per_doc  # ids below this are shared content
    requests = []
    for i in range(spec.num_requests):
        d, m = int(docs[i]), int(excerpts[i])
        ids = list(range(sys_blocks))
        ids += [sys_blocks + d * per_doc + b for b in range(m * exc_blocks)]
        ids.append(next_fresh)  # the question's partial block
        next_fresh += 1
        prompt_len = spec.system_tokens + m * spec.excerpt_tokens + int(questions[i])
        requests.append(Request(
            request_id=f"rag-{i:05d}",
            arrival_time=int(arrivals_ms[i]) / 1000.0,
            prompt_len=prompt_len,
            block_hashes=tuple(ids[: prompt_len // BLOCK]),
            hash_block_size=BLOCK,
            output_len=spec.output_tokens,
            labels={"doc_id": d, "excerpts": m, "_hash_ids": ids},
        ))
    return Trace(name="rag-default" if spec == RagSpec() else "rag", source=f"generate_rag({spec})",
                 requests=tuple(requests))


def write_mooncake(trace: Trace, path: str | Path) -> None:
    """Write ``trace`` as Mooncake JSONL (timestamps in ms; labels as extra fields).

    Requests must carry their full id list (including the partial last block) in the
    ``_hash_ids`` label, as ``generate_rag`` does.

    Raises:
        ValueError: A request without ``_hash_ids``.
    """
    lines = []
    for r in trace.requests:
        if "_hash_ids" not in r.labels:
            raise ValueError(f"request {r.request_id!r} has no '_hash_ids' label to write")
        rec = {
            "timestamp": int(round(r.arrival_time * 1000)),
            "input_length": r.prompt_len,
            "output_length": r.output_len,
            "hash_ids": list(r.labels["_hash_ids"]),
            "request_id": r.request_id,
        }
        rec.update({k: v for k, v in r.labels.items() if not k.startswith("_")})
        lines.append(json.dumps(rec))
    from fairsim.io import atomic_write_text

    atomic_write_text(path, "\n".join(lines) + "\n")


def main() -> None:
    """Rewrite the shipped default input (``python -m fairsim.traces.rag``)."""
    write_mooncake(generate_rag(RagSpec()), DEFAULT_RAG_PATH)
    print(f"wrote {DEFAULT_RAG_PATH}")


if __name__ == "__main__":
    main()
