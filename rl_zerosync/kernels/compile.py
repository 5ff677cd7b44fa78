"""Kernel sources and their NVRTC compilation: lazily, once per device, through CuPy.

Each ``.cu`` file is compiled with ``common.cuh`` and ``rng.cuh`` prepended (a ``#line`` directive
keeps compiler messages on the ``.cu`` file's own line numbers). :func:`get_function` returns the
cached ``cupy.cuda.Function`` of a kernel on a device; :func:`compile_ptx` compiles a source to PTX
with NVRTC directly (no GPU or driver needed), which the CPU test suite uses as a syntax check.
"""
from __future__ import annotations

import ctypes
import threading
from pathlib import Path
from typing import Any, Optional, Sequence

KERNEL_DIR = Path(__file__).resolve().parent
HEADERS = ("common.cuh", "rng.cuh")
KERNELS_BY_FILE: dict[str, tuple[str, ...]] = {
    "guard.cu": ("zs_guard_check", "zs_guard_accumulate", "zs_guard_record"),
    "qstats.cu": ("zs_qstats_partial", "zs_qstats_final"),
    "divergence.cu": ("zs_divergence",),
    "select.cu": ("zs_epsilon_greedy", "zs_branching_select"),
    "route.cu": ("zs_route",),
}
FILE_OF_KERNEL = {k: f for f, ks in KERNELS_BY_FILE.items() for k in ks}
NVRTC_OPTIONS: tuple[str, ...] = ("-std=c++17",)
"""Options valid on CUDA 12 and 13; CuPy adds the architecture of the device at runtime."""

_lock = threading.Lock()
_functions: dict[tuple[int, str], Any] = {}
_modules: dict[tuple[int, str], Any] = {}


class KernelCompileError(RuntimeError):
    """NVRTC rejected a kernel source; the message holds the compiler log."""


def kernel_source(filename: str) -> str:
    """Full source of ``filename`` as compiled: the headers, then the file under ``#line 1``."""
    if filename not in KERNELS_BY_FILE and filename not in HEADERS:
        raise ValueError(f"unknown kernel source {filename!r}; expected one of {sorted(KERNELS_BY_FILE)}")
    parts = [f'#line 1 "{h}"\n{(KERNEL_DIR / h).read_text()}\n' for h in HEADERS if h != filename]
    parts.append(f'#line 1 "{filename}"\n{(KERNEL_DIR / filename).read_text()}')
    return "".join(parts)


def get_function(device_index: int, kernel: str) -> Any:
    """The compiled ``cupy.cuda.Function`` of ``kernel`` on CUDA device ``device_index`` (cached)."""
    fn = _functions.get((device_index, kernel))
    if fn is not None:
        return fn
    filename = FILE_OF_KERNEL.get(kernel)
    if filename is None:
        raise ValueError(f"unknown kernel {kernel!r}; expected one of {sorted(FILE_OF_KERNEL)}")
    import cupy
    from cupy.cuda.compiler import CompileException

    with _lock:
        if (device_index, kernel) not in _functions:
            with cupy.cuda.Device(device_index):
                module = _modules.get((device_index, filename))
                if module is None:
                    module = cupy.RawModule(code=kernel_source(filename), options=NVRTC_OPTIONS)
                    _modules[(device_index, filename)] = module
                for name in KERNELS_BY_FILE[filename]:
                    try:
                        _functions[(device_index, name)] = module.get_function(name).kernel
                    except CompileException as exc:
                        raise KernelCompileError(f"{filename}: {exc}") from exc
    return _functions[(device_index, kernel)]


def compile_all(device_index: int) -> None:
    """Compile and load every kernel on a device (call before CUDA graph capture)."""
    for kernel in FILE_OF_KERNEL:
        get_function(device_index, kernel)


def load_nvrtc() -> Any:
    """CuPy's NVRTC binding, preloading ``libnvrtc`` from the ``nvidia-cuda-nvrtc`` wheel if needed."""
    from cupy_backends.cuda.libs import nvrtc

    try:
        nvrtc.getVersion()
        return nvrtc
    except Exception:
        pass
    import nvidia.cuda_nvrtc  # the pip wheel that ships libnvrtc

    for base in nvidia.cuda_nvrtc.__path__:
        for lib in sorted((Path(base) / "lib").glob("libnvrtc.so*")):
            ctypes.CDLL(str(lib), mode=ctypes.RTLD_GLOBAL)
    nvrtc.getVersion()
    return nvrtc


def compile_ptx(source: str, name: str, *, arch: str = "compute_90",
                options: Optional[Sequence[str]] = None) -> str:
    """Compile CUDA C ``source`` to PTX with NVRTC; raise :class:`KernelCompileError` with the log."""
    nvrtc = load_nvrtc()
    opts = [f"--gpu-architecture={arch}", *(NVRTC_OPTIONS if options is None else options)]
    prog = nvrtc.createProgram(source, name, [], [])
    try:
        try:
            nvrtc.compileProgram(prog, opts)
        except nvrtc.NVRTCError as exc:
            raise KernelCompileError(f"{name}: {exc}\n{nvrtc.getProgramLog(prog)}") from None
        log = nvrtc.getProgramLog(prog).strip()
        if "warning" in log:
            raise KernelCompileError(f"{name}: compiled with warnings\n{log}")
        ptx = nvrtc.getPTX(prog)
        return ptx.decode() if isinstance(ptx, bytes) else ptx
    finally:
        nvrtc.destroyProgram(prog)
