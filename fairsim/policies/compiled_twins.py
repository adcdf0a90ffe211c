"""The optional compiled twins of some fast paths' hot parts (``fairsim/policies/_credit_c.pyx``).

Built at install by ``setup.py`` as the compiled block pool is, loaded by name; where the
extension is not built, or ``FAIRSIM_PURE_PYTHON=1`` is set, each fast path runs its Python code,
which is the reference the twin matches statement for statement (``tests/test_credit_compiled.py``):

- ``"drr_visits"``: ``fairsim.policies.credit_fast.DRROrder._visits`` (a generator);
- ``"drr_sync"``: ``fairsim.policies.credit_fast.DRROrder._sync_python`` (the ring's update);
- ``"drr_dynamo_picks"``: ``fairsim.policies.drr_dynamo.DRRDynamoOrder._pick_all``;
- ``"dlpm_passes"``: ``fairsim.policies.credit_fast.DLPMOrder._passes``;
- ``"CompiledCountedPrefixTree"``: ``fairsim.policies.sglang.CountedPrefixTree`` (a class);
- ``"CompiledHeadHeapOrder"``: ``fairsim.policies.peek_order.HeadHeapOrder`` (a class).

``fairsim.policies.sglang`` loads two more from the same module itself (``_twins``):
``in_batch_deprioritized`` (reference ``sglang.in_batch_deprioritized_python``) and
``hrrn_keyed`` (reference ``sglang.hrrn_keyed_python``), HRRN's sort at or below 128 waiting.

A module of its own, so that a policy with a twin imports no other policy's module for it (on
this machine no bytecode is written, and compiling ``credit_fast``'s source at every start cost
PEEK and DFS-weight about 45 M instructions).
"""

from __future__ import annotations

from typing import Any

from fairsim.compiled import compiled_twin as compiled_module

COMPILED_MODULE = "fairsim.policies._credit_c"


def compiled_twin(name: str) -> Any:
    """The compiled twin ``name`` (module docstring) where the extension imports and
    ``FAIRSIM_PURE_PYTHON=1`` is not set (``fairsim.compiled``), else None (also where an
    extension built before that twin existed lacks it): the caller runs its Python code."""
    module = compiled_module(COMPILED_MODULE)
    return None if module is None else getattr(module, name, None)
