"""The one backend switch: CUDA kernels on CUDA devices when CuPy imports, torch twins otherwise."""
from __future__ import annotations

import functools
import threading
from typing import Optional, Union

import torch

from rl_zerosync.kernels.api import Kernels
from rl_zerosync.kernels.reference import TorchKernels

BACKENDS = ("auto", "cuda", "torch")

_default_backend: Optional[str] = None
_cache: dict[tuple[str, torch.device], Kernels] = {}
_lock = threading.Lock()


def _check_name(name: str, what: str) -> str:
    if name not in BACKENDS:
        raise ValueError(f"{what} must be one of {BACKENDS}, got {name!r}")
    return name


def set_default_backend(name: Optional[str]) -> None:
    """Force the backend that ``get_kernels(device)`` (backend="auto") picks in this process.

    ``None`` or ``"auto"`` restores the automatic choice. An explicit ``backend=`` argument to
    :func:`get_kernels` still wins.
    """
    global _default_backend
    _default_backend = None if name is None else _check_name(name, "backend")


@functools.lru_cache(maxsize=None)
def cupy_available() -> bool:
    """True when CuPy imports and sees at least one CUDA device."""
    try:
        import cupy  # noqa: F401

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # ImportError, CUDA driver/runtime mismatch, no device
        return False


def _normalize(device: Union[str, torch.device, int]) -> torch.device:
    dev = torch.device(device) if not isinstance(device, int) else torch.device("cuda", device)
    if dev.type == "cuda" and dev.index is None and torch.cuda.is_available():
        dev = torch.device("cuda", torch.cuda.current_device())
    return dev


def resolve_backend(device: Union[str, torch.device, int], backend: str = "auto") -> str:
    """The concrete backend ("cuda" or "torch") that :func:`get_kernels` would use."""
    _check_name(backend, "backend")
    dev = _normalize(device)
    if backend == "auto" and _default_backend not in (None, "auto"):
        backend = _default_backend
    if backend == "cuda":
        if dev.type != "cuda":
            raise ValueError(f"backend 'cuda' needs a CUDA device, got device {dev}")
        if not cupy_available():
            raise ValueError("backend 'cuda' needs CuPy with a visible CUDA device (pip install cupy-cuda12x)")
        return "cuda"
    if backend == "torch":
        return "torch"
    return "cuda" if dev.type == "cuda" and cupy_available() else "torch"


def get_kernels(device: Union[str, torch.device, int], backend: str = "auto") -> Kernels:
    """Kernels for ``device``: "auto" (default), or force "cuda" / "torch". Cached per device."""
    dev = _normalize(device)
    name = resolve_backend(dev, backend)
    key = (name, dev)
    with _lock:
        kernels = _cache.get(key)
        if kernels is None:
            if name == "cuda":
                from rl_zerosync.kernels.cuda_backend import CudaKernels

                kernels = CudaKernels(dev)
            else:
                kernels = TorchKernels(dev)
            _cache[key] = kernels
    return kernels
