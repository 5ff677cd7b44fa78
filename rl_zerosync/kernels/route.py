"""``route.cu``: declaration of ``route`` (twin: ``reference.route``).

One thread per row (``grid=grid_for(rows), block=ELEMENTWISE_BLOCK``; no launch for zero rows); the
action layout (order types, urgencies, exposures) is ``rl_zerosync.actions``.
"""
from __future__ import annotations

import torch

from rl_zerosync.kernels.compile import CudaSource
from rl_zerosync.kernels.declare import Bound, Kernel, Launch, Tensor, Value, per_row
from rl_zerosync.kernels.launch import ELEMENTWISE_BLOCK, f32
from rl_zerosync.kernels.validate import expect_finite, expect_rows

SOURCE = CudaSource("route.cu", ("zs_route",))
WIDE = 1.5
"""Default ``wide``: spread ratio from which the spread counts as wide."""
HIGH_VOL = 1.5
"""Default ``high_vol``: volatility ratio from which volatility counts as high."""
LOW_VOL = 0.75
"""Default ``low_vol``: volatility ratio up to which volatility counts as low."""


def _check_thresholds(b: Bound) -> None:
    expect_rows("exposure", b.N)
    for name in ("wide", "high_vol", "low_vol"):
        expect_finite(name, getattr(b, name))


route = Kernel("route", SOURCE, (
    Tensor("exposure", torch.int64, ("N",)),
    Tensor("spread", torch.float32, ("N",)),
    Tensor("median_spread", torch.float32, ("N",)),
    Tensor("vol", torch.float32, ("N",)),
    Tensor("median_vol", torch.float32, ("N",)),
    Tensor("actions", torch.int64, ("N",)),
    Value("wide", f32, default=WIDE),
    Value("high_vol", f32, default=HIGH_VOL),
    Value("low_vol", f32, default=LOW_VOL),
), rule=_check_thresholds, cuda=Launch(
    "zs_route", per_row("N"), ELEMENTWISE_BLOCK,
    ("exposure", "spread", "median_spread", "vol", "median_vol", "N:i64", "wide", "high_vol", "low_vol", "actions"),
))
