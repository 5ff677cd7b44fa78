"""Launch wrappers of ``guard.cu`` (twins: ``reference.guard_check`` / ``guard_accumulate`` / ``guard_record``)."""
from __future__ import annotations

from typing import Union

import torch

from rl_zerosync.kernels.launch import NULL, f32, launch, ptr

SCALAR_GRID = 1
SCALAR_BLOCK = 1


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
        "zs_guard_check",
        device_index=device_index,
        grid=SCALAR_GRID,
        block=SCALAR_BLOCK,
        args=(ptr(loss), ptr(grad_norm), warm_ptr, warm_value, ptr(flags), ptr(clipped_loss),
              ptr(loss_scale), ptr(found_inf), f32(loss_clip), f32(collapse_threshold)),
    )


def guard_accumulate(
    device_index: int, clipped_loss: torch.Tensor, grad_norm: torch.Tensor, flags: torch.Tensor, accum: torch.Tensor
) -> None:
    """Enqueue ``zs_guard_accumulate``."""
    launch(
        "zs_guard_accumulate",
        device_index=device_index,
        grid=SCALAR_GRID,
        block=SCALAR_BLOCK,
        args=(ptr(clipped_loss), ptr(grad_norm), ptr(flags), ptr(accum)),
    )



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
        "zs_guard_record",
        device_index=device_index,
        grid=SCALAR_GRID,
        block=SCALAR_BLOCK,
        args=(ptr(clipped_loss), ptr(loss), ptr(grad_norm), ptr(flags), ptr(qstats_out), ptr(div_flag),
              ptr(accum), ptr(qagg), ptr(records), ptr(update_index)),
    )
