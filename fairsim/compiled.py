"""Where fairsim's optional compiled loops are loaded: one switch for all of them.

Several hot loops have a typed Cython twin built at install (``setup.py``; each optional, so an
install without a C compiler still works): the block pool, the watcher map, the Fast lane, the
Fairway family's merge of its two lanes, the credit orders' loops, fairway-deadline's due blocks and bookkeeping, the engine's per-request states and request-table read, the offered load, the Mooncake
and Azure readers' plain rows, the Bailian reader's re-chained ids. Each module that has one loads
it here. The Python code is the reference and each twin gives its results to the bit (a test per
twin compares them). ``FAIRSIM_PURE_PYTHON=1`` runs the references everywhere.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

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
