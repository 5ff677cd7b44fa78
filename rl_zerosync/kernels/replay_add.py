"""``replay_add.cu``: declaration of ``replay_add`` (twin: ``reference.replay_add``); one launch per rollout.

A ``[T, N, ...]`` rollout goes into the replay's packed rows as ``T * N`` n-step transitions (the
rule of ``learner/nstep.py``) with no intermediate tensors: one warp per written transition,
:data:`ROWS_PER_BLOCK` per block. The float32 tables of :func:`nstep_tables` hold the factors the
torch ops use, so the kernel, its twin and the torch path write the same bits.
"""
from __future__ import annotations

from typing import Tuple

import torch

from rl_zerosync.kernels.compile import CudaSource
from rl_zerosync.kernels.declare import Bound, Kernel, Launch, Tensor, Value
from rl_zerosync.kernels.launch import i32, i64
from rl_zerosync.kernels.validate import expect_rows

ROWS_PER_BLOCK = 8
"""Transitions per block (one warp each)."""

SOURCE = CudaSource("replay_add.cu", ("zs_replay_add",), defines={"ZS_ADD_ROWS_PER_BLOCK": ROWS_PER_BLOCK})

OFFSETS = ("obs_at", "next_obs_at", "actions_at", "rewards_at", "discounts_at", "terminateds_at")
"""The row layout's word offsets, the last keyword arguments of ``replay_add``."""


def nstep_tables(gamma: float, n_step: int, device: torch.device) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(return_scales f32[n], discount_table f32[n + 1])`` on ``device``: ``gamma**j`` rounded to float32
    (as torch rounds a Python scalar in a float32 multiply) and ``torch.pow(gamma_f32, k)`` (torch's pow
    on that device, as the n-step discount ``gamma**k`` was computed per transition)."""
    scales = torch.tensor([float(gamma) ** j for j in range(n_step)], dtype=torch.float32, device=device)
    ks = torch.arange(n_step + 1, dtype=torch.float32, device=device)
    return scales, torch.pow(torch.full_like(ks, float(gamma)), ks)


def _check_rollout(b: Bound) -> None:
    if b.T < 1 or b.N < 1:
        raise ValueError(f"rewards must have shape [T, N] with T, N >= 1, got {list(b.rewards.shape)}")
    expect_rows("rollout", b.T * b.N)


def _check_n_step(b: Bound) -> None:
    if b.n < 1:
        raise ValueError("return_scales must be a f32[n_step] tensor with n_step >= 1 (nstep_tables)")


def _check_placement(b: Bound) -> None:
    """Where the rows go and where the columns sit in a row."""
    capacity, words, rows = b.C, b.W, b.T * b.N
    for name, v, hi in (("start", b.start, capacity), ("first_row", b.first_row, rows)):
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < hi:
            raise ValueError(f"{name} must be an int in [0, {hi}), got {v!r}")
    if rows - b.first_row > capacity:
        raise ValueError(f"first_row must leave at most capacity = {capacity} rows to write, got "
                         f"{rows - b.first_row} (rows {rows}, first_row {b.first_row})")
    widths = {"obs_at": b.D, "next_obs_at": b.D, "actions_at": 2, "rewards_at": 1, "discounts_at": 1,
              "terminateds_at": 1}
    offsets = {name: getattr(b, name) for name in OFFSETS}
    for name, at in offsets.items():
        if isinstance(at, bool) or not isinstance(at, int) or not 0 <= at <= words - widths[name]:
            raise ValueError(f"{name} must be an int word offset in [0, {words - widths[name]}] "
                             f"(row of {words} words), got {at!r}")
    if b.actions_at % 2:
        raise ValueError(f"actions_at must be even (an 8-byte aligned int64), got {b.actions_at}")
    spans = sorted((at, at + widths[name], name) for name, at in offsets.items())
    for (a0, a1, an), (b0, _, bn) in zip(spans, spans[1:]):
        if b0 < a1:
            raise ValueError(f"{an} and {bn} overlap in the row (words {a0}..{a1 - 1} and {b0}..)")


replay_add = Kernel("replay_add", SOURCE, (
    Tensor("obs", torch.float32, ("T", "N", "D")),
    Tensor("next_obs", torch.float32, ("T", "N", "D")),
    Tensor("actions", torch.int64, ("T", "N")),
    Tensor("rewards", torch.float32, ("T", "N"), lead=True, rule=_check_rollout),
    Tensor("terminateds", torch.bool, ("T", "N")),
    Tensor("truncateds", torch.bool, ("T", "N")),
    Tensor("packed", torch.int32, ("C", "W"), rule=lambda b: expect_rows("packed", b.C)),
    Tensor("return_scales", torch.float32, ("n",), rule=_check_n_step),
    Tensor("discount_table", torch.float32, (lambda b: b.n + 1,)),
    Tensor("priorities", torch.float64, ("C",), optional=True),
    Tensor("max_priority", torch.float64, (1,)),
    Value("start", i64),
    Value("first_row", i64),
    *(Value(name, i32) for name in OFFSETS),
), rule=_check_placement, cuda=Launch(
    "zs_replay_add", lambda b: max(1, -(-(b.T * b.N - b.first_row) // ROWS_PER_BLOCK)), 32 * ROWS_PER_BLOCK,
    ("obs", "next_obs", "actions", "rewards", "terminateds", "truncateds", "T:i64", "N:i64", "D:i64", "packed",
     "C:i64", "W:i64", "return_scales", "discount_table", "n:i32", "priorities", "max_priority", "start",
     "first_row", *OFFSETS),
))
