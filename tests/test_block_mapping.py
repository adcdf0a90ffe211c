"""Engine block size B over a trace's hash block H: hits equal those of the token-level prefix
identity (chained ids and exact content segments), in the keys and in the simulated engine."""

from hypothesis import given, settings

from fairsim.policies import make_policy
from fairsim.sim import EngineConfig, simulate
from fairsim.sim.keys import engine_block_keys
from fairsim.types import Request
from tests.strategies import chained_token_traces, segment_traces
from tests.utils import constant_profile, infinite_cache_hits


def _lcp(a, b):
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _chained(prompts, h, ceil):
    ids: dict[tuple, int] = {}
    reqs = []
    for i, tokens in enumerate(prompts):
        n = -(-len(tokens) // h) if ceil else len(tokens) // h
        hashes = [ids.setdefault(tuple(tokens[: (j + 1) * h]), len(ids)) for j in range(n)]
        reqs.append(Request(f"r{i}", float(i), len(tokens), tuple(hashes[: len(tokens) // h]), h))
    return reqs


class TestBlockSizeMapping:
    """Engine block B over hash block H: hits == those of the token-level prefix identity."""

    @settings(max_examples=150)
    @given(chained_token_traces())
    def test_hits_match_token_prefix_identity(self, case):
        prompts, h, ceil = case
        reqs = _chained(prompts, h, ceil)
        known = [len(t) // h * h for t in prompts]  # tokens with a recorded identity
        for block in sorted({h // 4, h // 2, h, 2 * h, 3 * h, 4 * h, h + h // 2, 3, 5} - {0}):
            hits = infinite_cache_hits(reqs, block)
            for i in range(len(reqs)):
                shared = max((min(_lcp(prompts[i], prompts[j]), known[i], known[j]) for j in range(i)), default=0)
                if block % h == 0:  # multiple of H (or H): exact at the token level
                    assert hits[i] == shared // block
                elif h % block == 0:  # divides H: exact at the trace's resolution
                    assert hits[i] == shared // h * (h // block)
                else:  # neither: conservative, never a false hit, never below whole hash blocks
                    assert shared // h * h // block <= hits[i] <= shared // block

    @settings(max_examples=150)
    @given(segment_traces())
    def test_segments_exact_at_any_block(self, case):
        lib, seqs = case
        reqs, tokens = [], []
        for i, seq in enumerate(seqs):
            segs = tuple((c, lib[c]) for c in seq)
            toks = [(c, k) for c in seq for k in range(lib[c])]
            reqs.append(Request(f"r{i}", float(i), max(1, len(toks)) + 2, segments=segs))
            tokens.append(toks)
        for block in (1, 3, 4, 7, 16, 32):
            hits = infinite_cache_hits(reqs, block)
            for i in range(len(reqs)):
                shared = max((_lcp(tokens[i], tokens[j]) for j in range(i)), default=0)
                assert hits[i] == shared // block

    @settings(max_examples=25, deadline=None)
    @given(chained_token_traces(max_requests=6))
    def test_engine_hits_with_16_token_hashes(self, case):
        """Block 16 on a 16-token-hash trace: the simulator's cached tokens at admission are the
        token-level prefix hits, in whole blocks, capped at L - 1 (vLLM recomputes the last token)."""
        prompts, _, ceil = case
        prompts = [p * 4 for p in prompts]  # longer prompts: several 16-token blocks
        reqs = [Request(r.request_id, 100.0 * i, r.prompt_len, r.block_hashes, 16)
                for i, r in enumerate(_chained(prompts, 16, ceil))]
        res = simulate(reqs, make_policy("fcfs"), constant_profile(0.01),
                       EngineConfig(block_size=16, kv_blocks=10_000))
        cached = res.requests.set_index("request_id")["cached_tokens"]
        known = [len(t) // 16 * 16 for t in prompts]
        for i, r in enumerate(reqs):
            shared = max((min(_lcp(prompts[i], prompts[j]), known[i], known[j]) for j in range(i)), default=0)
            assert cached[r.request_id] == min(shared // 16, (r.prompt_len - 1) // 16) * 16

    def test_engine_keys_unique_past_identity(self):
        r = Request("x", 0.0, 100, (7,), 32)
        assert engine_block_keys(r, 16) == ((7, 0), (7, 1), ("unique", "x", 2), ("unique", "x", 3),
                                            ("unique", "x", 4), ("unique", "x", 5))
