"""Where fairsim's optional compiled loops are loaded: one switch for all of them.

Several hot loops have a typed Cython twin built at install (``setup.py``; each optional, so an
install without a C compiler still works): the block pool, the watcher map, the Fast lane, the
Fairway family's merge of its two lanes, the credit orders' loops, the kept orders' sorted list, fairway-deadline's due blocks and bookkeeping, the engine's per-request states and request-table read, the offered load, the Mooncake
and Azure readers' plain rows, the Bailian reader's re-chained ids. Each module that has one loads
it here. The Python code is the reference and each twin gives its results to the bit (a test per
twin compares them). ``FAIRSIM_PURE_PYTHON=1`` runs the references everywhere.

The modules of ``WHOLE_MODULES`` (the engine's step loop, the orders' modules) are also compiled
whole from their own source (below): the same code, which ``SourceFinder`` runs as source where
``FAIRSIM_PURE_PYTHON=1`` is set or the source changed since the build.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

#: Set to ``1`` to run the pure-Python references even where the compiled twins are built.
PURE_PYTHON_ENV = "FAIRSIM_PURE_PYTHON"


def compiled_twin(name: str) -> ModuleType | None:
    """The extension module ``name`` (e.g. ``"fairsim.traces._offered_c"``), or None where it
    was not built or ``FAIRSIM_PURE_PYTHON=1`` is set.

    Loaded by name: a ``.pyx`` named in an import statement reads, to tools that do not know
    extension modules, as an import of its package."""
    if os.environ.get(PURE_PYTHON_ENV) == "1":
        return None
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


# ---------------------------------------------------------------------------------------------
# Modules compiled whole from their own source.
#
# The engine's step loop and the orders' Python bookkeeping are compiled by Cython straight from
# their ``.py`` files (setup.py; no ``.pyx``, no type declarations): the extension runs the same
# code as the source, without the interpreter's dispatch (~10 % of a run). Python would import
# the extension in place of the source from then on, also after the source is edited, so a
# finder put first on ``sys.meta_path`` (``install_source_finder``) takes the source instead when
# ``FAIRSIM_PURE_PYTHON=1`` is set or when the source differs from the one the extension was
# built from (a stamp file beside the extension, written by setup.py).

#: The modules setup.py compiles whole (dotted name; the source is the module's ``.py``).
WHOLE_MODULES = (
    "fairsim.costmodel",
    "fairsim.metrics",
    "fairsim.traces.offered",
    "fairsim.sim.engine",
    "fairsim.sim.arrivals",
    "fairsim.sim.keys",
    "fairsim.sim.decode_fast",
    "fairsim.sim.lazy_hits",
    "fairsim.policies.incremental",
    "fairsim.policies.lpm",
    "fairsim.policies.klpm",
    "fairsim.policies.ragcache",
    "fairsim.policies.fairway",
    "fairsim.policies.fairway_deadline",
    "fairsim.policies.fast_lane",
    "fairsim.policies.fairway_carry",
    "fairsim.policies.fairway_patience",
    "fairsim.policies.deadline_fast",
    "fairsim.policies.credit",
    "fairsim.policies.credit_fast",
    "fairsim.policies.drr",
    "fairsim.policies.drr_dynamo",
    "fairsim.policies.vtc",
    "fairsim.policies.dlpm",
    "fairsim.policies.aging",
    "fairsim.policies.sglang",
    "fairsim.policies.stale",
    "fairsim.policies.preble",
    "fairsim.policies.peek",
    "fairsim.policies.peek_order",
    "fairsim.policies.eviction",
    # The trace readers' per-record checks where a format has no typed twin: a Qwen-Bailian
    # trace of 20,000 short requests reads in about 180 ms instead of 280, a Dynamo trace of
    # 10,000 requests (20,000 lines) in 1.7 s instead of 2.35. (Mooncake and CSV plain rows
    # have their own, _mooncake_c and _csv_c; a Claude Code read is mostly JSON parsing. Each
    # module compiled costs an extension's load at every start.)
    "fairsim.traces.formats._common",
    "fairsim.traces.formats.bailian",
    "fairsim.traces.formats.dynamo",
    "fairsim.traces.formats.ragpulse",
)

#: Appended to an extension's file name for its stamp: ``source_stamp`` of the source it was built from.
STAMP_SUFFIX = ".source"

_warned: set[str] = set()


def source_stamp(source: Path) -> str:
    """The stamp of ``source``'s bytes: ``"SIZE CRC32"`` (zlib is loaded at every start; hashlib
    costs 6 ms). Raises OSError where it cannot be read."""
    import zlib

    data = source.read_bytes()
    return f"{len(data)} {zlib.crc32(data):08x}"


def built_extension(source: Path) -> Path | None:
    """The extension module that Python's own import would load for ``source`` (the first of
    ``importlib.machinery.EXTENSION_SUFFIXES`` beside it) when it was built from these bytes;
    None where there is none. One that is stale (its stamp missing or from other bytes) is
    reported once per process on stderr, ``fairsim: warning: ...``, and is not used."""
    from importlib.machinery import EXTENSION_SUFFIXES

    for suffix in EXTENSION_SUFFIXES:
        ext = source.with_name(source.stem + suffix)
        if not ext.is_file():
            continue
        try:
            fresh = (Path(f"{ext}{STAMP_SUFFIX}").read_text().strip() == source_stamp(source))
        except OSError:
            fresh = False
        if fresh:
            return ext
        if str(ext) not in _warned:
            _warned.add(str(ext))
            print(f"fairsim: warning: {source} changed since {ext.name} was built from it: running the "
                  f"source (slower); `pip install -e .` rebuilds it", file=sys.stderr)
        return None
    return None


class SourceFinder:
    """A ``sys.meta_path`` finder for ``WHOLE_MODULES``: the module's source where
    ``FAIRSIM_PURE_PYTHON=1`` is set or its extension is missing or stale (``built_extension``);
    else None, and the rest of ``sys.meta_path`` imports the extension as usual."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name not in WHOLE_MODULES or not path:
            return None
        source = Path(next(iter(path))) / f"{name.rpartition('.')[2]}.py"
        if not source.is_file():
            return None
        if os.environ.get(PURE_PYTHON_ENV) != "1" and built_extension(source) is not None:
            return None
        from importlib.util import spec_from_file_location

        return spec_from_file_location(name, source)


def install_source_finder() -> None:
    """Put one ``SourceFinder`` first on ``sys.meta_path`` (``fairsim/__init__.py`` calls this
    before any of ``WHOLE_MODULES`` can be imported); a second call does nothing."""
    if not any(isinstance(f, SourceFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, SourceFinder())
