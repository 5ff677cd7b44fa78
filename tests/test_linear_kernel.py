"""The ``linear_forward`` / ``linear_backward`` kernels (``kernels/linear.cu``) and their users.

CPU: the twins against autograd on a small MLP (row-strided inputs, NaN semantics), the launch plan
(reduction splits, scratch and counters), the bind-time checks, ``mlp_kernel_blocker`` and
``MLPKernels`` on the twins. GPU: the kernels against the twins over a grid of shapes (splits,
1-3 jobs, strided rows, counters left 0, determinism), NaN semantics, no host sync, CUDA-graph
replay, and a learner whose update runs on the kernels against one on torch's forward and autograd.
"""
from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from ray.rllib.algorithms.dqn import DQNConfig

from rl_zerosync.kernels import get_kernels
from rl_zerosync.kernels.linear import (MAX_JOBS, MAX_SPLITS, MIN_SPLIT, PART, TARGET_BLOCKS, Gemm,
                                        backward_gemms, forward_gemms, plan, splits, workspace)
from rl_zerosync.learner import ZeroSyncDQNTorchLearner
from rl_zerosync.learner.mlp import MLPKernels, mlp_kernel_blocker
from rl_zerosync.module import make_module_spec

from learner_helpers import OBS_DIM  # noqa: E402

NAN = float("nan")
RAY_INIT = {"num_cpus": 8, "ignore_reinit_error": True}
"""``ray_local``'s ``ray.init`` arguments (the GPU learner test only; RLlib asks Ray for its GPU)."""


def _tiles(g: Gemm) -> int:
    return math.ceil(g.m / 64) * math.ceil(g.n / 64)


def _padded(t: torch.Tensor, left: int = 3, right: int = 5) -> torch.Tensor:
    """``t`` as a column slice of a wider NaN-filled tensor (row stride ``cols + left + right``), like the
    replay's packed rows: a kernel that reads outside the slice gets NaN."""
    wide = torch.full((t.shape[0], t.shape[1] + left + right), NAN, dtype=t.dtype, device=t.device)
    wide[:, left:left + t.shape[1]] = t
    view = wide[:, left:left + t.shape[1]]
    assert view.stride() == (t.shape[1] + left + right, 1)
    return view


def _workspace(launches, dev, fill: float = 0.0):
    """Scratch (float32, ``fill``: the kernels must not rely on its content) and zeroed counters."""
    s, c = workspace(launches)
    return (torch.full((s,), fill, dtype=torch.float32, device=dev),
            torch.zeros(c, dtype=torch.int32, device=dev))


# ============================================================================= CPU: the twins
def _mlp(seed: int, sizes=(7, 33, 20, 5)) -> nn.Sequential:
    torch.manual_seed(seed)
    layers = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def _linears(net: nn.Sequential):
    return [m for m in net if isinstance(m, nn.Linear)]


def test_twin_forward_is_the_torch_forward_per_layer():
    """Per layer one launch of three jobs (online on x, online on other rows, target on those rows),
    ReLU fused on the hidden layers; x a row-strided column slice."""
    online, target = _mlp(0), _mlp(1)
    k = get_kernels("cpu")
    g = torch.Generator().manual_seed(2)
    x = _padded(torch.randn(11, 7, generator=g))
    x2 = torch.randn(6, 7, generator=g)
    h = [x, x2, x2]
    lo, lt = _linears(online), _linears(target)
    for i, (a, t) in enumerate(zip(lo, lt)):
        n = a.weight.shape[0]
        ys = [torch.full((r.shape[0], n), 7.0) for r in h]
        jobs = [(h[0], a.weight.detach(), a.bias.detach(), ys[0]), (h[1], a.weight.detach(), a.bias.detach(), ys[1]),
                (h[2], t.weight.detach(), t.bias.detach(), ys[2])]
        scratch, counters = _workspace([forward_gemms(jobs)], "cpu")
        k.bind_linear_forward(jobs, scratch, counters, relu=i < len(lo) - 1)()
        h = ys
    with torch.no_grad():
        torch.testing.assert_close(h[0], online(x))
        torch.testing.assert_close(h[1], online(x2))
        torch.testing.assert_close(h[2], target(x2))
        assert not torch.allclose(h[1], h[2])


def test_twin_forward_relu_off_keeps_negatives_and_relu_keeps_nan():
    k = get_kernels("cpu")
    x = torch.tensor([[1.0, -2.0], [NAN, 0.0], [0.5, 0.5]])
    w = torch.tensor([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0]])
    b = torch.zeros(3)
    y, y_relu = torch.zeros(3, 3), torch.zeros(3, 3)
    scratch, counters = _workspace([[Gemm(3, 3, 2)]], "cpu")
    k.linear_forward([(x, w, b, y)], scratch, counters, relu=False)
    k.linear_forward([(x, w, b, y_relu)], scratch, counters, relu=True)
    ref = x @ w.t()
    torch.testing.assert_close(y, ref, equal_nan=True)
    torch.testing.assert_close(y_relu, torch.relu(ref), equal_nan=True)
    assert float(y[0, 1]) == -1.0 and float(y_relu[0, 1]) == 0.0
    assert torch.isnan(y_relu[1]).all()  # torch.relu(NaN) is NaN, not 0


def test_twin_backward_is_autograds_gradient():
    """From dL/dQ down the layers: dW, db and the dX of each layer (the previous layer's gradient at
    its pre-activation, ReLU mask applied) equal autograd's; dq and x row-strided."""
    net = _mlp(3)
    l1, l2, l3 = _linears(net)
    g = torch.Generator().manual_seed(4)
    x = _padded(torch.randn(13, 7, generator=g))
    dq = _padded(torch.randn(13, 5, generator=g), left=1, right=2)
    z1 = l1(x)
    h1 = torch.relu(z1)
    z2 = l2(h1)
    h2 = torch.relu(z2)
    q = l3(h2)
    for z in (z1, z2):
        z.retain_grad()
    q.backward(dq)
    assert (h1 == 0).any() and (h2 == 0).any()  # the masks matter

    k = get_kernels("cpu")
    dw = [torch.full_like(m.weight, NAN) for m in (l1, l2, l3)]
    db = [torch.full_like(m.bias, NAN) for m in (l1, l2, l3)]
    dz2, dz1 = torch.full((13, 20), NAN), torch.full((13, 33), NAN)
    h1, h2 = h1.detach(), h2.detach()
    calls = [(dq, h2, l3.weight.detach(), dw[2], db[2], dz2), (dz2, h1, l2.weight.detach(), dw[1], db[1], dz1),
             (dz1, x, l1.weight.detach(), dw[0], db[0], None)]
    launchers = []
    for c in calls:
        scratch, counters = _workspace([backward_gemms(c[0], c[1], c[5] is not None)], "cpu")
        launchers.append(k.bind_linear_backward(*c, scratch, counters))
    for launch in launchers:
        launch()
    torch.testing.assert_close(dz2, z2.grad)
    torch.testing.assert_close(dz1, z1.grad)
    for m, gw, gb in zip((l1, l2, l3), dw, db):
        torch.testing.assert_close(gw, m.weight.grad)
        torch.testing.assert_close(gb, m.bias.grad)


