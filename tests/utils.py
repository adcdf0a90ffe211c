"""Small factories for tests (vLLM ``tests/v1/core/utils.py`` style)."""

from __future__ import annotations

from fairsim.costmodel import Profile
from fairsim.types import QueuedRequest, Request


def make_queued(rid: str, h: int, c: int, arrival: float = 0.0, prompt_len: int | None = None) -> QueuedRequest:
    """A waiting-request snapshot with cached ``h`` and uncached ``c`` tokens."""
    return QueuedRequest(rid, arrival, prompt_len if prompt_len is not None else h + c, h, c, 0, None)


def make_request(rid: str, arrival: float, prompt_len: int, hashes=(), block: int = 4,
                 **labels) -> Request:
    """A request with prefix hashes of ``block``-token blocks."""
    return Request(rid, arrival, prompt_len, tuple(hashes), block, 1, dict(labels))


def constant_profile(step_s: float = 1.0, per_token_s: float = 0.0) -> Profile:
    """Step time = ``step_s + per_token_s * tokens``; T_idle from the same model."""
    return Profile("const", "prior", step_s, per_token_s, 0.0, 0.0, (1, 1_000_000),
                   (step_s, step_s * 1e6), budget_tokens=2048)


def infinite_cache_hits(requests, block):
    """Leading engine blocks of each request (in list order) already cached by earlier ones:
    an infinite cache, no eviction (``fairsim.sim.keys.block_keys`` at ``block``)."""
    from fairsim.sim.keys import block_keys

    seen, out = set(), []
    for r in requests:
        keys = block_keys(r, block)
        hit = 0
        for k in keys:
            if k not in seen:
                break
            hit += 1
        out.append(hit)
        seen.update(keys)
    return out


def change_hits(rng, waiting: dict, order, max_changed: int, new_hit=None) -> None:
    """As the engine after cache events: give up to ``max_changed`` random waiting requests a new
    hit (``new_hit(rng, q)`` tokens, default uniform in ``0..L-1``) and feed each new snapshot to
    the incremental ``order`` (``add``)."""
    for rid in rng.sample(sorted(waiting), k=min(len(waiting), rng.randint(0, max_changed))):
        q = waiting[rid]
        h = new_hit(rng, q) if new_hit is not None else rng.randint(0, q.prompt_len - 1)
        q = waiting[rid] = q._replace(cached_len=h, uncached_len=max(1, q.prompt_len - h))
        order.add(q)


def admit(waiting: dict, order, admitted) -> None:
    """As the engine after a step: the admitted requests leave ``waiting`` and the ``order``."""
    for q in admitted:
        del waiting[q.request_id]
        order.remove(q.request_id)
