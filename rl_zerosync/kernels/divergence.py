"""``divergence.cu``: declaration of ``divergence`` (twin: ``reference.divergence``).

Reads a :data:`~rl_zerosync.kernels.layouts.QSTATS` output; one thread updates the patience
counter (saturating at ``INT32_MAX``) and the sticky flag.
"""
from __future__ import annotations

import torch

from rl_zerosync.kernels.compile import CudaSource
from rl_zerosync.kernels.declare import Bound, Kernel, Launch, Tensor, Value
from rl_zerosync.kernels.launch import SCALAR_BLOCK, SCALAR_GRID, f32, i32
from rl_zerosync.kernels.layouts import INT32_MAX, QSTATS
from rl_zerosync.kernels.validate import expect_finite

SOURCE = CudaSource("divergence.cu", ("zs_divergence",))


def _check_options(b: Bound) -> None:
    expect_finite("threshold", b.threshold, minimum=0.0)
    if isinstance(b.patience, bool) or not isinstance(b.patience, int) or not 1 <= b.patience <= INT32_MAX:
        raise ValueError(f"patience must be an int in [1, 2**31 - 1], got {b.patience!r}")


divergence = Kernel("divergence", SOURCE, (
    Tensor("qstats_out", torch.float32, (QSTATS.size,)),
    Tensor("counter", torch.int32, (1,)),
    Tensor("flag", torch.int32, (1,)),
    Value("threshold", f32),
    Value("patience", i32),
), rule=_check_options, cuda=Launch("zs_divergence", SCALAR_GRID, SCALAR_BLOCK))