def test_twin_backward_masks_nan_where_the_input_is_not_positive():
    """dx is exactly 0 where x <= 0, even where dz @ w is NaN (torch.where), NaN where x > 0."""
    k = get_kernels("cpu")
    g = torch.Generator().manual_seed(5)
    x = torch.relu(torch.randn(6, 8, generator=g))
    x[2, 3] = -1.0  # x <= 0 also masks a negative input
    dz = torch.randn(6, 4, generator=g)
    dz[2, 1] = NAN
    w = torch.randn(4, 8, generator=g)
    dw, db, dx = torch.zeros(4, 8), torch.zeros(4), torch.full((6, 8), 7.0)
    scratch, counters = _workspace([backward_gemms(dz, x, True)], "cpu")
    k.linear_backward(dz, x, w, dw, db, dx, scratch, counters)
    off = x[2] <= 0
    assert off.any() and (~off).any()
    assert torch.equal(dx[2][off], torch.zeros(int(off.sum())))
    assert torch.isnan(dx[2][~off]).all()
    assert torch.isfinite(dx[[0, 1, 3, 4, 5]]).all()
    assert torch.isnan(db[1]) and torch.isfinite(db[[0, 2, 3]]).all()
    assert torch.isnan(dw[1][x[2] != 0]).all() and torch.isfinite(dw[[0, 2, 3]]).all()


def test_twin_backward_keeps_the_gradient_where_the_input_is_nan_as_relus_backward():
    """torch's ReLU backward (threshold_backward) zeroes where x <= 0 only: a NaN x keeps dz @ w."""
    k = get_kernels("cpu")
    g = torch.Generator().manual_seed(6)
    x = torch.relu(torch.randn(5, 8, generator=g))
    x[4, 0] = NAN
    dz, w = torch.randn(5, 4, generator=g), torch.randn(4, 8, generator=g)
    dw, db, dx = torch.zeros(4, 8), torch.zeros(4), torch.zeros(5, 8)
    scratch, counters = _workspace([backward_gemms(dz, x, True)], "cpu")
    k.linear_backward(dz, x, w, dw, db, dx, scratch, counters)
    assert torch.equal(dx, torch.ops.aten.threshold_backward(dz @ w, x, 0.0))
    assert torch.isfinite(dx[4, 0]) and dx[4, 0] != 0


# ============================================================================= CPU: the plan
PLAN_CASES = [
    [Gemm(1, 1, 1)],
    [Gemm(8192, 256, 256)],  # 512 tiles: no split
    [Gemm(256, 256, 512)],  # a thin dW job: 16 tiles
    [Gemm(256, 256, 8192)],
    [Gemm(64, 64, 4096)],  # one tile: as many splits as MIN_SPLIT allows
    [Gemm(256, 256, 512), Gemm(512, 256, 256)],  # dW + dX of one backward
    [Gemm(1024, 256, 256), Gemm(512, 256, 256), Gemm(512, 256, 256)],
    [Gemm(7, 5, 32), Gemm(9, 5, 32), Gemm(3, 5, 32)],
    [Gemm(100, 70, 1000)],
    [Gemm(45, 256, 65)],
]


@pytest.mark.parametrize("jobs", PLAN_CASES, ids=lambda j: "+".join(f"{g.m}x{g.n}x{g.k}" for g in j))
def test_plan_invariants(jobs):
    s = splits(jobs)
    p = plan(jobs)
    tiles = [_tiles(g) for g in jobs]
    assert p.splits == s and len(s) == len(jobs)
    for g, sj in zip(jobs, s):
        # every chunk about MIN_SPLIT long or longer, at most MAX_SPLITS of them
        assert 1 <= sj <= min(MAX_SPLITS, math.ceil(g.k / MIN_SPLIT)), (g, sj)
    if len(jobs) == 1 and tiles[0] >= TARGET_BLOCKS:
        assert s == (1,)  # enough blocks already
    # The launch aims for TARGET_BLOCKS: no more than about twice that (or its tile count).
    assert p.blocks <= 2 * max(TARGET_BLOCKS, sum(tiles))
    if len(jobs) == 1:  # ... and reaches it unless the caps stop it
        cap = min(MAX_SPLITS, math.ceil(jobs[0].k / MIN_SPLIT))
        assert p.blocks >= min(TARGET_BLOCKS, tiles[0] * cap)
    assert p.blocks == sum(t * sj for t, sj in zip(tiles, s))
    split_jobs = [(t, sj) for t, sj in zip(tiles, s) if sj > 1]
    assert p.scratch_numel == sum(t * sj * PART for t, sj in split_jobs)
    assert p.counters_numel == sum(t for t, _ in split_jobs)
    part = count = 0
    for t, sj, po, co in zip(tiles, s, p.part_offsets, p.counter_offsets):
        assert (po, co) == (part, count)
        if sj > 1:
            part, count = part + t * sj * PART, count + t
    assert workspace([jobs]) == (max(1, p.scratch_numel), max(1, p.counters_numel))


def test_plan_examples():
    assert splits([Gemm(8192, 256, 256)]) == (1,)  # 512 tiles
    assert splits([Gemm(1536, 256, 256)] * 3) == (1, 1, 1)  # 3 x 96 full tiles of one k
    assert splits([Gemm(1, 1, 1)]) == (1,)
    assert splits([Gemm(7, 5, 32)]) == (1,)  # k < 2 * MIN_SPLIT: nothing to split
    thin = splits([Gemm(256, 256, 512)])[0]  # a weight gradient over 512 rows: 16 tiles
    assert 1 < thin <= 512 // MIN_SPLIT
    p = plan([Gemm(256, 256, 512)])
    assert (p.blocks, p.scratch_numel, p.counters_numel) == (16 * thin, 16 * thin * PART, 16)
    assert splits([Gemm(64, 64, 1 << 20)]) == (MAX_SPLITS,)
    # dW over a large batch next to a dX of many tiles: the long reduction is the one split.
    s_dw, s_dx = splits(backward_gemms(torch.zeros(8192, 45), torch.zeros(8192, 256), True))
    assert s_dw > 1 and s_dx == 1


