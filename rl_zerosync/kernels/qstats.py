"""``qstats.cu``: check and launch of ``qstats`` (twin: ``reference.qstats``); two launches, no host sync.

Pass 1 runs ``qstats_num_blocks(rows)`` blocks of :data:`QSTATS_BLOCK` threads (one row per thread,
grid-stride); block ``b`` writes one :data:`QPART` record to ``scratch[QPART.size * b:]``. Pass 2
(one block) reduces them into the :data:`~rl_zerosync.kernels.layouts.QSTATS` output.
"""
from __future__ import annotations

import torch

from rl_zerosync.kernels.compile import CudaSource
from rl_zerosync.kernels.launch import i32, i64, launch, ptr
from rl_zerosync.kernels.layouts import QSTATS, Layout
from rl_zerosync.kernels.validate import expect_rows, expect_tensor, tensor_device

QSTATS_BLOCK = 256
"""Threads per block of both passes (pass 1: one row per thread, grid-stride)."""
QSTATS_MAX_BLOCKS = 1024
"""Most pass-1 blocks; pass 2 reduces one partial per block."""
FINAL_GRID = 1
QPART = Layout("ZS_QPART", ("min", "max", "sum_rowmax", "sum_all", "bad"))
"""One pass-1 block's partials: min / max / sum of row-max Q, sum of Q, any non-finite (0/1)."""

SOURCE = CudaSource("qstats.cu", ("zs_qstats_partial", "zs_qstats_final"),
                    defines={"ZS_QSTATS_BLOCK": QSTATS_BLOCK, **QPART.defines()})


def qstats_num_blocks(num_rows: int) -> int:
    """Pass-1 grid size for ``num_rows`` rows."""
    return max(1, min(QSTATS_MAX_BLOCKS, -(-int(num_rows) // QSTATS_BLOCK)))


def qstats_scratch_numel(num_rows: int) -> int:
    """Length of the f32 scratch buffer that ``qstats`` needs for ``num_rows`` rows."""
    if int(num_rows) < 1:
        raise ValueError(f"qstats: num_rows must be >= 1, got {num_rows}")
    return QPART.size * qstats_num_blocks(num_rows)


def check_qstats(q: torch.Tensor, out: torch.Tensor, scratch: torch.Tensor) -> None:
    """Validate the buffers of ``qstats`` (q f32[B, A] with B, A >= 1)."""
    dev = tensor_device("q", q)
    expect_tensor("q", q, dtype=torch.float32, shape=(None, None), device=dev)
    b, a = q.shape
    if b < 1 or a < 1:
        raise ValueError(f"q must have at least one row and one column, got shape {list(q.shape)}")
    expect_rows("q", b)
    expect_tensor("out", out, dtype=torch.float32, shape=(QSTATS.size,), device=dev)
    expect_tensor("scratch", scratch, dtype=torch.float32, shape=(None,), device=dev)
    need = qstats_scratch_numel(b)
    if scratch.numel() < need:
        raise ValueError(f"scratch must have at least qstats_scratch_numel({b}) = {need} elements, "
                         f"got {scratch.numel()}")


def qstats(device_index: int, q: torch.Tensor, out: torch.Tensor, scratch: torch.Tensor) -> None:
    """Enqueue pass 1 (per-block partials into ``scratch``) and pass 2 (one block -> ``out``)."""
    rows, cols = q.shape
    if rows < 1:
        raise ValueError(f"q must have at least one row, got shape {list(q.shape)}")
    partials = qstats_num_blocks(rows)
    launch(
        SOURCE,
        "zs_qstats_partial",
        device_index=device_index,
        grid=partials,
        block=QSTATS_BLOCK,
        args=(ptr(q), i64(rows), i32(cols), ptr(scratch)),
    )
    launch(
        SOURCE,
        "zs_qstats_final",
        device_index=device_index,
        grid=FINAL_GRID,
        block=QSTATS_BLOCK,
        args=(ptr(scratch), i32(partials), i64(rows), i32(cols), ptr(out)),
    )
