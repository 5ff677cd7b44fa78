"""``select.cu``: declarations of ``epsilon_greedy``, ``epsilon_greedy_members`` and ``branching_select``.

Twins: ``reference.epsilon_greedy`` / ``reference.epsilon_greedy_members`` /
``reference.branching_select``. One thread per row (``grid=grid_for(rows), block=ELEMENTWISE_BLOCK``;
no launch for zero rows); the branching head's Q widths are ``rl_zerosync.actions.BRANCH_SIZES``.
CUDA gets ``rng.seed_key(seed)``; ``epsilon_greedy_members`` takes its members' keys as a device
tensor (``rng.seed_keys(seeds)``, values in ``[0, 2**32)``; not read on the host, so not checked).
"""
from __future__ import annotations

import torch

from rl_zerosync.actions import BRANCH_SIZES
from rl_zerosync.kernels.compile import CudaSource
from rl_zerosync.kernels.declare import Bound, Kernel, Launch, Tensor, Value, per_row
from rl_zerosync.kernels.launch import ELEMENTWISE_BLOCK, i64, u32
from rl_zerosync.kernels.rng import seed_key
from rl_zerosync.kernels.validate import MAX_ROWS

SOURCE = CudaSource("select.cu", ("zs_epsilon_greedy", "zs_epsilon_greedy_members", "zs_branching_select"))


def _check_rows_and_seed(b: Bound) -> None:
    if b.N > MAX_ROWS:
        raise ValueError(f"at most {MAX_ROWS} rows are supported, got {b.N}")
    seed_key(b.seed)


def _check_epsilon_greedy(b: Bound) -> None:
    if b.A < 1:
        raise ValueError(f"q must have at least one action column, got shape {list(b.q.shape)}")
    _check_rows_and_seed(b)


def _check_epsilon_greedy_members(b: Bound) -> None:
    if b.P < 1:
        raise ValueError("epsilon must have one value per member and at least one member, got shape [0]")
    if b.N % b.P:
        raise ValueError(f"q must have a multiple of P rows, P = {b.P} members (the length of epsilon and "
                         f"seed_keys), got {b.N} rows")
    if b.A < 1:
        raise ValueError(f"q must have at least one action column, got shape {list(b.q.shape)}")
    if b.N > MAX_ROWS:
        raise ValueError(f"at most {MAX_ROWS} rows are supported, got {b.N}")


def _seed(seed: int):
    return u32(seed_key(seed))


epsilon_greedy = Kernel("epsilon_greedy", SOURCE, (
    Tensor("q", torch.float32, ("N", "A")),
    Tensor("epsilon", torch.float32, (1,)),
    Tensor("step", torch.int64, (1,)),
    Tensor("actions", torch.int64, ("N",)),
    Value("seed", _seed),
), rule=_check_epsilon_greedy, cuda=Launch(
    "zs_epsilon_greedy", per_row("N"), ELEMENTWISE_BLOCK, ("q", "N:i64", "A:i32", "epsilon", "step", "seed", "actions"),
))

epsilon_greedy_members = Kernel("epsilon_greedy_members", SOURCE, (
    Tensor("q", torch.float32, ("N", "A")),
    Tensor("epsilon", torch.float32, ("P",)),
    Tensor("step", torch.int64, (1,)),
    Tensor("seed_keys", torch.int64, ("P",)),
    Tensor("actions", torch.int64, ("N",)),
), rule=_check_epsilon_greedy_members, cuda=Launch(
    "zs_epsilon_greedy_members", per_row("N"), ELEMENTWISE_BLOCK,
    ("q", "N:i64", "A:i32", "epsilon", "step", "seed_keys", lambda b: i64(b.N // b.P), "actions"),
))
"""Epsilon-greedy over P members' rows at once: row ``i`` is row ``i % E`` of member ``i // E``
(``E = N / P``) and gets what ``epsilon_greedy`` gives member ``m``'s rows alone with ``epsilon[m]``
and the seed whose ``rng.seed_key`` is ``seed_keys[m]``."""

branching_select = Kernel("branching_select", SOURCE, (
    Tensor("q_exposure", torch.float32, ("N", BRANCH_SIZES[0])),
    Tensor("q_order", torch.float32, ("N", BRANCH_SIZES[1])),
    Tensor("q_urgency", torch.float32, ("N", BRANCH_SIZES[2])),
    Tensor("epsilon", torch.float32, (1,)),
    Tensor("step", torch.int64, (1,)),
    Tensor("actions", torch.int64, ("N",)),
    Value("seed", _seed),
), rule=_check_rows_and_seed, cuda=Launch(
    "zs_branching_select", per_row("N"), ELEMENTWISE_BLOCK,
    ("q_exposure", "q_order", "q_urgency", "N:i64", "epsilon", "step", "seed", "actions"),
))
