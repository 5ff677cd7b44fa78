"""``qstats.cu``: declaration of ``qstats`` (twin: ``reference.qstats``); two launches, no host sync.

Pass 1 runs ``qstats_num_blocks(rows)`` blocks of :data:`QSTATS_BLOCK` threads (one row per thread,
grid-stride); block ``b`` writes one :data:`QPART` record to ``scratch[QPART.size * b:]``. Pass 2
(one block) reduces them into the :data:`~rl_zerosync.kernels.layouts.QSTATS` output.
"""
from __future__ import annotations

import torch

from rl_zerosync.kernels.compile import CudaSource
from rl_zerosync.kernels.declare import Bound, Kernel, Launch, Tensor
from rl_zerosync.kernels.launch import i32
from rl_zerosync.kernels.layouts import QSTATS, Layout
from rl_zerosync.kernels.validate import expect_rows_and_columns

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


def _check_scratch(b: Bound) -> None:
    need = qstats_scratch_numel(b.B)
    if b.scratch.numel() < need:
        raise ValueError(f"scratch must have at least qstats_scratch_numel({b.B}) = {need} elements, "
                         f"got {b.scratch.numel()}")


def _partials(b: Bound) -> int:
    """Pass 1's grid; an unchecked launch may not get an empty ``q`` either."""
    if b.B < 1:
        raise ValueError(f"q must have at least one row, got shape {list(b.q.shape)}")
    return qstats_num_blocks(b.B)


qstats = Kernel("qstats", SOURCE, (
    Tensor("q", torch.float32, ("B", "A"), rule=lambda b: expect_rows_and_columns("q", b.q)),
    Tensor("out", torch.float32, (QSTATS.size,)),
    Tensor("scratch", torch.float32, (None,)),
), rule=_check_scratch, cuda=(
    Launch("zs_qstats_partial", _partials, QSTATS_BLOCK, ("q", "B:i64", "A:i32", "scratch")),
    Launch("zs_qstats_final", FINAL_GRID, QSTATS_BLOCK,
           ("scratch", lambda b: i32(qstats_num_blocks(b.B)), "B:i64", "A:i32", "out")),
))
