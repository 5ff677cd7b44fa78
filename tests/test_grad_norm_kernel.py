"""The ``grad_norm`` kernel: its twin is torch's two-stage norm (CPU), its bind-time checks, and on the
GPU the kernel against the twin (parity, Inf / NaN, no host sync, graph replay)."""
from __future__ import annotations

import pytest
import torch

from rl_zerosync.kernels import get_kernels
from rl_zerosync.kernels.grad_norm import NORM_CHUNK


def _bufs(n: int, dev, seed: int = 0, scale: float = 1.0) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {"x": (torch.randn(n, generator=g) * scale).to(dev),
            "row_norms": torch.zeros(n // NORM_CHUNK, device=dev), "out": torch.zeros(1, device=dev),
            "blocks_done": torch.zeros(1, dtype=torch.int32, device=dev)}


@pytest.mark.parametrize("rows", (1, 3, 43))
def test_twin_is_the_two_stage_torch_norm(rows):
    b = _bufs(rows * NORM_CHUNK, "cpu", rows)
    get_kernels("cpu").grad_norm(**b)
    rn = torch.linalg.vector_norm(b["x"].view(rows, NORM_CHUNK), dim=1)
    assert torch.equal(b["row_norms"], rn)
    assert torch.equal(b["out"], torch.linalg.vector_norm(rn).reshape(1))
    assert b["out"].item() == pytest.approx(torch.linalg.vector_norm(b["x"].double()).item(), rel=1e-5)


@pytest.mark.parametrize("field, bad, match", [
    ("x", torch.zeros(NORM_CHUNK + 1), "positive multiple of NORM_CHUNK"),
    ("x", torch.zeros(0), "positive multiple of NORM_CHUNK"),
    ("x", torch.zeros(NORM_CHUNK, dtype=torch.float64), "x must have dtype torch.float32"),
    ("row_norms", torch.zeros(2), r"row_norms must have shape \[1\]"),
    ("out", torch.zeros(2), r"out must have shape \[1\]"),
    ("blocks_done", torch.zeros(1), "blocks_done must have dtype torch.int32"),
])
def test_bind_rejects_bad_buffers(field, bad, match):
    b = _bufs(NORM_CHUNK, "cpu")
    b[field] = bad
    with pytest.raises(ValueError, match=match):
        get_kernels("cpu").bind_grad_norm(**b)


@pytest.mark.gpu
@pytest.mark.parametrize("rows", (1, 2, 43, 300, 5000))
@pytest.mark.parametrize("scale", (1e-3, 1.0, 1e3))
def test_kernel_parity(rows, scale):
    dev = torch.device("cuda", torch.cuda.current_device())
    c, t = _bufs(rows * NORM_CHUNK, dev, rows, scale), _bufs(rows * NORM_CHUNK, dev, rows, scale)
    get_kernels(dev, backend="cuda").grad_norm(**c)
    get_kernels(dev, backend="torch").grad_norm(**t)
    torch.testing.assert_close(c["row_norms"], t["row_norms"], rtol=2e-6, atol=0)
    torch.testing.assert_close(c["out"], t["out"], rtol=2e-6, atol=0)
    assert int(c["blocks_done"][0]) == 0


@pytest.mark.gpu
@pytest.mark.parametrize("bad, expect", [(float("inf"), "inf"), (float("nan"), "nan")])
def test_kernel_nonfinite(bad, expect):
    dev = torch.device("cuda", torch.cuda.current_device())
    c = _bufs(7 * NORM_CHUNK, dev)
    c["x"][5 * NORM_CHUNK + 17] = bad
    get_kernels(dev, backend="cuda").grad_norm(**c)
    v = c["out"].item()
    assert (v == float("inf")) if expect == "inf" else (v != v)


@pytest.mark.gpu
def test_kernel_no_sync_and_graph_replay():
    dev = torch.device("cuda", torch.cuda.current_device())
    kc = get_kernels(dev, backend="cuda")
    kc.warmup()
    graphed, eager = _bufs(43 * NORM_CHUNK, dev), _bufs(43 * NORM_CHUNK, dev)
    launch = kc.bind_grad_norm(**graphed)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        kc.grad_norm(**eager)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        launch()
    torch.cuda.current_stream().wait_stream(stream)
    for step in range(3):
        graphed["x"].normal_()
        eager["x"].copy_(graphed["x"])
        graph.replay()
        kc.grad_norm(**eager)
        torch.cuda.synchronize()
        assert torch.equal(graphed["out"], eager["out"]) and int(graphed["blocks_done"][0]) == 0, step
