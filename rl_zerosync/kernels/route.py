"""``route.cu``: check and launch of ``route`` (twin: ``reference.route``).

One thread per row (``grid=grid_for(rows), block=ELEMENTWISE_BLOCK``); the action layout (order
types, urgencies, exposures) is ``rl_zerosync.actions``.
"""
from __future__ import annotations

import torch

from rl_zerosync.kernels.compile import CudaSource
from rl_zerosync.kernels.launch import ELEMENTWISE_BLOCK, f32, grid_for, i64, launch, ptr
from rl_zerosync.kernels.validate import expect_finite, expect_rows, expect_tensor, tensor_device

SOURCE = CudaSource("route.cu", ("zs_route",))
WIDE = 1.5
"""Default ``wide``: spread ratio from which the spread counts as wide."""
HIGH_VOL = 1.5
"""Default ``high_vol``: volatility ratio from which volatility counts as high."""
LOW_VOL = 0.75
"""Default ``low_vol``: volatility ratio up to which volatility counts as low."""


def check_route(
    exposure: torch.Tensor,
    spread: torch.Tensor,
    median_spread: torch.Tensor,
    vol: torch.Tensor,
    median_vol: torch.Tensor,
    actions: torch.Tensor,
    *,
    wide: float = WIDE,
    high_vol: float = HIGH_VOL,
    low_vol: float = LOW_VOL,
) -> None:
    """Validate the buffers and thresholds of ``route``."""
    dev = tensor_device("exposure", exposure)
    expect_tensor("exposure", exposure, dtype=torch.int64, shape=(None,), device=dev)
    n = exposure.shape[0]
    expect_rows("exposure", n)
    for name, t in (("spread", spread), ("median_spread", median_spread), ("vol", vol),
                    ("median_vol", median_vol)):
        expect_tensor(name, t, dtype=torch.float32, shape=(n,), device=dev)
    expect_tensor("actions", actions, dtype=torch.int64, shape=(n,), device=dev)
    expect_finite("wide", wide)
    expect_finite("high_vol", high_vol)
    expect_finite("low_vol", low_vol)


def route(
    device_index: int,
    exposure: torch.Tensor,
    spread: torch.Tensor,
    median_spread: torch.Tensor,
    vol: torch.Tensor,
    median_vol: torch.Tensor,
    actions: torch.Tensor,
    *,
    wide: float = WIDE,
    high_vol: float = HIGH_VOL,
    low_vol: float = LOW_VOL,
) -> None:
    """Enqueue ``zs_route`` (one thread per row; nothing to do for zero rows)."""
    rows = exposure.shape[0]
    if rows == 0:
        return
    launch(
        SOURCE,
        "zs_route",
        device_index=device_index,
        grid=grid_for(rows),
        block=ELEMENTWISE_BLOCK,
        args=(ptr(exposure), ptr(spread), ptr(median_spread), ptr(vol), ptr(median_vol), i64(rows),
              f32(wide), f32(high_vol), f32(low_vol), ptr(actions)),
    )
