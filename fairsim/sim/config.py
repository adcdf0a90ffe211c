"""Engine configuration (frozen; validated on construction)."""

from __future__ import annotations


from fairsim.record import record

MAX_STEP_TOKENS = 2**31 - 1
"""Most tokens of one step, and so the largest ``budget_tokens`` and ``max_num_seqs`` (tokens;
requests): vLLM's model runner keeps a step's token offsets in int32 (``query_start_loc``,
``vllm/v1/worker/gpu_model_runner.py``), so no vLLM step can schedule more. vLLM's config
validation itself sets no upper bound."""

MODES = ("prefill-only", "colocated")
"""Engine modes: ``prefill-only`` (one output token per request, the paper's setting; default) and
``colocated`` (prefill and decode share each step's budget until ``output_len`` tokens, vLLM's usual
deployment; DESIGN.md "Colocated mode")."""


@record(frozen=True, slots=True)
class EngineConfig:
    """Settings of the simulated chunked-prefill engine (vLLM v1 names where they exist).

    Raises:
        ValueError: On a value out of range; the message quotes it and says what to change.
    """

    budget_tokens: int = 2048
    """Step token budget, vLLM ``max_num_batched_tokens`` (tokens per step, 1..``MAX_STEP_TOKENS``)."""

    max_num_seqs: int = 256
    """Most requests running at once, vLLM ``max_num_seqs`` (1..``MAX_STEP_TOKENS``; the commands
    also hold it to ``budget_tokens`` at most, as vLLM does: ``check_vllm_scheduler``)."""

    block_size: int | None = None
    """Tokens per KV block. ``None`` = the trace's hash block size (512 for Mooncake). Must divide
    the trace's hash block size or be a multiple of it."""

    kv_blocks: int | None = None
    """KV cache capacity in blocks. Mutually exclusive with ``kv_tokens`` and ``kv_fraction``."""

    kv_tokens: int | None = None
    """KV cache capacity in tokens; the engine gets ``floor(kv_tokens / block_size)`` blocks, so a
    change of ``block_size`` keeps the capacity. The CLI fills it from the profile's
    ``kv_capacity`` (``fairsim.sim.capacity.with_profile_capacity``) when no size is given."""

    kv_fraction: float | None = None
    """KV cache capacity as a fraction (> 0) of the trace's reusable content: distinct blocks that
    occur in two or more requests. The paper sizes the cache at a quarter to a third of it.
    Used when ``kv_blocks`` and ``kv_tokens`` are None. If all three are None: 0.3, raised if
    needed to the blocks of the longest prompt (an explicit size that is too small is an error
    instead)."""

    mode: str = "prefill-only"
    """``prefill-only`` (a request finishes with its first token) or ``colocated`` (it decodes to
    ``output_len`` tokens on the same engine; see ``MODES``)."""

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode={self.mode!r}: choose one of {', '.join(MODES)}")
        if not 1 <= self.budget_tokens <= MAX_STEP_TOKENS:
            raise ValueError(f"budget_tokens={self.budget_tokens}: need >= 1 token per step" if self.budget_tokens < 1
                             else f"budget_tokens={self.budget_tokens}: need at most {MAX_STEP_TOKENS} tokens per "
                                  f"step (2^31 - 1: vLLM counts a step's tokens in int32)")
        if not 1 <= self.max_num_seqs <= MAX_STEP_TOKENS:
            raise ValueError(f"max_num_seqs={self.max_num_seqs}: need >= 1" if self.max_num_seqs < 1
                             else f"max_num_seqs={self.max_num_seqs}: need at most {MAX_STEP_TOKENS} (2^31 - 1: "
                                  f"vLLM counts a step's tokens, one at least per request, in int32)")
        if self.block_size is not None and self.block_size < 1:
            raise ValueError(f"block_size={self.block_size}: need >= 1 token")
        given = [k for k in ("kv_blocks", "kv_tokens", "kv_fraction") if getattr(self, k) is not None]
        if len(given) > 1:
            raise ValueError(f"give one of kv_blocks, kv_tokens, kv_fraction, not {' and '.join(given)}")
        if self.kv_tokens is not None and self.kv_tokens < 1:
            raise ValueError(f"kv_tokens={self.kv_tokens}: need >= 1 token")
        if self.kv_blocks is not None and self.kv_blocks < 1:
            raise ValueError(f"kv_blocks={self.kv_blocks}: need >= 1 block")
        if self.kv_fraction is not None and not 0 < self.kv_fraction < float("inf"):
            raise ValueError(f"kv_fraction={self.kv_fraction}: need a finite fraction > 0")


def check_vllm_scheduler(budget_tokens: int, max_num_seqs: int) -> None:
    """vLLM's own rule for the two scheduler limits: ``max_num_seqs <= max_num_batched_tokens``
    (``SchedulerConfig.verify_max_model_len``, ``vllm/config/scheduler.py``: every running request
    gets at least one token of a step). The commands apply it to what their options and sweep
    specs give; the simulator itself runs either way (a step then serves at most
    ``budget_tokens`` requests). vLLM's other checks there do not apply to this engine: the
    budget below ``max_model_len`` is refused only without chunked prefill, and a budget above
    ``max_num_seqs x max_model_len`` is only warned about.

    Raises:
        ValueError: ``max_num_seqs`` above ``budget_tokens``, naming both fields (``field=value``).
    """
    if max_num_seqs > budget_tokens:
        raise ValueError(f"max_num_seqs={max_num_seqs} is above budget_tokens={budget_tokens}: vLLM requires "
                         f"max_num_seqs <= max_num_batched_tokens, each running request taking a token of the "
                         f"step (vllm/config/scheduler.py)")
