"""Mapping trace hash blocks onto engine blocks; cache sizing from a trace."""

import pytest

from fairsim.errors import CapacityError
from fairsim.policies import make_policy
from fairsim.sim import EngineConfig, resolve_capacity, simulate
from fairsim.sim.keys import block_keys, engine_block_keys, mapping_loss, reusable_blocks
from tests.utils import constant_profile, make_request


class TestBlockKeys:
    """Engine block size equal to, smaller than, or larger than the hash block."""

    R = make_request("r", 0.0, 1300, [5, 6], block=512)  # 2 full hash blocks + 276 tokens

    def test_same_size(self):
        assert block_keys(self.R, 512) == (5, 6)

    def test_smaller_blocks(self):
        # Engine block k ends inside hash block ceil((k+1)*256/512) - 1: blocks 0,1 -> id 5.
        assert block_keys(self.R, 256) == ((5, 0), (5, 1), (6, 2), (6, 3))

    def test_larger_blocks(self):
        # One 1024-token engine block ends with hash block 6, whose prefix hash names it.
        assert block_keys(self.R, 1024) == ((6, 0),)

    def test_neither_divides_is_conservative(self):
        # 300-token blocks over 512-token hashes (1024 identified tokens): block 0 ends at 300
        # (inside hash block 0), block 1 at 600 and block 2 at 900 (inside hash block 1); block 3
        # would end at 1200, past the identified tokens, so it has no key here.
        assert block_keys(self.R, 300) == ((5, 0), (6, 1), (6, 2))
        assert block_keys(self.R, 1100) == ()

    def test_mapping_loss_warning(self):
        a = make_request("a", 0.0, 1024, [5, 6], block=512)
        b = make_request("b", 1.0, 1024, [5, 7], block=512)  # shares the first 512 tokens
        assert mapping_loss([a, b], 256) is None and mapping_loss([a, b], 1024) is None
        # At 300: b's block 0 (ends at 300, inside shared hash block 0) hits: 300 of 512 tokens.
        msg = mapping_loss([a, b], 300)
        assert "neither divides" in msg and "of the 512 prompt tokens" in msg and "300 (58.6%)" in msg


class TestCapacity:
    """Reusable content and the default sizing."""

    def test_reusable_blocks(self):
        assert reusable_blocks([(1, 2, 3), (1, 2, 4), (1, 5)]) == 2  # keys 1 and 2

    def test_fraction_and_default_floor(self):
        reqs = [make_request("a", 0, 40, range(10)), make_request("b", 1, 40, range(10))]
        assert resolve_capacity(reqs, EngineConfig(block_size=4, kv_fraction=1.0)) == (4, 10)
        with pytest.raises(CapacityError, match="needs 10 blocks of 4 tokens but the KV cache holds 5"):
            resolve_capacity(reqs, EngineConfig(block_size=4, kv_fraction=0.5))  # explicit: no floor
        # Default 0.3 x 10 = 3 blocks is raised to the 10 blocks of the longest prompt.
        assert resolve_capacity(reqs, EngineConfig(block_size=4)) == (4, 10)

    def test_finer_blocks_same_hits(self):
        """Block size 128 on 512-token hashes gives the same hits when prompts are block-aligned."""
        reqs = [make_request("a", 0.0, 2048 + 100, [1, 2, 3, 4], block=512),
                make_request("b", 5.0, 1024 + 7, [1, 2], block=512)]
        prof = constant_profile(1.0)
        for bs in (128, 512):
            t = simulate(reqs, make_policy("fcfs"), prof, EngineConfig(block_size=bs, kv_blocks=4096 // bs * 2))
            assert t.requests.set_index("request_id").loc["b", "cached_tokens"] == 1024


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
