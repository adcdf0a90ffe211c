"""Build of the optional compiled block pool (``fairsim/sim/_block_pool_c.pyx``).

The package's metadata is in ``pyproject.toml``; this file only adds the Cython extension. It
is optional: where it does not compile (no C compiler) the install still succeeds, with a
warning, and fairsim runs on the pure-Python pool (``fairsim.sim.block_pool.BlockPool``, the
reference); ``fairsim.sim.block_pool.new_block_pool`` picks whichever is there.
"""

from Cython.Build import cythonize  # a build requirement (pyproject.toml [build-system])
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """``build_ext`` that warns and carries on when an optional extension fails to build, for
    any reason (setuptools' own ``optional`` handling covers compiler errors only)."""

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:  # noqa: BLE001 - any failure: the pure-Python pool is used
            if not ext.optional:
                raise
            print(f"warning: fairsim: {ext.name} was not built ({exc}); fairsim uses its pure-Python block pool")


extensions = cythonize([Extension("fairsim.sim._block_pool_c", ["fairsim/sim/_block_pool_c.pyx"])],
                       compiler_directives={"language_level": "3"}, quiet=True)
for ext in extensions:
    ext.optional = True  # set here: cythonize's Extension objects do not keep it
setup(ext_modules=extensions, cmdclass={"build_ext": OptionalBuildExt})