def test_gemms_of_the_launches_and_workspace_takes_the_max():
    x, w, b, y = torch.zeros(10, 7), torch.zeros(4, 7), torch.zeros(4), torch.zeros(10, 4)
    x2, y2 = torch.zeros(3, 7), torch.zeros(3, 4)
    assert forward_gemms([(x, w, b, y), (x2, w, b, y2)]) == [Gemm(10, 4, 7), Gemm(3, 4, 7)]
    dz, xin = torch.zeros(12, 5), torch.zeros(12, 9)
    assert backward_gemms(dz, xin, False) == [Gemm(5, 9, 12)]
    assert backward_gemms(dz, xin, True) == [Gemm(5, 9, 12), Gemm(12, 9, 5)]
    launches = [[Gemm(256, 256, 512)], [Gemm(64, 64, 4096)], [Gemm(8192, 256, 256)],
                [Gemm(256, 256, 512), Gemm(512, 256, 256)]]
    plans = [plan(j) for j in launches]
    assert workspace(launches) == (max(p.scratch_numel for p in plans), max(p.counters_numel for p in plans))
    assert workspace(launches)[0] > 0 and workspace(launches[::-1]) == workspace(launches)
    assert workspace([[Gemm(8192, 256, 256)]]) == (1, 1)  # never an empty buffer


# ============================================================================= CPU: bind-time checks
def _fwd_args(rows: int = 6, n: int = 3, k: int = 4) -> dict:
    jobs = [[torch.zeros(rows, k), torch.zeros(n, k), torch.zeros(n), torch.zeros(rows, n)]]
    scratch, counters = _workspace([forward_gemms(jobs)], "cpu")
    return {"jobs": jobs, "scratch": scratch, "counters": counters, "relu": True}


def _bwd_args(rows: int = 6, n: int = 3, k: int = 4) -> dict:
    args = {"dz": torch.zeros(rows, n), "x": torch.zeros(rows, k), "w": torch.zeros(n, k), "dw": torch.zeros(n, k),
            "db": torch.zeros(n), "dx": torch.zeros(rows, k)}
    args["scratch"], args["counters"] = _workspace([backward_gemms(args["dz"], args["x"], True)], "cpu")
    return args


FWD_BAD = [
    ("w", torch.zeros(3, 4, dtype=torch.float64), r"jobs\[0\]\.w must have dtype torch\.float32"),
    ("w", torch.zeros(4, 3).t(), r"jobs\[0\]\.w must be contiguous"),
    ("b", torch.zeros(4), r"jobs\[0\]\.b must have shape \[3\]"),
    ("b", torch.zeros(3, dtype=torch.float16), r"jobs\[0\]\.b must have dtype"),
    ("x", torch.zeros(6, 5), r"jobs\[0\]\.x must have shape \[\*, 4\]"),
    ("x", torch.zeros(6, 4, dtype=torch.float64), r"jobs\[0\]\.x must have dtype torch\.float32"),
    ("x", torch.zeros(4, 6).t(), r"jobs\[0\]\.x must have a contiguous last dimension"),
    ("x", torch.zeros(6, 4, 1), r"jobs\[0\]\.x must have shape"),
    ("x", [[0.0] * 4] * 6, r"jobs\[0\]\.x must be a torch\.Tensor"),
    ("y", torch.zeros(5, 3), r"jobs\[0\]\.y must have shape \[6, 3\]"),
    ("y", torch.zeros(6, 8)[:, 2:5], r"jobs\[0\]\.y must be contiguous"),
    ("y", torch.zeros(6, 3, dtype=torch.int32), r"jobs\[0\]\.y must have dtype"),
]


@pytest.mark.parametrize("field, bad, match", FWD_BAD)
def test_bind_forward_names_the_bad_argument(field, bad, match):
    args = _fwd_args()
    args["jobs"][0]["xwby".index(field)] = bad
    with pytest.raises(ValueError, match=match):
        get_kernels("cpu").bind_linear_forward(**args)


def test_bind_forward_checks_jobs_relu_and_workspace():
    k = get_kernels("cpu")
    args = _fwd_args()
    job = args["jobs"][0]
    for jobs in ([], [job] * (MAX_JOBS + 1), tuple(job), "jobs"):
        with pytest.raises(ValueError, match=rf"jobs must be a list of 1 to {MAX_JOBS}"):
            k.bind_linear_forward(**{**args, "jobs": jobs})
    with pytest.raises(ValueError, match=r"jobs\[1\] must be an \(x, w, b, y\) tuple"):
        k.bind_linear_forward(**{**args, "jobs": [job, job[:3]]})
    other = [torch.zeros(6, 4), torch.zeros(2, 4), torch.zeros(2), torch.zeros(6, 2)]  # another n
    with pytest.raises(ValueError, match=r"jobs\[1\]\.w must have shape \[3, 4\]"):
        k.bind_linear_forward(**{**args, "jobs": [job, other]})
    with pytest.raises(ValueError, match=r"jobs\[0\]\.x must have at least one row"):
        k.bind_linear_forward(**{**args, "jobs": [[torch.zeros(0, 4), job[1], job[2], torch.zeros(0, 3)]]})
    with pytest.raises(ValueError, match=r"jobs\[0\]\.w must have at least one row and one column"):
        k.bind_linear_forward(**{**args, "jobs": [[torch.zeros(6, 0), torch.zeros(3, 0), job[2], job[3]]]})
    for relu in (1, None, "yes", np.bool_(True)):
        with pytest.raises(ValueError, match="relu must be a bool"):
            k.bind_linear_forward(**{**args, "relu": relu})
    # A one-tile job over k = 512: split, its partial tiles in scratch, one counter.
    big = _fwd_args(rows=64, n=64, k=512)
    p = plan(forward_gemms(big["jobs"]))
    assert p.splits[0] > 1 and p.scratch_numel == p.splits[0] * PART and p.counters_numel == 1
    with pytest.raises(ValueError, match=rf"scratch must have at least {p.scratch_numel} elements"):
        k.bind_linear_forward(**{**big, "scratch": torch.zeros(p.scratch_numel - 1)})
    with pytest.raises(ValueError, match="scratch must have dtype torch.float32"):
        k.bind_linear_forward(**{**big, "scratch": torch.zeros(p.scratch_numel, dtype=torch.float64)})
    with pytest.raises(ValueError, match="counters must have at least 1 elements"):
        k.bind_linear_forward(**{**big, "counters": torch.zeros(0, dtype=torch.int32)})
    with pytest.raises(ValueError, match="counters must have dtype torch.int32"):
        k.bind_linear_forward(**{**big, "counters": torch.zeros(1, dtype=torch.int64)})
    # What is accepted: 1 to MAX_JOBS jobs, row-strided x, a row slice of a contiguous y.
    y = torch.zeros(12, 3)
    ok = [[_padded(torch.zeros(6, 4)), job[1], job[2], y[:6]], [torch.zeros(6, 4), job[1], job[2], y[6:]],
          [torch.zeros(1, 4), torch.ones(3, 4), torch.ones(3), torch.zeros(1, 3)]]
    scratch, counters = _workspace([forward_gemms(ok)], "cpu")
    k.bind_linear_forward(ok, scratch, counters, relu=False)()
    assert torch.equal(ok[2][3], torch.full((1, 3), 1.0))


