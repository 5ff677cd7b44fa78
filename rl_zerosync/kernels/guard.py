"""``guard.cu``: checks and launches of ``guard_check``, ``guard_accumulate`` and ``guard_record``.

Twins: ``reference.guard_check`` / ``guard_accumulate`` / ``guard_record``. The buffers follow the
layouts of ``layouts.py`` (:data:`FLAGS`, :data:`ACCUM`, :data:`QSTATS`, :data:`QAGG`, records
``[CHECK.size, RECORD.size]``); one thread does the work (``grid=SCALAR_GRID, block=SCALAR_BLOCK``).
"""
from __future__ import annotations

from typing import Union

import torch

from rl_zerosync.kernels.compile import CudaSource
from rl_zerosync.kernels.launch import NULL, SCALAR_BLOCK, SCALAR_GRID, f32, launch, ptr
from rl_zerosync.kernels.layouts import ACCUM, CHECK, FLAGS, QAGG, QSTATS, RECORD
from rl_zerosync.kernels.validate import expect_finite, expect_tensor, tensor_device

SOURCE = CudaSource("guard.cu", ("zs_guard_check", "zs_guard_accumulate", "zs_guard_record"))


def check_guard_check(
    loss: torch.Tensor,
    grad_norm: torch.Tensor,
    warmup_done: Union[torch.Tensor, float],
    flags: torch.Tensor,
    clipped_loss: torch.Tensor,
    loss_scale: torch.Tensor,
    found_inf: torch.Tensor,
    *,
    loss_clip: float,
    collapse_threshold: float,
) -> None:
    """Validate the buffers and options of ``guard_check``."""
    dev = tensor_device("loss", loss)
    for name, t in (("loss", loss), ("grad_norm", grad_norm), ("clipped_loss", clipped_loss),
                    ("loss_scale", loss_scale), ("found_inf", found_inf)):
        expect_tensor(name, t, dtype=torch.float32, shape=(1,), device=dev)
    if isinstance(warmup_done, torch.Tensor):
        expect_tensor("warmup_done", warmup_done, dtype=torch.float32, shape=(1,), device=dev)
    else:
        expect_finite("warmup_done", warmup_done)
    expect_tensor("flags", flags, dtype=torch.int32, shape=(FLAGS.size,), device=dev)
    expect_finite("loss_clip", loss_clip, minimum=0.0, strict=True)
    expect_finite("collapse_threshold", collapse_threshold, minimum=0.0)


def guard_check(
    device_index: int,
    loss: torch.Tensor,
    grad_norm: torch.Tensor,
    warmup_done: Union[torch.Tensor, float],
    flags: torch.Tensor,
    clipped_loss: torch.Tensor,
    loss_scale: torch.Tensor,
    found_inf: torch.Tensor,
    *,
    loss_clip: float,
    collapse_threshold: float,
) -> None:
    """Enqueue ``zs_guard_check``; ``warmup_done`` is a device f32[1] or a host float."""
    if isinstance(warmup_done, torch.Tensor):
        warm_ptr, warm_value = ptr(warmup_done), f32(0.0)
    else:
        warm_ptr, warm_value = NULL, f32(warmup_done)
    launch(
        SOURCE,
        "zs_guard_check",
        device_index=device_index,
        grid=SCALAR_GRID,
        block=SCALAR_BLOCK,
        args=(ptr(loss), ptr(grad_norm), warm_ptr, warm_value, ptr(flags), ptr(clipped_loss),
              ptr(loss_scale), ptr(found_inf), f32(loss_clip), f32(collapse_threshold)),
    )


def check_guard_accumulate(
    clipped_loss: torch.Tensor, grad_norm: torch.Tensor, flags: torch.Tensor, accum: torch.Tensor
) -> None:
    """Validate the buffers of ``guard_accumulate``."""
    dev = tensor_device("clipped_loss", clipped_loss)
    expect_tensor("clipped_loss", clipped_loss, dtype=torch.float32, shape=(1,), device=dev)
    expect_tensor("grad_norm", grad_norm, dtype=torch.float32, shape=(1,), device=dev)
    expect_tensor("flags", flags, dtype=torch.int32, shape=(FLAGS.size,), device=dev)
    expect_tensor("accum", accum, dtype=torch.float64, shape=(ACCUM.size,), device=dev)


def guard_accumulate(
    device_index: int, clipped_loss: torch.Tensor, grad_norm: torch.Tensor, flags: torch.Tensor, accum: torch.Tensor
) -> None:
    """Enqueue ``zs_guard_accumulate``."""
    launch(
        SOURCE,
        "zs_guard_accumulate",
        device_index=device_index,
        grid=SCALAR_GRID,
        block=SCALAR_BLOCK,
        args=(ptr(clipped_loss), ptr(grad_norm), ptr(flags), ptr(accum)),
    )


def check_guard_record(
    clipped_loss: torch.Tensor,
    loss: torch.Tensor,
    grad_norm: torch.Tensor,
    flags: torch.Tensor,
    qstats_out: torch.Tensor,
    div_flag: torch.Tensor,
    accum: torch.Tensor,
    qagg: torch.Tensor,
    records: torch.Tensor,
    update_index: torch.Tensor,
) -> None:
    """Validate the buffers of ``guard_record``."""
    dev = tensor_device("clipped_loss", clipped_loss)
    for name, t in (("clipped_loss", clipped_loss), ("loss", loss), ("grad_norm", grad_norm)):
        expect_tensor(name, t, dtype=torch.float32, shape=(1,), device=dev)
    expect_tensor("flags", flags, dtype=torch.int32, shape=(FLAGS.size,), device=dev)
    expect_tensor("qstats_out", qstats_out, dtype=torch.float32, shape=(QSTATS.size,), device=dev)
    expect_tensor("div_flag", div_flag, dtype=torch.int32, shape=(1,), device=dev)
    expect_tensor("accum", accum, dtype=torch.float64, shape=(ACCUM.size,), device=dev)
    expect_tensor("qagg", qagg, dtype=torch.float64, shape=(QAGG.size,), device=dev)
    expect_tensor("records", records, dtype=torch.float64, shape=(CHECK.size, RECORD.size), device=dev)
    expect_tensor("update_index", update_index, dtype=torch.float64, shape=(1,), device=dev)


def guard_record(
    device_index: int,
    clipped_loss: torch.Tensor,
    loss: torch.Tensor,
    grad_norm: torch.Tensor,
    flags: torch.Tensor,
    qstats_out: torch.Tensor,
    div_flag: torch.Tensor,
    accum: torch.Tensor,
    qagg: torch.Tensor,
    records: torch.Tensor,
    update_index: torch.Tensor,
) -> None:
    """Enqueue ``zs_guard_record``."""
    launch(
        SOURCE,
        "zs_guard_record",
        device_index=device_index,
        grid=SCALAR_GRID,
        block=SCALAR_BLOCK,
        args=(ptr(clipped_loss), ptr(loss), ptr(grad_norm), ptr(flags), ptr(qstats_out), ptr(div_flag),
              ptr(accum), ptr(qagg), ptr(records), ptr(update_index)),
    )
