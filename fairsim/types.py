"""Core request types shared by traces, policies, the simulator and the live hook.

``Request`` is one trace record. ``QueuedRequest`` is the read-only snapshot a policy sees for one
waiting request at the start of one scheduling step (DESIGN.md, "Core types").
"""

from __future__ import annotations

from typing import Any, NamedTuple

from fairsim.record import MISSING, field, record


@record(frozen=True, slots=True)
class Request:
    """One request of a trace.

    Attributes:
        request_id: Unique id within the trace.
        arrival_time: Arrival time in seconds from the start of the trace (>= 0).
        prompt_len: Prompt length in tokens (>= 1).
        block_hashes: Content identity of each *full* hash block of the prompt, in order. Two
            requests share a prefix of ``j`` hash blocks iff their first ``j`` entries are equal
            (Mooncake ``hash_ids`` are prefix hashes). A trailing partial block carries no hash and
            is never cacheable.
        hash_block_size: Tokens per entry of ``block_hashes`` (512 for Mooncake traces).
        output_len: Output tokens (>= 1). The default prefill-only engine produces one token.
        labels: Free-form labels used only by metrics (``klass`` such as "hit"/"miss"/"flood",
            ``doc_id``, ...). Never read by policies or the engine.
        session_id: The session (conversation, agent run) this request is a turn of; ``None`` for
            an independent request. Used by closed-loop replay and by session-aware policies.
        after: ``request_id`` of the request this one waits for in closed-loop replay (the
            previous turn of its session, or the parent turn that spawned a sub-agent); ``None``
            for a session's first turn or an independent request. Several requests may follow the
            same one (sub-agents run beside their parent).
        delay_s: Closed loop only: seconds after ``after`` *finishes* at which this request is
            sent (the recorded think/tool time, or a sub-agent's spawn offset). Open-loop replay
            ignores it and uses ``arrival_time``.
        segments: Optional exact token-level prefix identity as ``(content_id, token_length)``
            spans in prompt order (RAGPulse chunks). Two requests share their first ``t`` tokens
            iff their span sequences agree on those ``t`` tokens (same ids at the same offsets).
            Tokens past the spans' sum are unique to the request. When set, engine block keys are
            built from the spans at any block size (``fairsim.sim.keys``), exactly;
            ``block_hashes`` then holds the same identity at ``hash_block_size`` for consumers
            that only read hashes.

    Raises:
        ValueError: On a non-positive length, a negative arrival time, or more full hash blocks
            than the prompt holds.
    """

    request_id: str
    arrival_time: float
    prompt_len: int
    block_hashes: tuple[int, ...] = ()
    hash_block_size: int = 512
    output_len: int = 1
    labels: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    session_id: str | None = None
    after: str | None = None
    delay_s: float = 0.0
    segments: tuple[tuple[int, int], ...] = ()

    def __init__(self, request_id: str, arrival_time: float, prompt_len: int, block_hashes: tuple[int, ...] = (),
                 hash_block_size: int = 512, output_len: int = 1, labels: dict[str, Any] = MISSING,
                 session_id: str | None = None, after: str | None = None, delay_s: float = 0.0,
                 segments: tuple[tuple[int, int], ...] = ()) -> None:
        # Written out, as the dataclass decorator would generate it (the fields above, in order;
        # ``labels`` a new dict when not given): readers build one request per record, and
        # ``record``'s generic ``__init__`` takes twice as long (tests/test_record.py compares it).
        set_field = object.__setattr__
        set_field(self, "request_id", request_id)
        set_field(self, "arrival_time", arrival_time)
        set_field(self, "prompt_len", prompt_len)
        set_field(self, "block_hashes", block_hashes)
        set_field(self, "hash_block_size", hash_block_size)
        set_field(self, "output_len", output_len)
        set_field(self, "labels", {} if labels is MISSING else labels)
        set_field(self, "session_id", session_id)
        set_field(self, "after", after)
        set_field(self, "delay_s", delay_s)
        set_field(self, "segments", segments)
        self.__post_init__()

    def __post_init__(self) -> None:
        if self.prompt_len < 1:
            raise ValueError(f"request {self.request_id!r}: prompt_len={self.prompt_len}, need >= 1")
        if self.output_len < 1:
            raise ValueError(f"request {self.request_id!r}: output_len={self.output_len}, need >= 1")
        if self.arrival_time < 0:
            raise ValueError(
                f"request {self.request_id!r}: arrival_time={self.arrival_time}, need >= 0 s"
            )
        if not self.delay_s >= 0:  # also refuses NaN
            raise ValueError(f"request {self.request_id!r}: delay_s={self.delay_s}, need >= 0 s")
        if self.after is not None and self.after == self.request_id:
            raise ValueError(f"request {self.request_id!r}: 'after' names the request itself")
        if self.hash_block_size < 1:
            raise ValueError(f"request {self.request_id!r}: hash_block_size must be >= 1")
        if len(self.block_hashes) * self.hash_block_size > self.prompt_len:
            raise ValueError(
                f"request {self.request_id!r}: {len(self.block_hashes)} full hash blocks of "
                f"{self.hash_block_size} tokens exceed prompt_len={self.prompt_len}"
            )
        if self.segments:
            if any(n < 1 for _, n in self.segments):
                raise ValueError(f"request {self.request_id!r}: a segment has length < 1 token")
            if sum(n for _, n in self.segments) > self.prompt_len:
                raise ValueError(
                    f"request {self.request_id!r}: segments hold "
                    f"{sum(n for _, n in self.segments)} tokens, more than prompt_len={self.prompt_len}"
                )


