"""Real-trace scenarios: the public traces in ``../shared/data/traces/`` at a chosen load.

Files (see that folder's README.md for sources, licences and statistics):

- Mooncake (kvcache-ai/Mooncake ``FAST25-release/traces``): ``conversation_trace.jsonl`` and
  ``synthetic_trace.jsonl``, with 512-token prefix hashes: loaded as they are.
- Azure LLM inference 2023 (Splitwise, Patel et al., ISCA 2024; CC-BY-4.0):
  ``AzureLLMInferenceTrace_code.csv`` and ``AzureLLMInferenceTrace_conv.csv``: timestamps and token
  counts only, **no prefix identity**. We do not invent any: every Azure request has no hash
  blocks, so it is a cache miss under every policy. These scenarios test the no-reuse regime,
  where cache-aware orderings must not do harm (with ``h = 0`` LPM is FCFS and Fairway's Fast lane
  orders by ``wait / SLO``).

The folder is found at ``$FAIRSIM_TRACES_DIR`` if set, else ``<repo root>/../shared/data/traces``
(the repo root is the folder holding the ``fairsim`` package).
"""

from __future__ import annotations

import os
from pathlib import Path

from fairsim.costmodel import Profile
from fairsim.traces.formats import azure
from fairsim.traces.mooncake import load_mooncake
from fairsim.traces.shaping import offered_load, scale_time, window
from fairsim.traces.trace import Trace
from fairsim.types import Request

REAL_TRACES = {
    "mooncake-conversation": "conversation_trace.jsonl",
    "mooncake-synthetic": "synthetic_trace.jsonl",
    "azure-code": "AzureLLMInferenceTrace_code.csv",
    "azure-conv": "AzureLLMInferenceTrace_conv.csv",
}
"""Scenario name -> file name in the traces folder."""


def traces_dir() -> Path:
    """The real-traces folder (see the module docstring).

    Raises:
        FileNotFoundError: The folder does not exist; the message says how to point to it.
    """
    env = os.environ.get("FAIRSIM_TRACES_DIR")
    path = Path(env) if env else Path(__file__).resolve().parents[2].parent / "shared" / "data" / "traces"
    if not path.is_dir():
        raise FileNotFoundError(f"real traces folder {path} not found; set FAIRSIM_TRACES_DIR to "
                                "the folder holding conversation_trace.jsonl etc.")
    return path


def load_azure_csv(path: str | Path, max_requests: int | None = None) -> Trace:
    """Read an Azure 2023 CSV (``TIMESTAMP,ContextTokens,GeneratedTokens``); see
    ``fairsim.traces.formats.azure.read``. Arrivals are rebased to 0 s; no request has hash blocks.

    Raises:
        TraceFormatError: A missing column or a bad row, naming file, line and field.
    """
    return azure.read(path, max_requests=max_requests)


def real_scenario(name: str, profile: Profile, load: float, start_s: float = 0.0,
                  max_requests: int | None = 600, max_prompt_tokens: int | None = None) -> list[Request]:
    """A window of a real trace, time-scaled to an offered load.

    Args:
        name: A key of ``REAL_TRACES``.
        profile: Cost model whose cold capacity defines load 1.0.
        load: Target offered load after ideal prefix reuse (``OfferedLoad.ideal_load``; equal to the
            plain load for the Azure traces), e.g. 0.8.
        start_s: Window start in trace seconds.
        max_requests: Keep the first N requests of the window.
        max_prompt_tokens: Drop longer prompts (None keeps all).

    Returns:
        Requests rebased to 0 s with labels ``trace``; arrival times scaled so that
        ``fairsim.traces.shaping.offered_load(requests).ideal_load == load``. That is the load the
        paper's experiments were scaled to (tokens/s over the cold idle-prefill capacity), kept so
        that the published E2/E5 figures reproduce; the CLI's budget-aware figure
        (``fairsim.traces.offered``) differs from it by up to 3 % on these traces.

    Raises:
        ValueError: Unknown name, ``load <= 0``, or no request left.
        FileNotFoundError: The traces folder or file is missing.
    """
    if name not in REAL_TRACES:
        raise ValueError(f"unknown real trace {name!r}; known: {', '.join(REAL_TRACES)}")
    if not load > 0:
        raise ValueError(f"load={load}: need > 0")
    path = traces_dir() / REAL_TRACES[name]
    if path.suffix == ".csv":
        limit = None if max_requests is None or start_s else max_requests
        requests = list(load_azure_csv(path, limit).requests)
    else:
        requests = list(load_mooncake(path).requests)
    requests = window(requests, start_s, None, None)
    if max_prompt_tokens is not None:
        requests = [r for r in requests if r.prompt_len <= max_prompt_tokens]
    requests = requests[:max_requests] if max_requests is not None else requests
    if len(requests) < 2:
        raise ValueError(f"{name}: {len(requests)} requests left after windowing; widen the window")
    t0 = requests[0].arrival_time
    requests = [Request(r.request_id, r.arrival_time - t0, r.prompt_len, r.block_hashes,
                        r.hash_block_size, r.output_len, {**r.labels, "trace": name})
                for r in requests]
    current = offered_load(requests, profile).ideal_load
    return scale_time(requests, current / load)
