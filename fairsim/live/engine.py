"""Build a real vLLM engine for tests, replay, equivalence and calibration.

Default: the tiny Llama shipped in ``fairsim/live/tiny_llama`` with random ("dummy") weights, no
tokenizer, token-id prompts, prefix caching and chunked prefill on, in-process engine core (so the
live scheduler object is reachable at ``llm.llm_engine.engine_core.engine_core.scheduler``).
"""

from __future__ import annotations

import gc
import os
from dataclasses import dataclass, field
from typing import Any

from fairsim.live import TINY_LLAMA_DIR
from fairsim.sim.config import EngineConfig, check_vllm_scheduler

#: Environment the CPU engine needs here (VLLM.md): in-process core, 1 GiB KV space, offline;
#: vLLM's log goes to stderr so fairsim's tables and JSON on stdout stay clean; one OpenMP
#: thread bound to core 0 (CPU backend only). With vLLM's default binding (one thread per core)
#: any other busy process on a shared machine stalls every parallel region: on this project's
#: 2-core machine a 2,000-token step took ~480 ms instead of ~55 ms, and varied 2x from step to
#: step; one bound thread gave 49-66 ms. Set with ``setdefault`` before vLLM is imported, so
#: values already in the environment win (e.g. ``VLLM_CPU_OMP_THREADS_BIND=auto`` on a
#: dedicated many-core machine).
ENGINE_ENV = {
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "HF_HUB_OFFLINE": "1",
    "VLLM_LOGGING_STREAM": "ext://sys.stderr",
    "VLLM_CPU_OMP_THREADS_BIND": "0",
}


@dataclass(frozen=True, slots=True)
class LiveConfig:
    """Settings of a live engine (vLLM names where they exist).

    Raises:
        ValueError: On a value out of range (quoted in the message).
    """

    policy: str = "fcfs"
    """Registered fairsim policy name."""
    params: dict[str, Any] = field(default_factory=dict)
    """Policy parameters."""
    profile: str | None = None
    """Profile name or JSON path for policies that need ``T_idle`` (default: the shipped prior)."""
    model: str = str(TINY_LLAMA_DIR)
    """Model folder or name. The default tiny Llama needs ``load_format="dummy"``."""
    load_format: str = "dummy"
    """vLLM ``load_format``; ``"dummy"`` = random weights, nothing downloaded."""
    budget_tokens: int = 2048
    """``max_num_batched_tokens``: tokens per step (>= 1)."""
    max_num_seqs: int = 256
    """Most running requests (>= 1)."""
    block_size: int = 128
    """Tokens per KV block (CPU: a multiple of 32)."""
    kv_blocks: int | None = None
    """Usable KV blocks (vLLM's pool gets one more, the null block); None = vLLM's sizing."""
    max_model_len: int = 8192
    """Longest prompt + output, tokens; capped at ``kv_blocks * block_size``."""
    scheduler: str = "sync"
    """``"sync"`` (``PolicyScheduler``, CPU) or ``"async"`` (``AsyncPolicyScheduler``)."""
    seed: int = 0
    """vLLM seed."""
    record: str | None = None
    """Trace file the hook writes every request to (``fairsim.live.recorder``); None = none."""

    def __post_init__(self) -> None:
        if self.budget_tokens < 1 or self.max_num_seqs < 1:
            raise ValueError(f"budget_tokens={self.budget_tokens}, max_num_seqs={self.max_num_seqs}: need >= 1")
        # the simulator's bounds (fairsim.sim.config: int32 step offsets) and vLLM's own rule,
        # before an engine is built
        EngineConfig(budget_tokens=self.budget_tokens, max_num_seqs=self.max_num_seqs)
        check_vllm_scheduler(self.budget_tokens, self.max_num_seqs)
        if self.block_size < 1:
            raise ValueError(f"block_size={self.block_size}: need >= 1 (CPU: a multiple of 32)")
        if self.kv_blocks is not None and self.kv_blocks < 1:
            raise ValueError(f"kv_blocks={self.kv_blocks}: need >= 1")
        if self.scheduler not in ("sync", "async"):
            raise ValueError(f"scheduler={self.scheduler!r}: use 'sync' or 'async'")

    @property
    def scheduler_cls(self) -> str:
        """Dotted path of the hook class."""
        name = "AsyncPolicyScheduler" if self.scheduler == "async" else "PolicyScheduler"
        return f"fairsim.live.{name}"


