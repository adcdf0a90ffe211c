"""The model's context limit: requests whose prompt does not fit ``max_model_len``.

vLLM rejects a prompt of ``max_model_len`` tokens or more when it is submitted (``_validate_prompt_len``
in ``vllm/v1/engine/input_processor.py``: longer is refused, and exactly as long leaves no room for
an output token). fairsim does the same before simulating: an error naming the request's source
line, or, with ``skip_long``, the request is dropped and counted.

A request that fits decodes until its prompt plus output reach ``max_model_len`` at most: vLLM v1
then finishes it as length-capped (``check_stop`` in ``vllm/v1/core/sched/utils.py``:
``num_tokens >= max_model_len``), whatever output length was asked for. ``cap_outputs`` applies
that limit to the trace's ``output_length`` before a colocated simulation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from operator import attrgetter

from fairsim.errors import PromptTooLongError, record_where
from fairsim.record import replace
from fairsim.types import Request

_prompt_len = attrgetter("prompt_len")

LINE_LABEL = "_line"
"""Optional label naming a request's 1-based line in its file, used where no ``Trace.locations``
is given (underscore labels are not written to the per-request table). The format readers record
locations in ``Trace.locations`` instead, so labels stay what the trace says."""


def _where(request: Request, source: str, locations: Mapping[str, int | str] | None = None,
           prompt_field: str = "input_length") -> str:
    line = (locations or {}).get(request.request_id, request.labels.get(LINE_LABEL))
    if isinstance(line, int) and not isinstance(line, bool):
        return f"{record_where(source, line)}: field {prompt_field!r}"
    if isinstance(line, str) and line:  # a JSON path (session documents)
        return f"{record_where(source, line)}: prompt length"
    return f"{source}: request {request.request_id!r}"


def drop_too_long(requests: Sequence[Request], max_model_len: int | None, source: str,
                  skip_long: bool = False, limit_name: str = "max_model_len",
                  locations: Mapping[str, int | str] | None = None,
                  prompt_field: str = "input_length") -> tuple[list[Request], list[Request]]:
    """Split ``requests`` into those vLLM accepts and those whose prompt is too long.

    Args:
        requests: The requests to submit.
        max_model_len: The context limit, tokens; None = no limit known (nothing is dropped).
        source: The trace file (or generator) for messages.
        skip_long: Drop too-long requests instead of raising.
        limit_name: How to name the limit in the message (e.g. "max_model_len 131072 of profile X").
        locations: ``Trace.locations`` (request id -> line or JSON path), to name the source.
        prompt_field: The file's name of the prompt length (``input_length``; Azure's
            ``ContextTokens``: ``fairsim.traces.formats.prompt_field``).

    Returns:
        ``(kept, dropped)``, both in the input order.

    Raises:
        PromptTooLongError: The first too-long request, ``FILE:LINE: field 'input_length': ...``,
            unless ``skip_long``.
    """
    if max_model_len is None or not requests or max(map(_prompt_len, requests)) < max_model_len:
        return list(requests), []  # all fit (most traces): one pass in C, no Python frame per request
    kept: list[Request] = []
    dropped: list[Request] = []
    for r in requests:
        if r.prompt_len < max_model_len:
            kept.append(r)
            continue
        if not skip_long:
            size = "" if f"{max_model_len:,}" in limit_name else f"{max_model_len:,} tokens; "  # not twice
            where = _where(r, source, locations, prompt_field)
            raise PromptTooLongError(
                f"{where}: prompt of {r.prompt_len:,} tokens does not fit {limit_name} "
                f"({size}vLLM rejects a prompt of max_model_len tokens or more); "
                f"--skip-long drops such requests and counts them")
        dropped.append(r)
    return kept, dropped


def cap_outputs(requests: Sequence[Request], max_model_len: int | None) -> tuple[list[Request], list[Request]]:
    """The requests with each output length capped at ``max_model_len - prompt_len`` tokens (vLLM
    v1 stops a request once prompt + output tokens reach ``max_model_len``: module docstring).

    Args:
        requests: Requests whose prompts fit (``prompt_len < max_model_len``: ``drop_too_long``).
        max_model_len: The context limit, tokens; None = no limit known (nothing is capped).

    Returns:
        ``(requests, capped)``: all requests in the input order, capped ones replaced, and the
        originals of those capped.
    """
    if max_model_len is None:
        return list(requests), []
    out: list[Request] = []
    capped: list[Request] = []
    for r in requests:
        room = max_model_len - r.prompt_len
        if r.output_len > room >= 1:
            capped.append(r)
            r = replace(r, output_len=room)
        out.append(r)
    return out, capped
