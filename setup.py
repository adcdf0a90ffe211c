"""Build of the optional compiled block pool (``fairsim/sim/_block_pool_c.pyx``).

The package's metadata is in ``pyproject.toml``; this file only adds the Cython extension,
``optional=True``: where it does not compile (no C compiler) the install still succeeds, with a
warning, and fairsim runs on the pure-Python pool (``fairsim.sim.block_pool.BlockPool``, the
reference); ``fairsim.sim.block_pool.new_block_pool`` picks whichever is there.
"""

from Cython.Build import cythonize  # a build requirement (pyproject.toml [build-system])
from setuptools import Extension, setup

setup(ext_modules=cythonize(
    [Extension("fairsim.sim._block_pool_c", ["fairsim/sim/_block_pool_c.pyx"], optional=True)],
    compiler_directives={"language_level": "3"}, quiet=True))
