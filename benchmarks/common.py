"""Helpers shared by the benchmark scripts (and the tests that reuse them).

* the results skeleton: :func:`parser` (``--quick`` / ``--out``), :func:`result_header` (name, date,
  hardware, versions, config), :func:`print_table` / :func:`print_summary` and :func:`write_json`;
* timing: :func:`time_cuda_seconds` (CUDA events), :func:`time_host_seconds`, :func:`timed_train`;
* :func:`count_syncs`: synchronizing CUDA calls and explicit event waits during one call;

Run a benchmark from the repository root as a module: ``python -m benchmarks.<name> [--quick]``.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Iterable, NamedTuple, Optional, Sequence

import torch

RESULTS = Path(__file__).resolve().parent / "results"
"""Where the committed results JSON live (``benchmarks/results/<name>.json``)."""


# ------------------------------------------------------------------------------ results skeleton
def results_path(name: str) -> str:
    """``benchmarks/results/<name>.json`` (absolute)."""
    return str(RESULTS / f"{name}.json")


STOCK_ENVS = [1, 4, 16, 64, 256]
"""Vectorized envs per stock env runner that the sampler benchmarks sweep (the fastest is used)."""


def repo_relative(path: str | Path) -> str:
    """``path`` as the results JSON record it: relative to the repository root when it lies inside
    it (``benchmarks/results/<name>.json``), else as given."""
    resolved = Path(path).resolve()
    try:
        return resolved.relative_to(RESULTS.parent.parent).as_posix()
    except ValueError:
        return str(path)


def quick_path(name: str) -> str:
    """``<temp folder>/<name>_quick.json``: where a smoke run writes, so that it never replaces the
    committed results."""
    return str(Path(tempfile.gettempdir()) / f"{name}_quick.json")


def parser(doc: str, *, out: Optional[str], quick: str, out_help: str = "JSON output path",
           full_doc: bool = False) -> argparse.ArgumentParser:
    """An argument parser with the flags every benchmark takes: ``--quick`` (help ``quick``) and
    ``--out`` (default ``out``). The description is the first line of ``doc`` (all of it, verbatim,
    with ``full_doc``)."""
    if full_doc:
        p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    else:
        p = argparse.ArgumentParser(description=doc.split("\n")[0])
    p.add_argument("--quick", action="store_true", help=quick)
    p.add_argument("--out", default=out, help=out_help)
    return p


def utc_date() -> str:
    """Now, UTC, ISO 8601 to the second: the ``date`` of every results JSON."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def result_header(name: str, *, device: torch.device | str, config: Any, key: str = "name") -> dict:
    """The keys a results JSON starts with: ``{key: name, "date", "hardware", "versions", "config"}``
    (``key`` is ``"benchmark"`` in the files that have always used that name)."""
    return {key: name, "date": utc_date(), "hardware": hardware(device), "versions": versions(),
            "config": config}


def cell(v: object, *, digits: int = 2, sci_at: float = float("inf"), sci_below: float = 0.0) -> str:
    """A table cell: ``-`` for None; a float in ``.3e`` when ``|v| >= sci_at`` or ``0 < |v| < sci_below``,
    else with ``digits`` decimals; anything else as ``str``."""
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3e}" if abs(v) >= sci_at or (v != 0 and abs(v) < sci_below) else f"{v:.{digits}f}"
    return str(v)


def print_table(rows: Iterable[dict], cols: Sequence[str], *, width: int, title: Optional[str] = None,
                fmt: Callable[[object], str] = cell) -> None:
    """``cols`` of ``rows`` as right-aligned columns of ``width`` characters, under an optional title."""
    if title is not None:
        print(title)
    print("  ".join(f"{c:>{width}}" for c in cols))
    for row in rows:
        print("  ".join(f"{fmt(row.get(c)):>{width}}" for c in cols))  # a missing cell prints as None does


def print_summary(summary: dict) -> None:
    print("\nsummary:", json.dumps(summary, indent=1, default=float))


def write_json(result: dict, out: str | Path) -> Path:
    """Write ``result`` as indented JSON (creating the folder) and say where."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, default=float) + "\n")
    print(f"\nwrote {out}")
    return out


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


# ---------------------------------------------------------------------------------------- timing
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


def time_host_seconds(fn: Callable[[], None], *, calls: int, repeats: int, warmup: int = 3) -> float:
    """Median over ``repeats`` of wall-clock seconds per call of ``fn`` (CPU paths)."""
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
    def sync() -> None:
        if torch.cuda.is_available():
            torch.cuda.synchronize()

    sync()
    t0 = time.perf_counter()
    result = algo.train()
    sync()
    return result, time.perf_counter() - t0


# ---------------------------------------------------------------------------------- sync counter
class SyncCount(NamedTuple):
    syncs: int
    """Warnings of ``torch.cuda.set_sync_debug_mode("warn")``: synchronizing CUDA calls."""
    waits: int
    """Explicit ``torch.cuda.Event.synchronize`` calls (a readback's event wait)."""
    result: Any
    """What the call returned."""


def count_syncs(fn: Callable[[], Any]) -> SyncCount:
    """Call ``fn`` once under sync debug mode "warn" (CUDA only) and count its synchronizing calls
    and explicit event waits. Pending work is synchronized first, outside the count."""
    waits = []
    original = torch.cuda.Event.synchronize

    def counting(self):
        waits.append(1)
        return original(self)

    torch.cuda.Event.synchronize = counting
    torch.cuda.synchronize()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                result = fn()
            finally:
                torch.cuda.set_sync_debug_mode("default")
    finally:
        torch.cuda.Event.synchronize = original
    # torch warns once per process that sync debug mode is a prototype: not a synchronization.
    syncs = sum("synchroniz" in str(w.message).lower() and "prototype" not in str(w.message) for w in caught)
    return SyncCount(syncs, len(waits), result)


def cuda_kernels_per_call(fn: Callable[[], None], *, calls: int) -> Optional[float]:
    """Device activities (kernels, memcpys, memsets; CUDA-graph nodes included) per call of ``fn``,
    counted by the torch profiler over one run of ``fn`` (None without CUDA). ``fn`` should be warm."""
    if not torch.cuda.is_available():
        return None
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sum(1 for e in prof.events() if e.device_type == DeviceType.CUDA) / calls