BWD_BAD = [
    ("w", torch.zeros(3, 4, dtype=torch.float64), "w must have dtype torch.float32"),
    ("w", torch.zeros(3), r"w must have shape \[\*, \*\]"),
    ("dz", torch.zeros(6, 3, dtype=torch.float64), "dz must have dtype torch.float32"),
    ("dz", torch.zeros(6, 2), r"dz must have shape \[\*, 3\]"),
    ("dz", torch.zeros(3, 6).t(), "dz must have a contiguous last dimension"),
    ("x", torch.zeros(5, 4), r"x must have shape \[6, 4\]"),
    ("x", torch.zeros(6, 3), r"x must have shape \[6, 4\]"),
    ("x", torch.zeros(4, 6).t(), "x must have a contiguous last dimension"),
    ("dw", torch.zeros(4, 3), r"dw must have shape \[3, 4\]"),
    ("dw", torch.zeros(3, 8)[:, :4], "dw must be contiguous"),
    ("db", torch.zeros(4), r"db must have shape \[3\]"),
    ("db", torch.zeros(3, dtype=torch.float64), "db must have dtype"),
    ("dx", torch.zeros(6, 3), r"dx must have shape \[6, 4\]"),
    ("dx", torch.zeros(5, 4), r"dx must have shape \[6, 4\]"),
    ("dx", torch.zeros(6, 8)[:, :4], "dx must be contiguous"),
    ("counters", torch.zeros(1, dtype=torch.int64), "counters must have dtype torch.int32"),
    ("scratch", torch.zeros(2, 2), r"scratch must have shape \[\*\]"),
]


@pytest.mark.parametrize("field, bad, match", BWD_BAD)
def test_bind_backward_names_the_bad_argument(field, bad, match):
    args = _bwd_args()
    args[field] = bad
    with pytest.raises(ValueError, match=match):
        get_kernels("cpu").bind_linear_backward(**args)


def test_bind_backward_workspace_and_what_it_accepts():
    k = get_kernels("cpu")
    # dW over 512 rows of a one-tile layer splits; dX (8 row tiles, a reduction of n = 64) does not.
    big = _bwd_args(rows=512, n=64, k=64)
    p = plan(backward_gemms(big["dz"], big["x"], True))
    assert p.splits[0] > 1 and p.splits[1] == 1
    assert (p.scratch_numel, p.counters_numel) == (p.splits[0] * PART, 1)
    with pytest.raises(ValueError, match=rf"scratch must have at least {p.scratch_numel} elements"):
        k.bind_linear_backward(**{**big, "scratch": torch.zeros(p.scratch_numel - 1)})
    with pytest.raises(ValueError, match="counters must have at least 1 elements"):
        k.bind_linear_backward(**{**big, "counters": torch.zeros(0, dtype=torch.int32)})
    with pytest.raises(ValueError, match="dz must have at least one row"):
        k.bind_linear_backward(**{**_bwd_args(), "dz": torch.zeros(0, 3), "x": torch.zeros(0, 4), "dx": None})
    # Row-strided dz and x, and no dx (the first layer).
    args = _bwd_args()
    g = torch.Generator().manual_seed(6)
    dz, x = _padded(torch.randn(6, 3, generator=g)), _padded(torch.randn(6, 4, generator=g))
    w = torch.randn(3, 4, generator=g)
    k.bind_linear_backward(dz, x, w, args["dw"], args["db"], None, args["scratch"], args["counters"])()
    torch.testing.assert_close(args["dw"], dz.t() @ x)
    torch.testing.assert_close(args["db"], dz.sum(0))
    assert torch.equal(args["dx"], torch.zeros(6, 4))  # untouched


# ============================================================================= CPU: MLPKernels
OBS = gym.spaces.Box(-1.0, 1.0, (7,), np.float32)


def _module(mode: str, **cfg):
    module = make_module_spec(action_mode=mode, hidden=cfg.pop("hidden", [16, 8]), observation_space=OBS,
                              **cfg).build()
    module.make_target_networks()
    return module


@pytest.mark.parametrize("mode, cfg, reason", [
    ("routed", {}, None),
    ("flat", {}, None),
    ("flat", {"hidden": [32]}, None),
    ("flat", {"hidden": []}, None),  # the head alone
    ("flat", {"double_q": False}, None),
    ("flat", {"dueling": True}, "dueling=True"),
    ("routed", {"dueling": True}, "dueling=True"),
    ("routed", {"layernorm": True}, None),  # the Linear writes z, a layernorm_relu launch follows
    ("flat", {"dropout": 0.1}, "dropout > 0"),
    ("flat", {"dropout": 0.0}, None),
    ("branching", {}, "action_mode 'branching'"),
])
def test_mlp_kernel_blocker(mode, cfg, reason):
    got = mlp_kernel_blocker(_module(mode, **cfg))
    if reason is None:
        assert got is None
    else:
        assert got is not None and reason in got, got


def test_mlp_kernel_blocker_needs_a_plain_linear_relu_stack():
    module = _module("flat")
    module.q_net.torso[1] = nn.Tanh()
    assert "not a plain Linear" in mlp_kernel_blocker(module)
    module = _module("flat")
    module.q_net.head = nn.Sequential(nn.Linear(8, 45))
    assert "not a plain Linear" in mlp_kernel_blocker(module)


