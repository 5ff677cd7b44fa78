"""Launch wrappers of ``select.cu`` (twins: ``reference.epsilon_greedy`` / ``branching_select``)."""
from __future__ import annotations

import torch

from rl_zerosync.kernels.launch import ELEMENTWISE_BLOCK, grid_for, i32, i64, launch, ptr, u32
from rl_zerosync.kernels.rng import seed_key


def epsilon_greedy(
    device_index: int, q: torch.Tensor, epsilon: torch.Tensor, step: torch.Tensor, actions: torch.Tensor, *,
    seed: int,
) -> None:
    """Enqueue ``zs_epsilon_greedy`` (one thread per row; nothing to do for zero rows)."""
    rows, cols = q.shape
    if rows == 0:
        return
    launch(
        "zs_epsilon_greedy",
        device_index=device_index,
        grid=grid_for(rows),
        block=ELEMENTWISE_BLOCK,
        args=(ptr(q), i64(rows), i32(cols), ptr(epsilon), ptr(step), u32(seed_key(seed)), ptr(actions)),
    )


def branching_select(
    device_index: int,
    q_exposure: torch.Tensor,
    q_order: torch.Tensor,
    q_urgency: torch.Tensor,
    epsilon: torch.Tensor,
    step: torch.Tensor,
    actions: torch.Tensor,
    *,
    seed: int,
) -> None:
    """Enqueue ``zs_branching_select`` (one thread per row; nothing to do for zero rows)."""
    rows = q_exposure.shape[0]
    if rows == 0:
        return
    launch(
        "zs_branching_select",
        device_index=device_index,
        grid=grid_for(rows),
        block=ELEMENTWISE_BLOCK,
        args=(ptr(q_exposure), ptr(q_order), ptr(q_urgency), i64(rows), ptr(epsilon), ptr(step),
              u32(seed_key(seed)), ptr(actions)),
    )
