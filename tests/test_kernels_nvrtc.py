"""Every .cu source compiles to PTX with NVRTC on this machine (no GPU or driver needed)."""
from __future__ import annotations

import re

import pytest

from rl_zerosync.kernels import compile as kc


def _nvrtc_or_skip():
    try:
        return kc.load_nvrtc()
    except Exception as exc:  # no cupy / no libnvrtc at all: nothing to check here
        pytest.skip(f"NVRTC cannot be loaded: {exc!r}")


def test_every_cu_file_is_listed():
    on_disk = sorted(p.name for p in kc.KERNEL_DIR.glob("*.cu"))
    assert on_disk == sorted(kc.KERNELS_BY_FILE)
    assert sorted(p.name for p in kc.KERNEL_DIR.glob("*.cuh")) == sorted(kc.HEADERS)


@pytest.mark.parametrize("filename", sorted(kc.KERNELS_BY_FILE))
@pytest.mark.parametrize("arch", ["compute_90", "compute_80"])
def test_cu_compiles_to_ptx(filename, arch):
    _nvrtc_or_skip()
    ptx = kc.compile_ptx(kc.kernel_source(filename), filename, arch=arch)
    entries = set(re.findall(r"\.entry\s+(\w+)", ptx))
    assert entries == set(kc.KERNELS_BY_FILE[filename])


def test_headers_compile_alone():
    _nvrtc_or_skip()
    for header in kc.HEADERS:
        kc.compile_ptx(kc.kernel_source(header), header)


def test_broken_source_reports_file_and_line():
    _nvrtc_or_skip()
    broken = kc.kernel_source("route.cu").replace('#line 1 "route.cu"\n', '#line 1 "broken.cu"\n')
    lines = broken.split("\n")
    start = lines.index('#line 1 "broken.cu"')
    lines.insert(start + 3, "this is not CUDA;")  # becomes line 3 of broken.cu
    with pytest.raises(kc.KernelCompileError, match=r"broken\.cu\(3\)"):
        kc.compile_ptx("\n".join(lines), "broken.cu")


def test_unknown_identifier_fails():
    _nvrtc_or_skip()
    src = 'extern "C" __global__ void k(float* x) {\n  x[0] = undefined_name;\n}\n'
    with pytest.raises(kc.KernelCompileError, match=r"t\.cu\(2\).*undefined_name"):
        kc.compile_ptx(src, "t.cu")


def test_unknown_source_name():
    with pytest.raises(ValueError, match="unknown kernel source"):
        kc.kernel_source("nope.cu")