def _cpu_learner(mode: str, hidden, double_q: bool = True, batch: int = 8, **module_cfg) -> ZeroSyncDQNTorchLearner:
    n = 5 if mode == "routed" else 45
    cfg = (
        DQNConfig()
        .training(lr=1e-3, gamma=0.9, n_step=1, train_batch_size_per_learner=batch, double_q=double_q,
                  target_network_update_freq=1000)
        .rl_module(rl_module_spec=make_module_spec(action_mode=mode, hidden=hidden, double_q=double_q, **module_cfg))
        .learners(learner_class=ZeroSyncDQNTorchLearner, learner_config_dict={"zerosync": {"replay_capacity": 24}})
    )
    spaces = {"default_policy": (gym.spaces.Box(-1.0, 1.0, (OBS_DIM,), np.float32), gym.spaces.Discrete(n))}
    return cfg.build_learner(spaces=spaces)


@pytest.mark.parametrize("mode, hidden, double_q, layernorm", [("flat", [16, 16], True, False),
                                                               ("routed", [16], False, False),
                                                               ("flat", [], True, False),
                                                               ("flat", [16, 16], True, True)])
def test_mlp_kernels_on_the_twins_are_torch_forward_and_autograd(mode, hidden, double_q, layernorm):
    """MLPKernels on CPU (the twins), on row-strided obs / next_obs columns of one packed block: Q of
    the online and target networks as torch's forward gives them, and the gradients written into the
    flat slots as autograd gives them from dq."""
    learner = _cpu_learner(mode, hidden, double_q, layernorm=layernorm)
    assert learner.mlp_kernel
    module = learner.module["default_policy"].unwrapped()
    with torch.no_grad():  # a target network that differs from the online one
        for p in module.target_q_net.parameters():
            p.add_(0.1)
    b = 8
    packed = torch.randn(b, 16, generator=torch.Generator().manual_seed(7))
    obs, next_obs = packed[:, 0:OBS_DIM], packed[:, 8:8 + OBS_DIM]
    mlp = MLPKernels(module=module, kernels=get_kernels("cpu"), flat=learner.flat_adam, obs=obs, next_obs=next_obs,
                     dq=torch.zeros(b, module.num_actions), double_q=double_q)
    layers = len(hidden) + 1
    # one linear launch per layer each way, plus one per LayerNorm each way
    assert mlp.launches_per_update == 2 * layers + (2 * len(hidden) if layernorm else 0)
    q, q_select, q_target = mlp.forward()
    with torch.no_grad():
        torch.testing.assert_close(q, module.q_net(obs))
        torch.testing.assert_close(q_target, module.target_q_net(next_obs))
        torch.testing.assert_close(q_select, module.q_net(next_obs) if double_q else q_target)
    assert (q_select is q_target) == (not double_q)
    assert mlp.dq.shape == q.shape and mlp.dq.is_contiguous()
    mlp.dq.copy_(torch.randn(q.shape, generator=torch.Generator().manual_seed(8)))
    mlp.backward()
    params = list(module.q_net.parameters())
    ref = torch.autograd.grad(module.q_net(obs), params, mlp.dq)
    for p, r in zip(params, ref):
        torch.testing.assert_close(learner.flat_adam.grad_slot(p), r)
    assert any(float(r.abs().max()) > 0 for r in ref)


def test_mlp_kernels_refuse_unsupported_modules_and_obs():
    learner = _cpu_learner("flat", [16])
    flat, k = learner.flat_adam, get_kernels("cpu")
    with pytest.raises(ValueError, match="unsupported module: dueling=True"):
        MLPKernels(module=_module("flat", dueling=True), kernels=k, flat=flat, obs=torch.zeros(4, 7),
                   next_obs=torch.zeros(4, 7), dq=torch.zeros(4, 45), double_q=True)
    module = learner.module["default_policy"].unwrapped()
    bad = torch.zeros(4, 2, 3).transpose(1, 2)  # [4, 3, 2] whose rows are not contiguous: no view
    with pytest.raises(ValueError, match="viewable"):
        MLPKernels(module=module, kernels=k, flat=flat, obs=bad, next_obs=bad, dq=torch.zeros(4, 45), double_q=True)
    with pytest.raises(ValueError, match="contiguous last dimension"):
        t = torch.zeros(OBS_DIM, 4).t()
        MLPKernels(module=module, kernels=k, flat=flat, obs=t, next_obs=t, dq=torch.zeros(4, 45), double_q=True)


# ============================================================================= GPU: kernel vs twin
@pytest.fixture(scope="module")
def dev():
    # The twins' matmuls in float32 (the kernels never use TF32).
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    yield torch.device("cuda", torch.cuda.current_device())
    torch.backends.cuda.matmul.allow_tf32 = previous


@pytest.fixture(scope="module")
def kc(dev):
    k = get_kernels(dev, backend="cuda")
    assert k.backend == "cuda"
    k.warmup()  # compile + load before any sync-checked or captured launch
    return k


@pytest.fixture(scope="module")
def kt(dev):
    k = get_kernels(dev, backend="torch")
    assert k.backend == "torch"
    return k


def _close(actual: torch.Tensor, expected: torch.Tensor, depth: int, what: str = "") -> None:
    """float32 sums of ``depth`` terms in another order: rtol 1e-4 and an atol that grows with
    sqrt(depth) and the output's scale."""
    scale = float(expected.abs().max()) if expected.numel() else 0.0
    torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-6 * math.sqrt(depth) * scale + 1e-7,
                               msg=lambda m: f"{what}: {m}")


FWD_GPU_CASES = [
    ((1,), 1, 1),
    ((7,), 5, 32),
    ((1024,), 256, 32),
    ((1024, 512), 256, 256),  # 1536 rows as two jobs
    ((512,), 45, 256),  # 8 tiles: split 4
    ((512, 512, 512), 45, 256),
    ((8192,), 256, 256),
    ((9, 3, 130), 33, 70),
    ((64,), 64, 4096),  # one tile: 64 splits
    ((100,), 70, 1000),  # uneven chunks
    ((5, 1), 1, 300),
]


def _fwd_jobs(rows, n, k, seed, dev, strided):
    g = torch.Generator().manual_seed(seed)
    jobs = []
    for m in rows:
        x = torch.randn(m, k, generator=g).to(dev)
        w = (torch.randn(n, k, generator=g) / math.sqrt(k)).to(dev)
        b = torch.randn(n, generator=g).to(dev)
        jobs.append((_padded(x) if strided else x, w, b))
    return jobs


def _with_outputs(jobs, n, dev, fill=NAN):
    return [(x, w, b, torch.full((x.shape[0], n), fill, device=dev)) for x, w, b in jobs]


