"""Step times from LLMServingSim's measured operator tables (third-party; RTX A6000, Llama-3.1-8B, TP1).

The tables (``../shared/data/profiles/llmservingsim-a6000-llama3.1-8b/``, MIT, README there) were
measured with PyTorch profiler hooks on a Hugging Face model and FlashAttention's varlen kernel,
not inside vLLM: they hold no engine per-step work. A step of ``r`` requests computing ``N`` new
tokens in all is composed as:

    embedding(N) + layers x [per-layer operators(N) + sum_i attention_i] + final_layernorm(N) + lm_head(r)

- ``layers.csv`` (nanoseconds, one row per operator and input size 1..2,048, no cached context):
  the per-layer operators are every row but ``embedding``, ``final_layernorm``, ``lm_head`` (once
  per step) and ``attn``; ``lm_head`` runs on one token per request (vLLM computes logits only
  for the sampled positions).
- Attention of a request with ``n`` new tokens on ``k`` cached: ``k = 0``: ``layers.csv``'s
  ``attn`` row at ``n`` (self-attention over the input); ``k > 0``: ``attention.csv``'s prefill
  median (milliseconds) at chunk ``n`` and ``kv_cache_size = n + k`` (the context including the
  chunk: its smallest value is the chunk), linear between measured ``kv_cache_size`` values. A
  decode: ``attention.csv``'s decode median at ``batch_size = r`` and ``kv_cache_size = c``,
  linear between measured sizes.
- A grid point outside the measured range (attention measured for chunks 32..1,024 on up to ~2k
  context; decodes at ``batch x context`` up to ~340k tokens) is left out, not extrapolated: the
  fit's coefficients then carry it, and the profile's metadata says so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from calibration.grid import StepPoint
from calibration.measure import Grid

TABLES = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "profiles" / "llmservingsim-a6000-llama3.1-8b"
LAYERS = 32
ONCE_PER_STEP = ("embedding", "final_layernorm", "lm_head", "attn")

#: Inside the tables' measured range (attention.csv: chunks 32..1,024, contexts to ~2k).
DEFAULT_GRID = Grid(new_tokens=(1, 32, 64, 128, 256, 512, 1024, 2048), context_tokens=(0, 256, 512, 1024),
                    requests_per_step=(1, 2, 4), idle_lengths=(), decodes=(1, 8, 32, 64, 128, 256),
                    decode_contexts=(512, 1024, 2048, 8192, 32768), mixed_new_tokens=(0, 512))


def _check_numbers(path: Path, frame: Any, columns: tuple[str, ...]) -> None:
    """Refuse a cell of ``columns`` that is not a finite number >= 0, naming the file, its line
    (the header is line 1) and the column."""
    import pandas as pd

    for col in columns:
        values = pd.to_numeric(frame[col], errors="coerce")
        bad = ~(np.isfinite(values.to_numpy(dtype=float)) & (values.to_numpy(dtype=float) >= 0))
        if bad.any():
            row = frame.index[bad][0]
            cell = frame[col].loc[row]
            got = repr(cell) if isinstance(cell, str) else "an empty cell" if pd.isna(cell) else str(cell)
            raise ValueError(f"{path}:{int(row) + 2}: field {col!r}: need a finite number >= 0, got {got}")


class OutOfRange(Exception):
    """A grid point the tables do not cover (left out of the fit)."""


class LLMServingSimSource:
    """The tables of one folder; times in seconds.

    Args:
        folder: Holds ``layers.csv`` and ``attention.csv``.

    Raises:
        ValueError: A file is missing, is not a CSV table, has no rows, lacks a column this
            reader needs, has a cell that is not a finite number >= 0 (or an ``is_prefill`` that
            is not True/False) where one is read, lacks an operator a step needs, or has an
            operator without a latency at an input size the others have (the message names the
            file, and the line and column or the operator).
    """

    def __init__(self, folder: str | Path = TABLES) -> None:
        import pandas as pd

        self.folder = Path(folder)
        frames = {}
        for name, cols in (("layers.csv", ("layer_name", "input", "latency(ns)")),
                           ("attention.csv", ("batch_size", "prefill_chunk_size", "kv_cache_size", "is_prefill",
                                              "time_stats.attn_prefill.median", "time_stats.attn_decode.median"))):
            path = self.folder / name
            if not path.is_file():
                raise ValueError(f"{path}: missing (LLMServingSim tables folder needs layers.csv and attention.csv"
                                 + ("; the default is the shared copy beside this clone: give the folder with "
                                    "--tables DIR)" if Path(folder) == TABLES else ")"))
            try:
                frame = pd.read_csv(path)
            except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError) as exc:
                raise ValueError(f"{path}: not a CSV table LLMServingSim wrote: {exc}") from None
            missing = [c for c in cols if c not in frame.columns]
            if missing:
                raise ValueError(f"{path}: no column {missing[0]!r}")
            if frame.empty:
                raise ValueError(f"{path}: no rows (a header alone); LLMServingSim's table has one row per "
                                 f"measurement")
            frames[name] = frame
        layers = frames["layers.csv"]
        _check_numbers(self.folder / "layers.csv", layers, ("input", "latency(ns)"))
        layers = layers.assign(**{c: pd.to_numeric(layers[c]) for c in ("input", "latency(ns)")})
        for op in ONCE_PER_STEP:
            if not (layers["layer_name"] == op).any():
                raise ValueError(f"{self.folder / 'layers.csv'}: no {op!r} rows in column 'layer_name' (a step "
                                 f"needs {', '.join(ONCE_PER_STEP)} and the per-layer operators)")
        if set(layers["layer_name"]) <= set(ONCE_PER_STEP):
            raise ValueError(f"{self.folder / 'layers.csv'}: no per-layer operator rows (layer names other than "
                             f"{', '.join(ONCE_PER_STEP)})")
        table = layers.pivot_table(index="input", columns="layer_name", values="latency(ns)", aggfunc="median") / 1e9
        gaps = table.isna()
        if gaps.to_numpy().any():
            op = next(c for c in table.columns if gaps[c].any())
            size = int(gaps.index[gaps[op].to_numpy()][0])
            raise ValueError(f"{self.folder / 'layers.csv'}: operator {op!r} has no row at input {size}, which "
                             f"other operators have; every operator needs a latency at every input size")
        self.max_tokens = int(table.index.max())
        per_layer = [c for c in table.columns if c not in ONCE_PER_STEP]
        self._ops = (table[per_layer].sum(axis=1) * LAYERS + table["embedding"] + table["final_layernorm"]).to_dict()
        self._lm_head = table["lm_head"].to_dict()
        self._attn_cold = table["attn"].to_dict()
        att = frames["attention.csv"]
        _check_numbers(self.folder / "attention.csv", att, ("batch_size", "prefill_chunk_size", "kv_cache_size"))
        flags = att["is_prefill"].map(lambda v: {"true": True, "false": False, "1": True, "0": False}.get(
            str(v).strip().lower()))
        if flags.isna().any():
            row = int(flags.index[flags.isna().to_numpy()][0])
            raise ValueError(f"{self.folder / 'attention.csv'}:{row + 2}: field 'is_prefill': need True or False, "
                             f"got {att['is_prefill'].iloc[row]!r}")
        att = att.assign(is_prefill=flags.astype(bool))
        _check_numbers(self.folder / "attention.csv", att[att["is_prefill"]], ("time_stats.attn_prefill.median",))
        _check_numbers(self.folder / "attention.csv", att[~att["is_prefill"]], ("time_stats.attn_decode.median",))
        # (a cell of the other role's median column is not read: NaN there is harmless)
        att = att.assign(**{c: pd.to_numeric(att[c], errors="coerce") for c in (
            "batch_size", "prefill_chunk_size", "kv_cache_size", "time_stats.attn_prefill.median",
            "time_stats.attn_decode.median")})
        pre = att[att["is_prefill"].astype(bool)]
        dec = att[~att["is_prefill"].astype(bool)]
        self._prefill = {int(n): (g["kv_cache_size"].to_numpy(float), g["time_stats.attn_prefill.median"].to_numpy(float) / 1e3)
                         for n, g in pre.groupby("prefill_chunk_size")}
        self._decode = {int(b): (g["kv_cache_size"].to_numpy(float), g["time_stats.attn_decode.median"].to_numpy(float) / 1e3)
                        for b, g in dec.groupby("batch_size")}
        for d in (self._prefill, self._decode):
            for key, (x, y) in list(d.items()):  # sorted, one value per size (median of repeats)
                xs = np.unique(x)
                d[key] = (xs, np.array([np.median(y[x == v]) for v in xs]))

    @staticmethod
    def _lookup(table: dict[int, tuple[np.ndarray, np.ndarray]], key: int, size: float) -> float:
        if key not in table:
            raise OutOfRange(f"{key} not measured")
        x, y = table[key]
        if not x[0] <= size <= x[-1]:
            raise OutOfRange(f"size {size} outside {x[0]}..{x[-1]}")
        return float(np.interp(size, x, y))

    def _attention(self, n: int, k: int, decoding: bool, decodes: int) -> float:
        if decoding:
            return self._lookup(self._decode, decodes, k)
        if k == 0:
            if n not in self._attn_cold:
                raise OutOfRange(f"{n} new tokens not measured")
            return float(self._attn_cold[n])
        return self._lookup(self._prefill, n, n + k)

    def step_seconds(self, point: StepPoint) -> float:
        """Time of one grid step, seconds.

        Raises:
            OutOfRange: The tables do not cover this point.
        """
        total = sum(point.new_tokens)
        if total > self.max_tokens:
            raise OutOfRange(f"{total} tokens > {self.max_tokens}")
        if total not in self._ops or len(point.new_tokens) not in self._lm_head:
            raise OutOfRange(f"{total} tokens or {len(point.new_tokens)} requests not measured")
        decodes = sum(point.decoding)
        attention = 0.0
        seen_decode = False
        for n, k, d in zip(point.new_tokens, point.context_tokens, point.decoding):
            if d:
                if not seen_decode:  # the decode row is the whole decode batch's attention
                    attention += self._attention(1, k, True, decodes)
                    seen_decode = True
            else:
                attention += self._attention(n, k, False, 0)
        return self._ops[total] + self._lm_head[len(point.new_tokens)] + LAYERS * attention

    def idle_seconds(self, length: int, budget: int) -> float | None:
        """``T_idle`` of a cold prompt that fits one step (s); None beyond (no measured long context)."""
        if length > min(budget, self.max_tokens):
            return None
        try:
            return self.step_seconds(StepPoint("cold prefill", (length,), (0,), (False,)))
        except OutOfRange:  # a length the tables skip: the fitted model's, as beyond them
            return None

    def metadata(self) -> dict[str, Any]:
        """Provenance for the profile."""
        return {
            "label": "THIRD-PARTY measurement: LLMServingSim's operator tables (PyTorch + FlashAttention, "
                     "not vLLM), composed into steps by fairsim; no vLLM step overhead in the tables, added "
                     "as the stated term step_overhead_s",
            "source": "llmservingsim",
            "tables": "LLMServingSim profiler/v0/perf_models/A6000/meta-llama/Llama-3.1-8B/tp1 (commit "
                      "5daddb21a545658d5150b535712d0494584b5278), MIT licence (c) 2024 CASYS Lab at KAIST; "
                      "copy in shared/data/profiles/llmservingsim-a6000-llama3.1-8b",
            "device": "NVIDIA RTX A6000",
            "model": "meta-llama/Llama-3.1-8B",
            "tensor_parallel": 1,
            "engine": "PyTorch (Hugging Face model) + FlashAttention varlen; not vLLM",
            "composition": "embedding(N) + 32 x [per-layer operators(N) + attention] + final_layernorm(N) + "
                           "lm_head(requests); calibration/llmservingsim.py",
            "range_note": "attention measured for chunks 32-1,024 on up to ~2k context, decodes up to batch x "
                          "context ~340k tokens; grid points outside are left out, so the pair slope k is "
                          "fitted on <= 2k context and extrapolated linearly beyond it",
        }
