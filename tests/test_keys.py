"""engine_block_keys: every full engine block gets a key, as vLLM hashes every full block."""

from fairsim.sim.keys import block_keys, engine_block_keys
from tests.utils import make_request


class TestEngineBlockKeys:
    """Blocks past the trace's hashes get request-unique keys; the partial tail none."""

    def test_unique_keys_for_full_tail_blocks(self):
        # 4-token hash blocks, 2-token engine blocks; 11 tokens = 1 hash block (2 engine blocks)
        # + 7 unidentified tokens = 3 more full engine blocks and a 1-token partial block.
        r = make_request("r", 0.0, 11, hashes=[42], block=4)
        assert block_keys(r, 2) == ((42, 0), (42, 1))
        assert engine_block_keys(r, 2) == (
            (42, 0), (42, 1), ("unique", "r", 2), ("unique", "r", 3), ("unique", "r", 4))

    def test_no_extra_keys_when_hashes_cover_all_full_blocks(self):
        r = make_request("r", 0.0, 9, hashes=[1, 2], block=4)
        assert engine_block_keys(r, 4) == (1, 2)