@pytest.mark.gpu
@pytest.mark.parametrize("rows, n, k", FWD_GPU_CASES, ids=lambda v: str(v))
@pytest.mark.parametrize("relu", [True, False])
@pytest.mark.parametrize("strided", [False, True])
def test_forward_parity(kc, kt, dev, rows, n, k, relu, strided):
    jobs = _fwd_jobs(rows, n, k, 11 * k + n + sum(rows), dev, strided)
    jc, jt, j2 = (_with_outputs(jobs, n, dev) for _ in range(3))
    sc, cc = _workspace([forward_gemms(jc)], dev, fill=NAN)
    st, ct = _workspace([forward_gemms(jt)], dev)
    kc.linear_forward(jc, sc, cc, relu=relu)
    kt.linear_forward(jt, st, ct, relu=relu)
    assert int(cc.abs().sum()) == 0, "counters must be left 0"
    kc.linear_forward(j2, sc, cc, relu=relu)  # again, on the scratch the first launch left
    for j, (a, t, again) in enumerate(zip(jc, jt, j2)):
        _close(a[3], t[3], k, f"job {j}")
        assert torch.equal(a[3], again[3]), f"job {j}: not deterministic"
        if relu:
            assert float(a[3].min()) >= 0.0
    assert int(cc.abs().sum()) == 0


BWD_ROWS = (1, 9, 512, 8192)
BWD_NK = ((5, 256), (45, 256), (256, 256), (256, 32))


def _bwd_inputs(rows, n, k, seed, dev, strided):
    g = torch.Generator().manual_seed(seed)
    dz = (torch.randn(rows, n, generator=g) / math.sqrt(rows)).to(dev)
    x = torch.relu(torch.randn(rows, k, generator=g)).to(dev)  # a ReLU output: the mask matters
    w = (torch.randn(n, k, generator=g) / math.sqrt(k)).to(dev)
    if strided:
        dz, x = _padded(dz, 1, 2), _padded(x)
    return dz, x, w


def _bwd_outputs(rows, n, k, dev, with_dx):
    return (torch.full((n, k), NAN, device=dev), torch.full((n,), NAN, device=dev),
            torch.full((rows, k), NAN, device=dev) if with_dx else None)


@pytest.mark.gpu
@pytest.mark.parametrize("rows", BWD_ROWS)
@pytest.mark.parametrize("n, k", BWD_NK)
@pytest.mark.parametrize("with_dx", [True, False])
@pytest.mark.parametrize("strided", [False, True])
def test_backward_parity(kc, kt, dev, rows, n, k, with_dx, strided):
    dz, x, w = _bwd_inputs(rows, n, k, rows + 7 * n + k, dev, strided)
    oc, ot, o2 = (_bwd_outputs(rows, n, k, dev, with_dx) for _ in range(3))
    sc, cc = _workspace([backward_gemms(dz, x, with_dx)], dev, fill=NAN)
    st, ct = _workspace([backward_gemms(dz, x, with_dx)], dev)
    kc.linear_backward(dz, x, w, *oc, sc, cc)
    kt.linear_backward(dz, x, w, *ot, st, ct)
    assert int(cc.abs().sum()) == 0, "counters must be left 0"
    kc.linear_backward(dz, x, w, *o2, sc, cc)
    _close(oc[0], ot[0], rows, "dw")
    _close(oc[1], ot[1], rows, "db")
    if with_dx:
        _close(oc[2], ot[2], n, "dx")
        assert torch.equal(oc[2][x <= 0], torch.zeros_like(oc[2][x <= 0]))  # masked exactly
    for name, a, b in zip(("dw", "db", "dx"), oc, o2):
        assert a is None or torch.equal(a, b), f"{name}: not deterministic"
    assert int(cc.abs().sum()) == 0


@pytest.mark.gpu
def test_split_launches_share_one_workspace(kc, kt, dev):
    """Launches of different plans, one after another on one scratch and one counter buffer (as the
    learner runs them): each equals its twin and the counters end at 0."""
    fwd = _with_outputs(_fwd_jobs((512, 512), 45, 256, 1, dev, True), 45, dev)
    fwd_t = [(x, w, b, torch.zeros_like(y)) for x, w, b, y in fwd]
    dz, x, w = _bwd_inputs(512, 256, 256, 2, dev, False)
    bc, bt = _bwd_outputs(512, 256, 256, dev, True), _bwd_outputs(512, 256, 256, dev, True)
    gemms = [forward_gemms(fwd), backward_gemms(dz, x, True)]
    assert all(s > 1 for s in plan(gemms[0]).splits) and plan(gemms[1]).splits[0] > 1
    sc, cc = _workspace(gemms, dev, fill=NAN)
    st, ct = _workspace(gemms, dev)
    for _ in range(2):
        kc.linear_forward(fwd, sc, cc, relu=True)
        kc.linear_backward(dz, x, w, *bc, sc, cc)
    kt.linear_forward(fwd_t, st, ct, relu=True)
    kt.linear_backward(dz, x, w, *bt, st, ct)
    for a, t in zip(fwd, fwd_t):
        _close(a[3], t[3], 256, "y")
    _close(bc[0], bt[0], 512, "dw")
    _close(bc[1], bt[1], 512, "db")
    _close(bc[2], bt[2], 256, "dx")
    assert int(cc.abs().sum()) == 0


# ----------------------------------------------------------------------------- GPU: NaN
@pytest.mark.gpu
@pytest.mark.parametrize("rows, n, k", [((300,), 45, 256), ((64,), 64, 4096), ((7, 9), 5, 32)])
def test_forward_nan_as_the_twin(kc, kt, dev, rows, n, k):
    jobs = _fwd_jobs(rows, n, k, 3, dev, True)
    jobs[0][0][min(5, rows[0] - 1), 2] = NAN  # a whole output row is NaN, ReLU keeps it
    jc, jt = _with_outputs(jobs, n, dev, 7.0), _with_outputs(jobs, n, dev, 7.0)
    sc, cc = _workspace([forward_gemms(jc)], dev)
    st, ct = _workspace([forward_gemms(jt)], dev)
    kc.linear_forward(jc, sc, cc, relu=True)
    kt.linear_forward(jt, st, ct, relu=True)
    for a, t in zip(jc, jt):
        assert torch.equal(torch.isnan(a[3]), torch.isnan(t[3]))
        _close(torch.nan_to_num(a[3]), torch.nan_to_num(t[3]), k)
    assert torch.isnan(jc[0][3][min(5, rows[0] - 1)]).all()
    assert int(cc.abs().sum()) == 0


