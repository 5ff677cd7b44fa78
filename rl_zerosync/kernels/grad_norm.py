"""``grad_norm.cu``: declaration of ``grad_norm`` (twin: ``reference.grad_norm``); one launch, no host sync.

The global L2 norm of a flat f32 buffer whose length is a multiple of :data:`NORM_CHUNK`: the norm
of each row of :data:`NORM_CHUNK` elements (one block per row, written to ``row_norms``), then the
norm of those, computed by the block that finishes last, which resets ``blocks_done`` to 0.
"""
from __future__ import annotations

import torch

from rl_zerosync.kernels.compile import CudaSource
from rl_zerosync.kernels.declare import Bound, Kernel, Launch, Tensor
from rl_zerosync.kernels.validate import expect_rows

NORM_CHUNK = 2048
"""Elements per row of the first reduction (the flat buffers' length is a multiple of it)."""
NORM_BLOCK = 256
"""Threads per block (one row of :data:`NORM_CHUNK` elements per block)."""

SOURCE = CudaSource("grad_norm.cu", ("zs_grad_norm",),
                    defines={"ZS_NORM_CHUNK": NORM_CHUNK, "ZS_NORM_BLOCK": NORM_BLOCK})


def _check_x(b: Bound) -> None:
    if b.N < 1 or b.N % NORM_CHUNK:
        raise ValueError(f"x must have a positive multiple of NORM_CHUNK = {NORM_CHUNK} elements, got {b.N}")
    expect_rows("x", b.N // NORM_CHUNK)


grad_norm = Kernel("grad_norm", SOURCE, (
    Tensor("x", torch.float32, ("N",), rule=_check_x),
    Tensor("row_norms", torch.float32, (lambda b: b.N // NORM_CHUNK,)),
    Tensor("out", torch.float32, (1,)),
    Tensor("blocks_done", torch.int32, (1,)),
), cuda=Launch("zs_grad_norm", lambda b: b.N // NORM_CHUNK, NORM_BLOCK))
