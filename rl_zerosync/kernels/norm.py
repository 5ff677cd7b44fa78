"""``norm.cu``: check and launch of ``grad_norm`` (twin: ``reference.grad_norm``); one launch, no host sync.

The global L2 norm of a flat f32 buffer whose length is a multiple of :data:`NORM_CHUNK`: the norm
of each row of :data:`NORM_CHUNK` elements (one block per row, written to ``row_norms``), then the
norm of those, computed by the block that finishes last, which resets ``blocks_done`` to 0.
"""
from __future__ import annotations

import torch

from rl_zerosync.kernels.compile import CudaSource
from rl_zerosync.kernels.launch import launch, ptr
from rl_zerosync.kernels.validate import expect_rows, expect_tensor, tensor_device

NORM_CHUNK = 2048
"""Elements per row of the first reduction (the flat buffers' length is a multiple of it)."""
NORM_BLOCK = 256
"""Threads per block (one row of :data:`NORM_CHUNK` elements per block)."""

SOURCE = CudaSource("norm.cu", ("zs_grad_norm",),
                    defines={"ZS_NORM_CHUNK": NORM_CHUNK, "ZS_NORM_BLOCK": NORM_BLOCK})


def check_grad_norm(x: torch.Tensor, row_norms: torch.Tensor, out: torch.Tensor, blocks_done: torch.Tensor) -> None:
    """Validate the buffers of ``grad_norm`` (x f32[N], N a positive multiple of ``NORM_CHUNK``)."""
    dev = tensor_device("x", x)
    expect_tensor("x", x, dtype=torch.float32, shape=(None,), device=dev)
    n = x.shape[0]
    if n < 1 or n % NORM_CHUNK:
        raise ValueError(f"x must have a positive multiple of NORM_CHUNK = {NORM_CHUNK} elements, got {n}")
    expect_rows("x", n // NORM_CHUNK)
    expect_tensor("row_norms", row_norms, dtype=torch.float32, shape=(n // NORM_CHUNK,), device=dev)
    expect_tensor("out", out, dtype=torch.float32, shape=(1,), device=dev)
    expect_tensor("blocks_done", blocks_done, dtype=torch.int32, shape=(1,), device=dev)


def grad_norm(device_index: int, x: torch.Tensor, row_norms: torch.Tensor, out: torch.Tensor,
              blocks_done: torch.Tensor) -> None:
    """Enqueue ``zs_grad_norm`` (``blocks_done`` must be 0, and is left 0)."""
    launch(SOURCE, "zs_grad_norm", device_index=device_index, grid=x.shape[0] // NORM_CHUNK, block=NORM_BLOCK,
           args=(ptr(x), ptr(row_norms), ptr(out), ptr(blocks_done)))
