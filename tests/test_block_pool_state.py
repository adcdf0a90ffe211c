"""BlockPool against a plain model (hypothesis ``RuleBasedStateMachine``)."""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from fairsim.policies.eviction import ProtectWaitingHits
from fairsim.sim.block_pool import BlockPool
from fairsim.sim.hooked_pool import HookedBlockPool

KEYS = st.sampled_from("abcdefg")


class BlockPoolMachine(RuleBasedStateMachine):
    """Reason: the pool must stay exactly vLLM's LRU - allocate takes the front of the free queue,
    a block reaching ref 0 joins the back (the front if it has no key), a hit leaves the queue, an allocated cached block loses
    its key - which this model states directly with a list, a dict and a dict of lists."""

    @initialize(num_blocks=st.integers(1, 8))
    def setup(self, num_blocks):
        self.pool = BlockPool(num_blocks)
        self.free = list(range(num_blocks))  # front = next to evict
        self.ref = {b: 0 for b in range(num_blocks)}
        self.key: dict[int, str] = {}
        self.cached: dict[str, list[int]] = {}  # key -> blocks, in caching order
        self.held: list[int] = []  # one entry per reference taken

    @rule(data=st.data())
    def allocate(self, data):
        n = data.draw(st.integers(0, len(self.free)))
        expected = self.free[:n]
        del self.free[:n]
        for b in expected:
            if b in self.key:
                self.cached[self.key[b]].remove(b)
                if not self.cached[self.key[b]]:
                    del self.cached[self.key[b]]
                del self.key[b]
            self.ref[b] = 1
            self.held.append(b)
        assert self.pool.allocate(n) == expected

    @precondition(lambda self: any(b not in self.key for b in self.held))
    @rule(data=st.data(), key=KEYS)
    def cache(self, data, key):
        b = data.draw(st.sampled_from(sorted({b for b in self.held if b not in self.key})))
        self.pool.cache(b, key)
        self.key[b] = key
        self.cached.setdefault(key, []).append(b)

    @rule(key=KEYS)
    def hit(self, key):
        expected = self.cached[key][:1] if key in self.cached else []
        got = self.pool.lookup_prefix([key], 1)
        assert got == expected
        self.pool.touch(got)
        for b in got:
            if self.ref[b] == 0:
                self.free.remove(b)
            self.ref[b] += 1
            self.held.append(b)

    @precondition(lambda self: self.held)
    @rule(data=st.data())
    def free_one(self, data):
        b = self.held.pop(data.draw(st.integers(0, len(self.held) - 1)))
        self.pool.free([b])
        self.ref[b] -= 1
        if self.ref[b] == 0:
            # vLLM BlockPool.free_blocks: hashed blocks to the back (LRU), keyless to the front.
            if b in self.key:
                self.free.append(b)
            else:
                self.free.insert(0, b)

    @invariant()
    def same_state(self):
        assert self.pool.free_queue() == self.free
        assert self.pool.ref_cnt == [self.ref[b] for b in range(self.pool.num_blocks)]
        assert self.pool.num_free == len(self.free)
        assert self.pool.num_cached == len(self.key)
        for key in "abcdefg":
            assert self.pool.is_cached(key) == (key in self.cached)


TestBlockPoolModel = BlockPoolMachine.TestCase


class HookedPoolMachine(BlockPoolMachine):
    """Reason: a hooked pool whose hook protects nothing (PEEK's hook before any ordering) must
    behave exactly like the LRU pool - the hook path may change *which* blocks, never the rest."""

    @initialize(num_blocks=st.integers(1, 8))
    def setup(self, num_blocks):
        super().setup(num_blocks)
        self.pool = HookedBlockPool(num_blocks, ProtectWaitingHits())


TestHookedPoolModel = HookedPoolMachine.TestCase
