"""Launching compiled kernels on torch's current CUDA stream, with named geometry.

Per launch: look up the kernel (compiled on first use, ``compile.py``), the CuPy view of torch's
current stream (cached per stream handle), pass raw ``data_ptr()`` integers and numpy scalars,
enqueue. Nothing is allocated on the device and nothing is read back.
"""
from __future__ import annotations

import warnings
from typing import Any, Sequence

import numpy as np
import torch

from rl_zerosync.kernels.compile import CudaSource, get_function

ELEMENTWISE_BLOCK = 256
"""Threads per block of the one-thread-per-row kernels."""
SCALAR_GRID = 1
"""Blocks of the one-thread kernels (guard, divergence)."""
SCALAR_BLOCK = 1
"""Threads per block of the one-thread kernels."""

_streams: dict[tuple[int, int], Any] = {}


class _StreamHandle:
    """Minimal CUDA stream protocol object for ``cupy.cuda.Stream.from_external``."""

    def __init__(self, ptr: int) -> None:
        self._ptr = ptr

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self._ptr)


def _external_stream(ptr: int, device_index: int) -> Any:
    """A non-owning CuPy view of torch's stream ``ptr``.

    ``ExternalStream`` (deprecated in CuPy 14 but present in 13 and 14) is preferred: it never
    destroys the handle and makes no CUDA call, so it is safe to create during graph capture.
    ``Stream.from_external`` is the fallback for CuPy versions without it.
    """
    import cupy

    external = getattr(cupy.cuda, "ExternalStream", None)
    if external is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return external(ptr, device_index)
    return cupy.cuda.Stream.from_external(_StreamHandle(ptr))


def current_stream(device_index: int) -> Any:
    """CuPy stream object for torch's current stream on ``device_index`` (cached per handle)."""
    ptr = torch.cuda.current_stream(device_index).cuda_stream
    key = (device_index, ptr)
    stream = _streams.get(key)
    if stream is None:
        stream = _external_stream(ptr, device_index)
        _streams[key] = stream
    return stream


def grid_for(rows: int, block: int = ELEMENTWISE_BLOCK) -> int:
    """Blocks needed to cover ``rows`` with one thread per row."""
    return max(1, -(-int(rows) // block))


def launch(source: CudaSource, kernel: str, *, device_index: int, grid: int, block: int, args: Sequence[Any],
           shared_mem: int = 0) -> None:
    """Enqueue ``kernel<<<grid, block, shared_mem, torch current stream>>>(*args)`` (of ``source``) on a device."""
    fn = get_function(device_index, source, kernel)
    if torch.cuda.current_device() != device_index:
        with torch.cuda.device(device_index):
            fn((grid,), (block,), tuple(args), shared_mem=shared_mem, stream=current_stream(device_index))
        return
    fn((grid,), (block,), tuple(args), shared_mem=shared_mem, stream=current_stream(device_index))


def f32(x: float) -> np.float32:
    """A kernel ``float`` argument."""
    return np.float32(x)


def i32(x: int) -> np.int32:
    """A kernel ``int`` argument."""
    return np.int32(x)


def i64(x: int) -> np.int64:
    """A kernel ``long long`` argument."""
    return np.int64(x)


def u32(x: int) -> np.uint32:
    """A kernel ``unsigned int`` argument."""
    return np.uint32(x)


def ptr(t: torch.Tensor) -> np.uint64:
    """A kernel pointer argument: the tensor's device address."""
    return np.uint64(t.data_ptr())


NULL = np.uint64(0)
"""A null pointer argument."""
