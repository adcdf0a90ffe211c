"""The simulator orders the waiting queue from the cache as it was at the START of the step.

vLLM's hook reorders ``self.waiting`` before ``Scheduler.schedule`` runs, i.e. before running
requests take their chunks; a block those chunks evict still counts in ``h`` for that step's order.
"""

from fairsim.policies.lpm import LPM
from fairsim.sim import EngineConfig, simulate
from tests.utils import constant_profile, make_request


class _Recording(LPM):
    """LPM that records the ``h`` it was shown per call time."""

    def __init__(self):
        super().__init__()
        self.seen: dict[float, dict[str, int]] = {}

    def order(self, waiting, now):
        self.seen[now] = {q.request_id: q.cached_len for q in waiting}
        return super().order(waiting, now)


class TestOrderAtStepStart:
    """A hit evicted by a running chunk in step 3 still counts in step 3's order."""

    def test_snapshot_before_running_chunk_evicts(self):
        # 4-token blocks, 5 blocks, budget 8, every step lasts 1 s.
        # Step 0 (t=0): X (5 tokens, block x1) runs whole; frees: its keyless partial block to the
        #   front, x1's block 0 to the back -> free queue [1, 2, 3, 4, 0].
        # Steps 1-3 (t=1..3): R (20 unique tokens) takes 8, 8, 4 tokens: blocks 1,2 / 3,4 / 0,
        #   so step 3's chunk evicts x1.
        # W1 (hits x1) and W2 arrive at 2.5 s: at the start of step 3 x1 is still cached (h=4).
        reqs = [
            make_request("X", 0.0, 5, hashes=["x1"]),
            make_request("R", 1.0, 20, hashes=[]),
            make_request("W1", 2.5, 5, hashes=["x1"]),
            make_request("W2", 2.5, 5, hashes=["y1"]),
        ]
        policy = _Recording()
        res = simulate(reqs, policy, constant_profile(1.0),
                       EngineConfig(budget_tokens=8, max_num_seqs=4, block_size=4, kv_blocks=5))
        assert policy.seen[3.0] == {"W1": 4, "W2": 0}
        # At admission (step 4) x1 is gone: W1 computes its prompt from scratch.
        table = res.requests.set_index("request_id")
        assert table.loc["W1", "cached_tokens"] == 0
        assert table.loc["R", "finish_step"] == 3
