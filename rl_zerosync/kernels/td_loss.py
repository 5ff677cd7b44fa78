"""``td_loss.cu``: check and launch of ``td_loss`` (twin: ``reference.td_loss``); one launch, no host sync.

The routed / flat TD loss of a batch (``learner/loss.py``: double-DQN or plain target, Huber or
squared error, optional importance weights), its gradient with respect to ``q`` written into
``dq`` (the caller runs ``q.backward(dq)``), ``|TD|`` per row and the ``qstats`` record of ``q``.
``td_loss_num_blocks(rows)`` blocks of :data:`TD_BLOCK` threads, one row per warp (grid-stride);
each block writes one :data:`TDPART` record into ``scratch`` and the block that finishes last
reduces them into ``loss`` and ``qstats_out`` and resets the ``blocks_done`` counter to 0.

``actions``, ``rewards``, ``discounts``, ``terminateds`` and ``weights`` may be strided 1-D views
(the columns of the replay's packed sample rows); the Q matrices, ``dq`` and ``td_abs`` are
contiguous.
"""
from __future__ import annotations

from typing import Optional

import torch

from rl_zerosync.kernels.compile import CudaSource
from rl_zerosync.kernels.launch import NULL, f32, i32, i64, launch, ptr
from rl_zerosync.kernels.layouts import QSTATS, Layout
from rl_zerosync.kernels.validate import expect_rows, expect_tensor, tensor_device

TD_BLOCK = 256
"""Threads per block: 8 warps, one row per warp (grid-stride over warps)."""
TD_ROWS_PER_BLOCK = TD_BLOCK // 32
"""Rows a block handles at once (one per warp)."""
TD_MAX_BLOCKS = 1024
"""Most blocks; the last block reduces one :data:`TDPART` record per block."""
TDPART = Layout("ZS_TDPART", ("loss", "min", "max", "sum_rowmax", "sum_all", "bad"))
"""One block's f64 partials: sum of weighted loss terms, then the Q-stats fold of its rows."""
LOSS_TYPES = ("huber", "mse")

SOURCE = CudaSource("td_loss.cu", ("zs_td_loss",), defines={"ZS_TD_BLOCK": TD_BLOCK, **TDPART.defines()})


def td_loss_num_blocks(num_rows: int) -> int:
    """Grid size for ``num_rows`` rows."""
    return max(1, min(TD_MAX_BLOCKS, -(-int(num_rows) // TD_ROWS_PER_BLOCK)))


def td_loss_scratch_numel(num_rows: int) -> int:
    """Length of the f64 scratch buffer that ``td_loss`` needs for ``num_rows`` rows."""
    if int(num_rows) < 1:
        raise ValueError(f"td_loss: num_rows must be >= 1, got {num_rows}")
    return TDPART.size * td_loss_num_blocks(num_rows)


def _expect_column(name: str, t: object, dtype: torch.dtype, rows: int, dev: torch.device) -> None:
    """A 1-D ``dtype`` tensor of ``rows`` elements on ``dev``, any positive stride."""
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype != dtype:
        raise ValueError(f"{name} must have dtype {dtype}, got {t.dtype}")
    if tuple(t.shape) != (rows,):
        raise ValueError(f"{name} must have shape [{rows}], got {list(t.shape)}")
    if t.device != dev:
        raise ValueError(f"{name} must be on device {dev}, got {t.device}")
    if rows > 1 and t.stride(0) < 1:
        raise ValueError(f"{name} must have a positive stride, got {t.stride(0)}")


def check_td_loss(
    q: torch.Tensor,
    q_select: torch.Tensor,
    q_target: torch.Tensor,
    actions: torch.Tensor,
    rewards: torch.Tensor,
    discounts: torch.Tensor,
    terminateds: torch.Tensor,
    weights: Optional[torch.Tensor],
    dq: torch.Tensor,
    loss: torch.Tensor,
    td_abs: Optional[torch.Tensor],
    qstats_out: torch.Tensor,
    scratch: torch.Tensor,
    blocks_done: torch.Tensor,
    *,
    loss_type: str,
) -> None:
    """Validate the buffers of ``td_loss`` (three f32[B, A] Q matrices with B, A >= 1)."""
    dev = tensor_device("q", q)
    expect_tensor("q", q, dtype=torch.float32, shape=(None, None), device=dev)
    b, a = q.shape
    if b < 1 or a < 1:
        raise ValueError(f"q must have at least one row and one column, got shape {list(q.shape)}")
    expect_rows("q", b)
    for name, t in (("q_select", q_select), ("q_target", q_target), ("dq", dq)):
        expect_tensor(name, t, dtype=torch.float32, shape=(b, a), device=dev)
    _expect_column("actions", actions, torch.int64, b, dev)
    _expect_column("rewards", rewards, torch.float32, b, dev)
    _expect_column("discounts", discounts, torch.float32, b, dev)
    _expect_column("terminateds", terminateds, torch.bool, b, dev)
    if weights is not None:
        _expect_column("weights", weights, torch.float32, b, dev)
    expect_tensor("loss", loss, dtype=torch.float32, shape=(1,), device=dev)
    if td_abs is not None:
        expect_tensor("td_abs", td_abs, dtype=torch.float32, shape=(b,), device=dev)
    expect_tensor("qstats_out", qstats_out, dtype=torch.float32, shape=(QSTATS.size,), device=dev)
    expect_tensor("scratch", scratch, dtype=torch.float64, shape=(None,), device=dev)
    need = td_loss_scratch_numel(b)
    if scratch.numel() < need:
        raise ValueError(f"scratch must have at least td_loss_scratch_numel({b}) = {need} elements, "
                         f"got {scratch.numel()}")
    expect_tensor("blocks_done", blocks_done, dtype=torch.int32, shape=(1,), device=dev)
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"loss_type must be one of {LOSS_TYPES}, got {loss_type!r}")


def _column(t: Optional[torch.Tensor]) -> tuple:
    """(pointer, element stride) of a 1-D column, (NULL, 0) for None."""
    if t is None:
        return NULL, i64(0)
    return ptr(t), i64(t.stride(0))


def td_loss(
    device_index: int,
    q: torch.Tensor,
    q_select: torch.Tensor,
    q_target: torch.Tensor,
    actions: torch.Tensor,
    rewards: torch.Tensor,
    discounts: torch.Tensor,
    terminateds: torch.Tensor,
    weights: Optional[torch.Tensor],
    dq: torch.Tensor,
    loss: torch.Tensor,
    td_abs: Optional[torch.Tensor],
    qstats_out: torch.Tensor,
    scratch: torch.Tensor,
    blocks_done: torch.Tensor,
    *,
    loss_type: str,
) -> None:
    """Enqueue ``zs_td_loss`` (``blocks_done`` must be 0, and is left 0)."""
    rows, cols = q.shape
    launch(
        SOURCE,
        "zs_td_loss",
        device_index=device_index,
        grid=td_loss_num_blocks(rows),
        block=TD_BLOCK,
        args=(ptr(q), ptr(q_select), ptr(q_target), *_column(actions), *_column(rewards), *_column(discounts),
              *_column(terminateds), *_column(weights), i64(rows), i32(cols), i32(loss_type == "huber"),
              f32(1.0 / rows), ptr(dq), ptr(loss), NULL if td_abs is None else ptr(td_abs), ptr(qstats_out),
              ptr(scratch), ptr(blocks_done)),
    )
