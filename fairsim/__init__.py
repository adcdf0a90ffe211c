"""fairsim: prefill scheduling policies for LLM serving with a prefix (KV) cache.

Layers (dependencies point down only; see ``../shared/design/DESIGN.md``):

- ``fairsim.cli``                 user-facing commands (``fairsim run``, ``compare``, ``bench``)
- ``fairsim.sim``                 SimPy model of a chunked-prefill engine with a vLLM-style prefix cache
- ``fairsim.policies``            pure orderings of the waiting queue (FCFS, LPM, Fairway, ...)
- ``fairsim.costmodel``           step-time model and idle prefill time ``T_idle(L)``
- ``fairsim.traces``              trace loading, generation and load shaping

Units everywhere: time in seconds (float), lengths in tokens (int).
"""

__version__ = "0.1.0"

from fairsim.compiled import install_source_finder

# Before any module that setup.py compiles whole is imported: where its source was edited since
# the build, or FAIRSIM_PURE_PYTHON=1 is set, the source runs (fairsim/compiled.py).
install_source_finder()
