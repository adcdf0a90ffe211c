"""Compatibility import: the Mooncake reader lives in ``fairsim.traces.formats.mooncake``."""

from __future__ import annotations

from pathlib import Path

from fairsim.traces.formats.mooncake import DEFAULT_BLOCK as MOONCAKE_BLOCK_TOKENS
from fairsim.traces.formats.mooncake import read
from fairsim.traces.trace import Trace


def load_mooncake(path: str | Path, *, skip_bad: bool = False, hash_block_size: int | None = None) -> Trace:
    """Read a Mooncake JSONL trace (see ``fairsim.traces.formats.mooncake.read``)."""
    return read(path, skip_bad=skip_bad, hash_block_size=hash_block_size)


__all__ = ["MOONCAKE_BLOCK_TOKENS", "load_mooncake"]
