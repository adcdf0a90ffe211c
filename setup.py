"""Build steps beyond ``pyproject.toml``'s metadata.

- The optional compiled block pool (``fairsim/sim/_block_pool_c.pyx``, Cython). Where it does
  not compile (no C compiler) the install still succeeds, with a warning, and fairsim runs on
  the pure-Python pool (``fairsim.sim.block_pool.BlockPool``, the reference);
  ``fairsim.sim.pool_choice.new_block_pool`` picks whichever is there.
- The optional compiled bound lines of the Fairway family's Fast lane
  (``fairsim/policies/_fast_lane_c.pyx``), the same way: where it is not built,
  ``fairsim.policies.fast_lane.bound_lines_class`` gives the numpy reference. The same
  extension holds the Fast lane's compiled updates and reads and ``fairway-deadline``'s block
  sums; without it the Python methods run (``fast_lane._compiled``, ``deadline_fast.block_kernel``).
- The optional compiled watcher-map updates (``fairsim/sim/_watch_c.pyx``), the same way:
  where it is not built, the engine runs its pure-Python methods (``Engine._rewatch`` ...).
- The optional compiled per-request states and request-table read of the engine
  (``fairsim/sim/_live_c.pyx``), the same way: where it is not built, ``make_lives`` and
  ``Engine._request_table`` run their Python loops (``fairsim.sim.engine.compiled_lives``).
- The optional compiled loops of the offered load (``fairsim/traces/_offered_c.pyx``), of the
  Mooncake and CSV (Azure, BurstGPT) readers' plain rows (``fairsim/traces/formats/_mooncake_c.pyx``,
  ``_csv_c.pyx``; the Dynamo rows' 64-bit hashes checked there too) and of the Bailian
  reader's plain rows and re-chained ids (``fairsim/traces/formats/_chain_c.pyx``; the two
  JSON scanners share ``_json_bytes.pxd``), the same way: where they are not built, the Python
  loops run (``fairsim.compiled``).
- The optional compiled read loops of DRR, DRR-Dynamo and DLPM, DFS-weight's tree and PEEK's
  order (``fairsim/policies/_credit_c.pyx``), the same way: where it is not built, each order
  runs its Python code (``fairsim.policies.compiled_twins``).
- The optional compiled sorted list of the kept orders' keys (``fairsim/policies/_sorted_c.pyx``),
  the same way: where it is not built, ``fairsim.policies.sorted_keys.SortedKeys`` is
  ``sortedcontainers.SortedList``.
- The optional compiled due blocks and order bookkeeping of ``fairway-deadline``
  (``fairsim/policies/_deadline_c.pyx``), the same way: where it is not built,
  ``deadline_fast.DueBlocks`` and ``DeadlineOrder`` run (``deadline_fast.due_blocks``,
  ``deadline_fast.deadline_order``).
- The optional compiled merge of the Fairway family's two lanes, its Fair lane's resolved read
  and the lanes' join/leave/stale dispatch (``fairsim/policies/_merge_c.pyx``), the same way:
  where it is not built, ``fairsim.policies.incremental``'s Python code runs (``merge_of``).
- The modules in ``fairsim.compiled.WHOLE_MODULES`` (the engine's step loop, the arrivals, the
  orders' Python bookkeeping, the trace readers' per-record checks) compiled whole from their
  own ``.py`` source, optional the same way, with ``annotation_typing=False`` (a hint such as
  ``x: float`` does not convert a value) and ``-ffp-contract=off``, so the extension computes
  what the source does. Each gets a stamp file of the source it was built from
  (``fairsim.compiled.source_stamp``); where the source changed since, or
  ``FAIRSIM_PURE_PYTHON=1`` is set, fairsim imports the source (``fairsim.compiled.SourceFinder``).
  Cython also reads the ``.pxd`` beside a source (``fairsim/sim/engine.pxd``,
  ``fairsim/policies/credit_fast.pxd``, ``credit.pxd``, ``drr_dynamo.pxd``, ``incremental.pxd``):
  the compiled ``Engine`` and the kept orders they name are extension types whose data
  attributes are C fields.
- An editable install (``pip install -e .``) writes the packages' bytecode (``__pycache__``)
  once: a wheel install gets it from pip, and a machine that sets ``PYTHONDONTWRITEBYTECODE``
  otherwise compiles every module at every start (0.07 CPU-s of a 0.31 s start-up here).
  Python checks each ``.pyc`` against its source, so an edited module is compiled from source.
"""

import compileall
import importlib.util
import os
from pathlib import Path

from Cython.Build import cythonize  # a build requirement (pyproject.toml [build-system])
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

PACKAGES = ("fairsim", "calibration")  # pyproject.toml [tool.setuptools.packages.find]
ROOT = Path(__file__).resolve().parent


