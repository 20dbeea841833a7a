"""flashsim: a cycle-level GPU memory-hierarchy simulator for attention, with reference CUDA kernels.

The repository root is the `flashsim` package: its folders (algorithms, simulator, hw_profiles, kernels,
experiments) install as `flashsim.algorithms` and so on, never as top-level modules of their own.
"""

from . import compiled as _compiled

__version__ = "0.1.0"

_compiled.install()
