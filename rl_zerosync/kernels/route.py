"""Launch wrapper of ``route.cu`` (twin: ``reference.route``)."""
from __future__ import annotations

import torch

from rl_zerosync.kernels.launch import ELEMENTWISE_BLOCK, f32, grid_for, i64, launch, ptr


def route(
    device_index: int,
    exposure: torch.Tensor,
    spread: torch.Tensor,
    median_spread: torch.Tensor,
    vol: torch.Tensor,
    median_vol: torch.Tensor,
    actions: torch.Tensor,
    *,
    wide: float = 1.5,
    high_vol: float = 1.5,
    low_vol: float = 0.75,
) -> None:
    """Enqueue ``zs_route`` (one thread per row; nothing to do for zero rows)."""
    rows = exposure.shape[0]
    if rows == 0:
        return
    launch(
        "zs_route",
        device_index=device_index,
        grid=grid_for(rows),
        block=ELEMENTWISE_BLOCK,
        args=(ptr(exposure), ptr(spread), ptr(median_spread), ptr(vol), ptr(median_vol), i64(rows),
              f32(wide), f32(high_vol), f32(low_vol), ptr(actions)),
    )
