"""The request table's column for each trace label: its own name, unless a run writes that name.

A trace's extra fields become labels (``Request.labels``) and each label a column of the request
table (docs/commands.md). A label named like a column the run writes itself (``ttft_s``: a
production trace may carry its measured TTFT) would replace the simulated values, so it is
written as ``trace_NAME`` instead (``trace_trace_NAME`` where that is taken too), in every mode,
so that a column's name does not depend on the mode.
"""

from __future__ import annotations

from collections.abc import Iterable

#: The columns of a request table that fairsim writes in some mode: the engine's
#: (``Engine._request_table``), a colocated run's decode columns (``decode_request_columns``), a
#: fleet's (``fleet.FLEET_REQUEST_COLUMNS``), a disaggregated run's (``DisaggregatedFleet.
#: _requests_table``), ``accept``'s ``scored`` and ``sweep``'s run columns (``tests/
#: test_label_columns.py`` checks each mode's table against it). Not ``window``: the generated
#: scenarios' own label (calm, burst, spike), which the figures and the sweep notebook read.
RESULT_REQUEST_COLUMNS = frozenset({
    "request_id", "arrival_s", "prompt_tokens", "cached_tokens", "first_scheduled_s", "first_token_s",
    "ttft_s", "finish_s", "queue_delay_s", "first_scheduled_step", "finish_step", "preemptions",
    "released_s", "session_id", "after",
    "output_tokens", "e2e_s", "tpot_s", "discarded_tokens", "resume_cached_tokens",
    "instance", "router_cached_tokens",
    "decode_instance", "prefill_done_s", "kv_alloc_s", "held_s", "decode_held", "transfer_tokens",
    "transfer_s", "kv_ready_s", "decode_cached_tokens", "decode_preemptions",
    "policy", "scored",
    "run_id", "scenario", "seed", "params", "engine", "kv_blocks", "block_size",
})

PREFIX = "trace_"


def label_columns(keys: Iterable[str]) -> list[tuple[str, str]]:
    """``(label, column)`` for each label key, in the order given: the column is the key, or
    ``PREFIX`` + it (repeated) where the key is a result column or another label's column."""
    keys = list(keys)
    taken = set(RESULT_REQUEST_COLUMNS) | set(keys)
    out = []
    for key in keys:
        column = key
        if key in RESULT_REQUEST_COLUMNS:
            column = PREFIX + key
            while column in taken:
                column = PREFIX + column
            taken.add(column)
        out.append((key, column))
    return out
