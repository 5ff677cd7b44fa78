"""The ``layernorm_relu`` / ``layernorm_backward`` kernels: their twins are autograd's LayerNorm + ReLU
(CPU), their bind-time checks, and on the GPU the kernels against the twins (parity, NaN, no host
sync, graph replay, determinism)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from rl_zerosync.kernels import get_kernels
from rl_zerosync.kernels.layernorm import LN_MAX_BLOCKS, layernorm_part_numel, layernorm_rows_per_block

EPS = 1e-5


def _inputs(m: int, n: int, dev, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {"z": (torch.randn(m, n, generator=g) * 3.0 + 1.0).to(dev), "gamma": torch.randn(n, generator=g).to(dev),
            "beta": torch.randn(n, generator=g).to(dev), "dy": torch.randn(m, n, generator=g).to(dev)}


def _forward(k, x: dict, dev) -> tuple:
    m, n = x["z"].shape
    a, stats = torch.zeros(m, n, device=dev), torch.zeros(m, 2, device=dev)
    k.layernorm_relu([(x["z"], x["gamma"], x["beta"], a, stats)], eps=EPS)
    return a, stats


def _backward(k, x: dict, stats: torch.Tensor, dy: torch.Tensor, dev) -> tuple:
    m, n = x["z"].shape
    dz, dgamma, dbeta = torch.zeros(m, n, device=dev), torch.zeros(n, device=dev), torch.zeros(n, device=dev)
    part, done = torch.zeros(layernorm_part_numel(m, n), device=dev), torch.zeros(1, dtype=torch.int32, device=dev)
    k.layernorm_backward(dy, x["z"], stats, x["gamma"], dz, dgamma, dbeta, part, done)
    assert int(done[0]) == 0
    return dz, dgamma, dbeta


@pytest.mark.parametrize("m, n", [(1, 1), (5, 16), (40, 33)])
def test_twins_are_autograd_layernorm_relu(m, n):
    x = _inputs(m, n, "cpu", m + n)
    k = get_kernels("cpu")
    a, stats = _forward(k, x, "cpu")
    z, gamma, beta = (x[key].clone().requires_grad_(True) for key in ("z", "gamma", "beta"))
    y = F.layer_norm(z, (n,), gamma, beta, EPS)
    ref = torch.relu(y)
    assert torch.equal(a, ref.detach())
    torch.testing.assert_close(stats[:, 0], x["z"].mean(dim=1))
    torch.testing.assert_close(stats[:, 1], torch.rsqrt(x["z"].var(dim=1, unbiased=False) + EPS))
    dy = x["dy"] * (ref.detach() > 0)  # the ReLU's mask, as the linear kernel's dX applies it
    y.backward(dy)
    dz, dgamma, dbeta = _backward(k, x, stats, dy, "cpu")
    assert torch.equal(dz, z.grad) and torch.equal(dgamma, gamma.grad) and torch.equal(dbeta, beta.grad)


def test_rows_per_block_caps_the_blocks():
    for rows in (1, 8, 9, 512, 8192, 100_000):
        per = layernorm_rows_per_block(rows)
        assert per >= 8 and -(-rows // per) <= LN_MAX_BLOCKS
    assert layernorm_part_numel(512, 256) == 2 * 256 * 64


def test_bind_rejects_bad_buffers():
    k = get_kernels("cpu")
    x = _inputs(4, 8, "cpu")
    a, st = torch.zeros(4, 8), torch.zeros(4, 2)
    with pytest.raises(ValueError, match="jobs must be a list of 1 or 2"):
        k.bind_layernorm_relu([], eps=EPS)
    with pytest.raises(ValueError, match=r"jobs\[0\].gamma must have shape \[8\]"):
        k.bind_layernorm_relu([(x["z"], torch.zeros(7), x["beta"], a, st)], eps=EPS)
    with pytest.raises(ValueError, match=r"jobs\[0\].stats must have shape \[4, 2\]"):
        k.bind_layernorm_relu([(x["z"], x["gamma"], x["beta"], a, torch.zeros(4, 3))], eps=EPS)
    with pytest.raises(ValueError, match="eps must be > 0"):
        k.bind_layernorm_relu([(x["z"], x["gamma"], x["beta"], a, st)], eps=0.0)
    with pytest.raises(ValueError, match=r"jobs\[1\].z must have shape \[\*, 8\]"):
        k.bind_layernorm_relu([(x["z"], x["gamma"], x["beta"], a, st), (torch.zeros(4, 9),) * 5], eps=EPS)
    part, done = torch.zeros(layernorm_part_numel(4, 8)), torch.zeros(1, dtype=torch.int32)
    good = dict(dy=x["dy"], z=x["z"], stats=st, gamma=x["gamma"], dz=torch.zeros(4, 8), dgamma=torch.zeros(8),
                dbeta=torch.zeros(8), part=part, blocks_done=done)
    k.bind_layernorm_backward(**good)
    for field, bad, match in (("z", torch.zeros(4, 7), r"z must have shape \[4, 8\]"),
                              ("dgamma", torch.zeros(8, dtype=torch.float64), "dgamma must have dtype torch.float32"),
                              ("part", torch.zeros(3), "part must have at least"),
                              ("blocks_done", torch.zeros(1), "blocks_done must have dtype torch.int32"),
                              ("dy", torch.zeros(8, 4).t(), "dy must be contiguous")):
        with pytest.raises(ValueError, match=match):
            k.bind_layernorm_backward(**{**good, field: bad})


@pytest.mark.gpu
@pytest.mark.parametrize("m, n", [(1, 1), (7, 33), (512, 256), (1024, 256), (8192, 512), (3000, 64)])
def test_kernels_match_the_twins(m, n):
    dev = torch.device("cuda", torch.cuda.current_device())
    x = _inputs(m, n, dev, m)
    kc, kt = get_kernels(dev, backend="cuda"), get_kernels(dev, backend="torch")
    a_c, st_c = _forward(kc, x, dev)
    a_t, st_t = _forward(kt, x, dev)
    torch.testing.assert_close(a_c, a_t, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(st_c, st_t, rtol=1e-5, atol=1e-6)
    dy = x["dy"] * (a_t > 0)
    dz_c, dg_c, db_c = _backward(kc, x, st_t, dy, dev)
    dz_t, dg_t, db_t = _backward(kt, x, st_t, dy, dev)
    torch.testing.assert_close(dz_c, dz_t, rtol=1e-4, atol=1e-5)
    tol = 1e-5 * m ** 0.5 * 4
    torch.testing.assert_close(dg_c, dg_t, rtol=1e-4, atol=tol)
    torch.testing.assert_close(db_c, db_t, rtol=1e-4, atol=tol)
    again = _backward(kc, x, st_t, dy, dev)  # deterministic: the same bits again
    assert all(torch.equal(p, q) for p, q in zip(again, (dz_c, dg_c, db_c)))


@pytest.mark.gpu
def test_nan_stays_nan_and_two_jobs_use_their_own_parameters():
    dev = torch.device("cuda", torch.cuda.current_device())
    kc, kt = get_kernels(dev, backend="cuda"), get_kernels(dev, backend="torch")
    x, y = _inputs(10, 32, dev, 1), _inputs(6, 32, dev, 2)
    x["z"][3, 5] = float("nan")
    outs = []
    for k in (kc, kt):
        bufs = [(torch.zeros(10, 32, device=dev), torch.zeros(10, 2, device=dev)),
                (torch.zeros(6, 32, device=dev), torch.zeros(6, 2, device=dev))]
        k.layernorm_relu([(x["z"], x["gamma"], x["beta"], *bufs[0]), (y["z"], y["gamma"], y["beta"], *bufs[1])],
                         eps=EPS)
        outs.append(bufs)
    assert torch.isnan(outs[0][0][0][3]).all()  # the row's mean is NaN: every output of the row
    assert not torch.isnan(outs[0][0][0][:3]).any()
    torch.testing.assert_close(outs[0][1][0], outs[1][1][0], rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
def test_no_sync_and_graph_replay():
    dev = torch.device("cuda", torch.cuda.current_device())
    kc = get_kernels(dev, backend="cuda")
    kc.warmup()
    m, n = 512, 256
    x = _inputs(m, n, dev)
    a, st = torch.zeros(m, n, device=dev), torch.zeros(m, 2, device=dev)
    dz, dg, db = torch.zeros(m, n, device=dev), torch.zeros(n, device=dev), torch.zeros(n, device=dev)
    part, done = torch.zeros(layernorm_part_numel(m, n), device=dev), torch.zeros(1, dtype=torch.int32, device=dev)
    fwd = kc.bind_layernorm_relu([(x["z"], x["gamma"], x["beta"], a, st)], eps=EPS)
    bwd = kc.bind_layernorm_backward(x["dy"], x["z"], st, x["gamma"], dz, dg, db, part, done)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        fwd()
        bwd()
    finally:
        torch.cuda.set_sync_debug_mode(0)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        fwd()
        bwd()
    torch.cuda.current_stream().wait_stream(stream)
    for step in range(3):
        x["z"].normal_()
        x["dy"].normal_()
        graph.replay()
        torch.cuda.synchronize()
        got = [t.clone() for t in (a, st, dz, dg, db)]
        fwd()
        bwd()
        torch.cuda.synchronize()
        assert all(torch.equal(g, e) for g, e in zip(got, (a, st, dz, dg, db))), step
        assert int(done[0]) == 0
