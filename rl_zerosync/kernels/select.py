"""``select.cu``: checks and launches of ``epsilon_greedy`` and ``branching_select``.

Twins: ``reference.epsilon_greedy`` / ``reference.branching_select``. One thread per row
(``grid=grid_for(rows), block=ELEMENTWISE_BLOCK``); the branching head's Q widths are
``rl_zerosync.actions.BRANCH_SIZES``.
"""
from __future__ import annotations

import torch

from rl_zerosync.actions import BRANCH_SIZES
from rl_zerosync.kernels.compile import CudaSource
from rl_zerosync.kernels.launch import ELEMENTWISE_BLOCK, grid_for, i32, i64, launch, ptr, u32
from rl_zerosync.kernels.rng import seed_key
from rl_zerosync.kernels.validate import MAX_ROWS, expect_tensor, tensor_device

SOURCE = CudaSource("select.cu", ("zs_epsilon_greedy", "zs_branching_select"))


def _check_select_common(
    epsilon: torch.Tensor, step: torch.Tensor, actions: torch.Tensor, n: int, dev: torch.device, seed: int
) -> None:
    expect_tensor("epsilon", epsilon, dtype=torch.float32, shape=(1,), device=dev)
    expect_tensor("step", step, dtype=torch.int64, shape=(1,), device=dev)
    expect_tensor("actions", actions, dtype=torch.int64, shape=(n,), device=dev)
    if n > MAX_ROWS:
        raise ValueError(f"at most {MAX_ROWS} rows are supported, got {n}")
    seed_key(seed)


def check_epsilon_greedy(
    q: torch.Tensor, epsilon: torch.Tensor, step: torch.Tensor, actions: torch.Tensor, *, seed: int
) -> None:
    """Validate the buffers of ``epsilon_greedy`` (q f32[N, A], A >= 1, N >= 0)."""
    dev = tensor_device("q", q)
    expect_tensor("q", q, dtype=torch.float32, shape=(None, None), device=dev)
    if q.shape[1] < 1:
        raise ValueError(f"q must have at least one action column, got shape {list(q.shape)}")
    _check_select_common(epsilon, step, actions, q.shape[0], dev, seed)


def epsilon_greedy(
    device_index: int, q: torch.Tensor, epsilon: torch.Tensor, step: torch.Tensor, actions: torch.Tensor, *,
    seed: int,
) -> None:
    """Enqueue ``zs_epsilon_greedy`` (one thread per row; nothing to do for zero rows)."""
    rows, cols = q.shape
    if rows == 0:
        return
    launch(
        SOURCE,
        "zs_epsilon_greedy",
        device_index=device_index,
        grid=grid_for(rows),
        block=ELEMENTWISE_BLOCK,
        args=(ptr(q), i64(rows), i32(cols), ptr(epsilon), ptr(step), u32(seed_key(seed)), ptr(actions)),
    )


def check_branching_select(
    q_exposure: torch.Tensor,
    q_order: torch.Tensor,
    q_urgency: torch.Tensor,
    epsilon: torch.Tensor,
    step: torch.Tensor,
    actions: torch.Tensor,
    *,
    seed: int,
) -> None:
    """Validate the buffers of ``branching_select`` (f32[N, 5], [N, 3], [N, 3]: ``BRANCH_SIZES``)."""
    exposures, order_types, urgencies = BRANCH_SIZES
    dev = tensor_device("q_exposure", q_exposure)
    expect_tensor("q_exposure", q_exposure, dtype=torch.float32, shape=(None, exposures), device=dev)
    n = q_exposure.shape[0]
    expect_tensor("q_order", q_order, dtype=torch.float32, shape=(n, order_types), device=dev)
    expect_tensor("q_urgency", q_urgency, dtype=torch.float32, shape=(n, urgencies), device=dev)
    _check_select_common(epsilon, step, actions, n, dev, seed)


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
        SOURCE,
        "zs_branching_select",
        device_index=device_index,
        grid=grid_for(rows),
        block=ELEMENTWISE_BLOCK,
        args=(ptr(q_exposure), ptr(q_order), ptr(q_urgency), i64(rows), ptr(epsilon), ptr(step),
              u32(seed_key(seed)), ptr(actions)),
    )
