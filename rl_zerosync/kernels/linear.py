"""``linear.cu``: declarations of ``linear_forward`` and ``linear_backward`` (twins:
``reference.linear_forward`` / ``reference.linear_backward``); one launch each, no host sync.

The Q network's ``Linear`` layers as float32 tiled GEMMs with the bias, the ReLU, the bias
gradient and the ReLU's backward mask fused into them:

* ``linear_forward(jobs, scratch, counters, relu=...)``: for each of 1 to :data:`MAX_JOBS` jobs
  ``(x, w, b, y)`` (``x [m, k]``, ``w [n, k]``, ``b [n]``, ``y [m, n]``; one ``n`` and ``k`` for
  all), ``y = relu?(x @ w.T + b)``. The learner runs a layer of the online network on the
  observations and the next observations and of the target network on the next observations as
  one launch.
* ``linear_backward(dz, x, w, dw, db, dx, scratch, counters)``: ``dw = dz.T @ x``,
  ``db = dz.sum(0)`` and, unless ``dx`` is None, ``dx = where(x <= 0, 0, dz @ w)`` (``x`` is the
  layer's input, a ReLU output, so this is the previous layer's gradient at its pre-activation, as
  torch's ``threshold_backward``: a NaN ``x`` keeps the gradient). ``dx`` must not overlap ``x``.

``x`` and ``dz`` may be row-strided views (the replay's packed sample rows); their last dimension
is contiguous. Every other tensor is contiguous. A job's output tiles are :data:`GEMM_TILE` square;
a job with fewer tiles than its share of the launch's blocks (:func:`splits`) has its reduction
dimension split across blocks, whose partial tiles go to ``scratch`` and are summed in a fixed order
by the tile's last block (deterministic). ``counters`` (int32, one per split tile) must be 0 at
launch and are left 0. Size both with :func:`workspace` (of :func:`forward_gemms` /
:func:`backward_gemms` of every launch that shares them).
"""
from __future__ import annotations

from typing import List, NamedTuple, Optional, Sequence, Tuple

import numpy as np
import torch

from rl_zerosync.kernels.compile import CudaSource
from rl_zerosync.kernels.declare import Bound, Kernel, Tensor, Value
from rl_zerosync.kernels.launch import NULL, i32, i64, launch, ptr
from rl_zerosync.kernels.validate import expect_apart, expect_tensor, tensor_device

GEMM_TILE = 64
"""Output tile side (rows and columns) of one block."""
GEMM_BK = 16
"""Reduction step held in shared memory."""
GEMM_THREADS = 256
"""Threads per block: 16 x 16, each computing 4 x 4 outputs."""
PART = GEMM_TILE * GEMM_TILE + GEMM_TILE
"""Floats of one partial tile in ``scratch``: the tile, then its bias-gradient row sums."""
MAX_JOBS = 3
"""Most forward jobs per launch."""
TARGET_BLOCKS = 264
"""Blocks a launch aims for (two per SM of an H200) before it splits the reduction dimension."""
MIN_SPLIT = 64
"""Shortest reduction chunk of one block."""
MAX_SPLITS = 32
"""Most chunks of one tile (its last block sums that many partial tiles)."""

SOURCE = CudaSource("linear.cu", ("zs_linear_forward", "zs_linear_backward"),
                    defines={"ZS_GM_BM": GEMM_TILE, "ZS_GM_BN": GEMM_TILE, "ZS_GM_BK": GEMM_BK,
                             "ZS_GM_THREADS": GEMM_THREADS})


class Gemm(NamedTuple):
    """One GEMM job of a launch: ``[m, n]`` outputs reduced over ``k``."""

    m: int
    n: int
    k: int


class Plan(NamedTuple):
    """Where a launch's jobs live: per job its splits, first scratch float and first counter."""

    splits: Tuple[int, ...]
    part_offsets: Tuple[int, ...]
    counter_offsets: Tuple[int, ...]
    blocks: int
    scratch_numel: int
    counters_numel: int


