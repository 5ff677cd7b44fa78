"""Launch wrapper of ``divergence.cu`` (twin: ``reference.divergence``)."""
from __future__ import annotations

import torch

from rl_zerosync.kernels.launch import f32, i32, launch, ptr

SCALAR_GRID = 1
SCALAR_BLOCK = 1


def divergence(
    device_index: int, qstats_out: torch.Tensor, counter: torch.Tensor, flag: torch.Tensor, *,
    threshold: float, patience: int,
) -> None:
    """Enqueue ``zs_divergence``."""
    launch(
        "zs_divergence",
        device_index=device_index,
        grid=SCALAR_GRID,
        block=SCALAR_BLOCK,
        args=(ptr(qstats_out), ptr(counter), ptr(flag), f32(threshold), i32(patience)),
    )
