"""The one backend switch: CUDA kernels on CUDA devices when CuPy imports, torch twins otherwise."""
from __future__ import annotations

import functools
import os
import sys
import threading
from typing import Any, Optional, Union

import torch

from rl_zerosync.kernels.api import Kernels

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
def cupy_status() -> dict[str, Any]:
    """Whether CuPy is usable here, and if not why: ``{"usable", "version", "cuda_runtime",
    "cuda_driver", "devices", "error"}`` (imports CuPy once per process; cached)."""
    out: dict[str, Any] = {"usable": False, "version": None, "cuda_runtime": None, "cuda_driver": None,
                           "devices": 0, "error": None}
    try:
        import cupy
    except Exception as err:  # ImportError, or a broken install
        out["error"] = f"cannot import cupy ({type(err).__name__}: {_first_line(err)}); pip install cupy-cuda12x"
        return out
    out["version"] = getattr(cupy, "__version__", None)
    try:
        out["cuda_runtime"] = _cuda_version(cupy.cuda.runtime.runtimeGetVersion())
        driver = cupy.cuda.runtime.driverGetVersion()
        out["cuda_driver"] = _cuda_version(driver) if driver else None  # 0: no driver
    except Exception:  # reported through getDeviceCount below
        pass
    try:
        out["devices"] = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as err:  # CUDA driver/runtime mismatch, no device, no driver
        out["error"] = f"{type(err).__name__}: {_first_line(err)}"
        return out
    if out["devices"] == 0:
        out["error"] = "CuPy sees no CUDA device"
        return out
    out["usable"] = True
    return out


def cupy_available() -> bool:
    """True when CuPy imports and sees at least one CUDA device."""
    return bool(cupy_status()["usable"])


def _cuda_version(v: int) -> str:
    """CUDA's integer version (12080) as "12.8"."""
    return f"{v // 1000}.{(v % 1000) // 10}"


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def _torch_cuda_reason() -> Optional[str]:
    """Why torch sees no CUDA device (None when it sees one)."""
    if torch.cuda.is_available():
        return None
    if torch.version.cuda is None:
        return f"torch {torch.__version__} is a CPU-only build"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    hint = f"; CUDA_VISIBLE_DEVICES={visible!r}" if visible is not None else ""
    return f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no CUDA device (no GPU or driver{hint})"


def backend_info(device: Union[str, torch.device, int, None] = None, backend: str = "auto") -> dict[str, Any]:
    """Which kernel backend :func:`get_kernels` picks for ``device`` and why, as a plain dict.

    ``device`` None: "cuda" when torch sees a CUDA device, else "cpu". Keys: ``backend`` ("cuda":
    the NVRTC kernels through CuPy; "torch": the torch twins), ``device``, ``reason`` (one line),
    ``warning`` (a line when CUDA is there but CuPy is unusable, else None), ``cupy`` (version or
    None), ``cupy_cuda_runtime``, ``cupy_error``, ``torch``, ``torch_cuda`` (torch's CUDA build or
    None) and ``cuda_devices`` (``torch.cuda.device_count()``). CuPy is only imported on a CUDA device.
    """
    cuda = torch.cuda.is_available()
    if device is None:
        device = "cuda" if cuda else "cpu"
    dev = _normalize(device)
    info: dict[str, Any] = {
        "backend": None, "device": str(dev), "reason": None, "warning": None, "cupy": None,
        "cupy_cuda_runtime": None, "cupy_error": None, "torch": torch.__version__,
        "torch_cuda": torch.version.cuda, "cuda_devices": torch.cuda.device_count() if cuda else 0,
    }
    if dev.type == "cuda" and cuda:
        status = cupy_status()
        info.update(cupy=status["version"], cupy_cuda_runtime=status["cuda_runtime"], cupy_error=status["error"])
    info["backend"] = name = resolve_backend(dev, backend)
    if name == "cuda":
        info["reason"] = (f"CUDA kernels (NVRTC via CuPy {info['cupy']}, CUDA runtime "
                          f"{info['cupy_cuda_runtime']}) on {dev}")
    elif dev.type != "cuda":
        why = _torch_cuda_reason() or f"device {dev} is not a CUDA device"
        info["reason"] = f"torch twins on {dev} ({why})"
    elif not cuda:
        info["reason"] = f"torch twins ({_torch_cuda_reason()})"
    elif info["cupy_error"] is not None:
        major = torch.version.cuda.split(".")[0] if torch.version.cuda else "12"
        info["reason"] = f"torch twins on {dev}: CuPy is unusable ({info['cupy_error']})"
        info["warning"] = (f"CUDA is available (torch CUDA {torch.version.cuda}, {info['cuda_devices']} device(s)) "
                           f"but CuPy is unusable ({info['cupy_error']}): the torch twins of the kernels run "
                           f"instead (same results, slower); install the cupy-cuda{major}x that matches "
                           f"the driver")
    else:
        info["reason"] = f"torch twins on {dev} (backend forced to 'torch')"
    return info


_logged = False


def log_backend(device: Union[str, torch.device, int, None] = None, *, out=None, err=None) -> dict[str, Any]:
    """Print once per process which kernel backend runs (``kernels: ...`` on stdout) and, when CUDA
    is there but CuPy is unusable, a ``warning: kernels: ...`` line on stderr; returns
    :func:`backend_info`."""
    global _logged
    info = backend_info(device)
    if not _logged:
        _logged = True
        print(f"kernels: {info['reason']}", file=out or sys.stdout, flush=True)
        if info["warning"]:
            print(f"warning: kernels: {info['warning']}", file=err or sys.stderr, flush=True)
    return info


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
            kernels = Kernels(dev, backend=name)
            _cache[key] = kernels
    return kernels
