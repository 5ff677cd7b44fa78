"""``route.cu``: declaration of ``route`` (twin: ``reference.route``).

One thread per row (``grid=grid_for(rows), block=ELEMENTWISE_BLOCK``; no launch for zero rows); the
action layout (order types, urgencies, exposures) is ``rl_zerosync.actions``.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Any, Mapping, Optional

import torch

from rl_zerosync.kernels.compile import CudaSource
from rl_zerosync.kernels.declare import Bound, Kernel, Launch, Tensor, Value, per_row
from rl_zerosync.kernels.launch import ELEMENTWISE_BLOCK, f32
from rl_zerosync.kernels.validate import expect_finite, expect_rows

SOURCE = CudaSource("route.cu", ("zs_route",))
ROUTING_DEFAULTS: Mapping[str, float] = MappingProxyType({"wide": 1.5, "high_vol": 1.5, "low_vol": 0.75})
"""The routing rule's thresholds, in ``zs_route``'s argument order, and their defaults (the one
declaration: the runner's ``runner`` keys, the twins' ``routing`` keys and the torch twin's arguments
are derived from it): ``wide``, the spread ratio (spread / median spread) from which the spread counts
as wide; ``high_vol``, the volatility ratio from which volatility counts as high; ``low_vol``, the
volatility ratio up to which volatility counts as low."""
ROUTING_THRESHOLDS = tuple(ROUTING_DEFAULTS)
"""The routing thresholds' names (``wide``, ``high_vol``, ``low_vol``)."""


def routing_thresholds(runner_cfg: Optional[Mapping[str, Any]]) -> dict[str, float]:
    """The routing thresholds a run's ``runner`` section sets, as floats (absent ones are left out: the
    defaults apply where they are used)."""
    return {k: float(v) for k, v in (runner_cfg or {}).items() if k in ROUTING_DEFAULTS}


def _check_thresholds(b: Bound) -> None:
    expect_rows("exposure", b.N)
    for name in ROUTING_THRESHOLDS:
        expect_finite(name, getattr(b, name))


route = Kernel("route", SOURCE, (
    Tensor("exposure", torch.int64, ("N",)),
    Tensor("spread", torch.float32, ("N",)),
    Tensor("median_spread", torch.float32, ("N",)),
    Tensor("vol", torch.float32, ("N",)),
    Tensor("median_vol", torch.float32, ("N",)),
    Tensor("actions", torch.int64, ("N",)),
    *(Value(name, f32, default=default) for name, default in ROUTING_DEFAULTS.items()),
), rule=_check_thresholds, cuda=Launch(
    "zs_route", per_row("N"), ELEMENTWISE_BLOCK,
    ("exposure", "spread", "median_spread", "vol", "median_vol", "N:i64", *ROUTING_THRESHOLDS, "actions"),
))
