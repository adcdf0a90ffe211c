"""Hypothesis strategies shared by the property tests (attrs ``tests/strategies.py`` style).

Related values are drawn next to each other so failures shrink to small, readable cases.
"""

from __future__ import annotations

from hypothesis import assume, strategies as st

from fairsim.costmodel import Profile
from fairsim.sim import EngineConfig
from fairsim.types import QueuedRequest, Request

BLOCK = 4  # tokens per block in generated traces: small, so tiny prompts span several blocks


@st.composite
def waiting_queues(draw, min_size: int = 1, max_size: int = 12, zero_wait: bool = False):
    """``(waiting, now)``: snapshots with unique ids, ``c >= 1``, arrivals at or before ``now``."""
    n = draw(st.integers(min_size, max_size))
    now = draw(st.floats(0.0, 100.0, allow_nan=False))
    out = []
    for i in range(n):
        h = draw(st.integers(0, 20_000))
        c = draw(st.integers(1, 20_000))
        wait = 0.0 if zero_wait else draw(st.sampled_from([0.0, 0.5, 1.0]) | st.floats(0.0, 50.0))
        out.append(QueuedRequest(f"r{i}", max(0.0, now - wait), h + c, h, c, 0, None))
    order = draw(st.permutations(range(n)))  # the engine passes any order
    return [out[i] for i in order], now


weights = st.floats(0.01, 100.0, allow_nan=False, allow_infinity=False)
"""Fairway lane weights (> 0, scale-free)."""


@st.composite
def profiles(draw):
    """A small cost model: per-step, per-token, per-pair and per-request costs (seconds)."""
    a = draw(st.sampled_from([0.0, 0.01, 1.0]))
    b = draw(st.sampled_from([0.0, 1e-3, 0.1]))
    k = draw(st.sampled_from([0.0, 1e-5]))
    d = draw(st.sampled_from([0.0, 0.005]))
    assume(a + b + k > 0)  # a profile whose steps take no time is rejected by Profile itself
    return Profile("prop", "prior", a, b, k, d, (1, 1000), (0.05, 5.0), budget_tokens=2048)


@st.composite
def traces(draw, max_requests: int = 8):
    """Small traces with shared document prefixes (``BLOCK``-token blocks, prefix hash ids).

    Each request takes the first ``j`` blocks of one of up to three documents, adds up to three
    blocks of its own and up to ``BLOCK - 1`` trailing tokens (never cacheable).
    """
    num_docs = draw(st.integers(1, 3))
    doc_len = [draw(st.integers(1, 6)) for _ in range(num_docs)]
    n = draw(st.integers(1, max_requests))
    t = 0.0
    reqs = []
    for i in range(n):
        t += draw(st.sampled_from([0.0, 0.25, 1.0, 3.0]))
        d = draw(st.integers(0, num_docs - 1))
        shared = draw(st.integers(0, doc_len[d]))
        own = draw(st.integers(0, 3))
        tail = draw(st.integers(0, BLOCK - 1))
        hashes = tuple(1000 * (d + 1) + j for j in range(shared))
        hashes += tuple(1_000_000 + 100 * i + j for j in range(own))
        prompt = len(hashes) * BLOCK + tail
        if prompt == 0:
            prompt = tail = 1
        reqs.append(Request(f"q{i}", t, prompt, hashes, BLOCK, 1, {}))
    return reqs


