"""Launch wrapper of ``qstats.cu`` (twin: ``reference.qstats``): two launches, no host sync."""
from __future__ import annotations

import torch

from rl_zerosync.kernels.launch import i32, i64, launch, ptr
from rl_zerosync.kernels.validate import QSTATS_BLOCK, qstats_num_blocks

FINAL_GRID = 1


def qstats(device_index: int, q: torch.Tensor, out: torch.Tensor, scratch: torch.Tensor) -> None:
    """Enqueue pass 1 (per-block partials into ``scratch``) and pass 2 (one block -> ``out``)."""
    rows, cols = q.shape
    if rows < 1:
        raise ValueError(f"q must have at least one row, got shape {list(q.shape)}")
    partials = qstats_num_blocks(rows)
    launch(
        "zs_qstats_partial",
        device_index=device_index,
        grid=partials,
        block=QSTATS_BLOCK,
        args=(ptr(q), i64(rows), i32(cols), ptr(scratch)),
    )
    launch(
        "zs_qstats_final",
        device_index=device_index,
        grid=FINAL_GRID,
        block=QSTATS_BLOCK,
        args=(ptr(scratch), i32(partials), i64(rows), i32(cols), ptr(out)),
    )
