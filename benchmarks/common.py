"""Helpers shared by the benchmark scripts: versions, hardware, CUDA-event timing, JSON output."""
from __future__ import annotations

import json
import os
import platform
import statistics
from pathlib import Path
from typing import Callable

import torch


def versions() -> dict:
    """Versions of Python, torch (+ CUDA), Ray, gymnasium, numpy and CuPy (when importable)."""
    out = {"python": platform.python_version(), "torch": torch.__version__, "torch_cuda": torch.version.cuda}
    for name in ("ray", "gymnasium", "numpy"):
        try:
            out[name] = __import__(name).__version__
        except ImportError:
            out[name] = "not installed"
    try:
        import cupy

        out["cupy"] = cupy.__version__
        if torch.cuda.is_available():
            out["cuda_runtime"] = cupy.cuda.runtime.runtimeGetVersion()
            out["cuda_driver"] = cupy.cuda.runtime.driverGetVersion()
    except Exception as exc:  # the CPU paths run without CuPy
        out["cupy"] = f"unavailable ({type(exc).__name__})"
    return out


def hardware(device: torch.device | str) -> dict:
    """Platform, CPU count and, on CUDA, the GPU's name and memory."""
    device = torch.device(device)
    hw = {"platform": platform.platform(), "cpu": platform.processor() or platform.machine(),
          "cpu_count": os.cpu_count(), "device": str(device), "torch_threads": torch.get_num_threads()}
    if device.type == "cuda":
        hw["gpu"] = torch.cuda.get_device_name(device)
        hw["gpu_memory_gib"] = round(torch.cuda.get_device_properties(device).total_memory / 2**30, 1)
    return hw


def time_cuda_seconds(fn: Callable[[], None], *, calls: int, repeats: int, warmup: int = 3) -> float:
    """Median over ``repeats`` of GPU-timeline seconds per call of ``fn`` (CUDA events)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e-3 / calls)
    return statistics.median(samples)


def write_json(result: dict, out: str | Path) -> Path:
    """Write ``result`` as indented JSON (creating the folder) and say where."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, default=float) + "\n")
    print(f"\nwrote {out}")
    return out


def time_host_seconds(fn: Callable[[], None], *, calls: int, repeats: int, warmup: int = 3) -> float:
    """Median over ``repeats`` of wall-clock seconds per call of ``fn`` (CPU paths)."""
    import time

    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - t0) / calls)
    return statistics.median(samples)


def timed_train(algo) -> tuple[dict, float]:
    """One ``algo.train()`` and its wall seconds, with the GPU synchronized before and after (so the
    clock covers the iteration's device work)."""
    import time

    def sync() -> None:
        if torch.cuda.is_available():
            torch.cuda.synchronize()

    sync()
    t0 = time.perf_counter()
    result = algo.train()
    sync()
    return result, time.perf_counter() - t0
