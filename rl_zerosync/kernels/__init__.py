"""On-device numerics: CUDA kernels (NVRTC via CuPy) with torch twins behind one switch.

Usage::

    k = get_kernels(device)                  # CUDA kernels on CUDA + CuPy, torch twins otherwise
    launch = k.bind_qstats(q, out, scratch)  # validate the buffers once
    launch()                                 # hot path: no allocation, no host read

See ``docs/ARCHITECTURE.md`` (section ``rl_zerosync.kernels``) for every kernel's contract.
"""
from rl_zerosync.kernels.api import Kernels
from rl_zerosync.kernels.backend import backend_info, get_kernels, log_backend, resolve_backend, set_default_backend
from rl_zerosync.kernels.readback import AsyncReadback
from rl_zerosync.kernels.rng import bits24, hash32, random_bits, uniform24
from rl_zerosync.kernels.validate import (
    bind_branching_select,
    bind_divergence,
    bind_epsilon_greedy,
    bind_guard_accumulate,
    bind_guard_check,
    bind_guard_record,
    bind_qstats,
    bind_route,
    qstats_scratch_numel,
)

__all__ = [
    "AsyncReadback",
    "Kernels",
    "backend_info",
    "bind_branching_select",
    "bind_divergence",
    "bind_epsilon_greedy",
    "bind_guard_accumulate",
    "bind_guard_check",
    "bind_guard_record",
    "bind_qstats",
    "bind_route",
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
