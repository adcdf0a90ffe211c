"""llm-d's inference scheduler: the highest weighted sum of prefix-cache, queue and KV scorers.

Source: llm-d / gateway-api-inference-extension, ``pkg/epp/scheduling/framework/plugins/scorer/``
(``queue.go``: ``(max_q - q) / (max_q - min_q)``, 1 when all queues are equal; ``kvcache.go``:
``1 - KV usage``) and the prefix-cache scorer (matched blocks / the request's blocks); the
max-score picker takes the highest total. Default weights: prefix-cache 3, queue 2 (llm-d's
default scheduling profile as Red Hat's llm-d guide states it), KV utilisation 2 (ours: the
llm-d inference-scheduling example's value).

Our choices: the cache view is exact (llm-d's precise prefix-cache scorer fed by KV events,
without lag; its approximate default indexes the blocks it routed instead); queue length and KV
usage are the engine's own at the release time (scraped metrics without lag); the waiting queue
counts requests routed and not yet taken in by a step; ties go to the lowest index (llm-d picks
at random among ties). Parameters: ``prefix_weight``, ``queue_weight``, ``kv_weight`` (>= 0).
"""

from __future__ import annotations

from collections.abc import Sequence

from fairsim.routers.base import (WEIGHT_NEED, InstanceView, Router, RouteRequest, cached_prefixes, check_param,
                                  highest, weight)


class LLMD(Router):
    name = "llm-d"
    needs = ("hashes",)
    view = "exact"
    source = "llm-d gateway-api-inference-extension scorers (prefix-cache, queue, kv-cache-utilization)"

    def __init__(self, num_instances: int, *, prefix_weight: float = 3.0, queue_weight: float = 2.0,
                 kv_weight: float = 2.0, **kw) -> None:
        super().__init__(num_instances, **kw)
        for key, value in (("prefix_weight", prefix_weight), ("queue_weight", queue_weight),
                           ("kv_weight", kv_weight)):
            check_param(self.name, key, value, weight(value), WEIGHT_NEED)
        if not (prefix_weight or queue_weight or kv_weight):  # every score 0: instance 0 always wins the tie
            raise ValueError("--router-param (router 'llm-d'): prefix_weight, queue_weight and kv_weight are all 0, "
                             "so every instance scores 0 and the first takes every request; give one a weight > 0")
        self.weights = (float(prefix_weight), float(queue_weight), float(kv_weight))

    def scores(self, req: RouteRequest, instances: Sequence[InstanceView]) -> list[float]:
        """Each instance's weighted total (higher is better)."""
        total_blocks = req.prompt_blocks
        prefix = [overlap / total_blocks for overlap in cached_prefixes(req, instances)]
        queues = [inst.waiting for inst in instances]
        qmin, qmax = min(queues), max(queues)
        queue = [1.0 if qmax == qmin else (qmax - q) / (qmax - qmin) for q in queues]
        kv = [1.0 - inst.kv_usage for inst in instances]
        wp, wq, wk = self.weights
        return [wp * p + wq * q + wk * u for p, q, u in zip(prefix, queue, kv)]

    def choose(self, req: RouteRequest, instances: Sequence[InstanceView], now: float) -> int:
        return highest(self.scores(req, instances))
