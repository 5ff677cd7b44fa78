"""Import a module of the ``benchmarks`` package in a test: ``bench_module("common")`` is
``benchmarks.common``, however pytest was started (``python -m pytest`` puts the repository root on
``sys.path``, the ``pytest`` command does not: the package is then loaded from its folder)."""
from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _package() -> ModuleType:
    """The ``benchmarks`` package of this repository."""
    pkg = sys.modules.get("benchmarks")
    if pkg is None:
        try:
            pkg = importlib.import_module("benchmarks")
        except ImportError:
            spec = importlib.util.spec_from_file_location(
                "benchmarks", BENCHMARKS / "__init__.py", submodule_search_locations=[str(BENCHMARKS)])
            pkg = importlib.util.module_from_spec(spec)
            sys.modules["benchmarks"] = pkg
            spec.loader.exec_module(pkg)
    if Path(pkg.__file__).resolve().parent != BENCHMARKS:
        raise ImportError(f"'benchmarks' resolves to {pkg.__file__}, not {BENCHMARKS}")
    return pkg


def bench_module(name: str) -> ModuleType:
    """``benchmarks.<name>``, imported once."""
    _package()
    return importlib.import_module(f"benchmarks.{name}")
