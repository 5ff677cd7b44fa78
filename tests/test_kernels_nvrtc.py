"""The CUDA sources: generated defines cover every constant they use (no NVRTC needed), and every
source compiles to PTX with NVRTC on this machine (no GPU or driver needed)."""
from __future__ import annotations

import re

import pytest

from rl_zerosync.kernels import compile as kc
from rl_zerosync.kernels.api import SOURCES
from rl_zerosync.kernels.layouts import LAYOUTS

MACRO = re.compile(r"\b[A-Z][A-Z0-9_]+\b")
DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)(?:[ \t]+(.*?))?[ \t]*$", re.M)


def _nvrtc_or_skip():
    try:
        return kc.load_nvrtc()
    except Exception as exc:  # no cupy / no libnvrtc at all: nothing to check here
        pytest.skip(f"NVRTC cannot be loaded: {exc!r}")


def _code(filename: str) -> str:
    """A source file without its comments."""
    text = (kc.KERNEL_DIR / filename).read_text()
    return re.sub(r"//[^\n]*|/\*.*?\*/", "", text, flags=re.S)


def _defined_in_sources(filename: str) -> set[str]:
    return {m.group(1) for f in (*kc.HEADERS, filename) for m in DEFINE.finditer(_code(f))}


def test_every_cu_file_is_listed():
    on_disk = sorted(p.name for p in kc.KERNEL_DIR.glob("*.cu"))
    assert on_disk == sorted(SOURCES)
    assert sorted(p.name for p in kc.KERNEL_DIR.glob("*.cuh")) == sorted(kc.HEADERS)


@pytest.mark.parametrize("filename", sorted(SOURCES))
def test_generated_defines_cover_every_constant_the_source_uses(filename):
    """Every macro-like name a source uses (headers included) is defined by the sources themselves
    or by the defines generated from the Python constants, and the two sets do not overlap."""
    generated = {m.group(1): m.group(2) for m in DEFINE.finditer(kc.defines_text(SOURCES[filename]))}
    own = _defined_in_sources(filename)
    used = {name for f in (*kc.HEADERS, filename) for name in MACRO.findall(_code(f))}
    assert not used - own - set(generated), f"{filename}: constants defined nowhere"
    assert not own & set(generated), f"{filename}: constants defined twice"
    assert kc.kernel_source(SOURCES[filename]).startswith(f'#line 1 "{kc.DEFINES_NAME}"\n')


def test_generated_defines_are_the_python_values():
    text = kc.defines_text(SOURCES["qstats.cu"])
    generated = {m.group(1): m.group(2) for m in DEFINE.finditer(text)}
    for layout in LAYOUTS:
        for name, value in layout.defines().items():
            assert generated[name] == str(value)
    assert generated["ZS_QSTATS_BLOCK"] == "256" and generated["ZS_QPART_SIZE"] == "5"
    assert generated["ZS_GOLDEN"] == "2654435769u" and generated["ZS_HASH_MUL"] == str(0x45D9F3B)
    assert generated["ZS_ORDER_PASSIVE"] == "2" and generated["ZS_INT32_MAX"] == "2147483647"
    assert "ZS_QSTATS_BLOCK" not in kc.defines_text(SOURCES["route.cu"])  # a source's own constants stay its own
    assert kc.c_literal(2.0**-24) == "0x1.0000000000000p-24f"
    for bad in (True, -1, 2**32, "3"):
        with pytest.raises(ValueError, match="define"):
            kc.c_literal(bad)


def test_source_defines_may_not_shadow_shared_ones():
    with pytest.raises(ValueError, match="already shared defines"):
        kc.CudaSource("route.cu", ("zs_route",), defines={"ZS_RECORD_SIZE": 6})


@pytest.mark.parametrize("filename", sorted(SOURCES))
@pytest.mark.parametrize("arch", ["compute_90", "compute_80"])
def test_cu_compiles_to_ptx(filename, arch):
    _nvrtc_or_skip()
    source = SOURCES[filename]
    ptx = kc.compile_ptx(kc.kernel_source(source), filename, arch=arch)
    entries = set(re.findall(r"\.entry\s+(\w+)", ptx))
    assert entries == set(source.kernels)


def test_headers_compile_alone():
    _nvrtc_or_skip()
    for header in kc.HEADERS:
        kc.compile_ptx(kc.kernel_source(kc.CudaSource(header, ())), header)


def test_broken_source_reports_file_and_line():
    _nvrtc_or_skip()
    broken = kc.kernel_source(SOURCES["route.cu"]).replace('#line 1 "route.cu"\n', '#line 1 "broken.cu"\n')
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
        kc.CudaSource("nope.cu", ())
