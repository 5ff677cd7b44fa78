"""On-device numerics: CUDA kernels (NVRTC via CuPy) with torch twins behind one switch.

Usage::

    k = get_kernels(device)                  # CUDA kernels on CUDA + CuPy, torch twins otherwise
    launch = k.bind_qstats(q, out, scratch)  # validate the buffers once
    launch()                                 # hot path: no allocation, no host read

One kernel = one ``.cu`` + its declaration in the wrapper module beside it (arguments, rules and
launches, ``declare.py``; its check and its CuPy arguments derive from it) + one twin with the
declared signature in ``reference.py``, listed once in :data:`KERNELS` (``api.py``); the flat
buffers they share are described once in ``layouts.py``. See ``docs/ARCHITECTURE.md`` (section
``rl_zerosync.kernels``) for every kernel's contract.
"""
from rl_zerosync.kernels.api import KERNELS, Kernels, KernelSpec
from rl_zerosync.kernels.backend import backend_info, get_kernels, log_backend, resolve_backend, set_default_backend
from rl_zerosync.kernels.qstats import qstats_scratch_numel
from rl_zerosync.kernels.readback import AsyncReadback
from rl_zerosync.kernels.rng import bits24, hash32, random_bits, uniform24

__all__ = [
    "AsyncReadback",
    "KERNELS",
    "KernelSpec",
    "Kernels",
    "backend_info",
    "bits24",
    "get_kernels",
    "hash32",
    "log_backend",
    "qstats_scratch_numel",
    "random_bits",
    "resolve_backend",
    "set_default_backend",
    "uniform24",
]
