"""fairsim.live.prompts: same hash -> same tokens; shared trace prefix -> shared token prefix."""

from fairsim.live.prompts import LOW_ID, VOCAB_SIZE, block_tokens, prompt_tokens
from tests.utils import make_request


class TestPromptSynthesis:
    """Deterministic token ids from block hashes (no vLLM needed)."""

    def test_same_hash_same_tokens(self):
        assert block_tokens(7, 512) == block_tokens(7, 512)
        assert block_tokens(7, 512) != block_tokens(8, 512)
        assert all(LOW_ID <= t < VOCAB_SIZE for t in block_tokens(7, 512))

    def test_shared_prefix_and_unique_tail(self):
        a = make_request("a", 0.0, 1100, hashes=[1, 2], block=512)
        b = make_request("b", 0.0, 1300, hashes=[1, 3], block=512)
        ta, tb = prompt_tokens(a), prompt_tokens(b)
        assert len(ta) == 1100 and len(tb) == 1300
        assert ta[:512] == tb[:512]  # hash 1 shared
        assert ta[512:1024] != tb[512:1024]  # hashes 2 vs 3
        assert ta[1024:] != tb[1024:76 + 1024]  # request-unique tails
        assert prompt_tokens(a) == ta  # deterministic
