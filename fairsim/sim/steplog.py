"""The engine's step table as it is written: one row of 12 numbers per step, no Python objects.

A step's row (``SimResult.steps``: ``STEP_COLUMNS``) was a tuple of Python numbers, about 330
bytes kept to the run's end: 660,000 steps of a ten times tiled conversation trace held 175 MiB
of the run's peak. ``StepLog`` keeps each column as a typed ``array`` (8 bytes a number), and the
compiled block pool's ``StepLog`` (``fairsim.sim._block_pool_c``, the twin the engine takes with
the compiled chunk burst) keeps the rows in one C buffer and writes a row without creating an
object. Both give the same columns (``column``); ``Engine._step_table`` reads them as
``Columns``, each built when first read (a run's summary reads 2 of the 12).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence

#: The step table's columns in row order (``SimResult.steps``), and each one's ``array``
#: typecode: the start and the duration in seconds as doubles, the step number and the counts as
#: 64-bit integers.
STEP_COLUMNS = ("step", "start_s", "duration_s", "tokens", "decode_tokens", "requests", "waiting", "running",
                "kv_blocks_used", "kv_blocks_cached", "evictions", "preemptions")
STEP_TYPECODES = "qddqqqqqqqqq"


class StepLog:
    """The rows of an engine's steps, appended in step order (the reference of the compiled twin).

    Raises:
        TypeError: ``add`` of a count that is not an integer (``array("q")`` refuses it).
    """

    def __init__(self) -> None:
        self._cols = [array(code) for code in STEP_TYPECODES]

    def __len__(self) -> int:
        return len(self._cols[0])

    def add(self, step: int, start_s: float, duration_s: float, tokens: int, decode_tokens: int, requests: int,
            waiting: int, running: int, kv_blocks_used: int, kv_blocks_cached: int, evictions: int,
            preemptions: int) -> None:
        """Append one step's row (``STEP_COLUMNS``; seconds and counts)."""
        for col, value in zip(self._cols, (step, start_s, duration_s, tokens, decode_tokens, requests, waiting,
                                           running, kv_blocks_used, kv_blocks_cached, evictions, preemptions)):
            col.append(value)

    def add_burst(self, step: int, starts_s: Sequence[float], durations: Sequence[float], budget: int,
                  num_waiting: int, num_running: int, used: Sequence[int], cached: Sequence[int],
                  evicted: Sequence[int]) -> None:
        """Append a chunk burst's rows (``Engine._chunk_burst``), one per chunk from step ``step``:
        ``budget`` tokens of one request, no decode, no preemption."""
        for i, (t, d, u, c, e) in enumerate(zip(starts_s, durations, used, cached, evicted)):
            self.add(step + i, t, d, budget, 0, 1, num_waiting, num_running, u, c, e, 0)

    def column(self, j: int) -> array:
        """Column ``j`` (``STEP_COLUMNS`` order) as a typed ``array`` (the log's own).

        Raises:
            IndexError: ``j`` not in 0..11.
        """
        if not 0 <= j < len(self._cols):
            raise IndexError(f"step column {j}: there are {len(self._cols)}")
        return self._cols[j]
