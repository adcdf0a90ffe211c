"""Does the order of the waiting queue decide how much of the prefix cache survives?

The work spread (``spread.py``) asks whether queued requests differ in size. It cannot see a
second way ordering matters: when the prefixes that requests share do not all fit in the KV cache
at once, serving requests in arrival order interleaves the groups that share a prefix and the
cache evicts each prefix before its next user comes (it *thrashes*), while an order that serves
the requests sharing a prefix together keeps the prefix for all of them. Then every request is
about the same size (spread ~1x) and ordering still decides the prefill work.

The check replays the trace twice at the run's KV capacity and timing: FCFS (arrival order) and
LPM (longest cached prefix first, SGLang's reuse-grouping order: ``fairsim/policies/lpm.py``),
and compares the uncached prompt tokens each computes. Both see the same queue whenever fewer
than two requests wait, so the two only differ where the queue can be reordered: a trace whose
working set fits, or that never queues, gives a ratio of ~1.

The verdict threshold ``DEFAULT_REUSE_THRESHOLD`` = 1.25 (``--reuse-threshold``) is fairsim's
choice: FCFS computing a quarter more prefill tokens than a reuse-grouping order is a quarter more
prefill time at the same load. No paper gives a number.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_REUSE_THRESHOLD = 1.25
"""Uncached-token ratio FCFS / LPM at and above which ordering matters for the prefix cache."""


@dataclass(frozen=True)
class OrderReuse:
    """Prefix-cache hit rate kept by arrival order and by a reuse-grouping order.

    Attributes:
        kv_blocks: KV capacity both replays ran with, blocks.
        prompt_tokens: Prompt tokens of the replayed requests (the same in both replays).
        fcfs_cached_tokens: Prompt tokens FCFS found cached at admission.
        grouped_cached_tokens: Prompt tokens LPM found cached at admission.
        threshold: Verdict threshold on ``work_ratio`` (> 1).
        source: How the replays were timed (for the report).
    """

    kv_blocks: int
    prompt_tokens: int
    fcfs_cached_tokens: int
    grouped_cached_tokens: int
    threshold: float = DEFAULT_REUSE_THRESHOLD
    source: str = "simulations at the trace's timing"

    def __post_init__(self) -> None:
        for name in ("fcfs_cached_tokens", "grouped_cached_tokens"):
            if not 0 <= getattr(self, name) <= self.prompt_tokens:
                raise ValueError(f"OrderReuse {name}={getattr(self, name)}: outside 0..{self.prompt_tokens}")
        if not self.threshold > 1:
            raise ValueError(f"--reuse-threshold {self.threshold}: need a factor > 1")

    @property
    def fcfs_hit_rate(self) -> float:
        """Share of prompt tokens FCFS found cached."""
        return self.fcfs_cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def grouped_hit_rate(self) -> float:
        """Share of prompt tokens LPM found cached."""
        return self.grouped_cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def work_ratio(self) -> float:
        """Uncached prompt tokens FCFS computes / those LPM computes (1.0 when both compute none)."""
        fcfs = self.prompt_tokens - self.fcfs_cached_tokens
        grouped = self.prompt_tokens - self.grouped_cached_tokens
        return fcfs / grouped if grouped > 0 else (1.0 if fcfs == 0 else float("inf"))

    @property
    def matters(self) -> bool:
        """True when FCFS computes ``threshold`` times or more the uncached tokens of LPM."""
        return self.work_ratio >= self.threshold

    def describe(self) -> str:
        """One clause with the figures: the hit rates and the work ratio against the threshold."""
        cmp = ">=" if self.matters else "<"
        return (f"at {self.kv_blocks:,} KV blocks FCFS (arrival order) keeps a prefix hit rate of "
                f"{self.fcfs_hit_rate:.3f} and LPM (shared prefixes together) {self.grouped_hit_rate:.3f}: "
                f"FCFS computes {self.work_ratio:.2f}x the uncached prompt tokens ({cmp} {self.threshold:g}x)")

    def reason(self) -> str:
        """The verdict's clause: the work ratio against the threshold, with the two hit rates."""
        cmp = ">=" if self.matters else "<"
        return (f"FCFS computes {self.work_ratio:.2f}x the uncached prompt tokens of LPM ({cmp} "
                f"{self.threshold:g}x; hit rate {self.fcfs_hit_rate:.3f} vs {self.grouped_hit_rate:.3f} "
                f"at {self.kv_blocks:,} KV blocks)")

    def summary(self) -> dict:
        """JSON-ready figures."""
        return {"source": self.source, "kv_blocks": self.kv_blocks, "threshold": self.threshold,
                "fcfs_hit_rate": self.fcfs_hit_rate, "lpm_hit_rate": self.grouped_hit_rate,
                "uncached_tokens_ratio_fcfs_over_lpm": self.work_ratio, "matters": self.matters}