@st.composite
def engine_configs(draw, requests):
    """An engine config that can run ``requests``: KV capacity >= the longest prompt."""
    longest = max(-(-r.prompt_len // BLOCK) for r in requests)
    return EngineConfig(
        budget_tokens=draw(st.sampled_from([3, 4, 8, 16, 64])),
        max_num_seqs=draw(st.integers(1, 6)),
        block_size=BLOCK,
        kv_blocks=longest + draw(st.integers(0, 12)),
    )


@st.composite
def simulations(draw, max_requests: int = 8):
    """``(requests, profile, config)`` for one small simulation."""
    requests = draw(traces(max_requests))
    return requests, draw(profiles()), draw(engine_configs(requests))


@st.composite
def chained_token_traces(draw, max_requests: int = 8, max_len: int = 160):
    """``(token_lists, hash_block, ceil)``: prompts as token sequences over a 3-letter alphabet
    (so prefixes are shared both on purpose, by copying an earlier prompt's prefix, and by
    chance), a hash block size, and whether the partial last block carries an id (Mooncake's
    ceil count) or not (floor)."""
    n = draw(st.integers(2, max_requests))
    prompts: list[list[int]] = []
    for _ in range(n):
        tokens: list[int] = []
        if prompts and draw(st.booleans()):
            base = draw(st.sampled_from(prompts))
            tokens = base[: draw(st.integers(0, len(base)))]
        tokens = tokens + draw(st.lists(st.integers(0, 2), min_size=0 if tokens else 1, max_size=max_len))
        prompts.append(tokens[:max_len] or [0])
    return prompts, draw(st.sampled_from([4, 8, 16, 32])), draw(st.booleans())


@st.composite
def segment_traces(draw, max_requests: int = 8):
    """``(chunk_lengths, chunk_id_lists)``: a chunk library (id -> 1..40 tokens) and each
    request's chunk sequence, sharing leading chunks with earlier requests at random."""
    lib = draw(st.lists(st.integers(1, 40), min_size=2, max_size=8))
    n = draw(st.integers(2, max_requests))
    seqs: list[list[int]] = []
    for _ in range(n):
        seq: list[int] = []
        if seqs and draw(st.booleans()):
            base = draw(st.sampled_from(seqs))
            seq = base[: draw(st.integers(0, len(base)))]
        seq = seq + draw(st.lists(st.integers(0, len(lib) - 1), min_size=0 if seq else 1, max_size=6))
        seqs.append(seq)
    return lib, seqs


@st.composite
def canonical_traces(draw, max_requests: int = 8):
    """Requests as a reader would make them: unique ids, ms arrivals, full-block chained ids at
    a drawn hash block, sessions with ``after``/``delay_s``, labels of one type per key."""
    block = draw(st.sampled_from([16, 64, 512]))
    n = draw(st.integers(1, max_requests))
    label_kinds = draw(st.dictionaries(st.sampled_from(["doc", "klass", "score"]),
                                       st.sampled_from(["int", "str", "float", "bool"]), max_size=2))
    reqs: list[Request] = []
    t = 0.0
    for i in range(n):
        t += draw(st.integers(0, 5000)) / 1000.0
        prompt = draw(st.integers(1, 4 * block))
        full = prompt // block
        base = draw(st.sampled_from(reqs)).block_hashes if reqs and draw(st.booleans()) else ()
        keep = draw(st.integers(0, min(len(base), full)))
        hashes = tuple(base[:keep]) + tuple(10_000 * (i + 1) + j for j in range(full - keep))
        labels = {}
        for key, kind in label_kinds.items():
            if draw(st.booleans()):
                labels[key] = {"int": draw(st.integers(-5, 5)), "str": draw(st.sampled_from(["a", "b"])),
                               "float": draw(st.sampled_from([0.5, 2.25])), "bool": draw(st.booleans())}[kind]
        session = after = None
        delay = 0.0
        if reqs and draw(st.booleans()):
            prev = draw(st.sampled_from(reqs))
            session, after, delay = prev.session_id or f"s{i}", prev.request_id, draw(st.integers(0, 9000)) / 1000.0
        reqs.append(Request(f"q{i}", round(t, 3), prompt, hashes, block, draw(st.integers(1, 50)), labels,
                            session_id=session, after=after, delay_s=delay))
    return reqs, block


@st.composite
def colocated_traces(draw, max_spare_blocks: int = 12):
    """A generated trace with 1-40 output tokens per request and a colocated engine whose KV
    holds the longest request plus 0..``max_spare_blocks`` blocks (so decodes preempt): ``(requests,
    config)``."""
    from fairsim.sim.keys import blocks_for

    base = draw(traces(max_requests=10))
    reqs = [Request(r.request_id, r.arrival_time, r.prompt_len, r.block_hashes, BLOCK,
                    draw(st.integers(1, 40)), {}) for r in base]
    longest = max(blocks_for(r.prompt_len + r.output_len - 1, BLOCK) for r in reqs)
    config = EngineConfig(budget_tokens=draw(st.sampled_from([2, 3, 4, 8, 16, 64])),
                          max_num_seqs=draw(st.integers(1, 8)), block_size=BLOCK,
                          kv_blocks=longest + draw(st.integers(0, max_spare_blocks)), mode="colocated")
    return reqs, config
