"""``layernorm.cu``: checks and launches of ``layernorm_relu`` and ``layernorm_backward`` (twins:
``reference.layernorm_relu`` / ``reference.layernorm_backward``); one launch each, no host sync.

The hidden layers' ``LayerNorm -> ReLU`` of a Q network with ``layernorm=True``, beside the
linear kernels (``linear.py``):

* ``layernorm_relu(jobs, eps=...)``: for each of 1 or 2 jobs ``(z, gamma, beta, a, stats)``
  (``z``, ``a [m, n]``, ``gamma``, ``beta [n]``, ``stats [m, 2]``; one ``n``),
  ``a = relu(layer_norm(z) * gamma + beta)`` and ``stats = (mean, rstd)`` per row (biased variance,
  ``rstd = 1 / sqrt(var + eps)``, as ``torch.nn.LayerNorm``).
* ``layernorm_backward(dy, z, stats, gamma, dz, dgamma, dbeta, part, blocks_done)``: the
  LayerNorm's backward for the batch's rows: ``dz`` from ``dy`` (the gradient at the LayerNorm's
  output, the ReLU's mask applied), ``dgamma = sum(dy * xhat)``, ``dbeta = sum(dy)`` over the rows,
  reduced in a fixed block order (deterministic). ``part`` holds :func:`layernorm_part_numel` floats;
  ``blocks_done`` must be 0 at launch and is left 0.

Every tensor is float32 and contiguous.
"""
from __future__ import annotations

from typing import Sequence

import torch

from rl_zerosync.kernels.compile import CudaSource
from rl_zerosync.kernels.launch import NULL, f32, i32, launch, ptr
from rl_zerosync.kernels.validate import expect_apart, expect_finite, expect_tensor, tensor_device

LN_WARPS = 8
"""Warps per block; one row per warp."""
LN_MAX_BLOCKS = 64
"""Most blocks of the backward (its last block sums one record per block)."""
LN_MIN_ROWS = 8
"""Fewest rows per backward block."""
MAX_JOBS = 2
"""Most forward jobs per launch."""

SOURCE = CudaSource("layernorm.cu", ("zs_layernorm_relu", "zs_layernorm_backward"),
                    defines={"ZS_LN_WARPS": LN_WARPS})