@pytest.mark.gpu
@pytest.mark.parametrize("rows, n, k", [(512, 45, 256), (9, 5, 256), (8192, 256, 32)])
def test_backward_nan_as_the_twin(kc, kt, dev, rows, n, k):
    dz, x, w = _bwd_inputs(rows, n, k, 4, dev, True)
    dz[rows // 2, 1] = NAN  # dz @ w is NaN on that whole row: dx keeps it only where x > 0
    oc, ot = _bwd_outputs(rows, n, k, dev, True), _bwd_outputs(rows, n, k, dev, True)
    sc, cc = _workspace([backward_gemms(dz, x, True)], dev)
    st, ct = _workspace([backward_gemms(dz, x, True)], dev)
    kc.linear_backward(dz, x, w, *oc, sc, cc)
    kt.linear_backward(dz, x, w, *ot, st, ct)
    r = rows // 2
    off = x[r] <= 0
    assert off.any() and (~off).any()
    assert torch.equal(oc[2][r][off], torch.zeros_like(oc[2][r][off]))
    assert torch.isnan(oc[2][r][~off]).all()
    for name, a, t, depth in zip(("dw", "db", "dx"), oc, ot, (rows, rows, n)):
        assert torch.equal(torch.isnan(a), torch.isnan(t)), name
        _close(torch.nan_to_num(a), torch.nan_to_num(t), depth, name)
    assert int(cc.abs().sum()) == 0


# ----------------------------------------------------------------------------- GPU: no sync, graph
def _chain(dev, seed: int, b: int = 512, obs: int = 16, h: int = 256, a: int = 45):
    """Buffers of a two-layer update as the learner runs it: forward of the online network on obs and
    next_obs and of the target network on next_obs (three jobs, then two), backward from dq."""
    g = torch.Generator().manual_seed(seed)

    def rnd(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g) * scale).to(dev)

    packed = torch.full((b, 2 * obs + 8), NAN, device=dev)
    packed[:, 4:4 + obs], packed[:, 8 + obs:8 + 2 * obs] = rnd(b, obs), rnd(b, obs)
    c = {"x": packed[:, 4:4 + obs], "xn": packed[:, 8 + obs:8 + 2 * obs],
         "w1": rnd(h, obs, scale=obs ** -0.5), "b1": rnd(h, scale=0.1), "w1t": rnd(h, obs, scale=obs ** -0.5),
         "b1t": rnd(h, scale=0.1), "w2": rnd(a, h, scale=h ** -0.5), "b2": rnd(a, scale=0.1),
         "w2t": rnd(a, h, scale=h ** -0.5), "b2t": rnd(a, scale=0.1), "dq": rnd(b, a, scale=1.0 / b),
         "y1": torch.full((2 * b, h), NAN, device=dev), "y1t": torch.full((b, h), NAN, device=dev),
         "q": torch.full((2 * b, a), NAN, device=dev), "qt": torch.full((b, a), NAN, device=dev),
         "dy1": torch.full((b, h), NAN, device=dev), "dw1": torch.full((h, obs), NAN, device=dev),
         "db1": torch.full((h,), NAN, device=dev), "dw2": torch.full((a, h), NAN, device=dev),
         "db2": torch.full((a,), NAN, device=dev)}
    c["packed"] = packed
    fwd = [([(c["x"], c["w1"], c["b1"], c["y1"][:b]), (c["xn"], c["w1"], c["b1"], c["y1"][b:]),
             (c["xn"], c["w1t"], c["b1t"], c["y1t"])], True),
           ([(c["y1"], c["w2"], c["b2"], c["q"]), (c["y1t"], c["w2t"], c["b2t"], c["qt"])], False)]
    bwd = [(c["dq"], c["y1"][:b], c["w2"], c["dw2"], c["db2"], c["dy1"]),
           (c["dy1"], c["x"], c["w1"], c["dw1"], c["db1"], None)]
    gemms = [forward_gemms(j) for j, _ in fwd] + [backward_gemms(a_[0], a_[1], a_[5] is not None) for a_ in bwd]
    c["scratch"], c["counters"] = _workspace(gemms, dev, fill=NAN)
    return c, fwd, bwd


def _bind_chain(k, c, fwd, bwd):
    return ([k.bind_linear_forward(jobs, c["scratch"], c["counters"], relu=relu) for jobs, relu in fwd]
            + [k.bind_linear_backward(*args, c["scratch"], c["counters"]) for args in bwd])


OUTPUTS = ("y1", "y1t", "q", "qt", "dy1", "dw1", "db1", "dw2", "db2", "counters")


@pytest.mark.gpu
def test_launches_do_not_sync_the_host(kc, kt, dev):
    c, fwd, bwd = _chain(dev, 1)
    launchers = _bind_chain(kc, c, fwd, bwd)  # bind (the checks) outside the checked region
    t, fwd_t, bwd_t = _chain(dev, 1)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for launch in launchers:
            launch()
        for jobs, relu in fwd:  # the unbound methods too
            kc.linear_forward(jobs, c["scratch"], c["counters"], relu=relu)
        for args in bwd:
            kc.linear_backward(*args, c["scratch"], c["counters"])
    finally:
        torch.cuda.set_sync_debug_mode(0)
    torch.cuda.synchronize()
    for launch in _bind_chain(kt, t, fwd_t, bwd_t):
        launch()
    assert int(c["counters"].abs().sum()) == 0
    for key, depth in (("y1", 16), ("y1t", 16), ("q", 256), ("qt", 256), ("dy1", 45), ("dw1", 512),
                       ("db1", 512), ("dw2", 512), ("db2", 512)):
        _close(c[key], t[key], depth, key)


@pytest.mark.gpu
def test_graph_replay_equals_eager_launches(kc, dev):
    graphed, fwd_g, bwd_g = _chain(dev, 2)
    eager, fwd_e, bwd_e = _chain(dev, 2)
    launchers = _bind_chain(kc, graphed, fwd_g, bwd_g)
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        for launch in launchers:
            launch()
    torch.cuda.current_stream().wait_stream(stream)
    for step in range(3):
        for key in ("packed", "w1", "b1", "w2", "b2", "w1t", "dq"):  # new inputs, in place
            v = graphed[key]
            v.copy_(torch.where(torch.isnan(v), v, torch.randn_like(v) * (1.0 / 512 if key == "dq" else 0.2)))
            eager[key].copy_(v)
        graph.replay()
        for jobs, relu in fwd_e:
            kc.linear_forward(jobs, eager["scratch"], eager["counters"], relu=relu)
        for args in bwd_e:
            kc.linear_backward(*args, eager["scratch"], eager["counters"])
        torch.cuda.synchronize()
        for key in OUTPUTS:
            assert torch.equal(graphed[key], eager[key]), (step, key)
        assert torch.isfinite(graphed["dw1"]).all() and int(graphed["counters"].abs().sum()) == 0, step


