"""``td_loss.cu``: declaration of ``td_loss`` (twin: ``reference.td_loss``); one launch, no host sync.

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

import torch

from rl_zerosync.kernels.compile import CudaSource
from rl_zerosync.kernels.declare import Bound, Kernel, Launch, Tensor, Value
from rl_zerosync.kernels.launch import f32, i32
from rl_zerosync.kernels.layouts import QSTATS, Layout
from rl_zerosync.kernels.validate import expect_rows_and_columns

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


def _check_sizes(b: Bound) -> None:
    need = td_loss_scratch_numel(b.B)
    if b.scratch.numel() < need:
        raise ValueError(f"scratch must have at least td_loss_scratch_numel({b.B}) = {need} elements, "
                         f"got {b.scratch.numel()}")
    if b.loss_type not in LOSS_TYPES:
        raise ValueError(f"loss_type must be one of {LOSS_TYPES}, got {b.loss_type!r}")


td_loss = Kernel("td_loss", SOURCE, (
    Tensor("q", torch.float32, ("B", "A"), rule=lambda b: expect_rows_and_columns("q", b.q)),
    Tensor("q_select", torch.float32, ("B", "A")),
    Tensor("q_target", torch.float32, ("B", "A")),
    Tensor("actions", torch.int64, ("B",), strided=True),
    Tensor("rewards", torch.float32, ("B",), strided=True),
    Tensor("discounts", torch.float32, ("B",), strided=True),
    Tensor("terminateds", torch.bool, ("B",), strided=True),
    Tensor("weights", torch.float32, ("B",), strided=True, optional=True),
    Tensor("dq", torch.float32, ("B", "A")),
    Tensor("loss", torch.float32, (1,)),
    Tensor("td_abs", torch.float32, ("B",), optional=True),
    Tensor("qstats_out", torch.float32, (QSTATS.size,)),
    Tensor("scratch", torch.float64, (None,)),
    Tensor("blocks_done", torch.int32, (1,)),
    Value("loss_type"),
), rule=_check_sizes, cuda=Launch(
    "zs_td_loss", lambda b: td_loss_num_blocks(b.B), TD_BLOCK,
    ("q", "q_select", "q_target", "actions", "rewards", "discounts", "terminateds", "weights", "B:i64", "A:i32",
     lambda b: i32(b.loss_type == "huber"), lambda b: f32(1.0 / b.B), "dq", "loss", "td_abs", "qstats_out",
     "scratch", "blocks_done"),
))
