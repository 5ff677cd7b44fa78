"""Kernel sources and their NVRTC compilation: lazily, once per device, through CuPy.

A :class:`CudaSource` names one ``.cu`` file, its kernels and its own constants; each wrapper module
declares its ``SOURCE``. The text compiled (:func:`kernel_source`) is:

1. the generated ``#define`` lines (:func:`defines_text`): the shared constants
   (:func:`shared_defines`: every layout of ``layouts.py``, the RNG parameters of ``rng.py``, the
   action layout of ``rl_zerosync.actions``) and the source's own (block sizes...), all taken from
   the Python constants, so no constant is written twice;
2. the headers ``common.cuh``, ``rng.cuh`` and ``qpart.cuh``;
3. the ``.cu`` file; a ``#line`` directive before each part keeps compiler messages on that file's
   own line numbers.

:func:`get_function` returns the cached ``cupy.cuda.Function`` of a kernel on a device;
:func:`compile_ptx` compiles a source to PTX with NVRTC directly (no GPU or driver needed), which the
CPU test suite uses as a syntax check.
"""
from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple, Union

from rl_zerosync import actions
from rl_zerosync.kernels import rng
from rl_zerosync.kernels.layouts import INT32_MAX, LAYOUTS

KERNEL_DIR = Path(__file__).resolve().parent
HEADERS = ("common.cuh", "rng.cuh", "qpart.cuh")
DEFINES_NAME = "zs_defines.h"
"""The file name compiler messages give to the generated defines."""
NVRTC_OPTIONS: Tuple[str, ...] = ("-std=c++17",)
"""Options valid on CUDA 12 and 13; CuPy adds the architecture of the device at runtime."""

Number = Union[int, float]

_lock = threading.Lock()
_functions: Dict[Tuple[int, str], Any] = {}
_modules: Dict[Tuple[int, str], Any] = {}


class KernelCompileError(RuntimeError):
    """NVRTC rejected a kernel source; the message holds the compiler log."""


@dataclass(frozen=True)
class CudaSource:
    """One CUDA source file of this package (or one of :data:`HEADERS`, compiled alone in tests).

    Attributes:
        filename: The file in this directory (``"qstats.cu"``).
        kernels: Its ``extern "C"`` entry points.
        defines: Its own constants as CUDA macros (name -> Python int or float).
    """

    filename: str
    kernels: Tuple[str, ...]
    defines: Mapping[str, Number] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not (KERNEL_DIR / self.filename).is_file() or "/" in self.filename:
            raise ValueError(f"unknown kernel source {self.filename!r}")
        clash = sorted(set(self.defines) & set(shared_defines()))
        if clash:
            raise ValueError(f"{self.filename}: defines {clash} are already shared defines")


def shared_defines() -> Dict[str, Number]:
    """The constants every source sees: layouts, RNG parameters, action layout, int32 limit."""
    out: Dict[str, Number] = {}
    for layout in LAYOUTS:
        out.update(layout.defines())
    out.update(
        ZS_INT32_MAX=INT32_MAX,
        ZS_HASH_MUL=rng.HASH_MUL,
        ZS_GOLDEN=rng.GOLDEN,
        ZS_STREAM_EXPLORE=rng.STREAM_EXPLORE,
        ZS_STREAM_RANDOM_ACTION=rng.STREAM_RANDOM_ACTION,
        ZS_STREAMS_PER_BRANCH=rng.STREAMS_PER_BRANCH,
        ZS_NUM_EXPOSURES=actions.NUM_EXPOSURES,
        ZS_NUM_ORDER_TYPES=actions.NUM_ORDER_TYPES,
        ZS_NUM_URGENCIES=actions.NUM_URGENCIES,
    )
    out.update({f"ZS_ORDER_{o.name}": int(o) for o in actions.OrderType})
    out.update({f"ZS_URGENCY_{u.name}": int(u) for u in actions.Urgency})
    return out


def c_literal(value: Number) -> str:
    """A CUDA literal of ``value``: decimal int (``u`` suffix above int32), exact hex float (``f``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"a define must be an int or a float, got {value!r}")
    if isinstance(value, float):
        return f"{value.hex()}f"
    if not 0 <= value <= 0xFFFFFFFF:
        raise ValueError(f"an integer define must be in [0, 2**32), got {value}")
    return f"{value}u" if value > INT32_MAX else str(value)


def defines_text(source: CudaSource) -> str:
    """The generated ``#define NAME value`` lines of ``source`` (shared constants first)."""
    defines = {**shared_defines(), **source.defines}
    return "".join(f"#define {name} {c_literal(value)}\n" for name, value in defines.items())


def kernel_source(source: CudaSource) -> str:
    """Full source of ``source`` as compiled: the defines, the headers, then the file under ``#line 1``."""
    parts = [f'#line 1 "{DEFINES_NAME}"\n{defines_text(source)}']
    # A header compiled alone (tests) sees the headers listed before it, as every source does.
    headers = HEADERS[:HEADERS.index(source.filename)] if source.filename in HEADERS else HEADERS
    parts += [f'#line 1 "{h}"\n{(KERNEL_DIR / h).read_text()}\n' for h in headers]
    parts.append(f'#line 1 "{source.filename}"\n{(KERNEL_DIR / source.filename).read_text()}')
    return "".join(parts)


def load_module(device_index: int, source: CudaSource) -> None:
    """Compile ``source`` and load its kernels on CUDA device ``device_index`` (once; cached)."""
    if all((device_index, k) in _functions for k in source.kernels):
        return
    import cupy
    from cupy.cuda.compiler import CompileException

    with _lock:
        with cupy.cuda.Device(device_index):
            module = _modules.get((device_index, source.filename))
            if module is None:
                module = cupy.RawModule(code=kernel_source(source), options=NVRTC_OPTIONS)
                _modules[(device_index, source.filename)] = module
            for name in source.kernels:
                try:
                    _functions[(device_index, name)] = module.get_function(name).kernel
                except CompileException as exc:
                    raise KernelCompileError(f"{source.filename}: {exc}") from exc


def get_function(device_index: int, source: CudaSource, kernel: str) -> Any:
    """The compiled ``cupy.cuda.Function`` of ``kernel`` (of ``source``) on a CUDA device (cached)."""
    fn = _functions.get((device_index, kernel))
    if fn is not None:
        return fn
    if kernel not in source.kernels:
        raise ValueError(f"unknown kernel {kernel!r}; {source.filename} has {list(source.kernels)}")
    load_module(device_index, source)
    return _functions[(device_index, kernel)]


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