# ----------------------------------------------------------------------------- GPU: the learner
GPU_OBS, T_LEN, N_ENVS = 16, 16, 256


def _gpu_learner(mode: str, *, seed: int = 0) -> ZeroSyncDQNTorchLearner:
    n = 5 if mode == "routed" else 45
    cfg = (
        DQNConfig()
        .training(lr=1e-3, gamma=0.99, n_step=3, train_batch_size_per_learner=512, target_network_update_freq=50)
        .rl_module(rl_module_spec=make_module_spec(action_mode=mode, hidden=[256, 256]))
        .learners(num_learners=0, num_gpus_per_learner=1, learner_class=ZeroSyncDQNTorchLearner,
                  learner_config_dict={"zerosync": {"replay_capacity": T_LEN * N_ENVS, "graph": True,
                                                    "seed": seed}})
        .debugging(seed=seed)
    )
    spaces = {"default_policy": (gym.spaces.Box(-1.0, 1.0, (GPU_OBS,), np.float32), gym.spaces.Discrete(n))}
    learner = cfg.build_learner(spaces=spaces)
    assert learner.device.type == "cuda" and learner.use_graph
    return learner


def _device_rollout(n_actions: int, seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    ro = {
        "obs": torch.randn(T_LEN, N_ENVS, GPU_OBS, generator=g),
        "next_obs": torch.randn(T_LEN, N_ENVS, GPU_OBS, generator=g),
        "actions": torch.randint(0, n_actions, (T_LEN, N_ENVS), generator=g),
        "factored_actions": torch.randint(0, 45, (T_LEN, N_ENVS), generator=g),
        "rewards": torch.randn(T_LEN, N_ENVS, generator=g),
        "terminateds": torch.rand(T_LEN, N_ENVS, generator=g) < 0.02,
        "truncateds": torch.rand(T_LEN, N_ENVS, generator=g) < 0.01,
    }
    return {k: v.cuda() for k, v in ro.items()}


@pytest.mark.gpu
@pytest.mark.usefixtures("ray_local")
@pytest.mark.parametrize("mode", ["flat", "routed"])
def test_learner_on_the_kernels_matches_autograd(mode):
    kern, auto = _gpu_learner(mode), _gpu_learner(mode)
    auto.module.set_state(kern.module.get_state())
    assert kern.mlp_kernel and kern.guard.kernels.backend == "cuda"
    auto.mlp_kernel = False
    for a, b in zip(kern.params, auto.params):
        assert torch.equal(a, b)
    ro = _device_rollout(5 if mode == "routed" else 45, seed=3)
    for learner in (kern, auto):
        learner.replay.add(ro)
        learner.train(1)
    for a, b in zip(kern.params, auto.params):
        assert a.grad is not None and b.grad is not None
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-5)
    assert all(float(p.grad.abs().max()) > 0 for p in kern.params)
    for learner in (kern, auto):
        learner.train(learner.settings.graph_warmup + 20)  # warm-up, capture, then >= 20 graph replays
        assert learner.graph_captured
    for a, b in zip(kern.params, auto.params):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-4)
    mk, ma = kern.collect_metrics(), auto.collect_metrics()
    assert (mk["updates"], mk["skipped"]) == (ma["updates"], ma["skipped"]) == (
        float(kern.settings.graph_warmup + 21), 0.0)
    for key in ("loss_mean", "q_mean", "grad_norm_mean"):
        assert np.isfinite(mk[key])
        assert mk[key] == pytest.approx(ma[key], rel=1e-3, abs=1e-6), key


@pytest.mark.gpu
def test_backward_keeps_the_gradient_where_the_input_is_nan(kc, kt, dev):
    g = torch.Generator().manual_seed(6)
    x = torch.relu(torch.randn(70, 96, generator=g)).to(dev)
    x[4, 0] = NAN
    x[69, 95] = NAN
    dz, w = torch.randn(70, 40, generator=g).to(dev), torch.randn(40, 96, generator=g).to(dev)
    outs = []
    for k in (kc, kt):
        dw, db, dx = torch.zeros(40, 96, device=dev), torch.zeros(40, device=dev), torch.zeros(70, 96, device=dev)
        scratch, counters = _workspace([backward_gemms(dz, x, True)], dev)
        k.linear_backward(dz, x, w, dw, db, dx, scratch, counters)
        outs.append(dx)
    assert torch.isfinite(outs[0]).all() and outs[0][4, 0] != 0 and outs[0][69, 95] != 0
    assert torch.equal(outs[0] == 0, outs[1] == 0)
    torch.testing.assert_close(outs[0], outs[1], rtol=1e-4, atol=1e-4)


def test_bind_rejects_outputs_that_overlap_what_the_launch_reads():
    k = get_kernels("cpu")
    buf = torch.zeros(8, 12)
    x, w, b = buf[:, :4], torch.zeros(3, 4), torch.zeros(3)
    scratch, counters = _workspace([forward_gemms([(x, w, b, torch.zeros(8, 3))])], "cpu")
    with pytest.raises(ValueError, match=r"jobs\[0\].y must not overlap jobs\[0\].x"):
        k.bind_linear_forward([(x, w, b, buf.view(-1)[:24].view(8, 3))], scratch, counters, relu=True)
    k.bind_linear_forward([(x, w, b, torch.zeros(8, 3))], scratch, counters, relu=True)
    dz, xin, wt = torch.zeros(8, 3), torch.relu(torch.randn(8, 4)), torch.zeros(3, 4)
    scratch, counters = _workspace([backward_gemms(dz, xin, True)], "cpu")
    with pytest.raises(ValueError, match="dx must not overlap x"):
        k.bind_linear_backward(dz, xin, wt, torch.zeros(3, 4), torch.zeros(3), xin, scratch, counters)
    with pytest.raises(ValueError, match="dw must not overlap w"):
        k.bind_linear_backward(dz, xin, wt, wt, torch.zeros(3), torch.zeros(8, 4), scratch, counters)
    k.bind_linear_backward(dz, xin, wt, torch.zeros(3, 4), torch.zeros(3), torch.zeros(8, 4), scratch, counters)
