"""Step times from AIConfigurator's measured vLLM kernel database (``aiconfigurator-core``).

``aiconfigurator-core`` (NVIDIA, Apache-2.0, PyPI; ``pip install fairsim[profiles]``) ships kernel
timings (GEMM, context and generation attention, all-reduce) measured inside vLLM on each GPU
system at one or more vLLM versions, and an SDK that composes a model's step from them. This
module asks the SDK (``aiconfigurator_core.sdk.engine.EngineHandle``) for each step of the grid:

- a prefill step of ``r`` requests, ``n`` new tokens each on ``k`` cached:
  ``predict_prefill_latency(bs=r, isl=k + n, prefix=k)`` (``prefix`` = the cached part of ``isl``);
- a decode step of ``r`` sequences at context ``c``: ``predict_decode_latency(bs=r, isl=c, osl=2)``
  (``osl=2`` is one generated step: the SDK sums ``osl - 1`` steps, checked in the tests).

The SDK returns milliseconds of GPU work; it adds no engine overhead per step (its vLLM backend
adds a CPU dispatch term of 0.8 ms x layers to each request's TTFT instead, ``VLLMBackend.
_prefill_dispatch_overhead_ms``, which a step model has no place for: recorded in the metadata,
not added). Mixed prefill + decode steps are not asked (the SDK's mixed step takes one ``isl`` for
both parts), so the AIConfigurator grid has no ``mixed`` region.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from calibration.grid import StepPoint
from calibration.measure import Grid

BACKEND = "vllm"

#: The grid asked of the database: up to 64k cached tokens, up to 256 decodes at 32k context.
DEFAULT_GRID = Grid(new_tokens=(1, 16, 64, 256, 512, 1024, 2048), context_tokens=(0, 1024, 4096, 16384, 65536),
                    requests_per_step=(1, 2, 4, 8), idle_lengths=(), decodes=(1, 8, 32, 64, 128, 256),
                    decode_contexts=(512, 2048, 8192, 32768), mixed_new_tokens=(0,))


def _quiet() -> None:
    """The SDK logs a line per fallback table it loads; only its errors matter here."""
    logging.getLogger("aiconfigurator_core").setLevel(logging.ERROR)


def version() -> str:
    """The installed aiconfigurator-core version."""
    from importlib.metadata import version as dist_version

    return dist_version("aiconfigurator-core")


def databases() -> dict[str, list[str]]:
    """``{system: [vLLM versions]}`` the installed package can be asked (its queryable slots)."""
    from aiconfigurator_core.sdk import perf_database

    _quiet()
    return {system: list(backends[BACKEND]) for system, backends in sorted(perf_database.get_supported_databases().items())
            if backends.get(BACKEND)}


def models() -> list[str]:
    """Model ids whose config ships with the package (no download), e.g. ``meta-llama/Meta-Llama-3.1-8B``."""
    folder = resources.files("aiconfigurator_core") / "model_configs"
    names = [p.name for p in folder.iterdir() if p.name.endswith("_config.json")
             and not p.name.endswith("_hf_quant_config.json")]
    return sorted(n[: -len("_config.json")].replace("--", "/", 1) for n in names)


def check_request(system: str, vllm_version: str | None, model: str) -> str:
    """The literal vLLM version for ``system``; refuse what the database lacks.

    Args:
        system: AIConfigurator system name (``h200_sxm``, ``a100_sxm``, ``l40s``, ...).
        vllm_version: A version the system has, or None for its newest (``current`` slot).
        model: A model id from ``models()``.

    Raises:
        ValueError: An unknown system, version or model; the message names the option and the
            ones the installed database has.
    """
    have = databases()
    if system not in have:
        listing = ", ".join(f"{s} ({'/'.join(v)})" for s, v in have.items())
        raise ValueError(f"--system {system}: aiconfigurator-core {version()} has no vLLM database for it; "
                         f"it has: {listing}")
    if vllm_version is not None and vllm_version not in have[system]:
        raise ValueError(f"--vllm-version {vllm_version}: aiconfigurator-core {version()} has vLLM "
                         f"{', '.join(have[system])} for {system}")
    known = models()
    if model not in known:
        raise ValueError(f"--model {model}: no config for it in aiconfigurator-core {version()} (no download "
                         f"here); it has: {', '.join(known)}")
    if vllm_version is None:
        from aiconfigurator_core.sdk import perf_database

        return str(perf_database.resolve_query_version(system, BACKEND, "current"))
    return vllm_version


@dataclass
class AicSource:
    """One compiled AIConfigurator engine (system, vLLM version, model, TP); times in seconds.

    Raises (on construction):
        ValueError: What ``check_request`` refuses, or a TP the SDK cannot build for this model.
    """

    system: str
    vllm_version: str | None
    model: str
    tp: int = 1
    handle: Any = field(init=False, repr=False)

    def __post_init__(self) -> None:
        from aiconfigurator_core.sdk.engine import EngineHandle

        _quiet()
        self.vllm_version = check_request(self.system, self.vllm_version, self.model)
        if self.tp < 1:
            raise ValueError(f"--tp {self.tp}: need >= 1")
        try:
            self.handle = EngineHandle.compile(self.model, self.system, BACKEND, backend_version=self.vllm_version,
                                               tp_size=self.tp)
        except (ValueError, RuntimeError, KeyError, AssertionError) as exc:  # (the SDK asserts, e.g. heads % tp)
            raise ValueError(f"aiconfigurator-core cannot build {self.model} at --tp {self.tp} on {self.system} "
                             f"vLLM {self.vllm_version}: {exc}") from exc

    def step_seconds(self, point: StepPoint) -> float:
        """Time of one grid step, seconds (see the module docstring for the SDK calls)."""
        r = len(point.new_tokens)
        if any(point.decoding):
            if not all(point.decoding) or len(set(point.context_tokens)) != 1:
                raise ValueError(f"AIConfigurator source: a decode step needs equal decodes only, got {point}")
            return self.handle.predict_decode_latency(r, point.context_tokens[0], 2) / 1e3
        n, k = point.new_tokens[0], point.context_tokens[0]
        if set(point.new_tokens) != {n} or set(point.context_tokens) != {k}:
            raise ValueError(f"AIConfigurator source: a prefill step needs equal requests, got {point}")
        return self.handle.predict_prefill_latency(r, k + n, k) / 1e3

    def idle_seconds(self, length: int, budget: int) -> float:
        """``T_idle``: a cold ``length``-token prompt alone, one ``budget``-token chunk per step (s)."""
        total, done = 0.0, 0
        while done < length:
            n = min(budget, length - done)
            total += self.handle.predict_prefill_latency(1, done + n, done) / 1e3
            done += n
        return total

    def metadata(self) -> dict[str, Any]:
        """Provenance for the profile."""
        return {
            "label": "built from AIConfigurator's measured vLLM kernel database (fairsim profile build "
                     "--from aiconfigurator); kernel times composed by its SDK, not a vLLM engine run",
            "source": "aiconfigurator",
            "aiconfigurator_core_version": version(),
            "aiconfigurator_system": self.system,
            "vllm_version_of_database": self.vllm_version,
            "model": self.model,
            "tensor_parallel": self.tp,
            "engine": "vLLM (kernel database)",
            "sdk_calls": "prefill: EngineHandle.predict_prefill_latency(bs=r, isl=k+n, prefix=k); decode: "
                         "predict_decode_latency(bs=r, isl=c, osl=2)",
            "not_included": "engine per-step CPU work; AIConfigurator's vLLM backend adds 0.8 ms x layers to each "
                            "request's TTFT (sdk/backends/vllm_backend.py _prefill_dispatch_overhead_ms), not added here",
        }
