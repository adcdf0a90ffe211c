"""Dynamo's KV router: the lowest cost, overlap weight x prefill blocks + active decode blocks.

Source: ai-dynamo/dynamo, ``docs/router/README.md`` ("Cost Function") and
``lib/llm/src/kv_router/scheduler.rs`` (``DefaultWorkerSelector::worker_logit``,
``softmax_sample``). For each instance ``k``:

    logit_k = overlap_weight * prefill_blocks_k + decode_blocks_k
    prefill_blocks_k = (L - overlap_k * block_size) / block_size      (fractional, as Dynamo's)
    decode_blocks_k  = active blocks on k + the request's own blocks  (potential active blocks)

``overlap_k``: the leading prompt blocks cached on ``k``. Temperature 0 picks the lowest logit;
Dynamo breaks ties by the smallest cached tree, then at random. Temperature ``T > 0`` samples
``p_k ~ exp(-(logit_k - min) / ((max - min) * T))`` (all equal: uniform), Dynamo's
normalisation.

Our choices: the cache view is exact (Dynamo's default ``--kv-events`` with no event lag: the
instance's cached blocks at the release time, evictable ones included, as KV "stored" events
report them); active blocks are ``ceil(L / block_size)`` per routed, unfinished request (Dynamo
also grows them with generated tokens and shares common prefixes between sequences; we do
neither); ties after the tree size go to the lowest index; sampling uses a ``random.Random``
seeded with ``--seed``, so a run is reproducible. Parameters (``--router-param``):
``overlap_weight`` (>= 0, default 1.0, Dynamo's ``--kv-overlap-score-weight``) and
``temperature`` (>= 0, default 0.0, ``--router-temperature``).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from fairsim.routers.base import (WEIGHT_NEED, InstanceView, Router, RouteRequest, cached_prefixes, check_param,
                                  number, weight)


#: Smallest temperature above 0. ``softmax_pick`` scales the logits by ``1 / (spread x T)``;
#: near the float limit (5e-324) that overflows, the probabilities become NaN and every request
#: went to the last instance. Below this the softmax is the argmin anyway (0 says so).
MIN_TEMPERATURE = 1e-6


class DynamoKV(Router):
    name = "dynamo-kv"
    needs = ("hashes",)
    view = "exact"
    source = "ai-dynamo/dynamo lib/llm/src/kv_router/scheduler.rs, docs/router/README.md"

    def __init__(self, num_instances: int, *, overlap_weight: float = 1.0, temperature: float = 0.0,
                 **kw) -> None:
        super().__init__(num_instances, **kw)
        check_param(self.name, "overlap_weight", overlap_weight, weight(overlap_weight), WEIGHT_NEED)
        check_param(self.name, "temperature", temperature,
                    number(temperature) and (temperature == 0 or temperature >= MIN_TEMPERATURE),
                    f"0 or a finite number >= {MIN_TEMPERATURE:g} (a smaller one overflows the softmax's "
                    f"scale; 0 picks the lowest cost)")
        self.overlap_weight = float(overlap_weight)
        self.temperature = float(temperature)
        self._rng = random.Random(self.seed)

    @property
    def samples(self) -> bool:
        """Temperature > 0 samples an instance (``softmax_pick``); 0 picks the lowest cost."""
        return self.temperature > 0

    def logits(self, req: RouteRequest, instances: Sequence[InstanceView]) -> list[float]:
        """``logit_k`` of every instance (lower is better)."""
        bs = req.block_size
        L = req.request.prompt_len
        own = req.prompt_blocks
        weight = self.overlap_weight
        return [weight * ((L - overlap * bs) / bs) + (inst.active_blocks + own)
                for inst, overlap in zip(instances, cached_prefixes(req, instances))]

    def choose(self, req: RouteRequest, instances: Sequence[InstanceView], now: float) -> int:
        logits = self.logits(req, instances)
        if self.temperature == 0.0:
            low = min(logits)
            tied = [i for i, v in enumerate(logits) if v == low]
            if len(tied) == 1:
                return tied[0]
            return min(tied, key=lambda i: (instances[i].cached_total, i))
        return softmax_pick(logits, self.temperature, self._rng.random())


def softmax_pick(logits: Sequence[float], temperature: float, sample: float) -> int:
    """Dynamo's ``softmax_sample_with_sample``: lower logits likelier; ``sample`` in [0, 1)."""
    lo, hi = min(logits), max(logits)
    if lo == hi:
        probs = [1.0] * len(logits)
    else:
        scale = -1.0 / ((hi - lo) * temperature)
        probs = [math.exp(v * scale - lo * scale) for v in logits] if math.isfinite(scale) else []
    total = sum(probs)
    if not 0 < total < math.inf:
        # A spread near 0 times a small temperature overflowed the scale (inf - inf is NaN): the
        # softmax's limit there, the lowest logit (Dynamo's f64 would pick from NaNs).
        return logits.index(lo)
    cum = 0.0
    for i, p in enumerate(probs):
        cum += p / total
        if sample <= cum:
            return i
    return len(logits) - 1