def layernorm_rows_per_block(rows: int) -> int:
    """Rows one backward block owns: at least :data:`LN_MIN_ROWS`, at most :data:`LN_MAX_BLOCKS` blocks."""
    return max(LN_MIN_ROWS, -(-int(rows) // LN_MAX_BLOCKS))


def layernorm_part_numel(rows: int, n: int) -> int:
    """Floats of the backward's ``part`` buffer for ``rows`` rows of width ``n``."""
    return 2 * int(n) * -(-int(rows) // layernorm_rows_per_block(rows))


def check_layernorm_relu(jobs: Sequence[Sequence[torch.Tensor]], *, eps: float) -> None:
    """Validate ``layernorm_relu``: 1 or 2 jobs ``(z, gamma, beta, a, stats)`` sharing ``n``."""
    if not isinstance(jobs, (list, tuple)) or not 1 <= len(jobs) <= MAX_JOBS:
        raise ValueError(f"jobs must be a list of 1 or {MAX_JOBS} (z, gamma, beta, a, stats) tuples, got {jobs!r}")
    expect_finite("eps", eps, minimum=0.0, strict=True)
    n = None
    dev = None
    for j, job in enumerate(jobs):
        if not isinstance(job, (list, tuple)) or len(job) != 5:
            raise ValueError(f"jobs[{j}] must be a (z, gamma, beta, a, stats) tuple, got {job!r}")
        z, gamma, beta, a, stats = job
        if dev is None:
            dev = tensor_device(f"jobs[{j}].z", z)
        expect_tensor(f"jobs[{j}].z", z, dtype=torch.float32, shape=(None, n), device=dev)
        m, n = int(z.shape[0]), int(z.shape[1])
        if m < 1 or n < 1:
            raise ValueError(f"jobs[{j}].z must have at least one row and one column, got {list(z.shape)}")
        expect_tensor(f"jobs[{j}].gamma", gamma, dtype=torch.float32, shape=(n,), device=dev)
        expect_tensor(f"jobs[{j}].beta", beta, dtype=torch.float32, shape=(n,), device=dev)
        expect_tensor(f"jobs[{j}].a", a, dtype=torch.float32, shape=(m, n), device=dev)
        expect_tensor(f"jobs[{j}].stats", stats, dtype=torch.float32, shape=(m, 2), device=dev)


def check_layernorm_backward(dy: torch.Tensor, z: torch.Tensor, stats: torch.Tensor, gamma: torch.Tensor,
                             dz: torch.Tensor, dgamma: torch.Tensor, dbeta: torch.Tensor, part: torch.Tensor,
                             blocks_done: torch.Tensor) -> None:
    """Validate ``layernorm_backward``: ``dy``, ``z``, ``dz [B, n]``, ``stats [B, 2]``, ``gamma``,
    ``dgamma``, ``dbeta [n]``."""
    dev = tensor_device("dy", dy)
    expect_tensor("dy", dy, dtype=torch.float32, shape=(None, None), device=dev)
    rows, n = int(dy.shape[0]), int(dy.shape[1])
    if rows < 1 or n < 1:
        raise ValueError(f"dy must have at least one row and one column, got {list(dy.shape)}")
    for name, t in (("z", z), ("dz", dz)):
        expect_tensor(name, t, dtype=torch.float32, shape=(rows, n), device=dev)
    expect_tensor("stats", stats, dtype=torch.float32, shape=(rows, 2), device=dev)
    for name, t in (("gamma", gamma), ("dgamma", dgamma), ("dbeta", dbeta)):
        expect_tensor(name, t, dtype=torch.float32, shape=(n,), device=dev)
    expect_tensor("part", part, dtype=torch.float32, shape=(None,), device=dev)
    need = layernorm_part_numel(rows, n)
    if part.numel() < need:
        raise ValueError(f"part must have at least layernorm_part_numel({rows}, {n}) = {need} elements, "
                         f"got {part.numel()}")
    expect_tensor("blocks_done", blocks_done, dtype=torch.int32, shape=(1,), device=dev)
    for name, out in (("dz", dz), ("dgamma", dgamma), ("dbeta", dbeta)):
        expect_apart(name, out, dy=dy, z=z, stats=stats, gamma=gamma)


def layernorm_relu(device_index: int, jobs: Sequence[Sequence[torch.Tensor]], *, eps: float) -> None:
    """Enqueue ``zs_layernorm_relu`` for the jobs."""
    args: list = []
    blocks = 0
    for j in range(MAX_JOBS):
        if j < len(jobs):
            z, gamma, beta, a, stats = jobs[j]
            args += [ptr(z), ptr(gamma), ptr(beta), ptr(a), ptr(stats), i32(z.shape[0])]
            blocks += -(-int(z.shape[0]) // LN_WARPS)
        else:
            args += [NULL, NULL, NULL, NULL, NULL, i32(0)]
    args += [i32(jobs[0][0].shape[1]), f32(eps)]
    launch(SOURCE, "zs_layernorm_relu", device_index=device_index, grid=blocks, block=32 * LN_WARPS, args=args)


def layernorm_backward(device_index: int, dy: torch.Tensor, z: torch.Tensor, stats: torch.Tensor,
                       gamma: torch.Tensor, dz: torch.Tensor, dgamma: torch.Tensor, dbeta: torch.Tensor,
                       part: torch.Tensor, blocks_done: torch.Tensor) -> None:
    """Enqueue ``zs_layernorm_backward`` (``blocks_done`` must be 0, and is left 0)."""
    rows, n = int(dy.shape[0]), int(dy.shape[1])
    per = layernorm_rows_per_block(rows)
    launch(SOURCE, "zs_layernorm_backward", device_index=device_index, grid=-(-rows // per), block=32 * LN_WARPS,
           args=(ptr(dy), ptr(z), ptr(stats), ptr(gamma), ptr(dz), ptr(dgamma), ptr(dbeta), ptr(part),
                 ptr(blocks_done), i32(rows), i32(n), i32(per)))