class QueuedRequest(NamedTuple):
    """Snapshot of one waiting request, as a policy sees it at the start of a step.

    Immutable (a policy cannot change engine state, STYLE.md 2.8). Built fresh every step.

    Attributes:
        request_id: Request id.
        arrival_time: Arrival time (s), on the same clock as the ``now`` passed to ``order()``:
            when the request joined the waiting queue (in closed-loop replay, its release time:
            the finish of the turn it follows plus its think time).
        prompt_len: ``L``, prompt tokens.
        cached_len: ``h``, prompt tokens that would hit the prefix cache now (leading full blocks,
            capped at ``L - 1``; vLLM ``KVCacheManager.get_computed_blocks``).
        uncached_len: ``c = max(1, L - h - num_computed_tokens)``, tokens still to compute.
        num_computed_tokens: Tokens already computed (0 unless the request was preempted and kept
            its progress; vLLM resets it on preemption, so 0 in practice).
        handle: Back-reference for the engine that built the snapshot. Policies must not use it.
        block_keys: Content identity of each full KV block of the prompt, in order (equal
            leading keys = shared prefix). Read-only; ``()`` when the engine does not provide
            them. Used by LPM's optional SGLang in-batch de-duplication.
        block_size: Tokens per entry of ``block_keys`` (0 when not provided).
        client: The fairness class of the request for the per-client policies (``drr``,
            ``drr-dynamo``, ``vtc``, ``dlpm``): the trace's ``tenant`` label, else its
            ``session_id``, else its ``doc_id`` label, else ``None`` (the request is its own class). Filled by the engine and the
            live hook with ``fairsim.policies.clients``; see docs/POLICIES-more.md.
        arrival_prefill_tokens: The engine's prefill-token counter (policy contract rule 5,
            ``fairsim/policies/base.py``) when the request joined the waiting queue: prefill
            tokens computed in all steps scheduled before then. Fixed per request. SGLang's
            ``Req.arrival_processed_tokens`` (read by ``hrrn``).
        output_len: Output tokens the request asks for (SGLang's ``max_new_tokens``, read by
            ``lof``): the trace's ``output_len`` in the simulator (both modes; 1 when the trace
            has no output length), vLLM's ``Request.max_tokens`` in the live hook.
    """

    request_id: str
    arrival_time: float
    prompt_len: int
    cached_len: int
    uncached_len: int
    num_computed_tokens: int = 0
    handle: Any = None
    block_keys: tuple[Any, ...] = ()
    block_size: int = 0
    client: Any = None
    arrival_prefill_tokens: int = 0
    output_len: int = 1
