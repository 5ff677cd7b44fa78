"""``layernorm.cu``: declarations of ``layernorm_relu`` and ``layernorm_backward`` (twins:
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

import torch

from rl_zerosync.kernels.compile import CudaSource
from rl_zerosync.kernels.declare import Bound, Kernel, Launch, Tensor, Value
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


def _check_jobs(b: Bound) -> None:
    """1 or 2 jobs ``(z, gamma, beta, a, stats)`` sharing ``n``."""
    jobs = b.jobs
    if not isinstance(jobs, (list, tuple)) or not 1 <= len(jobs) <= MAX_JOBS:
        raise ValueError(f"jobs must be a list of 1 or {MAX_JOBS} (z, gamma, beta, a, stats) tuples, got {jobs!r}")
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


def _launch_relu(device_index: int, b: Bound) -> None:
    """``zs_layernorm_relu`` for the jobs (an unused second job slot gets NULL pointers)."""
    args: list = []
    blocks = 0
    for j in range(MAX_JOBS):
        if j < len(b.jobs):
            z, gamma, beta, a, stats = b.jobs[j]
            args += [ptr(z), ptr(gamma), ptr(beta), ptr(a), ptr(stats), i32(z.shape[0])]
            blocks += -(-int(z.shape[0]) // LN_WARPS)
        else:
            args += [NULL, NULL, NULL, NULL, NULL, i32(0)]
    args += [i32(b.jobs[0][0].shape[1]), f32(b.eps)]
    launch(SOURCE, "zs_layernorm_relu", device_index=device_index, grid=blocks, block=32 * LN_WARPS, args=args)


layernorm_relu = Kernel("layernorm_relu", SOURCE, (
    Value("jobs", positional=True, rule=_check_jobs),
    Value("eps"),
), rule=lambda b: expect_finite("eps", b.eps, minimum=0.0, strict=True), cuda=_launch_relu)


def _check_backward(b: Bound) -> None:
    need = layernorm_part_numel(b.B, b.n)
    if b.part.numel() < need:
        raise ValueError(f"part must have at least layernorm_part_numel({b.B}, {b.n}) = {need} elements, "
                         f"got {b.part.numel()}")
    for name in ("dz", "dgamma", "dbeta"):
        expect_apart(name, getattr(b, name), dy=b.dy, z=b.z, stats=b.stats, gamma=b.gamma)


def _check_rows(b: Bound) -> None:
    if b.B < 1 or b.n < 1:
        raise ValueError(f"dy must have at least one row and one column, got {list(b.dy.shape)}")


layernorm_backward = Kernel("layernorm_backward", SOURCE, (
    Tensor("dy", torch.float32, ("B", "n"), rule=_check_rows),
    Tensor("z", torch.float32, ("B", "n")),
    Tensor("stats", torch.float32, ("B", 2)),
    Tensor("gamma", torch.float32, ("n",)),
    Tensor("dz", torch.float32, ("B", "n")),
    Tensor("dgamma", torch.float32, ("n",)),
    Tensor("dbeta", torch.float32, ("n",)),
    Tensor("part", torch.float32, (None,)),
    Tensor("blocks_done", torch.int32, (1,)),
), rule=_check_backward, cuda=Launch(
    "zs_layernorm_backward", lambda b: -(-b.B // layernorm_rows_per_block(b.B)), 32 * LN_WARPS,
    ("dy", "z", "stats", "gamma", "dz", "dgamma", "dbeta", "part", "blocks_done", "B:i32", "n:i32",
     lambda b: i32(layernorm_rows_per_block(b.B))),
))