def _compiled_module() -> object:
    """``fairsim/compiled.py`` loaded by its path (standard library only; importing the package
    is not needed to build it)."""
    spec = importlib.util.spec_from_file_location("_fairsim_compiled", ROOT / "fairsim" / "compiled.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


COMPILED = _compiled_module()
#: Dotted name -> source path of each module compiled whole (``fairsim.compiled.WHOLE_MODULES``).
WHOLE_SOURCES = {name: ROOT.joinpath(*name.split(".")).with_suffix(".py") for name in COMPILED.WHOLE_MODULES}


class OptionalBuildExt(build_ext):
    """``build_ext`` that warns and carries on when an optional extension fails to build, for
    any reason (setuptools' own ``optional`` handling covers compiler errors only), and that
    compiles on the usable cores (at most 8) unless ``--parallel``/``-j`` says otherwise (pip
    gives no ``-j``)."""

    def finalize_options(self) -> None:
        super().finalize_options()
        if not self.parallel:
            # The cores this process may use (not the host's count, in a container), at most 8:
            # each compiler process of the engine's C file takes a few hundred MB.
            cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
            self.parallel = max(1, min(cores, 8))

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:  # noqa: BLE001 - any failure: the pure-Python reference is used
            if not ext.optional:
                raise
            print(f"warning: fairsim: {ext.name} was not built ({exc}); fairsim uses its pure-Python reference")
            return
        source = WHOLE_SOURCES.get(ext.name)
        if source is not None:  # the stamp of the source it was built from (fairsim.compiled.SourceFinder)
            stamp = Path(self.get_ext_fullpath(ext.name) + COMPILED.STAMP_SUFFIX)
            stamp.write_text(COMPILED.source_stamp(source) + "\n")

    def copy_extensions_to_source(self) -> None:
        """``--inplace`` (and an editable install): each built extension is copied into the source
        tree (setuptools), and a whole module's stamp with it."""
        super().copy_extensions_to_source()
        for name in WHOLE_SOURCES:
            filename = self.get_ext_filename(name)  # relative: this project's packages sit at its root
            built = Path(self.build_lib, filename + COMPILED.STAMP_SUFFIX)
            if built.is_file():
                self.copy_file(str(built), str(ROOT / (filename + COMPILED.STAMP_SUFFIX)), level=self.verbose)


class BuildPyWithBytecode(build_py):
    """``build_py`` that, in an editable install, compiles the source tree's bytecode."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:
            root = Path(__file__).resolve().parent
            for package in PACKAGES:
                compileall.compile_dir(root / package, quiet=1)


# -ffp-contract=off: no fused multiply-add, so the compiled step times are Python's to the bit
# (plan_chunks); a compiler without the flag fails the build, and the pure-Python path is used.
# The Fast lane's bound lines (``fairsim/policies/_fast_lane_c.pyx``): optional the same way, with
# the numpy reference (``fairsim.policies.fast_lane.NumpyBoundLines``) where it is not built.
extensions = cythonize([Extension("fairsim.sim._block_pool_c", ["fairsim/sim/_block_pool_c.pyx"],
                                  extra_compile_args=["-ffp-contract=off"]),
                        Extension("fairsim.policies._fast_lane_c", ["fairsim/policies/_fast_lane_c.pyx"],
                                  extra_compile_args=["-ffp-contract=off"]),
                        Extension("fairsim.sim._watch_c", ["fairsim/sim/_watch_c.pyx"]),
                        Extension("fairsim.sim._live_c", ["fairsim/sim/_live_c.pyx"]),
                        Extension("fairsim.traces._offered_c", ["fairsim/traces/_offered_c.pyx"],
                                  extra_compile_args=["-ffp-contract=off"]),
                        Extension("fairsim.traces.formats._mooncake_c",
                                  ["fairsim/traces/formats/_mooncake_c.pyx"]),
                        Extension("fairsim.traces.formats._chain_c", ["fairsim/traces/formats/_chain_c.pyx"]),
                        Extension("fairsim.traces.formats._csv_c", ["fairsim/traces/formats/_csv_c.pyx"]),
                        Extension("fairsim.policies._credit_c", ["fairsim/policies/_credit_c.pyx"]),
                        Extension("fairsim.policies._sorted_c", ["fairsim/policies/_sorted_c.pyx"]),
                        Extension("fairsim.policies._deadline_c", ["fairsim/policies/_deadline_c.pyx"]),
                        Extension("fairsim.policies._merge_c", ["fairsim/policies/_merge_c.pyx"],
                                  extra_compile_args=["-ffp-contract=off"])],
                       compiler_directives={"language_level": "3"}, quiet=True)
# The modules compiled whole: plain Python source, so type hints stay hints (annotation_typing).
extensions += cythonize([Extension(name, [str(source.relative_to(ROOT))], extra_compile_args=["-ffp-contract=off"])
                         for name, source in WHOLE_SOURCES.items()],
                        compiler_directives={"language_level": "3", "annotation_typing": False}, quiet=True)
for ext in extensions:
    ext.optional = True  # set here: cythonize's Extension objects do not keep it
setup(ext_modules=extensions, cmdclass={"build_ext": OptionalBuildExt, "build_py": BuildPyWithBytecode})
