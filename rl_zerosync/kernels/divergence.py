"""``divergence.cu``: check and launch of ``divergence`` (twin: ``reference.divergence``).

Reads a :data:`~rl_zerosync.kernels.layouts.QSTATS` output; one thread updates the patience
counter (saturating at ``INT32_MAX``) and the sticky flag.
"""
from __future__ import annotations

import torch

from rl_zerosync.kernels.compile import CudaSource
from rl_zerosync.kernels.launch import SCALAR_BLOCK, SCALAR_GRID, f32, i32, launch, ptr
from rl_zerosync.kernels.layouts import INT32_MAX, QSTATS
from rl_zerosync.kernels.validate import expect_finite, expect_tensor, tensor_device

SOURCE = CudaSource("divergence.cu", ("zs_divergence",))


def check_divergence(
    qstats_out: torch.Tensor, counter: torch.Tensor, flag: torch.Tensor, *, threshold: float, patience: int
) -> None:
    """Validate the buffers and options of ``divergence``."""
    dev = tensor_device("qstats_out", qstats_out)
    expect_tensor("qstats_out", qstats_out, dtype=torch.float32, shape=(QSTATS.size,), device=dev)
    expect_tensor("counter", counter, dtype=torch.int32, shape=(1,), device=dev)
    expect_tensor("flag", flag, dtype=torch.int32, shape=(1,), device=dev)
    expect_finite("threshold", threshold, minimum=0.0)
    if isinstance(patience, bool) or not isinstance(patience, int) or not 1 <= patience <= INT32_MAX:
        raise ValueError(f"patience must be an int in [1, 2**31 - 1], got {patience!r}")


def divergence(
    device_index: int, qstats_out: torch.Tensor, counter: torch.Tensor, flag: torch.Tensor, *,
    threshold: float, patience: int,
) -> None:
    """Enqueue ``zs_divergence``."""
    launch(
        SOURCE,
        "zs_divergence",
        device_index=device_index,
        grid=SCALAR_GRID,
        block=SCALAR_BLOCK,
        args=(ptr(qstats_out), ptr(counter), ptr(flag), f32(threshold), i32(patience)),
    )
