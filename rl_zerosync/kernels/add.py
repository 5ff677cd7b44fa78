"""``add.cu``: check and launch of ``replay_add`` (twin: ``reference.replay_add``); one launch per rollout.

A ``[T, N, ...]`` rollout goes into the replay's packed rows as ``T * N`` n-step transitions (the
rule of ``learner/nstep.py``) with no intermediate tensors: one warp per written transition,
:data:`ROWS_PER_BLOCK` per block. The float32 tables of :func:`nstep_tables` hold the factors the
torch ops use, so the kernel, its twin and the torch path write the same bits.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch

from rl_zerosync.kernels.compile import CudaSource
from rl_zerosync.kernels.launch import NULL, i32, i64, launch, ptr
from rl_zerosync.kernels.validate import expect_rows, expect_tensor, tensor_device

ROWS_PER_BLOCK = 8
"""Transitions per block (one warp each)."""

SOURCE = CudaSource("add.cu", ("zs_replay_add",), defines={"ZS_ADD_ROWS_PER_BLOCK": ROWS_PER_BLOCK})

OFFSETS = ("obs_at", "next_obs_at", "actions_at", "rewards_at", "discounts_at", "terminateds_at")
"""The row layout's word offsets, the keyword arguments of ``replay_add``."""


def nstep_tables(gamma: float, n_step: int, device: torch.device) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(return_scales f32[n], discount_table f32[n + 1])`` on ``device``: ``gamma**j`` rounded to float32
    (as torch rounds a Python scalar in a float32 multiply) and ``torch.pow(gamma_f32, k)`` (torch's pow
    on that device, as the n-step discount ``gamma**k`` was computed per transition)."""
    scales = torch.tensor([float(gamma) ** j for j in range(n_step)], dtype=torch.float32, device=device)
    ks = torch.arange(n_step + 1, dtype=torch.float32, device=device)
    return scales, torch.pow(torch.full_like(ks, float(gamma)), ks)


def check_replay_add(
    obs: torch.Tensor,
    next_obs: torch.Tensor,
    actions: torch.Tensor,
    rewards: torch.Tensor,
    terminateds: torch.Tensor,
    truncateds: torch.Tensor,
    packed: torch.Tensor,
    return_scales: torch.Tensor,
    discount_table: torch.Tensor,
    priorities: Optional[torch.Tensor],
    max_priority: torch.Tensor,
    *,
    start: int,
    first_row: int,
    obs_at: int,
    next_obs_at: int,
    actions_at: int,
    rewards_at: int,
    discounts_at: int,
    terminateds_at: int,
) -> None:
    """Validate ``replay_add``: contiguous [T, N, ...] columns, packed i32[C, W], offsets inside a row."""
    dev = tensor_device("rewards", rewards)
    expect_tensor("rewards", rewards, dtype=torch.float32, shape=(None, None), device=dev)
    t_len, n_envs = rewards.shape
    if t_len < 1 or n_envs < 1:
        raise ValueError(f"rewards must have shape [T, N] with T, N >= 1, got {list(rewards.shape)}")
    expect_rows("rollout", t_len * n_envs)
    expect_tensor("obs", obs, dtype=torch.float32, shape=(t_len, n_envs, None), device=dev)
    d = obs.shape[2]
    expect_tensor("next_obs", next_obs, dtype=torch.float32, shape=(t_len, n_envs, d), device=dev)
    expect_tensor("actions", actions, dtype=torch.int64, shape=(t_len, n_envs), device=dev)
    for name, t in (("terminateds", terminateds), ("truncateds", truncateds)):
        expect_tensor(name, t, dtype=torch.bool, shape=(t_len, n_envs), device=dev)
    expect_tensor("packed", packed, dtype=torch.int32, shape=(None, None), device=dev)
    capacity, words = packed.shape
    expect_rows("packed", capacity)
    n = return_scales.shape[0] if isinstance(return_scales, torch.Tensor) and return_scales.dim() == 1 else 0
    if n < 1:
        raise ValueError("return_scales must be a f32[n_step] tensor with n_step >= 1 (nstep_tables)")
    expect_tensor("return_scales", return_scales, dtype=torch.float32, shape=(n,), device=dev)
    expect_tensor("discount_table", discount_table, dtype=torch.float32, shape=(n + 1,), device=dev)
    if priorities is not None:
        expect_tensor("priorities", priorities, dtype=torch.float64, shape=(capacity,), device=dev)
    expect_tensor("max_priority", max_priority, dtype=torch.float64, shape=(1,), device=dev)
    rows = t_len * n_envs
    for name, v, hi in (("start", start, capacity), ("first_row", first_row, rows)):
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < hi:
            raise ValueError(f"{name} must be an int in [0, {hi}), got {v!r}")
    if rows - first_row > capacity:
        raise ValueError(f"first_row must leave at most capacity = {capacity} rows to write, got "
                         f"{rows - first_row} (rows {rows}, first_row {first_row})")
    widths = {"obs_at": d, "next_obs_at": d, "actions_at": 2, "rewards_at": 1, "discounts_at": 1,
              "terminateds_at": 1}
    offsets = dict(zip(OFFSETS, (obs_at, next_obs_at, actions_at, rewards_at, discounts_at, terminateds_at)))
    for name, at in offsets.items():
        if isinstance(at, bool) or not isinstance(at, int) or not 0 <= at <= words - widths[name]:
            raise ValueError(f"{name} must be an int word offset in [0, {words - widths[name]}] "
                             f"(row of {words} words), got {at!r}")
    if actions_at % 2:
        raise ValueError(f"actions_at must be even (an 8-byte aligned int64), got {actions_at}")
    spans = sorted((at, at + widths[name], name) for name, at in offsets.items())
    for (a0, a1, an), (b0, _, bn) in zip(spans, spans[1:]):
        if b0 < a1:
            raise ValueError(f"{an} and {bn} overlap in the row (words {a0}..{a1 - 1} and {b0}..)")


def replay_add(
    device_index: int,
    obs: torch.Tensor,
    next_obs: torch.Tensor,
    actions: torch.Tensor,
    rewards: torch.Tensor,
    terminateds: torch.Tensor,
    truncateds: torch.Tensor,
    packed: torch.Tensor,
    return_scales: torch.Tensor,
    discount_table: torch.Tensor,
    priorities: Optional[torch.Tensor],
    max_priority: torch.Tensor,
    *,
    start: int,
    first_row: int,
    obs_at: int,
    next_obs_at: int,
    actions_at: int,
    rewards_at: int,
    discounts_at: int,
    terminateds_at: int,
) -> None:
    """Enqueue ``zs_replay_add`` (one warp per written transition)."""
    t_len, n_envs = rewards.shape
    capacity, words = packed.shape
    written = t_len * n_envs - first_row
    launch(
        SOURCE,
        "zs_replay_add",
        device_index=device_index,
        grid=max(1, -(-written // ROWS_PER_BLOCK)),
        block=32 * ROWS_PER_BLOCK,
        args=(ptr(obs), ptr(next_obs), ptr(actions), ptr(rewards), ptr(terminateds), ptr(truncateds),
              i64(t_len), i64(n_envs), i64(obs.shape[2]), ptr(packed), i64(capacity), i64(words),
              ptr(return_scales), ptr(discount_table), i32(return_scales.shape[0]),
              NULL if priorities is None else ptr(priorities), ptr(max_priority), i64(start), i64(first_row),
              i32(obs_at), i32(next_obs_at), i32(actions_at), i32(rewards_at), i32(discounts_at),
              i32(terminateds_at)),
    )
