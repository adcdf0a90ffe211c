"""The result tables of one simulation."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from fairsim.record import field, record

if TYPE_CHECKING:
    import pandas as pd


class Columns:
    """A result table as named columns of equal length, before (or without) pandas.

    The engine builds its tables as columns; ``pandas`` is imported only when a caller asks for
    a DataFrame (``to_pandas``, ``SimResult.requests``), so a ``fairsim run`` that writes no
    tables starts without it (start-up time). ``table[name]`` is the column as a numpy array
    (converted once, then cached); ``len(table)`` is the number of rows; ``table.columns`` is
    ``name -> list of values`` in column order.

    A table made ``from_log`` (the engine's step table) builds a column when it is first read:
    a ``fairsim run`` reads two of the step table's twelve columns (its summary's evictions and
    preemptions), and building all twelve over 67,659 steps took 20 ms.

    Args:
        columns: ``name -> list of values``, in column order, all of one length.
    """

    def __init__(self, columns: dict[str, list[Any]]) -> None:
        self._lists = columns
        self._names = list(columns)
        self._column_of: Callable[[int], Any] | None = None  # from_log: column j as a typed array
        self._arrays: dict[str, Any] = {}
        self._rows = len(next(iter(columns.values()))) if columns else 0

    @classmethod
    def from_records(cls, rows: list[dict[str, Any]]) -> Columns:
        """From one dict per row, all with the same keys (column order: the first row's)."""
        names = list(rows[0]) if rows else []
        return cls({k: [row[k] for row in rows] for k in names})

    @classmethod
    def from_log(cls, names: Sequence[str], column: Callable[[int], Any], rows: int) -> Columns:
        """A table of ``rows`` rows whose ``names[j]`` column is ``column(j)`` (an ``array.array``
        of that length, e.g. ``fairsim.sim.steplog.StepLog.column``), asked for when first read
        and turned into a list of Python values (``tolist``: ints for integer typecodes, floats
        for ``"d"``)."""
        table = cls({})
        table._names = list(names)
        table._column_of = column
        table._rows = rows
        return table

    def _column(self, name: str) -> list[Any]:
        """The list of column ``name``, built on first use (``from_log``).

        Raises:
            KeyError: No column ``name``.
        """
        values = self._lists.get(name)
        if values is None:
            if self._column_of is None or name not in self._names:
                raise KeyError(name)
            values = self._lists[name] = self._column_of(self._names.index(name)).tolist()
        return values

    @property
    def columns(self) -> dict[str, list[Any]]:
        """``name -> list of values``, every column, in column order."""
        return {name: self._column(name) for name in self._names}

    def __len__(self) -> int:
        return self._rows

    def __contains__(self, name: object) -> bool:
        """Whether the table has column ``name`` (as ``name in frame`` for a DataFrame)."""
        return name in self._names

    def __getitem__(self, name: str) -> Any:
        arr = self._arrays.get(name)
        if arr is None:
            import numpy as np

            arr = self._arrays[name] = np.asarray(self._column(name))
        return arr

    def as_list(self, name: str) -> list[Any]:
        """Column ``name`` as a list of Python values, without numpy (``fairsim.metrics``).

        Raises:
            KeyError: No column ``name``.
        """
        values = self._column(name)
        return values if type(values) is list else values.tolist()

    def __reduce__(self) -> tuple[Any, tuple[dict[str, list[Any]]]]:
        # Pickled (a worker's result, a deepcopy) as its column lists: a ``from_log`` table's
        # column reader is the engine's compiled step log, which does not pickle.
        return (Columns, (self.columns,))

    def to_pandas(self) -> pd.DataFrame:
        """The table as a ``pandas.DataFrame`` (the same frame the column lists infer)."""
        import pandas as pd

        return pd.DataFrame(self.columns)


#: The tables a ``SimResult`` may hold as ``Columns``, read as DataFrames (built on first access).
_TABLES = ("requests", "steps", "token_gaps")


@record(frozen=True)
class SimResult:
    """Output of one simulation.

    Attributes:
        requests: One row per request: ``request_id``, ``arrival_s``, ``prompt_tokens``,
            ``cached_tokens`` (prefix hit at first admission), ``first_scheduled_s``,
            ``first_token_s``, ``ttft_s``, ``finish_s``, ``queue_delay_s`` (first scheduled minus
            release), ``first_scheduled_step``, ``finish_step``, ``preemptions``, ``session_id``,
            ``after``, ``released_s`` (when the request joined the waiting queue: ``arrival_s`` in
            open loop, predecessor's finish + think time in closed loop; TTFT and queue delay are
            measured from it), plus one column per label (``klass``, ``doc_id``, ...).
        steps: One row per engine step: ``step``, ``start_s``, ``duration_s``, ``tokens``,
            ``decode_tokens`` (of ``tokens``, one per decoding request), ``requests`` (batch size), ``waiting`` (queue length at step start), ``running`` (after
            admission), ``kv_blocks_used`` (``ref_cnt > 0``), ``kv_blocks_cached``, ``evictions``
            (blocks evicted during the step), ``preemptions`` (running requests preempted by
            the step's scheduling; a step that preempted every running request schedules
            nothing, takes no time and has no row: its preemptions are in the next row, which
            starts at the same clock).
        policy: Policy name.
        kv_blocks: KV capacity in blocks.
        block_size: Tokens per block.
        wall_time_s: Wall-clock seconds the simulation took.
        token_gaps: Colocated mode only (else ``None``): one row per inter-token gap,
            ``request_row`` (row of ``requests``) and ``itl_s`` (seconds between two consecutive
            tokens of that request, vLLM's inter-token latency); rows grouped by request in
            ``request_row`` order, each request's gaps in token order.

    In colocated mode ``requests`` also has ``output_tokens``, ``e2e_s`` (finish minus arrival),
    ``tpot_s`` (vLLM's ``(e2e - ttft) / (output_tokens - 1)``, NaN for one token),
    ``discarded_tokens`` (computed tokens dropped by preemptions) and ``resume_cached_tokens``
    (prefix hits at re-admissions); ``first_token_s`` is the end of the last prefill step and
    ``finish_s`` that of the step sampling the last token. ``steps.decode_tokens`` counts decoding
    requests (one token each) in a step.
    """

    requests: pd.DataFrame | Columns
    steps: pd.DataFrame | Columns
    policy: str
    kv_blocks: int
    block_size: int
    wall_time_s: float
    token_gaps: pd.DataFrame | Columns | None = None
    # The DataFrames built so far (``__getattribute__``): not a parameter, so ``replace`` gives a
    # new result its own (it passed the old one's, whose frames then hid the new tables).
    _frames: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __getattribute__(self, name: str) -> Any:
        # ``requests``/``steps``/``token_gaps`` read as DataFrames: the engine stores ``Columns``
        # and the frame is built (importing pandas) on first access, then kept.
        if name in _TABLES:
            frames = object.__getattribute__(self, "_frames")
            frame = frames.get(name)
            if frame is None:
                value = object.__getattribute__(self, name)
                if value is None:  # no token gaps (prefill-only)
                    return None
                frame = frames[name] = value.to_pandas() if isinstance(value, Columns) else value
            return frame
        return object.__getattribute__(self, name)

    def columns(self, name: str) -> Any:
        """Table ``name`` (``"requests"``, ``"steps"`` or ``"token_gaps"``) without pandas when
        the engine built it: a ``Columns`` (or the DataFrame if one was given; ``None`` for the
        token gaps of a prefill-only run); both support ``t[col]`` and ``len``."""
        if name not in _TABLES:
            raise ValueError(f"SimResult has tables 'requests', 'steps' and 'token_gaps', not {name!r}")
        return object.__getattribute__(self, name)