def make_llm(config: LiveConfig = LiveConfig(), **overrides: Any) -> Any:
    """A ``vllm.LLM`` with the fairsim hook loaded by dotted path.

    Args:
        config: Engine and policy settings.
        **overrides: Extra ``vllm.LLM`` keyword arguments (win over the defaults).

    Returns:
        The ``vllm.LLM``.

    Raises:
        ValueError: From vLLM or the hook (bad policy, too small a cache, a model that cannot
            load, ...), the engine settings named (``--model``, ``--load-format``,
            ``--block-size``, ``--dtype``).
    """
    for key, value in ENGINE_ENV.items():
        os.environ.setdefault(key, value)
    from vllm import LLM

    # An engine dropped earlier in this process shuts down when the collector finalises its
    # client (vLLM's InprocClient: weakref.finalize -> EngineCore.shutdown ->
    # cleanup_dist_env_and_memory), which tears down the process-wide parallel groups - those of
    # the engine built here too, if that happens after it set them up ("pipeline model parallel
    # group is not initialized" at its first step). EngineCore.__init__ gc.freeze()s everything,
    # so such a client can wait in the permanent generation until some gc.unfreeze(). Finalise
    # every dropped engine now, before this one exists (vLLM's own shutdown unfreezes likewise).
    gc.unfreeze()
    gc.collect()

    max_model_len = config.max_model_len
    kwargs: dict[str, Any] = {}
    if config.kv_blocks is not None:
        kwargs["num_gpu_blocks_override"] = config.kv_blocks + 1  # + vLLM's null block
        max_model_len = min(max_model_len, config.kv_blocks * config.block_size)
    settings: dict[str, Any] = {"policy": config.policy, "params": dict(config.params)}
    if config.profile is not None:
        settings["profile"] = config.profile
    if config.record is not None:
        settings["record"] = config.record
    kwargs.update(
        model=config.model,
        load_format=config.load_format,
        skip_tokenizer_init=True,
        enforce_eager=True,
        gpu_memory_utilization=0.5,
        block_size=config.block_size,
        max_model_len=max_model_len,
        max_num_batched_tokens=config.budget_tokens,
        max_num_seqs=config.max_num_seqs,
        enable_prefix_caching=True,
        enable_chunked_prefill=True,
        disable_log_stats=False,
        seed=config.seed,
        scheduler_cls=config.scheduler_cls,
        additional_config={"fairsim": settings},
    )
    kwargs.update(overrides)
    try:
        return LLM(**kwargs)
    except Exception as exc:  # noqa: BLE001 - re-raised, named, below
        # vLLM's own refusal (a model folder without a config, a config it cannot read, a dtype
        # or block size it does not take) is the user's input, not a bug in fairsim: name the
        # engine settings the command's options set. The shipped tiny Llama failing with
        # anything but a ValueError/OSError is a bug, and stays one.
        if not isinstance(exc, (ValueError, OSError)) and config.model == str(TINY_LLAMA_DIR):
            raise
        shown = [f"--model {kwargs['model']}", f"--load-format {kwargs['load_format']}",
                 f"--block-size {kwargs['block_size']}"]
        if "dtype" in kwargs:
            shown.append(f"--dtype {kwargs['dtype']}")
        raise ValueError(f"vLLM could not start the engine ({', '.join(shown)}): "
                         f"{type(exc).__name__}: {exc}") from exc


def shutdown_llm(llm: Any) -> None:
    """Shut ``llm``'s engine core down now, not at garbage collection.

    vLLM calls the scheduler's ``shutdown()`` (which closes the hook's trace recorder and writes
    its sidecar) only from ``EngineCore.shutdown``; an engine that is merely dropped runs it
    whenever the collector finalises it, so a recording could still be incomplete when the
    command returns. ``InprocClient.shutdown`` (vllm/v1/engine/core_client.py, 0.32 and 0.33) is
    idempotent: a second call, or vLLM's own finaliser later, does nothing.
    """
    client = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    if client is not None:
        client.shutdown()


def live_scheduler(llm: Any) -> Any:
    """The engine's live scheduler object (in-process engine core only).

    Raises:
        RuntimeError: The engine core runs in another process
            (set ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` before building the engine).
    """
    core = getattr(llm.llm_engine.engine_core, "engine_core", None)
    if core is None:
        raise RuntimeError("the engine core is in another process; set "
                           "VLLM_ENABLE_V1_MULTIPROCESSING=0 before building the engine")
    return core.scheduler


def vllm_version() -> str:
    """Installed vLLM version string."""
    import vllm

    return str(getattr(vllm, "__version__", "unknown"))