def _tiles(g: Gemm) -> int:
    return -(-g.m // GEMM_TILE) * -(-g.n // GEMM_TILE)


def splits(jobs: Sequence[Gemm]) -> Tuple[int, ...]:
    """Reduction splits per job (1 = no split): the launch's blocks (:data:`TARGET_BLOCKS`, or its
    tile count if larger) shared out in proportion to each job's multiply-adds, with chunks at least
    :data:`MIN_SPLIT` long and at most :data:`MAX_SPLITS` of them. A job with few output tiles and a
    long reduction (a weight gradient over a large batch) gets many."""
    work = [g.m * g.n * g.k for g in jobs]
    total = sum(work)
    budget = max(TARGET_BLOCKS, sum(_tiles(g) for g in jobs))
    out = []
    for g, w in zip(jobs, work):
        want = -(-budget * w // (total * _tiles(g)))
        out.append(max(1, min(want, MAX_SPLITS, -(-g.k // MIN_SPLIT))))
    return tuple(out)


def plan(jobs: Sequence[Gemm]) -> Plan:
    """Splits, scratch and counter offsets, blocks and workspace sizes of one launch."""
    s = splits(jobs)
    part, count, offsets, counter_offsets, blocks = 0, 0, [], [], 0
    for g, sj in zip(jobs, s):
        offsets.append(part)
        counter_offsets.append(count)
        blocks += _tiles(g) * sj
        if sj > 1:
            part += _tiles(g) * sj * PART
            count += _tiles(g)
    return Plan(s, tuple(offsets), tuple(counter_offsets), blocks, part, count)


def forward_gemms(jobs: Sequence[Sequence[torch.Tensor]]) -> List[Gemm]:
    """The GEMM jobs of ``linear_forward(jobs, ...)``."""
    return [Gemm(int(x.shape[0]), int(w.shape[0]), int(w.shape[1])) for x, w, _b, _y in jobs]


def backward_gemms(dz: torch.Tensor, x: torch.Tensor, with_dx: bool) -> List[Gemm]:
    """The GEMM jobs of ``linear_backward``: dW (and dX when ``with_dx``)."""
    rows, n, k = int(dz.shape[0]), int(dz.shape[1]), int(x.shape[1])
    jobs = [Gemm(n, k, rows)]
    if with_dx:
        jobs.append(Gemm(rows, k, n))
    return jobs


def workspace(gemms: Sequence[Sequence[Gemm]]) -> Tuple[int, int]:
    """``(scratch floats, counters)`` enough for every launch of ``gemms`` run one after another."""
    plans = [plan(g) for g in gemms]
    return max(1, max(p.scratch_numel for p in plans)), max(1, max(p.counters_numel for p in plans))


def _expect_rows(name: str, t: object, rows: Optional[int], cols: int, dev: torch.device) -> None:
    """A 2-D float32 ``[rows, cols]`` view on ``dev`` of contiguous rows, at least one."""
    expect_tensor(name, t, dtype=torch.float32, shape=(rows, cols), device=dev, strided=True)
    if t.shape[0] < 1:
        raise ValueError(f"{name} must have at least one row, got shape {list(t.shape)}")


def _expect_workspace(b: Bound, p: Plan) -> None:
    if b.scratch.numel() < p.scratch_numel:
        raise ValueError(f"scratch must have at least {p.scratch_numel} elements (linear.workspace), "
                         f"got {b.scratch.numel()}")
    if b.counters.numel() < p.counters_numel:
        raise ValueError(f"counters must have at least {p.counters_numel} elements (linear.workspace), "
                         f"got {b.counters.numel()}")


def _check_jobs(b: Bound) -> None:
    """1 to :data:`MAX_JOBS` jobs ``(x, w, b, y)`` sharing ``n`` and ``k``; the device is ``jobs[0].w``'s."""
    jobs = b.jobs
    if not isinstance(jobs, (list, tuple)) or not 1 <= len(jobs) <= MAX_JOBS:
        raise ValueError(f"jobs must be a list of 1 to {MAX_JOBS} (x, w, b, y) tuples, got {jobs!r}")
    for j, job in enumerate(jobs):
        if not isinstance(job, (list, tuple)) or len(job) != 4:
            raise ValueError(f"jobs[{j}] must be an (x, w, b, y) tuple, got {job!r}")
    dev = b.device = tensor_device("jobs[0].w", jobs[0][1])
    n = k = None
    for j, (x, w, bias, y) in enumerate(jobs):
        expect_tensor(f"jobs[{j}].w", w, dtype=torch.float32, shape=(n, k), device=dev)
        n, k = int(w.shape[0]), int(w.shape[1])
        if n < 1 or k < 1:
            raise ValueError(f"jobs[{j}].w must have at least one row and one column, got {list(w.shape)}")
        expect_tensor(f"jobs[{j}].b", bias, dtype=torch.float32, shape=(n,), device=dev)
        _expect_rows(f"jobs[{j}].x", x, None, k, dev)
        _expect_rows(f"jobs[{j}].y", y, int(x.shape[0]), n, dev)
        if y.stride(0) != n and y.shape[0] > 1:
            raise ValueError(f"jobs[{j}].y must be contiguous [{x.shape[0]}, {n}], got strides {list(y.stride())}")
    for j, (_x, _w, _b, y) in enumerate(jobs):
        reads = {f"jobs[{i}].{name}": t for i, job in enumerate(jobs) for name, t in zip("xwb", job[:3])}
        expect_apart(f"jobs[{j}].y", y, **reads)


def _check_forward(b: Bound) -> None:
    if not isinstance(b.relu, bool):
        raise ValueError(f"relu must be a bool, got {b.relu!r}")
    _expect_workspace(b, plan(forward_gemms(b.jobs)))


def _at(t: torch.Tensor, offset: int) -> np.uint64:
    """Pointer to element ``offset`` of a float32 / int32 buffer."""
    return np.uint64(t.data_ptr() + 4 * int(offset))


def _launch_forward(device_index: int, b: Bound) -> None:
    """``zs_linear_forward`` for the jobs (counters must be 0, and are left 0)."""
    jobs, scratch, counters = b.jobs, b.scratch, b.counters
    p = plan(forward_gemms(jobs))
    args: list = []
    for j in range(MAX_JOBS):
        if j < len(jobs):
            x, w, bias, y = jobs[j]
            args += [ptr(x), i64(x.stride(0)), ptr(w), ptr(bias), ptr(y), i64(y.stride(0)), i32(x.shape[0]),
                     i32(p.splits[j]), _at(scratch, p.part_offsets[j]), _at(counters, p.counter_offsets[j])]
        else:
            args += [NULL, i64(0), NULL, NULL, NULL, i64(0), i32(0), i32(1), NULL, NULL]
    w0 = jobs[0][1]
    args += [i32(len(jobs)), i32(w0.shape[0]), i32(w0.shape[1]), i32(bool(b.relu))]
    launch(SOURCE, "zs_linear_forward", device_index=device_index, grid=p.blocks, block=GEMM_THREADS, args=args)


linear_forward = Kernel("linear_forward", SOURCE, (
    Value("jobs", positional=True, rule=_check_jobs),
    Tensor("scratch", torch.float32, (None,)),
    Tensor("counters", torch.int32, (None,)),
    Value("relu"),
), rule=_check_forward, cuda=_launch_forward)


def _check_w(b: Bound) -> None:
    if b.n < 1 or b.k < 1:
        raise ValueError(f"w must have at least one row and one column, got {list(b.w.shape)}")


def _check_dz(b: Bound) -> None:
    if b.B < 1:
        raise ValueError(f"dz must have at least one row, got shape {list(b.dz.shape)}")


def _check_backward(b: Bound) -> None:
    for name in ("dw", "db", "dx"):
        out = getattr(b, name)
        if out is not None:
            expect_apart(name, out, dz=b.dz, x=b.x, w=b.w)
    _expect_workspace(b, plan(backward_gemms(b.dz, b.x, b.dx is not None)))


def _launch_backward(device_index: int, b: Bound) -> None:
    """``zs_linear_backward``: dW's GEMM, then dX's unless ``dx`` is None (counters must be 0, and are left 0)."""
    dx = b.dx is not None
    p = plan(backward_gemms(b.dz, b.x, dx))
    s_dx, part_dx, count_dx = (p.splits[1], p.part_offsets[1], p.counter_offsets[1]) if dx else (1, 0, 0)
    launch(SOURCE, "zs_linear_backward", device_index=device_index, grid=p.blocks, block=GEMM_THREADS,
           args=(*linear_backward.cuda_args(b, "dz", "x", "w", "dw", "db", "dx", "B:i32", "n:i32", "k:i32"),
                 i32(p.splits[0]), _at(b.scratch, p.part_offsets[0]), _at(b.counters, p.counter_offsets[0]),
                 i32(s_dx), _at(b.scratch, part_dx), _at(b.counters, count_dx)))


linear_backward = Kernel("linear_backward", SOURCE, (
    Tensor("dz", torch.float32, ("B", "n"), strided=True, rule=_check_dz),
    Tensor("x", torch.float32, ("B", "k"), strided=True),
    Tensor("w", torch.float32, ("n", "k"), lead=True, rule=_check_w),
    Tensor("dw", torch.float32, ("n", "k")),
    Tensor("db", torch.float32, ("n",)),
    Tensor("dx", torch.float32, ("B", "k"), optional=True),
    Tensor("scratch", torch.float32, (None,)),
    Tensor("counters", torch.int32, (None,)),
), rule=_check_backward, cuda=_launch_backward)
